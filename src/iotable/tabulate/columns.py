"""The fast path's columns: units grouped by input domains, their table rows' values, and the records a
tabulation passes between its stages (see :mod:`iotable.tabulate.fastpath`).

A *column* is one output channel of one unit: its pre-activation over every row of the unit's table is a sum
of one term per input, so the rows are outer sums of small per-input tables (:func:`_outer_sums`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._util.order import frame_channels
from ..domain import Domain
from ..front.layerplan import LayerPlan, Unit
from ..table import place_values

if TYPE_CHECKING:
    from .affine import _AffineTail
    from .recognition import FastPath

_EPS32 = float(np.finfo(np.float32).eps)
_U32 = _EPS32 / 2  # unit roundoff of float32


def _codes_domain(layer: LayerPlan) -> Domain:
    """The output domain of a layer a fast path recognized (:func:`_read_structure` takes none without one)."""
    domain = layer.output_domain
    if domain is None:
        raise AssertionError(f"{layer.name}: a fast-path layer without an output domain")
    return domain


@dataclass(frozen=True)
class _Group:
    """Units whose inputs have the same domains: one combination set, one column per output channel."""

    units: tuple[Unit, ...]
    channels: np.ndarray  # (K,) output channel of each column
    reads: np.ndarray  # (K, channels per unit) input channels of each column's unit
    domains: tuple[Any, ...]  # the shared input domains, in input order
    radices: np.ndarray  # (f,) codes per input
    values: tuple[np.ndarray, ...]  # per input, its domain's values (float64)
    value_matrix: np.ndarray | None  # (f, n) the same values when every input has n of them
    peak: np.ndarray  # (f,) largest magnitude of each input's values
    place: np.ndarray  # (f,) place value of each input's code in a row number
    frame_inputs: np.ndarray  # (K, f) each column's inputs in a frame sample (first slot)
    frame_outputs: np.ndarray  # (K,) each column's output in a frame output (first slot)
    pairs: np.ndarray  # (K, channels per unit) each column's (output, input) pairs among the layer's read pairs
    unit_starts: np.ndarray  # (units + 1,) first column of each unit, then the group's width
    whole: bool  # the columns are the layer's output channels in order

    @classmethod
    def of(cls, layer: LayerPlan, units: list[Unit]) -> list[_Group]:
        groups: dict[tuple[Any, ...], list[Unit]] = {}
        # Units with the same domains: by fan-in where every input shares one domain, else by channels read.
        shared = layer.input_domain
        known: dict[Any, tuple[Any, ...]] = {}
        for unit in units:
            key = unit.fan_in if shared is not None else unit.in_channels
            domains = known.get(key)
            if domains is None:
                domains = known[key] = layer.unit_domains(unit)
            groups.setdefault(domains, []).append(unit)
        found = []
        for domains, members in groups.items():
            channels = np.asarray([c for u in members for c in u.out_channels], dtype=np.int64)
            reads = np.asarray([u.in_channels for u in members for _ in u.out_channels], dtype=np.int64)
            radices = np.asarray([len(d) for d in domains], dtype=np.int64)
            found.append(
                cls(
                    units=tuple(members),
                    channels=channels,
                    reads=reads,
                    domains=domains,
                    radices=radices,
                    values=tuple(d.values for d in domains),
                    value_matrix=np.stack([d.values for d in domains]) if len(set(radices.tolist())) == 1 else None,
                    peak=np.asarray([np.abs(d.values).max() for d in domains]),
                    place=place_values(radices),
                    frame_inputs=layer.input_indices(reads)[:, 0],
                    frame_outputs=layer.output_indices(channels)[0],
                    pairs=np.searchsorted(_read_index(layer), channels[:, None] * layer.in_channels + reads),
                    unit_starts=np.cumsum([0] + [len(u.out_channels) for u in members], dtype=np.int64),
                    whole=len(channels) == layer.out_channels and bool((channels == np.arange(len(channels))).all()),
                )
            )
        return found

    @property
    def rows(self) -> int:
        return math.prod(len(d) for d in self.domains)

    @property
    def split(self) -> int:
        """How many leading inputs form the prefix: the trailing ones give at least 256 rows when they can."""
        radices = [len(d) for d in self.domains]
        split = len(radices)
        while split > 0 and math.prod(radices[split:]) < 256:
            split -= 1
        return split


def _read_index(layer: LayerPlan) -> np.ndarray:
    """Flat indices into ``(out channels, in channels)`` of the pairs some unit reads, ascending (kept on the plan)."""
    memo = layer.memo
    if "read index" not in memo:
        memo["read index"] = np.flatnonzero(layer.reads)
    return memo["read index"]


def _frame_channels(layer: LayerPlan) -> np.ndarray:
    """The input channel of every element of one enumeration frame."""
    return frame_channels(layer.frame_in, layer.in_channels, channels_last=layer.layout.channels_last)


def _row_values(group: _Group, rows: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """Input values ``(n, f)`` of table rows: the leading and trailing digits' values from two small tables of
    every combination of each (about the square root of the rows each), or digit by digit for a few rows."""
    if len(rows) <= 256:
        digits = rows[:, None] // group.place % group.radices
        return np.stack([v[digits[:, j]] for j, v in enumerate(group.values)], axis=1).astype(dtype, copy=False)
    radices = group.radices.tolist()
    cut = min(range(len(radices) + 1), key=lambda m: math.prod(radices[:m]) + math.prod(radices[m:]))
    low_rows = math.prod(radices[cut:])
    tables = []
    for inputs in (range(cut), range(cut, len(radices))):
        count = math.prod(radices[j] for j in inputs)
        place = place_values([radices[j] for j in inputs])
        index = np.arange(count)
        columns = [group.values[j][index // q % radices[j]] for j, q in zip(inputs, place.tolist())]
        tables.append(np.stack(columns, axis=1).astype(dtype) if columns else np.zeros((count, 0), dtype))
    high, low = np.divmod(rows, low_rows)
    return np.concatenate([tables[0][high], tables[1][low]], axis=1)


def _outer_sums(terms: list[np.ndarray], width: int, dtype: Any = np.float64) -> np.ndarray:
    """``(width, prod n_j)``: one term per input summed over every code tuple, in lexicographic row order."""
    total = np.zeros((width, 1), dtype=dtype)
    for term in terms:
        total = (total[:, :, None] + term[:, None, :].astype(dtype, copy=False)).reshape(width, -1)
    return total


@dataclass(frozen=True)
class CodeBlock:
    """Codes ``(columns, rows)`` of consecutive units, each unit's columns adjacent, in unit order."""

    codes: np.ndarray
    units: tuple[Unit, ...]

    def entries(self) -> Iterator[tuple[int, np.ndarray]]:
        """Each unit's index and table outputs ``(rows, fan_out)`` (a view of the codes)."""
        column = 0
        for unit in self.units:
            yield unit.index, self.codes[column : column + unit.fan_out].T
            column += unit.fan_out


