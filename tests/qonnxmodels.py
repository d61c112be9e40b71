"""Small QONNX models for the QONNX front end's tests: a brevitas MLP exported with ``export_qonnx`` and graphs
written node by node with ``onnx.helper`` (exact values, chosen rounding modes, FINN's MultiThreshold)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

QONNX = "qonnx.custom_op.general"


def brevitas_mlp() -> torch.nn.Module:
    """A 2-bit brevitas MLP 6 -> 4 -> 3 with sparse weights (a LogicNets-style mask) and batch norm, in eval mode."""
    import brevitas.nn as qnn

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=2, return_quant_tensor=False)
            self.fc1 = qnn.QuantLinear(6, 4, bias=True, weight_bit_width=2)
            self.bn = torch.nn.BatchNorm1d(4)
            self.act = qnn.QuantReLU(bit_width=2, return_quant_tensor=False)
            self.fc2 = qnn.QuantLinear(4, 3, bias=True, weight_bit_width=2)
            self.out = qnn.QuantIdentity(bit_width=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.fc2(self.act(self.bn(self.fc1(self.inp(x))))))

    torch.manual_seed(0)
    model = MLP()
    mask1 = torch.zeros(4, 6)
    for o, inputs in enumerate(((0, 1, 2), (2, 3), (3, 4, 5), (0, 5))):
        mask1[o, list(inputs)] = 1
    mask2 = torch.tensor([[1.0, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]])
    with torch.no_grad():
        model.fc1.weight.copy_(torch.sign(torch.randn(4, 6)) * 0.5 * mask1)
        model.fc2.weight.copy_(torch.sign(torch.randn(3, 4)) * 0.5 * mask2)
        model.bn.running_mean.copy_(torch.tensor([0.1, -0.2, 0.05, 0.0]))
        model.bn.running_var.copy_(torch.tensor([0.8, 1.2, 0.5, 1.0]))
        model.bn.weight.copy_(torch.tensor([1.1, 0.9, 1.3, 0.7]))
        model.bn.bias.copy_(torch.tensor([0.2, 0.1, -0.1, 0.3]))
    return model.eval()


def brevitas_cnn(rank: int) -> torch.nn.Module:
    """A 2-bit brevitas CNN of ``rank`` (1 or 2) spatial axes: a padded convolution with batch norm, then a
    strided one (grouped in 2D), weights of +-0.5 (no channel zeroed), in eval mode."""
    import brevitas.nn as qnn

    conv = qnn.QuantConv1d if rank == 1 else qnn.QuantConv2d
    norm = torch.nn.BatchNorm1d if rank == 1 else torch.nn.BatchNorm2d

    class CNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=2)
            self.c1 = conv(2 if rank == 1 else 1, 3, 2, padding=1, weight_bit_width=2)
            self.bn = norm(3)
            self.act = qnn.QuantReLU(bit_width=2)
            # grouped in 2D, so that a unit reads one channel's 2x2 window (8 bits), not 3 channels' (24)
            self.c2 = conv(
                3, 3 if rank == 2 else 2, 2, stride=2, groups=3 if rank == 2 else 1, weight_bit_width=2, bias=False
            )
            self.out = qnn.QuantIdentity(bit_width=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.c2(self.act(self.bn(self.c1(self.inp(x))))))

    torch.manual_seed(1)
    model = CNN()
    with torch.no_grad():
        for layer in (model.c1, model.c2):
            layer.weight.copy_(torch.sign(torch.randn_like(layer.weight)) * 0.5)
        model.bn.running_mean.copy_(torch.tensor([0.1, -0.2, 0.05]))
    return model.eval()


def export_brevitas(model: torch.nn.Module, path: Path, features: int | tuple[int, ...]) -> Path:
    """``model`` written as QONNX by brevitas (``export_qonnx``) at ``path``, for inputs of shape ``features``."""
    import warnings

    from brevitas.export import export_qonnx

    shape = (features,) if isinstance(features, int) else features
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_qonnx(model, torch.zeros(1, *shape), export_path=str(path))
    return path


def quant(name: str, x: str, out: str, *, bits: int, signed: int, narrow: int = 0, mode: str = "ROUND") -> Any:
    """A QONNX ``Quant`` node reading scale ``{name}_s``, zero point ``{name}_z`` and bit width ``{name}_b``."""
    from onnx import helper

    inputs = [x, f"{name}_s", f"{name}_z", f"{name}_b"]
    return helper.make_node(
        "Quant", inputs, [out], name=name, domain=QONNX, signed=signed, narrow=narrow, rounding_mode=mode
    )


def constant(name: str, value: Any) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def quant_constants(name: str, *, scale: float, zero: float = 0.0, bits: int = 2) -> list[Any]:
    return [constant(f"{name}_s", scale), constant(f"{name}_z", zero), constant(f"{name}_b", bits)]


def model(nodes: list[Any], initializers: list[Any], *, features: int, outputs: int, output: str = "y") -> Any:
    """A ``ModelProto`` of ``nodes`` reading ``x`` ``(1, features)`` and writing ``output`` ``(1, outputs)``."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, features])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, outputs])],
        initializer=initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)])
    return shapes(proto)


