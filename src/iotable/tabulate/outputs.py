"""The output domain a layer's own tables show: for a layer of the user's own that no quantizer closes (a DWN LUT
layer, a DiffLogic gate layer), the values its exhaustive tables hold are every value that can reach the next layer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from ..domain import Domain
from ..errors import ModelError
from ..front.layerplan import LayerPlan
from .layers import tabulate

__all__ = ["MAX_TABLE_VALUES", "table_domain", "with_table_domain"]

#: The most distinct output values a layer's tables may hold when they become its output domain: 8-bit codes.
MAX_TABLE_VALUES = 256


def table_domain(
    module: nn.Module, plan: LayerPlan, *, where: str, options: dict[str, Any], required: bool = True
) -> Domain | None:
    """The union of the values every table of ``plan`` holds, as one :class:`Domain` (float32 values, exactly
    as the module computed them), for the layers that read ``module``'s outputs to enumerate over.

    ``where`` names the layer in refusals; ``options`` are the network builder's (``check``, ``memory_budget``,
    ``fast_path``). A layer whose tables hold more than :data:`MAX_TABLE_VALUES` distinct values (or a value
    that is not finite) is refused, before any later layer is enumerated; where not ``required`` (the model's
    output, which may be raw values), it gets ``None`` instead.
    """
    keys = ("check", "memory_budget", "fast_path")
    done = tabulate(module, plan, **{k: options[k] for k in keys if k in options})
    found: set[float] = set()
    for unit, table in zip(done.plan.units, done.tables):
        values = np.unique(np.asarray(table.output_values(), dtype=np.float32))
        if not np.all(np.isfinite(values)):
            if not required:
                return None
            bad = values[~np.isfinite(values)][0]
            msg = (
                f"{where}: unit {unit.index}'s table holds the value {float(bad)!r}, and no quantizer follows the "
                f"layer; expected finite outputs, so that they can be codes of the next layer's tables: put a "
                f"quantizer after {where}"
            )
            raise ModelError(msg)
        found.update(float(v) + 0.0 for v in values)  # float32 to float64 is exact; -0.0 == 0.0 is one value
    if len(found) > MAX_TABLE_VALUES:
        if not required:
            return None
        msg = (
            f"{where}: no quantizer follows this layer, so its output domain is the set of values its tables hold; "
            f"expected at most {MAX_TABLE_VALUES} distinct values, found {len(found)} in its "
            f"{len(done.plan.units)} unit(s); put a quantizer (iotable.nn.Quantize, or brevitas' QuantIdentity) "
            f"after {where}, or declare its outputs with iotable.decompose(..., output_domain=...)"
        )
        raise ModelError(msg)
    return Domain(sorted(found))


def with_table_domain(
    module: nn.Module, plan: LayerPlan, *, where: str, options: dict[str, Any], required: bool = True
) -> LayerPlan:
    """``plan`` with the output domain its tables show (:func:`table_domain`), in its spec too, whose source says
    where the domain came from; ``plan`` itself where not ``required`` and the values are too many."""
    domain = table_domain(module, plan, where=where, options=options, required=required)
    if domain is None:
        return plan
    spec = replace(
        plan.spec, output_domain=domain, source=f"{plan.spec.source}; output domain: the values of its tables"
    )
    return replace(plan, output_domain=domain, spec=spec)
