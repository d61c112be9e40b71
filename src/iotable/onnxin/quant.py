"""QONNX's quantizers, evaluated exactly: ``Quant`` (integer quantization with a scale, a zero point, a bit
width, ``signed``, ``narrow`` and a rounding mode) and ``MultiThreshold`` (counts of thresholds reached).

QONNX's reference (``qonnx.custom_op.general.intquant.int_quant``) computes ``x / scale + zero_point``,
clamps to ``[min, max]`` and rounds; a signed 1-bit quantizer is bipolar (``x / scale + zero_point >= 0``
gives ``+1``, else ``-1``). Here a table's rows are computed in float64 and quantized with the same rules, so
a row is exact unless its value sits within float32 rounding of a boundary (counted as a near tie).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..domain import Domain
from ..errors import ModelError

__all__ = ["QuantParams", "Rounding", "Thresholds", "TruncParams", "fold_quant"]


class Rounding(Enum):
    """QONNX's rounding modes (``ROUND`` rounds half to even)."""

    ROUND = "ROUND"
    CEIL = "CEIL"
    FLOOR = "FLOOR"
    UP = "UP"
    DOWN = "DOWN"
    HALF_UP = "HALF_UP"
    HALF_DOWN = "HALF_DOWN"

    @classmethod
    def parse(cls, text: str, where: str) -> Rounding:
        """The mode named ``text`` (QONNX's names and aliases, any case); an error listing them otherwise."""
        name = _ALIASES.get(text.upper(), text.upper())
        if name in cls.__members__:
            return cls[name]
        accepted = sorted({*cls.__members__, *_ALIASES})
        msg = f"{where}: rounding_mode {text[:40]!r} is not one QONNX defines; expected one of {accepted}"
        raise ModelError(msg)

    def apply(self, y: np.ndarray) -> np.ndarray:
        """``y`` rounded to integers by this mode (numpy's functions, as QONNX's reference uses them)."""
        if self is Rounding.ROUND:
            return np.round(y)
        if self is Rounding.CEIL:
            return np.ceil(y)
        if self is Rounding.FLOOR:
            return np.floor(y)
        if self is Rounding.UP:
            return np.sign(y) * np.ceil(np.abs(y))
        if self is Rounding.DOWN:
            return np.fix(y)
        if self is Rounding.HALF_UP:
            return np.sign(y) * np.floor(np.abs(y) + 0.5)
        return np.sign(y) * np.ceil(np.abs(y) - 0.5)

    @property
    def halves(self) -> bool:
        """Whether the mode's boundaries lie at halves (round to nearest) rather than at integers."""
        return self in (Rounding.ROUND, Rounding.HALF_UP, Rounding.HALF_DOWN)


_ALIASES = {"HALF_EVEN": "ROUND", "ROUND_TO_ZERO": "DOWN"}

#: Relative distance to a rounding boundary or threshold under which a row counts as a near tie: float32
#: arithmetic (qonnx's executor, brevitas) may round it the other way.
NEAR = 1e-5


