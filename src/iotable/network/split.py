"""Layers too large for one table, split into exact arithmetic: partial sums, an adder tree and a threshold.

A linear layer (``nn.Linear``, brevitas' ``QuantLinear``) on quantized inputs computes, per output,
``sum_i W[o, i] * x[i] + b[o]``. Where its fan-in makes one table per neuron too large, and the float32 sum is
exact (every weight and input value a multiple of a power of two, and the sum of the magnitudes of the products
below ``2**24`` steps of their grid, so no product and no partial sum rounds, in any order), the layer becomes:

- tables of *partial sums* over groups of ``g`` inputs (each table the integer sum of its group's weighted codes),
  or, for ``g = 1``, the weights folded into the adder (shifts and adds, the pairs the outputs have in common
  shared: :mod:`iotable.subexpressions`);
- a ``sum`` node adding the partial sums and the bias (its values the layer's float32 outputs, exactly);
- the rest of the layer (batch norm, activation, its quantizer) as one table per output over the sum's codes,
  which becomes a ``threshold`` node where that is cheaper (:mod:`.thresholds`).

``g`` is chosen from the LUT estimates of the forms (:mod:`iotable.lutcount`), before any row is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..brevitas import is_brevitas
from ..domain import Domain
from ..front.spec import decompose
from ..graph.fields import element_domains
from ..graph.nodes import Node
from .arithmetic import Inexact
from .sums import Groups, check_exact, linear_sums

__all__ = ["PartialSums", "Split", "linear_split"]


class PartialSums(nn.Module):
    """Integer partial sums of codes: output ``j`` is ``sum_t weights[j, t] * code(x[index[j, t]]) - low[j]`` with
    ``code(x) = (x - v0) / d`` (``-1`` pads ``index``; ``low[j]`` the smallest partial sum of group ``j``, so each
    group's codes start at 0). What a partial-sum table layer tabulates."""

    index: torch.Tensor
    weights: torch.Tensor
    v0: torch.Tensor
    step: torch.Tensor
    low: torch.Tensor

    def __init__(self, index: np.ndarray, weights: np.ndarray, v0: np.ndarray, d: np.ndarray, low: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float64))
        self.register_buffer("index", torch.as_tensor(np.maximum(index, 0), dtype=torch.int64))
        self.register_buffer("weights", torch.as_tensor(np.where(index >= 0, weights, 0), dtype=torch.float64))
        self.register_buffer("v0", torch.as_tensor(v0, dtype=torch.float64))
        self.register_buffer("step", torch.as_tensor(np.where(d == 0, 1.0, d), dtype=torch.float64))

    @classmethod
    def of(cls, groups: Groups) -> PartialSums:
        """The module of the partial sums ``groups`` describes."""
        return cls(groups.index, groups.weights, groups.v0, groups.d, groups.low)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = torch.round((x.to(torch.float64) - self.v0) / self.step)
        return ((codes[:, self.index] * self.weights).sum(-1) - self.low).to(torch.float32)


@dataclass
class Split:
    """A layer as arithmetic: the partial-sum tables (``None`` for ``g = 1``), the sum node, the estimates."""

    group: int
    partial: PartialSums | None
    partial_domain: Domain | None
    sum_node: Node
    estimate: int
    table_estimate: int


def affine_weights(layer: nn.Module, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` a linear layer computes with, as float64 arrays: ``nn.Linear``'s, or brevitas' quantized ones."""
    module: Any = layer
    if is_brevitas(module):
        for flag in ("is_input_quant_enabled", "is_output_quant_enabled"):
            if getattr(module, flag, False):
                msg = f"{where}: quantizes its {flag.split('_')[1]} itself; put that quantizer in its own module"
                raise Inexact(msg)
        weight = module.quant_weight().value
        bias = module.quant_bias().value if getattr(module, "is_bias_quant_enabled", False) else module.bias
    elif type(module) is nn.Linear:
        weight, bias = module.weight, module.bias
    else:
        msg = f"{where}: a {type(module).__name__} is not a linear layer iotable reads the weights of"
        raise Inexact(msg)
    w = weight.detach().to(torch.float64).numpy()
    b = np.zeros(w.shape[0]) if bias is None else bias.detach().to(torch.float64).numpy().reshape(-1)
    return w, b


def linear_split(step_name: str, module: nn.Module, src: Node, where: str, *, k: int = 6) -> Split:
    """The arithmetic form of a linear layer reading ``src`` (see the module docstring); :class:`Inexact` naming the
    layer and why where its float32 sums may round."""
    if len(src.shape) != 1 or src.domain is None:
        msg = f"{where}: splits a layer of flat quantized features; {src.name!r} gives {src.shape} ({src.domain!r})"
        raise Inexact(msg)
    w, b = affine_weights(module, where)
    check_exact(w, b, src, where)
    _check_weights(module, w, b, src, where)
    sums = linear_sums(step_name, w, b, src, where, k=k)
    partial = None if sums.partial is None else PartialSums.of(sums.partial)
    return Split(sums.group, partial, sums.partial_domain, sums.sum_node, sums.estimate, sums.table_estimate)


def _check_weights(module: nn.Module, w: np.ndarray, b: np.ndarray, src: Node, where: str) -> None:
    """The layer computes ``W x + b`` with the weights read: on random inputs of its domain, exactly."""
    domains = element_domains(src)
    domains = domains * src.shape[0] if len(domains) == 1 else domains
    generator = np.random.default_rng(0)
    x = np.stack([generator.choice(d.values, 64) for d in domains], axis=1).astype(np.float32)
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    got = getattr(out, "value", out).detach().to(torch.float64).numpy()
    if not np.array_equal(got, x.astype(np.float64) @ w.T + b):
        msg = f"{where}: its outputs differ from W x + b with the weights it holds; iotable cannot read it as linear"
        raise Inexact(msg)


def fan_ins(partial: PartialSums) -> list[tuple[int, ...]]:
    """The inputs each partial-sum table reads (its group's elements)."""
    index = partial.index.numpy()
    weights = partial.weights.numpy()
    return [tuple(int(i) for i, w in zip(row, ws) if w != 0) or (int(row[0]),) for row, ws in zip(index, weights)]


def declare(partial: PartialSums, domain: Domain) -> PartialSums:
    """``partial`` decorated as a table layer: each output one table of its group, codes of ``domain``."""
    decompose(partial, fan_in=fan_ins(partial), output_domain=domain)
    return partial
