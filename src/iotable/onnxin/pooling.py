"""Pooling and truncation in a QONNX graph: ``MaxPool`` of codes as the torch route's ``pool`` node,
``AveragePool`` as a depthwise window whose quantizer (``Quant``, or brevitas' ``Trunc``) closes a table layer,
and QONNX's ``Trunc`` as a closing quantizer of its own (exact by its opset-2 rules)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ONNXFileError
from ..graph.graph import PoolMeta
from ..units import Geometry
from .layers import QONNX_OPERATIONS, Walk
from .quant import Rounding, TruncParams
from .read import OnnxOp
from .state import Codes, Float, node_of

__all__ = ["pool_geometry"]

_FIX = "export the pooling with explicit kernel_shape, strides and pads (auto_pad NOTSET)"


def _ints(op: OnnxOp, name: str, count: int, default: int, low: int, where: str) -> tuple[int, ...]:
    value = op.attributes.get(name, (default,) * count)
    if not isinstance(value, tuple) or len(value) != count or any(v < low for v in value):
        msg = f"{where}: attribute {name!r} is {value!r}; expected {count} integers >= {low}: {_FIX}"
        raise ONNXFileError(msg)
    return value


def _spatial_codes(walk: Walk, op: OnnxOp) -> Codes:
    """The pooling's input: a quantizer's codes of 1 or 2 spatial axes, channels first."""
    data = walk._tensor(op)
    if not isinstance(data, Codes) or len(data.node.shape) not in (2, 3):
        got = f"codes of shape {data.node.shape}" if isinstance(data, Codes) else "a tensor no quantizer ends"
        msg = (
            f"{walk._where(op)}: a {op.op_type} reads a quantizer's codes of shape (C, L) or (C, H, W); it reads "
            f"{got}: quantize the pooling's input (a QuantIdentity or QuantReLU before it)"
        )
        raise ONNXFileError(msg)
    if len(op.outputs) != 1:
        msg = f"{walk._where(op)}: a {op.op_type} with {len(op.outputs)} outputs (indices); export it with one output"
        raise ONNXFileError(msg)
    return data


def pool_geometry(op: OnnxOp, shape: tuple[int, ...], where: str) -> Geometry:
    """The window of a ``MaxPool`` or ``AveragePool`` over codes of ``shape`` ``(C, ...)``, its attributes checked."""
    rank = len(shape) - 1
    if op.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        msg = f"{where}: auto_pad={op.attributes['auto_pad']!r}; {_FIX}"
        raise ONNXFileError(msg)
    if op.attributes.get("ceil_mode", 0) != 0:
        msg = f"{where}: ceil_mode={op.attributes['ceil_mode']!r}; a window past the input's end is not read: {_FIX}"
        raise ONNXFileError(msg)
    if "kernel_shape" not in op.attributes:
        msg = f"{where}: no attribute 'kernel_shape'; {_FIX}"
        raise ONNXFileError(msg)
    kernel = _ints(op, "kernel_shape", rank, 1, 1, where)
    pads = _ints(op, "pads", 2 * rank, 0, 0, where)
    geometry = Geometry(
        kernel=kernel,
        stride=_ints(op, "strides", rank, 1, 1, where),
        dilation=_ints(op, "dilations", rank, 1, 1, where),
        padding=tuple((pads[k], pads[k + rank]) for k in range(rank)),
    )
    if any(n < 1 for n in geometry.output_size(tuple(shape[1:]))):
        msg = f"{where}: the kernel {kernel} does not fit the (padded) input {shape}; {_FIX}"
        raise ONNXFileError(msg)
    return geometry


@QONNX_OPERATIONS.register("MaxPool")
def _max_pool(walk: Walk, op: OnnxOp) -> Codes:
    """A max-pool of codes (codes ascend with values): the torch route's ``pool`` node."""
    src = _spatial_codes(walk, op).node
    where = walk._where(op)
    g = pool_geometry(op, src.shape, where)
    if any(b != a or 2 * b > k for (b, a), k in zip(g.padding, g.kernel)):
        msg = (
            f"{where}: pads {op.attributes.get('pads')!r}; a max-pool pads each axis the same before and after, by "
            f"at most half the kernel {g.kernel} (torch's MaxPool): {_FIX}"
        )
        raise ONNXFileError(msg)
    meta = PoolMeta(
        kernel_size=g.kernel,
        stride=g.stride,
        padding=tuple(b for b, _ in g.padding),
        dilation=g.dilation,
        modules=(op.name,),
    )
    shape = (src.shape[0], *g.output_size(tuple(src.shape[1:])))
    node = node_of(f"pool{len(walk.nodes)}", meta, shape, src.domain, op.outputs[0])
    return Codes(walk._add(node, src))


