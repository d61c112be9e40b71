"""What a model's tables will cost, before any row is computed (:func:`estimate`), and LogicNets' estimate of
one built table (:func:`table_lut_estimate`); the count itself is :mod:`iotable.lutcount`'s.

A whole model is traced, cut into table layers and planned exactly as :func:`iotable.precompute` does it, and
stops there: the plans know every table's input and output bits, so LogicNets' LUT6 estimate of each table and
the pipeline register bits after each table layer follow without enumerating anything. This is the figure to
watch while choosing fan-ins and bit widths during training; :func:`iotable.synth.cost` maps the built tables
with ABC afterwards. Each layer is a :class:`~iotable.synth.LayerCost`, the record a mapping reports too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from ..domain import Domain
from ..graph.graph import TableMeta, text_table
from ..graph.liveness import check_keep_dead, liveness
from ..layout import Layout
from ..lutcount import check_k, lut_estimate
from ..lutnet import table_bits
from ..network.inputformat import planned_input_format
from ..network.network import model_skeleton, pipeline_registers
from ..network.precompute import PrecomputeOptions
from ..packages import read_for
from ..table import IOTable
from ..units import DEFAULT_MAX_ROWS
from .arith import arithmetic_estimate
from .records import ArithmeticCost, LayerCost, arithmetic_lines

__all__ = ["CostEstimate", "LayerEstimate", "estimate", "table_lut_estimate"]


def table_lut_estimate(table: IOTable, *, k: int = 6) -> int:
    """:func:`lut_estimate` for one table: its address bits and code bits as ``iotable.hdl`` packs them.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0]] * 4096, input_domains=[Domain.uniform(2)] * 6, output_domain=Domain.uniform(2))
        >>> table_lut_estimate(t)
        170
    """
    x, y = table_bits(table, what="table_lut_estimate")
    return int(lut_estimate(x, y, k=k))


#: The per-layer record of an estimate: :class:`~iotable.synth.LayerCost` (``luts`` is LogicNets' estimate there).
LayerEstimate = LayerCost


@dataclass(frozen=True)
class CostEstimate:
    """The planned cost of a model's table layers (see :func:`estimate`)."""

    layers: tuple[LayerCost, ...]
    k: int
    keep_dead: bool = False
    arithmetic: tuple[ArithmeticCost, ...] = ()

    @property
    def dead(self) -> int:
        """Tables whose outputs reach no network output, every layer together (counted in nothing else unless
        ``keep_dead``)."""
        return sum(layer.dead or 0 for layer in self.layers)

    @property
    def luts(self) -> int:
        """LUTs of every table layer together."""
        return sum(layer.luts or 0 for layer in self.layers)  # an estimate gives every layer its count

    @property
    def arithmetic_luts(self) -> int:
        """The estimated LUTs of every arithmetic node (``sum``, ``argmax``, ``threshold``) together."""
        return sum(c.estimate for c in self.arithmetic)

    @property
    def total_luts(self) -> int:
        """The tables' and the arithmetic's LUTs together."""
        return self.luts + self.arithmetic_luts

    @property
    def registers(self) -> int:
        """Pipeline register bits after every table layer together."""
        return sum(layer.registers or 0 for layer in self.layers)

    @property
    def rows(self) -> int:
        """Table rows enumeration would compute."""
        return sum(layer.rows or 0 for layer in self.layers)

    def summary(self) -> str:
        """A table per layer and the totals."""
        rows = [
            {
                "layer": e.name,
                "tables": e.tables,
                "dead": e.dead,
                "input bits": ", ".join(map(str, e.input_bits)),
                "output bits": e.output_bits,
                "rows": e.rows,
                f"LUT{self.k} estimate": e.luts,
                "registers": e.registers,
            }
            for e in self.layers
        ]
        columns = ("layer", "tables", "dead", "input bits", "output bits", "rows", f"LUT{self.k} estimate", "registers")
        return "\n".join(
            [
                text_table(rows, columns),
                f"total: {self.rows} rows, {self.luts} LUT{self.k} (LogicNets' formula, each table once), "
                f"{self.registers} pipeline register bits",
                self._dead_line(),
                *arithmetic_lines(self.arithmetic, self.luts, self.k, mapped=False),
            ]
        )

    def _dead_line(self) -> str:
        counted = "counted above (keep_dead=True)" if self.keep_dead else "not counted (keep_dead=True counts them)"
        return f"dead: {self.dead} tables (their outputs reach no network output), {counted}"

    def __str__(self) -> str:
        return self.summary()


