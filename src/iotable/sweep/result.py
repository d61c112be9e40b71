"""What a sweep returns: a record per candidate, the Pareto front, and the table as CSV or markdown.

Each :class:`SweepPoint` holds the candidate's options and its variant's fingerprint, so that its design can be
built again from the same variant, checked by its fingerprint first (:meth:`SweepPoint.design`,
:meth:`SweepPoint.implement_options`).
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OptionError
from .pareto import front
from .store import write_output
from .variant import Variant

__all__ = ["FINAL", "SweepPoint", "SweepResult"]

#: The final objectives and whether each is minimised or maximised.
FINAL = (("luts", "min"), ("fmax_mhz", "max"), ("latency", "min"), ("accuracy", "max"))


@dataclass(frozen=True)
class SweepPoint:
    """One candidate of a sweep: its options, and what each stage it reached measured.

    Attributes:
        variant, fingerprint: the variant's name and content fingerprint.
        target, pipeline, pipeline_luts, effort, seed, k, frequency: the implementation options.
        estimate_luts: LogicNets' LUT6 estimate; abc_luts: ABC's LUT count (``k`` inputs), ``None`` where the
            candidate was pruned before ABC.
        latency: cycles from input to output (after place and route: the exported design's).
        samples, mismatches: the verification (``None``: no inputs given); accuracy: the scorer's (``None``:
            no scorer).
        luts, flip_flops, fmax_mhz: after place and route (``None``: pruned before it; ``fmax_mhz`` also
            ``None`` for a design with no register-to-register path, or synthesis only).
        stage: the last stage the candidate reached: ``"verify"``, ``"abc"`` or ``"implement"``.
        front: whether the candidate is on the final Pareto front.
    """

    variant: str
    fingerprint: str
    target: str
    pipeline: int
    pipeline_luts: int
    effort: str
    seed: int
    k: int
    estimate_luts: int
    abc_luts: int | None
    latency: int
    samples: int | None
    mismatches: int | None
    accuracy: float | None
    luts: int | None
    fmax_mhz: float | None
    flip_flops: int | None
    stage: str
    frequency: float | None = None
    front: bool = False

    def export_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`iotable.hdl.export` that built this candidate's design."""
        if self.pipeline_luts:
            return {"pipeline": self.pipeline, "pipeline_luts": self.pipeline_luts, "tables": "mapped", "k": self.k}
        return {"pipeline": self.pipeline}

    def implement_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`iotable.hdl.implement` that placed and routed it."""
        return {"target": self.target, "seed": self.seed, "frequency": self.frequency}

    def design(self, variant: Variant, directory: str | Path, **export: Any) -> Any:
        """This point's design written again into ``directory`` from ``variant``, which must be the variant it
        was measured on (its fingerprint is compared first); ``export`` adds options of :func:`iotable.hdl.export`
        (``vectors``, ``top``, ...). Pass the result to :func:`iotable.hdl.implement` with
        :meth:`implement_options` to place and route it again.

        Raises:
            OptionError: ``variant``'s fingerprint is not the point's (another model, other weights or other
                precompute arguments).
        """
        from ..hdl.writer import export as write
        from ..network.precompute import precompute
        from .stages import load_tables

        if not isinstance(variant, Variant) or variant.fingerprint() != self.fingerprint:
            received = variant.fingerprint()[:16] if isinstance(variant, Variant) else type(variant).__name__
            msg = (
                f"sweep point {self.variant!r}: expected the variant it was measured on (fingerprint "
                f"{self.fingerprint[:16]}...), received {received}...; pass the same model, weights and precompute "
                "arguments"
            )
            raise OptionError(msg)
        net = load_tables(variant.model) if variant.is_bundle else precompute(variant.model, **variant.precompute)
        return write(net, directory, **{**self.export_options(), **export})

    def objectives(self) -> tuple[Any, ...]:
        """LUTs, Fmax, latency and accuracy, as the final front compares them."""
        return tuple(getattr(self, name) for name, _ in FINAL)

    def asdict(self) -> dict[str, Any]:
        """The record as a plain dict (the columns of :meth:`SweepResult.to_csv`)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SweepResult:
    """Every candidate of a sweep (:attr:`points`), its Pareto front, and how much work this run did.

    Attributes:
        points: a :class:`SweepPoint` per candidate, variant by variant.
        folder: the sweep's folder (records, tables, caches).
        runs: per stage, how many times it ran in this call; reused: how many results came from records.
    """

    points: tuple[SweepPoint, ...]
    folder: Path
    runs: dict[str, int] = field(default_factory=dict)
    reused: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, points: Iterable[SweepPoint], *, folder: Path, runs: dict[str, int], reused: dict[str, int]
    ) -> SweepResult:
        """The result with each point's ``front`` set: the placed points no other placed point dominates."""
        points = list(points)
        placed = [i for i, p in enumerate(points) if p.stage == "implement"]
        senses = [sense for _, sense in FINAL]
        best = {placed[i] for i in front([points[j].objectives() for j in placed], senses)}
        marked = tuple(dataclasses.replace(p, front=i in best) for i, p in enumerate(points))
        return cls(marked, folder, dict(runs), dict(reused))

    @property
    def front(self) -> tuple[SweepPoint, ...]:
        """The points on the final Pareto front (LUTs, Fmax, latency, accuracy), in order."""
        return tuple(p for p in self.points if p.front)

    @property
    def placed(self) -> tuple[SweepPoint, ...]:
        """The points that were placed and routed."""
        return tuple(p for p in self.points if p.stage == "implement")

    def records(self) -> list[dict[str, Any]]:
        """Every point as a dict."""
        return [p.asdict() for p in self.points]

    def to_csv(self, path: str | Path | None = None) -> str:
        """The table as CSV text (a header, then a row per point); written atomically to ``path`` if given."""
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=[f.name for f in dataclasses.fields(SweepPoint)], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(self.records())
        text = buffer.getvalue()
        if path is not None:
            write_output(Path(path), text.encode())
        return text

    def to_markdown(self) -> str:
        """The table as a markdown table: one row per point, the front's marked ``*``."""
        columns = ("variant", "target", "pipeline", "pipeline_luts", "effort", "seed", "estimate_luts", "abc_luts",
                   "luts", "fmax_mhz", "latency", "accuracy", "stage")  # fmt: skip
        lines = ["| front | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for p in self.points:
            cells = [_cell(getattr(p, name)) for name in columns]
            lines.append(f"| {'*' if p.front else ''} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def summary(self) -> str:
        """How many candidates each stage saw, and the front."""
        counts = {stage: sum(p.stage == stage for p in self.points) for stage in ("verify", "abc", "implement")}
        lines = [
            f"sweep: {len(self.points)} candidates; stopped after verification: {counts['verify']}, after ABC: "
            f"{counts['abc']}; placed and routed: {counts['implement']}; on the front: {len(self.front)}",
            "stages run / reused from records: "
            + ", ".join(f"{s} {self.runs.get(s, 0)}/{self.reused.get(s, 0)}" for s in self.runs),
        ]
        return "\n".join([*lines, self.to_markdown()])

    def plot(self, path: str | Path | None = None, *, x: str = "luts", y: str = "fmax_mhz", ax: Any = None) -> Any:
        """The placed points and the front as a scatter plot (matplotlib; ``iotable[sweep]``).

        Args:
            path: write the figure as a PNG there (atomically); ``None``: only return the axes (in a notebook
                the figure shows itself).
            x, y: the point fields on the axes (default: LUTs against Fmax).
            ax: matplotlib axes to draw into (default: a new figure).

        Returns:
            The matplotlib ``Axes``.
        """
        from .plot import plot

        return plot(self, path, x=x, y=y, ax=ax)

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ("front", *_HTML))
        rows = "".join(
            f"<tr><td>{'*' if p.front else ''}</td>"
            + "".join(f"<td>{html.escape(_cell(getattr(p, name)))}</td>" for name in _HTML)
            + "</tr>"
            for p in self.points
        )
        return f"<table><tr>{head}</tr>{rows}</table>"


_HTML = (
    "variant", "target", "pipeline", "seed", "estimate_luts", "abc_luts", "luts", "fmax_mhz", "latency", "accuracy",
    "stage",
)  # fmt: skip


def _cell(value: Any) -> str:
    """A value as a table cell: floats to one decimal (accuracy to four), ``None`` as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if value <= 1 else f"{value:.1f}"
    return str(value)
