"""The command line under Ctrl-C, bad option values and bad paths, and on bundles whose host modules are weights only."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable.cli
from iotable import TableNetwork, load, precompute, save
from iotable.bundle.hosts import unavailable_hosts
from iotable.cli import main
from iotable.errors import BundleError, SynthError
from iotable.hdl import export
from iotable.nn import Quantize
from iotable.synth import cost

from .optional import require_program
from .test_cli import assert_clean_error, call, run_cli
from .test_hdl_export import D2, sparse
from .test_network import U2, mlp

# -- Ctrl-C -------------------------------------------------------------------------------------------------------

#: ``main`` with ``open_bundle`` (which every command calls once its options are checked) replaced by a function
#: that says it started and then waits, so that the test interrupts a command that is working.
_WAITING = """
import sys, time
import iotable.cli

def waiting(*args, **kwargs):
    print("working", flush=True)
    time.sleep(120)

iotable.cli.open_bundle = waiting
sys.exit(iotable.cli.main(sys.argv[1:]))
"""


def wait_for_line(process: subprocess.Popen[str], seconds: float) -> str:
    """The first line ``process`` prints on stdout, waiting at most ``seconds`` (the import of torch is slow)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    assert ready, "the command did not start in time"
    return process.stdout.readline()


def assert_interrupted(process: subprocess.Popen[str], command: str) -> None:
    """The process ends within the timeout with status 130, one ``interrupted`` line on stderr and no traceback."""
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err == f"iotable {command}: interrupted\n"


@pytest.mark.parametrize(
    "args",
    [
        ("info", "B"),
        ("check", "B"),
        ("dot", "B"),
        ("pla", "B", "OUT"),
        ("export", "verilog", "B", "OUT"),
        ("cost", "B", "--workers", "1"),
    ],
)
def test_ctrl_c_is_one_line_and_status_130(args: tuple[str, ...], tmp_path: Path) -> None:
    """SIGINT while a command works prints ``iotable COMMAND: interrupted`` alone and exits 130."""
    argv = [str(tmp_path / "bundle") if a == "B" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    process = subprocess.Popen(
        [sys.executable, "-c", _WAITING, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_for_line(process, 120) == "working\n"
        process.send_signal(signal.SIGINT)
        assert_interrupted(process, args[0])
    finally:
        process.kill()
        process.wait()
    assert not (tmp_path / "out").exists()


def test_ctrl_c_while_abc_maps(tmp_path: Path) -> None:
    """Ctrl-C in a terminal (SIGINT to the whole process group) while ABC maps in worker processes: one line, 130."""
    abc = shutil.which("berkeley-abc")
    if abc is None:
        require_program("berkeley-abc", package="berkeley-abc")
    assert abc is not None
    bundle = save(precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12)), tmp_path / "mlp")
    started = tmp_path / "started"
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "berkeley-abc"  # the real ABC, after a wait that leaves time to interrupt it
    fake.write_text(
        f'#!/bin/sh\ncase "$*" in *"-c version"*) exec {abc} "$@";; esac\ntouch {started}\nsleep 60\nexec {abc} "$@"\n'
    )
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}")
    process = subprocess.Popen(
        [sys.executable, "-m", "iotable", "cost", str(bundle), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert process.poll() is None and time.monotonic() < deadline, "ABC did not start"
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        assert_interrupted(process, "cost")
    finally:
        process.kill()
        process.wait()


# -- option values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two"])
def test_workers_must_be_positive(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--workers`` 0, negative or not an integer is a usage error (exit 2) in net.cost's words, before any work."""
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(tmp_path / "nowhere"), "--workers", value])
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == "" and "Traceback" not in out.err
    assert f"iotable cost: error: argument --workers: workers must be a positive integer, received {value!r}" in out.err


def test_cost_refuses_workers_in_the_same_words() -> None:
    """``cost(net, workers=0)`` refuses with the words the command line uses."""
    with pytest.raises(SynthError, match="workers must be a positive integer, received 0"):
        cost(precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12)), workers=0)


# -- bad paths ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(
        precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12)), tmp_path_factory.mktemp("b") / "b"
    )


