"""The open tools bounded: output kept as a bounded tail, every descendant ended at a timeout, a bench's verdict
read from the results file it writes (never from its exit status alone), and a VHDL check that needs only ghdl."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
import torch

import iotable
from iotable import Domain
from iotable._util.process import run_in_group
from iotable.errors import HDLError, HDLToolError, SimulatorNotInstalledError
from iotable.hdl import check_files, export, simulate, simulate_files, table_vhdl
from iotable.hdl.results import read_record, results_file
from iotable.nn import Quantize
from tests.optional import require_program

D2 = Domain.uniform(2)
MIB = 1 << 20


# -- captured output: a bounded tail ---------------------------------------------------------------------------


def test_output_is_kept_as_a_bounded_tail(tmp_path: Path) -> None:
    """A tool printing 200 MB leaves only the last MiB of it in the result, and the reader's memory stays small."""
    script = (
        "import sys\n"
        "line = b'x' * 1023 + b'\\n'\n"
        "for _ in range(200 * 1024):\n"
        "    sys.stdout.buffer.write(line)\n"
        "sys.stdout.buffer.write(b'the end\\n')\n"
        "sys.stderr.write('a word on stderr\\n')\n"
    )
    tracemalloc.start()
    try:
        done, late = run_in_group([sys.executable, "-c", script], tmp_path, 120)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not late and done.returncode == 0
    header, body = done.stdout.split("\n", 1)
    assert header == f"[... {200 * MIB + 8 - MIB} earlier bytes not kept ...]"
    assert len(body) == MIB and body.endswith("x\nthe end\n")
    assert done.stderr == "a word on stderr\n"
    assert peak < 16 * MIB


def test_a_smaller_tail_can_be_asked_for(tmp_path: Path) -> None:
    """tail= bounds what is kept; output that fits is returned whole, unmarked."""
    done, _ = run_in_group(["sh", "-c", "seq 1 1000"], tmp_path, 30, tail=10)
    assert done.stdout.endswith("\n999\n1000\n") and "earlier bytes not kept" in done.stdout
    done, _ = run_in_group(["sh", "-c", "seq 1 3"], tmp_path, 30, tail=10)
    assert done.stdout == "1\n2\n3\n"


# -- every descendant ended --------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in {"Z", "X"}


def _ended(pid: int) -> bool:
    for _ in range(100):  # the kernel needs a moment to tear a killed process down
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


LEAVERS = {
    "setsid": "setsid sleep 60 & echo $! > {pid}",
    "double fork": "( setsid sh -c 'echo $$ > {pid}; exec sleep 60' & ) ; sleep 0.2",
}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="descendants are found through /proc (Linux)")
@pytest.mark.parametrize("leaver", sorted(LEAVERS))
def test_a_grandchild_that_leaves_the_group_is_ended_at_the_timeout(leaver: str, tmp_path: Path) -> None:
    """A grandchild that leaves the process group and holds the output pipe open is ended with the tool at
    its timeout, and the run does not wait for it."""
    pid_file = tmp_path / "pid"
    script = tmp_path / "tool.sh"
    script.write_text(f"#!/bin/sh\n{LEAVERS[leaver].format(pid=pid_file)}\necho started\nsleep 60\n")
    script.chmod(0o755)
    start = time.monotonic()
    done, late = run_in_group([str(script)], tmp_path, 2)
    assert time.monotonic() - start < 30  # a hang would last the grandchild's 60 s
    assert late and "started" in done.stdout
    assert _ended(int(pid_file.read_text()))


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="descendants are found through /proc (Linux)")
def test_a_grandchild_left_behind_by_a_finished_tool_is_ended(tmp_path: Path) -> None:
    """A tool that exits 0 leaving a grandchild (its own session) that holds the pipe: the run returns the
    tool's result, not late, and the grandchild is ended."""
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    done, late = run_in_group(["sh", "-c", f"setsid sleep 60 & echo $! > {pid_file}; echo done"], tmp_path, 30)
    assert time.monotonic() - start < 25
    assert not late and done.returncode == 0 and done.stdout == "done\n"
    assert _ended(int(pid_file.read_text()))