def _near(distance: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    return np.abs(distance) <= NEAR * np.maximum(1.0, np.abs(magnitude))


def _scaled(y: np.ndarray, scale: float, zero_point: float, float32: bool) -> np.ndarray:
    """``y / scale + zero_point``: in float64, or in float32 as QONNX's reference and onnxruntime compute it where
    ``y`` is a float32 result of the model (a scale of 1/6 puts 0.25 a hair below 1.5 in float64, on it in
    float32)."""
    if not float32:
        return y / scale + zero_point
    return (y.astype(np.float32) / np.float32(scale) + np.float32(zero_point)).astype(np.float64)


@dataclass(frozen=True)
class QuantParams:
    """One activation quantizer's parameters (a per-tensor scale and zero point; float32 values as stored)."""

    scale: float
    zero_point: float
    bits: int
    signed: bool
    narrow: bool
    rounding: Rounding

    @property
    def bipolar(self) -> bool:
        """A signed 1-bit quantizer: QONNX makes it ``+1`` or ``-1`` (times the scale)."""
        return self.bits == 1 and self.signed

    @property
    def qmin(self) -> int:
        return -1 if self.bipolar else Domain.integer_range(self.bits, signed=self.signed, narrow=self.narrow)[0]

    @property
    def qmax(self) -> int:
        return 1 if self.bipolar else Domain.integer_range(self.bits, signed=self.signed, narrow=self.narrow)[1]

    def domain(self) -> Domain:
        """The quantizer's output values, in float32 as QONNX's reference computes them."""
        if self.bipolar:
            q = np.array([-1.0, 1.0], np.float32)
            return Domain((q - np.float32(self.zero_point)) * np.float32(self.scale))
        return Domain.uniform(
            self.bits, signed=self.signed, narrow=self.narrow, scale=self.scale, zero_point=self.zero_point
        )

    def codes(self, y: np.ndarray, *, float32: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Output codes of float64 values ``y`` and a mask of the rows within float32 rounding of a boundary
        (``float32``: ``y`` holds float32 values the model divides by its scale in float32)."""
        t = _scaled(y, self.scale, self.zero_point, float32)
        if self.bipolar:
            return (t >= 0).astype(np.int64), _near(t, t)
        clipped = np.clip(t, self.qmin, self.qmax)
        q = self.rounding.apply(clipped)
        boundary = np.floor(clipped) + 0.5 if self.rounding.halves else np.round(clipped)
        inside = (t > self.qmin) & (t < self.qmax)
        return (q - self.qmin).astype(np.int64), inside & _near(clipped - boundary, t)


@dataclass(frozen=True)
class TruncParams:
    """QONNX's ``Trunc`` (opset 2, brevitas' ``TruncIntQuant``): the input's integers ``round(x / scale +
    zero_point)`` (half to even) divided by ``2 ** round(log2(output_scale / scale))``, clamped to the output
    bit width's range, rounded by ``rounding``; the value ``(q - zero_point / shift) * output_scale``."""

    scale: float
    zero_point: float
    output_scale: float
    bits: int
    signed: bool
    narrow: bool
    rounding: Rounding

    @property
    def shift(self) -> float:
        """The power of two the integers are divided by (QONNX rounds the scales' ratio to one)."""
        return float(2.0 ** np.round(np.log2(np.float32(self.output_scale) / np.float32(self.scale))))

    @property
    def qmin(self) -> int:
        return Domain.integer_range(self.bits, signed=self.signed, narrow=self.narrow)[0]

    @property
    def qmax(self) -> int:
        return Domain.integer_range(self.bits, signed=self.signed, narrow=self.narrow)[1]

    def domain(self) -> Domain:
        zero = float(np.float32(self.zero_point) / np.float32(self.shift))
        return Domain.uniform(
            self.bits, signed=self.signed, narrow=self.narrow, scale=self.output_scale, zero_point=zero
        )

    def codes(self, y: np.ndarray, *, float32: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Output codes of float64 values ``y`` and a mask of the rows within float32 rounding of a boundary
        (of the first rounding to the input's integers; the division by a power of two is exact)."""
        t = _scaled(y, self.scale, self.zero_point, float32)
        integers = np.round(t)
        shifted = np.clip(integers / self.shift, self.qmin, self.qmax)
        q = self.rounding.apply(shifted)
        near = _near(t - (np.floor(t) + 0.5), t)
        return (q - self.qmin).astype(np.int64), near


@dataclass(frozen=True)
class Thresholds:
    """A FINN ``MultiThreshold`` over one channel per row of ``thresholds`` ``(channels, steps)``: the output is
    ``out_bias + out_scale * (number of thresholds t with x >= t)``."""

    thresholds: np.ndarray
    out_scale: float
    out_bias: float

    def domain(self) -> Domain:
        steps = np.arange(self.thresholds.shape[1] + 1, dtype=np.float32)
        return Domain(np.float32(self.out_bias) + np.float32(self.out_scale) * steps)

    def codes(self, y: np.ndarray, channel: int) -> tuple[np.ndarray, np.ndarray]:
        """Codes (counts of thresholds reached) of channel ``channel``'s values and the near-tie mask."""
        t = self.thresholds[channel if self.thresholds.shape[0] > 1 else 0]
        reached = (y[:, None] >= t[None, :]).sum(axis=1)
        near = _near(y[:, None] - t[None, :], y[:, None]).any(axis=1)
        return reached.astype(np.int64), np.asarray(near, bool)


def fold_quant(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, bits: int, *, signed: bool, narrow: bool, mode: Rounding
) -> np.ndarray:
    """A ``Quant`` of constants (a weight quantizer), as QONNX's reference computes it in float32."""
    x32, s32, z32 = (np.asarray(a, np.float32) for a in (x, scale, zero_point))
    y = x32 / s32 + z32
    if bits == 1 and signed:
        y = np.where(y >= 0, np.float32(1), np.float32(-1))
    else:
        low, high = Domain.integer_range(bits, signed=signed, narrow=narrow)
        y = mode.apply(np.clip(y, np.float32(low), np.float32(high))).astype(np.float32)
    return ((y - z32) * s32).astype(np.float64)
