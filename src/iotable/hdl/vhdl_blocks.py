"""The VHDL text of the combinational blocks besides table layers: pools (comparator trees), adder trees,
argmax trees and threshold chains, each an entity ``x -> y`` (:mod:`.vhdl` re-exports them), and the entity
frame every VHDL module shares.

Arithmetic is ``numeric_std`` ``unsigned`` throughout (:func:`~.emit.adder_tree`): each operand is resized to
its adder's bits (``resize`` of an unsigned zero-extends or drops high bits, which is the sum modulo the
adder's range; a two's complement wire is sign-extended through ``signed``), constants are binary literals of
their exact width (never an integer, so no 31-bit limit).
"""

from __future__ import annotations

from typing import Any

from . import emit
from .netlist import Adder, Argmax, Pool, Thresholds
from .vhdl_tables import comment, constant, name, slice

__all__ = ["adder", "argmax", "entity_text", "module_text", "pool", "threshold", "vector"]


def vector(width: int) -> str:
    return f"std_logic_vector({width - 1} downto 0)"


def entity_text(entity: str, ports: list[str], declarations: list[str], body: list[str]) -> list[str]:
    """The one header of every entity (the libraries, the ports), its architecture's declarations and body."""
    return [
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use ieee.numeric_std.all;",
        "",
        f"entity {name(entity)} is",
        "    port (",
        *ports,
        "    );",
        f"end entity {name(entity)};",
        "",
        f"architecture rtl of {name(entity)} is",
        *declarations,
        "begin",
        *body,
        "end architecture rtl;",
    ]


def module_text(
    module: str, xw: int, yw: int, declarations: list[str], body: list[str], *, clocked: bool = False
) -> str:
    """A combinational entity ``x -> y`` (``clocked``: with ports ``clk`` and ``en`` for the registers of the
    pipelined tables it instantiates)."""
    clock = ["        clk : in  std_logic;", "        en : in  std_logic;"] if clocked else []
    ports = [*clock, f"        x : in  {vector(xw)};", f"        y : out {vector(yw)}"]
    return "\n".join([*entity_text(module, ports, declarations, body), "", ""])


def _widths(block: Pool | Adder | Argmax | Thresholds) -> tuple[int, int]:
    return int(block.x_widths.sum()), int(block.y_widths.sum())


def pool(block: Pool) -> str:
    declarations, lines = [], []
    for k in range(len(block.maxima)):  # a comparator tree per output element
        w, comparators, result, target = emit.comparator_tree(slice, block, k)
        for m, a, b in comparators:
            declarations.append(f"    signal {m} : {vector(w)};")
            lines.append(f"    {m} <= {a} when unsigned({a}) > unsigned({b}) else {b};")
        lines.append(f"    {target} <= {result};")
    head = comment(
        f"Pool module of node '{block.node}': each output code is the largest of the codes its window covers "
        "(codes ascend with values)."
    )
    return head + "\n" + module_text(block.name, *_widths(block), declarations, lines)


def _unsigned(width: int, value: int) -> str:
    """An unsigned literal of ``width`` bits."""
    return f"unsigned'({constant(width, value)})"


def _extended(term: emit.Term, width: int) -> str:
    """A term's value as an unsigned of ``width`` bits: a two's complement field sign-extended (``resize`` of a
    ``signed``), an unsigned one zero-extended, either cut to its low bits (``resize`` of an ``unsigned``, the
    value modulo ``2**width``), then shifted."""
    field = slice(term.source, term.high, term.low)
    if term.signed and width > term.field_bits:
        value = f"unsigned(resize(signed({field}), {width}))"
    else:
        value = f"resize(unsigned({field}), {width})"
    return f"shift_left({value}, {term.shift})" if term.shift else value