_TERMINATED = """
import os, signal, sys
from iotable._util.process import run_in_group
if sys.argv[2] == "own":  # a handler of the caller's own: the library leaves SIGTERM to it
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(3))
run_in_group(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 60"], ".", 120)
"""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="process states are read from /proc (Linux)")
@pytest.mark.parametrize("handler", ["default", "own"])
def test_a_caller_ended_by_sigterm_ends_its_running_tool(handler: str, tmp_path: Path) -> None:
    """SIGTERM to a Python running a tool (in its own session, out of the signal's reach) ends the tool too and
    then the Python by the default action; a caller with a SIGTERM handler of its own keeps it, and the tool
    outlives it (so the check can fail)."""
    pid_file = tmp_path / "pid"
    child = subprocess.Popen([sys.executable, "-c", _TERMINATED, str(pid_file), handler], cwd=tmp_path)
    try:
        for _ in range(400):
            if pid_file.is_file() and pid_file.read_text().strip():
                break
            time.sleep(0.05)
        tool = int(pid_file.read_text())
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == (-signal.SIGTERM if handler == "default" else 3)
        if handler == "default":
            assert _ended(tool)
        else:
            assert _alive(tool)
            os.kill(tool, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)


# -- the results file and the verdict --------------------------------------------------------------------------


def _record(tmp_path: Path, text: str) -> tuple[str, str, bool]:
    path = tmp_path / results_file("t_tb")
    path.write_text(text)
    record = read_record(path)
    return record.words, record.messages, record.passed


def test_a_record_passes_only_with_every_word_and_a_last_pass(tmp_path: Path) -> None:
    """pass E/E after exactly the announced words passes; a short count, a missing word, an extra word, a fail,
    a verdict that is not last or a missing expect line does not."""
    assert _record(tmp_path, "expect 2\n0a\nx1\npass 2/2\n") == ("0a\nx1\n", "pass 2/2\n", True)
    assert _record(tmp_path, "expect 0\npass 5/5\n")[2]
    assert not _record(tmp_path, "expect 0\npass 4/5\n")[2]
    assert not _record(tmp_path, "expect 2\n0a\npass 2/2\n")[2]
    assert _record(tmp_path, "expect 1\n0a\n0b\npass 1/1\n")[:1] == ("0a\n",)
    assert not _record(tmp_path, "expect 1\n0a\n0b\npass 1/1\n")[2]
    assert not _record(tmp_path, "expect 0\nmismatch at vector 1: ...\nfail 1/5\n")[2]
    assert not _record(tmp_path, "expect 0\npass 5/5\nmismatch at vector 4\n")[2]
    assert not _record(tmp_path, "0a\npass 1/1\n")[2]
    assert not _record(tmp_path, "")[2]


def test_a_record_is_read_with_bounded_memory(tmp_path: Path) -> None:
    """Words past the announced count and messages past 64 KiB are not kept."""
    path = tmp_path / results_file("t_tb")
    with path.open("w") as handle:
        handle.write("expect 3\n")
        handle.writelines("abcd\n" for _ in range(200_000))
        handle.writelines("no word here\n" for _ in range(20_000))
    record = read_record(path)
    assert record.words == "abcd\n" * 3 and len(record.messages) <= 64 * 1024 and not record.passed


def _bench(body: str) -> dict[str, str]:
    """A Verilog bench ``t_tb`` whose initial block is ``body`` (``f``, ``i``: integers it may use; ``nonce``:
    the run's nonce, after :data:`RESULTS`)."""
    return {
        "t_tb.v": "module t_tb;\n    integer f, i;\n    reg [8*64-1:0] nonce = 0;\n    initial begin\n"
        f"{textwrap.indent(body, ' ' * 8)}\n    end\nendmodule\n"
    }


RESULTS = f'f = $fopen("{results_file("t_tb")}", "w");\nif (!$value$plusargs("iotable_nonce=%s", nonce)) nonce = 0;\n'


