"""The interlayer graph's parts: the typed metadata of each built-in node kind, nodes and edges.

A hardware generator is written from these records alone (see ``docs/graph.md``). Every node holds its
kind's metadata as one frozen dataclass (:class:`TableMeta`, :class:`PadMeta`, :class:`WindowMeta`, ...):
exactly the fields that kind needs, each stored once. What follows from other fields is a property, not a
field: a table node's positions are its shape, a window's input layout is the node's layout, and which
nodes feed a node is what the edges say (:meth:`Graph.inputs <iotable.graph.Graph.inputs>`).

Nodes, edges and metadata are immutable: arrays they hold are read-only copies, so that two networks can
share one graph. Their types are not checked when they are made; :meth:`Graph.check
<iotable.graph.Graph.check>` checks everything, so a graph read from disk is trusted only after it passes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._util import display as _display
from .._util.order import ElementOrder
from ..domain import Domain
from ..errors import GraphError, SpecError
from ..layout import Layout, PaddingMode
from ..units import Unit
from .kind import BUILTIN_KINDS, NodeKind, definitions, find

if TYPE_CHECKING:
    from torch import nn

    from ..layerplan import LayerPlan

__all__ = [
    "META",
    "ArgmaxMeta",
    "DomainSpec",
    "DuplicateMeta",
    "Edge",
    "ElementOrder",
    "GraphError",
    "HostMeta",
    "InputMeta",
    "JoinMeta",
    "Meta",
    "Node",
    "NodeKind",
    "OutputMeta",
    "PadMeta",
    "PoolMeta",
    "ReshapeMeta",
    "SumMeta",
    "TableMeta",
    "ThresholdMeta",
    "WindowMeta",
    "pad_index_map",
    "window_buffer_depth",
]


#: A node's output domain: one for every element, one per channel, or ``None`` for raw (float) values.
DomainSpec = Domain | tuple[Domain, ...] | None


def _frozen_array(value: Any) -> Any:
    """A read-only copy of an array (anything else as it is, for :meth:`Graph.check` to judge)."""
    if isinstance(value, np.ndarray):
        value = np.array(value)
        value.flags.writeable = False
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    return bool(a == b)


@dataclass(frozen=True, eq=False)
class Meta:
    """Base of the per-kind metadata records: frozen, arrays read-only, equal when every field is equal."""

    #: The node kind this record belongs to: set when its kind is registered (:func:`~iotable.graph.kind.register`).
    kind: ClassVar[NodeKind]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                object.__setattr__(self, f.name, _frozen_array(value))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self))

    __hash__ = None  # type: ignore[assignment]  # arrays: compared by value, not hashable


@dataclass(frozen=True, eq=False)
class InputMeta(Meta):
    """The network input. Its per-sample shape, layout and domain are the node's own."""


@dataclass(frozen=True, eq=False)
class OutputMeta(Meta):
    """The network output: its producer's output, passed on unchanged."""


@dataclass(frozen=True, eq=False)
class TableMeta(Meta):
    """A table layer: its units, each one table, applied at every position of a window (weight sharing).

    Attributes:
        layer: the name of the layer's tables in the network (``net[layer]``).
        units: the units, in unit order (``units[u].index == u``): input channels, output channels, fan-in
            and rows of each.
        unit_bits: address bits of each unit as hardware packs them: the fields of the elements it reads,
            each :func:`iotable.bits.width` bits (a one-value domain's code still a 1-bit field).
        index_map: ``int64`` array ``(units, largest fan-in)``; entry ``[u, j]`` is the element that feeds
            input ``j`` of unit ``u``: its flat index (C order) in the producer's per-sample output, or its
            index in the window vector when a window feeds the table; ``-1`` pads units of a smaller fan-in.
            Input ``j`` is digit ``j`` of the unit's packed address, the first input most significant.
        modules: the qualified names of the model's modules the layer fuses (information).
    """

    layer: str
    units: tuple[Unit, ...]
    unit_bits: tuple[int, ...]
    index_map: np.ndarray
    modules: tuple[str, ...] = ()

    @property
    def fan_ins(self) -> tuple[int, ...]:
        """The fan-in of each unit."""
        return tuple(u.fan_in for u in self.units)