def estimate(
    model: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    host: Iterable[Any] = (),
    input_layout: str | Layout | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    k: int = 6,
    keep_dead: bool = False,
) -> CostEstimate:
    """The LUT estimate and pipeline registers of a whole model's tables, from its plans alone: no row is
    computed (but the input quantizer's few, which tell whether it is the identity on the input's codes, and so no
    table layer, as :func:`iotable.precompute` finds), so it takes the time of tracing and planning
    (milliseconds) however large the tables.

    The arguments are :func:`iotable.precompute`'s for a whole model; ``k`` is the LUT size. Refusals are the
    same as :func:`iotable.precompute` would make, before any work.

    Tables whose outputs reach no network output (:func:`iotable.graph.liveness.liveness`: with random fan-in
    masks, units that no unit of the next layer reads) are left out, as synthesis deletes them, and counted in
    each layer's ``dead``; ``keep_dead=True`` counts every table (and every pipeline register bit).

    Arithmetic nodes (``sum``, ``argmax``, ``threshold``) are estimated too, each in ``arithmetic``
    (:func:`iotable.synth.arithmetic_estimate`: adder trees, comparator trees and comparisons against
    constants, their live outputs only unless ``keep_dead``); ``luts`` counts the tables, ``total_luts`` both.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), iotable.nn.Quantize(2)).eval()
        >>> cost = estimate(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
        >>> cost.luts, cost.registers, cost.rows
        (30, 6, 768)
    """
    k = check_k(k, what="estimate")
    keep_dead = check_keep_dead(keep_dead, what="estimate")
    options = PrecomputeOptions(max_rows=max_rows).as_kwargs()
    model = read_for(model, "estimate")  # layers that run on CUDA only: read from their parameters
    skeleton = model_skeleton(
        model,
        input_domain=input_domain,
        example_input=example_input,
        host=host,
        input_layout=input_layout,
        reuse=True,
        options=options,
    )
    graph = planned_input_format(skeleton.graph, skeleton.planned)  # an identity input quantizer: no layer
    live = liveness(graph)
    layers = []
    for node in graph.nodes:
        if not isinstance(node.meta, TableMeta):
            continue
        _, plan = skeleton.planned[node.meta.layer]
        address, code = plan.table_bits
        estimates = plan.lut_estimates(k=k)
        if code is None or estimates is None:
            continue  # raw outputs: not a table of codes (a float head), nothing to estimate
        units = live.units[node.name]
        kept = np.ones(len(units), dtype=bool) if keep_dead else units
        luts = int(estimates[kept].sum())
        layers.append(
            LayerCost(
                name=node.name,
                tables=int(kept.sum()),
                luts=luts,
                estimate=luts,
                input_bits=tuple(sorted({int(b) for b in address[kept]})),
                registers=pipeline_registers(node, None if keep_dead else live.elements[node.name]) or 0,
                rows=sum(u.rows for u, keep in zip(plan.units, kept) if keep),
                output_bits=int(code[kept].max()) if kept.any() else 0,
                dead=int((~units).sum()),
            )
        )
    arithmetic = arithmetic_estimate(graph, k=k, keep_dead=keep_dead)
    return CostEstimate(tuple(layers), k, keep_dead, arithmetic)
