"""What yosys and nextpnr write, read as untrusted input: a tool's report is believed only once it is read
through a bounded read (a regular file, not a link, of at most :data:`MAX_REPORT_BYTES`) and every number in
it has the type and the range a real report gives.

- :func:`read_report` reads a tool's output file, or raises :class:`~iotable.errors.HDLToolError` naming the
  tool, the file and what was expected (a missing file, a link, an oversized one);
- :func:`stat_modules` parses yosys's ``stat -json``: each module's cell counts, non-negative integers of at
  most :data:`MAX_CELLS`;
- :func:`whole_cells` counts a module and everything below it from those;
- :func:`timing` parses nextpnr's ``--report`` JSON: Fmax finite, positive and below :data:`MAX_FMAX_MHZ`,
  delays finite and non-negative, utilization counts of the same bounds as cells;
- :func:`check_netlist` believes a ``ghdl --synth`` only when its Verilog netlist declares the top module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._util.trust import Untrusted, read_bounded
from ..errors import HDLToolError

__all__ = [
    "MAX_CELLS",
    "MAX_FMAX_MHZ",
    "MAX_REPORT_BYTES",
    "cell_counts",
    "check_netlist",
    "read_report",
    "stat_modules",
    "timing",
    "top_cells",
    "whole_cells",
]

#: The largest report read, in bytes (a yosys ``stat -json`` of a design of thousands of modules is a few MB).
MAX_REPORT_BYTES = 64 << 20
#: The largest cell count believed (the largest FPGAs hold a few million LUTs).
MAX_CELLS = 10**8
#: The highest Fmax believed, in MHz: no FPGA fabric clocks a register-to-register path at 5 GHz.
MAX_FMAX_MHZ = 5000.0
#: The longest delay believed, in ns (of one step and of a whole path).
MAX_DELAY_NS = 1e6
_STEPS = 200  # steps of a critical path kept


def read_report(path: Path, *, tool: str, expected: str, what: str) -> bytes:
    """The bytes of the file ``path`` a tool wrote in our own temporary folder; an error naming the tool, the
    file and ``expected`` when it is missing, not a regular file or larger than :data:`MAX_REPORT_BYTES`."""
    try:
        return read_bounded(path, limit=MAX_REPORT_BYTES, owned=False)
    except FileNotFoundError:
        msg = f"{what}: {tool} finished but wrote no {path.name} ({expected}); check the tool's version and output"
        raise HDLToolError(msg) from None
    except Untrusted as exc:
        msg = f"{what}: {tool}'s output {path.name} cannot be read as {expected}: {exc}"
        raise HDLToolError(msg) from None


def check_netlist(text: str, top: str, *, what: str) -> None:
    """Raise :class:`~iotable.errors.HDLToolError` unless ``text``, the end of what ``ghdl --synth
    --out=verilog`` printed (it writes the top module last), declares the module ``top`` and closes it: an exit
    status of 0 alone does not prove that synthesis ran."""
    # ghdl writes VHDL's case-insensitive names in lower case, an extended identifier escaped by a backslash
    declared = re.compile(rf"^module\s+\\?{re.escape(top.lower())}(?=[\s(;#])", re.MULTILINE)
    found = declared.search(text.lower())
    if found is not None and re.search(r"^\s*endmodule\b", text[found.end() :], re.MULTILINE):
        return
    received = "nothing" if not text.strip() else f"{len(text)} characters without it, ending {text[-120:]!r}"
    msg = (
        f"{what}: ghdl --synth --out=verilog exited 0, but its netlist (its standard output) is expected to "
        f"declare the top module {top!r} and received {received}; check that 'ghdl' on PATH is GHDL with "
        "synthesis (ghdl --synth) and that it runs"
    )
    raise HDLToolError(msg)


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_CELLS


def _bad(what: str, tool: str, file: str, expected: str, received: Any) -> HDLToolError:
    shown = json.dumps(received, default=str)[:200] if not isinstance(received, str) else received[:200]
    return HDLToolError(f"{what}: {tool}'s {file} is malformed: expected {expected}, received {shown}")


def stat_modules(text: str, *, what: str, file: str = "stat -json output") -> dict[str, dict[str, int]]:
    """Each module's cell counts by type from yosys's ``stat -json`` output; only its ``modules`` object is
    read, as yosys 0.23 may follow it with text that is not JSON. Raises :class:`HDLToolError` on anything
    else than an object of modules, each with an object of counts (integers from 0 to :data:`MAX_CELLS`)."""
    found = re.search(r'"modules"\s*:\s*', text)
    if found is None:
        raise _bad(what, "yosys", file, 'a JSON object with "modules"', text)
    try:
        modules, _ = json.JSONDecoder(parse_constant=_refuse).raw_decode(text, found.end())
    except (ValueError, RecursionError) as exc:
        raise _bad(what, "yosys", file, "JSON", str(exc)) from None
    if not isinstance(modules, dict):
        raise _bad(what, "yosys", file, '"modules" an object', modules)
    result = {}
    for name, module in modules.items():
        cells = module.get("num_cells_by_type", {}) if isinstance(module, dict) else None
        if not isinstance(cells, dict) or not all(_count(n) for n in cells.values()):
            expected = f"module {str(name)[:80]!r} with num_cells_by_type counts from 0 to {MAX_CELLS:,}"
            raise _bad(what, "yosys", file, expected, module)
        result[str(name).lstrip("\\")] = {str(k).lstrip("\\"): n for k, n in cells.items()}
    return result


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


def whole_cells(modules: Mapping[str, Mapping[str, int]], top: str, leaves: Mapping[str, int]) -> int | None:
    """The cells of module ``top`` and every module below it: an instance of a module counts that module's
    cells (a black box of ``leaves``, the count given), any other cell one; ``None`` if ``top`` is not there.
    (``stat -json -top`` would count the hierarchy itself, but yosys 0.23 prints its tree into the JSON.)"""
    totals: dict[str, int] = dict(leaves)

    def total(module: str, depth: int) -> int:
        if module not in totals:
            if module not in modules or depth > 200:  # a primitive cell
                return 1
            totals[module] = sum(n * total(kind, depth + 1) for kind, n in modules[module].items())
        return totals[module]

    return total(top, 0) if top in modules else None


def _delay(value: Any) -> float | None:
    """A step's delay in ns, or ``None`` if it is not a finite number from 0 to :data:`MAX_DELAY_NS`."""
    if type(value) not in (int, float) or not 0 <= value <= MAX_DELAY_NS:
        return None
    return float(value)