@dataclass(frozen=True, eq=False)
class PadMeta(Meta):
    """Padding of the spatial axes, before a window.

    Attributes:
        padding: a ``(before, after)`` pair per spatial axis.
        mode: what the padded places read (:class:`~iotable.layout.PaddingMode`).
        pad_codes: each channel's code of real 0 (mode ``zeros``), else ``None``.
        index_map: ``int64`` array of the node's shape: for every output element, the flat index (C order)
            of the input element it copies, or ``-1`` where it holds its channel's pad code
            (:func:`pad_index_map`).
    """

    padding: tuple[tuple[int, int], ...]
    mode: PaddingMode
    pad_codes: tuple[int, ...] | None
    index_map: np.ndarray


@dataclass(frozen=True, eq=False)
class WindowMeta(Meta):
    """A sliding window; its output is one window vector per output position.

    The node's layout is the layout of the input it reads; its shape is ``(*positions, channels * taps)``.

    Attributes:
        kernel: kernel size per spatial axis.
        stride: stride per spatial axis.
        dilation: dilation per spatial axis.
        channels: channels of the input.
        element_order: the order of a window vector's elements (:class:`ElementOrder`).
        buffer_depth: the elements a line buffer holds to stream the input in raster order, all channels
            of a position together (:func:`window_buffer_depth`).
    """

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    channels: int
    element_order: ElementOrder
    buffer_depth: int

    @property
    def taps(self) -> int:
        """Kernel positions in one window."""
        return math.prod(self.kernel)

    @classmethod
    def of_plan(cls, plan: LayerPlan, size: tuple[int, ...]) -> WindowMeta:
        """The window a spatial layer ``plan`` slides over an input of spatial ``size`` (after its padding)."""
        g = plan.geometry
        return cls(
            kernel=g.kernel,
            stride=g.stride,
            dilation=g.dilation,
            channels=plan.in_channels,
            element_order=ElementOrder.of(plan.layout),
            buffer_depth=window_buffer_depth(g.kernel, g.dilation, size, plan.in_channels),
        )


@dataclass(frozen=True, eq=False)
class ReshapeMeta(Meta):
    """Flatten / view of the codes: the node's shape is the new shape, elements in C order."""


@dataclass(frozen=True, eq=False)
class DuplicateMeta(Meta):
    """Fan-out of one producer to ``outputs`` consumers, one output port each."""

    outputs: int


@dataclass(frozen=True, eq=False)
class JoinMeta(Meta):
    """Concatenation of the operands (input ports in order) along the channel axis.

    Attributes:
        op: ``"concat"``.
        for_add: the join gathers the two operands of an add, which the table after it sums (a table of
            fan-in 2 per element).
    """

    op: str = "concat"
    for_add: bool = False


