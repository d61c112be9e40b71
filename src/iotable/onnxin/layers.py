"""Cutting a QONNX graph into table layers at its quantizers, before any row is computed.

The graph is walked in order. A tensor is a constant (initializers, folded weight quantizers), the raw
input (which only a ``Quant`` may read: it gives the network's input domain), the codes of a graph node, or
a float64 function of a node's codes (the arithmetic of a layer in progress: ``MatMul``/``Gemm`` with
constant weights, ``Add``/``Sub``/``Mul``/``Div`` by constants, ``BatchNormalization``, ``Relu``, ...),
whose outputs' fan-ins follow the weights' nonzero pattern. A ``Quant`` (or ``MultiThreshold``) of such a
function closes the layer: one unit per output, reading the inputs it depends on. Every check is made here,
so a refused model costs no row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import numpy as np

from ..domain import Domain
from ..errors import ModelError, ONNXFileError, TableTooLargeError, UnsupportedQuantizerError
from ..graph.graph import InputMeta, Node, OutputMeta, ReshapeMeta
from ..graph.operations import OperationRegistry
from ..units import Geometry
from .fold import clip_bounds, fold_constant, integer_range, per_feature
from .plans import conv_function, layer_plan, table_node, window_nodes
from .quant import QuantParams, Rounding, Thresholds, TruncParams
from .read import OnnxGraph, OnnxOp
from .state import Codes, Float, Moved, Planned, QInt, Raw, node_of, reshaped
from .sums import split_if_cheaper, split_linear

__all__ = ["QONNX_OPERATIONS", "Planned", "Walk", "range_params"]

#: The QONNX front end's node builders by ONNX operation: each a :class:`Walk` method that turns one node of
#: the graph into the state of its output tensor (and graph nodes where it closes a layer).
QONNX_OPERATIONS: OperationRegistry[Callable[[Walk, OnnxOp], Any]] = OperationRegistry("qonnx")

_QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "finn", "onnx.brevitas")


@dataclass
class Walk:
    """The walk over a parsed graph: the state of every tensor, the graph nodes made, the layers planned."""

    graph: OnnxGraph
    what: str
    max_rows: int
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    reads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    planned: dict[str, Planned] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)

    def run(self) -> None:
        """Walk every node; the graph's output must be the codes of a quantizer."""
        self.constants = dict(self.graph.constants)
        self.dtypes = dict(self.graph.dtypes)
        self.state[self.graph.input_name] = Raw()
        read: set[str] = set()
        for op in self.graph.ops:
            self._check_domain(op)
            if op.op_type == "Constant" or (op.inputs and all(t in self.constants or not t for t in op.inputs)):
                value = fold_constant(op, self.constants, self._where(op), self.dtypes)
                self.constants.update(zip(op.outputs[:1], [value]))
                self._fold_dtype(op)
                continue
            self._check_branch(op, read)
            if op.op_type not in QONNX_OPERATIONS:
                supported = sorted(QONNX_OPERATIONS.operations())
                msg = (
                    f"{self._where(op)}: ONNX operation {op.op_type!r} is not supported between quantizers; "
                    f"supported: {supported}; export the model without it, or compute it outside the network"
                )
                raise ModelError(msg)
            self.state[op.outputs[0]] = QONNX_OPERATIONS.builder(op.op_type)(self, op)
        self._check_dead_ends(read)
        final = self.state.get(self.graph.output_name)
        if not isinstance(final, Codes):
            self._refuse_float_head(final)
        src = final.node
        self._add(node_of("output", OutputMeta(), src.shape, src.domain), src)

    # -- helpers ------------------------------------------------------------------------------------------

    def _fold_dtype(self, op: OnnxOp) -> None:
        """The stored type of a folded constant: QuantizeLinear's is its zero point's, a Clip's its input's."""
        if op.op_type == "QuantizeLinear":
            zero = op.inputs[2] if len(op.inputs) > 2 else ""
            self.dtypes[op.outputs[0]] = self.dtypes.get(zero, "?") if zero else "uint8"
        elif op.op_type in ("Clip", "Identity", "Reshape", "Flatten", "Transpose") and op.inputs:
            self.dtypes[op.outputs[0]] = self.dtypes.get(op.inputs[0], "float32")
        elif op.op_type != "Constant":
            self.dtypes[op.outputs[0]] = "float32"

    def _where(self, op: OnnxOp) -> str:
        return f"{self.what}: {op.where} in {self.graph.source}"

    def _check_domain(self, op: OnnxOp) -> None:
        if op.domain not in ("", "ai.onnx") and op.domain not in _QONNX_DOMAINS:
            msg = (
                f"{self._where(op)}: operator domain {op.domain[:60]!r} is not ONNX's nor QONNX's "
                f"({list(_QONNX_DOMAINS)}); export the model with brevitas.export.export_qonnx"
            )
            raise ModelError(msg)

    def _check_branch(self, op: OnnxOp, read: set[str]) -> None:
        """A tensor read a second time must be codes (a quantizer's output): a layer in progress (a tensor no
        quantizer ends) is one table layer, which a branch would split."""
        for t in dict.fromkeys(op.inputs):
            if not t or t in self.constants:
                continue
            if t in read and not isinstance(self.state.get(t), Codes):
                msg = (
                    f"{self._where(op)} reads tensor {t!r}, which an earlier node reads too and no quantizer ends; "
                    "a branch reads a quantizer's codes: quantize the tensor before it branches (a QuantIdentity)"
                )
                raise ModelError(msg)
            read.add(t)

    def _refuse_float_head(self, final: Any) -> NoReturn:
        """A graph output no quantizer ends (a float head): the torch route keeps such a tail out of the tables
        (a host node, run by torch), which a file cannot carry; so it is refused with the node that makes it."""
        maker = next((op for op in self.graph.ops if self.graph.output_name in op.outputs), None)
        node = f"node {maker.name!r} ({maker.op_type})" if maker is not None else "no node"
        head = list(final.ops) if isinstance(final, Float) else []
        msg = (
            f"{self.what}: the graph output {self.graph.output_name!r} is not the output of a quantizer (Quant, "
            f"Trunc or MultiThreshold): {node} writes it, a float head ({head or 'no arithmetic'}) after the last "
            "quantizer; a table network outputs codes (the torch route runs such a tail as a host node, which a "
            "file cannot hold): end the model in a quantizer (e.g. a QuantIdentity after the last layer), or "
            "export the model up to its last quantizer and compute the head outside the network"
        )
        raise ModelError(msg)

    def _check_dead_ends(self, read: set[str]) -> None:
        """Every computed tensor leads somewhere: a node whose output nothing reads is a branch to nowhere."""
        for op in self.graph.ops:
            out = op.outputs[0] if op.outputs else ""
            if out and out not in self.constants and out not in read and out != self.graph.output_name:
                msg = (
                    f"{self._where(op)}: its output {out!r} is read by no node and is not the graph's output; a "
                    "table network has one output: remove the node, or export the model without it"
                )
                raise ModelError(msg)

    def _add(self, node: Node, *sources: Node) -> Node:
        if any(n.name == node.name for n in self.nodes):
            k = 1
            while any(n.name == f"{node.name}_{k}" for n in self.nodes):
                k += 1
            node = Node(f"{node.name}_{k}", node.kind, node.shape, node.layout, node.domain, node.meta, node.fx_node)
        self.nodes.append(node)
        if sources:
            self.reads[node.name] = tuple(s.name for s in sources)
        return node

    def _tensor(self, op: OnnxOp, k: int = 0) -> Any:
        name = op.inputs[k] if k < len(op.inputs) else ""
        if name in self.constants:
            return self.constants[name]
        return self.state[name]

    def _float(self, op: OnnxOp) -> Float:
        """The operation's data input as a float function (codes of a node start an empty one)."""
        data = self._tensor(op)
        if isinstance(data, Raw):
            msg = (
                f"{self._where(op)} reads the graph input before any quantizer; the input's domain comes from "
                "its first quantizer: put a Quant (a QuantIdentity in brevitas) on the input first"
            )
            raise ModelError(msg)
        if isinstance(data, QInt):
            msg = f"{self._where(op)} reads QuantizeLinear's integers; put a DequantizeLinear (of the same scale) first"
            raise ModelError(msg)
        if isinstance(data, Moved):
            return self._moved(op, data)
        if isinstance(data, Codes):
            shape = data.node.shape
            if len(shape) not in (1, 2, 3):
                msg = (
                    f"{self._where(op)} reads {data.node.name!r} of shape {shape}; expected features (N, C) or "
                    "channels-first codes of 1 or 2 spatial axes: reshape it first"
                )
                raise ModelError(msg)
            if len(shape) == 1:
                return Float(data.node, (), np.eye(shape[0], dtype=bool), ())
            # elementwise over channels-first codes: a window of one position, as the torch route reads it
            rank = len(shape) - 1
            geometry = Geometry(kernel=(1,) * rank, stride=(1,) * rank, dilation=(1,) * rank, padding=((0, 0),) * rank)
            return Float(data.node, (), np.eye(shape[0], dtype=bool), (), geometry)
        return data

    def _moved(self, op: OnnxOp, data: Moved) -> Float:
        """Transposed codes read as features: the flat codes picked in their new order (no node: the layer's
        units read the elements the permutation names)."""
        if len(data.shape) != 1:
            msg = (
                f"{self._where(op)} reads a Transpose's output of shape {data.shape}; a transposed tensor is read as "
                "features: put a Flatten (or Reshape to (N, features)) after the Transpose"
            )
            raise ONNXFileError(msg)
        flat = self._flat(op, data.node)
        index = data.index.copy()
        reads = np.zeros((index.size, index.size), bool)
        reads[np.arange(index.size), index] = True
        return Float(flat, (lambda x: x[:, index],), reads, ())

    def _constant(self, op: OnnxOp, k: int, what: str) -> np.ndarray:
        value = self._tensor(op, k)
        if not isinstance(value, np.ndarray):
            msg = (
                f"{self._where(op)}: its {what} (input {k}) is computed, not a constant; this front end reads "
                "layers whose weights, biases and quantizer parameters are initializers"
            )
            raise ModelError(msg)
        return value

    # -- operations ---------------------------------------------------------------------------------------

    @QONNX_OPERATIONS.register("Quant")
    def _quant(self, op: OnnxOp) -> Codes:
        data = self._tensor(op)
        if isinstance(data, Raw):  # the input quantizer: the network's input domain, per tensor or per channel
            channels = self.graph.input_shape[0]
            domains = tuple(self._quant_params(op, c, channels).domain() for c in range(channels))
            domain: Any = domains[0] if len(set(domains)) == 1 else domains
            return Codes(self._add(node_of("input", InputMeta(), self.graph.input_shape, domain)))
        return self._close(op, self._float(op), self._quant_params(op))

    @QONNX_OPERATIONS.register("BipolarQuant")
    def _bipolar(self, op: OnnxOp) -> Codes:
        scale = self._constant(op, 1, "scale")
        if scale.size != 1 or not float(scale.reshape(-1)[0]) > 0:
            msg = f"{self._where(op)}: scale {scale.reshape(-1)[:4].tolist()}; expected one scale > 0 (per tensor)"
            raise ModelError(msg)
        params = QuantParams(float(scale.reshape(-1)[0]), 0.0, 1, True, False, Rounding.ROUND)
        if isinstance(self._tensor(op), Raw):
            return Codes(self._add(node_of("input", InputMeta(), self.graph.input_shape, params.domain())))
        return self._close(op, self._float(op), params)

    @QONNX_OPERATIONS.register("QuantizeLinear")
    def _quantize_linear(self, op: OnnxOp) -> QInt:
        data = self._tensor(op)
        source = data if isinstance(data, Raw) else self._float(op)
        scale, zero = self._linear_params(op)
        low, high = integer_range(op, self.dtypes, self._where(op))
        return QInt(source, scale, zero, low, high)

    @QONNX_OPERATIONS.register("Clip")
    def _clip(self, op: OnnxOp) -> Any:
        low, high = clip_bounds(op, self.constants, self._where(op))
        data = self._tensor(op)
        if isinstance(data, QInt):
            return replace(data, low=max(data.low, math.ceil(low)), high=min(data.high, math.floor(high)))
        return self._float(op).then(lambda x: np.clip(x, low, high), op)

    @QONNX_OPERATIONS.register("DequantizeLinear")
    def _dequantize_linear(self, op: OnnxOp) -> Codes:
        data = self._tensor(op)
        scale, zero = self._linear_params(op)
        if not isinstance(data, QInt) or (data.scale, data.zero) != (scale, zero):
            msg = (
                f"{self._where(op)}: a DequantizeLinear reads the integers of a QuantizeLinear of the same scale and "
                "zero point (the QCDQ form: QuantizeLinear, optionally Clip, DequantizeLinear); this one does not"
            )
            raise ModelError(msg)
        params = range_params(data.low, data.high, scale, zero, self._where(op))
        if isinstance(data.data, Raw):
            return Codes(self._add(node_of("input", InputMeta(), self.graph.input_shape, params.domain())))
        return self._close(op, data.data, params)

    def _linear_params(self, op: OnnxOp) -> tuple[float, float]:
        """QuantizeLinear's or DequantizeLinear's scale and zero point, one value each (per tensor)."""
        scale = self._constant(op, 1, "scale")
        zero = self._constant(op, 2, "zero point") if len(op.inputs) > 2 and op.inputs[2] else np.zeros(())
        if scale.size != 1 or zero.size != 1 or not float(scale.reshape(-1)[0]) > 0:
            msg = (
                f"{self._where(op)}: scale {scale.reshape(-1)[:4].tolist()} and zero point "
                f"{zero.reshape(-1)[:4].tolist()}; an activation quantizer has one scale > 0 and one zero point"
            )
            raise ModelError(msg)
        return float(scale.reshape(-1)[0]), float(zero.reshape(-1)[0])

    @QONNX_OPERATIONS.register("MultiThreshold")
    def _multithreshold(self, op: OnnxOp) -> Codes:
        fn = self._float(op)
        thresholds = self._constant(op, 1, "thresholds")
        if thresholds.ndim != 2 or thresholds.shape[0] not in (1, fn.width) or thresholds.shape[1] < 1:
            msg = (
                f"{self._where(op)}: thresholds of shape {thresholds.shape}; expected (channels or 1, steps) for "
                f"{fn.width} channel(s)"
            )
            raise ModelError(msg)
        if np.any(np.diff(thresholds, axis=1) < 0):
            msg = f"{self._where(op)}: thresholds must ascend along each row (FINN's MultiThreshold sorts them)"
            raise ModelError(msg)
        scale = float(op.attributes.get("out_scale", 1.0))
        bias = float(op.attributes.get("out_bias", 0.0))
        if not math.isfinite(scale) or scale <= 0 or not math.isfinite(bias):
            msg = f"{self._where(op)}: out_scale {scale!r} and out_bias {bias!r}; expected out_scale > 0, finite"
            raise ModelError(msg)
        return self._close(op, fn, Thresholds(thresholds, scale, bias))

    def _quant_params(self, op: OnnxOp, channel: int = 0, channels: int = 0) -> QuantParams:
        """A ``Quant``'s parameters (of input channel ``channel`` where the input quantizer of ``channels``
        channels has a scale or zero point per channel, as the torch route's per-channel input domains)."""
        if len(op.inputs) != 4:
            msg = (
                f"{self._where(op)}: a Quant has 4 inputs (x, scale, zero point, bit width), this one {len(op.inputs)}"
            )
            raise ModelError(msg)
        scale, zero, bits = (self._constant(op, k, n) for k, n in ((1, "scale"), (2, "zero point"), (3, "bit width")))
        for value, what in ((scale, "scale"), (zero, "zero point"), (bits, "bit width")):
            if value.size != 1 and not (channels and what != "bit width" and self._along_channels(value)):
                where = "the input quantizer's" if channels else "the activation quantizer's"
                msg = (
                    f"{self._where(op)}: {where} {what} has shape {value.shape}; a table layer's output has one "
                    "domain (as in the torch route, which refuses per-channel activation scales), and an input "
                    f"quantizer may have one {what} per channel (shape (1, C, ...), C = {self.graph.input_shape[0]}): "
                    "use one scale for the tensor"
                )
                raise UnsupportedQuantizerError(msg)
        b = float(bits.reshape(-1)[0])
        if b != int(b) or not 1 <= b <= 16:
            msg = f"{self._where(op)}: bit width {b!r}; expected an integer from 1 to 16 (a table's input field)"
            raise ModelError(msg)
        s, z = (float(v.reshape(-1)[channel if v.size > 1 else 0]) for v in (scale, zero))
        if not s > 0:
            msg = f"{self._where(op)}: scale {s!r}; expected a scale > 0"
            raise ModelError(msg)
        signed, narrow = (self._flag(op, a) for a in ("signed", "narrow"))
        mode = Rounding.parse(str(op.attributes.get("rounding_mode", "ROUND")), self._where(op))
        return QuantParams(s, z, int(b), signed, narrow, mode)

    def _along_channels(self, value: np.ndarray) -> bool:
        """Whether ``value`` holds one entry per channel of the graph input, broadcast along its channel axis."""
        shape, full = value.shape, (1, *self.graph.input_shape)
        channels = full[1]
        if len(full) == 2:  # features: (F,) or (1, F)
            return shape in ((channels,), (1, channels))
        return len(shape) == len(full) and shape[1] == channels and math.prod(shape) == channels

    def _flag(self, op: OnnxOp, name: str) -> bool:
        value = op.attributes.get(name, 1 if name == "signed" else 0)
        if value not in (0, 1):
            msg = f"{self._where(op)}: attribute {name!r} is {value!r}; expected 0 or 1"
            raise ModelError(msg)
        return bool(value)

    @QONNX_OPERATIONS.register("Conv")
    def _conv(self, op: OnnxOp) -> Float:
        data = self._tensor(op)
        if not isinstance(data, Codes) or len(data.node.shape) < 2:
            msg = (
                f"{self._where(op)}: a Conv reads the output of a quantizer directly (codes of shape (C, ...)); "
                "this one reads a computed tensor or flat features: quantize its input first"
            )
            raise ModelError(msg)
        weight = self._constant(op, 1, "weights")
        bias = self._constant(op, 2, "bias") if len(op.inputs) > 2 and op.inputs[2] else None
        return conv_function(op, data.node, weight, bias, self._where(op))

    @QONNX_OPERATIONS.register("MatMul")
    def _matmul(self, op: OnnxOp) -> Float:
        return self._linear(op, self._constant(op, 1, "weight matrix"), None)

    @QONNX_OPERATIONS.register("Gemm")
    def _gemm(self, op: OnnxOp) -> Float:
        a = op.attributes
        if a.get("transA", 0):
            msg = f"{self._where(op)}: Gemm with transA=1 (a transposed input) is not supported; export without it"
            raise ModelError(msg)
        weight = self._constant(op, 1, "weight matrix")
        weight = weight.T if a.get("transB", 0) and weight.ndim == 2 else weight
        weight = weight * float(a.get("alpha", 1.0))
        bias = (
            self._constant(op, 2, "bias") * float(a.get("beta", 1.0)) if len(op.inputs) > 2 and op.inputs[2] else None
        )
        return self._linear(op, weight, bias)

    def _linear(self, op: OnnxOp, weight: np.ndarray, bias: np.ndarray | None) -> Float:
        fn = self._float(op)
        if fn.geometry is not None and not fn.ops:
            msg = (
                f"{self._where(op)} reads {fn.source.name!r} of shape {fn.source.shape}; flatten it first "
                "(Flatten or Reshape to (N, features)): a matrix product reads features, not images"
            )
            raise ModelError(msg)
        if fn.geometry is not None:
            msg = f"{self._where(op)}: a matrix product after a convolution, before its quantizer; quantize first"
            raise ModelError(msg)
        if weight.ndim != 2 or weight.shape[0] != fn.width:
            msg = (
                f"{self._where(op)}: weights of shape {weight.shape} for {fn.width} input feature(s); expected "
                f"({fn.width}, outputs)"
            )
            raise ModelError(msg)
        b = None if bias is None else per_feature(bias, weight.shape[1], self._where(op))
        reads = (weight.T != 0).astype(np.int64) @ fn.reads.astype(np.int64) > 0
        w = weight.copy()
        # on the codes' values: a layer the split (:mod:`.sums`) may turn into partial sums; a second product mixes
        # the first one's outputs, which a table per sum cannot: no split then
        linear = (w.T.astype(np.float64), np.zeros(w.shape[1]) if b is None else b.copy()) if not fn.steps else None
        fn = replace(fn, linear=linear)
        return fn.then(lambda x: x @ w if b is None else x @ w + b, op, reads)

    def _elementwise(self, op: OnnxOp, fn: Float, apply: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Float:
        value = per_feature(self._constant(op, 1, "operand"), fn.width, self._where(op))
        value32 = value.astype(np.float32)

        def step32(x: np.ndarray) -> np.ndarray:
            return np.asarray(apply(x.astype(np.float32), value32)).astype(np.float64)

        return fn.then(lambda x: apply(x, value), op, step32=step32)

    @QONNX_OPERATIONS.register("Sub")
    def _sub(self, op: OnnxOp) -> Float:
        return self._elementwise(op, self._float_first(op), np.subtract)

    @QONNX_OPERATIONS.register("Mul")
    def _mul(self, op: OnnxOp) -> Float:
        return self._elementwise(op, self._float_first(op), np.multiply)

    @QONNX_OPERATIONS.register("Div")
    def _div(self, op: OnnxOp) -> Float:
        return self._elementwise(op, self._float_first(op), np.divide)

    def _float_first(self, op: OnnxOp) -> Float:
        """The computed operand of a binary operation, which must come first (a constant second)."""
        if len(op.inputs) != 2 or op.inputs[0] in self.constants or op.inputs[1] not in self.constants:
            msg = (
                f"{self._where(op)}: a {op.op_type} of two computed tensors, or with the constant first; this "
                "front end reads a computed tensor combined with a constant (bias, scale) given second"
            )
            raise ModelError(msg)
        return self._float(op)

    @QONNX_OPERATIONS.register("Relu")
    def _relu(self, op: OnnxOp) -> Float:
        return self._float(op).then(lambda x: np.maximum(x, 0.0), op)

    @QONNX_OPERATIONS.register("Sigmoid")
    def _sigmoid(self, op: OnnxOp) -> Float:
        return self._float(op).then(lambda x: 1.0 / (1.0 + np.exp(-x)), op)

    @QONNX_OPERATIONS.register("Tanh")
    def _tanh(self, op: OnnxOp) -> Float:
        return self._float(op).then(np.tanh, op)

    @QONNX_OPERATIONS.register("Identity")
    def _identity(self, op: OnnxOp) -> Any:
        data = self._tensor(op)
        if isinstance(data, Raw):
            return data
        return data if isinstance(data, Codes) else self._float(op)

    @QONNX_OPERATIONS.register("BatchNormalization")
    def _batchnorm(self, op: OnnxOp) -> Float:
        fn = self._float(op)
        if len(op.inputs) != 5:
            msg = f"{self._where(op)}: BatchNormalization needs 5 inputs (x, scale, bias, mean, var)"
            raise ModelError(msg)
        scale, bias, mean, var = (
            per_feature(self._constant(op, k, n), fn.width, self._where(op))
            for k, n in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance"))
        )
        eps = float(op.attributes.get("epsilon", 1e-5))
        factor = scale / np.sqrt(var + eps)
        # in float32 as onnxruntime computes it: x * new_scale + new_bias, the two folded per channel first
        scale32 = np.float32(1) / np.sqrt(var.astype(np.float32) + np.float32(eps)) * scale.astype(np.float32)
        bias32 = bias.astype(np.float32) - mean.astype(np.float32) * scale32

        def step32(x: np.ndarray) -> np.ndarray:
            return (x.astype(np.float32) * scale32 + bias32).astype(np.float64)

        return fn.then(lambda x: (x - mean) * factor + bias, op, step32=step32)

    def _reshape(self, op: OnnxOp) -> Any:
        data = self._tensor(op)
        if isinstance(data, Raw):
            msg = f"{self._where(op)} reshapes the graph input before its quantizer; quantize the input first"
            raise ModelError(msg)
        if isinstance(data, Float):
            if data.geometry is not None:
                msg = f"{self._where(op)} reshapes a convolution's output before its quantizer; quantize it first"
                raise ModelError(msg)
            return data  # features stay features: (N, C) to (N, C)
        shape = tuple(data.node.shape)
        new = reshaped(op, shape, self.constants, self._where(op))
        if new == shape:
            return data
        if new != (math.prod(shape),):
            msg = (
                f"{self._where(op)} reshapes codes of shape {shape} per sample to {new}; this front end reads codes "
                "kept in their shape or flattened to features: reshape to (N, features), or quantize after the "
                "reshape"
            )
            raise ONNXFileError(msg)
        return Codes(self._flat(op, data.node))

    def _flat(self, op: OnnxOp, src: Node) -> Node:
        """``src``'s codes as features (a reshape node where they are not already)."""
        if len(src.shape) == 1:
            return src
        domain = src.domain if isinstance(src.domain, Domain) else None
        if domain is None:
            msg = f"{self._where(op)}: flattening channels of different domains is not supported"
            raise ModelError(msg)
        return self._add(node_of(f"reshape{len(self.nodes)}", ReshapeMeta(), (math.prod(src.shape),), domain), src)

    # -- closing a layer ----------------------------------------------------------------------------------

    def _close(self, op: OnnxOp, fn: Float, closing: QuantParams | Thresholds | TruncParams) -> Codes:
        """A table layer: one unit per output, reading the inputs it depends on (sizes checked here), and the
        pad and window nodes a spatial layer reads through."""
        name = f"layer{len(self.planned)}"
        try:
            plan = layer_plan(name, fn, closing.domain(), self.max_rows, self._where(op))
        except TableTooLargeError as exc:
            if fn.linear is None:
                raise
            fn = split_linear(self, fn, str(exc))
            name = f"layer{len(self.planned)}"
            plan = layer_plan(name, fn, closing.domain(), self.max_rows, self._where(op))
        else:
            rest = split_if_cheaper(self, fn, plan)
            if rest is not None:
                fn, name = rest, f"layer{len(self.planned)}"
                plan = layer_plan(name, fn, closing.domain(), self.max_rows, self._where(op))
        reader = fn.source
        if fn.geometry is not None:
            for node in window_nodes(name, fn.source, plan):
                reader = self._add(node, reader)
        table = table_node(name, plan, (*fn.ops, op.name), op.outputs[0])
        self.planned[name] = Planned(plan, fn.steps, closing, fn.float32)
        return Codes(self._add(table, reader))


def range_params(low: int, high: int, scale: float, zero: float, where: str) -> QuantParams:
    """The QONNX quantizer of integers ``[low, high]`` (QCDQ's saturation and Clip): its bits, signedness and
    narrowness, rounding half to even as QuantizeLinear does; an error for a range no bit width gives."""
    for bits in range(1, 17):
        for signed, narrow in ((False, False), (False, True), (True, False), (True, True)):
            if (low, high) == Domain.integer_range(bits, signed=signed, narrow=narrow) and not (signed and bits == 1):
                return QuantParams(scale, zero, bits, signed, narrow, Rounding.ROUND)
    msg = (
        f"{where}: integers saturated to [{low}, {high}], which is no bit width's range (signed, unsigned, or "
        "narrow); quantize to a range of 2^b codes (a Clip to the bit width's bounds)"
    )
    raise ModelError(msg)
