"""Open HDL tools as subprocesses: simulate a set of files (iverilog, ghdl, verilator), check it (yosys).

Every tool runs in a fresh temporary directory holding only the given files, in its own process group and
under a deadline (at which it and every process it started are ended), and only the last MiB of its output
is kept; a tool that is not on ``PATH`` raises :class:`SimulatorNotInstalledError` naming its
Debian package, a tool that refuses the design (or runs out of time) raises :class:`HDLToolError` with its
own output.
"""

from __future__ import annotations

import concurrent.futures
import enum
import os
import re
import secrets
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._util.executor import Submitter, collect, submitter
from .._util.files import commit, discard, temporary_beside
from .._util.process import run_in_group
from .._util.programs import find_program
from ..errors import HDLError, HDLToolError, OptionError, SimulatorNotInstalledError
from .language import Language
from .leaves import check_leaves as _leaves
from .leaves import stub as _stub
from .names import check_file_name
from .reports import check_netlist, read_report, stat_modules, whole_cells
from .results import NONCE_FILE, NONCE_PLUSARG, Record, read_record, results_file
from .table import Text

__all__ = ["CheckResult", "SimulationResult", "check_files", "simulate_files", "write_files"]

# Program -> the Debian package that provides it.
_PACKAGES = {
    "iverilog": "iverilog",
    "vvp": "iverilog",
    "ghdl": "ghdl",
    "verilator": "verilator",
    "make": "make",
    "g++": "g++",
    "yosys": "yosys",
}
_OUTPUT_TAIL = 4000


