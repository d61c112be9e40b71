"""torch.ao fake quantizers (``FakeQuantize`` and its fused variants) read as iotable domains.

After quantization-aware training with ``torch.ao.quantization``, a ``FakeQuantize`` whose observer is
disabled is a fixed integer quantizer: ``clamp(round(x / scale) + zero_point, quant_min, quant_max)``, then
``(q - zero_point) * scale``, per tensor. Its outputs are one finite set of values, so it cuts a model into
table layers exactly as :class:`iotable.nn.Quantize` does. A quantizer still observing (its scale would move
with every batch), a per-channel one (one domain per channel of a *weight*-style axis) or a disabled one
(an identity) is refused by name, with the call that fixes it.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.ao.quantization.fake_quantize import FakeQuantizeBase
from torch.ao.quantization.observer import FixedQParamsObserver

from .domain import Domain
from .errors import DomainError, UnsupportedFakeQuantizeError

__all__ = ["fake_quantize_domain", "is_fake_quantize"]

_PER_TENSOR = (torch.per_tensor_affine, torch.per_tensor_symmetric)


def is_fake_quantize(module: nn.Module) -> bool:
    """Whether ``module`` is a torch.ao fake quantizer (``FakeQuantize``, ``FusedMovingAvgObsFakeQuantize``, ...)."""
    return isinstance(module, FakeQuantizeBase)


def _flag(module: nn.Module, name: str) -> bool:
    value = getattr(module, name, None)
    return bool(value[0]) if isinstance(value, torch.Tensor) and value.numel() else bool(value)


def fake_quantize_domain(module: nn.Module, name: str | None = None) -> Domain:
    """The :class:`~iotable.Domain` of a torch.ao fake quantizer's outputs (observer disabled, per tensor).

    The values are the quantizer's own outputs at its integer grid, checked on a ramp across and beyond its
    range, so a model's quantized tensors encode exactly.

    Raises:
        UnsupportedFakeQuantizeError: the observer is enabled, fake quantization is disabled, or the
            quantizer is per channel.

    Example:
        >>> from torch.ao.quantization import FakeQuantize, MinMaxObserver
        >>> fq = FakeQuantize(observer=MinMaxObserver, quant_min=0, quant_max=3)
        >>> _ = fq(torch.linspace(0, 1.5, 7))
        >>> fq.disable_observer()
        >>> fake_quantize_domain(fq).values.tolist()
        [0.0, 0.5, 1.0, 1.5]
    """
    name = name or type(module).__name__
    cls = type(module).__name__
    fixed = isinstance(getattr(module, "activation_post_process", None), FixedQParamsObserver)
    if _flag(module, "observer_enabled") and not fixed:  # a fixed-parameter observer changes nothing
        msg = (
            f"{name}: this {cls}'s observer is still enabled, so its scale and zero point change with every "
            "batch; after training, freeze it with model.apply(torch.ao.quantization.disable_observer)"
        )
        raise UnsupportedFakeQuantizeError(msg)
    if not _flag(module, "fake_quant_enabled"):
        msg = (
            f"{name}: this {cls}'s fake quantization is disabled, so it passes floats through and quantizes "
            "nothing; enable it with model.apply(torch.ao.quantization.enable_fake_quant), or remove it"
        )
        raise UnsupportedFakeQuantizeError(msg)
    qscheme = getattr(module, "qscheme", None)
    scale, zero_point = getattr(module, "scale", None), getattr(module, "zero_point", None)
    if qscheme not in _PER_TENSOR or not isinstance(scale, torch.Tensor) or scale.numel() != 1:
        msg = (
            f"{name}: this {cls} is {qscheme} with {getattr(scale, 'numel', lambda: '?')()} scale(s); iotable reads "
            "per-tensor fake quantizers (one scale and zero point): build it with qscheme=torch.per_tensor_affine "
            "or torch.per_tensor_symmetric"
        )
        raise UnsupportedFakeQuantizeError(msg)
    if not isinstance(zero_point, torch.Tensor):
        msg = f"{name}: this {cls} has no zero_point tensor; expected a torch.ao fake quantizer with one"
        raise UnsupportedFakeQuantizeError(msg)
    # Plain ints on every torch.ao fake quantizer (nn.Module's attribute type says Tensor | Module).
    qmin, qmax = int(cast(int, module.quant_min)), int(cast(int, module.quant_max))
    s, z = float(scale.reshape(())), int(zero_point.reshape(()))
    if not (s > 0 and qmax - qmin < 2**24 and qmin <= qmax):
        msg = (
            f"{name}: this {cls} has scale {s!r} and range {qmin}..{qmax}; expected a scale > 0 and a range of at "
            "most 2**24 codes"
        )
        raise UnsupportedFakeQuantizeError(msg)
    # The quantizer's own outputs at its grid points (computed in float64, then quantized by the module).
    grid = (torch.arange(qmin, qmax + 1, dtype=torch.float64) - z) * s
    values = _run(module, grid.to(scale.dtype))
    domain = _standard(qmin, qmax, s, z)
    if domain is None or not torch.equal(torch.tensor(domain.values, dtype=values.dtype), values.sort().values):
        try:
            domain = Domain.values(values)
        except DomainError as exc:
            msg = f"{name}: this {cls}'s values do not form a domain: {exc}"
            raise UnsupportedFakeQuantizeError(msg) from None
    low, high = float(grid[0]) - 3 * s, float(grid[-1]) + 3 * s  # across the range and three steps beyond
    ramp = torch.linspace(low, high, 4 * len(grid) + 25, dtype=torch.float64)
    try:
        domain.encode(_run(module, ramp.to(scale.dtype)))
    except DomainError as exc:
        msg = f"{name}: this {cls}'s outputs are not the values its scale and zero point state: {exc}"
        raise UnsupportedFakeQuantizeError(msg) from None
    return domain


def _run(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The fake quantizer on ``x`` without touching its state (its observer is disabled, so none changes)."""
    with torch.no_grad():
        return module(x).detach()


def _standard(qmin: int, qmax: int, scale: float, zero_point: int) -> Domain | None:
    """``Domain.uniform`` of the integer range ``qmin..qmax`` when it is a standard bits / signed / narrow range."""
    for bits in range(1, 25):
        for signed in (False, True):
            for narrow in (False, True):
                if Domain.integer_range(bits, signed=signed, narrow=narrow) == (qmin, qmax):
                    try:
                        return Domain.uniform(bits, signed=signed, narrow=narrow, scale=scale, zero_point=zero_point)
                    except DomainError:
                        return None
    return None
