"""Build once, run many: what a whole model's structure is, so that its plan can be reused.

Tracing, cutting at quantizers, planning every layer and building the interlayer graph depend on the
model's structure, not on its weights. ``precompute`` keeps that work per model (weakly: it goes with the
model) under a *structure key*; a later call whose key is equal reuses it and only reads the weights again
(tables, the probe of black-box layers, the fast path's checks). The key holds, for every submodule, its
identity and its :func:`settings` (class, ``forward`` override, decomposition metadata, output domain, plain
hyper-parameters such as kernel sizes, strides, channel counts, a leaky ReLU's slope, quantizer domains, other
attributes by a digest of their contents, and forward hooks), its parameter and buffer shapes, dtypes and
devices, the values of the masks its plan reads (pruning masks, ``decompose(fan_in="mask")``), plus the call's
own arguments that shape the plan. The table cache keys its entries by every attribute's value too
(:mod:`iotable.front.cachekey`). Anything else that changes what a model computes between quantizers
(editing a method in place) is not seen: pass a new model, or call ``precompute(..., reuse=False)``.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import weakref
from collections.abc import Hashable
from typing import Any, cast

import torch
from torch import nn

from ..domain import Domain
from ..errors import IOTableError
from ..nn import domain_of
from .cachekey import value_digest
from .infer import arithmetic_only, inferred_leaf
from .metadata import SPEC_ATTRIBUTE

__all__ = ["plan_tensors", "remember", "remembered", "settings", "stable_bytes", "structure_key", "tensor_digest"]

_SIMPLE = (bool, int, float, str, type(None), Domain, torch.dtype, torch.device)
_SKELETONS: weakref.WeakKeyDictionary[nn.Module, tuple[Hashable, Any]] = weakref.WeakKeyDictionary()


def _hashable(cls: type) -> Hashable:
    """A class as a key part: classes hash by identity (mypy's ``type`` lacks the ``Hashable`` protocol)."""
    return cast(Hashable, cls)


def _plain(value: Any) -> Hashable:
    """``value`` when it is a plain hyper-parameter (or a tuple of them), else a digest of its contents (dicts,
    long lists, tensors, nested objects: a traced forward may have read any of them as a constant); a value
    whose contents cannot be read is equal to nothing, so that a plan built with it is never reused."""
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, (tuple, list)) and len(value) <= 16 and all(isinstance(v, _SIMPLE) for v in value):
        return tuple(value)
    digest = value_digest(value)
    return (_hashable(type(value)), digest) if digest is not None else object()


def _tensors(table: dict[str, torch.Tensor | None]) -> tuple[Hashable, ...]:
    return tuple(
        (name, None) if t is None else (name, tuple(t.shape), t.dtype, t.device.type) for name, t in table.items()
    )


def _domain(m: nn.Module) -> Hashable:
    try:
        return domain_of(m)
    except IOTableError as exc:  # an unsupported quantizer: planning will raise this again, in context
        return _hashable(type(exc))


def settings(m: nn.Module) -> tuple[Hashable, ...]:
    """What one module computes besides its tensors' values: the one description both keys are made from.

    Its class, ``forward`` override, decomposition metadata (on the instance and on the class), quantizer
    domain, plain hyper-parameters (numbers, strings, short tuples of them, domains: kernel sizes, strides,
    a leaky ReLU's slope, hardtanh's bounds, ...) and forward hooks. :func:`structure_key` compares these
    objects within a process; the table cache (:mod:`iotable.tabulate.cache`) hashes them with :func:`stable_bytes`.
    """
    plain = tuple(
        (k, _plain(v)) for k, v in m.__dict__.items() if not k.startswith("_") and k not in ("training", "forward")
    )
    return (
        _hashable(type(m)),
        m.__dict__.get("forward"),
        m.__dict__.get(SPEC_ATTRIBUTE),
        getattr(type(m), SPEC_ATTRIBUTE, None),
        _domain(m),
        plain,
        tuple(m._forward_hooks.values()),
        tuple(m._forward_pre_hooks.values()),
    )