class Simulator(str, enum.Enum):
    """An open simulator :func:`simulate_files` can drive."""

    IVERILOG = "iverilog"
    GHDL = "ghdl"
    VERILATOR = "verilator"

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Simulator:
        if isinstance(value, Simulator):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown simulator {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    @property
    def language(self) -> Language:
        """The language the simulator reads."""
        return Language.VHDL if self is Simulator.GHDL else Language.VERILOG

    @property
    def programs(self) -> tuple[str, ...]:
        return {"iverilog": ("iverilog", "vvp"), "ghdl": ("ghdl",), "verilator": ("verilator", "make", "g++")}[
            self.value
        ]


@dataclass(frozen=True)
class SimulationResult:
    """What a simulation run printed, what its bench recorded, and how it ended.

    Attributes:
        simulator: the simulator that ran (``"iverilog"``, ``"ghdl"`` or ``"verilator"``).
        top: the top module or entity.
        returncode: the simulation's exit status (0: it finished normally).
        stdout: the last part (at most 1 MiB) of what it printed on standard output (a bench's
            ``N/N vectors match`` or mismatch line).
        stderr: the last part (at most 1 MiB) of what it printed on standard error (ghdl's assertion
            reports, verilator's abort).
        seconds: wall time of compiling and running.
        words: the output words a printing bench wrote to its results file, one a line (see
            :mod:`iotable.hdl.results`); empty for a checking bench.
        messages: the other lines of the results file (a mismatch, a timeout, the verdict), the first
            kilobytes.
        verdict: the bench's own verdict from its results file: true when it ends with ``pass E/E`` after
            every word it announced; ``None`` when the bench wrote no results file.
    """

    simulator: str
    top: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    words: str = ""
    messages: str = ""
    verdict: bool | None = None

    @property
    def passed(self) -> bool:
        """Whether the bench passed: exit status 0 and its results file's verdict ``pass E/E``.

        What a simulator prints proves nothing (any program on ``PATH`` named ``vvp`` can print ``4/4 vectors
        match``): a bench that writes no results file does not pass, whatever it prints. A hand-written bench
        writes its verdict as :mod:`iotable.hdl.results` describes.
        """
        return self.returncode == 0 and self.verdict is True


@dataclass(frozen=True)
class CheckResult:
    """A design that synthesized cleanly (for Verilog: no latch, nothing undriven, no combinational loop).

    Attributes:
        top: the top module or entity.
        language: ``"verilog"`` or ``"vhdl"``.
        cells: for Verilog, the design's generic cells, every module's times its instances (gates, muxes and
            flip-flops: a rough size, not an FPGA's LUT count; ``None`` for VHDL). The files checked together
            count what yosys's generic ``synth`` leaves; a module checked on its own (``separate``: a design's
            tables) counts its generic gates before ABC's optimization, a few percent from what ``synth`` leaves
            (on the digits MLP's 4,096-row tables, 6% fewer). A table's LUTs are :func:`iotable.synth.cost`'s,
            a device's :func:`~iotable.hdl.implement`'s.
        log: the tool's messages (and yosys's statistics).
        seconds: wall time of the check.
    """

    top: str
    language: str
    cells: int | None
    log: str
    seconds: float


def _check_files(files: Any, *, what: str) -> dict[str, str]:
    """The files' names checked and their texts as strings (a :class:`~.table.Text` or other chunks joined)."""
    checked = _check_lazy(files, what=what)
    return {name: b"".join(_chunks(text, name, what=what)).decode("utf-8") for name, text in checked.items()}


def _check_lazy(files: Any, *, what: str) -> dict[str, str | Text | Iterable[str]]:
    """The files' names and texts checked: a str, a :class:`~.table.Text` or another iterable of str chunks
    (whose chunks are checked as they are written)."""
    if not isinstance(files, Mapping) or not files:
        msg = f"{what}: expected a non-empty dict of file name -> text, received {type(files).__name__}"
        raise HDLError(msg)
    checked = {}
    for name, text in files.items():
        check_file_name(name, what=what)
        if not isinstance(text, (str, Iterable)) or isinstance(text, (bytes, bytearray, Mapping)):
            kind = type(text).__name__
            msg = f"{what}: the text of {name!r} must be a str or an iterable of str chunks, received {kind}"
            raise HDLError(msg)
        checked[name] = text
    return checked


def _chunks(text: str | Text | Iterable[str], name: str, *, what: str) -> Iterator[bytes]:
    """The UTF-8 bytes of a file's text, a chunk at a time."""
    parts = [text] if isinstance(text, str) else text.chunks() if isinstance(text, Text) else text
    for part in parts:
        if not isinstance(part, str):
            msg = f"{what}: the text of {name!r} must be made of str chunks, received a {type(part).__name__}"
            raise HDLError(msg)
        yield part.encode("utf-8")


def _sources(files: dict[str, str], language: Language, *, what: str) -> list[str]:
    wanted = [n for n in files if n.endswith(language.suffixes)]
    other = [
        n for n in files if n.endswith(tuple(s for lang in Language if lang is not language for s in lang.suffixes))
    ]
    if not wanted:
        kind = "/".join(language.suffixes)
        msg = f"{what}: no {language.name} source among {sorted(files)}; expected at least one {kind} file"
        raise HDLError(msg)
    if other:
        msg = f"{what}: {sorted(other)} are in the other language; give {language.name} sources only"
        raise HDLError(msg)
    return wanted


def _check_top(top: Any, files: dict[str, str], *, what: str) -> str:
    if not isinstance(top, str) or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top) is None:
        msg = f"{what}: top must be the name of a module or entity, received {top!r}"
        raise HDLError(msg)
    declared = re.compile(rf"^\s*(?:module|entity)\s+{re.escape(top)}\b", re.MULTILINE | re.IGNORECASE)
    if not any(declared.search(text) for text in files.values()):
        msg = f"{what}: no file among {sorted(files)} declares a module or entity {top!r}; check the top name"
        raise HDLError(msg)
    return top


def _check_timeout(timeout: Any, *, what: str) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        msg = f"{what}: timeout must be a positive number of seconds, received {timeout!r}"
        raise HDLError(msg)
    return float(timeout)


def _require(programs: tuple[str, ...], *, what: str) -> None:
    for program in programs:
        if find_program(program) is None:
            package = _PACKAGES[program]
            msg = (
                f"{what}: the program {program!r} is not installed (not on PATH); install the Debian package "
                f"{package!r} (apt-get install {package})"
            )
            raise SimulatorNotInstalledError(msg)


def _tail(text: str) -> str:
    return text if len(text) <= _OUTPUT_TAIL else "...\n" + text[-_OUTPUT_TAIL:]


