"""Joining and moving codes in a QONNX graph: ``Concat`` of quantized tensors along the channel axis and a
residual ``Add`` of two quantized tensors (the torch route's ``join`` node, and for the add a table of fan-in 2
per element over the join), ``Transpose`` (with the ``Reshape``/``Flatten`` after it) as data movement folded
into the layer that reads it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import ModelError, ONNXFileError
from ..graph.graph import JoinMeta, Node
from ..units import Geometry
from .layers import QONNX_OPERATIONS, Walk
from .read import OnnxOp
from .state import Codes, Float, Moved, node_of, reshaped

__all__: list[str] = []


def _operands(walk: Walk, op: OnnxOp, least: int) -> list[Node]:
    """The operation's operands: the codes of quantizers (``least`` of them at least), or an error naming the fix."""
    if len(op.inputs) < least or any(not t or t in walk.constants for t in op.inputs):
        msg = (
            f"{walk._where(op)}: a {op.op_type} of {len(op.inputs)} input(s), some constant or missing; expected "
            f"{least} or more computed tensors: export the model with constants folded into the layers"
        )
        raise ONNXFileError(msg)
    nodes = []
    for t in op.inputs:
        data = walk.state[t]
        if not isinstance(data, Codes):
            msg = (
                f"{walk._where(op)}: its input {t!r} is no quantizer's output; a {op.op_type} of computed tensors "
                "joins codes: quantize each operand first (a QuantIdentity, or brevitas' QuantEltwiseAdd / QuantCat)"
            )
            raise ONNXFileError(msg)
        nodes.append(data.node)
    return nodes


def _channel_axis(walk: Walk, op: OnnxOp, nodes: list[Node], axis: int | None) -> None:
    """The join's operands are channels-first codes of one spatial size, joined along the channels (axis 1)."""
    rank = len(nodes[0].shape) + 1  # with the batch axis
    if any(len(n.shape) + 1 != rank or n.shape[1:] != nodes[0].shape[1:] for n in nodes):
        shapes = [n.shape for n in nodes]
        msg = f"{walk._where(op)}: operands of shapes {shapes}; a join needs one spatial size: reshape them to match"
        raise ONNXFileError(msg)
    if axis is not None and axis not in (1, 1 - rank):
        msg = (
            f"{walk._where(op)}: axis={axis!r} joins along no channel axis of {rank}-axis tensors; this front end "
            "joins channels (axis 1, channels first): concatenate along the channels"
        )
        raise ONNXFileError(msg)


def _join(walk: Walk, op: OnnxOp, nodes: list[Node], *, for_add: bool) -> Node:
    domains: list[Domain] = []
    for n in nodes:
        domains += list(n.channel_domains() or ())
    domain: Any = domains[0] if len(set(domains)) == 1 else tuple(domains)
    channels = sum(n.shape[0] for n in nodes)
    shape = (channels, *nodes[0].shape[1:])
    join = node_of(f"join{len(walk.nodes)}", JoinMeta(for_add=for_add), shape, domain, op.outputs[0])
    return walk._add(join, *nodes)


@QONNX_OPERATIONS.register("Concat")
def _concat(walk: Walk, op: OnnxOp) -> Codes:
    """Quantized tensors side by side along the channel axis: the torch route's ``join`` node."""
    nodes = _operands(walk, op, 1)
    axis = op.attributes.get("axis")
    if not isinstance(axis, int):
        msg = f"{walk._where(op)}: attribute 'axis' is {axis!r}; expected one integer (ONNX requires it)"
        raise ONNXFileError(msg)
    _channel_axis(walk, op, nodes, axis)
    if len(nodes) == 1:
        return Codes(nodes[0])
    return Codes(_join(walk, op, nodes, for_add=False))


