"""Malformed and unsupported QONNX files: each refused with an iotable error that names the node (or the file
part) and the fix, before any table is computed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import iotable
from iotable.errors import (
    IOTableError,
    ModelError,
    ONNXFileError,
    SpecOptionError,
    TableTooLargeError,
    UnsupportedQuantizerError,
)

from . import qonnxmodels as qm
from . import qonnxopmodels as om

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install 'iotable[onnx]')")
pytest.importorskip("qonnx", reason="the onnx extra (pip install 'iotable[onnx]')")
from onnx import TensorProto, helper  # noqa: E402

WEIGHTS = [[1.0, -1.0], [1.0, 0.5], [-0.5, 1.0]]


def base() -> Any:
    """Input Quant -> MatMul -> Quant over 3 features: a good model the cases below break."""
    return qm.linear_model(WEIGHTS)


def _edit(change: Callable[[Any], Any]) -> Callable[[], Any]:
    def make() -> Any:
        proto = copy.deepcopy(base())
        result = change(proto)
        return proto if result is None else result

    return make


def _node(proto: Any, name: str) -> Any:
    return next(n for n in proto.graph.node if n.name == name)


def _init(proto: Any, name: str) -> Any:
    return next(i for i in proto.graph.initializer if i.name == name)


def _replace_init(proto: Any, name: str, value: Any) -> None:
    array = np.asarray(value)
    tensor = onnx.numpy_helper.from_array(array, name) if array.dtype.kind in "iu" else qm.constant(name, value)
    _init(proto, name).CopyFrom(tensor)


def _set_attr(node: Any, name: str, value: Any) -> None:
    for attribute in node.attribute:
        if attribute.name == name:
            node.attribute.remove(attribute)
            break
    node.attribute.append(helper.make_attribute(name, value))


def _insert(proto: Any, index: int, node: Any) -> None:
    proto.graph.node.insert(index, node)


def _rewire(proto: Any, name: str, inputs: list[str]) -> None:
    node = _node(proto, name)
    del node.input[:]
    node.input.extend(inputs)


def _truncated() -> bytes:
    data = base().SerializeToString()
    return data[: len(data) - 7]


def _absurd(proto: Any) -> None:
    weight = _init(proto, "w")
    del weight.dims[:]
    weight.dims.extend([10**6, 10**6])


def _wrong_length(proto: Any) -> None:
    weight = _init(proto, "w")
    weight.ClearField("float_data")
    weight.raw_data = b"\0" * 8


def _external(proto: Any) -> None:
    weight = _init(proto, "w")
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"


def _dynamic(proto: Any) -> None:
    dim = proto.graph.input[0].type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_param = "features"


def _no_shape(proto: Any) -> None:
    proto.graph.input[0].type.tensor_type.ClearField("shape")


def _two_inputs(proto: Any) -> None:
    proto.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3]))


def _float_model() -> Any:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return qm.model(nodes, [qm.constant("w", WEIGHTS)], features=3, outputs=2)


def _unquantized_output(proto: Any) -> None:
    proto.graph.node.remove(_node(proto, "qout"))
    proto.graph.output[0].name = "h"


def _branch(proto: Any) -> None:
    _insert(proto, 2, helper.make_node("Relu", ["xq"], ["r"], name="side"))


def _branch_of_float(proto: Any) -> None:
    _insert(proto, 3, helper.make_node("Relu", ["h"], ["r"], name="side"))


def _subgraph(proto: Any) -> None:
    body = helper.make_graph([], "body", [], [])
    _insert(proto, 1, helper.make_node("Loop", ["xq"], ["xl"], name="loop", body=body))


def _two_computed(proto: Any) -> None:
    _insert(proto, 2, helper.make_node("Add", ["h", "h"], ["h3"], name="add"))
    _rewire(proto, "qout", ["h3", "qout_s", "qout_z", "qout_b"])


def _after_matmul(op: Any) -> Callable[[Any], None]:
    """The node ``op`` (reading ``h``, writing ``h2``) inserted between the MatMul and the output Quant."""

    def change(proto: Any) -> None:
        _insert(proto, 2, op)
        _rewire(proto, "qout", ["h2", "qout_s", "qout_z", "qout_b"])

    return change


def _thresholds(values: Any) -> Callable[[], Any]:
    return lambda: qm.threshold_model([[1.0, 2.0], [1.0, -1.0]], values)


def _conv_of_conv() -> Any:
    proto = qm.conv_model()
    first = helper.make_node("Conv", ["xq", "w", "b"], ["xr"], name="conv0", kernel_shape=[2], pads=[1, 0])
    _insert(proto, 1, first)
    _rewire(proto, "conv", ["xr", "w", "b"])
    return proto


def _conv_of_kernel(size: int) -> Any:
    proto = qm.conv_model(pads=(0, 0))
    _replace_init(proto, "w", np.ones((2, 2, size)))
    _set_attr(_node(proto, "conv"), "kernel_shape", [size])
    return proto


def _write(tmp_path: Path, made: Any) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(made if isinstance(made, bytes) else made.SerializeToString())
    return path


def _qcdq(change: Callable[[Any], Any]) -> Callable[[], Any]:
    def make() -> Any:
        proto = qm.qcdq_model(WEIGHTS)
        change(proto)
        return proto

    return make


def _op_edit(make: Callable[[], Any], change: Callable[[Any], Any]) -> Callable[[], Any]:
    """A model of ``make`` changed by ``change`` (the shapes of the good model kept: no inference again)."""

    def edited() -> Any:
        proto = make()
        change(proto)
        return proto

    return edited


def _flat_pool(proto: Any) -> None:
    _insert(proto, 1, helper.make_node("Flatten", ["xq"], ["xf"], name="flat"))
    _rewire(proto, "pool", ["xf"])


def _pool_head(proto: Any) -> None:
    proto.graph.node.remove(_node(proto, "qout"))
    proto.graph.output[0].name = "p"


def _indices(proto: Any) -> None:
    _node(proto, "pool").output.append("where")


def _trunc_per_channel(proto: Any) -> None:
    _replace_init(proto, "ts", np.asarray([0.25, 0.25], np.float32))


def _trunc_opset(proto: Any) -> None:
    for opset in proto.opset_import:
        if opset.domain == qm.QONNX:
            opset.version = 1


def _pool_of_computed(proto: Any) -> None:
    _insert(proto, 1, helper.make_node("Relu", ["xq"], ["xr"], name="relu"))
    _rewire(proto, "pool", ["xr"])


def _join(kind: str, change: Callable[[Any], Any]) -> Callable[[], Any]:
    return _op_edit(lambda: om.join_model(kind), change)


def _operand_of_float(name: str) -> Callable[[Any], None]:
    def change(proto: Any) -> None:
        _rewire(proto, "qr", ["xq", "qr_s", "qr_z", "qr_b"])
        _rewire(proto, name, ["r", "xr"])

    return change


def _reshape_to_computed(proto: Any) -> None:
    flat = _node(proto, "flat")
    flat.op_type = "Reshape"
    flat.input.append("xq")


def _reshape_codes_to_image(proto: Any) -> None:
    flat = _node(proto, "fa")
    flat.op_type = "Reshape"
    flat.input.append("shape")
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray([-1, 3, 2], np.int64), "shape"))


def _transpose_of_float(proto: Any) -> None:
    _insert(proto, 1, helper.make_node("Relu", ["xq"], ["xr"], name="relu"))
    _rewire(proto, "tr", ["xr"])


def _transpose_into_quant(proto: Any) -> None:
    _rewire(proto, "qout", ["t", "qout_s", "qout_z", "qout_b"])
    for name in ("flat", "mm"):
        proto.graph.node.remove(_node(proto, name))
    proto.graph.output[0].name = "y"


_POOL_FIX = r"export the pooling with explicit kernel_shape, strides and pads"

OP_CASES: list[tuple[str, Callable[[], Any], type[IOTableError], str]] = [
    (
        "maxpool auto_pad",
        _op_edit(om.pool_model, lambda p: _set_attr(_node(p, "pool"), "auto_pad", "SAME_UPPER")),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*auto_pad='SAME_UPPER'; " + _POOL_FIX,
    ),
    (
        "maxpool ceil_mode",
        _op_edit(om.pool_model, lambda p: _set_attr(_node(p, "pool"), "ceil_mode", 1)),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*ceil_mode=1; a window past the input's end",
    ),
    (
        "maxpool without kernel_shape",
        _op_edit(om.pool_model, lambda p: _node(p, "pool").attribute.remove(_node(p, "pool").attribute[0])),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*no attribute 'kernel_shape'",
    ),
    (
        "maxpool stride 0",
        _op_edit(om.pool_model, lambda p: _set_attr(_node(p, "pool"), "strides", [0])),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*attribute 'strides' is \(0,\); expected 1 integers >= 1",
    ),
    (
        "maxpool kernel of two axes on one",
        _op_edit(om.pool_model, lambda p: _set_attr(_node(p, "pool"), "kernel_shape", [2, 2])),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*attribute 'kernel_shape' is \(2, 2\); expected 1 integers",
    ),
    (
        "maxpool asymmetric pads",
        _op_edit(om.pool_model, lambda p: _set_attr(_node(p, "pool"), "pads", [1, 0])),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*pads \(1, 0\); a max-pool pads each axis the same before and after",
    ),
    (
        "maxpool of flat features",
        _op_edit(om.pool_model, _flat_pool),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*reads codes of shape \(10,\): quantize the pooling's input",
    ),
    (
        "maxpool of a tensor no quantizer ends",
        _op_edit(om.pool_model, _pool_of_computed),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*reads a tensor no quantizer ends",
    ),
    (
        "maxpool with indices",
        _op_edit(om.pool_model, _indices),
        ONNXFileError,
        r"node 'pool' \(MaxPool\).*with 2 outputs \(indices\); export it with one output",
    ),
    (
        "averagepool padded without the pads counted",
        lambda: om.pool_model("AveragePool", pads=[1, 1]),
        ONNXFileError,
        r"node 'pool' \(AveragePool\).*count_include_pad=0; .*export it with count_include_pad=1 or without pads",
    ),
    (
        "averagepool as a float head",
        _op_edit(lambda: om.pool_model("AveragePool"), _pool_head),
        ModelError,
        r"graph output 'p' is not the output of a quantizer.*node 'pool' \(AveragePool\) writes it, a float head "
        r"\(\['pool'\]\)",
    ),
    (
        "averagepool kernel larger than its input",
        _op_edit(lambda: om.pool_model("AveragePool"), lambda p: _set_attr(_node(p, "pool"), "kernel_shape", [9])),
        ONNXFileError,
        r"node 'pool' \(AveragePool\).*the kernel \(9,\) does not fit the \(padded\) input \(2, 5\)",
    ),
    (
        "trunc of opset 1",
        _op_edit(om.trunc_model, _trunc_opset),
        ONNXFileError,
        r"node 'trunc' \(Trunc\).*QONNX opset 1 with 6 inputs; expected opset 2 .*brevitas >= 0.11",
    ),
    (
        "trunc per-channel scale",
        _op_edit(om.trunc_model, _trunc_per_channel),
        ONNXFileError,
        r"node 'trunc' \(Trunc\).*scale has 2 values; expected one \(per tensor\)",
    ),
    (
        "trunc signed 2",
        _op_edit(om.trunc_model, lambda p: _set_attr(_node(p, "trunc"), "signed", 2)),
        ONNXFileError,
        r"node 'trunc' \(Trunc\).*attribute 'signed' is 2; expected 0 or 1",
    ),
    (
        "trunc output bits 0",
        _op_edit(om.trunc_model, lambda p: _replace_init(p, "tob", 0.0)),
        ONNXFileError,
        r"node 'trunc' \(Trunc\).*output bit width 0.0; expected scales > 0 and 1 to 16 output bits",
    ),
    (
        "trunc unknown rounding",
        _op_edit(om.trunc_model, lambda p: _set_attr(_node(p, "trunc"), "rounding_mode", "STOCHASTIC")),
        ModelError,
        r"node 'trunc' \(Trunc\).*rounding_mode 'STOCHASTIC' is not one QONNX defines",
    ),
    (
        "concat along the positions",
        _join("concat", lambda p: _set_attr(_node(p, "cat"), "axis", 2)),
        ONNXFileError,
        r"node 'cat' \(Concat\).*axis=2 joins along no channel axis of 3-axis tensors.*concatenate along the channels",
    ),
    (
        "concat without an axis",
        _join("concat", lambda p: _node(p, "cat").attribute.remove(_node(p, "cat").attribute[0])),
        ONNXFileError,
        r"node 'cat' \(Concat\).*attribute 'axis' is None; expected one integer",
    ),
    (
        "concat of a tensor no quantizer ends",
        _join("concat", _operand_of_float("cat")),
        ONNXFileError,
        r"node 'cat' \(Concat\).*input 'xr' is no quantizer's output.*quantize each operand first",
    ),
    (
        "add of a constant first",
        _join("add", lambda p: _rewire(p, "add", ["qr_s", "r"])),
        ModelError,
        r"node 'add' \(Add\).*takes the constant second; this one reads \['a constant', 'Codes'\]",
    ),
    (
        "add of a tensor no quantizer ends",
        _join("add", _operand_of_float("add")),
        ModelError,
        r"node 'add' \(Add\).*reads \['Codes', 'Float'\].*quantize both operands \(brevitas' QuantEltwiseAdd\)",
    ),
    (
        "transpose moving the batch axis",
        _join("transpose", lambda p: _set_attr(_node(p, "tr"), "perm", [1, 0, 2])),
        ONNXFileError,
        r"node 'tr' \(Transpose\).*perm=\(1, 0, 2\).*keeps the batch axis first",
    ),
    (
        "transpose of a tensor no quantizer ends",
        _join("transpose", _transpose_of_float),
        ONNXFileError,
        r"node 'tr' \(Transpose\).*a Transpose of a tensor no quantizer ends.*quantize before the Transpose",
    ),
    (
        "codes reshaped to another image",
        _join("concat-features", _reshape_codes_to_image),
        ONNXFileError,
        r"node 'fa' \(Reshape\).* reshapes codes of shape \(2, 3\) per sample to \(3, 2\).*reshape to \(N, features\)",
    ),
    (
        "transpose reshaped to a computed shape",
        _join("transpose", _reshape_to_computed),
        ONNXFileError,
        r"node 'flat' \(Reshape\).*computed \(a dynamic shape\).*export the model with a fixed shape",
    ),
    (
        "transpose flattened from axis 2",
        _join("transpose", lambda p: _set_attr(_node(p, "flat"), "axis", 2)),
        ONNXFileError,
        r"node 'flat' \(Flatten\).*axis=2 merges the batch axis",
    ),
    (
        "transpose read without a flatten",
        _join("transpose", _transpose_into_quant),
        ONNXFileError,
        r"node 'qout' \(Quant\).*reads a Transpose's output of shape \(3, 2\).*put a Flatten",
    ),
]


CASES: list[tuple[str, Callable[[], Any], type[IOTableError], str]] = [
    ("truncated", _truncated, ONNXFileError, r"truncated or not ONNX: export it again"),
    ("not onnx", lambda: b"\xff\xfe not a protobuf \x00\x01" * 3, ONNXFileError, r"not a readable ONNX model"),
    ("empty file", lambda: b"", ONNXFileError, r"holds no graph nodes; export the model"),
    ("no nodes", _edit(lambda p: p.graph.ClearField("node")), ONNXFileError, r"holds no graph nodes"),
    (
        "unknown op",
        _edit(_after_matmul(helper.make_node("Softmax", ["h"], ["h2"], name="sm"))),
        ModelError,
        r"node 'sm' \(Softmax\).*'Softmax' is not supported between quantizers; supported: .*export the model without",
    ),
    (
        "unknown domain",
        _edit(_after_matmul(helper.make_node("Evil", ["h"], ["h2"], name="ev", domain="com.evil"))),
        ModelError,
        r"node 'ev' \(Evil\).*operator domain 'com.evil'",
    ),
    (
        "missing initializer",
        _edit(lambda p: p.graph.initializer.remove(_init(p, "w"))),
        ONNXFileError,
        r"node 'mm' \(MatMul\) reads tensor 'w', which no earlier node, initializer or input provides",
    ),
    (
        "nodes out of order",
        _edit(lambda p: p.graph.node.reverse()),
        ONNXFileError,
        r"node 'qout' \(Quant\) reads tensor 'h'.*nodes out of order",
    ),
    ("dynamic shape", _edit(_dynamic), ONNXFileError, r"axis 1 has a dynamic size \('features'\).*fixed input shape"),
    ("no input shape", _edit(_no_shape), ONNXFileError, r"graph input 'x' has no tensor shape"),
    ("two inputs", _edit(_two_inputs), ONNXFileError, r"2 input\(s\) and 1 output\(s\); a table network reads one"),
    ("float model", _float_model, ModelError, r"node 'mm' \(MatMul\).*before any quantizer.*put a Quant"),
    (
        "unquantized output",
        _edit(_unquantized_output),
        ModelError,
        r"graph output 'h' is not the output of a quantizer.*node 'mm' \(MatMul\) writes it, a float head "
        r"\(\['mm'\]\).*end the model in a quantizer.*or export the model up to its last quantizer",
    ),
    ("absurd tensor", _edit(_absurd), ONNXFileError, r"initializer 'w' claims shape \[1000000, 1000000\]"),
    ("raw data of the wrong length", _edit(_wrong_length), ONNXFileError, r"initializer 'w' cannot be decoded"),
    ("external data", _edit(_external), ONNXFileError, r"initializer 'w' stores its data outside the file"),
    (
        "not finite",
        _edit(lambda p: _replace_init(p, "w", [[np.nan, 1.0]] * 3)),
        ONNXFileError,
        r"initializer 'w' holds values that are not finite",
    ),
    (
        "unprintable name",
        _edit(lambda p: setattr(_node(p, "mm"), "name", "m\nm")),
        ONNXFileError,
        r"unprintable character '\\n'; rename it",
    ),
    (
        "quant of 3 inputs",
        _edit(lambda p: _rewire(p, "qout", ["h", "qout_s", "qout_z"])),
        ModelError,
        r"node 'qout' \(Quant\).*4 inputs \(x, scale, zero point, bit width\)",
    ),
    (
        "per-channel activation scale",
        _edit(lambda p: _replace_init(p, "qout_s", [1.0, 2.0])),
        UnsupportedQuantizerError,
        r"node 'qout' \(Quant\).*activation quantizer's scale has shape \(2,\); a table layer's output has one "
        r"domain \(as in the torch route.*use one scale",
    ),
    (
        "input scale per channel of the wrong count",
        _edit(lambda p: _replace_init(p, "qin_s", [1.0, 2.0])),
        UnsupportedQuantizerError,
        r"node 'qin' \(Quant\).*input quantizer's scale has shape \(2,\).*one scale per channel \(shape \(1, C, "
        r"\.\.\.\), C = 3\)",
    ),
    (
        "fractional bit width",
        _edit(lambda p: _replace_init(p, "qout_b", 2.5)),
        ModelError,
        r"node 'qout' \(Quant\).*bit width 2.5; expected an integer from 1 to 16",
    ),
    ("huge bit width", _edit(lambda p: _replace_init(p, "qout_b", 40)), ModelError, r"bit width 40.0; expected"),
    ("zero scale", _edit(lambda p: _replace_init(p, "qout_s", 0.0)), ModelError, r"node 'qout'.*scale 0.0; expected a"),
    (
        "unknown rounding",
        _edit(lambda p: _set_attr(_node(p, "qout"), "rounding_mode", "BANANA")),
        ModelError,
        r"rounding_mode 'BANANA' is not one QONNX defines; expected one of \[.*'HALF_EVEN'",
    ),
    (
        "signed of 2",
        _edit(lambda p: _set_attr(_node(p, "qout"), "signed", 2)),
        ModelError,
        r"node 'qout'.*attribute 'signed' is 2; expected 0 or 1",
    ),
    (
        "computed weights",
        _edit(lambda p: _rewire(p, "mm", ["xq", "xq"])),
        ModelError,
        r"node 'mm' \(MatMul\).*weight matrix \(input 1\) is computed, not a constant",
    ),
    (
        "weights of the wrong shape",
        _edit(lambda p: _replace_init(p, "w", [[1.0, 1.0]] * 2)),
        ModelError,
        r"node 'mm'.*weights of shape \(2, 2\) for 3 input feature\(s\)",
    ),
    (
        "gemm transA",
        _edit(lambda p: _node(p, "mm").CopyFrom(helper.make_node("Gemm", ["xq", "w"], ["h"], name="mm", transA=1))),
        ModelError,
        r"node 'mm' \(Gemm\).*transA",
    ),
    ("branch to nowhere", _edit(_branch), ModelError, r"node 'side' \(Relu\).*output 'r' is read by no node"),
    (
        "branch of a layer in progress",
        _edit(_branch_of_float),
        ModelError,
        r"node 'side' \(Relu\).*reads tensor 'h', which an earlier node reads too and no quantizer ends",
    ),
    ("subgraph attribute", _edit(_subgraph), ONNXFileError, r"node 'loop' \(Loop\): attribute 'body'.*not supported"),
    ("add of two computed tensors", _edit(_two_computed), ModelError, r"node 'add' \(Add\).*of two computed tensors"),
    (
        "reshape before the input quantizer",
        _edit(
            lambda p: (
                _insert(p, 0, helper.make_node("Flatten", ["x"], ["xf"], name="fl")),
                _rewire(p, "qin", ["xf", "qin_s", "qin_z", "qin_b"]),
            )[0]
        ),
        ModelError,
        r"node 'fl' \(Flatten\).* reshapes the graph input before its quantizer",
    ),
    (
        "constant without a tensor",
        _edit(lambda p: _insert(p, 0, helper.make_node("Constant", [], ["c"], name="k", value_float=1.0))),
        ModelError,
        r"node 'k' \(Constant\).*without a tensor",
    ),
    (
        "unfolded constant op",
        _edit(lambda p: _insert(p, 0, helper.make_node("Sqrt", ["w"], ["w2"], name="sq"))),
        ModelError,
        r"node 'sq' \(Sqrt\).*of constants is not folded",
    ),
    (
        "qcdq dequantize of another scale",
        _qcdq(lambda p: _rewire(p, "dq_out", ["hc", "s_in", "z_out"])),
        ModelError,
        r"node 'dq_out' \(DequantizeLinear\).*same scale and zero point \(the QCDQ form",
    ),
    (
        "qcdq clip to no bit width's range",
        _qcdq(lambda p: _replace_init(p, "hi_out", np.asarray(5, np.uint8))),
        ModelError,
        r"node 'dq_out'.*integers saturated to \[0, 5\], which is no bit width's range",
    ),
    (
        "qcdq zero point of type int32",
        _qcdq(lambda p: _init(p, "z_out").CopyFrom(onnx.numpy_helper.from_array(np.asarray(0, np.int32), "z_out"))),
        ModelError,
        r"node 'q_out' \(QuantizeLinear\).*zero point of type int32; expected one of",
    ),
    (
        "qcdq integers read without dequantizing",
        _qcdq(lambda p: (p.graph.node.remove(_node(p, "dq_in")), _rewire(p, "mm", ["xc", "w"]))),
        ModelError,
        r"node 'mm' \(MatMul\).* reads QuantizeLinear's integers; put a DequantizeLinear",
    ),
    (
        "conv auto_pad",
        lambda: qm.conv_model(auto_pad="SAME_UPPER", pads=(0, 0)),
        ModelError,
        r"node 'conv' \(Conv\).*auto_pad='SAME_UPPER'; export the model with explicit pads",
    ),
    (
        "conv of a conv before its quantizer",
        _conv_of_conv,
        ModelError,
        r"node 'conv' \(Conv\).*reads the output of a quantizer directly",
    ),
    (
        "conv kernel larger than its input",
        lambda: _conv_of_kernel(9),
        ModelError,
        r"node 'conv' \(Conv\).*the kernel \(9,\) does not fit the \(padded\) input \(2, 5\)",
    ),
    (
        "descending thresholds",
        _thresholds([[2.0, 1.0, 4.0], [-1.0, 0.0, 3.0]]),
        ModelError,
        r"node 'mt' \(MultiThreshold\).*thresholds must ascend",
    ),
    (
        "thresholds of the wrong shape",
        _thresholds([[[1.0]]]),
        ModelError,
        r"node 'mt' \(MultiThreshold\).*thresholds of shape \(1, 1, 1\)",
    ),
]


CASES += OP_CASES


@pytest.mark.parametrize(("case", "make", "error", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_or_unsupported_file_is_refused_by_name(
    case: str, make: Callable[[], Any], error: type[IOTableError], words: str, tmp_path: Path
) -> None:
    """Each broken or unsupported file raises its iotable error, with the node (or part) and the fix named."""
    with pytest.raises(error, match=words):
        iotable.precompute(_write(tmp_path, make()))


def test_the_good_model_the_cases_break_is_read() -> None:
    """Tamper for the cases above: the model they start from gives a network (the refusals come from the edits)."""
    assert len(iotable.precompute(base()).tables) == 2


@pytest.mark.parametrize("make", [om.pool_model, lambda: om.pool_model("AveragePool"), om.trunc_model])
def test_the_good_pool_and_trunc_models_the_cases_break_are_read(make: Callable[[], Any]) -> None:
    """Tamper for the pooling and truncation cases: the models they start from give networks."""
    assert iotable.precompute(make()).tables


def test_a_table_over_max_rows_is_refused_before_any_row() -> None:
    """A unit of more rows than max_rows is refused with its layer, output and the fix."""
    with pytest.raises(
        TableTooLargeError, match=r"output 0 of layer 'layer0' reads 3 inputs, a table of 64 rows, more"
    ):
        iotable.precompute(base(), max_rows=63)
    assert len(iotable.precompute(base(), max_rows=64).tables) == 2


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file larger than the accepted size is refused before onnx reads it."""
    from iotable.onnxin import read

    path = _write(tmp_path, base())
    monkeypatch.setattr(read, "MAX_FILE_BYTES", path.stat().st_size - 1)
    with pytest.raises(ONNXFileError, match=r"more than the .* accepted"):
        iotable.precompute(path)


