"""What the printers share and nothing language-specific: the :class:`Printer` interface both language modules
(:mod:`.verilog`, :mod:`.vhdl`) implement, and the language-neutral pieces of their text: runs of elements as
slices and constants, comparator trees, adder trees, argmax trees, threshold chains, raster masks, pad pixels,
handshake names. A printer calls these with
itself, so that every piece of syntax comes from the printer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError
from ..subexpressions import signed_bits
from ..table import IOTable
from .mapped import LutBody
from .netbench import BenchPlan
from .netlist import Adder, Argmax, Block, Layer, Netlist, PadStage, Pool, RegisterStage, Stage, Thresholds, WindowStage
from .table import DontCares, TableLayout

__all__ = [
    "AdderTree",
    "Adding",
    "ArgmaxTree",
    "Printer",
    "Term",
    "adder_tree",
    "argmax_tree",
    "comparator_tree",
    "counter_bits",
    "handshake",
    "instance_of",
    "local_parts",
    "mask",
    "pad_pixel",
    "part_text",
    "runs",
    "shared_name",
    "shared_tree",
    "threshold_chain",
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

    def table_bench(self, name: str, layout: TableLayout, latency: int = 0) -> str:
        """The exhaustive bench of table module ``name``, reading its vectors file (:mod:`.bench`)."""
        ...

    def bench(self, plan: BenchPlan) -> str:
        """The bench of a design's top (:mod:`.netbench`)."""
        ...

    def layer(self, netlist: Netlist, block: Layer) -> str: ...

    def pool(self, block: Pool) -> str: ...

    def adder(self, block: Adder) -> str: ...

    def argmax(self, block: Argmax) -> str: ...

    def threshold(self, block: Thresholds) -> str: ...

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


def comparator_tree(
    slicer: Callable[[str, int, int], str], block: Pool, k: int
) -> tuple[int, list[tuple[str, str, str]], str, str]:
    """Output element ``k`` of a pool: its width, the comparators ``(name, a, b)`` (``name`` is the larger of
    ``a`` and ``b``), the expression of the maximum and the slice of ``y`` it drives (``slicer``: the
    printer's ``slice``)."""
    lsb = _x_lsb(block)
    ylsb = np.concatenate([[0], np.cumsum(block.y_widths)[:-1]]).astype(np.int64)
    w = int(block.y_widths[k])
    level = [slicer("x", int(lsb[s] + w - 1), int(lsb[s])) for s in block.maxima[k]]
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
    return w, comparators, level[0], slicer("y", int(ylsb[k] + w - 1), int(ylsb[k]))


def _x_lsb(block: Pool | Adder | Argmax | Thresholds) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(block.x_widths)[:-1]]).astype(np.int64)


def _y_slice(block: Adder | Argmax | Thresholds, k: int) -> tuple[int, int]:
    """The bits of ``y`` that output element ``k`` drives: (high, low)."""
    low = int(np.sum(block.y_widths[:k]))
    return low + int(block.y_widths[k]) - 1, low


@dataclass(frozen=True)
class Term:
    """An operand of an adder: the bits ``source[high:low]`` (``x``, a shared sum's wire or an earlier adder's),
    a two's complement value where ``signed`` (else unsigned), times ``2**shift``."""

    source: str
    high: int
    low: int
    signed: bool = False
    shift: int = 0

    @property
    def field_bits(self) -> int:
        return self.high - self.low + 1

    @property
    def bits(self) -> int:
        """The bits of the value, shift included."""
        return self.field_bits + self.shift


@dataclass(frozen=True)
class Adding:
    """One adder: ``name`` is ``a + b`` (``a - b`` where ``subtract``), each operand extended to the adder's bits
    as its signedness says, modulo ``2**bits``; with ``low``, only the bits above ``low``'s are added (``a`` and
    ``b`` are the operands shifted down by them) and ``low``'s bits follow unchanged below the sum."""

    name: str
    a: Term
    b: Term
    subtract: bool
    bits: int
    low: Term | None = None

    @property
    def sum_bits(self) -> int:
        """The bits the adder itself computes."""
        return self.bits - (self.low.field_bits if self.low is not None else 0)


@dataclass(frozen=True)
class AdderTree:
    """Output element ``k`` of an :class:`~.netlist.Adder` (or its ``k``-th shared sum): its adders (each
    reading codes, shared sums and earlier adders), the root (``None``: no term), whether the root is subtracted
    from the constant rather than added to it, the constant (modulo ``2**width``) and the ``y`` bits it drives
    (a shared sum's: its wire's)."""

    adders: list[Adding]
    root: Term | None
    negated: bool
    constant: int
    width: int
    target: tuple[int, int]