def test_empty_output_paths_are_refused(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty DIRECTORY, -o or --cache is refused before any work, never written as the working directory."""
    monkeypatch.chdir(tmp_path)
    for args in (
        ("pla", str(bundle), ""),
        ("export", "verilog", str(bundle), ""),
        ("dot", str(bundle), "-o", ""),
        ("cost", str(bundle), "--cache", ""),
    ):
        assert_clean_error(call(capsys, *args), args[0], "the path is empty")
    assert list(tmp_path.iterdir()) == []


def test_nul_in_output_paths_is_refused(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A NUL in an output path is one clear error (it was an internal error for ``dot -o``)."""
    bad = str(tmp_path / "a\0b")
    for args in (
        ("dot", str(bundle), "-o", bad + ".dot"),
        ("pla", str(bundle), bad),
        ("export", "vhdl", str(bundle), bad),
        ("cost", str(bundle), "--cache", bad),
    ):
        assert_clean_error(call(capsys, *args), args[0], "holds a NUL character")
    assert list(tmp_path.iterdir()) == []


def test_bad_bundle_paths_and_values_are_one_line(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file or an empty directory as the bundle, an output below a file and bad option values: one line, exit 1."""
    file = tmp_path / "file.txt"
    file.write_text("not a bundle", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "out")
    cases = [
        (("info", str(file)), ("is not a directory", "bundle directory written by iotable.save")),
        (("check", str(empty)), ("manifest.json: missing", "not an iotable bundle")),
        (("check", str(file / "below")), ("does not exist",)),
        (("export", "verilog", str(bundle), str(file)), ("exists and is not a directory",)),
        (("pla", str(bundle), str(file / "below")), ("cannot write", "below")),
        (("dot", str(bundle), "-o", str(file / "g.dot")), ("does not exist; create it first",)),
        (("export", "verilog", str(bundle), out, "--vectors", "0"), ("vectors must be a positive number",)),
        (("export", "verilog", str(bundle), out, "--pipeline", "-1"), ("pipeline must be",)),
        (("export", "verilog", str(bundle), out, "--top", "a b"), ("'a b' is not a legal",)),
        (("cost", str(bundle), "--k", "1"), ("k (inputs per LUT) must be an integer from 3 to 12",)),
        (("cost", str(bundle), "--timeout", "nan"), ("timeout must be a positive number of seconds",)),
        (("cost", str(bundle), "--script", ""), ("script must be a non-empty string",)),
        (("cost", str(bundle), "--cache", str(file)), ("exists and is not a directory",)),
    ]
    for args, words in cases:
        assert_clean_error(call(capsys, *args), args[0], *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file.txt"]


def test_a_request_too_large_for_memory_is_one_line(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MemoryError (``--vectors 100000000000`` raised one) is one line saying what to ask less of."""

    def too_large(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 5.82 TiB for an array with shape (100000000000, 12)")

    monkeypatch.setattr(iotable.cli, "open_bundle", too_large)
    args = ("export", "verilog", str(bundle), str(tmp_path / "out"), "--vectors", "100000000000")
    assert_clean_error(call(capsys, *args), "export", "not enough memory", "5.82 TiB", "fewer --vectors")
    assert not (tmp_path / "out").exists()


def test_unparsable_option_values_are_usage_errors(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value of the wrong type or outside the choices is a usage error (exit 2) naming the option."""
    for args, option in (
        (("export", "verilog", str(bundle), "out", "--pipeline", "x"), "--pipeline"),
        (("export", "verilog", str(bundle), "out", "--style", "wide"), "--style"),
        (("cost", str(bundle), "--timeout", "soon"), "--timeout"),
        (("pla", str(bundle), "out", "--dont-cares", "some"), "--dont-cares"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(list(args))
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and f"argument {option}" in err and "Traceback" not in err


# -- host modules -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> tuple[TableNetwork, Path]:
    """A table layer with a float head kept in software (a host node), and its bundle."""
    model = nn.Sequential(OrderedDict(fc1=sparse(8, 6, 3, 2), q1=Quantize(2), head=nn.Linear(6, 3))).eval()
    net = precompute(model, input_domain=D2, host=["head"])
    return net, save(net, tmp_path_factory.mktemp("hosted") / "net")


def test_load_without_host_modules(hosted: tuple[TableNetwork, Path]) -> None:
    """Without its host modules a network loads; running a host node says which and how to pass it; given, it runs."""
    net, path = hosted
    loaded = load(path)
    assert unavailable_hosts(loaded.graph) == ["head"] and unavailable_hosts(net.graph) == []
    assert "host nodes (run with torch, not tabulated): head" in loaded.summary()
    x = torch.tensor(D2.values, dtype=torch.float32)[torch.randint(0, len(D2), (5, 8))]
    with pytest.raises(BundleError, match=r"host node 'head' has no module.*host_modules=\{'head': \.\.\.\}"):
        loaded.run(x)
    complete = load(path, host_modules={"head": nn.Linear(6, 3)})
    assert unavailable_hosts(complete.graph) == [] and torch.equal(complete.run(x), net.run(x))


def test_cli_exports_the_table_part_of_a_hosted_bundle(
    hosted: tuple[TableNetwork, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``iotable export`` of a bundle with a host head writes the design ``export`` writes from the live network
    (byte for byte) and says the host node stays in software; info and check work on it too."""
    net, path = hosted
    result = run_cli("export", "verilog", str(path), str(tmp_path / "cli"), "--vectors", "40")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "host nodes left to software: head (they read out_data, the codes of 'fc1')" in result.stdout
    assert "exported the table part: the bundle stores host module(s) head as weights only" in result.stdout
    design = export(net, tmp_path / "live", vectors=40)
    assert design.host == ("head",)
    written = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert written == sorted(p.name for p in (tmp_path / "live").iterdir()) and len(written) == len(design.files)
    for name in written:
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "live" / name).read_bytes(), name
    for command in ("info", "check"):
        result = call(capsys, command, str(path))
        assert result.returncode == 0 and result.stderr == "", result.stderr


def test_cli_costs_a_hosted_bundle(hosted: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """``iotable cost`` maps the tables of a bundle whose host modules are weights only."""
    require_program("berkeley-abc", package="berkeley-abc")
    _, path = hosted
    result = run_cli("cost", str(path), "--workers", "1")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "pinned flow" in result.stdout and "fc1" in result.stdout


def test_python_exports_and_simulates_a_bundle_loaded_without_its_host_modules(
    hosted: tuple[TableNetwork, Path], tmp_path: Path
) -> None:
    """From Python too: the hardware part's codes never run a host node, so no dummy head is needed."""
    require_program("iverilog", package="iverilog")
    net, path = hosted
    loaded = load(path)
    design = export(loaded, tmp_path / "loaded", vectors=40)
    x = torch.tensor(D2.values, dtype=torch.float32)[torch.randint(0, len(D2), (12, 8))]
    from iotable.hdl import simulate

    assert design.host == ("head",)
    assert torch.equal(simulate(design, x), design.reference(x))
    assert torch.equal(design.reference(x), export(net, tmp_path / "live", vectors=40).reference(x))
