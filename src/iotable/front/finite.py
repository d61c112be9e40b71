"""Which values of a dependence run may hold an infinity or a NaN for some input (see
:mod:`iotable.front.dependence`, where a zero coefficient drops a dependence only from a finite operand).

A value computed from the input may be non-finite when:

- an operand computed from the input may be (``nan_to_num`` makes its result finite again);
- a constant operand holds an infinity or a NaN (``masked_fill(mask, -inf)``);
- the operation can make one from finite operands: a division by a value computed from the input or by a
  constant holding a zero, ``reciprocal``, ``log``, ``exp``, ``pow`` of an exponent that is not a
  non-negative constant, ``sqrt``, ``rsqrt``, ``tan``, and any operation not listed as finite here (those
  without a rule included).

Data movement, reductions, matrix products, convolutions and batch norm with running statistics make finite
values from finite ones. Float overflow of finite arithmetic (a product of two huge numbers) is not followed,
nor the sign of a zero product (``-0.0`` for a negative operand), which only a division by it could tell.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["may_make_nonfinite"]

# Elementwise operations whose result is finite when their operands are (float overflow aside); in-place forms
# (``add_``) share their names. Any other operation may make an infinity or a NaN from finite operands.
_FINITE = frozenset({
    "add", "sub", "rsub", "mul", "neg", "abs", "relu", "clamp", "clamp_min", "clamp_max", "hardtanh", "sigmoid",
    "tanh", "sin", "cos", "atan", "erf", "floor", "ceil", "round", "trunc", "frac", "sign", "sgn", "maximum",
    "minimum", "fmax", "fmin", "where", "leaky_relu", "gelu", "silu", "hardsigmoid", "hardswish", "softplus",
    "mish", "threshold", "masked_fill", "fill", "zero", "copy", "square", "heaviside", "lerp", "addcmul",
    "nan_to_num", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "signbit", "positive",
})  # fmt: skip
# Divisions: finite from finite operands when the divisor is a constant without a zero.
_DIVIDES = frozenset({"div", "true_divide", "floor_divide", "remainder", "fmod"})


def may_make_nonfinite(
    func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, *, risky: bool, kind: str
) -> bool:
    """Whether ``out``, made by the aten operation ``func`` from operands of which some depend on the input,
    may hold an infinity or a NaN for some input.

    ``before``: each operand's dependence by ``id`` (``None``: a constant); ``risky``: an operand computed from
    the input may be non-finite; ``kind``: how the dependence pass treats ``func`` (``"structural"``: a move,
    reduction, product or convolution; ``"pointwise"``; ``"other"``: no rule).
    """
    if not (out.is_floating_point() or out.is_complex()):
        return False
    name = func.overloadpacket.__name__.rstrip("_")
    if risky:
        return name != "nan_to_num"
    if any(_nonfinite_constant(value, before) for value in tree_flatten((args, kwargs))[0]):
        return True
    if kind != "pointwise":
        return kind != "structural"
    if name in _FINITE:
        return False
    bound = _bound(func, args, kwargs)
    if name in _DIVIDES:
        return not _nonzero_constant(bound.get("other"), before)
    if name == "pow":
        exponent = bound.get("exponent")
        return not (isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and exponent >= 0)
    return True


def _nonfinite_constant(value: Any, before: dict) -> bool:
    """Whether ``value`` is a number or a constant tensor holding an infinity or a NaN."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if not isinstance(value, torch.Tensor) or before.get(id(value)) is not None or value.layout != torch.strided:
        return False
    return (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all())


def _nonzero_constant(value: Any, before: dict) -> bool:
    """Whether ``value`` is a number or a constant tensor (not computed from the input) with no zero."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, torch.Tensor) and before.get(id(value)) is None and value.layout == torch.strided:
        return bool((value != 0).all())
    return False


def _bound(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """``func``'s arguments by name (those given)."""
    bound = {a.name: args[i] for i, a in enumerate(func._schema.arguments) if i < len(args)}
    bound.update(kwargs)
    return bound
