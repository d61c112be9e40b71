"""A QONNX table layer's plan and graph nodes: the units (one per output channel, reading the input channels its
weights do not zero), their sizes checked against ``max_rows``, and for a convolution the pad and window
nodes it reads through and its arithmetic on one window."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import ModelError, TableTooLargeError
from ..graph.graph import ElementOrder, Node, PadMeta, TableMeta, WindowMeta, pad_index_map
from ..layerplan import LayerPlan
from ..layout import Layout, PaddingMode
from ..nodekinds.table import expected_index_map
from ..units import Geometry, Spec, Unit
from .read import OnnxOp
from .state import Float, node_of

__all__ = ["conv_function", "domains_of", "layer_plan", "table_node", "window_nodes"]


def domains_of(src: Node) -> tuple[Domain, ...]:
    """One domain per channel of ``src`` (per feature for flat outputs)."""
    channels = src.shape[0] if len(src.shape) > 1 else math.prod(src.shape)
    if isinstance(src.domain, Domain):
        return (src.domain,) * channels
    if src.domain is None:
        msg = f"{src.name}: produces raw values, which no table can read"
        raise ModelError(msg)
    return tuple(src.domain)


def layer_plan(name: str, fn: Float, output: Domain, max_rows: int, where: str) -> LayerPlan:
    """The plan of the layer ``fn`` computes, closed by a quantizer of domain ``output``."""
    src = fn.source
    domains = domains_of(src)
    geometry = fn.geometry or Geometry()
    window = geometry.window
    units = []
    for o in range(fn.width):
        channels = tuple(int(i) for i in np.flatnonzero(fn.reads[o]))
        if not channels:  # every weight 0 after quantization: a constant, as a table over the first input
            channels = (0,)
        rows = math.prod(len(domains[c]) for c in channels) ** window
        if rows > max_rows:
            msg = (
                f"{where}: output {o} of layer {name!r} reads {len(channels) * window} inputs, a table of {rows:,} "
                f"rows, more than max_rows={max_rows:,}; prune its fan-in (sparse weights) or use fewer bits"
            )
            raise TableTooLargeError(msg)
        units.append(Unit(o, channels, (o,), len(channels) * window, rows))
    rank = geometry.rank
    layout = Layout.channels_first(rank + 2)
    size = tuple(src.shape[1:])
    positions = geometry.output_size(size) if rank else ()
    slot = tuple(-(-b // s) for b, s in zip(geometry.before, geometry.stride))  # a window inside the input
    spec = Spec(per_output=True, layout=layout, output_domain=output, source="QONNX graph")
    if rank:
        spec = Spec(
            kernel_size=geometry.kernel,
            stride=geometry.stride,
            dilation=geometry.dilation,
            padding=geometry.padding,
            padding_mode=geometry.padding_mode,
            per_output=True,
            layout=layout,
            output_domain=output,
            source="QONNX graph",
        )
    return LayerPlan(
        name=name,
        spec=spec,
        layout=layout,
        geometry=geometry,
        in_channels=len(domains),
        out_channels=fn.width,
        units=tuple(units),
        input_domains=domains,
        output_domain=output,
        frame_in=(len(domains), *size),
        frame_out=(fn.width, *positions),
        slots=(slot,),
        fill_codes=tuple(d.zero_code or 0 for d in domains),
        max_rows=max_rows,
    )


def table_node(name: str, plan: LayerPlan, ops: tuple[str, ...], tensor: str | None) -> Node:
    """The table node of ``plan`` (``tensor``: the ONNX tensor its codes stand for, which verify compares; ``None``
    for a partial-sum layer, which stands for none)."""
    lengths = np.array([len(u.in_channels) for u in plan.units], np.int64)
    flat = np.array([c for u in plan.units for c in u.in_channels], np.int64)
    rank = plan.geometry.rank
    order = ElementOrder.of(plan.layout) if rank else None
    meta = TableMeta(
        layer=name,
        units=plan.units,
        unit_bits=tuple(int(b) for b in plan.table_bits[0]),
        index_map=expected_index_map(lengths, flat, taps=plan.geometry.window, channels=plan.in_channels, order=order),
        modules=ops,
    )
    return node_of(name, meta, tuple(plan.frame_out), plan.output_domain, tensor)


def window_nodes(name: str, src: Node, plan: LayerPlan) -> list[Node]:
    """The pad node (where the convolution pads, with the code of real 0) and the window node it reads through."""
    g = plan.geometry
    nodes = []
    size = tuple(src.shape[1:])
    domain: Any = src.domain
    if g.padded:
        codes = []
        for c, d in enumerate(plan.input_domains):
            if d.zero_code is None:
                msg = (
                    f"{name}: the convolution pads with real 0, but input channel {c}'s domain {d!r} has no 0; "
                    "export the model with pads=0, or quantize its input to a domain that holds 0"
                )
                raise ModelError(msg)
            codes.append(d.zero_code)
        index_map = pad_index_map(src.shape, g.padding, PaddingMode.ZEROS, channels_last=False)
        meta = PadMeta(padding=g.padding, mode=PaddingMode.ZEROS, pad_codes=tuple(codes), index_map=index_map)
        nodes.append(node_of(f"{name}:pad", meta, tuple(index_map.shape), domain))
        size = g.padded_size(size)
    window = WindowMeta.of_plan(plan, size)
    per_element = domain if isinstance(domain, Domain) else tuple(d for d in domain for _ in range(g.window))
    positions = tuple(plan.frame_out[1:])
    nodes.append(node_of(f"{name}:window", window, (*positions, plan.in_channels * g.window), per_element))
    return nodes


def _ints(op: OnnxOp, name: str, count: int, default: int, where: str) -> tuple[int, ...]:
    value = op.attributes.get(name, (default,) * count)
    if not isinstance(value, tuple) or len(value) != count or any(v < (0 if name == "pads" else 1) for v in value):
        msg = f"{where}: attribute {name!r} is {value!r}; expected {count} integers"
        raise ModelError(msg)
    return value


def conv_function(op: OnnxOp, src: Node, weight: np.ndarray, bias: np.ndarray | None, where: str) -> Float:
    """A ``Conv`` of ``src``'s codes as a float function of one window (channel-major), and its geometry."""
    rank = len(src.shape) - 1
    if rank not in (1, 2) or weight.ndim != rank + 2:
        msg = f"{where}: a Conv of a {src.shape} input with weights {weight.shape}; expected a 1D or 2D convolution"
        raise ModelError(msg)
    if op.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        msg = f"{where}: auto_pad={op.attributes['auto_pad']!r}; export the model with explicit pads"
        raise ModelError(msg)
    channels, groups = src.shape[0], int(op.attributes.get("group", 1))
    outputs, per_group = weight.shape[0], weight.shape[1]
    if groups < 1 or channels % groups or outputs % groups or per_group * groups != channels:
        msg = f"{where}: weights {weight.shape} with group={groups} for {channels} input channel(s)"
        raise ModelError(msg)
    kernel = tuple(int(k) for k in weight.shape[2:])
    pads = _ints(op, "pads", 2 * rank, 0, where)
    geometry = Geometry(
        kernel=kernel,
        stride=_ints(op, "strides", rank, 1, where),
        dilation=_ints(op, "dilations", rank, 1, where),
        padding=tuple((pads[k], pads[k + rank]) for k in range(rank)),
    )
    if any(n < 1 for n in geometry.output_size(tuple(src.shape[1:]))):
        msg = f"{where}: the kernel {kernel} does not fit the (padded) input {src.shape}"
        raise ModelError(msg)
    window = math.prod(kernel)
    full = np.zeros((outputs, channels, window))
    out_per_group = outputs // groups
    for o in range(outputs):
        first = (o // out_per_group) * per_group
        full[o, first : first + per_group] = weight[o].reshape(per_group, window)
    reads = (full != 0).any(axis=2)
    matrix = full.reshape(outputs, channels * window).T.copy()
    b = np.zeros(outputs) if bias is None else bias.reshape(-1)
    if b.size != outputs:
        msg = f"{where}: a bias of {b.size} values for {outputs} output channel(s)"
        raise ModelError(msg)
    return Float(src, (lambda x: x @ matrix + b,), reads, (op.name,), geometry)
