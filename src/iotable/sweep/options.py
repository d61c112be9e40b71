"""The implementation options a sweep crosses with its variants, checked once at the boundary.

A candidate is one variant with one target, one pipelining setting (:class:`Pipelining`: ``pipeline`` and
``pipeline_luts`` as :func:`iotable.hdl.export` takes them), one mapping effort (``"fast"`` or ``"floor"``, as
:func:`iotable.synth.cost` takes it) and one placement seed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

__all__ = ["EFFORTS", "Candidate", "Pipelining", "check_pipelinings", "check_seeds", "check_strings"]

EFFORTS = ("fast", "floor")


@dataclass(frozen=True, order=True)
class Pipelining:
    """A register after every ``pipeline``-th table layer (0: combinational) and, with ``pipeline_luts``, after
    every ``pipeline_luts`` LUT levels inside each table (then the tables are exported mapped)."""

    pipeline: int = 1
    pipeline_luts: int = 0

    @classmethod
    def parse(cls, value: Any) -> Pipelining:
        """A setting from ``2``, ``"none"``, ``{"pipeline": 1, "pipeline_luts": 2}`` or a Pipelining."""
        if isinstance(value, Pipelining):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"pipeline", "pipeline_luts"})
            if unknown:
                msg = f"sweep: a pipelining setting holds pipeline and pipeline_luts, received the keys {unknown}"
                raise OptionError(msg)
            pipeline, luts = value.get("pipeline", 1), value.get("pipeline_luts", 0)
        else:
            pipeline, luts = value, 0
        if pipeline is None or (isinstance(pipeline, str) and pipeline.lower() in ("none", "combinational")):
            pipeline = 0
        for name, number in (("pipeline", pipeline), ("pipeline_luts", luts if luts is not None else 0)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                msg = (
                    f"sweep: {name} must be a count of 0 or more (as iotable.hdl.export takes it), received "
                    f"{number!r} in the pipelining setting {value!r}"
                )
                raise OptionError(msg)
        return cls(int(pipeline), int(luts or 0))

    def export_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`iotable.hdl.export` this setting stands for."""
        if self.pipeline_luts:
            return {"pipeline": self.pipeline, "pipeline_luts": self.pipeline_luts, "tables": "mapped"}
        return {"pipeline": self.pipeline}

    def __str__(self) -> str:
        text = f"pipeline={self.pipeline}"
        return text + (f",pipeline_luts={self.pipeline_luts}" if self.pipeline_luts else "")


@dataclass(frozen=True)
class Candidate:
    """One point of the sweep: a variant (by name) and the options its design is built with."""

    variant: str
    target: str
    pipelining: Pipelining
    effort: str
    seed: int


def _many(value: Any) -> list[Any]:
    """A single option or an iterable of them as a list (a string is one option)."""
    if isinstance(value, (str, bytes, Mapping, Pipelining)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def check_pipelinings(value: Any) -> tuple[Pipelining, ...]:
    """Distinct pipelining settings, in the order given."""
    many = _many(value)
    settings = list(dict.fromkeys(Pipelining.parse(v) for v in many))
    if not settings:
        msg = "sweep: pipelines= is empty; give at least one setting (1: a register after every table layer)"
        raise OptionError(msg)
    return tuple(settings)


def check_strings(value: Any, *, name: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Distinct non-empty strings (``allowed``: from that list only)."""
    many = list(dict.fromkeys(_many(value)))
    bad = [v for v in many if not isinstance(v, str) or not v or (allowed is not None and v not in allowed)]
    if not many or bad:
        expected = f"one or more of {list(allowed)}" if allowed else "one or more non-empty strings"
        msg = f"sweep: {name}= must be {expected}, received {value!r}"
        raise OptionError(msg)
    return tuple(many)


def check_seeds(value: Any) -> tuple[int, ...]:
    """Distinct placement seeds (non-negative integers)."""
    many = list(dict.fromkeys(_many(value)))
    if not many or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in many):
        msg = f"sweep: seeds= must be one or more non-negative integers (nextpnr's placement seeds), received {value!r}"
        raise OptionError(msg)
    return tuple(int(s) for s in many)
