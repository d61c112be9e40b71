"""Tables as device LUT primitives: each table's verified ABC netlist written as instances that synthesis keeps.

A table module exported with ``tables="mapped"`` is generic logic (an INIT mask selected by the LUT's inputs,
:mod:`.mapped`): a synthesis tool maps it again, and pays for it (yosys spends 2-3x ABC's LUT4 on a 12-input
table). With ``primitives=<family>`` the same netlist is written as the family's LUT cells, which yosys (and the
vendors' tools) keep as they are, so the LUTs placed are the LUTs ABC found and checked row by row:

======== ============ ========= =============================== ======
family   cell         INIT      inputs (bit 0 of the index ...) output
======== ============ ========= =============================== ======
ecp5     ``LUT4``     ``INIT``  ``A, B, C, D``                  ``Z``
ice40    ``SB_LUT4``  ``LUT_INIT`` ``I0, I1, I2, I3``           ``O``
xilinx   ``LUT1..6``  ``INIT``  ``I0 .. I5``                    ``O``
======== ============ ========= =============================== ======

In every family bit ``i`` of the INIT parameter is the output where the inputs, the first one least
significant, read ``i`` (yosys's ``share/<family>/cells_sim.v``): the convention of
:func:`~iotable.hdl.mapped.lut_init`, so a netlist node's first input goes to the cell's first input. A node of
fewer inputs than a Lattice LUT4 has its INIT repeated over the unused inputs (its output does not depend on
them), and they are tied to 0: a net repeated on a cell's inputs is rewritten by ``synth_ecp5``'s
``opt_lut_ins``, and on iCE40 it leaves nextpnr's router with arcs it cannot route (jsc-s: 2,097 arcs unrouted after
1.4M iterations with repeated inputs, routed in 3 s with constants). Xilinx has a cell per size.

Synthesis never sees a definition of these cells (they are the device library's), so simulation needs one:
:func:`cell_models` writes a small behavioural model of each cell (``<top>_primitives.v``, beside the bench).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..errors import HDLError, OptionError
from .language import Language
from .mapped import CellKind, LutBody, lut_body
from .names import verilog_name
from .verilog_tables import comment, register_declarations, register_loads

__all__ = [
    "Family",
    "Primitives",
    "cell_models",
    "check_primitives",
    "models_file",
    "primitive_text",
    "primitive_verilog",
]


@dataclass(frozen=True)
class Family:
    """The LUT cell of a device family: its name (``{n}``: the LUT's inputs, for families with a cell per size),
    INIT parameter, inputs (least significant first), output and the most inputs it has."""

    cell: str
    init: str
    inputs: tuple[str, ...]
    output: str
    k: int
    sized: bool = False

    def name(self, inputs: int) -> str:
        """The cell that holds a LUT of ``inputs`` inputs."""
        return self.cell.format(n=inputs) if self.sized else self.cell

    def width(self, inputs: int) -> int:
        """Inputs of the cell that holds a LUT of ``inputs`` inputs."""
        return max(inputs, 1) if self.sized else self.k


class Primitives(str, enum.Enum):
    """The device families whose LUT cells a table can be written as."""

    ECP5 = "ecp5"
    ICE40 = "ice40"
    XILINX = "xilinx"

    @property
    def family(self) -> Family:
        return _FAMILIES[self]

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Primitives | None:
        """``None`` (generic LUTs), or a family's name as a :class:`Primitives`; an error listing them otherwise."""
        if value is None or isinstance(value, Primitives):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown primitives {value!r}; expected None (generic LUTs) or one of {accepted}"
        raise OptionError(msg)


_FAMILIES = {
    Primitives.ECP5: Family("LUT4", "INIT", ("A", "B", "C", "D"), "Z", 4),
    Primitives.ICE40: Family("SB_LUT4", "LUT_INIT", ("I0", "I1", "I2", "I3"), "O", 4),
    Primitives.XILINX: Family("LUT{n}", "INIT", ("I0", "I1", "I2", "I3", "I4", "I5"), "O", 6, sized=True),
}


def check_primitives(value: Any, *, tables: str, k: Any, language: str, what: str) -> Primitives | None:
    """``value`` as a :class:`Primitives`, after checking it goes with the other options: mapped tables
    (``tables="mapped"``), Verilog, and LUTs of at most the family's inputs (``k``)."""
    chosen = Primitives.parse(value, what=what)
    if chosen is None:
        return None
    if tables != "mapped":
        msg = (
            f"{what}: primitives={chosen.value!r} writes each table's mapped LUT netlist as device cells, but "
            f"tables={tables!r}; pass tables='mapped' with it"
        )
        raise OptionError(msg)
    if language != "verilog":
        msg = f"{what}: primitives={chosen.value!r} is written in Verilog only, received language={language!r}"
        raise OptionError(msg)
    if isinstance(k, int) and k > chosen.family.k:
        msg = (
            f"{what}: primitives={chosen.value!r} holds LUTs of at most {chosen.family.k} inputs, received k={k}; "
            f"pass k={chosen.family.k}"
        )
        raise OptionError(msg)
    return chosen


def padded_init(init: int, inputs: int, width: int) -> int:
    """A LUT's INIT mask of ``inputs`` inputs as the mask of a ``width``-input cell whose extra inputs do not
    matter: the mask repeated ``2**(width - inputs)`` times.

    Example:
        >>> hex(padded_init(0x6, 2, 4))  # XOR of the first two inputs, whatever the other two
        '0x6666'
    """
    size = 1 << inputs
    return sum(init << (size * j) for j in range(1 << (width - inputs)))


def primitive_verilog(table: Any, mapped: Any, name: str, *, primitives: str) -> str:
    """A table's mapped LUT netlist as a Verilog-2001 module with the ports of
    :func:`~iotable.hdl.table_verilog`, each LUT an instance of the family's device cell (``LUT4``,
    ``SB_LUT4``, ``LUT1`` to ``LUT6``) that synthesis keeps as it is.

    Args:
        table: the IOTable the netlist was mapped from (outputs must be codes).
        mapped: its :class:`~iotable.synth.MappedTable` (LUTs of at most the family's inputs: ``k=4`` for
            ``"ecp5"`` and ``"ice40"``) or a :class:`~iotable.lutnet.LutNetlist`.
        name: the module's name, a legal Verilog identifier that is not a keyword.
        primitives: ``"ecp5"``, ``"ice40"`` or ``"xilinx"``.

    Returns:
        The module's source text; simulate it with :func:`cell_models` (or the device's own models).

    Example:
        >>> from iotable import Domain, IOTable
        >>> from iotable.lutnet import LutNetlist
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> xor = LutNetlist.from_blif(".model m\\n.inputs x0_0 x1_0\\n.outputs y0_0\\n.names x0_0 x1_0 y0_0\\n"
        ...                            "01 1\\n10 1\\n.end\\n")
        >>> print(primitive_verilog(t, xor, "xor2", primitives="ecp5").splitlines()[-3])
            LUT4 #(.INIT(16'h6666)) lut_n0 (.A(address[1]), .B(address[0]), .C(1'b0), .D(1'b0), .Z(n0));
    """
    from .names import check_name
    from .table import layout_of

    what = "primitive_verilog"
    chosen = Primitives.parse(primitives, what=what)
    if chosen is None:
        msg = f"{what}: primitives must name a family ('ecp5', 'ice40', 'xilinx'), received None"
        raise OptionError(msg)
    layout_of(table, what=what)
    name = check_name(name, language=Language.VERILOG, what=what)
    return primitive_text(lut_body(table, mapped, name, what=what), name, chosen, what=what)


def primitive_text(body: LutBody, module: str, primitives: Primitives, *, what: str = "export") -> str:
    """The table module of ``body`` (:func:`~iotable.hdl.mapped.lut_body`) with each LUT an instance of the
    family's cell, named ``lut_n<k>``; the ports, wires, buffers and constants as in
    :func:`~iotable.hdl.mapped_verilog`."""
    family = primitives.family
    layout = body.layout
    lines = [comment(line) for line in body.header]
    lines.append(comment(f"Each LUT is a {family.name(family.k)} cell of {primitives.value} (device library)."))
    lines += [
        f"module {verilog_name(module)} (",
        *(["    input  wire clk,", "    input  wire en,"] if body.latency else []),
        f"    input  wire [{layout.address_bits - 1}:0] address,",
        f"    output wire [{layout.code_bits - 1}:0] codes",
        ");",
        *register_declarations(body),
    ]
    for cell in body.cells:  # a loop over netlist nodes, never over table rows
        out = verilog_name(cell.output)
        if cell.kind is CellKind.BUFFER:
            lines.append(f"    wire {out} = {_source(cell.inputs[0])};")
        elif cell.kind is CellKind.CONSTANT:
            lines.append(f"    wire {out} = 1'b{cell.init};")
        else:
            lines += [f"    wire {out};", f"    {_instance(family, cell, out, module, what=what)};"]
    lines += register_loads(body)
    lines += [f"    assign codes = {{{', '.join(map(verilog_name, body.outputs))}}};", "endmodule", ""]
    return "\n".join(lines)


def _source(source: Any) -> str:
    return verilog_name(source.signal) if source.bit is None else f"{source.signal}[{source.bit}]"


def _instance(family: Family, cell: Any, out: str, module: str, *, what: str) -> str:
    inputs = len(cell.inputs)
    if inputs > family.k:
        msg = (
            f"{what}: LUT {cell.output} of table module {module} has {inputs} inputs, more than a "
            f"{family.name(family.k)} cell holds ({family.k}); map the table with k={family.k}"
        )
        raise HDLError(msg)
    width = family.width(inputs)
    first = [_source(s) for s in reversed(cell.inputs)]  # the netlist's first input first: bit 0 of the index
    wired = [*first, *["1'b0"] * (width - inputs)]
    ports = ", ".join(f".{pin}({signal})" for pin, signal in zip(family.inputs, wired))
    init = padded_init(cell.init, inputs, width)
    digits = max((1 << width) // 4, 1)
    value = f"{1 << width}'h{init:0{digits}x}"
    return f"{family.name(inputs)} #(.{family.init}({value})) lut_{out} ({ports}, .{family.output}({out}))"


def models_file(top: str) -> str:
    """The file of the cells' simulation models that a design of ``top`` with primitive tables carries."""
    return f"{top}_primitives.v"


def cell_models(primitives: Primitives) -> str:
    """Behavioural Verilog of the family's LUT cells, for simulation only: bit ``{inputs}`` of INIT (synthesis
    reads the device library instead; these are never among a design's sources)."""
    family = primitives.family
    sizes = range(1, family.k + 1) if family.sized else (family.k,)
    lines = [comment(f"Simulation models of the {primitives.value} LUT cells the table modules instantiate.")]
    for n in sizes:
        pins = family.inputs[:n]
        lines += [
            f"module {family.name(n)} (input {', '.join(pins)}, output {family.output});",
            f"    parameter [{(1 << n) - 1}:0] {family.init} = {1 << n}'h0;",
            f"    assign {family.output} = {family.init}[{{{', '.join(reversed(pins))}}}];",
            "endmodule",
        ]
    return "\n".join(lines) + "\n"
