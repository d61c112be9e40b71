"""A QONNX ``MatMul``/``Gemm`` layer too wide for one table per output, split as the torch route splits a linear
layer (:mod:`iotable.network.split`, through its front-end-neutral part :mod:`iotable.network.sums`): tables of
partial sums over groups of non-zero weights, a sum node adding them and the bias (the layer's float32 values,
exactly), then the rest of the layer up to its quantizer as one table per output over the sum's codes. Only where
the float32 sums are exact; otherwise the layer stays refused, with the reason. A layer whose tables fit but have
more than 2**16 rows is split too where that costs fewer LUTs by the estimates, as in the torch route."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TableTooLargeError
from ..layerplan import LayerPlan
from ..network.arithmetic import Inexact
from ..network.sums import SPLIT_ROWS, Sums, cheaper_split, linear_sums
from .plans import layer_plan, table_node
from .state import Exact, Float, Planned

if TYPE_CHECKING:
    from .layers import Walk

__all__ = ["split_if_cheaper", "split_linear"]


def split_linear(walk: Walk, fn: Float, too_large: str) -> Float:
    """The partial-sum layer and the sum node of ``fn``'s first step (``W x + b``) added to ``walk``; what is left of
    ``fn`` as a function of the sum's values. A :class:`TableTooLargeError` (``too_large`` and why the sums may
    round) where they are not exact."""
    try:
        sums = _sums(walk, fn)
    except Inexact as inexact:
        raise TableTooLargeError(f"{too_large}; nor is it exact arithmetic: {inexact}") from None
    return _add(walk, fn, sums)


def split_if_cheaper(walk: Walk, fn: Float, plan: LayerPlan) -> Float | None:
    """As :func:`split_linear` where ``plan``'s tables have more than :data:`~iotable.network.sums.SPLIT_ROWS` rows
    and cost more LUTs than the split, by the estimates (the torch route's rule); ``None`` (the tables stay) where
    they do not, or the sums are not exact."""
    if fn.linear is None or max(u.rows for u in plan.units) <= SPLIT_ROWS:
        return None
    try:
        sums = _sums(walk, fn)
    except Inexact:
        return None  # tables that fit stay tables
    return _add(walk, fn, sums) if cheaper_split(sums.estimate, sums.sum_node, plan) else None


def _sums(walk: Walk, fn: Float) -> Sums:
    assert fn.linear is not None
    w, b = fn.linear
    where = f"{walk.what}: node {fn.ops[0]!r} in {walk.graph.source}"
    return linear_sums(f"layer{len(walk.planned)}", w, b, fn.source, where)


def _add(walk: Walk, fn: Float, sums: Sums) -> Float:
    """The partial-sum layer (where ``sums`` has one) and the sum node added to ``walk``; the rest of ``fn``."""
    name = f"layer{len(walk.planned)}"
    reader = fn.source
    if sums.partial is not None and sums.partial_domain is not None:
        fan_ins = sums.partial.fan_ins()
        reads = np.zeros((len(fan_ins), fn.source.shape[0]), bool)
        for j, inputs in enumerate(fan_ins):
            reads[j, list(inputs)] = True
        partial = Float(fn.source, (sums.partial.values,), reads, fn.ops[:1])
        where = f"{walk.what}: node {fn.ops[0]!r} in {walk.graph.source}"
        plan = layer_plan(name, partial, sums.partial_domain, walk.max_rows, where)
        walk.planned[name] = Planned(plan, partial.steps, Exact(sums.partial_domain))
        reader = walk._add(table_node(name, plan, partial.ops, None), reader)
    total = walk._add(replace(sums.sum_node, name=f"{name}_sum"), reader)
    return Float(total, fn.steps[1:], np.eye(total.shape[0], dtype=bool), fn.ops[1:], None, fn.float32)