def shapes(proto: Any) -> Any:
    """``proto`` with every tensor's shape recorded (qonnx's executor needs them): inferred by qonnx."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.infer_shapes import InferShapes

    return ModelWrapper(proto).transform(InferShapes()).model


def linear_model(
    weights: Any, *, in_scale: float = 0.5, out_scale: float = 1.0, mode: str = "ROUND", out_signed: int = 0
) -> Any:
    """Input Quant (2-bit unsigned, ``in_scale``) -> MatMul(``weights``) -> Quant (3-bit, ``mode``)."""
    w = np.asarray(weights, np.float32)
    nodes = [
        quant("qin", "x", "xq", bits=2, signed=0),
        _matmul("mm", "xq", "w", "h"),
        quant("qout", "h", "y", bits=3, signed=out_signed, mode=mode),
    ]
    inits = [
        constant("w", w),
        *quant_constants("qin", scale=in_scale),
        *quant_constants("qout", scale=out_scale, bits=3),
    ]
    return model(nodes, inits, features=w.shape[0], outputs=w.shape[1])


def _matmul(name: str, a: str, b: str, out: str) -> Any:
    from onnx import helper

    return helper.make_node("MatMul", [a, b], [out], name=name)


def threshold_model(weights: Any, thresholds: Any, *, out_scale: float = 1.0, out_bias: float = 0.0) -> Any:
    """FINN's form: input Quant (2-bit unsigned, scale 1) -> MatMul(integer ``weights``) -> MultiThreshold."""
    from onnx import helper

    w = np.asarray(weights, np.float32)
    nodes = [
        quant("qin", "x", "xq", bits=2, signed=0),
        _matmul("mm", "xq", "w", "h"),
        helper.make_node(
            "MultiThreshold", ["h", "t"], ["y"], name="mt", domain=QONNX, out_scale=out_scale, out_bias=out_bias
        ),
    ]
    inits = [constant("w", w), constant("t", thresholds), *quant_constants("qin", scale=1.0)]
    return model(nodes, inits, features=w.shape[0], outputs=w.shape[1])


def export_brevitas_qcdq(model: torch.nn.Module, path: Path, features: int) -> Path:
    """``model`` written in the QuantizeLinear / Clip / DequantizeLinear form by brevitas (``export_onnx_qcdq``)."""
    import warnings

    from brevitas.export import export_onnx_qcdq

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_onnx_qcdq(model, torch.zeros(1, features), export_path=str(path), dynamo=False)
    return path