@pytest.mark.parametrize(
    ("body", "passed"),
    [
        (RESULTS + '$fdisplay(f, "expect 0");\n$fdisplay(f, "pass 4/4 %0s", nonce);\n$fclose(f);\n$finish;', True),
        (RESULTS + '$fdisplay(f, "expect 0");\n$fdisplay(f, "mismatch at vector 2");\n$fdisplay(f, "fail 2/4");\n'
         '$fclose(f);\n$display("4/4 vectors match");\n$finish;', False),
        (RESULTS + '$fdisplay(f, "expect 0");\n$fdisplay(f, "pass 3/4 %0s", nonce);\n$fclose(f);\n$finish;', False),
        (RESULTS + '$fdisplay(f, "expect 2");\n$fdisplay(f, "%h", 8\'h3c);\n$fdisplay(f, "pass 1/1 %0s", nonce);\n$fclose(f);\n'
         "$finish;", False),
        ('$display("mismatch at vector 2: address 1 expected 0 got 1");\n$finish;', False),
        ('$display("3/4 vectors match");\n$finish;', False),
        ("$finish;", False),
        ('$display("4/4 vectors match");\n$finish;', False),
    ],
)  # fmt: skip
def test_passed_is_the_benchs_verdict_not_the_exit_status(body: str, passed: bool) -> None:
    """Every bench here exits 0: it passes only when its results file says so with the count it expected; a
    mismatch recorded or printed with exit status 0 fails, and so does a bench that only prints a pass line."""
    require_program("iverilog", package="iverilog")
    result = simulate_files(_bench(body), "t_tb", timeout=60)
    assert result.returncode == 0
    assert result.passed is passed, (result.stdout, result.messages)


def test_words_come_from_the_results_file_whatever_is_printed() -> None:
    """A bench that prints megabytes of noise loses no word: they come from its results file, whole, while
    stdout keeps only its last MiB."""
    require_program("iverilog", package="iverilog")
    body = (
        RESULTS + '$fdisplay(f, "expect 20000");\n'
        "for (i = 0; i < 20000; i = i + 1) begin\n"
        '    $display("noise noise noise noise noise noise noise noise noise noise noise noise %0d", i);\n'
        '    $fdisplay(f, "%h", i[15:0]);\n'
        "end\n"
        '$fdisplay(f, "pass 20000/20000 %0s", nonce);\n$fclose(f);\n$finish;'
    )
    result = simulate_files(_bench(body), "t_tb", timeout=120)
    assert result.passed
    assert result.words.split() == [f"{i:04x}" for i in range(20000)]
    assert len(result.stdout) < MIB + 100 and "earlier bytes not kept" in result.stdout


def test_a_results_file_among_the_inputs_is_refused() -> None:
    """A stale results file given with the sources would be read as the run's verdict: refused, named."""
    files = {**_bench("$finish;"), results_file("t_tb"): "expect 0\npass 1/1\n"}
    with pytest.raises(HDLError, match=r"'t_tb_results\.txt' is the results file the bench 't_tb' writes"):
        simulate_files(files, "t_tb")


def test_a_record_passes_only_with_the_runs_nonce(tmp_path: Path) -> None:
    """Given a nonce, a verdict passes only when it carries that nonce: none, another or a longer one fails."""
    path = tmp_path / results_file("t_tb")
    for text, passed in [
        ("expect 0\npass 5/5 0123456789abcdef\n", True),
        ("expect 0\npass 5/5\n", False),
        ("expect 0\npass 5/5 fedcba9876543210\n", False),
        ("expect 0\npass 5/5 0123456789abcdef00\n", False),
        ("expect 0\nfail 4/5 0123456789abcdef\n", False),
    ]:
        path.write_text(text)
        assert read_record(path, nonce="0123456789abcdef").passed is passed, text