@QONNX_OPERATIONS.register("AveragePool")
def _average_pool(walk: Walk, op: OnnxOp) -> Float:
    """The mean of each channel's window: a depthwise window the next quantizer closes into a table layer."""
    src = _spatial_codes(walk, op).node
    where = walk._where(op)
    g = pool_geometry(op, src.shape, where)
    if g.padded and op.attributes.get("count_include_pad", 0) != 1:
        msg = (
            f"{where}: pads {op.attributes.get('pads')!r} with count_include_pad="
            f"{op.attributes.get('count_include_pad', 0)!r}; a padded average pool divides by the whole window here "
            "(count_include_pad=1, torch's default): export it with count_include_pad=1 or without pads"
        )
        raise ONNXFileError(msg)
    channels, window = src.shape[0], g.window

    def mean(x: np.ndarray) -> np.ndarray:
        # In float32, summed in window order and then divided, as onnxruntime and torch compute it: the exact
        # mean of float32 values (a scale of 1/3) can sit a hair off a tie that the model's float32 sum hits.
        taps = x.astype(np.float32).reshape(len(x), channels, window)
        total = taps[..., 0]
        for t in range(1, window):
            total = total + taps[..., t]
        return (total / np.float32(window)).astype(np.float64)

    return Float(src, (mean,), np.eye(channels, dtype=bool), (op.name,), g, float32=True)


@QONNX_OPERATIONS.register("Trunc")
def _trunc(walk: Walk, op: OnnxOp) -> Codes:
    """QONNX's ``Trunc`` closing a layer (an average pool's sum, brevitas' ``TruncAvgPool``)."""
    params = trunc_params(walk, op)
    return walk._close(op, walk._float(op), params)


def trunc_params(walk: Walk, op: OnnxOp) -> TruncParams:
    """A ``Trunc``'s parameters (opset 2: x, scale, zero point, input bits, output scale, output bits)."""
    where = walk._where(op)
    version = walk.graph.opsets.get(op.domain, 1)
    if version < 2 or len(op.inputs) != 6:
        msg = (
            f"{where}: a Trunc of QONNX opset {version} with {len(op.inputs)} inputs; expected opset 2 with 6 (x, "
            "scale, zero point, input bit width, output scale, output bit width): export it with brevitas >= 0.11"
        )
        raise ONNXFileError(msg)
    names = ("scale", "zero point", "input bit width", "output scale", "output bit width")
    values = [walk._constant(op, k + 1, name) for k, name in enumerate(names)]
    for value, name in zip(values, names):
        if value.size != 1:
            msg = f"{where}: the Trunc's {name} has {value.size} values; expected one (per tensor): {_FIX_TRUNC}"
            raise ONNXFileError(msg)
    scale, zero, _, out_scale, bits = (float(v.reshape(-1)[0]) for v in values)
    if not (scale > 0 and out_scale > 0 and bits == int(bits) and 1 <= bits <= 16):
        msg = (
            f"{where}: scale {scale!r}, output scale {out_scale!r}, output bit width {bits!r}; expected scales > 0 "
            f"and 1 to 16 output bits: {_FIX_TRUNC}"
        )
        raise ONNXFileError(msg)
    flags = []
    for name, default in (("signed", 1), ("narrow", 0)):
        flag = op.attributes.get(name, default)
        if flag not in (0, 1):
            msg = f"{where}: attribute {name!r} is {flag!r}; expected 0 or 1"
            raise ONNXFileError(msg)
        flags.append(bool(flag))
    mode = Rounding.parse(str(op.attributes.get("rounding_mode", "FLOOR")), where)
    params = TruncParams(scale, zero, out_scale, int(bits), flags[0], flags[1], mode)
    if not math.isfinite(params.shift) or (flags[0] and bits == 1):
        msg = f"{where}: output scale {out_scale!r} over scale {scale!r}, {int(bits)} signed bit(s); {_FIX_TRUNC}"
        raise ONNXFileError(msg)
    return params


_FIX_TRUNC = "export the truncation with brevitas (TruncAvgPool2d, a per-tensor trunc_quant)"
