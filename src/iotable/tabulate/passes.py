"""The forward passes of the black box: units that read the same inputs form a *class*, classes with
disjoint inputs share a pass (*colours*, from DSatur on their conflict graph), and where a pass has one slot,
classes whose inputs overlap share it too through a linear design over a finite field (a *packed* pass; see
:mod:`iotable.tabulate.design`). See :mod:`iotable.tabulate.enumerate` for how the passes are run.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..domain import Domain
from ..front.layerplan import LayerPlan, Unit
from .design import Field, finite_field, pack

# Packed forward passes (see _passes) pay off from this many rows per table.
_PACK_MIN_ROWS = 64


@dataclass(frozen=True)
class _Class:
    units: tuple[Unit, ...]
    input_index: np.ndarray  # (slots, fan_in) flat frame indices
    output_index: np.ndarray  # (slots, sum of fan_outs)
    rows: int
    domains: tuple[Domain, ...]  # per input, in the unit's input order

    @property
    def channels(self) -> frozenset[int]:
        return frozenset(self.units[0].in_channels)


def _classes(layer: LayerPlan) -> list[_Class]:
    """Units grouped by the input channels they read, with their frame indices (kept on the plan)."""
    memo = layer.memo
    if "classes" not in memo:
        by_inputs: dict[tuple[int, ...], list[Unit]] = {}
        for unit in layer.units:
            by_inputs.setdefault(unit.in_channels, []).append(unit)
        groups = list(by_inputs.values())
        # Frame indices of every class at once, classes of one width together; outputs of every channel once.
        inputs: dict[int, np.ndarray] = {}  # class -> its frame indices
        by_width: dict[int, list[int]] = {}
        for k, units in enumerate(groups):
            by_width.setdefault(len(units[0].in_channels), []).append(k)
        for members in by_width.values():
            channels = np.asarray([groups[k][0].in_channels for k in members], dtype=np.int64)
            for k, index in zip(members, layer.input_indices(channels)):
                inputs[k] = index
        outputs = layer.output_indices(np.arange(layer.out_channels))  # (slots, out channels)
        memo["classes"] = [
            _Class(
                units=tuple(units),
                input_index=inputs[k],
                output_index=outputs[:, [c for u in units for c in u.out_channels]],
                rows=units[0].rows,
                domains=layer.unit_domains(units[0]),
            )
            for k, units in enumerate(groups)
        ]
    return memo["classes"]


def _dsatur(neighbours: list[set[int]]) -> list[int]:
    """Colour of each vertex: DSatur (most distinct neighbour colours first, then most neighbours)."""
    colour = [-1] * len(neighbours)
    seen: list[set[int]] = [set() for _ in neighbours]
    heap = [(0, -len(n), v) for v, n in enumerate(neighbours)]
    heapq.heapify(heap)
    while heap:
        saturation, _, v = heapq.heappop(heap)
        if colour[v] >= 0 or -saturation != len(seen[v]):
            continue  # coloured already, or an entry from before its saturation grew
        c = 0
        while c in seen[v]:
            c += 1
        colour[v] = c
        for u in neighbours[v]:
            if colour[u] < 0 and c not in seen[u]:
                seen[u].add(c)
                heapq.heappush(heap, (-len(seen[u]), -len(neighbours[u]), u))
    return colour


def _colours(classes: list[_Class]) -> list[list[_Class]]:
    """Classes of equal row count and pairwise disjoint input channels that share a forward pass.

    The forward passes of a layer are the colours of its classes' conflict graph (two classes conflict when
    they read a common channel); DSatur needs close to the fewest, which is at least the largest number of
    classes reading one channel.
    """
    by_rows: dict[int, list[_Class]] = {}
    for cls in classes:
        by_rows.setdefault(cls.rows, []).append(cls)
    colours: list[list[_Class]] = []
    for rows in sorted(by_rows, reverse=True):
        group = by_rows[rows]
        readers: dict[int, list[int]] = {}
        for k, cls in enumerate(group):
            for channel in cls.channels:
                readers.setdefault(channel, []).append(k)
        neighbours: list[set[int]] = [set() for _ in group]
        for members in readers.values():
            for k in members:
                neighbours[k].update(members)
        for k, n in enumerate(neighbours):
            n.discard(k)
        colour = _dsatur(neighbours)
        found: list[list[_Class]] = [[] for _ in range(max(colour) + 1)]
        for cls, c in zip(group, colour):
            found[c].append(cls)
        colours.extend(found)
    return colours


@dataclass(frozen=True)
class _Packed:
    """A forward pass of classes whose fan-ins may overlap: a linear design over GF(q) (see :mod:`._design`)."""

    classes: tuple[_Class, ...]
    gf: Field
    elements: np.ndarray  # (inputs,) flat frame indices of every input a class reads
    forms: np.ndarray  # (inputs, fan_in) each input's coefficient vector: its code is ``forms[e] . z``
    positions: np.ndarray  # (classes, fan_in) each class's inputs, as indices into ``elements``
    identity: np.ndarray  # (classes,) bool: the class's rows come in sample order
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)  # see _packed_inputs

    @property
    def rows(self) -> int:
        """Rows of each class's tables, which is also the pass's samples."""
        return self.classes[0].rows


def _packed_bytes(cls: _Class, itemsize: int) -> int:
    """What a class holds in a packed pass until it ends: its outputs in sample order and its row numbers."""
    return cls.rows * (sum(u.fan_out for u in cls.units) * itemsize + 4)


def _passes(layer: LayerPlan, classes: list[_Class], *, capacity: int, itemsize: int) -> list[list[_Class] | _Packed]:
    """The forward passes of ``classes``: packed designs where they apply, colours of disjoint classes elsewhere.

    A design needs one slot per sample (non-spatial layers, spatial ones on a minimal frame), inputs with a prime
    power ``q`` of codes (at most 64), tables of at least ``_PACK_MIN_ROWS`` rows (below, designing costs more
    than the passes it saves), and a pass's tables within ``capacity`` bytes, since its rows arrive out of
    order and are held until it ends.
    """
    packable: dict[tuple[int, int], list[_Class]] = {}
    rest: list[_Class] = []
    for cls in classes:
        radices = {len(d) for d in cls.domains}
        gf = finite_field(radices.pop()) if len(radices) == 1 else None
        size = _packed_bytes(cls, itemsize)
        if len(layer.slots) == 1 and gf is not None and cls.rows >= _PACK_MIN_ROWS and size <= capacity:
            packable.setdefault((cls.rows, gf.q), []).append(cls)
        else:
            rest.append(cls)
    passes: list[list[_Class] | _Packed] = []
    for (_, q), group in packable.items():
        gf = finite_field(q)
        assert gf is not None
        fan_ins = [tuple(int(e) for e in c.input_index[0]) for c in group]
        sizes = [_packed_bytes(c, itemsize) for c in group]
        for design in pack(fan_ins, gf, sizes=sizes, capacity=capacity):
            members = tuple(group[m] for m in design.members)
            elements = np.asarray(sorted(design.forms), dtype=np.int64)
            where = {int(e): k for k, e in enumerate(elements)}
            passes.append(
                _Packed(
                    classes=members,
                    gf=gf,
                    elements=elements,
                    forms=np.asarray([design.forms[int(e)] for e in elements], dtype=np.int64),
                    positions=np.asarray([[where[e] for e in fan_ins[m]] for m in design.members], dtype=np.int64),
                    identity=np.asarray(design.identity),
                )
            )
    return passes + list(_colours(rest))
