"""Build once, run many: what a whole model's structure is, so that its plan can be reused.

Tracing, cutting at quantizers, planning every layer and building the interlayer graph depend on the
model's structure, not on its weights. ``precompute`` keeps that work per model (weakly: it goes with the
model) under a *structure key*; a later call whose key is equal reuses it and only reads the weights again
(tables, the probe of black-box layers, the fast path's checks). The key holds, for every submodule, its
identity, class, ``forward`` override, decomposition metadata, output domain, parameter and buffer shapes,
dtypes and devices, forward hooks, and its plain hyper-parameters (numbers, strings, tuples of them: kernel
sizes, strides, channel counts, quantizer domains, ...), plus the call's own arguments that shape the plan.
Anything else that changes what a model computes between quantizers (editing a method in place) is not
seen: pass a new model, or call ``precompute(..., reuse=False)``.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any

import torch
from torch import nn

from .domain import Domain
from .errors import IOTableError
from .nn import domain_of
from .spec import _ATTR

__all__ = ["remember", "remembered", "structure_key"]

_SIMPLE = (bool, int, float, str, type(None), Domain, torch.dtype, torch.device)
_SKELETONS: weakref.WeakKeyDictionary[nn.Module, tuple[Hashable, Any]] = weakref.WeakKeyDictionary()


def _plain(value: Any) -> Hashable:
    """``value`` when it is a plain hyper-parameter (or a tuple of them), else its type (present, not compared)."""
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, (tuple, list)) and len(value) <= 16 and all(isinstance(v, _SIMPLE) for v in value):
        return tuple(value)
    return type(value)


def _tensors(table: dict[str, torch.Tensor | None]) -> tuple[Hashable, ...]:
    return tuple(
        (name, None) if t is None else (name, tuple(t.shape), t.dtype, t.device.type) for name, t in table.items()
    )


def _domain(m: nn.Module) -> Hashable:
    try:
        return domain_of(m)
    except IOTableError as exc:  # an unsupported quantizer: planning will raise this again, in context
        return type(exc)


def structure_key(model: nn.Module, **context: Hashable) -> Hashable:
    """Everything the plan of ``model`` depends on besides its weights (see the module docstring)."""
    parts = []
    for name, m in model.named_modules():
        settings = tuple(
            (k, _plain(v)) for k, v in m.__dict__.items() if not k.startswith("_") and k not in ("training", "forward")
        )
        parts.append(
            (
                name,
                id(m),
                type(m),
                m.__dict__.get("forward"),
                m.__dict__.get(_ATTR),
                getattr(type(m), _ATTR, None),
                _domain(m),
                settings,
                _tensors(m._parameters),
                _tensors(m._buffers),
                tuple(m._forward_hooks),
                tuple(m._forward_pre_hooks),
            )
        )
    return tuple(parts), tuple(sorted(context.items()))


def remembered(model: nn.Module, key: Hashable) -> Any:
    """What :func:`remember` kept for ``model`` under an equal key, or ``None``."""
    entry = _SKELETONS.get(model)
    if entry is None or entry[0] != key:
        return None
    return entry[1]


def remember(model: nn.Module, key: Hashable, value: Any) -> None:
    """Keep ``value`` for ``model`` under ``key`` (one entry per model, dropped with the model)."""
    _SKELETONS[model] = (key, value)