@dataclass(frozen=True, eq=False)
class PoolMeta(Meta):
    """Max-pooling of codes (codes ascend with values, so the max of codes is the code of the max).

    Attributes:
        kernel_size, stride, padding, dilation: per spatial axis, as ``torch.nn.MaxPool1d/2d`` take them.
        ceil_mode: the last window may start in the padding (torch's ``ceil_mode``).
        modules: the qualified name of the model's pooling module (information).
    """

    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool = False
    modules: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class HostMeta(Meta):
    """A module run with torch on decoded values (not tabulated); its output is raw values.

    Attributes:
        module: the torch module the runtime runs.
        modules: the qualified names of the model's modules it stands for.
    """

    module: nn.Module
    modules: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class SumMeta(Meta):
    """Weighted sums of codes, in exact integer arithmetic: an adder tree in hardware.

    Output element ``k`` (flat, C order) has the code ``constant[k] + sum_j weights[k, j] *
    x[index_map[k, j]]``, ``x`` the producer's codes flattened in C order. The node's domain gives the
    value of each code; the builder chose ``weights`` and ``constant`` so that the value is what the model
    computes (the producer's domains are affine in their codes).

    Attributes:
        index_map: ``int64`` array ``(outputs, terms)``: the flat index of each term's element, ``-1`` pads
            rows of fewer terms.
        weights: ``int64`` array ``(outputs, terms)``: each term's weight (``0`` where padded; all ones for
            a popcount).
        constant: ``int64`` array ``(outputs,)``: what each sum adds.
        exact: why the integer sum equals the model's float arithmetic (shown by :meth:`summary`).
        modules: the qualified names of the model's modules (or calls) the sum stands for (information).
    """

    index_map: np.ndarray
    weights: np.ndarray
    constant: np.ndarray
    exact: str = ""
    modules: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class ArgmaxMeta(Meta):
    """The index of the largest code along one axis (ties: the first, as ``torch.argmax``): a comparator tree.

    The producer's elements along ``dim`` share one domain, so the largest code is the largest value; the
    node's shape is the producer's without ``dim`` (with it, of size 1, when ``keepdim``), its domain the
    indices ``0 .. size - 1``.

    Attributes:
        dim: the axis of the producer's per-sample shape.
        keepdim: the axis stays, of size 1.
        modules: the qualified names of the model's modules (or calls) it stands for (information).
    """

    dim: int
    keepdim: bool = False
    modules: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class ThresholdMeta(Meta):
    """A monotone step function of each code: comparisons against constants (FINN's ``MultiThreshold``).

    Element ``k`` (flat, C order; the node's shape is the producer's) has the code ``start[k] +
    direction[k] * count``, ``count`` the number of ``thresholds[k, j]`` at most the input code. Each row
    ascends; a row of fewer steps is padded with the producer's domain size, a threshold no code reaches.

    Attributes:
        thresholds: ``int64`` array ``(elements, steps)``.
        start: ``int64`` array ``(elements,)``: the code below the first threshold.
        direction: ``int64`` array ``(elements,)``: ``1`` (the step function ascends) or ``-1``.
        modules: the qualified names of the model's modules it stands for (information).
    """

    thresholds: np.ndarray
    start: np.ndarray
    direction: np.ndarray
    modules: tuple[str, ...] = ()


class _BuiltinRecords(Mapping[NodeKind, type]):
    """The record of each built-in kind, read from the registry (the kinds register their records)."""

    def _now(self) -> dict[NodeKind, type]:
        held = {kind.value: d.meta for kind, d in definitions().items()}
        return {NodeKind(name): held[name] for name in BUILTIN_KINDS if name in held}

    def __getitem__(self, kind: NodeKind) -> type:
        return self._now()[kind]

    def __iter__(self) -> Iterator[NodeKind]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return repr(self._now())


#: The metadata record of each built-in node kind (every kind's, built-in or not, is
#: :attr:`iotable.graph.kind.NodeKindDef.meta`).
META: Mapping[NodeKind, type] = _BuiltinRecords()


@dataclass(frozen=True)
class Node:
    """One node: its name, kind, per-sample output shape, layout, domain and its kind's metadata.

    Which nodes feed it is what the graph's edges say (:meth:`Graph.inputs <iotable.graph.Graph.inputs>`).
    ``fx_node`` names the traced node it stands for (what :func:`iotable.verify` compares it with).
    """

    name: str
    kind: NodeKind
    shape: tuple[int, ...]
    layout: Layout | None
    domain: DomainSpec
    meta: Any = None
    fx_node: str | None = None

    def __post_init__(self) -> None:
        if self.meta is None and isinstance(self.kind, NodeKind):
            found = find(self.kind)
            record = found.meta if found is not None else None
            if record is not None and not dataclasses.fields(record):
                object.__setattr__(self, "meta", record())  # kinds without fields: their empty record

    __hash__ = None  # type: ignore[assignment]  # its metadata holds arrays

    @property
    def channels(self) -> int:
        """Size of the channel axis of the output (the only axis for ``"NC"``)."""
        if self.layout is None or not self.shape:
            return math.prod(self.shape)
        return self.shape[-1] if self.layout.channels_last else self.shape[0]

    @property
    def spatial_size(self) -> tuple[int, ...]:
        """The spatial sizes of the output (positions of a table or window node); ``()`` without a layout."""
        if self.layout is None or not self.layout.spatial_rank:
            return ()
        if self.kind.windowed or self.layout.channels_last:
            return tuple(self.shape[:-1])
        return tuple(self.shape[1:])

    def channel_domains(self) -> tuple[Domain, ...] | None:
        """The output domain of each channel, or ``None`` for raw values."""
        if self.domain is None:
            return None
        if isinstance(self.domain, Domain):
            return (self.domain,) * self.channels
        return self.domain

    def __repr__(self) -> str:
        text = f"Node({_display.name(self.name)}, {self.kind.value}, shape {self.shape}"
        if isinstance(self.meta, TableMeta):
            units = self.meta.units
            text += f", {len(units)} units, {sum(u.rows for u in units):,} rows"
        elif isinstance(self.meta, WindowMeta):
            text += f", buffer {self.meta.buffer_depth}, stride {self.meta.stride}"
        return _display.bounded(text + ")")


