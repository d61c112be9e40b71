"""What :func:`~iotable.synth.map_table`, :func:`~iotable.synth.map_luts` and :func:`~iotable.synth.cost` are
given, checked before any work: the tables and the layers they belong to, the dense counterparts, the timeout
and the progress option; and how errors name a table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SynthError
from ..table import IOTable

__all__ = ["DEFAULT_TIMEOUT", "check_dense", "check_progress", "check_timeout", "table_items", "table_name"]

#: Seconds ABC may run per table unless told otherwise.
DEFAULT_TIMEOUT = 600.0


def check_timeout(timeout: Any, *, what: str) -> float:
    """``timeout`` as seconds: a positive, finite number."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        msg = f"{what}: timeout must be a positive number of seconds, received {timeout!r}"
        raise SynthError(msg)
    return float(timeout)


def table_name(table: IOTable, index: int | None) -> str:
    """A table as errors name it: ``table <index> IOTable(...)`` (without the index for a table given alone)."""
    where = f"table {index} " if index is not None else ""
    return f"{where}{table!r}"


def table_items(tables: Any, *, what: str, argument: str) -> list[tuple[IOTable, str | None]]:
    """``(table, layer name)`` for a network (its layers), a layer (``.tables``), a table or IOTables."""
    if isinstance(tables, IOTable):
        return [(tables, tables.layer)]
    layers = getattr(tables, "layers", None)
    if isinstance(layers, Mapping) and all(hasattr(layer, "tables") for layer in layers.values()):
        return [(t, str(name)) for name, layer in layers.items() for t in layer.tables]
    source = getattr(tables, "tables", tables)
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        kind = type(tables).__name__
        msg = f"{what}: {argument} must be a TableNetwork, a layer's tables or IOTables, received {kind}"
        raise SynthError(msg)
    items = list(source)
    for i, table in enumerate(items):
        if not isinstance(table, IOTable):
            msg = f"{what}: {argument} item {i} is a {type(table).__name__}; expected IOTables"
            raise SynthError(msg)
    return [(t, t.layer) for t in items]


def check_dense(table: IOTable, dense: Any, name: str, *, what: str) -> IOTable:
    """``dense``, the dense table the partial ``table`` (called ``name``) was restricted from: checked."""
    if not isinstance(dense, IOTable) or not dense.is_dense:
        msg = f"{what}: the dense counterpart of {name} must be a dense IOTable, received {dense!r}"
        raise SynthError(msg)
    if dense.input_domains != table.input_domains or dense.output_domain != table.output_domain:
        msg = (
            f"{what}: the dense counterpart {dense!r} of {name} has other domains; pass the dense network (or "
            "tables) the partial one was restricted from"
        )
        raise SynthError(msg)
    return dense


def check_progress(progress: Any, *, what: str) -> bool | None:
    """``progress``: ``None``, ``True`` or ``False``."""
    if progress is not None and not isinstance(progress, bool):
        msg = f"{what}: progress must be None (a bar for long runs in a terminal), True or False, received {progress!r}"
        raise SynthError(msg)
    return progress