@pytest.mark.parametrize("verdict", ["pass 4/4", "pass 4/4 0123456789abcdef"], ids=["no-nonce", "old-nonce"])
def test_a_fake_simulator_that_writes_a_pass_does_not_pass(
    verdict: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program named vvp on PATH that writes a well-formed results file itself (no nonce, or an old one) fails."""
    require_program("iverilog", package="iverilog")
    fake = tmp_path / "bin" / "vvp"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf 'expect 0\\n{verdict}\\n' > {results_file('t_tb')}\necho '4/4 vectors match'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    result = simulate_files(_bench("$finish;"), "t_tb", timeout=60)
    assert result.returncode == 0 and result.messages == f"{verdict}\n"
    assert not result.passed and result.verdict is False


@pytest.mark.parametrize("task", ["$readmemh", "$readmemb"])
def test_a_missing_memory_file_is_an_error_not_a_result(task: str) -> None:
    """iverilog exits 0 after a $readmemh/$readmemb of a missing file: simulate_files raises, naming the line."""
    require_program("iverilog", package="iverilog")
    body = (
        f'begin : load reg [7:0] m [0:3]; {task}("gone.hex", m); end\n'
        + RESULTS
        + '$fdisplay(f, "expect 0");\n$fdisplay(f, "pass 4/4 %0s", nonce);\n$fclose(f);\n$finish;'
    )
    with pytest.raises(HDLToolError, match=rf"exited 0 but reported 'ERROR: .*\{task}: Unable to open gone.hex"):
        simulate_files(_bench(body), "t_tb", timeout=60)
    good = _bench(body.replace('"gone.hex"', '"here.hex"'))
    assert simulate_files({**good, "here.hex": "00\n01\n10\n11\n"}, "t_tb", timeout=60).passed


def tiny_net() -> iotable.TableNetwork:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), Quantize(2, scale=0.5)).eval()
    return iotable.precompute(model, input_domain=D2)


@pytest.mark.parametrize(("language", "simulator"), [("verilog", "iverilog"), ("vhdl", "ghdl")])
def test_the_network_bench_records_its_verdict(language: str, simulator: str, tmp_path: Path) -> None:
    """The exported bench writes pass N/N to its results file; a tampered expected word makes it write the
    mismatch and fail N'/N; simulate reads the words of its printing bench from the file."""
    require_program(simulator, package=simulator)
    net = tiny_net()
    design = export(net, tmp_path / "d", top="tiny", vectors=12, language=language)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    result = simulate_files(files, "tiny_tb", simulator=simulator, timeout=120)
    assert result.passed and result.verdict is True and re.fullmatch(r"pass 12/12 [0-9a-f]{16}\n", result.messages)
    expected = files["tiny_expected.hex"].splitlines()
    expected[4] = "f" * len(expected[4])
    files["tiny_expected.hex"] = "\n".join(expected) + "\n"
    result = simulate_files(files, "tiny_tb", simulator=simulator, timeout=120)
    assert not result.passed and result.verdict is False
    assert result.messages.startswith("mismatch at vector 4: output element") and result.messages.endswith(
        "fail 4/12\n"
    )
    x = torch.tensor(D2.values, dtype=torch.float32)[torch.randint(0, 4, (40, 3))]
    assert torch.equal(simulate(design, x, simulator=simulator), design.reference(x))


# -- check needs only the tools of its language -------------------------------------------------------------------


def test_a_vhdl_check_needs_no_yosys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without yosys on PATH a VHDL design is still checked (by ghdl alone); a Verilog one asks for yosys."""
    require_program("ghdl", package="ghdl")
    found = iotable.hdl.tools.find_program
    monkeypatch.setattr("iotable.hdl.tools.find_program", lambda p: None if p == "yosys" else found(p))
    bit = Domain.uniform(1)
    table = iotable.IOTable.dense([[0], [1], [1], [0]], input_domains=[bit] * 2, output_domain=bit)
    result = check_files({"xor2.vhd": table_vhdl(table, "xor2")}, "xor2", timeout=120)
    assert result.language == "vhdl" and result.cells is None
    with pytest.raises(SimulatorNotInstalledError, match="'yosys' is not installed"):
        check_files({"xor2.v": "module xor2(input a, output b); assign b = a; endmodule\n"}, "xor2")


@pytest.mark.parametrize(
    ("printed", "received"),
    [("", "received nothing"), ("module other(input a);\nendmodule\n", "received 33 characters without it")],
    ids=["silent", "foreign-netlist"],
)
def test_a_fake_ghdl_that_exits_0_does_not_pass_a_vhdl_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, printed: str, received: str
) -> None:
    """A ghdl that exits 0 without printing a netlist of the top entity fails the check, naming ghdl's output."""
    fake = tmp_path / "bin" / "ghdl"
    fake.parent.mkdir()
    (tmp_path / "netlist.v").write_text(printed)
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'netlist.v'}'\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    bit = Domain.uniform(1)
    table = iotable.IOTable.dense([[0], [1], [1], [0]], input_domains=[bit] * 2, output_domain=bit)
    with pytest.raises(HDLToolError, match=rf"ghdl --synth --out=verilog exited 0, .*'xor2' and {received}"):
        check_files({"xor2.vhd": table_vhdl(table, "xor2")}, "xor2", timeout=60)


def test_ghdls_netlist_of_the_top_entity_passes_the_vhdl_check() -> None:
    """Real ghdl's netlist names the top entity (in lower case for a mixed-case name) and the check passes."""
    require_program("ghdl", package="ghdl")
    bit = Domain.uniform(1)
    table = iotable.IOTable.dense([[0], [1], [1], [0]], input_domains=[bit] * 2, output_domain=bit)
    result = check_files({"Xor2.vhd": table_vhdl(table, "Xor2")}, "Xor2", timeout=120)
    assert result.top == "Xor2" and "module" not in result.log  # the log is ghdl's messages, not the netlist
