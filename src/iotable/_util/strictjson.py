"""JSON read as strictly as iotable's own files need: one value per key, finite numbers only."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite", "no_constant", "unique_keys"]


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: an object, refusing a key that appears twice (``ValueError``)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            msg = f"the key {key[:40]!r} appears twice in one object"
            raise ValueError(msg)
        found[key] = value
    return found


def no_constant(name: str) -> Any:
    """``json.loads``' ``parse_constant``: ``NaN`` and ``Infinity`` refused (``ValueError``)."""
    msg = f"{name} is not a number JSON holds"
    raise ValueError(msg)


def finite(text: str) -> float:
    """``json.loads``' ``parse_float``: a float that overflows to infinity refused (``ValueError``)."""
    value = float(text)
    if not math.isfinite(value):
        msg = f"{text[:40]} is not a finite number"
        raise ValueError(msg)
    return value