def shared_name(j: int) -> str:
    """The wire of an adder block's ``j``-th shared sum."""
    return f"c{j}"


@dataclass(frozen=True)
class _Value:
    """An operand while a tree is built: its term, the sign it enters the sum with, its value's range and the
    adders on its longest path."""

    term: Term
    sign: int
    low: int
    high: int


def _leaf(block: Adder, element: int, weight: int, lsb: np.ndarray) -> tuple[_Value, int]:
    """Operand ``element`` of ``block`` times ``weight`` (a power of two or its negative), and its depth."""
    magnitude = abs(int(weight))
    shift = magnitude.bit_length() - 1
    if magnitude != 1 << shift:
        msg = f"{block.name}: weight {weight} of an adder tree is no power of two; share() gives signed digits only"
        raise HDLError(msg)
    count = len(block.x_widths)
    if element < count:
        bits, low = int(block.x_widths[element]), int(lsb[element])
        term, range_, depth = Term("x", low + bits - 1, low, False, shift), (0, (1 << bits) - 1), 0
    else:
        shared = block.shared[element - count]
        term = Term(shared_name(element - count), shared.width - 1, 0, shared.signed, shift)
        range_, depth = (shared.low, shared.high), shared.depth
    return _Value(term, 1 if weight > 0 else -1, range_[0] << shift, range_[1] << shift), depth


def _join(a: _Value, b: _Value, name: str, width: int) -> tuple[_Value, Adding]:
    """The adder of two operands: their sum where their signs agree, else the positive one minus the other; of
    exactly the bits of its range, at most ``width`` (the tree's result is wanted modulo ``2**width``). The
    zeros both operands' shifts put below are left out (the adder's value is shifted instead), and where one
    operand's shift leaves the other's low bits alone, those bits bypass the adder."""
    if a.sign == b.sign:
        first, second, subtract, sign = a, b, False, a.sign
        low, high = a.low + b.low, a.high + b.high
    else:
        first, second = (a, b) if a.sign > 0 else (b, a)
        subtract, sign = True, 1
        low, high = first.low - second.high, first.high - second.low
    shift = min(first.term.shift, second.term.shift)
    exact = signed_bits(low >> shift, high >> shift)
    bits = min(max(width - shift, 1), exact)
    one = replace(first.term, shift=first.term.shift - shift)
    two = replace(second.term, shift=second.term.shift - shift)
    result = _Value(Term(name, bits - 1, 0, low < 0 and bits == exact, shift), sign, low, high)
    # the operand of the lower shift (not a subtrahend) passes its low bits on when the other's shift is above them
    lower, upper = (one, two) if one.shift == 0 else (two, one)
    step = upper.shift
    if step and not (subtract and lower is two) and lower.field_bits > step and bits > step:
        kept = Term(lower.source, lower.high, lower.low + step, lower.signed)
        shifted = replace(upper, shift=0)
        operands = (kept, shifted) if lower is one else (shifted, kept)
        return result, Adding(name, *operands, subtract, bits, Term(lower.source, lower.low + step - 1, lower.low))
    return result, Adding(name, one, two, subtract, bits, None)


def _tree(
    block: Adder, terms: Sequence[int], weights: Sequence[int], width: int, prefix: str
) -> tuple[list[Adding], _Value | None]:
    """The adders of ``sum(weights[j] * op[terms[j]])`` modulo ``2**width`` and the root: operands of equal
    depth (adders from the codes) are added pairwise, the shallowest first, so a shared sum joins the tree
    where its depth makes it ready."""
    lsb = _x_lsb(block)
    levels: dict[int, list[_Value]] = {}
    for element, weight in zip(terms, weights):
        if weight:
            value, depth = _leaf(block, int(element), int(weight), lsb)
            levels.setdefault(depth, []).append(value)
    adders: list[Adding] = []
    while sum(len(v) for v in levels.values()) > 1:
        depth = min(levels)
        # operands of like shifts side by side: the pairs whose low bits bypass their adder
        level = sorted(levels.pop(depth), key=lambda v: (v.term.shift, (v.high - v.low).bit_length()))
        nxt: list[_Value] = []
        for j in range(0, len(level) - 1, 2):
            value, adder = _join(level[j], level[j + 1], f"{prefix}{depth}_{j // 2}", width)
            adders.append(adder)
            nxt.append(value)
        if len(level) % 2:
            nxt.append(level[-1])
        levels[depth + 1] = nxt + levels.get(depth + 1, [])
    rest = [value for level in levels.values() for value in level]
    return adders, (rest[0] if rest else None)