def _fmax(report: dict[str, Any], bad: Any) -> dict[str, float]:
    clocks = report.get("fmax", {})
    if not isinstance(clocks, dict):
        raise bad('"fmax" an object of clocks', clocks)
    fmax = {}
    for clock, entry in clocks.items():
        achieved: Any = entry.get("achieved") if isinstance(entry, dict) else None
        if type(achieved) not in (int, float) or not 0 < achieved < MAX_FMAX_MHZ:
            raise bad(f"clock {str(clock)[:80]!r}: an achieved Fmax above 0 and below {MAX_FMAX_MHZ:g} MHz", entry)
        fmax[str(clock)] = float(achieved)
    return fmax


def _path(path: Any, bad: Any) -> tuple[list[str], float]:
    """A critical path's steps as text and its total delay."""
    steps = path.get("path", []) if isinstance(path, dict) else None
    if not isinstance(steps, list):
        raise bad('a critical path an object with a "path" list', path)
    lines, total = [], 0.0
    for step in steps:
        delay = _delay(step.get("delay", 0.0)) if isinstance(step, dict) else None
        if delay is None:
            raise bad(f"a path step an object with a delay from 0 to {MAX_DELAY_NS:g} ns", step)
        ends = [step.get(end, {}) for end in ("from", "to")]
        names = [f"{e.get('cell', '?')}.{e.get('port', '?')}" if isinstance(e, dict) else "?.?" for e in ends]
        lines.append(f"{str(step.get('type', '?'))[:40]}  {delay:.3f} ns  {names[0][:200]} -> {names[1][:200]}")
        total += delay
    if total > MAX_DELAY_NS:
        raise bad(f"a critical path of at most {MAX_DELAY_NS:g} ns", total)
    return lines, total


def _edge(end: Any, clock: str) -> bool:
    return isinstance(end, str) and end.split(" ")[-1] == clock


