"""The built-in node kinds, one module each (record, checks, runtime kernel, bundle codec, picture), registered
in :mod:`iotable.graph.kind` when this package is imported (importing :mod:`iotable` imports it)."""

from . import duplicate, host, io, join, pad, pool, reshape, table, window

__all__ = ["duplicate", "host", "io", "join", "pad", "pool", "reshape", "table", "window"]