def _tree_lines(tree: emit.AdderTree, target: str, declarations: list[str]) -> list[str]:
    """The signals of a tree's adders (declared in ``declarations``) and the line that gives ``target`` (a
    ``std_logic_vector``) the root and the constant."""
    lines = []
    for adding in tree.adders:
        w, operator, name = adding.sum_bits, "-" if adding.subtract else "+", adding.name
        total = f"{_extended(adding.a, w)} {operator} {_extended(adding.b, w)}"
        declarations.append(f"    signal {name} : unsigned({adding.bits - 1} downto 0);")
        if adding.low is None:
            lines.append(f"    {name} <= {total};")
            continue
        declarations.append(f"    signal {name}_h : unsigned({w - 1} downto 0);")
        low = slice(adding.low.source, adding.low.high, adding.low.low)
        lines += [f"    {name}_h <= {total};", f"    {name} <= {name}_h & unsigned({low});"]
    if tree.root is None:
        return [*lines, f"    {target} <= {constant(tree.width, tree.constant)};"]
    root, value = _extended(tree.root, tree.width), _unsigned(tree.width, tree.constant)
    if tree.negated:
        root = f"{value} - {root}"
    elif tree.constant:
        root += f" + {value}"
    return [*lines, f"    {target} <= std_logic_vector({root});"]


def adder(block: Adder) -> str:
    declarations: list[str] = []
    lines: list[str] = []
    for j in range(len(block.shared)):  # the sums outputs share, each once
        tree = emit.shared_tree(block, j)
        declarations.append(f"    signal {emit.shared_name(j)} : {vector(tree.width)};")
        lines += _tree_lines(tree, emit.shared_name(j), declarations)
    for k in range(len(block.terms)):  # an adder tree per output element
        tree = emit.adder_tree(block, k)
        lines += _tree_lines(tree, slice("y", *tree.target), declarations)
    what = "partial sum(s)" if block.level < block.levels - 1 else "output code(s)"
    head = comment(
        f"Adder trees of sum node '{block.node}' (level {block.level + 1} of {block.levels}): {len(block.terms)} "
        f"{what}, each a constant plus shifted codes and shared sums, added or subtracted, of exactly the bits "
        "each sum needs"
        + (f"; {len(block.shared)} sums of two shifted operands shared between them." if block.shared else ".")
    )
    return head + "\n" + module_text(block.name, *_widths(block), declarations, lines)


def _argmax_operand(operand: tuple[Any, Any], vw: int, iw: int) -> tuple[str, str]:
    """A comparator's operand: a leaf (the code's bits, its index) or an earlier comparator's value and index."""
    first, second = operand
    if isinstance(first, tuple):
        return f"resize(unsigned({slice('x', *first)}), {vw})", _unsigned(iw, second)
    return str(first), str(second)


def argmax(block: Argmax) -> str:
    declarations, lines = [], []
    for k in range(len(block.groups)):  # a comparator tree per output element
        tree = emit.argmax_tree(block, k)
        vw, iw = tree.value_bits, tree.index_bits
        for value, index, a, b in tree.comparators:
            (av, ai), (bv, bi) = _argmax_operand(a, vw, iw), _argmax_operand(b, vw, iw)
            declarations.append(f"    signal {value} : unsigned({vw - 1} downto 0);")
            declarations.append(f"    signal {index} : unsigned({iw - 1} downto 0);")
            lines.append(f"    {value} <= {bv} when {bv} > {av} else {av};")
            lines.append(f"    {index} <= {bi} when {bv} > {av} else {ai};")
        lines.append(f"    {slice('y', *tree.target)} <= std_logic_vector({_argmax_operand(tree.root, vw, iw)[1]});")
    head = comment(
        f"Argmax module of node '{block.node}': each output is the index of the largest code of its group, the "
        "first of equal ones."
    )
    return head + "\n" + module_text(block.name, *_widths(block), declarations, lines)


def threshold(block: Thresholds) -> str:
    lines = []
    for k in range(len(block.rows)):  # a chain of comparisons per output element
        (high, low), bits, pairs, base, target = emit.threshold_chain(block, k)
        width = target[0] - target[1] + 1
        field = f"unsigned({slice('x', high, low)})"
        chain = "".join(f"{constant(width, c)} when {field} >= {_unsigned(bits, t)} else " for t, c in pairs)
        lines.append(f"    {slice('y', *target)} <= {chain}{constant(width, base)};")
    head = comment(
        f"Threshold module of node '{block.node}': each output code is the code after the last threshold its "
        "input code reaches (thresholds ascend)."
    )
    return head + "\n" + module_text(block.name, *_widths(block), [], lines)