@dataclass
class _Job:
    """One layer's units to tabulate and where its results go."""

    fast: FastPath
    layer: LayerPlan
    units: list[Unit]
    sink: Callable[[Unit], Any]
    progress: Callable[[int], None] = lambda rows: None  # told the rows (per unit) of each block or segment done
    blocks: list[CodeBlock] = field(default_factory=list)
    outputs: dict[int, np.ndarray] = field(default_factory=dict)  # units streamed to their sinks
    near: int = 0  # rows computed by the layer's operations


@dataclass
class _Part:
    """One layer's columns of one domain group with this call's weights; batches join parts of many layers."""

    job: _Job
    group: _Group
    weight: np.ndarray  # (K, f) float64, over each unit's inputs in its input order
    bias: np.ndarray  # (K,) float64
    tail: _AffineTail | None = None  # the affine tail of the columns, once analysed and checked

    @property
    def width(self) -> int:
        return len(self.group.channels)

    @property
    def affine(self) -> _AffineTail:
        """The analysed tail (batches are made of analysed parts only)."""
        if self.tail is None:
            raise AssertionError(f"{self.job.layer.name}: a part batched before its tail was analysed")
        return self.tail

    @property
    def factor(self) -> float:
        """The layer's float32 error bound in units of ``(f + 2) * u * magnitude``: convolutions get twice the
        bound of a plain sum, since their kernels block and vectorize the sums."""
        return 1.0 if self.job.fast.kind == "linear" else 2.0

    def magnitude(self) -> np.ndarray:
        """``|b| + sum_j max |w_j x_j|`` per column: bounds ``|z|`` and scales the float32 error."""
        return np.abs(self.bias) + (np.abs(self.weight) * self.group.peak).sum(axis=1)


#: Columns ``c0:c1`` of a part (whole units).
_Segment = tuple[_Part, int, int]
