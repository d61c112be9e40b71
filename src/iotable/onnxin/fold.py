"""Constants of a QONNX graph folded before the walk reads them: weight quantizers (``Quant`` of an
initializer, as QONNX's reference computes it), transposes, reshapes and arithmetic of constants."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import ModelError
from .quant import Rounding, fold_quant
from .read import MAX_ELEMENTS, OnnxOp

__all__ = ["INTEGER_RANGES", "clip_bounds", "fold_constant", "integer_range", "per_feature"]

#: The integer types QuantizeLinear writes (its zero point's type) and their ranges.
INTEGER_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1)}


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
    if op.op_type == "BipolarQuant":
        signed, narrow = True, False
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


def _along(op: OnnxOp, x: np.ndarray, value: np.ndarray, where: str) -> np.ndarray:
    """A per-axis scale or zero point of QuantizeLinear / DequantizeLinear shaped to broadcast over ``x``."""
    if value.size == 1:
        return value.reshape(())
    axis = int(op.attributes.get("axis", 1))
    if not -x.ndim <= axis < x.ndim or value.ndim != 1 or value.size != x.shape[axis]:
        msg = f"{where}: a scale or zero point of shape {value.shape} along axis {axis} of a tensor {x.shape}"
        raise ModelError(msg)
    shape = [1] * x.ndim
    shape[axis] = -1
    return value.reshape(shape)


def clip_bounds(op: OnnxOp, constants: dict[str, np.ndarray], where: str) -> tuple[float, float]:
    """A Clip's bounds (its optional inputs 1 and 2, constants of one value each; infinite where absent)."""
    bounds = []
    for k, default in ((1, -np.inf), (2, np.inf)):
        name = op.inputs[k] if len(op.inputs) > k else ""
        if not name:
            bounds.append(default)
            continue
        value = constants.get(name)
        if value is None or value.size != 1:
            msg = f"{where}: a Clip bound (input {k}) that is computed or not one value; expected a scalar constant"
            raise ModelError(msg)
        bounds.append(float(value.reshape(-1)[0]))
    return bounds[0], bounds[1]


def integer_range(op: OnnxOp, dtypes: dict[str, str], where: str) -> tuple[int, int]:
    """The range of QuantizeLinear's output: its zero point's integer type (uint8 without one)."""
    dtype = dtypes.get(op.inputs[2], "?") if len(op.inputs) > 2 and op.inputs[2] else "uint8"
    if dtype not in INTEGER_RANGES:
        msg = f"{where}: a zero point of type {dtype}; expected one of {sorted(INTEGER_RANGES)} (QuantizeLinear's)"
        raise ModelError(msg)
    return INTEGER_RANGES[dtype]


def _qdq(op: OnnxOp, inputs: list[np.ndarray], dtypes: dict[str, str], where: str) -> np.ndarray:
    """QuantizeLinear (round half to even, saturate) or DequantizeLinear of constants, in float32 as onnxruntime."""
    x = np.asarray(inputs[0], np.float32)
    scale = _along(op, x, np.asarray(inputs[1], np.float32), where)
    zero = _along(op, x, np.asarray(inputs[2], np.float32), where) if len(inputs) > 2 else np.float32(0)
    if np.any(scale <= 0):
        msg = f"{where}: scales {np.asarray(inputs[1]).reshape(-1)[:4].tolist()}; expected scales > 0"
        raise ModelError(msg)
    if op.op_type == "DequantizeLinear":
        return ((x - zero) * scale).astype(np.float64)
    low, high = integer_range(op, dtypes, where)
    return np.clip(np.round(x / scale) + zero, low, high).astype(np.float64)


def _fold(
    op: OnnxOp, inputs: list[np.ndarray], constants: dict[str, np.ndarray], dtypes: dict[str, str], where: str
) -> np.ndarray:
    """One operation of constants (``inputs``, the present ones in order)."""
    kind = op.op_type
    if kind in _BINARY and len(inputs) == 2:
        return _BINARY[kind](inputs[0], inputs[1])
    folders: dict[str, Callable[[], np.ndarray]] = {
        "Quant": lambda: _quant(op, inputs, where),
        "BipolarQuant": lambda: _quant(op, [*inputs[:2], np.zeros(()), np.ones(())], where),
        "QuantizeLinear": lambda: _qdq(op, inputs, dtypes, where),
        "DequantizeLinear": lambda: _qdq(op, inputs, dtypes, where),
        "Clip": lambda: np.clip(inputs[0], *clip_bounds(op, constants, where)),
        "Identity": lambda: inputs[0],
        "Transpose": lambda: np.transpose(inputs[0], op.attributes.get("perm")),
        "Reshape": lambda: _reshape(inputs[0], inputs[1], where),
        "Flatten": lambda: _flatten(op, inputs[0]),
        "Neg": lambda: -inputs[0],
    }
    if kind not in folders:
        msg = (
            f"{where}: ONNX operation {kind!r} of constants is not folded here ({', '.join(folders)}, Add, Sub, "
            "Mul, Div are); export the model with constants folded"
        )
        raise ModelError(msg)
    return folders[kind]()


def fold_constant(
    op: OnnxOp, constants: dict[str, np.ndarray], where: str, dtypes: dict[str, str] | None = None
) -> np.ndarray:
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
        result = _fold(op, inputs, constants, dtypes or {}, where)
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError) as exc:
        msg = f"{where}: its constant inputs do not fit ({exc}); the file is damaged"
        raise ModelError(msg) from None
    if result.size > MAX_ELEMENTS or not np.all(np.isfinite(result)):
        msg = f"{where}: folding its constants gives {result.size:,} values, some not finite, or too many"
        raise ModelError(msg)
    return np.asarray(result, np.float64)
