"""Tiny tables written inline: a table of at most ``inline_bits`` address bits becomes an expression in its layer
module instead of a ``case`` module of its own (:func:`~iotable.hdl.export`'s ``inline_bits``).

A layer of many tiny tables (DiffLogic's 2-input gates, DWN's LUT-6 nodes) written as one ``case`` module per
distinct table and one instance per unit is what an event-driven simulator is slowest at: iverilog runs every
instance's ``always`` block and walks its ``case`` on each change of its address. Written inline, each output
bit of each unit is one continuous assignment: for a table of at most :data:`TREE_BITS` address bits a
multiplexer tree over the unit's address bits (the table's Shannon expansion, first address bit at the root;
branches with the same leaves merged), for a larger one a constant holding the output bit at every address,
selected by the address::

    wire x_2 = x[2];
    wire x_29 = x[29];
    assign y[0] = (x_2 ? (x_29 ? 1'b1 : 1'b0) : 1'b1);
    localparam [63:0] net_layer1_u4_bit0 = 64'b0110...;
    assign y[7] = net_layer1_u4_bit0[{x_3, x_8, x_15, x_16, x_30, x_31}];

and in VHDL a constant array of the table's codes, one entry per address, indexed by the unit's address::

    constant t_net_layer0_u0 : rows_net_layer0_u0 := (0 => "1", 1 => "1", 2 => "1", 3 => "0");
    y(0 downto 0) <= t_net_layer0_u0(to_integer(unsigned(a_u0_p0))) when not is_x(a_u0_p0) else (others => '-');

It is the same function as the ``case`` module on every address: a row the table lacks, and a bit pattern that
is no input code, drives the fill (``x`` / ``'-'`` with ``dont_cares="x"``, 0 with ``"zero"``), the ``case``'s
default. (On an unknown address the Verilog forms give ``x`` bits where the ``case`` gives its default; the benches
never drive one.) Synthesis reads either as the table's logic.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from .. import bits as bitfields
from ..errors import OptionError
from ..table import IOTable
from .netlist import Layer, Netlist
from .table import DontCares, TableLayout

__all__ = ["INLINE_BITS", "MAX_INLINE_BITS", "TREE_BITS", "check_inline_bits", "inline_modules", "leaves", "tree"]

#: Tables of at most this many address bits are written inline by default. Measured under iverilog
#: (``python -m benchmarks.hdl``, the network bench on 1,000 vectors): inline, a DiffLogic network of 2-input gates
#: and LogicNets' JSC-S (6-bit neurons) ran 1.4 to 1.6 times as fast as with ``case`` modules, 64 tables of 8
#: address bits slower; 6 is also the LUT6 of FPGA families, at most one LUT per output bit for synthesis.
INLINE_BITS = 6
#: Inline tables of at most this many address bits are multiplexer trees in Verilog, larger ones a constant per
#: output bit selected by the address: on 2-input gates the tree simulates faster under iverilog, on 6-input
#: tables of random contents (JSC-S, DWN) the bit-select, about twice the ``case`` module's speed.
TREE_BITS = 3
#: The largest ``inline_bits`` accepted: a tree of 2**bits leaves per output bit, per unit, is text that grows
#: faster than the ``case`` module it replaces (one module for all the units that share the table).
MAX_INLINE_BITS = 8


def check_inline_bits(value: object, *, tables: str, what: str) -> int:
    """``inline_bits`` checked: a number of address bits from 0 (no table inline) to :data:`MAX_INLINE_BITS`;
    with ``tables="mapped"`` every table is its LUT netlist, so 0."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INLINE_BITS:
        msg = (
            f"{what}: inline_bits must be the most address bits of a table written inline in its layer module, "
            f"0 to {MAX_INLINE_BITS} (0: every table its own case module), received {value!r}"
        )
        raise OptionError(msg)
    return value if tables == "case" else 0


def inline_modules(modules: Mapping[str, object], inline_bits: int) -> frozenset[str]:
    """The names of the table modules (``Netlist.modules``) of at most ``inline_bits`` address bits."""
    return frozenset(name for name, m in modules.items() if m.layout.address_bits <= inline_bits)  # type: ignore[attr-defined]


def leaves(table: IOTable, layout: TableLayout, dont_cares: DontCares) -> np.ndarray:
    """The codes of every address ``0 .. 2**address_bits - 1`` as characters, shape ``(addresses, code bits)``,
    most significant bit first: ``"0"``/``"1"`` where the table has the row, the fill (``"x"``, or ``"0"`` with
    ``dont_cares="zero"``) where it has none or the address is no input code.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [2]], input_domains=[Domain([0.0, 1.0, 2.0])], output_domain=Domain.uniform(2))
        >>> from iotable.hdl.table import layout_of
        >>> ["".join(row) for row in leaves(t, layout_of(t, what="example"), DontCares.X)]
        ['00', '01', '10', 'xx']
    """
    fill = "x" if dont_cares is DontCares.X else "0"
    chars = np.full((1 << layout.address_bits, layout.code_bits), fill, dtype="<U1")
    if layout.rows:
        offsets = np.asarray(layout.input_offsets, dtype=np.int64)
        address = (table.inputs.astype(np.int64) << offsets).sum(axis=1) if table.fan_in else np.zeros(1, np.int64)
        packed = bitfields.digits(table.outputs, (layout.output_width,) * layout.fan_out)
        chars[address] = np.where(packed != 0, "1", "0")
    return chars


