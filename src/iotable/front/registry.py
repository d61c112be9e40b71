"""The registry of layer kinds: what iotable knows about each torch module class, in one entry per kind.

An entry says how a module of that class decomposes into units (its ``rule``, the built-in spec that
:func:`iotable.spec_of` returns for an undecorated module), how tracing treats it (its :class:`Role`), which
fast path reads its weights, and what input shape it states. The built-in kinds are registered by
:mod:`iotable.kinds`, which is also where a new kind is added (:func:`register`). This module sits below
everything that consults it, so that ``spec``, ``trace``, ``network`` and ``_fastpath`` ask one place.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import SpecError

__all__ = ["LayerKind", "Role", "kind_of", "register", "registered", "role_of", "unregister"]


class Role(enum.Enum):
    """How tracing treats a module of a kind.

    ``MIXING``: it mixes inputs (channels or window positions) into each output; a table layer holds at most
    one, between two quantizers (``nn.Linear``, convolutions, average pools). ``ELEMENTWISE``: it acts on
    each element alone and joins the table layer around it (activations, batch norm, quantizers). ``POOL``:
    a max-pool, run on codes as its own graph node (codes ascend with values). ``RESHAPE``: it moves
    elements without computing (``nn.Flatten``), wiring in the graph.
    """

    MIXING = "mixing"
    ELEMENTWISE = "elementwise"
    POOL = "pool"
    RESHAPE = "reshape"


@dataclass(frozen=True)
class LayerKind:
    """One kind of layer: the module classes it covers and everything iotable knows about them.

    Attributes:
        name: a unique name (``"nn.Linear"``, ``"my.SumPool1d"``).
        types: the module classes of the kind; a module belongs to the kind of its most derived registered
            class.
        role: how tracing treats it (:class:`Role`).
        rule: the module's built-in decomposition (a function of the module returning an
            :class:`iotable.Spec`), or ``None`` for kinds that make no table (pools, reshapes).
        fast_path: the fast path that reads its weights (``"linear"`` or ``"conv"``, exactly these classes),
            or ``None`` (the black box tabulates it).
        input_shape: the input shape (without the batch axis) a module of the kind states, when a whole
            model starts with it and no ``example_input=`` is given (``nn.Linear``: ``(in_features,)``).
        needs_quantizer_after: its output is a float that only a quantizer turns back into codes (an
            average): an error names it when the model's output or another mixing layer reads it unquantized.
    """

    name: str
    types: tuple[type[nn.Module], ...]
    role: Role
    rule: Callable[[nn.Module], Any] | None = None
    fast_path: str | None = None
    input_shape: Callable[[nn.Module], tuple[int, ...]] | None = None
    needs_quantizer_after: bool = False


_KINDS: dict[str, LayerKind] = {}
_BY_TYPE: dict[type[nn.Module], LayerKind] = {}


def register(kind: LayerKind, *, replace: bool = False) -> LayerKind:
    """Add ``kind`` to the registry (``replace=True``: in place of the kind of that name); returns it.

    Raises:
        SpecError: a malformed kind, a name already registered, or a class another kind covers.
    """
    if not isinstance(kind, LayerKind):
        msg = f"register: expected a LayerKind, received {type(kind).__name__}"
        raise SpecError(msg)
    if not kind.types or not all(isinstance(t, type) and issubclass(t, nn.Module) for t in kind.types):
        msg = f"register: kind {kind.name!r} must cover one or more torch.nn.Module classes, received {kind.types!r}"
        raise SpecError(msg)
    if not isinstance(kind.role, Role):
        msg = f"register: kind {kind.name!r} has role {kind.role!r}; expected an iotable.kinds.Role"
        raise SpecError(msg)
    if kind.fast_path not in (None, "linear", "conv"):
        msg = f"register: kind {kind.name!r} names fast path {kind.fast_path!r}; expected 'linear', 'conv' or None"
        raise SpecError(msg)
    old = _KINDS.get(kind.name)
    if old is not None and not replace:
        msg = f"register: a kind named {kind.name!r} is registered already; pass replace=True to replace it"
        raise SpecError(msg)
    for t in kind.types:
        owner = _BY_TYPE.get(t)
        if owner is not None and owner.name != kind.name:
            msg = (
                f"register: {t.__qualname__} belongs to the kind {owner.name!r} already; unregister that kind or "
                "register a subclass"
            )
            raise SpecError(msg)
    if old is not None:
        unregister(old.name)
    _KINDS[kind.name] = kind
    _BY_TYPE.update(dict.fromkeys(kind.types, kind))
    return kind


def unregister(name: str) -> LayerKind:
    """Remove the kind named ``name`` from the registry and return it.

    Raises:
        SpecError: no kind has that name.
    """
    kind = _KINDS.pop(name, None)
    if kind is None:
        msg = f"unregister: no layer kind is named {name!r}; registered: {', '.join(sorted(_KINDS))}"
        raise SpecError(msg)
    for t in kind.types:
        _BY_TYPE.pop(t, None)
    return kind


def registered() -> tuple[LayerKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def kind_of(module: nn.Module) -> LayerKind | None:
    """The kind of ``module``: that of its most derived registered class, or ``None``."""
    for cls in type(module).__mro__:
        kind = _BY_TYPE.get(cls)
        if kind is not None:
            return kind
    return None


def role_of(module: nn.Module) -> Role | None:
    """How tracing treats ``module`` (:class:`Role`), or ``None`` for a class no kind covers."""
    kind = kind_of(module)
    return None if kind is None else kind.role
