"""What the walk over a QONNX graph knows of each tensor (the raw input, a node's codes, a float function of
codes, QuantizeLinear's integers) and of each planned table layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.graph import Meta, Node
from ..graph.kind import definition
from ..layerplan import LayerPlan
from ..layout import Layout
from ..units import Geometry
from .quant import QuantParams, Thresholds, TruncParams
from .read import OnnxOp

__all__ = ["Codes", "Float", "Moved", "Planned", "QInt", "Raw", "Step", "node_of"]

Step = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Raw:
    """The graph's input before its quantizer."""


@dataclass(frozen=True)
class Codes:
    """The output of a graph node (codes of its domain)."""

    node: Node


@dataclass(frozen=True)
class Float:
    """A float64 function of ``source``'s values: ``steps`` in order; ``reads[o, i]`` whether output ``o``
    depends on input (channel) ``i``; ``ops`` the ONNX nodes it holds."""

    source: Node
    steps: tuple[Step, ...]
    reads: np.ndarray
    ops: tuple[str, ...]
    geometry: Geometry | None = None  # a convolution's window: the steps read one window, channel-major
    float32: bool = False  # the last step gives float32 values, as the model computes them (an average pool)

    @property
    def width(self) -> int:
        return int(self.reads.shape[0])

    def then(self, step: Step, op: OnnxOp, reads: np.ndarray | None = None) -> Float:
        new = self.reads if reads is None else reads
        return Float(self.source, (*self.steps, step), new, (*self.ops, op.name), self.geometry)


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
class Planned:
    """A table layer whose rows are still to be computed: its plan, its arithmetic and its closing quantizer."""

    plan: LayerPlan
    steps: tuple[Step, ...]
    closing: QuantParams | Thresholds | TruncParams
    float32: bool = False  # the closing quantizer divides by its scale in float32, as the model does


def node_of(name: str, meta: Meta, shape: tuple[int, ...], domain: Any, fx_node: str | None = None) -> Node:
    """A graph node of the kind ``meta`` belongs to, channels-first (features, or channels and positions)."""
    layout = Layout.channels_first(len(shape) + 1) if len(shape) <= 3 else None
    return Node(name, definition(meta.kind).kind, shape, layout, domain, meta, fx_node)
