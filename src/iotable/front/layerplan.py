"""The planning record, defined in :mod:`iotable.layerplan` (read by the bundle, which imports no front end);
its old names here keep working."""

from __future__ import annotations

from ..layerplan import LayerPlan, abbreviated, frame_strides
from ..units import Geometry, Unit

__all__ = ["Geometry", "LayerPlan", "Unit", "abbreviated", "frame_strides"]
