"""QONNX models of the pooling, truncation, joining and data-movement operations: brevitas models exported with
``export_qonnx`` / ``export_onnx_qcdq`` and small graphs written node by node with ``onnx.helper``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .qonnxmodels import QONNX, constant, quant, quant_constants, shapes


def brevitas_pool(rank: int, *, trunc: bool) -> torch.nn.Module:
    """A 2-bit brevitas model of ``rank`` spatial axes: a 1x1 convolution (3-bit weights, no row on a rounding tie), a QuantReLU, a max-pool of 2, an average
    pool of 2 with stride 1 (brevitas' ``TruncAvgPool2d`` to 3 bits where ``trunc``, else torch's, quantized after)
    and a QuantIdentity, in eval mode."""
    import brevitas.nn as qnn

    conv = qnn.QuantConv2d if rank == 2 else qnn.QuantConv1d
    max_pool = torch.nn.MaxPool2d if rank == 2 else torch.nn.MaxPool1d
    avg_pool = torch.nn.AvgPool2d if rank == 2 else torch.nn.AvgPool1d

    class Pools(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # TruncAvgPool2d reads brevitas' QuantTensor; the torch route reads plain tensors
            self.inp = qnn.QuantIdentity(bit_width=2, return_quant_tensor=trunc)
            self.conv = conv(2, 2, 1, weight_bit_width=3, bias=False, return_quant_tensor=trunc)
            self.act = qnn.QuantReLU(bit_width=2, return_quant_tensor=trunc)
            self.pool = max_pool(2)
            self.avg = qnn.TruncAvgPool2d(2, stride=1, bit_width=3) if trunc else avg_pool(2, stride=1)
            self.out = qnn.QuantIdentity(bit_width=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.avg(self.pool(self.act(self.conv(self.inp(x))))))

    torch.manual_seed(3)
    model = Pools()
    with torch.no_grad():
        model.conv.weight.copy_(torch.tensor([[0.9, -0.37], [0.41, 0.83]]).reshape(model.conv.weight.shape))
    return model.eval()


def export(model: torch.nn.Module, path: Path, shape: tuple[int, ...], *, qcdq: bool = False) -> Path:
    """``model`` written by brevitas as QONNX (or in the QCDQ form) at ``path``, for inputs of ``shape``."""
    import warnings

    from brevitas.export import export_onnx_qcdq, export_qonnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if qcdq:
            export_onnx_qcdq(model, torch.zeros(1, *shape), export_path=str(path))
        else:
            export_qonnx(model, torch.zeros(1, *shape), export_path=str(path))
    return path


def graph(nodes: list[Any], inits: list[Any], shape: tuple[int, ...], out_shape: tuple[int, ...], **opsets: int) -> Any:
    """A ``ModelProto`` of ``nodes`` reading ``x`` ``(1, *shape)`` and writing ``y`` ``(1, *out_shape)``."""
    from onnx import TensorProto, helper

    proto = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *shape])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *out_shape])],
            initializer=inits,
        ),
        opset_imports=[
            helper.make_opsetid("", opsets.get("onnx", 13)),
            helper.make_opsetid(QONNX, opsets.get("qonnx", 2)),
        ],
    )
    return shapes(proto)


def pool_model(op: str = "MaxPool", **attributes: Any) -> Any:
    """Input Quant (2-bit signed, scale 0.5) of (2, 5) -> ``op`` (kernel 2 unless given) -> Quant (3-bit signed,
    scale 0.25): every attribute as given."""
    from onnx import helper

    attributes = {"kernel_shape": [2], **attributes}
    nodes = [
        quant("qin", "x", "xq", bits=2, signed=1),
        helper.make_node(op, ["xq"], ["p"], name="pool", **attributes),
        quant("qout", "p", "y", bits=3, signed=1),
    ]
    inits = [*quant_constants("qin", scale=0.5), *quant_constants("qout", scale=0.25, bits=3)]
    kernel = attributes["kernel_shape"][0]
    pads = attributes.get("pads", [0, 0])
    stride = attributes.get("strides", [1])[0]
    length = max(1, (5 + sum(pads) - kernel) // stride + 1)
    return graph(nodes, inits, (2, 5), (2, length))


def trunc_model(*, mode: str = "FLOOR", out_scale: float = 1.0, bits: int = 2, signed: int = 0) -> Any:
    """Input Quant (3-bit unsigned, scale 0.5) of (2, 4) -> AveragePool(2, stride 2) -> Trunc (scale 0.25, input 4
    bits, ``out_scale``, ``bits`` output bits, ``mode``), as brevitas' TruncAvgPool writes it."""
    from onnx import helper

    nodes = [
        quant("qin", "x", "xq", bits=3, signed=0),
        helper.make_node("AveragePool", ["xq"], ["p"], name="avg", kernel_shape=[2], strides=[2]),
        helper.make_node(
            "Trunc",
            ["p", "ts", "tz", "tib", "tos", "tob"],
            ["y"],
            name="trunc",
            domain=QONNX,
            rounding_mode=mode,
            signed=signed,
            narrow=0,
        ),
    ]
    inits = [
        *quant_constants("qin", scale=0.5, bits=3),
        constant("ts", 0.25),
        constant("tz", 0.0),
        constant("tib", 4.0),
        constant("tos", out_scale),
        constant("tob", float(bits)),
    ]
    return graph(nodes, inits, (2, 4), (2, 2))


