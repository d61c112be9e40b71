"""Decomposition metadata: how a module's function splits into independent smallest units.

:func:`decompose` attaches a frozen :class:`Spec` to a module instance or class under one dunder attribute;
:func:`spec_of` reads it back, falling back to built-in rules for common torch layers. A spec is declarative
("3 groups", "kernel 3, stride 2"); :mod:`iotable.front.plan` resolves it against a module and an input shape.

The records live in :mod:`.layout` (:class:`Layout`, :class:`PaddingMode`) and :mod:`.metadata` (:class:`Spec`
and how it is read), the decorator in :mod:`.declaration`; this module gathers their public names.
"""

from __future__ import annotations

from .declaration import decompose
from .layout import Layout, PaddingMode
from .metadata import (
    ELEMENTWISE,
    SPEC_ATTRIBUTE,
    Spec,
    channel_counts,
    declared_spec,
    has_spec,
    mask_fan_in,
    normalize_padding,
    pool_geometry,
    spec_of,
)

__all__ = [
    "ELEMENTWISE",
    "SPEC_ATTRIBUTE",
    "Layout",
    "PaddingMode",
    "Spec",
    "channel_counts",
    "declared_spec",
    "decompose",
    "has_spec",
    "mask_fan_in",
    "normalize_padding",
    "pool_geometry",
    "spec_of",
]