@lru_cache(maxsize=4096)
def tree(column: str, first: int = 0) -> str:
    """The multiplexer tree of one output bit whose value at address ``a`` is ``column[a]`` (``2**k``
    characters), its selects named ``{first}`` (the most significant address bit) .. ``{first+k-1}`` for
    :meth:`str.format`; subtrees with the same leaves are one.

    Example:
        >>> tree("1101").format("a", "b")
        "(a ? (b ? 1'b1 : 1'b0) : 1'b1)"
    """
    if len(column) == 1:
        return f"1'b{column}"
    half = len(column) // 2
    low, high = tree(column[:half], first + 1), tree(column[half:], first + 1)
    return low if low == high else f"({{{first}}} ? {high} : {low})"


def address_of(widths: np.ndarray, elements: list[int]) -> list[int]:
    """The bits of port ``x`` that form a unit's address, most significant first: its elements (listed first
    input first, element ``e`` at the bits after elements ``0..e-1`` of ``x``), each field high bit first."""
    lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    return [int(lsb[e]) + b for e in elements for b in range(int(widths[e]) - 1, -1, -1)]


def layer_comment(netlist: Netlist, block: Layer) -> str:
    """The first line of a layer module's header: its instances, its table modules, those written inline."""
    modules = {m for _, m, _ in block.instances}
    inlined = sum(m in netlist.inline for _, m, _ in block.instances)
    return (
        f"Layer module of {block.kind} node '{block.node}' (layer '{block.layer}'): {len(block.instances)} "
        f"instance(s) of {len(modules)} table module(s)"
        + (f", {inlined} of them written inline (the table as an expression of its address)." if inlined else ".")
    )


def verilog_layer(netlist: Netlist, block: Layer) -> tuple[list[str], list[str]]:
    """The declarations (a wire per bit of ``x`` an inline table reads; the constants of the tables over
    :data:`TREE_BITS` address bits) and the assignments (one per output bit) of the inline tables of ``block``;
    the other instances are left to the caller."""
    used: set[int] = set()
    constants: dict[str, str] = {}
    lines = []
    for (_, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        if module not in netlist.inline:
            continue
        table = netlist.modules[module]
        bits = address_of(block.x_widths, elements)
        used.update(bits)
        names = [f"x_{b}" for b in bits]
        columns = leaves(table.table, table.layout, netlist.inline[module])
        cw = table.layout.code_bits
        for j in range(cw):  # codes bit j (0: lowest) is column cw - 1 - j
            column = "".join(columns[:, cw - 1 - j])
            if len(bits) <= TREE_BITS:
                lines.append(f"    assign y[{lsb + j}] = {tree(column).format(*names)};")
                continue
            constant = f"{module}_bit{j}"  # bit a of it: the output bit at address a
            constants[constant] = f"    localparam [{len(column) - 1}:0] {constant} = {len(column)}'b{column[::-1]};"
            lines.append(f"    assign y[{lsb + j}] = {constant}[{{{', '.join(names)}}}];")
    return [*constants.values(), *(f"    wire x_{b} = x[{b}];" for b in sorted(used))], lines


def vhdl_layer(netlist: Netlist, block: Layer) -> tuple[list[str], list[str]]:
    """The declarations (a constant array per inline table, an address signal per instance) and the assignments
    of the inline tables of ``block``; the other instances are left to the caller."""
    declarations: dict[str, list[str]] = {}
    lines = []
    for (instance, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        if module not in netlist.inline:
            continue
        table = netlist.modules[module]
        layout = table.layout
        if module not in declarations:
            columns = leaves(table.table, layout, netlist.inline[module])
            entries = ", ".join(f'{a} => "{"".join(row)}"'.replace("x", "-") for a, row in enumerate(columns))
            declarations[module] = [
                f"    type rows_{module} is array (0 to {len(columns) - 1}) of "
                f"std_logic_vector({layout.code_bits - 1} downto 0);",
                f"    constant t_{module} : rows_{module} := ({entries});",
            ]
        bits = address_of(block.x_widths, elements)
        target = f"y({lsb + layout.code_bits - 1} downto {lsb})"
        if not bits:  # a constant table
            lines.append(f"    {target} <= t_{module}(0);")
            continue
        address = f"a_{instance}"
        fill = "-" if netlist.inline[module] is DontCares.X else "0"
        declarations[address] = [f"    signal {address} : std_logic_vector({len(bits) - 1} downto 0);"]
        lines += [
            f"    {address} <= {' & '.join(f'x({b})' for b in bits) if len(bits) > 1 else f'(0 => x({bits[0]}))'};",
            f"    {target} <= t_{module}(to_integer(unsigned({address}))) "
            f"when not is_x({address}) else (others => '{fill}');",
        ]
    return [line for group in declarations.values() for line in group], lines