def test_a_missing_file_and_a_folder_are_refused(tmp_path: Path) -> None:
    """A path to nothing, or to a folder, is named with what to pass instead."""
    with pytest.raises(ONNXFileError, match=r"no file .*missing.onnx.*expected the model: a QONNX model"):
        iotable.precompute(tmp_path / "missing.onnx")
    with pytest.raises(ONNXFileError, match=r"not a regular file"):
        iotable.precompute(tmp_path)


def test_torch_only_options_are_refused_for_a_file() -> None:
    """example_input= and host= mean nothing for a QONNX model and are refused by name."""
    with pytest.raises(SpecOptionError, match=r"example_input= has no meaning for a QONNX model"):
        iotable.precompute(base(), example_input=np.zeros((1, 3)))
    with pytest.raises(SpecOptionError, match=r"host= has no meaning"):
        iotable.precompute(base(), host=["x"])


@pytest.mark.parametrize(
    "option", [{"memory_budget": 1 << 20}, {"check": False}, {"name": "mlp"}, {"fast_path": False}, {"reuse": False}]
)
def test_options_a_file_would_ignore_are_refused_by_name(option: dict) -> None:
    """An option of the torch route that would change nothing for a QONNX model is refused, never silently
    ignored; left at its default, the same model precomputes."""
    (key,) = option
    with pytest.raises(SpecOptionError, match=rf"{key}= has no meaning for a model read by the onnx front end"):
        iotable.precompute(base(), **option)
    assert len(iotable.precompute(base()).tables) > 0


def test_a_torch_module_still_needs_its_input_domain() -> None:
    """input_domain= is optional for a QONNX file only: a torch module without it is refused by name."""
    import torch

    with pytest.raises(SpecOptionError, match=r"input_domain= is required for a torch module"):
        iotable.precompute(torch.nn.Linear(2, 2))