def tensor_digest(t: torch.Tensor) -> bytes:
    """A digest of a tensor's values (what a plan or a graph read from it); a sparse tensor's digest is that of
    its layout, shape, indices and values (coalesced: equal tensors give equal digests), never densified."""
    t = t.detach().cpu()
    if t.layout == torch.strided:
        return hashlib.sha256(t.contiguous().numpy().tobytes()).digest()
    if t.layout == torch.sparse_coo:
        t = t.coalesce()
        parts: tuple[torch.Tensor, ...] = (t._indices(), t._values())
    elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (t.crow_indices(), t.col_indices(), t.values())
    else:  # CSC, BSC
        parts = (t.ccol_indices(), t.row_indices(), t.values())
    h = hashlib.sha256(f"{t.layout} {tuple(t.shape)} {t.dtype}".encode())
    for part in parts:
        h.update(tensor_digest(part))
    return h.digest()


_digest = tensor_digest


def plan_tensors(m: nn.Module) -> tuple[torch.Tensor, ...]:
    """Tensors whose *values* shape a module's plan: pruning masks, masks named by ``decompose(fan_in=...)``, and
    every tensor of a layer whose units are inferred from its structure or whose arithmetic becomes a ``sum``
    node (a class sum's bias)."""
    found = []
    mask = getattr(m, "weight_mask", None)
    if isinstance(mask, torch.Tensor):
        found.append(mask)
    spec = m.__dict__.get(SPEC_ATTRIBUTE) or getattr(type(m), SPEC_ATTRIBUTE, None)
    if (spec is not None and spec.infer) or (spec is None and (inferred_leaf(m) or arithmetic_only(m))):
        # units inferred from the structure follow the values (a learned mapping, weights that are zero)
        found += [t for t in (*m._parameters.values(), *m._buffers.values()) if isinstance(t, torch.Tensor)]
    if spec is not None and spec.fan_in_from is not None:
        target: Any = m
        for part in spec.fan_in_from.split("."):
            target = getattr(target, part, None)
        if isinstance(target, torch.Tensor):  # else planning reports the missing or malformed mask, in context
            found.append(target)
    return tuple(found)


def structure_key(model: nn.Module, **context: Hashable) -> Hashable:
    """Everything the plan of ``model`` depends on besides its weights (see the module docstring)."""
    parts = [
        (
            name,
            id(m),
            settings(m),
            _tensors(m._parameters),
            _tensors(m._buffers),
            tuple(_digest(t) for t in plan_tensors(m)),
        )
        for name, m in model.named_modules()
    ]
    # A model's own tensors, read by the arithmetic of its forward (a bias after a class sum), shape its graph.
    own = [*model._parameters.values(), *model._buffers.values()] if next(model.children(), None) else []
    digests = tuple(_digest(t) for t in own if t is not None)
    return tuple(parts), digests, tuple(sorted(context.items()))


def stable_bytes(value: Any) -> bytes:
    """An encoding of :func:`settings` (and the values in it) that is the same in every process.

    Classes and functions by qualified name, domains by their values and parameters, dataclasses (metadata)
    field by field, containers element by element; anything else by its class, as :func:`_plain` keeps it.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return f"{type(value).__name__}:{value!r};".encode()
    if isinstance(value, Domain):
        return b"Domain:" + value.values.tobytes() + repr(sorted(value.params.items())).encode() + b";"
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name};".encode()
    if isinstance(value, (torch.dtype, torch.device)):
        return f"{value};".encode()
    if isinstance(value, type):
        return f"class:{value.__module__}.{value.__qualname__};".encode()
    if callable(value) and hasattr(value, "__qualname__"):
        return f"callable:{getattr(value, '__module__', '')}.{value.__qualname__};".encode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
        return f"{type(value).__qualname__}(".encode() + stable_bytes(tuple(fields)) + b")"
    if isinstance(value, (tuple, list)):
        return b"(" + b"".join(stable_bytes(v) for v in value) + b")"
    return f"object:{type(value).__module__}.{type(value).__qualname__};".encode()


def remembered(model: nn.Module, key: Hashable) -> Any:
    """What :func:`remember` kept for ``model`` under an equal key, or ``None``."""
    entry = _SKELETONS.get(model)
    if entry is None or entry[0] != key:
        return None
    return entry[1]


def remember(model: nn.Module, key: Hashable, value: Any) -> None:
    """Keep ``value`` for ``model`` under ``key`` (one entry per model, dropped with the model)."""
    _SKELETONS[model] = (key, value)
