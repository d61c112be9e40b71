"""Constants of a QONNX graph folded before the walk reads them: weight quantizers (``Quant`` of an
initializer, as QONNX's reference computes it), transposes, reshapes and arithmetic of constants."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import ModelError
from .quant import Rounding, fold_quant
from .read import MAX_ELEMENTS, OnnxOp

__all__ = ["fold_constant", "per_feature"]


def per_feature(value: np.ndarray, width: int, where: str) -> np.ndarray:
    """A constant operand as one value per feature (a scalar for all of them), or an error naming its shape."""
    if value.size == 1:
        return np.full(width, float(value.reshape(-1)[0]))
    if value.size == width and max(value.shape, default=1) == width:
        return value.reshape(-1).astype(np.float64)
    msg = f"{where}: a constant of shape {value.shape} for {width} feature(s); expected one value or one per feature"
    raise ModelError(msg)


def _quant(op: OnnxOp, inputs: list[np.ndarray], where: str) -> np.ndarray:
    if len(inputs) != 4:
        msg = f"{where}: a Quant has 4 inputs (x, scale, zero point, bit width), this one {len(inputs)}"
        raise ModelError(msg)
    x, scale, zero, bits = inputs
    b = float(bits.reshape(-1)[0]) if bits.size == 1 else math.nan
    if not math.isfinite(b) or b != int(b):
        msg = f"{where}: the weight quantizer's bit width is {bits.reshape(-1)[:4].tolist()}; expected one integer"
        raise ModelError(msg)
    if not 1 <= b <= 32 or np.any(scale <= 0):
        msg = f"{where}: bit width {b:g} and scales {scale.reshape(-1)[:4].tolist()}; expected 1..32 bits, scales > 0"
        raise ModelError(msg)
    try:
        np.broadcast_shapes(x.shape, scale.shape, zero.shape)
    except ValueError:
        msg = f"{where}: scale {scale.shape} and zero point {zero.shape} do not broadcast to the weights {x.shape}"
        raise ModelError(msg) from None
    signed, narrow = bool(op.attributes.get("signed", 1)), bool(op.attributes.get("narrow", 0))
    mode = Rounding.parse(str(op.attributes.get("rounding_mode", "ROUND")), where)
    return fold_quant(x, scale, zero, int(b), signed=signed, narrow=narrow, mode=mode)


def _reshape(x: np.ndarray, shape: np.ndarray, where: str) -> np.ndarray:
    target = [int(v) for v in shape.reshape(-1)]
    target = [x.shape[k] if v == 0 and k < x.ndim else v for k, v in enumerate(target)]
    try:
        return x.reshape(target)
    except ValueError:
        msg = f"{where}: cannot reshape a constant of shape {x.shape} to {target}"
        raise ModelError(msg) from None


def _flatten(op: OnnxOp, x: np.ndarray) -> np.ndarray:
    axis = int(op.attributes.get("axis", 1)) % max(1, x.ndim)
    return x.reshape(math.prod(x.shape[:axis]), -1)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}


def fold_constant(op: OnnxOp, constants: dict[str, np.ndarray], where: str) -> np.ndarray:
    """The value of ``op``'s output when every input is a constant (a ``Constant`` node: its tensor)."""
    if op.op_type == "Constant":
        value = op.attributes.get("value")
        if not isinstance(value, np.ndarray):
            msg = f"{where}: a Constant node without a tensor 'value'; only tensor constants are read"
            raise ModelError(msg)
        return value
    inputs = [constants[t] for t in op.inputs if t]
    if not inputs:
        msg = f"{where}: a node without inputs; only Constant nodes may have none"
        raise ModelError(msg)
    try:
        if op.op_type == "Quant":
            result = _quant(op, inputs, where)
        elif op.op_type == "Identity":
            result = inputs[0]
        elif op.op_type == "Transpose":
            perm = op.attributes.get("perm")
            result = np.transpose(inputs[0], perm)
        elif op.op_type == "Reshape" and len(inputs) == 2:
            result = _reshape(inputs[0], inputs[1], where)
        elif op.op_type == "Flatten":
            result = _flatten(op, inputs[0])
        elif op.op_type == "Neg":
            result = -inputs[0]
        elif op.op_type in _BINARY and len(inputs) == 2:
            result = _BINARY[op.op_type](inputs[0], inputs[1])
        else:
            msg = (
                f"{where}: ONNX operation {op.op_type!r} of constants is not folded here (Quant, Identity, "
                "Transpose, Reshape, Flatten, Neg, Add, Sub, Mul, Div are); export the model with constants folded"
            )
            raise ModelError(msg)
    except (ValueError, TypeError) as exc:
        msg = f"{where}: its constant inputs do not fit ({exc}); the file is damaged"
        raise ModelError(msg) from None
    if result.size > MAX_ELEMENTS or not np.all(np.isfinite(result)):
        msg = f"{where}: folding its constants gives {result.size:,} values, some not finite, or too many"
        raise ModelError(msg)
    return np.asarray(result, np.float64)
