"""nextpnr's placers: the option :func:`~iotable.hdl.implement` takes, checked against the program's own list."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import OptionError
from .target import Target

__all__ = ["PLACERS", "check_placer", "placer_listed"]

PLACERS = ("heap", "static", "sa")
"""nextpnr's placers: ``"heap"`` (analytical, then simulated-annealing refinement; nextpnr's default),
``"static"`` (electrostatic, nextpnr 0.7 and later: on jsc-m's 30,524 LUT4, 27% less CPU than heap at 4% less
Fmax on one seed), ``"sa"`` (simulated annealing alone, slow on large designs)."""


def check_placer(placer: Any, target: Target, *, what: str) -> str:
    """``placer`` if it is one of :data:`PLACERS` and ``target`` is placed (or it is the default)."""
    if not isinstance(placer, str) or placer not in PLACERS:
        msg = f"{what}: placer must be one of {', '.join(map(repr, PLACERS))}, received {placer!r}"
        raise OptionError(msg)
    if not target.placed and placer != "heap":
        msg = f"{what}: placer={placer!r} names a placer, and {target.name!r} is synthesis only; leave placer out"
        raise OptionError(msg)
    return placer


def placer_listed(placer: str, program: str, run: Callable[[list[str], Path], Any], *, what: str) -> None:
    """Refuse a placer that ``program`` (nextpnr) does not list in its ``--help`` (``"heap"``: every one has it)."""
    if placer == "heap":
        return
    with tempfile.TemporaryDirectory(prefix="iotable-implement-") as tmp:
        done = run([program, "--help"], Path(tmp))
    found = re.search(
        r"placer algorithm to use; available: ([a-z0-9, ]{1,100});", " ".join((done.stdout + done.stderr).split())
    )
    if found is None:
        text = (done.stdout + done.stderr)[-1500:]
        msg = (
            f"{what}: {program} --help lists no placers in a form this check reads (expected 'placer algorithm to "
            f"use; available: ...'), so placer={placer!r} cannot be checked; use placer='heap' (every nextpnr has "
            f"it). Its help ends:\n{text}"
        )
        raise OptionError(msg)
    available = [name.strip() for name in found.group(1).split(",")]
    if placer not in available:
        msg = (
            f"{what}: {program} has no placer {placer!r}: expected one of its own ({', '.join(available)} "
            "listed by --help); pick one of those, or install a newer nextpnr (pip install 'iotable[fpga]')"
        )
        raise OptionError(msg)
