"""The built-in node kinds, one module each (record, checks, runtime kernel, bundle codec, picture), registered
in :mod:`iotable.graph.kind` when this package is imported (importing :mod:`iotable` imports it)."""

from . import argmax, duplicate, host, io, join, pad, pool, reshape, sum, table, threshold, window

__all__ = [
    "argmax", "duplicate", "host", "io", "join", "pad", "pool", "reshape", "sum", "table", "threshold", "window",
]  # fmt: skip
