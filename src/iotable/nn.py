"""Modules for training scripts: :class:`Quantize` marks where a table's outputs become codes."""

from __future__ import annotations

import torch

from .brevitas import is_brevitas, quantizer_domain
from .domain import Domain
from .torchao import fake_quantize_domain, is_fake_quantize

__all__ = ["Quantize", "domain_of"]


class Quantize(torch.nn.Module):
    """Integer quantizer with a straight-through estimator; iotable reads its :class:`~iotable.Domain`.

    ``forward`` computes ``q = clamp(round(x / scale + zero_point), min, max)`` (round half to even) and
    returns ``(q - zero_point) * scale`` in float32, so its outputs are exactly ``self.domain.values``.
    Gradients pass straight through the rounding and stop outside the clamp range.

    Args:
        bits: bit width of the integer code.
        signed: signed integer range (``-2**(bits-1) + narrow .. 2**(bits-1) - 1``).
        narrow: drop the most negative (signed) or the largest (unsigned) integer.
        scale: step between neighbouring values (> 0).
        zero_point: integer that represents real 0.

    Example:
        >>> q = Quantize(2, scale=0.5)
        >>> q(torch.tensor([-1.0, 0.2, 0.3, 0.75, 9.0])).tolist()
        [0.0, 0.0, 0.5, 1.0, 1.5]
        >>> q.domain
        Domain.uniform(2, scale=0.5)
    """

    scale: torch.Tensor  # buffers, registered in __init__
    zero_point: torch.Tensor

    def __init__(
        self,
        bits: int,
        *,
        signed: bool = False,
        narrow: bool = False,
        scale: float = 1.0,
        zero_point: float = 0,
    ) -> None:
        super().__init__()
        self.domain = Domain.uniform(bits, signed=signed, narrow=narrow, scale=scale, zero_point=zero_point)
        qmin, qmax = Domain.integer_range(bits, signed=signed, narrow=narrow)
        params = self.domain.params
        self.register_buffer("scale", torch.tensor(params["scale"], dtype=torch.float32))
        self.register_buffer("zero_point", torch.tensor(params["zero_point"], dtype=torch.float32))
        self.qmin, self.qmax = float(qmin), float(qmax)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.clamp(x / self.scale + self.zero_point, self.qmin, self.qmax)
        q = y + (torch.round(y) - y).detach()  # straight-through rounding
        return (q - self.zero_point) * self.scale

    def extra_repr(self) -> str:
        return repr(self.domain)


def domain_of(module: torch.nn.Module) -> Domain | None:
    """The output domain of a quantizer module, or ``None`` when ``module`` is not one iotable knows.

    Quantizers: :class:`Quantize`, torch.ao fake quantizers (``FakeQuantize`` and its fused variants, per
    tensor, observer disabled) and brevitas activation quantizers (with the ``brevitas`` extra).

    Example:
        >>> domain_of(Quantize(1)), domain_of(torch.nn.ReLU())
        (Domain.uniform(1), None)
    """
    if isinstance(module, Quantize):
        return module.domain
    if is_fake_quantize(module):
        return fake_quantize_domain(module)
    if is_brevitas(module):  # brevitas itself is imported only here, for brevitas modules
        return quantizer_domain(module)
    return None