@dataclass(frozen=True)
class Edge:
    """A connection from a producer's output port to a consumer's input port.

    ``shape``, ``layout`` and ``domain`` describe the elements that travel: the producer's output.
    """

    producer: str
    producer_port: int
    consumer: str
    consumer_port: int
    shape: tuple[int, ...]
    layout: Layout | None
    domain: DomainSpec

    def __repr__(self) -> str:
        text = (
            f"Edge({_display.name(self.producer)}[{self.producer_port}] -> {_display.name(self.consumer)}"
            f"[{self.consumer_port}], shape {self.shape}, {bits_label(self.domain)}"
        )
        return _display.bounded(text + ")")


def bits_label(domain: DomainSpec) -> str:
    """Bits per element of a domain spec: ``2 bit``, ``2/3 bit`` (channels differ), or ``float`` (raw values)."""
    if domain is None:
        return "float"
    domains = (domain,) if isinstance(domain, Domain) else domain
    return "/".join(str(b) for b in sorted({d.bits for d in domains})) + " bit"


def window_buffer_depth(
    kernel: tuple[int, ...], dilation: tuple[int, ...], size: tuple[int, ...], channels: int
) -> int:
    """Line-buffer depth in elements of a sliding window over an input of spatial ``size``.

    2-D: ``((k_h - 1) * d_h * W + (k_w - 1) * d_w + 1) * C``; 1-D: ``((k - 1) * d + 1) * C``.

    Example:
        >>> window_buffer_depth((3, 3), (1, 1), (8, 8), 4)
        76
    """
    if len(kernel) == 1:
        return ((kernel[0] - 1) * dilation[0] + 1) * channels
    (k_h, k_w), (d_h, d_w), width = kernel, dilation, size[1]
    return ((k_h - 1) * d_h * width + (k_w - 1) * d_w + 1) * channels


def pad_index_map(
    shape: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    mode: str | PaddingMode,
    *,
    channels_last: bool = False,
) -> np.ndarray:
    """What every element of a padded tensor holds: the flat index of the input element it copies, or ``-1``.

    ``shape`` is the per-sample input shape (channels first, or last with ``channels_last``), ``padding``
    one ``(before, after)`` pair per spatial axis. The result has the padded shape; entry ``e`` is the
    C-order flat index into the input of the element that ``e`` copies, or ``-1`` where ``e`` holds its
    channel's pad code (mode ``"zeros"``). Every mode pads axis by axis, so a corner copies the copy of
    an edge, as torch's padding does.

    Raises:
        SpecError: a padding wider than the mode allows (reflect: less than the extent, circular: at most).

    Example:
        >>> pad_index_map((1, 3), ((2, 1),), "reflect").tolist()
        [[2, 1, 0, 1, 2, 1]]
        >>> pad_index_map((2, 2), ((1, 0),), "zeros").tolist()
        [[-1, 0, 1], [-1, 2, 3]]
    """
    mode = PaddingMode.parse(mode, what="pad_index_map")
    shape = tuple(int(n) for n in shape)
    first = 0 if channels_last else 1
    if len(padding) != len(shape) - 1:
        msg = f"pad_index_map: {len(padding)} (before, after) pair(s) for the {len(shape) - 1} spatial axes of {shape}"
        raise SpecError(msg)
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    for axis, (before, after) in enumerate(padding):
        sources = mode.sources(shape[first + axis], int(before), int(after))
        taken = np.take(index, np.maximum(sources, 0), axis=first + axis)
        held = (sources < 0).reshape([-1 if a == first + axis else 1 for a in range(len(shape))])
        index = np.where(held, -1, taken)
    return index
