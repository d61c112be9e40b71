"""Elementwise glue in a traced model: calls such as ``torch.relu(x)``, ``x * self.scale`` or ``x + 0.5`` as
the modules they act like (:class:`Arithmetic` for a number or a per-channel tensor of the model)."""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from ..errors import ModelError

__all__ = ["Arithmetic"]

# Functions that act elementwise like these modules, when called on one tensor with no other argument.
_ELEMENTWISE_FUNCTIONS: dict[Any, type[nn.Module]] = {
    torch.relu: nn.ReLU,
    F.relu: nn.ReLU,
    torch.tanh: nn.Tanh,
    torch.sigmoid: nn.Sigmoid,
    F.sigmoid: nn.Sigmoid,
    F.tanh: nn.Tanh,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}


_ARITHMETIC: dict[Any, str] = {
    operator.mul: "mul",
    torch.mul: "mul",
    operator.add: "add",
    torch.add: "add",
    operator.sub: "sub",
    torch.sub: "sub",
    operator.truediv: "div",
    torch.div: "div",
}
_ARITHMETIC_METHODS = {"mul": "mul", "add": "add", "sub": "sub", "div": "div"}
_OPERATORS: dict[str, Callable[..., torch.Tensor]] = {
    "mul": torch.mul,
    "add": torch.add,
    "sub": torch.sub,
    "div": torch.div,
}


class Arithmetic(nn.Module):
    """``x <op> operand`` (or ``operand <op> x``) where the operand is a number or a tensor of the model.

    Traced glue such as LogicNets' output scaling (``x * self.scale + self.bias``) is elementwise when the
    operand holds one value, or one per channel: it fuses into the table layer it sits in like an elementwise
    module. A tensor operand is read from its owner module at every call (through a weak reference, so the
    plan never keeps the model alive), so updated weights are seen; :meth:`tensors` exposes it to the keys
    that decide whether cached tables are still valid.
    """

    def __init__(self, op: str, operand: Any, *, reverse: bool, owner: nn.Module | None = None) -> None:
        super().__init__()
        self.op, self.reverse = op, reverse
        self.attribute = operand if owner is not None else None
        self.constant = None if owner is not None else operand
        self._owner = weakref.ref(owner) if owner is not None else None

    def operand(self) -> Any:
        """The number, or the owner's tensor as it is now."""
        if self._owner is None:
            return self.constant
        owner = self._owner()
        if owner is None:
            msg = f"{self.op} by {self.attribute!r}: the model that owned it no longer exists"
            raise ModelError(msg)
        return getattr(owner, str(self.attribute))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors this module reads besides its input (for cache and reuse keys)."""
        value = self.operand()
        return (value,) if isinstance(value, torch.Tensor) else ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn, y = _OPERATORS[self.op], self.operand()
        return fn(y, x) if self.reverse else fn(x, y)

    def extra_repr(self) -> str:
        operand = repr(self.constant) if self._owner is None else self.attribute
        return f"{operand} {self.op} x" if self.reverse else f"x {self.op} {operand}"


def _arithmetic(node: fx.Node, root: nn.Module | None) -> nn.Module | None:
    """The :class:`Arithmetic` module of ``tensor <op> (number | parameter)``, or ``None`` for other nodes."""
    op = _arithmetic_op(node)
    if op is None or len(node.args) != 2 or node.kwargs:
        return None
    tensors = [isinstance(a, fx.Node) and a.op != "get_attr" for a in node.args]
    if tensors.count(True) != 1:
        return None  # two tensors (an add join), or none
    reverse = tensors[1]
    x, other = (node.args[1], node.args[0]) if reverse else (node.args[0], node.args[1])
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return Arithmetic(op, other, reverse=reverse)
    if not (isinstance(other, fx.Node) and other.op == "get_attr" and root is not None and isinstance(x, fx.Node)):
        return None
    path, _, attribute = str(other.target).rpartition(".")
    owner = root.get_submodule(path) if path else root
    value = getattr(owner, attribute)
    where = f"{node.name}: {op} by the tensor {other.target!r} (of {_describe(owner, path)})"
    if not isinstance(value, torch.Tensor):
        msg = f"{where} is a {type(value).__name__}; expected a tensor"
        raise ModelError(msg)
    _check_per_channel(where, tuple(value.shape), x.meta.get("shape"))
    return Arithmetic(op, attribute, reverse=reverse, owner=owner)


def _arithmetic_op(node: fx.Node) -> str | None:
    """``"mul"``, ``"add"``, ``"sub"`` or ``"div"`` for a node calling that operator, function or method."""
    if node.op == "call_function":
        try:
            return _ARITHMETIC.get(node.target)
        except TypeError:  # unhashable targets are no arithmetic
            return None
    if node.op == "call_method" and isinstance(node.target, str):
        return _ARITHMETIC_METHODS.get(node.target)
    return None


def _check_per_channel(where: str, shape: tuple[int, ...], sample: tuple[int, ...] | None) -> None:
    """Refuse a tensor operand that holds more than one value and not one per channel of the tensor it meets
    (``sample``: that tensor's shape without the batch axis, unknown when ``None``)."""
    if math.prod(shape) == 1 or sample is None:
        return
    aligned = (1,) * (len(sample) + 1 - len(shape)) + shape
    per_channel = len(aligned) == len(sample) + 1 and aligned[0] == 1 and aligned[1] in (1, sample[0])
    if not per_channel or any(a != 1 for a in aligned[2:]):
        msg = (
            f"{where} has shape {shape}, which does not hold one value per channel of a tensor of shape "
            f"(N, {', '.join(map(str, sample))}); an elementwise table needs one value, or one per channel "
            f"(shape ({sample[0]},{' 1,' * (len(sample) - 1)})); fold it into the layer before, or decorate "
            "the block that holds it with iotable.decompose(...)"
        )
        raise ModelError(msg)


def _describe(module: nn.Module, path: str) -> str:
    return f"module {path!r}, a {type(module).__name__}" if path else f"the model, a {type(module).__name__}"


def _elementwise_call(node: fx.Node, root: nn.Module | None) -> nn.Module | None:
    """The module equivalent of an elementwise call: ``torch.relu(x)``, ``x * self.scale``, ``x + 0.5``, ..."""
    glue = _arithmetic(node, root)
    if glue is not None:
        return glue
    if node.op not in ("call_function", "call_method") or len(node.args) != 1:
        return None
    if any(key != "inplace" for key in node.kwargs):
        return None
    try:
        kind = _ELEMENTWISE_FUNCTIONS.get(node.target)
    except TypeError:  # unhashable targets are no elementwise function
        return None
    return kind() if kind is not None else None
