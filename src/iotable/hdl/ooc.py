"""Out of context: the design's ports as internal nets, none of them an I/O pin, as vendor tools' out-of-context
mode implements a block (the mode of the field's published Fmax and LUT counts).

nextpnr has no such mode for iCE40 and ECP5, so :func:`~iotable.hdl.implement` adds a wrapper top,
:data:`WRAPPER`: a shift register fed from one pin drives ``rst``, ``in_valid``, ``out_ready`` and every bit of
``in_data``; ``out_data``, ``out_valid`` and ``in_ready`` are folded into a signature register (each bit the
XOR of its output bit and the register's previous bit, as a multiple-input signature register), whose last
bit drives one pin. Every input bit is a register synthesis cannot see through and every output bit reaches
the pin, so no table is deleted, and every path into and out of the design runs from a register to a
register: Fmax counts them all.

The wrapper's own cost, counted in the result beside the design's: ``in_width + 3`` flip-flops for the
shift register, ``out_width + 2`` for the signature, and at most ``out_width + 1`` LUTs (a 2-input XOR each,
which synthesis may merge into the design's output logic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from .devices import package_pins
from .target import Target

__all__ = ["WRAPPER", "Context", "choose", "wrapper_cost", "wrapper_text"]

#: The wrapper's module name (and file, with ``.v``); no name an export writes starts with ``iotable_``.
WRAPPER = "iotable_ooc"
#: The top's ports besides ``in_data`` and ``out_data``: clk, rst, in_valid, in_ready, out_valid, out_ready.
CONTROL_PORTS = 6


@dataclass(frozen=True)
class Context:
    """Whether a design is implemented out of context, and why (the sentence the result keeps)."""

    out_of_context: bool
    reason: str


def wrapper_cost(in_width: int, out_width: int) -> tuple[int, int]:
    """``(flip-flops, at most LUTs)`` the wrapper adds to a design of these port widths."""
    return in_width + 3 + out_width + 2, out_width + 1


def choose(value: Any, design: Any, target: Target, *, verify: int, what: str) -> Context:
    """``out_of_context`` as a :class:`Context`: ``True``, ``False``, or ``None`` (out of context when the
    ports outnumber the package's pins); an :class:`OptionError` for anything else, and for a choice that
    cannot work (verify simulates the design's own ports; an in-context design with more ports than pins)."""
    if value is not None and not isinstance(value, bool):
        msg = f"{what}: out_of_context must be True, False or None (automatic), received {value!r}"
        raise OptionError(msg)
    ports = design.inputs.width + design.outputs.width + CONTROL_PORTS
    pins = package_pins(target) if target.placed else None
    if not target.placed:
        if value:
            msg = f"{what}: target {target.name!r} is synthesis only (no pins): leave out_of_context out"
            raise OptionError(msg)
        return Context(False, "synthesis only: no I/O pins")
    flops, luts = wrapper_cost(design.inputs.width, design.outputs.width)
    wrapper = f"wrapper {WRAPPER}: {flops} flip-flops, at most {luts} LUTs, counted above"
    where = f"the package {target.package} has {pins} pins" if pins is not None else f"{target.package}'s pins unknown"
    if value is None:
        value = pins is not None and ports > pins
        if value:
            reason = f"out of context (automatic: {ports} port bits, {where}; {wrapper})"
        else:
            reason = f"in context (automatic: {ports} port bits, {where})"
    elif value:
        reason = f"out of context (asked; {wrapper})"
    else:
        if pins is not None and ports > pins:
            msg = (
                f"{what}: {design.top!r} has {ports} port bits and {where}; pass out_of_context=True (or None), "
                "or a larger package (package=)"
            )
            raise OptionError(msg)
        reason = f"in context (asked: {ports} port bits as I/O pins)"
    if value and verify:
        msg = (
            f"{what}: verify={verify} simulates {design.top!r} through its own ports, which out of context are "
            "behind the wrapper; pass out_of_context=False to verify, or verify=0"
        )
        raise OptionError(msg)
    return Context(value, reason)


def wrapper_text(top: str, in_width: int, out_width: int) -> str:
    """The wrapper module around ``top`` (a name :func:`~iotable.hdl.check` accepts) for these widths."""
    feed, sign = in_width + 3, out_width + 2
    return "\n".join(
        [
            f"// Out-of-context wrapper of {top}: its ports are internal nets (see iotable.hdl.ooc).",
            f"module {WRAPPER} (",
            "    input  wire clk,",
            "    input  wire in_bit,",
            "    output wire out_bit",
            ");",
            f"    reg [{feed - 1}:0] feed;",
            "    always @(posedge clk) feed <= {" + f"feed[{feed - 2}:0], in_bit" + "};",
            "    wire in_ready, out_valid;",
            f"    wire [{out_width - 1}:0] out_data;",
            f"    {top} dut (",
            "        .clk(clk), .rst(feed[0]), .in_valid(feed[1]), .in_ready(in_ready),",
            f"        .in_data(feed[{feed - 1}:3]), .out_valid(out_valid), .out_ready(feed[2]), .out_data(out_data)",
            "    );",
            f"    reg [{sign - 1}:0] sign;",
            "    always @(posedge clk) sign <= {"
            + f"sign[{sign - 2}:0], 1'b0"
            + "} ^ {out_data, out_valid, in_ready};",
            f"    assign out_bit = sign[{sign - 1}];",
            "endmodule",
            "",
        ]
    )
