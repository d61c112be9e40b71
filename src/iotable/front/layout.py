"""The axis orders and padding modes, defined in :mod:`iotable.layout` (front-end neutral); their old names here
keep working."""

from __future__ import annotations

from ..layout import Layout, PaddingMode

__all__ = ["Layout", "PaddingMode"]
