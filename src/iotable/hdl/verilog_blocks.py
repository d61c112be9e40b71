"""The Verilog text of the combinational blocks besides table layers: pools (comparator trees), adder trees,
argmax trees and threshold chains, each a module ``x -> y`` (:mod:`.verilog` re-exports them).

Arithmetic is modular on unsigned vectors (:func:`~.emit.adder_tree`): every wire has exactly the bits of its
range, two's complement where it can be negative; an unsigned operand is zero-extended by Verilog's width rules
(an expression widened to its assignment's width), a signed one sign-extended by a concatenation (whose width is
its own), so the rules never change a value.
"""

from __future__ import annotations

from typing import Any

from . import emit
from .netlist import Adder, Argmax, Pool, Thresholds
from .verilog_tables import comment, constant, name, slice

__all__ = ["adder", "argmax", "module_text", "pool", "threshold"]


def module_text(module: str, xw: int, yw: int, body: list[str], *, clocked: bool = False) -> str:
    """A combinational module ``x -> y`` (``clocked``: with ports ``clk`` and ``en`` for the registers of the
    pipelined tables it instantiates)."""
    clock = ["    input  wire clk,", "    input  wire en,"] if clocked else []
    ports = [
        f"module {name(module)} (",
        *clock,
        f"    input  wire [{xw - 1}:0] x,",
        f"    output wire [{yw - 1}:0] y",
        ");",
    ]
    return "\n".join([*ports, *body, "endmodule", "", ""])


def _widths(block: Pool | Adder | Argmax | Thresholds) -> tuple[int, int]:
    return int(block.x_widths.sum()), int(block.y_widths.sum())


def pool(block: Pool) -> str:
    lines = []
    for k in range(len(block.maxima)):  # a comparator tree per output element
        w, comparators, result, target = emit.comparator_tree(slice, block, k)
        lines += [f"    wire [{w - 1}:0] {m} = ({a} > {b}) ? {a} : {b};" for m, a, b in comparators]
        lines.append(f"    assign {target} = {result};")
    head = comment(
        f"Pool module of node '{block.node}': each output code is the largest of the codes its window covers "
        "(codes ascend with values)."
    )
    return head + "\n" + module_text(block.name, *_widths(block), lines)


def _extended(term: emit.Term, width: int) -> str:
    """A term's value as ``width`` bits: a two's complement field sign-extended by a concatenation (whose width
    is its own), an unsigned one zero-extended by the expression's width, a shift as zeros below."""
    parts = [slice(term.source, term.high, term.low)]
    if term.signed and width > term.bits:
        parts.insert(0, f"{{{width - term.bits}{{{term.source}[{term.high}]}}}}")
    if term.shift:
        parts.append(f"{term.shift}'b{'0' * term.shift}")
    return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"


def _tree_lines(tree: emit.AdderTree, target: str) -> list[str]:
    """The wires of a tree's adders and the line that gives ``target`` the root and the constant."""
    lines = []
    for adding in tree.adders:
        w, operator = adding.sum_bits, "-" if adding.subtract else "+"
        total = f"{_extended(adding.a, w)} {operator} {_extended(adding.b, w)}"
        if adding.low is None:
            lines.append(f"    wire [{w - 1}:0] {adding.name} = {total};")
            continue
        lines.append(f"    wire [{w - 1}:0] {adding.name}_h = {total};")
        low = slice(adding.low.source, adding.low.high, adding.low.low)
        lines.append(f"    wire [{adding.bits - 1}:0] {adding.name} = {{{adding.name}_h, {low}}};")
    value = constant(tree.width, tree.constant)
    if tree.root is not None:
        root = _extended(tree.root, tree.width)
        if tree.negated:
            value = f"{value} - {root}"
        else:
            value = root + (f" + {value}" if tree.constant else "")
    return [*lines, f"{target} = {value};"]


def adder(block: Adder) -> str:
    lines = []
    for j in range(len(block.shared)):  # the sums outputs share, each once, before the trees that read them
        tree = emit.shared_tree(block, j)
        lines += _tree_lines(tree, f"    wire [{tree.width - 1}:0] {emit.shared_name(j)}")
    for k in range(len(block.terms)):  # an adder tree per output element
        tree = emit.adder_tree(block, k)
        lines += _tree_lines(tree, f"    assign {slice('y', *tree.target)}")
    what = "partial sum(s)" if block.level < block.levels - 1 else "output code(s)"
    head = comment(
        f"Adder trees of sum node '{block.node}' (level {block.level + 1} of {block.levels}): {len(block.terms)} "
        f"{what}, each a constant plus shifted codes and shared sums, added or subtracted, of exactly the bits "
        "each sum needs"
        + (f"; {len(block.shared)} sums of two shifted operands shared between them." if block.shared else ".")
    )
    return head + "\n" + module_text(block.name, *_widths(block), lines)


def _argmax_operand(operand: tuple[Any, Any], bits: int) -> tuple[str, str]:
    """A comparator's operand: a leaf (the code's bits, its index) or an earlier comparator's value and index."""
    first, second = operand
    if isinstance(first, tuple):
        return slice("x", *first), constant(bits, second)
    return str(first), str(second)


def argmax(block: Argmax) -> str:
    lines = []
    for k in range(len(block.groups)):  # a comparator tree per output element
        tree = emit.argmax_tree(block, k)
        vw, iw = tree.value_bits, tree.index_bits
        for value, index, a, b in tree.comparators:
            (av, ai), (bv, bi) = _argmax_operand(a, iw), _argmax_operand(b, iw)
            lines.append(f"    wire [{vw - 1}:0] {value} = ({bv} > {av}) ? {bv} : {av};")
            lines.append(f"    wire [{iw - 1}:0] {index} = ({bv} > {av}) ? {bi} : {ai};")
        lines.append(f"    assign {slice('y', *tree.target)} = {_argmax_operand(tree.root, iw)[1]};")
    head = comment(
        f"Argmax module of node '{block.node}': each output is the index of the largest code of its group, the "
        "first of equal ones."
    )
    return head + "\n" + module_text(block.name, *_widths(block), lines)


def threshold(block: Thresholds) -> str:
    lines = []
    for k in range(len(block.rows)):  # a chain of comparisons per output element
        (high, low), bits, pairs, base, target = emit.threshold_chain(block, k)
        width = target[0] - target[1] + 1
        field = slice("x", high, low)
        chain = "".join(f"({field} >= {constant(bits, t)}) ? {constant(width, c)} : " for t, c in pairs)
        lines.append(f"    assign {slice('y', *target)} = {chain}{constant(width, base)};")
    head = comment(
        f"Threshold module of node '{block.node}': each output code is the code after the last threshold its "
        "input code reaches (thresholds ascend)."
    )
    return head + "\n" + module_text(block.name, *_widths(block), lines)
