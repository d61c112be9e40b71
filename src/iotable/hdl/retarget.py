"""A design as :func:`~iotable.hdl.implement` synthesizes it for a device family: as exported, or exported again
with each table's verified LUT netlist as the family's LUT cells (:mod:`.primitives`)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import HDLError, OptionError
from .primitives import Primitives
from .writer import export

__all__ = ["for_target", "primitive_design"]


def primitive_design(design: Any, primitives: Primitives, *, executor: Any = None, cache_dir: Any = None) -> Any:
    """``design`` as implement reads it for a family: as it is when its tables already are that family's
    cells, else exported again (same network, top, style and pipeline) with each table's mapped netlist of
    the family's LUT size as its cells, into a temporary folder that lives as long as this process."""
    if design.primitives == primitives.value:
        return design
    scratch = tempfile.mkdtemp(prefix="iotable-primitives-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    folder = Path(scratch) / design.top
    return export(
        design.network, folder, top=design.top, style=design.style, pipeline=design.pipeline,
        pipeline_luts=design.pipeline_luts,
        vectors=design.vectors, table_benches=False, tables="mapped", k=primitives.family.k,
        primitives=primitives.value, keep_dead=design.keep_dead, executor=executor, cache_dir=cache_dir,
    )  # fmt: skip


def for_target(design: Any, family: str, tables: Any, *, what: str) -> Any:
    """The design implement synthesizes for ``family``: with ``tables=None`` the design as exported (refused
    when its tables are another family's cells); with ``"mapped"``, its tables as the family's LUT cells
    (:func:`primitive_design`)."""
    if tables is not None and (not isinstance(tables, str) or tables.lower() != "mapped"):
        msg = (
            f"{what}: unknown tables {tables!r}; expected None (the design as exported) or 'mapped' (each table's "
            "verified ABC netlist as the target's LUT cells)"
        )
        raise OptionError(msg)
    if tables is None:
        if design.primitives is not None and design.primitives != family:
            msg = (
                f"{what}: the tables of {design.top!r} are {design.primitives} LUT cells, which a {family} target "
                f"does not have; export with primitives={family!r}, or pass tables='mapped' to export them again"
            )
            raise HDLError(msg)
        return design
    return primitive_design(design, Primitives(family))
