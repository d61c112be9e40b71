"""A QONNX ``MatMul``/``Gemm`` layer too wide for one table per output, split as the torch route splits a linear
layer (:mod:`iotable.network.split`, through its front-end-neutral part :mod:`iotable.network.sums`): tables of
partial sums over groups of non-zero weights, a sum node adding them and the bias (the layer's float32 values,
exactly), then the rest of the layer up to its quantizer as one table per output over the sum's codes. Only where
the float32 sums are exact; otherwise the layer stays refused, with the reason."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TableTooLargeError
from ..network.arithmetic import Inexact
from ..network.sums import linear_sums
from .plans import layer_plan, table_node
from .state import Exact, Float, Planned

if TYPE_CHECKING:
    from .layers import Walk

__all__ = ["split_linear"]


def split_linear(walk: Walk, fn: Float, too_large: str) -> Float:
    """The partial-sum layer and the sum node of ``fn``'s first step (``W x + b``) added to ``walk``; what is left of
    ``fn`` as a function of the sum's values. A :class:`TableTooLargeError` (``too_large`` and why the sums may
    round) where they are not exact."""
    assert fn.linear is not None
    w, b = fn.linear
    where = f"{walk.what}: node {fn.ops[0]!r} in {walk.graph.source}"
    name = f"layer{len(walk.planned)}"
    try:
        sums = linear_sums(name, w, b, fn.source, where)
    except Inexact as inexact:
        raise TableTooLargeError(f"{too_large}; nor is it exact arithmetic: {inexact}") from None
    reader = fn.source
    if sums.partial is not None and sums.partial_domain is not None:
        groups = sums.partial
        fan_ins = groups.fan_ins()
        reads = np.zeros((len(fan_ins), fn.source.shape[0]), bool)
        for j, inputs in enumerate(fan_ins):
            reads[j, list(inputs)] = True
        partial = Float(fn.source, (groups.values,), reads, fn.ops[:1])
        plan = layer_plan(name, partial, sums.partial_domain, walk.max_rows, where)
        walk.planned[name] = Planned(plan, partial.steps, Exact(sums.partial_domain))
        reader = walk._add(table_node(name, plan, partial.ops, None), reader)
    total = walk._add(replace(sums.sum_node, name=f"{name}_sum"), reader)
    width = total.shape[0]
    return Float(total, fn.steps[1:], np.eye(width, dtype=bool), fn.ops[1:], None, fn.float32)
