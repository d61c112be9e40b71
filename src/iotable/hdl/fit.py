"""Whether a design can fit, before synthesis: the fewest LUT cells synthesis can leave of a design whose tables
are device cells (:func:`min_luts`).

A design exported with ``primitives=`` (:mod:`.primitives`) instantiates each table's verified LUT netlist as
the family's LUT cells, which yosys keeps as they are: it only deletes cells, never maps them again. So the
cells as placed, less what yosys could delete, are a lower bound of the LUTs it reports, and
:func:`~iotable.hdl.implement` refuses a design whose bound exceeds the device before synthesizing it
(:func:`~iotable.hdl.devices.check_min_luts`). What is taken off, each more than yosys takes off, never less:

- **constants and wires**: a cell's inputs that are constants (dead units' outputs, constant pad codes) are
  folded into its function, an input the function does not depend on is dropped, and a cell left with fewer
  than two inputs costs nothing (a constant, a wire or an inverter: yosys may remove or absorb it);
- **duplicates**: cells of one function of the same inputs (in any order) are one cell, to a fixpoint: every
  cell is keyed by its reduced function and the keys of its inputs, in the order of the design's logic, so that
  cells reading merged cells merge too (what yosys's ``opt_merge`` does, and more);
- **dead cells**: only cells whose output reaches a bit of ``out_data``, through LUTs and registers alone, are
  counted (what ``opt_clean`` keeps, and less): tables read only by sums, comparisons or pools count nothing,
  since yosys may simplify that arithmetic away.

Registers are kept apart from the net they copy, except a register of a constant, which is that constant.
The bound is computed for the unrolled style (one valid pipeline); a streaming design has none (``None``):
its line buffers and handshakes are logic this model does not follow.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .mapped import CellKind, LutBody, Source, lut_body, staged
from .netlist import Layer, Netlist

__all__ = ["min_luts", "table_bodies"]

_ZERO, _ONE = 0, 1  # the nets of the constants


def table_bodies(
    netlist: Netlist, mapped: Mapping[str, Any] | None, stages: tuple[int, Mapping[str, int]] = (0, {})
) -> dict[str, LutBody] | None:
    """Each table module's :class:`~.mapped.LutBody` from its mapped netlist (``mapped``: module name ->
    :class:`~iotable.synth.MappedTable`), with registers inside where ``stages`` puts them (a register after
    every ``stages[0]`` LUT levels, ``stages[1][name]`` in all: :func:`~.mapped.staged`); ``None`` without
    ``mapped`` (``case`` tables)."""
    if mapped is None:
        return None
    every, latency = stages
    bodies = {}
    for name, module in netlist.modules.items():
        body = lut_body(module.table, mapped[name], name, what="export")
        bodies[name] = staged(body, every, latency[name]) if latency.get(name) else body
    return bodies


def min_luts(netlist: Netlist, bodies: Mapping[str, LutBody] | None) -> int | None:
    """The LUT cells synthesis keeps at least of ``netlist`` with its tables as ``bodies`` (module name ->
    :class:`~.mapped.LutBody`), as the module docstring says; ``None`` for a streaming design, without bodies
    (``case`` tables) or with a table module that has none."""
    if bodies is None or netlist.streaming or any(name not in bodies for name in netlist.modules):
        return None
    nets = _Nets(netlist)
    for block in netlist.blocks:
        if isinstance(block, Layer):
            nets.layer(block, bodies)
    sinks = [net for element in netlist.output_ids.tolist() for net in nets.element(int(element))]
    return nets.counted(sinks)


class _Nets:
    """Every bit of the design as a net: an int standing for a key (a constant, an opaque bit, a register of
    a net, a reduced LUT of nets), one int per distinct key, so equal keys are one net."""

    def __init__(self, netlist: Netlist) -> None:
        self.netlist = netlist
        self.keys: list[tuple[Any, ...]] = [("constant", 0), ("constant", 1)]
        self.ids: dict[tuple[Any, ...], int] = {key: k for k, key in enumerate(self.keys)}
        self.driven: dict[tuple[int, int], int] = {}  # (signal, bit) of a layer output -> its net
        self.outputs = {block.output for block in netlist.blocks if isinstance(block, Layer)}

    def net(self, key: tuple[Any, ...]) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.keys)
            self.keys.append(key)
        return self.ids[key]

    def bit(self, signal: int, bit: int) -> int:
        """The net of bit ``bit`` of top-level signal ``signal``."""
        if (signal, bit) in self.driven:
            return self.driven[signal, bit]
        source = self.netlist.signals[signal].source
        if source is not None:
            copied = self.bit(source, bit)
            found = copied if copied in (_ZERO, _ONE) else self.net(("register", copied))
        elif signal in self.outputs:  # a layer's output bit no instance drives: constant
            found = _ZERO
        else:  # the input port, or what arithmetic computes: a bit this model knows nothing of
            found = self.net(("opaque", signal, bit))
        self.driven[signal, bit] = found
        return found

    def element(self, element: int) -> list[int]:
        """The nets of a top-level element, least significant bit first."""
        n = self.netlist
        width, signal = int(n.width[element]), int(n.sig[element])
        if signal < 0:
            value = int(n.value[element])
            return [(value >> i) & 1 for i in range(width)]  # the constants' nets are 0 and 1
        return [self.bit(signal, int(n.lsb[element]) + i) for i in range(width)]

    def layer(self, block: Layer, bodies: Mapping[str, LutBody]) -> None:
        """Each instance's cells on the nets of its address bits, and the nets of ``y`` they drive."""
        for (_, module, elements), low in zip(block.instances, block.y_lsb.tolist()):
            address = [net for local in reversed(elements) for net in self.element(int(block.x_ids[local]))]
            body = bodies[module]
            codes = _Instance(self, body, address).outputs()
            for b, net in enumerate(codes):
                self.driven[block.output, low + b] = net

    def lut(self, truth: int, inputs: list[int]) -> int:
        """The net of a LUT of ``inputs`` (least significant first) after :func:`_reduce`."""
        truth, free = _reduce(truth, inputs)
        if not free:
            return truth & 1
        if len(free) == 1 and truth == 0b10:
            return free[0]
        return self.net(("lut", truth, tuple(free)))

    def counted(self, sinks: list[int]) -> int:
        """The LUTs of two inputs or more whose nets reach ``sinks``."""
        live, stack = set(), list(sinks)
        while stack:
            net = stack.pop()
            if net in live:
                continue
            live.add(net)
            key = self.keys[net]
            if key[0] == "lut":
                stack.extend(key[2])
            elif key[0] == "register":
                stack.append(key[1])
        return sum(1 for net in live if self.keys[net][0] == "lut" and len(self.keys[net][2]) >= 2)


