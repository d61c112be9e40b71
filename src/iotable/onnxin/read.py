"""Reading an ONNX file as untrusted data: its size checked before it is parsed, every tensor's size before it
is decoded, every attribute read as a plain value (nothing stored in the file is ever evaluated), the graph's
order, inputs and shapes checked before any work."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._util.text import unprintable
from .._util.trust import Untrusted, read_bounded
from ..errors import ONNXFileError, ONNXNotInstalledError

__all__ = ["MAX_ELEMENTS", "MAX_FILE_BYTES", "OnnxGraph", "OnnxOp", "load_proto", "onnx_module", "read_graph"]

#: The largest file (or ``ModelProto``) read, in bytes.
MAX_FILE_BYTES = 256 * 2**20
#: The most elements one tensor (an initializer, a constant, the input) may claim.
MAX_ELEMENTS = 2**24

_EXTRA = "install the optional extra: pip install 'iotable[onnx]'"


def onnx_module(what: str) -> Any:
    """The ``onnx`` package, or an error naming the extra that installs it."""
    try:
        import onnx
    except ImportError:
        msg = f"{what}: reading ONNX models needs the onnx package, which is not installed; {_EXTRA}"
        raise ONNXNotInstalledError(msg) from None
    return onnx


@dataclass(frozen=True)
class OnnxOp:
    """One node of the graph: its name (or a made-up one), type, domain, tensors and attributes as values."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, Any]

    @property
    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type})"


@dataclass(frozen=True)
class OnnxGraph:
    """A parsed graph: its nodes in order, its constants (initializers and ``Constant`` nodes, float64), the
    input's name and per-sample shape, the output's name, and what it was read from (for messages)."""

    ops: tuple[OnnxOp, ...]
    constants: dict[str, np.ndarray]
    input_name: str
    input_shape: tuple[int, ...]
    output_name: str
    source: str
    dtypes: dict[str, str] = field(default_factory=dict)  # the stored type of each constant ("int8", "float32")
    opsets: dict[str, int] = field(default_factory=dict)  # the opset version of each operator domain


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def load_proto(model: Any, what: str) -> tuple[Any, str]:
    """The ``ModelProto`` of a path (size checked, then parsed) or of a ``ModelProto`` given, and its name."""
    onnx = onnx_module(what)
    if isinstance(model, onnx.ModelProto):
        size = model.ByteSize()
        if size > MAX_FILE_BYTES:
            msg = f"{what}: the ModelProto serializes to {size:,} bytes, more than the {MAX_FILE_BYTES:,} accepted"
            raise ONNXFileError(msg)
        return model, "the ModelProto"
    path = Path(os.fspath(model))
    try:
        data = read_bounded(path, limit=MAX_FILE_BYTES, owned=False)
    except FileNotFoundError:
        msg = (
            f"{what}: no file {str(path)!r}; expected the model: a QONNX model (the path of an .onnx file, or an "
            "onnx.ModelProto) or a torch module"
        )
        raise ONNXFileError(msg) from None
    except Untrusted as exc:
        msg = f"{what}: the ONNX file cannot be read: {exc}; pass a regular file of at most {MAX_FILE_BYTES:,} bytes"
        raise ONNXFileError(msg) from None
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and others: what the bytes are is not ours to know
        msg = (
            f"{what}: {path.name!r} is not a readable ONNX model ({type(exc).__name__}: {_short(str(exc))}); the "
            "file is truncated or not ONNX: export it again (brevitas.export.export_qonnx)"
        )
        raise ONNXFileError(msg) from None
    return proto, repr(path.name)


def _tensor(onnx: Any, tensor: Any, what: str) -> np.ndarray:
    """A tensor's values as float64, its claimed size and storage checked before it is decoded."""
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims) or math.prod(dims) > MAX_ELEMENTS:
        msg = (
            f"{what} claims shape {dims} ({math.prod(dims):,} elements); at most {MAX_ELEMENTS:,} elements are "
            "accepted: a table network's weights are small, so the file is damaged or not such a model"
        )
        raise ONNXFileError(msg)
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
        msg = f"{what} stores its data outside the file; save the model with its tensors inside (one .onnx file)"
        raise ONNXFileError(msg)
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except Exception as exc:  # a raw_data of the wrong length, an unknown data type
        msg = f"{what} cannot be decoded ({type(exc).__name__}: {_short(str(exc))}); the file is damaged"
        raise ONNXFileError(msg) from None
    if array.dtype.kind not in "biuf" or array.size != math.prod(dims):
        msg = f"{what} holds {array.dtype} data of {array.size} element(s) for shape {dims}; expected numbers"
        raise ONNXFileError(msg)
    result = array.astype(np.float64)
    if not np.all(np.isfinite(result)):
        msg = f"{what} holds values that are not finite; a quantized model's constants are finite"
        raise ONNXFileError(msg)
    return result