def adder_tree(block: Adder, k: int) -> AdderTree:
    """How output element ``k`` of ``block`` is computed: its terms (codes and shared sums, shifted) added
    pairwise, level by level, a negative one subtracted, each adder of exactly the bits of its range (two's
    complement where it can be negative), at most the output's (the result is wanted modulo ``2**width``, and
    the true sum is in ``0 .. 2**width - 1``, so bits above it cancel); then the constant."""
    width = int(block.y_widths[k])
    adders, root = _tree(block, block.terms[k], block.weights[k], width, f"s{k}_")
    constant = int(block.constants[k]) % (1 << width)
    term, negated = (None, False) if root is None else (root.term, root.sign < 0)
    return AdderTree(adders, term, negated, constant, width, _y_slice(block, k))


def shared_tree(block: Adder, j: int) -> AdderTree:
    """How the ``j``-th shared sum of ``block`` is computed (as an output, into its own wire)."""
    shared = block.shared[j]
    adders, root = _tree(block, shared.terms, shared.weights, shared.width, f"{shared_name(j)}_")
    term, negated = (None, False) if root is None else (root.term, root.sign < 0)
    return AdderTree(adders, term, negated, 0, shared.width, (shared.width - 1, 0))


@dataclass(frozen=True)
class ArgmaxTree:
    """Output element ``k`` of an :class:`~.netlist.Argmax`: its comparators ``(value, index, a, b)`` (``value``
    and ``index`` those of ``b`` where ``b``'s value is greater than ``a``'s, else ``a``'s: ``a`` holds the lower
    indices, so equal values keep the first), operands as ``(value slice, index)`` leaves or earlier names; the
    value and index bits, the root and the ``y`` bits it drives."""

    comparators: list[tuple[str, str, Any, Any]]
    value_bits: int
    index_bits: int
    root: Any
    target: tuple[int, int]


def argmax_tree(block: Argmax, k: int) -> ArgmaxTree:
    """How output element ``k`` of ``block`` is computed: a tree of comparators over its group, in index order."""
    lsb, group = _x_lsb(block), block.groups[k]
    value_bits = int(max((block.x_widths[e] for e in group), default=1))
    level: list[Any] = [((int(lsb[e] + block.x_widths[e] - 1), int(lsb[e])), j) for j, e in enumerate(group)]
    comparators, depth = [], 0
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level) - 1, 2):
            comparators.append((f"v{k}_{depth}_{j // 2}", f"i{k}_{depth}_{j // 2}", level[j], level[j + 1]))
            nxt.append((comparators[-1][0], comparators[-1][1]))
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return ArgmaxTree(comparators, value_bits, int(block.y_widths[k]), level[0], _y_slice(block, k))


def threshold_chain(
    block: Thresholds, k: int
) -> tuple[tuple[int, int], int, list[tuple[int, int]], int, tuple[int, int]]:
    """Output element ``k`` of ``block``: the ``x`` bits it compares, their number, the ``(threshold, code)``
    pairs from the last (highest) threshold down, the base code and the ``y`` bits it drives."""
    element, thresholds, codes, base = block.rows[k]
    lsb, bits = int(_x_lsb(block)[element]), int(block.x_widths[element])
    pairs = list(zip(thresholds, codes))[::-1]
    return (lsb + bits - 1, lsb), bits, [(int(t), int(c)) for t, c in pairs], int(base), _y_slice(block, k)


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
    Adder: lambda p, netlist, part: p.adder(part),
    Argmax: lambda p, netlist, part: p.argmax(part),
    Thresholds: lambda p, netlist, part: p.threshold(part),
    PadStage: lambda p, netlist, part: p.pad(part),
    WindowStage: lambda p, netlist, part: p.window(part),
    RegisterStage: lambda p, netlist, part: p.register(part, netlist.signals[part.output].width),
}


def part_text(p: Printer, netlist: Netlist, part: Block | Stage) -> str:
    """The module of a block or a stage of ``netlist``, by the printer's template of its kind."""
    return _PARTS[type(part)](p, netlist, part)