def qcdq_model(weights: Any, *, clip: tuple[float, float] | None = (0, 3), out_zero: Any = None) -> Any:
    """QCDQ form: input QuantizeLinear (int8, scale 0.5) -> Clip [-2, 1] -> DequantizeLinear -> MatMul(``weights``)
    -> QuantizeLinear (scale 1, zero point ``out_zero``, uint8 by default) -> Clip ``clip`` -> DequantizeLinear."""
    from onnx import helper, numpy_helper

    w = np.asarray(weights, np.float32)
    zero = np.asarray(0, np.uint8) if out_zero is None else out_zero
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xi"], name="q_in"),
        helper.make_node("Clip", ["xi", "lo_in", "hi_in"], ["xc"], name="clip_in"),
        helper.make_node("DequantizeLinear", ["xc", "s_in", "z_in"], ["xq"], name="dq_in"),
        helper.make_node("MatMul", ["xq", "w"], ["h"], name="mm"),
        helper.make_node("QuantizeLinear", ["h", "s_out", "z_out"], ["hi"], name="q_out"),
    ]
    inits = [
        constant("w", w),
        constant("s_in", 0.5),
        numpy_helper.from_array(np.asarray(0, np.int8), "z_in"),
        numpy_helper.from_array(np.asarray(-2, np.int8), "lo_in"),
        numpy_helper.from_array(np.asarray(1, np.int8), "hi_in"),
        constant("s_out", 1.0),
        numpy_helper.from_array(zero, "z_out"),
    ]
    if clip is None:
        nodes.append(helper.make_node("DequantizeLinear", ["hi", "s_out", "z_out"], ["y"], name="dq_out"))
    else:
        nodes.append(helper.make_node("Clip", ["hi", "lo_out", "hi_out"], ["hc"], name="clip_out"))
        nodes.append(helper.make_node("DequantizeLinear", ["hc", "s_out", "z_out"], ["y"], name="dq_out"))
        inits += [
            numpy_helper.from_array(np.asarray(clip[0], zero.dtype), "lo_out"),
            numpy_helper.from_array(np.asarray(clip[1], zero.dtype), "hi_out"),
        ]
    from onnx import TensorProto

    graph = helper.make_graph(
        nodes,
        "qcdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def conv_model(*, group: int = 1, pads: tuple[int, int] = (1, 0), stride: int = 1, auto_pad: str | None = None) -> Any:
    """Input Quant (2-bit signed, scale 0.5) of (2, 5) -> Conv1d(2 -> 2, kernel 2, ``pads``, ``stride``,
    ``group``) with integer weights and a bias -> Quant (3-bit signed, scale 1, ROUND)."""
    from onnx import TensorProto, helper

    weight = np.array([[[1.0, -1.0], [0.5, 1.0]], [[-1.0, 0.5], [1.0, 1.0]]], np.float32)[:, : 2 // group]
    attributes: dict[str, Any] = {"kernel_shape": [2], "pads": list(pads), "strides": [stride], "group": group}
    if auto_pad is not None:
        attributes["auto_pad"] = auto_pad
    nodes = [
        quant("qin", "x", "xq", bits=2, signed=1),
        helper.make_node("Conv", ["xq", "w", "b"], ["h"], name="conv", **attributes),
        quant("qout", "h", "y", bits=3, signed=1),
    ]
    inits = [
        constant("w", weight),
        constant("b", [0.25, -0.5]),
        *quant_constants("qin", scale=0.5),
        *quant_constants("qout", scale=1.0, bits=3),
    ]
    length = (5 + sum(pads) - 2) // stride + 1
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, length])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)])
    return shapes(proto)


def bipolar_model() -> Any:
    """Input Quant (2-bit unsigned, scale 0.5) -> MatMul(weights through a BipolarQuant of scale 0.5) ->
    BipolarQuant (scale 2): outputs -2 or +2."""
    from onnx import helper

    nodes = [
        quant("qin", "x", "xq", bits=2, signed=0),
        helper.make_node("BipolarQuant", ["w", "ws"], ["wq"], name="wbin", domain=QONNX),
        helper.make_node("MatMul", ["xq", "wq"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("BipolarQuant", ["hb", "os"], ["y"], name="bin", domain=QONNX),
    ]
    w = np.array([[0.3, -0.2], [-0.7, 0.1], [0.0, 0.4]], np.float32)  # 0.0 binarizes to +1: no zero weight
    inits = [
        constant("w", w),
        constant("ws", 0.5),
        constant("b", [0.25, -0.5]),
        constant("os", 2.0),
        *quant_constants("qin", scale=0.5),
    ]
    return model(nodes, inits, features=3, outputs=2)