@QONNX_OPERATIONS.register("Add")
def _add(walk: Walk, op: OnnxOp) -> Float:
    """A bias (a constant second), or a residual add of two quantized tensors: a join of both and the sum of
    element ``c`` of each, which the next quantizer closes into a table of fan-in 2 (the torch route's add)."""
    if len(op.inputs) == 2 and op.inputs[1] in walk.constants and op.inputs[0] not in walk.constants:
        return walk._elementwise(op, walk._float_first(op), np.add)
    if len(op.inputs) != 2 or not all(isinstance(walk.state.get(t), Codes) for t in op.inputs):
        kinds = ["a constant" if t in walk.constants else type(walk.state.get(t)).__name__ for t in op.inputs]
        msg = (
            f"{walk._where(op)}: an Add of two computed tensors reads two quantizers' codes (a residual add), and "
            f"one of a computed tensor and a constant takes the constant second; this one reads {kinds} "
            "(Codes: a quantizer's output): quantize both operands (brevitas' QuantEltwiseAdd), or fold the constant"
        )
        raise ModelError(msg)
    nodes = _operands(walk, op, 2)
    if nodes[0].shape != nodes[1].shape:
        msg = (
            f"{walk._where(op)}: an add of shapes {nodes[0].shape} and {nodes[1].shape}; a residual add reads two "
            "tensors of one shape (no broadcasting): export the model with matching operands"
        )
        raise ONNXFileError(msg)
    _channel_axis(walk, op, nodes, None)
    join = _join(walk, op, nodes, for_add=True)
    channels = nodes[0].shape[0]
    reads = np.zeros((channels, 2 * channels), bool)
    reads[np.arange(channels), np.arange(channels)] = True
    reads[np.arange(channels), channels + np.arange(channels)] = True
    rank = len(join.shape) - 1
    geometry = Geometry((1,) * rank, (1,) * rank, (1,) * rank, ((0, 0),) * rank) if rank else None

    def total(x: np.ndarray) -> np.ndarray:
        # in float32, as the model adds its two float32 operands
        x32 = x.astype(np.float32)
        return (x32[:, :channels] + x32[:, channels:]).astype(np.float64)

    return Float(join, (total,), reads, (op.name,), geometry, float32=True)


@QONNX_OPERATIONS.register("Transpose")
def _transpose(walk: Walk, op: OnnxOp) -> Any:
    """A permutation of a quantizer's codes: the elements' new order, read by the layer after a Flatten."""
    data = walk._tensor(op)
    if isinstance(data, Codes):
        data = Moved(data.node, tuple(data.node.shape), np.arange(math.prod(data.node.shape)))
    if not isinstance(data, Moved):
        msg = (
            f"{walk._where(op)}: a Transpose of a tensor no quantizer ends; this front end moves codes only: "
            "quantize before the Transpose"
        )
        raise ONNXFileError(msg)
    rank = len(data.shape) + 1
    perm = op.attributes.get("perm", tuple(reversed(range(rank))))
    if not isinstance(perm, tuple) or sorted(perm) != list(range(rank)) or perm[0] != 0:
        msg = (
            f"{walk._where(op)}: perm={perm!r} for a {rank}-axis tensor; expected a permutation that keeps the "
            "batch axis first (perm[0] = 0): export the model with the batch axis in place"
        )
        raise ONNXFileError(msg)
    index = data.index.reshape(data.shape).transpose([p - 1 for p in perm[1:]])
    return Moved(data.node, tuple(index.shape), index.reshape(-1))


def reshape_moved(walk: Walk, op: OnnxOp, data: Moved) -> Moved:
    """A ``Reshape`` or ``Flatten`` of moved codes: the same elements in their new order, of the new shape."""
    return Moved(data.node, reshaped(op, data.shape, walk.constants, walk._where(op)), data.index)


@QONNX_OPERATIONS.register("Reshape")
@QONNX_OPERATIONS.register("Flatten")
def _reshape(walk: Walk, op: OnnxOp) -> Any:
    """Codes reshaped to features (a reshape node), moved codes given their new shape, or a float function kept."""
    data = walk._tensor(op)
    if isinstance(data, Moved):
        return reshape_moved(walk, op, data)
    return walk._reshape(op)