def every_input(shape: tuple[int, ...], levels: int, limit: int = 4096) -> np.ndarray:
    """Inputs of ``shape`` covering every code of every element (all combinations where ``limit`` allows)."""
    size = int(np.prod(shape))
    if levels**size <= limit:
        grid = np.indices((levels,) * size).reshape(size, -1).T
        return grid.reshape(-1, *shape)
    return np.random.default_rng(0).integers(0, levels, size=(limit, *shape))


def brevitas_branches(kind: str) -> torch.nn.Module:
    """A 2-bit brevitas model over (2, 4) that branches at its input quantizer: a 1x1 convolution quantized, then
    joined to the input by ``kind`` ("add": a residual add; "concat": along the channels), and a QuantIdentity;
    or ("transpose") the input's codes transposed to (4, 2), flattened, into a sparse QuantLinear."""
    import brevitas.nn as qnn

    class Branches(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=2)
            self.conv = qnn.QuantConv1d(2, 2, 1, weight_bit_width=3, bias=False)
            self.mid = qnn.QuantReLU(bit_width=2)
            self.fc = qnn.QuantLinear(8, 3, bias=True, weight_bit_width=3)
            self.out = qnn.QuantIdentity(bit_width=3 if kind == "add" else 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.inp(x)
            if kind == "transpose":
                return self.out(self.fc(x.transpose(1, 2).flatten(1)))
            y = self.mid(self.conv(x))
            return self.out(x + y if kind == "add" else torch.cat([x, y], dim=1))

    torch.manual_seed(4)
    model = Branches()
    with torch.no_grad():
        model.conv.weight.copy_(torch.tensor([[0.9, -0.37], [0.41, 0.83]]).reshape(model.conv.weight.shape))
        mask = torch.zeros(3, 8)
        for o, inputs in enumerate(((0, 1, 2), (3, 4), (5, 6, 7))):
            mask[o, list(inputs)] = 1
        model.fc.weight.copy_(torch.sign(torch.randn(3, 8)) * 0.5 * mask)  # no masked weight quantized to 0
    return model.eval()


def join_model(kind: str) -> Any:
    """Input Quant (2-bit signed, scale 0.5) of (2, 3) to ``xq``, a second quantizer of it (3-bit unsigned, scale
    0.25, after a Relu) to ``r``, then ``kind``: "add" (xq + r), "concat" (xq, r along the channels),
    "concat-features" (both flattened, joined, into a sparse MatMul) or "transpose" (xq transposed to (3, 2),
    flattened, into a sparse MatMul); a Quant (3-bit signed, scale 0.5)."""
    from onnx import helper

    nodes = [
        quant("qin", "x", "xq", bits=2, signed=1),
        helper.make_node("Relu", ["xq"], ["xr"], name="relu"),
        quant("qr", "xr", "r", bits=3, signed=0),
    ]
    inits = [*quant_constants("qin", scale=0.5), *quant_constants("qr", scale=0.25, bits=3)]
    out_shape: tuple[int, ...] = (2, 3)
    if kind == "add":
        nodes.append(helper.make_node("Add", ["xq", "r"], ["h"], name="add"))
    elif kind == "concat":
        nodes.append(helper.make_node("Concat", ["xq", "r"], ["h"], name="cat", axis=1))
        out_shape = (4, 3)
    elif kind == "concat-features":
        weight = np.zeros((12, 2), np.float32)
        weight[[0, 7, 11], 0] = [1.0, -1.0, 0.5]
        weight[[3, 6], 1] = [1.0, 1.0]
        nodes += [
            helper.make_node("Flatten", ["xq"], ["a"], name="fa"),
            helper.make_node("Flatten", ["r"], ["b"], name="fb"),
            helper.make_node("Concat", ["a", "b"], ["c"], name="cat", axis=-1),
            helper.make_node("MatMul", ["c", "w"], ["h"], name="mm"),
        ]
        inits.append(constant("w", weight))
        out_shape = (2,)
    else:
        weight = np.zeros((6, 2), np.float32)
        weight[[0, 1, 4], 0] = [1.0, -0.5, 0.75]
        weight[[2, 5], 1] = [1.0, 1.0]
        nodes = [
            nodes[0],
            helper.make_node("Transpose", ["xq"], ["t"], name="tr", perm=[0, 2, 1]),
            helper.make_node("Flatten", ["t"], ["f"], name="flat"),
            helper.make_node("MatMul", ["f", "w"], ["h"], name="mm"),
        ]
        inits = [*quant_constants("qin", scale=0.5), constant("w", weight)]
        out_shape = (2,)
    nodes.append(quant("qout", "h", "y", bits=3, signed=1))
    inits += quant_constants("qout", scale=0.5, bits=3)
    return graph(nodes, inits, (2, 3), out_shape)


def float32_chain_model(kind: str, *, mode: str = "ROUND") -> Any:
    """A float32 sum and a step after it, then a Quant (3-bit signed), with scales that put rows on float32
    ties: "add-relu" adds ``xq`` (2-bit signed, scale 0.2) and ``xq`` quantized again (3-bit signed, scale 0.3),
    then a Relu and a Quant of scale 1/3, over (2, 3); "pool-mul" averages windows of 2 of ``xq``
    (2-bit signed, scale 1/7) over (2, 5), then multiplies by 0.7 and quantizes with scale 0.2; "pool-affine"
    is "pool-mul" with a BatchNormalization (scale 0.1, bias 0.1, mean 1/7, variance 0.2) for the Mul.
    Every constant is the float32 of the number named; the last Quant rounds by ``mode``."""
    from onnx import helper

    if kind == "add-relu":
        nodes = [
            quant("qin", "x", "xq", bits=2, signed=1),
            quant("qr", "xq", "r", bits=3, signed=1),
            helper.make_node("Add", ["xq", "r"], ["h"], name="add"),
            helper.make_node("Relu", ["h"], ["hr"], name="relu"),
            quant("qout", "hr", "y", bits=3, signed=1, mode=mode),
        ]
        inits = [
            *quant_constants("qin", scale=0.2),
            *quant_constants("qr", scale=0.3, bits=3),
            *quant_constants("qout", scale=1 / 3, bits=3),
        ]
        return graph(nodes, inits, (2, 3), (2, 3))
    if kind == "pool-mul":
        after = [helper.make_node("Mul", ["p", "m"], ["h"], name="mul")]
        constants = [constant("m", 0.7)]
    else:
        after = [helper.make_node("BatchNormalization", ["p", "g", "b", "mu", "var"], ["h"], name="bn")]
        constants = [
            constant("g", [0.1, 0.1]),
            constant("b", [0.1, 0.1]),
            constant("mu", [1 / 7, 1 / 7]),
            constant("var", [0.2, 0.2]),
        ]
    nodes = [
        quant("qin", "x", "xq", bits=2, signed=1),
        helper.make_node("AveragePool", ["xq"], ["p"], name="avg", kernel_shape=[2], strides=[1]),
        *after,
        quant("qout", "h", "y", bits=3, signed=1, mode=mode),
    ]
    inits = [*quant_constants("qin", scale=1 / 7), *constants, *quant_constants("qout", scale=0.2, bits=3)]
    return graph(nodes, inits, (2, 5), (2, 4))


def float32_chain_qcdq() -> Any:
    """ "pool-mul" of :func:`float32_chain_model` in the QCDQ form: QuantizeLinear (int8, scale 1/7), Clip [-2, 1],
    DequantizeLinear, AveragePool (2, stride 1), Mul by 0.7, QuantizeLinear (int8, scale 0.2), Clip [-4, 3],
    DequantizeLinear; standard operations only, as onnxruntime runs them."""
    from onnx import helper, numpy_helper

    def qcdq(name: str, x: str, out: str, low: int, high: int) -> list[Any]:
        return [
            helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_i"], name=f"{name}_q"),
            helper.make_node("Clip", [f"{name}_i", f"{name}_lo", f"{name}_hi"], [f"{name}_c"], name=f"{name}_clip"),
            helper.make_node("DequantizeLinear", [f"{name}_c", f"{name}_s", f"{name}_z"], [out], name=f"{name}_dq"),
        ]

    def qcdq_constants(name: str, scale: float, low: int, high: int) -> list[Any]:
        integers = [np.asarray(v, np.int8) for v in (0, low, high)]
        names = [f"{name}_z", f"{name}_lo", f"{name}_hi"]
        return [constant(f"{name}_s", scale), *(numpy_helper.from_array(v, n) for v, n in zip(integers, names))]

    nodes = [
        *qcdq("qin", "x", "xq", -2, 1),
        helper.make_node("AveragePool", ["xq"], ["p"], name="avg", kernel_shape=[2], strides=[1]),
        helper.make_node("Mul", ["p", "m"], ["h"], name="mul"),
        *qcdq("qout", "h", "y", -4, 3),
    ]
    inits = [*qcdq_constants("qin", 1 / 7, -2, 1), constant("m", 0.7), *qcdq_constants("qout", 0.2, -4, 3)]
    return graph(nodes, inits, (2, 5), (2, 4), onnx=13)