class _Instance:
    """One instance of a table module: its cells' and registers' nets, from its address bits' nets."""

    def __init__(self, nets: _Nets, body: LutBody, address: list[int]) -> None:
        self.nets, self.body, self.address = nets, body, address
        self.local: dict[str, int] = {}
        self.registers = {register.output: register.source for register in body.registers}

    def source(self, source: Source) -> int:
        if source.bit is not None:
            return self.address[source.bit]
        name = source.signal
        if name not in self.local:  # a register: the nets of the cells come first in the body's order
            copied = self.source(self.registers[name])
            self.local[name] = copied if copied in (_ZERO, _ONE) else self.nets.net(("register", copied))
        return self.local[name]

    def outputs(self) -> list[int]:
        """The nets of ``codes``, least significant bit first."""
        for cell in self.body.cells:
            if cell.kind is CellKind.CONSTANT:
                self.local[cell.output] = cell.init & 1
            elif cell.kind is CellKind.BUFFER:
                self.local[cell.output] = self.source(cell.inputs[0])
            else:  # a LUT's select lists its inputs most significant first
                inputs = [self.source(s) for s in reversed(cell.inputs)]
                self.local[cell.output] = self.nets.lut(cell.init, inputs)
        return [self.source(Source(name)) for name in reversed(self.body.outputs)]


def _reduce(truth: int, inputs: list[int]) -> tuple[int, list[int]]:
    """A LUT's function over its distinct non-constant inputs, those it does not depend on dropped, in the
    order of their nets: ``(truth table, inputs)`` (bit ``r`` of the table: the output where input ``j``
    reads bit ``j`` of ``r``)."""
    free = sorted({net for net in inputs if net not in (_ZERO, _ONE)})
    rank = {_ZERO: -1, _ONE: -2, **{net: j for j, net in enumerate(free)}}
    table, kept = _reduced(truth, tuple(rank[net] for net in inputs))
    return table, [free[j] for j in kept]


@functools.lru_cache(maxsize=1 << 16)
def _reduced(truth: int, pattern: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """:func:`_reduce` on the shape of a LUT's inputs: each input's place among the distinct ones (-1: the
    constant 0, -2: the constant 1); the table and the places kept. LUTs of one shape and function are many."""
    places = max(pattern, default=-1) + 1
    table = 0
    for row in range(1 << places):  # at most 2**6 rows: a loop over one LUT's inputs, never a table's rows
        index = sum((0 if j == -1 else 1 if j == -2 else (row >> j) & 1) << i for i, j in enumerate(pattern))
        table |= ((truth >> index) & 1) << row
    kept, j = list(range(places)), 0
    while j < len(kept):
        low, high = _cofactors(table, j, len(kept))
        if low == high:
            table = low
            kept.pop(j)
        else:
            j += 1
    return table, tuple(kept)


def _cofactors(table: int, j: int, n: int) -> tuple[int, int]:
    """The tables of ``n - 1`` inputs where input ``j`` of ``table`` reads 0 and 1."""
    low = high = 0
    rows = [row for row in range(1 << n) if not (row >> j) & 1]
    for k, row in enumerate(rows):
        low |= ((table >> row) & 1) << k
        high |= ((table >> (row | 1 << j)) & 1) << k
    return low, high
