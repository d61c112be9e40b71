"""Running a module as a black box: its eval mode, its dtype, and one forward pass with errors in context.

:func:`eval_mode` is the one place iotable switches a model's training flags: every forward it runs for a
plan, a trace, a probe, an enumeration or a quantizer check runs inside it, and every flag is restored after.
:func:`plain_attributes` and :func:`restore_attributes` keep a model's plain Python attributes (numbers, strings
and containers of them) across runs of its forward that must leave no trace, or that are checked for one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from ..errors import EnumerationError, IOTableError

__all__ = [
    "PlainState",
    "changed_attributes",
    "eval_mode",
    "module_dtype",
    "plain_attributes",
    "restore_attributes",
    "run_module",
]

#: A model's plain attributes: per module, the names of all its ``__dict__`` entries that are not torch's own,
#: and its plain entries by name (deep copies).
PlainState = dict[nn.Module, tuple[frozenset[str], dict[str, Any]]]

_TORCH_KEYS = frozenset(nn.Module().__dict__)  # torch's own bookkeeping (training flag, hook tables, ...)
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def module_dtype(module: nn.Module) -> tuple[torch.dtype, torch.device]:
    """Float dtype and device the module computes in (its first floating parameter or buffer)."""
    for t in list(module.parameters()) + list(module.buffers()):
        if t.is_floating_point():
            return t.dtype, t.device
    return torch.float32, torch.device("cpu")


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Put ``module`` (every submodule) in eval mode for the block, then restore each training flag.

    Around many forward passes of one enumeration (with ``run_module(..., switched=True)``), this saves and
    restores the flags once instead of on every call.
    """
    flags = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        yield
    finally:
        for m, training in flags:
            m.training = training


def run_module(module: nn.Module, x: torch.Tensor, name: str, *, switched: bool = False) -> torch.Tensor:
    """Run ``module`` in eval and inference mode on ``x``, restoring its training flags afterwards.

    ``switched``: the caller holds :func:`eval_mode` around this call; the flags are left alone.
    """
    try:
        with nullcontext() if switched else eval_mode(module), torch.inference_mode():
            out = module(x)
    except IOTableError:
        raise
    except Exception as exc:  # the module is a black box: any failure is reported with context
        msg = f"{name}: forward failed on an input of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}"
        raise EnumerationError(msg) from exc
    if not isinstance(out, torch.Tensor):
        msg = f"{name}: expected forward to return one tensor, received {type(out).__name__}"
        raise EnumerationError(msg)
    return out


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a number, a string, ``None``, or a container (tuple, list, set, dict) of those."""
    if isinstance(value, _SCALARS):
        return True
    if depth > 16:
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def plain_attributes(model: nn.Module) -> PlainState:
    """Deep copies of the plain attributes of ``model`` and every submodule: the ``__dict__`` entries that are
    numbers, strings, ``None`` or containers of those (tensors, modules, parameters and buffers are not plain;
    torch's own bookkeeping is left out)."""
    state: PlainState = {}
    for m in model.modules():
        names = frozenset(vars(m)) - _TORCH_KEYS
        state[m] = names, {k: copy.deepcopy(vars(m)[k]) for k in sorted(names) if _plain(vars(m)[k])}
    return state


def same_value(a: Any, b: Any) -> bool:
    """Whether two plain values are equal in type and value (a NaN equals a NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def changed_attributes(before: PlainState, after: PlainState) -> list[tuple[nn.Module, str, str, str]]:
    """``(module, name, before, after)`` for each plain attribute in ``before`` that ``after`` lacks or holds
    another value of, the values shown short (a value no longer plain by its type, a deleted one as such)."""
    changed = []
    for m, (_, attributes) in before.items():
        now = after.get(m, (frozenset(), {}))[1]
        for name, value in attributes.items():
            if name not in now or not same_value(value, now[name]):
                current = (
                    shown(now[name])
                    if name in now
                    else (f"a {type(vars(m)[name]).__name__}" if name in vars(m) else "deleted")
                )
                changed.append((m, name, shown(value), current))
    return changed


def shown(value: Any, limit: int = 60) -> str:
    """A plain value as its ``repr``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def restore_attributes(state: PlainState) -> None:
    """Put back the plain attributes held in ``state`` and remove those that appeared since (plain values, or
    what a torch.fx trace left there)."""
    for m, (names, attributes) in state.items():
        for name in [k for k in vars(m) if k not in _TORCH_KEYS and k not in names]:
            if _plain(vars(m)[name]) or type(vars(m)[name]).__module__.startswith("torch.fx"):
                del vars(m)[name]
        vars(m).update(copy.deepcopy(attributes))