def _run(command: list[str], cwd: Path, deadline: float, *, what: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in its own process group; past ``deadline`` kill the whole group (verilator's make and
    compilers included) and raise :class:`HDLToolError`."""
    left = deadline - time.monotonic()
    if left <= 0:
        msg = f"{what}: no time left for {command[0]}; raise timeout="
        raise HDLToolError(msg)
    done, late = run_in_group(command, cwd, left)
    if late:
        msg = (
            f"{what}: {' '.join(command)} did not finish within the timeout; raise timeout= "
            f"(output so far:\n{_tail(done.stdout + done.stderr)})"
        )
        raise HDLToolError(msg)
    return done


def _step(command: list[str], cwd: Path, deadline: float, *, what: str) -> subprocess.CompletedProcess[str]:
    """A compile or synthesis step: a non-zero exit is the tool refusing the design."""
    done = _run(command, cwd, deadline, what=what)
    if done.returncode != 0:
        msg = f"{what}: {' '.join(command)} failed (exit status {done.returncode}):\n{_tail(done.stdout + done.stderr)}"
        raise HDLToolError(msg)
    return done


def _write_all(files: dict[str, str], directory: Path) -> None:
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")


def simulate_files(
    files: Mapping[str, str], top: str, *, simulator: str = "iverilog", timeout: float = 300.0
) -> SimulationResult:
    """Compile and run a simulation of ``files`` (file name -> text) with top ``top``; return what it printed.

    The files are written to a fresh temporary directory, which is also where the simulation runs (a
    bench's vectors file is found there, and its results file ``<top>_results.txt`` is read from there:
    see :mod:`iotable.hdl.results`). A compile error raises :class:`HDLToolError` with the tool's output; a
    simulation that runs and fails (a bench's mismatch, whatever its exit status) returns a result whose
    :attr:`~SimulationResult.passed` is false. Only the last MiB of what the simulator prints is kept.

    - ``"iverilog"``: ``iverilog -o sim -s TOP *.v``, then ``vvp -n sim`` (Debian package ``iverilog``).
    - ``"ghdl"``: ``ghdl -i --std=08``, ``ghdl -m --std=08 TOP``, ``ghdl -r --std=08 TOP`` (package ``ghdl``);
      the analysis order is found by ghdl.
    - ``"verilator"``: ``verilator --binary --top-module TOP *.v``, then the executable (package
      ``verilator``, which also needs ``make`` and ``g++``).

    Args:
        files: source files (``.v``/``.sv`` or ``.vhd``/``.vhdl``) and data files, by plain file name.
        top: the top module (entity) to simulate.
        simulator: ``"iverilog"``, ``"ghdl"`` or ``"verilator"``.
        timeout: seconds for compiling and running together.

    Returns:
        A :class:`SimulationResult`.

    Raises:
        SimulatorNotInstalledError: the simulator is not on ``PATH`` (the message names the package).
        HDLToolError: the design does not compile, or the run exceeds ``timeout``.

    Example (needs iverilog)::

        files = {"xor2.v": table_verilog(t, "xor2"), **table_bench(t, "xor2", language="verilog")}
        simulate_files(files, "xor2_tb").stdout   # '4/4 vectors match\\n'
    """
    what = "simulate_files"
    files = _check_files(files, what=what)
    sim = Simulator.parse(simulator, what=what)
    sources = _sources(files, sim.language, what=what)
    top = _check_top(top, files, what=what)
    _check_no_results(files, top, what=what)
    deadline = time.monotonic() + _check_timeout(timeout, what=what)
    _require(sim.programs, what=what)
    what = f"simulate_files (top {top!r}, {sim.value})"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iotable-sim-") as tmp:
        work = Path(tmp)
        _write_all(files, work)
        nonce = secrets.token_hex(8)  # this run's: a verdict without it was not written by this run's bench
        (work / NONCE_FILE).write_text(nonce + "\n", encoding="ascii")
        plusarg = f"+{NONCE_PLUSARG}={nonce}"
        if sim is Simulator.IVERILOG:
            _step(["iverilog", "-o", "sim.vvp", "-s", top, *sources], work, deadline, what=what)
            done = _run(["vvp", "-n", "sim.vvp", plusarg], work, deadline, what=what)
        elif sim is Simulator.GHDL:
            _step(["ghdl", "-i", "--std=08", *sources], work, deadline, what=what)
            _step(["ghdl", "-m", "--std=08", top], work, deadline, what=what)
            done = _run(["ghdl", "-r", "--std=08", top], work, deadline, what=what)
        else:
            jobs = str(min(os.cpu_count() or 1, 8))
            command = ["verilator", "--binary", "-j", jobs, "-Wno-fatal", "--top-module", top, "-Mdir", "obj"]
            _step([*command, *sources], work, deadline, what=what)
            done = _run([str(work / "obj" / f"V{top}"), plusarg], work, deadline, what=what)
        _check_quiet(done, what=what)
        record = _record(work, top, nonce)
    return SimulationResult(
        simulator=sim.value,
        top=top,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        seconds=time.perf_counter() - start,
        words=record.words if record else "",
        messages=record.messages if record else "",
        verdict=record.passed if record else None,
    )


def _check_no_results(files: dict[str, str], top: str, *, what: str) -> None:
    """Refuse a given file the bench writes: a stale results file must not be read as this run's."""
    name = results_file(top).lower()
    clash = [n for n in files if n.lower() == name]
    if clash:
        msg = (
            f"{what}: {clash[0]!r} is the results file the bench {top!r} writes while it runs; "
            "leave it out of the files"
        )
        raise HDLError(msg)
    if NONCE_FILE in files:
        msg = f"{what}: {NONCE_FILE!r} is the file that hands the run its nonce (written for each run); leave it out"
        raise HDLError(msg)


def _record(work: Path, top: str, nonce: str) -> Record | None:
    """The record of the bench's results file, if it wrote one (VHDL names are case-insensitive, so is the
    file name it writes); its verdict passes only with this run's ``nonce``."""
    name = results_file(top).lower()
    found = [p for p in work.iterdir() if p.name.lower() == name and p.is_file()]
    return read_record(found[0], nonce=nonce) if found else None


# A simulator's own error lines (iverilog's ``ERROR: f.v:4: $readmemh: Unable to open ...``, verilator's
# ``%Error:``, ghdl's ``ghdl:error:`` or an ``(assertion error)``), and iverilog's warnings that a memory file
# is short or cannot be read: each printed while the run still exits 0.
_TOOL_ERROR = re.compile(
    r"^\s*ERROR\b.*$|^.*(?:\berror:|\((?:report|assertion) (?:error|failure)\)).*$|^\s*WARNING\b.*\$readmem.*$",
    re.MULTILINE | re.IGNORECASE,
)


def _check_quiet(done: subprocess.CompletedProcess[str], *, what: str) -> None:
    """Raise :class:`HDLToolError` when a run that exited 0 printed an error line or a memory-file warning:
    a table read from a missing ``$readmemh`` file holds unknowns, and the run is no result."""
    if done.returncode != 0:
        return  # a failing bench: its result says so
    found = _TOOL_ERROR.search(done.stdout) or _TOOL_ERROR.search(done.stderr)
    if found:
        msg = (
            f"{what}: the simulator exited 0 but reported {found.group(0).strip()!r}; a run that reports an "
            "error (a missing or short memory file, an unknown module) is not a result: give the simulation "
            f"every file it reads and fix what it reports (output:\n{_tail(done.stdout + done.stderr)})"
        )
        raise HDLToolError(msg)


_LATCHES = "t:$_DLATCH* t:$dlatch t:$adlatch t:$dlatchsr t:$_SR_* t:$sr"
_BATCH = 8  # modules per yosys run when they are checked on their own: few startups, work spread over cores
#: A module checked on its own is asserted clean twice: once elaborated (``proc``: a ``case`` table becomes
#: a ROM; a latch or a second driver is still as written, before any optimization hides it), then as generic
#: gates (its memories as logic, ``techmap``, each step followed by yosys's fast optimizations), where
#: ``check -assert`` sees every combinational path and ``scc`` any loop. No ABC and no full ``opt``: they take
#: three quarters of a generic ``synth`` of a 4,096-row table and add no verdict.
_GATES = ("memory", "opt -fast", "techmap", "opt -fast")
_LOOPS = "scc -all_cell_types -expect 0 * t:$*dff* %d t:$_*DFF* %d t:$ff %d t:$_FF_ %d"


def check_files(
    files: Mapping[str, str], top: str, *, timeout: float = 600.0, separate: Collection[str] = (), executor: Any = None
) -> CheckResult:
    """Synthesize ``files`` and raise with the tool's message unless they synthesize cleanly.

    Verilog: yosys ``read_verilog``, ``synth -top TOP``, ``check -assert`` (nothing undriven, no multiple
    drivers, no combinational loop) and an assertion that synthesis inferred no latch. VHDL: Debian's yosys
    has no ghdl plugin, so ghdl's own synthesis checks it (``ghdl --synth --std=08 --out=verilog TOP``:
    elaborates and refuses what does not synthesize; the netlist it prints must declare the top module, or a
    ``ghdl`` that only exits 0 would pass); the latch, undriven and loop assertions are yosys's, on Verilog.

    The files named in ``separate`` (Verilog, one module each: a design's table modules) are checked each
    once on its own, several yosys runs sharing the cores, and the rest of the design with those modules as
    black boxes: a module instantiated a thousand times is checked once. A module on its own is not put
    through a generic ``synth`` (ABC and the full optimizations take most of its time and decide nothing):
    ``check -assert`` and the latch assertion run on it once elaborated (``proc``, before any optimization
    could hide a latch or a second driver) and again as generic gates (``memory``, ``techmap``, yosys's fast
    optimizations), with ``scc`` asserting no combinational loop. ``cells`` counts the whole design either
    way: each module's cells (gates, for a module on its own) times its instances.

    Args:
        files: the design's sources by plain file name (no testbench: it does not synthesize).
        top: the top module (entity).
        timeout: seconds for the whole check.
        separate: names of files among ``files`` to check on their own (Verilog only).
        executor: where the modules of ``separate`` are checked, a batch a task: ``None`` (here, several yosys
            runs sharing the cores), a ``concurrent.futures.Executor`` or a ``dask.distributed.Client``; each
            task receives its modules' text and returns yosys's statistics (read bounded and checked here).

    Returns:
        A :class:`CheckResult`.

    Raises:
        SimulatorNotInstalledError: yosys (for Verilog) or ghdl (for VHDL) is not on ``PATH``: only the tool
            the language needs is asked for.
        HDLToolError: synthesis or a check failed (the message carries yosys's or ghdl's output).
        HDLError: a file of ``separate`` is not among ``files`` or does not declare exactly one module.

    Example (needs yosys)::

        check_files({"xor2.v": table_verilog(t, "xor2")}, "xor2").cells
    """
    what = "check_files"
    files = _check_files(files, what=what)
    pool = submitter(executor, what=what, error=HDLError)
    language = Language.VHDL if any(n.endswith(Language.VHDL.suffixes) for n in files) else Language.VERILOG
    sources = _sources(files, language, what=what)
    top = _check_top(top, files, what=what)
    leaves = _leaves(files, separate, top, language, what=what)
    deadline = time.monotonic() + _check_timeout(timeout, what=what)
    _require(("ghdl",) if language is Language.VHDL else ("yosys",), what=what)
    what = f"check_files (top {top!r})"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iotable-check-") as tmp:
        work = Path(tmp)
        _write_all(files, work)
        if language is Language.VHDL:
            _step(["ghdl", "-i", "--std=08", *sources], work, deadline, what=what)
            # the netlist proves synthesis ran (the top module is written last; only the output's tail is kept)
            done = _step(["ghdl", "--synth", "--std=08", "--out=verilog", top], work, deadline, what=what)
            check_netlist(done.stdout, top, what=what)
            return CheckResult(top, language.value, None, done.stderr, time.perf_counter() - start)
        counts = _check_leaves(leaves, work, deadline, what=what, pool=pool)
        wiring = [n for n in sources if n not in set(leaves.values())]
        script = [
            *(f"read_verilog -lib {_stub(files[name], name, work)}" for name in leaves.values()),
            f"read_verilog {' '.join(wiring)}",
            f"synth -top {top}",
            *_ASSERTIONS,
            "tee -q -o iotable_stat.json stat -json",
        ]
        log = _yosys(script, work, deadline, "iotable_check", what=what)
        modules = _stat(work / "iotable_stat.json", what=what)
    cells = whole_cells(modules, top, counts)
    return CheckResult(top, language.value, cells, log, time.perf_counter() - start)


_ASSERTIONS = ("check -assert", f"select -assert-none {_LATCHES}")


def _yosys(script: list[str], work: Path, deadline: float, name: str, *, what: str) -> str:
    """Run a yosys script; its log, or :class:`HDLToolError` (a latch's with the fix)."""
    (work / f"{name}.ys").write_text("\n".join(script) + "\n", encoding="utf-8")
    try:
        done = _step(["yosys", "-q", "-s", f"{name}.ys"], work, deadline, what=what)
    except HDLToolError as exc:
        if "SCCs but expected 0" in str(exc) or "found logic loop" in str(exc):
            msg = f"{exc}\nA combinational loop: a module's output feeds its own inputs with no register between"
            raise HDLToolError(msg) from None
        if "DLATCH" not in str(exc) and "$dlatch" not in str(exc):
            raise
        msg = (
            f"{exc}\nA latch: a combinational block leaves an output unassigned for some input; "
            "give its case a default (or assign the output before the case)"
        )
        raise HDLToolError(msg) from None
    return done.stdout + done.stderr


def _stat(path: Path, *, what: str) -> dict[str, dict[str, int]]:
    """The cell counts of yosys's ``stat -json`` file ``path``, read bounded and checked."""
    data = read_report(path, tool="yosys", expected="the design's statistics (stat -json)", what=what)
    return stat_modules(data.decode("utf-8", errors="replace"), what=what, file=path.name)


def _leaf_batch(files: dict[str, str], script: list[str], seconds: float, name: str, what: str) -> dict[str, bytes]:
    """A task: the yosys ``script`` of one batch of modules run within ``seconds`` in a fresh folder holding
    ``files``; the statistics file of each module, read bounded."""
    with tempfile.TemporaryDirectory(prefix="iotable-check-") as tmp:
        work = Path(tmp)
        _write_all(files, work)
        _yosys(script, work, time.monotonic() + seconds, name, what=what)
        expected = "the module's statistics (stat -json)"
        return {p.name: read_report(p, tool="yosys", expected=expected, what=what) for p in work.glob("iotable_stat_*")}


def _check_leaves(
    leaves: dict[str, str], work: Path, deadline: float, *, what: str, pool: Submitter | None = None
) -> dict[str, int]:
    """Each module of ``leaves`` elaborated to generic gates (:data:`_GATES`) and checked on its own (batches
    of yosys runs in parallel, here or each a task on ``pool``); its gate count."""
    modules = list(leaves)
    batches = [modules[i : i + _BATCH] for i in range(0, len(modules), _BATCH)]

    def run(index: int, batch: list[str]) -> None:
        script = []
        for module in batch:
            script += ["design -reset", f"read_verilog {leaves[module]}", f"hierarchy -top {module}", "proc"]
            script += [*_ASSERTIONS, *_GATES, *_ASSERTIONS, _LOOPS]
            script.append(f"tee -q -o iotable_stat_{module}.json stat -json")
        if pool is None:
            _yosys(script, work, deadline, f"iotable_check_{index}", what=what)
            return
        texts = {leaves[m]: (work / leaves[m]).read_text(encoding="utf-8") for m in batch}
        task = pool.submit(_leaf_batch, texts, script, deadline - time.monotonic(), f"iotable_check_{index}", what)
        found = collect([task], what=what, error=HDLToolError)[0]
        for module in batch:  # only the files this batch makes, under the names the check reads
            stat = f"iotable_stat_{module}.json"
            if isinstance(found, dict) and isinstance(found.get(stat), bytes):
                (work / stat).write_bytes(found[stat])

    # here, as many yosys runs as cores; on an executor, a thread per batch in flight, each waiting for its task
    workers = max(1, min(os.cpu_count() or 1, 8, len(batches)) if pool is None else min(64, len(batches)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as threads:
        futures = [threads.submit(run, i, batch) for i, batch in enumerate(batches)]
        try:
            for future in concurrent.futures.as_completed(futures):
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    counts = {}
    for module in modules:
        cells = whole_cells(_stat(work / f"iotable_stat_{module}.json", what=what), module, {})
        counts[module] = cells if cells is not None else 1  # no count: one cell, the black box it stood for
    return counts


def _stream(path: Path, chunks: Iterator[bytes]) -> None:
    """Write ``chunks`` to ``path`` atomically, as ``atomic_write`` writes bytes: a temporary file beside it,
    renamed over it once whole (removed if anything fails)."""
    file, name = temporary_beside(path)
    try:
        with file:
            for chunk in chunks:
                file.write(chunk)
            commit(file, name, path)
    except BaseException:
        discard(name)
        raise


def write_files(files: Mapping[str, str | Text | Iterable[str]], directory: str | os.PathLike[str]) -> list[Path]:
    """Write ``files`` (file name -> text) into an existing ``directory``, each atomically; return the paths.

    A text is a str or an iterable of str chunks (a table's :class:`~iotable.hdl.table.Text`, a generator),
    streamed to the file a chunk at a time, so that a large table is never held whole. All names and the
    texts' types are checked before the first byte is written; a chunk that is not a str raises
    :class:`HDLError` and leaves its file as it was.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     [p.name for p in write_files({"a.v": "module a; endmodule\\n"}, d)]
        ['a.v']
    """
    what = "write_files"
    checked = _check_lazy(files, what=what)
    target = Path(directory)
    if not target.is_dir():
        msg = f"{what}: {str(target)!r} is not an existing directory; create it first"
        raise HDLError(msg)
    paths = []
    for name, text in checked.items():
        _stream(target / name, _chunks(text, name, what=what))
        paths.append(target / name)
    return paths