def _utilization(report: dict[str, Any], bad: Any) -> list[list[Any]]:
    """``[resource, used, available]`` of each resource nextpnr reports."""
    used = report.get("utilization", {})
    if not isinstance(used, dict):
        raise bad('"utilization" an object', used)
    utilization = []
    for name, entry in used.items():
        counts = [entry.get(k, 0) if isinstance(entry, dict) else None for k in ("used", "available")]
        if not all(_count(n) for n in counts):
            raise bad(f"resource {str(name)[:80]!r}: used and available counts from 0 to {MAX_CELLS:,}", entry)
        utilization.append([str(name), *counts])
    return utilization


def timing(report: Any, *, what: str, file: str) -> dict[str, Any]:
    """Fmax, the critical path, the utilization and the longest path from or to an I/O pin (``io_path_ns``:
    nextpnr reports it as ``<async>``, in no clock's Fmax) from nextpnr's ``--report`` JSON, each checked."""

    def bad(expected: str, received: Any) -> HDLToolError:
        return _bad(what, "nextpnr", file, expected, received)

    if not isinstance(report, dict):
        raise bad("a JSON object", report)
    fmax = _fmax(report, bad)
    clock = min(fmax, key=lambda c: fmax[c]) if fmax else None
    paths = report.get("critical_paths", [])
    if not isinstance(paths, list):
        raise bad('"critical_paths" a list', paths)
    parsed = [(p, *_path(p, bad)) for p in paths]
    # a path's ends are clock edges ("posedge clk") or "<async>" (an I/O pin): the clock's own path first
    own = [x for x in parsed if clock is not None and _edge(x[0].get("from"), clock) and _edge(x[0].get("to"), clock)]
    chosen = (own or sorted(parsed, key=lambda x: -x[2]) or [({}, [], 0.0)])[0]
    steps, delay = chosen[1], chosen[2]
    # the paths from or to a pin, which nextpnr reports as "<async>" and leaves out of every clock's Fmax
    io = [total for path, _, total in parsed if "<async>" in (path.get("from"), path.get("to"))]
    return {
        "fmax_mhz": fmax[clock] if clock is not None else None,
        "clock": clock,
        "critical_path_ns": delay if steps else None,
        "critical_path": steps[:_STEPS],
        "utilization": _utilization(report, bad),
        "io_path_ns": max(io) if io else None,
    }


def top_cells(text: str, top: str, *, what: str, file: str) -> dict[str, int]:
    """The cells of the (flattened) top module by type, from yosys's ``stat -json`` in ``file``."""
    modules = stat_modules(text, what=what, file=file)
    if top not in modules:
        msg = f"{what}: yosys's {file} names no module {top!r} (expected the synthesized top):\n{text[:2000]}"
        raise HDLToolError(msg)
    return modules[top]


_KINDS = {
    "ice40": {"luts": r"SB_LUT4", "flip_flops": r"SB_DFF\w*", "carry": r"SB_CARRY",
              "block_ram": r"SB_RAM40_4K\w*|SB_SPRAM256KA", "lut_ram": r"$^", "muxes": r"$^"},
    "ecp5": {"luts": r"LUT4", "flip_flops": r"TRELLIS_FF", "carry": r"CCU2C", "block_ram": r"DP16KD|PDPW16KD",
             "lut_ram": r"TRELLIS_DPR16X4|DPR16X4", "muxes": r"PFUMX|L6MUX21"},
    "xilinx": {"luts": r"LUT[1-6]", "flip_flops": r"FD[RSCP]E\w*", "carry": r"CARRY[48]",
               "block_ram": r"RAMB\w+", "lut_ram": r"RAM(?!B)\w+", "muxes": r"MUXF[789]"},
}  # fmt: skip


def cell_counts(family: str, cells: Mapping[str, int]) -> dict[str, Any]:
    """A synthesized design's LUTs, flip-flops, carry, block RAM, LUT RAM and wide-LUT muxes from its cells by
    type (``family``'s cell names), with the LUTs' inputs and every cell type's count."""
    kinds = _KINDS[family]
    counts = {
        kind: sum(n for name, n in cells.items() if re.fullmatch(pattern, name)) for kind, pattern in kinds.items()
    }
    return {**counts, "lut_inputs": 6 if family == "xilinx" else 4, "cells": sorted(cells.items())}
