"""What the walk over a QONNX graph knows of each tensor (the raw input, a node's codes, a float function of
codes, QuantizeLinear's integers) and of each planned table layer."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import ONNXFileError
from ..graph.graph import Meta, Node
from ..graph.kind import definition
from ..layerplan import LayerPlan
from ..layout import Layout
from ..units import Geometry
from .quant import QuantParams, Thresholds, TruncParams
from .read import OnnxOp

__all__ = ["Codes", "Exact", "Float", "Moved", "Planned", "QInt", "Raw", "Step", "in_float32", "node_of", "reshaped"]

Step = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Raw:
    """The graph's input before its quantizer."""


@dataclass(frozen=True)
class Codes:
    """The output of a graph node (codes of its domain)."""

    node: Node


def in_float32(step: Step) -> Step:
    """``step`` on float32 values, its result rounded to float32: the model's float32 arithmetic where ``step`` is
    one operation (``+``, ``-``, ``*``, ``/``, a maximum, a clip) of float32 operands, since the float64 result of
    two float32 operands rounded to float32 is the correctly rounded float32 result."""

    def step32(x: np.ndarray) -> np.ndarray:
        y = step(x.astype(np.float32).astype(np.float64))
        return np.asarray(y).astype(np.float32).astype(np.float64)

    return step32


@dataclass(frozen=True)
class Float:
    """A float64 function of ``source``'s values: ``steps`` in order; ``reads[o, i]`` whether output ``o``
    depends on input (channel) ``i``; ``ops`` the ONNX nodes it holds. Once a step gives float32 values (an
    average pool, a residual add), every later step computes in float32 too, as the model does."""

    source: Node
    steps: tuple[Step, ...]
    reads: np.ndarray
    ops: tuple[str, ...]
    geometry: Geometry | None = None  # a convolution's window: the steps read one window, channel-major
    float32: bool = False  # the steps give float32 values, as the model computes them (after an average pool)
    linear: tuple[np.ndarray, np.ndarray] | None = None  # (W, b) where the first step is W x + b on the codes' values

    @property
    def width(self) -> int:
        return int(self.reads.shape[0])

    def then(self, step: Step, op: OnnxOp, reads: np.ndarray | None = None, *, step32: Step | None = None) -> Float:
        """``step`` after the steps so far; where they give float32 values, ``step32`` (the step as the model
        computes it in float32), or ``step`` on float32 values rounded to float32 (exact for one operation)."""
        new = self.reads if reads is None else reads
        if self.float32:
            step = step32 if step32 is not None else in_float32(step)
        return Float(
            self.source, (*self.steps, step), new, (*self.ops, op.name), self.geometry, self.float32, self.linear
        )


@dataclass(frozen=True, eq=False)
class Moved:
    """A quantizer's codes moved (``Transpose``, then ``Reshape``/``Flatten``): of per-sample ``shape``, element
    ``k`` (C order) being element ``index[k]`` of ``node``'s codes (C order)."""

    node: Node
    shape: tuple[int, ...]
    index: np.ndarray


@dataclass(frozen=True)
class QInt:
    """QuantizeLinear's integers of the raw input or of a layer's float function, before DequantizeLinear:
    ``round(x / scale) + zero`` saturated to ``[low, high]`` (narrowed by a Clip)."""

    data: Raw | Float
    scale: float
    zero: float
    low: int
    high: int


@dataclass(frozen=True)
class Exact:
    """The closing of a partial-sum layer: its values are its codes (integers of ``domain``, exactly)."""

    codes_domain: Domain

    def domain(self) -> Domain:
        return self.codes_domain

    def codes(self, y: np.ndarray, *, float32: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The codes (the values) and no near ties: the sums are exact integers."""
        del float32
        return np.asarray(y).astype(np.int64), np.zeros(len(y), bool)


@dataclass(frozen=True)
class Planned:
    """A table layer whose rows are still to be computed: its plan, its arithmetic and its closing quantizer."""

    plan: LayerPlan
    steps: tuple[Step, ...]
    closing: QuantParams | Thresholds | TruncParams | Exact
    float32: bool = False  # the closing quantizer divides by its scale in float32, as the model does


def node_of(name: str, meta: Meta, shape: tuple[int, ...], domain: Any, fx_node: str | None = None) -> Node:
    """A graph node of the kind ``meta`` belongs to, channels-first (features, or channels and positions)."""
    layout = Layout.channels_first(len(shape) + 1) if len(shape) <= 3 else None
    return Node(name, definition(meta.kind).kind, shape, layout, domain, meta, fx_node)


def reshaped(op: OnnxOp, shape: tuple[int, ...], constants: Mapping[str, np.ndarray], where: str) -> tuple[int, ...]:
    """The per-sample shape a ``Reshape`` or ``Flatten`` gives a tensor of per-sample ``shape``: the batch axis
    kept first, the same number of elements, the target a constant (an :class:`ONNXFileError` otherwise)."""
    size = math.prod(shape)
    if op.op_type == "Flatten":
        if op.attributes.get("axis", 1) not in (1, -len(shape)):
            msg = f"{where}: a Flatten with axis={op.attributes['axis']!r} merges the batch axis; flatten from axis 1"
            raise ONNXFileError(msg)
        return (size,)
    name = op.inputs[1] if len(op.inputs) > 1 else ""
    if name not in constants:
        msg = (
            f"{where}: the shape it reshapes to is computed (a dynamic shape), not a constant; export the model "
            "with a fixed shape (torch.flatten, or view with constant sizes)"
        )
        raise ONNXFileError(msg)
    target = [int(v) for v in constants[name].reshape(-1)]
    rest = [shape[k - 1] if v == 0 and 0 < k <= len(shape) else v for k, v in enumerate(target)][1:]
    known = math.prod(v for v in rest if v != -1)
    if rest.count(-1) == 1 and known and size % known == 0:
        rest = [size // known if v == -1 else v for v in rest]
    if target[:1] not in ([1], [-1], [0]) or any(v < 1 for v in rest) or math.prod(rest) != size:
        msg = (
            f"{where}: reshapes {shape} per sample to {target}; expected the batch first and {size} elements "
            "per sample: export the model with a fixed shape"
        )
        raise ONNXFileError(msg)
    return tuple(rest)