def _attribute(onnx: Any, attribute: Any, where: str) -> Any:
    """An attribute's value as plain data (ints, floats, strings, lists of them; a tensor for ``Constant``)."""
    kind = onnx.AttributeProto
    plain = {
        kind.INT: lambda a: int(a.i),
        kind.FLOAT: lambda a: float(a.f),
        kind.INTS: lambda a: tuple(int(v) for v in a.ints),
        kind.FLOATS: lambda a: tuple(float(v) for v in a.floats),
    }
    if attribute.type in plain:
        return plain[attribute.type](attribute)
    if attribute.type == kind.STRING:
        try:
            return attribute.s.decode("utf-8")
        except UnicodeDecodeError:
            msg = f"{where}: attribute {attribute.name!r} is not UTF-8 text; the file is damaged"
            raise ONNXFileError(msg) from None
    if attribute.type == kind.TENSOR:
        return _tensor(onnx, attribute.t, f"{where}: attribute {attribute.name!r}")
    msg = (
        f"{where}: attribute {_short(attribute.name)!r} is of ONNX type {int(attribute.type)} (a graph, or "
        "a list of tensors); only numbers, strings and tensors are read: this node's kind is not supported"
    )
    raise ONNXFileError(msg)


def _shape(value: Any, where: str) -> tuple[int, ...]:
    """The per-sample shape of a graph input or output (the first axis is the batch, which may be symbolic)."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        msg = f"{where} has no tensor shape; export the model with a fixed input shape (example input)"
        raise ONNXFileError(msg)
    dims = value.type.tensor_type.shape.dim
    shape = []
    for k, dim in enumerate(dims):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            shape.append(int(dim.dim_value))
        elif k:
            label = dim.dim_param if dim.HasField("dim_param") else "unknown"
            msg = (
                f"{where}: axis {k} has a dynamic size ({_short(label)!r}); a table network has fixed shapes: "
                "export the model with a fixed input shape"
            )
            raise ONNXFileError(msg)
        else:
            shape.append(1)
    if len(shape) < 2 or math.prod(shape) > MAX_ELEMENTS:
        msg = f"{where}: shape {shape} is not a batch (N, ...) of at most {MAX_ELEMENTS:,} elements per sample"
        raise ONNXFileError(msg)
    return tuple(shape[1:])


def _name(text: str, default: str, what: str) -> str:
    bad = unprintable(text)
    if bad is not None:
        msg = f"{what} {_short(text)!r} holds the unprintable character {bad!r}; rename it in the model"
        raise ONNXFileError(msg)
    return _short(text, 120) if text else default


def read_graph(model: Any, *, what: str) -> OnnxGraph:
    """Parse ``model`` (a path or an ``onnx.ModelProto``) and check its structure before any work."""
    onnx = onnx_module(what)
    proto, source = load_proto(model, what)
    graph = proto.graph
    if not graph.node:
        msg = f"{what}: {source} holds no graph nodes; export the model with brevitas.export.export_qonnx"
        raise ONNXFileError(msg)
    constants, dtypes = {}, {}
    for init in graph.initializer:
        name = _name(init.name, "", f"{what}: an initializer")
        constants[name] = _tensor(onnx, init, f"{what}: initializer {name!r}")
        dtypes[name] = _dtype(onnx, init)
    inputs = [v for v in graph.input if v.name not in constants]
    if len(inputs) != 1 or len(graph.output) != 1:
        msg = (
            f"{what}: {source} has {len(inputs)} input(s) and {len(graph.output)} output(s); a table network reads "
            "one input tensor and writes one output tensor"
        )
        raise ONNXFileError(msg)
    input_name = _name(inputs[0].name, "", f"{what}: the graph input")
    shape = _shape(inputs[0], f"{what}: graph input {input_name!r}")
    ops = []
    known = {input_name, *constants, ""}
    for k, node in enumerate(graph.node):
        name = _name(node.name, f"node{k}", f"{what}: node {k}'s name")
        op_type = _name(node.op_type, "?", f"{what}: node {name!r}'s op_type")
        where = f"{what}: node {name!r} ({op_type})"
        for tensor in node.input:
            if tensor not in known:
                msg = (
                    f"{where} reads tensor {_short(tensor)!r}, which no earlier node, initializer or input provides "
                    "(a missing initializer, or nodes out of order); export the model again"
                )
                raise ONNXFileError(msg)
        attributes = {a.name: _attribute(onnx, a, where) for a in node.attribute}
        known.update(node.output)
        for attribute in node.attribute:
            if op_type == "Constant" and attribute.type == onnx.AttributeProto.TENSOR and node.output:
                dtypes[node.output[0]] = _dtype(onnx, attribute.t)
        ops.append(OnnxOp(name, op_type, node.domain, tuple(node.input), tuple(node.output), attributes))
    output_name = graph.output[0].name
    if output_name not in known:
        msg = f"{what}: the graph output {_short(output_name)!r} is produced by no node; export the model again"
        raise ONNXFileError(msg)
    opsets = {str(o.domain): int(o.version) for o in proto.opset_import}
    return OnnxGraph(tuple(ops), constants, input_name, shape, output_name, source, dtypes, opsets)


def _dtype(onnx: Any, tensor: Any) -> str:
    """The numpy name of a tensor's stored type (what QuantizeLinear's range follows), ``"?"`` if unknown."""
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)))
    except Exception:  # an unknown type number: _tensor refuses such a tensor when it decodes it
        return "?"
