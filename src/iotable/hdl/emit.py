"""What the printers share and nothing language-specific: the :class:`Printer` interface both language modules
(:mod:`.verilog`, :mod:`.vhdl`) implement, and the language-neutral pieces of their text: runs of elements as
slices and constants, comparator trees, raster masks, pad pixels, handshake names. A printer calls these with
itself, so that every piece of syntax comes from the printer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .. import bits as bitfields
from ..table import IOTable
from .mapped import LutBody
from .netbench import BenchPlan
from .netlist import Block, Layer, Netlist, PadStage, Pool, RegisterStage, Stage, WindowStage
from .table import DontCares, TableLayout

__all__ = [
    "Printer",
    "comparator_tree",
    "counter_bits",
    "handshake",
    "instance_of",
    "local_parts",
    "mask",
    "pad_pixel",
    "part_text",
    "runs",
    "top_parts",
]


class Printer(Protocol):
    """A language: a module defining these functions (:mod:`.verilog`, :mod:`.vhdl`) is one. The first ones
    (names, comments, strings, slices, one table's module and bench) live in its table module
    (:mod:`.verilog_tables`, :mod:`.vhdl_tables`), the rest, a design's, in the language's module."""

    def suffix(self) -> str:
        """The source files' suffix (``.v``, ``.vhd``)."""
        ...

    def name(self, name: str) -> str:
        """An identifier, checked (:func:`~.names.verilog_name`, :func:`~.names.vhdl_name`)."""
        ...

    def comment(self, text: object) -> str:
        """One comment line holding ``text`` (escaped), without indentation or newline."""
        ...

    def string(self, text: object) -> str:
        """The body of a string literal holding ``text`` (escaped)."""
        ...

    def slice(self, signal: str, high: int, low: int) -> str: ...

    def constant(self, width: int, value: int) -> str: ...

    def concat(self, parts: list[str]) -> str: ...

    def table(self, table: IOTable, name: str, *, dont_cares: DontCares) -> str:
        """A table module as a ``case`` (or as blocks: :func:`~.table.in_blocks`)."""
        ...

    def mapped(self, body: LutBody, name: str) -> str:
        """A table module as its LUT netlist."""
        ...

    def table_bench(self, name: str, layout: TableLayout) -> str:
        """The exhaustive bench of table module ``name``, reading its vectors file (:mod:`.bench`)."""
        ...

    def bench(self, plan: BenchPlan) -> str:
        """The bench of a design's top (:mod:`.netbench`)."""
        ...

    def layer(self, netlist: Netlist, block: Layer) -> str: ...

    def pool(self, block: Pool) -> str: ...

    def pad(self, stage: PadStage) -> str: ...

    def window(self, stage: WindowStage) -> str: ...

    def register(self, stage: RegisterStage, width: int) -> str: ...

    def top(self, netlist: Netlist, header: Sequence[str]) -> str:
        """The top module of either style; ``header``: its comment lines' text (unescaped)."""
        ...


def runs(
    p: Printer, names: list[str], sig: np.ndarray, lsb: np.ndarray, width: np.ndarray, value: np.ndarray
) -> list[str]:
    """The HDL parts of a concatenation of elements listed **most significant first**: adjacent bit fields of
    one signal merge into one slice; ``sig == -1`` marks a constant of code ``value``."""
    if not len(sig):
        return []
    follows = np.zeros(len(sig), dtype=bool)
    follows[1:] = (sig[1:] == sig[:-1]) & (sig[1:] >= 0) & (lsb[:-1] == lsb[1:] + width[1:])
    starts = np.flatnonzero(~follows)
    ends = np.append(starts[1:], len(sig)) - 1
    parts = []
    for first, last in zip(starts.tolist(), ends.tolist()):  # one part per run of elements, not per table row
        if sig[first] < 0:
            parts.append(p.constant(int(width[first]), int(value[first])))
        else:
            parts.append(p.slice(names[int(sig[first])], int(lsb[first] + width[first] - 1), int(lsb[last])))
    return parts


def top_parts(p: Printer, netlist: Netlist, ids: np.ndarray) -> str:
    """A concatenation of top-level elements ``ids`` (element 0 lowest) as one HDL expression."""
    order = np.asarray(ids, dtype=np.int64)[::-1]
    names = [p.name(s.name) for s in netlist.signals]
    return p.concat(runs(p, names, netlist.sig[order], netlist.lsb[order], netlist.width[order], netlist.value[order]))


def local_parts(p: Printer, widths: np.ndarray, elements: list[int]) -> str:
    """A concatenation of port-``x`` elements (listed most significant first) as one expression."""
    lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    index = np.asarray(elements, dtype=np.int64)
    zero = np.zeros(len(index), np.int64)
    return p.concat(runs(p, ["x"], zero, lsb[index], widths[index], zero))


def comparator_tree(p: Printer, block: Pool, k: int) -> tuple[int, list[tuple[str, str, str]], str, str]:
    """Output element ``k`` of a pool: its width, the comparators ``(name, a, b)`` (``name`` is the larger of
    ``a`` and ``b``), the expression of the maximum and the slice of ``y`` it drives."""
    lsb = np.concatenate([[0], np.cumsum(block.x_widths)[:-1]]).astype(np.int64)
    ylsb = np.concatenate([[0], np.cumsum(block.y_widths)[:-1]]).astype(np.int64)
    w = int(block.y_widths[k])
    level = [p.slice("x", int(lsb[s] + w - 1), int(lsb[s])) for s in block.maxima[k]]
    comparators, depth = [], 0
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level) - 1, 2):
            name = f"m{k}_{depth}_{j // 2}"
            comparators.append((name, level[j], level[j + 1]))
            nxt.append(name)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return w, comparators, level[0], p.slice("y", int(ylsb[k] + w - 1), int(ylsb[k]))


def mask(flags: tuple[bool, ...]) -> str:
    """A binary constant's digits whose bit i is ``flags[i]``, most significant bit first."""
    return "".join("1" if f else "0" for f in reversed(flags))


def counter_bits(size: int) -> int:
    """Bits of a counter over ``size`` places."""
    return bitfields.field_width(size)


def pad_pixel(stage: PadStage) -> str:
    """The pad codes of a pixel as binary digits, the last channel first (channel 0 lowest)."""
    codes = np.array([stage.codes[::-1]], dtype=np.int64)
    return "".join(chr(48 + d) for d in bitfields.digits(codes, stage.widths[::-1])[0].tolist())


def handshake(k: int) -> tuple[str, str]:
    """The valid and ready signals of handshake ``k`` in the top."""
    return ("in_valid", "in_ready") if k == 0 else (f"h{k}_valid", f"h{k}_ready")


def instance_of(netlist: Netlist, module: str) -> str:
    """The instance name of a block or stage module in the top: its name without the top's prefix."""
    return module[len(netlist.top) + 1 :]


_PARTS: dict[type, Callable[[Printer, Netlist, Any], str]] = {
    Layer: lambda p, netlist, part: p.layer(netlist, part),
    Pool: lambda p, netlist, part: p.pool(part),
    PadStage: lambda p, netlist, part: p.pad(part),
    WindowStage: lambda p, netlist, part: p.window(part),
    RegisterStage: lambda p, netlist, part: p.register(part, netlist.signals[part.output].width),
}


def part_text(p: Printer, netlist: Netlist, part: Block | Stage) -> str:
    """The module of a block or a stage of ``netlist``, by the printer's template of its kind."""
    return _PARTS[type(part)](p, netlist, part)
