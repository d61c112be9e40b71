"""The black-box enumerator: every combination of input codes of every unit, through the unmodified module.

How rows are batched (no Python loop over rows):

- Units that read the same input elements form a *class*: one enumeration fills all their tables (the
  output channels of a convolution group share their inputs).
- Classes whose inputs are disjoint are *coloured* together: their inputs are set independently in the same
  forward pass (the replicate-across-groups trick: one forward of a grouped convolution fills every group).
  Colours come from DSatur on the classes' conflict graph.
- Every slot of the enumeration frame (a non-overlapping window position, see :mod:`iotable.plan`) holds a
  different row, so sample ``b`` of a forward pass computes rows ``b * slots + i`` of each class.
- Where a forward pass has one slot, classes whose inputs *overlap* share it too: a linear design over a
  finite field gives every class each of its rows exactly once, out of order (see :mod:`iotable.tabulate.design`).
  On a LogicNets-style sparse layer that is one or two passes where colours need one per unit reading the
  most-read input.
- Inputs are built in a reused buffer straight from the domains' values; chunks are sized for the cache and
  bounded by a memory budget.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.modules import eval_mode, module_dtype, run_module
from .._util.order import frame_channels
from .._util.progress import QUIET, Progress, progress_bar
from ..domain import Domain
from ..errors import DomainError, EnumerationError
from ..front.plan import LayerPlan, Unit
from ..table import IOTable, TableList, place_values
from .cache import FileSink, MemorySink, TableCache, layer_fingerprint, temporary_sink, unit_key
from .design import Field, finite_field, pack
from .fastpath import CodeBlock, FastPath, _Job, build_tables, recognize

__all__ = ["DEFAULT_MEMORY_BUDGET", "enumerate_tables"]

#: Default memory budget of one forward pass, in bytes (256 MiB).
DEFAULT_MEMORY_BUDGET = 256 * 2**20

# Bytes per frame element per sample held at once: codes (int64), values, outputs and the module's own
# intermediate activations (a small multiple of the input).
_BYTES_PER_ELEMENT = 8 + 4 * 6

# A forward pass is several times faster per sample while its inputs, outputs and temporaries stay in the
# core's cache (measured on a 100-wide masked block: 0.4-0.6 us/sample at 1-8k samples, 1 us at 32k, 3 us
# at 131k), so chunks aim at this many bytes of inputs and outputs, never fewer than _MIN_CHUNK samples.
_CACHE_BYTES = 2**20
_MIN_CHUNK = 64

# Packed forward passes (see _passes) pay off from this many rows per table.
_PACK_MIN_ROWS = 64

# Rows of the table of trailing-digit values in row-order passes (see _Inputs).
_LOW_ROWS = 4096


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


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype inputs are built in: the module's own when numpy has it, else float64 (one rounding)."""
    return np.dtype(np.float32) if dtype == torch.float32 else np.dtype(np.float64)


@dataclass(frozen=True)
class FrameValues:
    """Per-element code-to-value lookup of a plan's enumeration frame (channels may differ in domain)."""

    values: torch.Tensor  # every channel's values, concatenated
    offsets: torch.Tensor  # (frame elements,) start of each element's channel in ``values``
    radices: torch.Tensor  # (frame elements,) number of codes of each element
    fill: torch.Tensor  # (1, frame elements) code of real 0 (or 0) per element
    shape: tuple[int, ...]
    exact: np.ndarray  # ``values`` in float64, as the domains hold them

    @classmethod
    def build(cls, layer: LayerPlan, *, dtype: torch.dtype, device: torch.device) -> FrameValues:
        """The plan's frame values in ``dtype`` on ``device`` (kept on the plan)."""
        key = ("frame values", dtype, device)
        if key not in layer.memo:
            layer.memo[key] = cls._build(layer, dtype=dtype, device=device)
        return layer.memo[key]

    @classmethod
    def _build(cls, layer: LayerPlan, *, dtype: torch.dtype, device: torch.device) -> FrameValues:
        sizes = np.asarray([len(d) for d in layer.input_domains], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        channel = frame_channels(layer.frame_in, layer.in_channels, channels_last=layer.layout.channels_last)
        values = np.concatenate([d.values for d in layer.input_domains])
        return cls(
            values=torch.tensor(values, dtype=dtype, device=device),
            offsets=torch.as_tensor(starts[channel]),
            radices=torch.as_tensor(sizes[channel]),
            fill=torch.as_tensor(np.asarray(layer.fill_codes, dtype=np.int64)[channel])[None, :],
            shape=layer.frame_in,
            exact=values,
        )

    def values_of(self, codes: torch.Tensor) -> torch.Tensor:
        """Values of a batch of per-element codes ``(batch, frame elements)``, shaped as frame samples."""
        index = (codes + self.offsets).to(self.values.device)
        return self.values[index].reshape(codes.shape[0], *self.shape)

    def fill_values(self, dtype: np.dtype) -> np.ndarray:
        """``(frame elements,)`` value of each element's fill code, in ``dtype``."""
        return self.exact[(self.fill[0] + self.offsets).numpy()].astype(dtype)


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


def enumerate_tables(
    module: nn.Module,
    layer: LayerPlan,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
) -> Sequence[IOTable]:
    """Build every unit's dense table of ``layer`` by running ``module`` on all input combinations.

    The module runs in ``eval()`` and ``torch.inference_mode()``; its training flags are restored. A table
    larger than ``memory_budget`` is written chunk by chunk to a file and memory-mapped, so peak memory
    follows the budget, not the table size.

    Args:
        module: the module ``layer`` was planned for (see :func:`iotable.plan`).
        layer: the resolved plan.
        memory_budget: bytes one forward pass (and one in-memory table) may hold; larger work is chunked.
        progress: a progress bar over the rows (``None``: for long work in a terminal or a notebook).
        cache_dir: a directory of finished tables: each table is written there as soon as it is done and
            loaded instead of recomputed on a later call (see :mod:`iotable.tabulate.cache` for the key).
        fast_path: use the structured path for linear and convolution layers when it applies (it gives the
            tables of the black-box path; see :mod:`iotable.tabulate.fastpath`).

    Returns:
        One :class:`IOTable` per unit, in unit order (each made on first access).
    """
    with progress_bar(total=layer.total_rows, desc=layer.name, enabled=progress) as bar:
        return _enumerate(
            module, layer, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, bar=bar
        ).tables


@dataclass(frozen=True)
class Enumerated:
    """What enumerating one layer produced, and how."""

    tables: TableList
    cached: tuple[int, ...]  # units loaded from the cache
    method: str  # "black box", "linear fast path", "conv fast path" or "cache"
    near_ties: int  # fast path: rows within float rounding of a quantization boundary, computed by the module


def _enumerate(
    module: nn.Module,
    layer: LayerPlan,
    *,
    memory_budget: int,
    cache_dir: str | os.PathLike[str] | None,
    fast_path: bool = True,
    fast: FastPath | None = None,
    bar: Progress = QUIET,
) -> Enumerated:
    """:func:`enumerate_tables`, also saying which units came from the cache and which path ran.

    ``fast``: the fast path already recognized for this layer (see :func:`iotable.tabulate.fastpath.recognize`).
    ``bar``: counts every unit's rows as they are done (cached units at once).
    """
    bar.layer(layer.name)
    cache = TableCache(cache_dir) if cache_dir is not None else None
    out_dtype = _output_dtype(module, layer)
    keys: dict[int, str] = {}
    outputs: dict[int, np.ndarray] = {}
    if cache is not None:
        keys, outputs = _cached_outputs(cache, module, layer, out_dtype)
    sink = _sink_factory(cache, keys, memory_budget=memory_budget, dtype=out_dtype)
    cached = tuple(sorted(outputs))
    bar.update(sum(layer.units[i].rows for i in cached))
    pending = [u for u in layer.units if u.index not in outputs]
    if not pending:
        return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method="cache", near_ties=0)
    if fast is None and fast_path:
        fast = recognize(module, layer, memory_budget=memory_budget)
    if fast is not None:
        blocks, near_ties = _fast_tables(
            fast, layer, pending, outputs, sink, cached=cache is not None, memory_budget=memory_budget, bar=bar
        )
        tables = _as_tables(layer, outputs, blocks)
        return Enumerated(tables=tables, cached=cached, method=fast.method, near_ties=near_ties)
    _black_box(module, layer, outputs, sink, memory_budget=memory_budget, out_dtype=out_dtype, bar=bar)
    return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method="black box", near_ties=0)


def _output_dtype(module: nn.Module, layer: LayerPlan) -> np.dtype:
    """What the tables hold: codes of the output domain, or raw outputs in the module's own float type."""
    if layer.output_domain is not None:
        return layer.output_domain.code_dtype
    return torch.empty(0, dtype=module_dtype(module)[0]).numpy().dtype


def _cached_outputs(
    cache: TableCache, module: nn.Module, layer: LayerPlan, dtype: np.dtype
) -> tuple[dict[int, str], dict[int, np.ndarray]]:
    """Every unit's cache key, and the outputs of the units the cache holds (checked as it loads them)."""
    fingerprint = layer_fingerprint(module, layer)
    codes = len(layer.output_domain) if layer.output_domain is not None else None
    keys: dict[int, str] = {}
    outputs: dict[int, np.ndarray] = {}
    for unit in layer.units:
        keys[unit.index] = unit_key(fingerprint, layer, unit)
        found = cache.load(keys[unit.index], unit.rows, unit.fan_out, dtype, codes=codes)
        if found is not None:
            outputs[unit.index] = found
    return keys, outputs


def _sink_factory(
    cache: TableCache | None, keys: dict[int, str], *, memory_budget: int, dtype: np.dtype
) -> Callable[[Unit], MemorySink | FileSink]:
    """Where a unit's rows go: its cache entry, a temporary file above ``memory_budget``, else memory."""

    def sink(unit: Unit) -> MemorySink | FileSink:
        if cache is not None:
            return cache.sink(keys[unit.index], unit.rows, unit.fan_out, dtype)
        if unit.rows * unit.fan_out * dtype.itemsize > memory_budget:
            return temporary_sink(unit.rows, unit.fan_out, dtype)
        return MemorySink(unit.rows, unit.fan_out, dtype)

    return sink


def _fast_tables(
    fast: FastPath,
    layer: LayerPlan,
    pending: list[Unit],
    outputs: dict[int, np.ndarray],
    sink: Callable[[Unit], MemorySink | FileSink],
    *,
    cached: bool,
    memory_budget: int,
    bar: Progress,
) -> tuple[list[CodeBlock], int]:
    """The pending units' outputs by the fast path: streamed units into ``outputs``, the rest as blocks of
    columns (a table is cut from them on first access); and the rows near a rounding boundary.

    With a cache (``cached``), the blocks are written to their entries at once, so every output is a
    finished sink's and no block is left.
    """
    blocks, streamed, near_ties = fast.tables(
        layer, pending, memory_budget=memory_budget, sink=sink, progress=bar.update
    )
    outputs.update(streamed)  # streamed units are in their files (the cache's too) already
    if not cached:
        return blocks, near_ties
    for block in blocks:
        for index, array in block.entries():
            s = sink(layer.units[index])
            s.write(0, array)
            outputs[index] = s.finish()
    return [], near_ties


def _black_box(
    module: nn.Module,
    layer: LayerPlan,
    outputs: dict[int, np.ndarray],
    sink: Callable[[Unit], MemorySink | FileSink],
    *,
    memory_budget: int,
    out_dtype: np.dtype,
    bar: Progress,
) -> None:
    """The missing units' outputs by running ``module`` on every input combination, pass by pass, into
    ``outputs`` (the module in eval mode throughout)."""
    todo = [c for c in _classes(layer) if not all(u.index in outputs for u in c.units)]
    dtype, device = module_dtype(module)
    if len(todo) == len(_classes(layer)):  # every class: the passes depend on the plan alone (kept on it)
        key = ("passes", memory_budget, out_dtype.itemsize)
        if key not in layer.memo:
            layer.memo[key] = _passes(layer, todo, capacity=memory_budget, itemsize=out_dtype.itemsize)
        passes = layer.memo[key]
    else:
        passes = _passes(layer, todo, capacity=memory_budget, itemsize=out_dtype.itemsize)

    frame = FrameValues.build(layer, dtype=dtype, device=device)
    chunk = _chunk_samples(layer, memory_budget, dtype)
    out_domain = layer.output_domain
    encoder = _Encoder(out_domain, _numpy_dtype(dtype)) if out_domain is not None else None
    run = _Run(module=module, layer=layer, frame=frame, chunk=chunk, device=device, dtype=dtype, encoder=encoder)

    with eval_mode(module):
        for forward_pass in passes:
            members = forward_pass.classes if isinstance(forward_pass, _Packed) else forward_pass
            sinks = {u.index: sink(u) for c in members for u in c.units}
            try:
                if isinstance(forward_pass, _Packed):
                    _fill_packed(run, forward_pass, sinks, bar=bar)
                else:
                    _fill(run, forward_pass, sinks, bar=bar)
            except BaseException:
                for s in sinks.values():
                    if isinstance(s, FileSink):
                        s.abandon()
                raise
            for index, s in sinks.items():  # the pass is done: its tables are final (and cached)
                outputs[index] = s.finish()


def _enumerate_fast(
    found: list[tuple[LayerPlan, FastPath]], *, memory_budget: int, bar: Progress = QUIET
) -> list[Enumerated]:
    """:func:`_enumerate` of layers the fast path recognized, all at once (no cache): their analysis and
    kernels are shared where the layers allow (see :func:`iotable.tabulate.fastpath.build_tables`); ``bar`` counts
    their rows."""
    jobs = []
    for layer, fast in found:
        dtype = _output_dtype(fast.structure.head, layer)  # codes: a recognized layer ends in a quantizer

        def sink(unit: Unit, dtype: np.dtype = dtype) -> MemorySink | FileSink:
            if unit.rows * unit.fan_out * dtype.itemsize > memory_budget:
                return temporary_sink(unit.rows, unit.fan_out, dtype)
            return MemorySink(unit.rows, unit.fan_out, dtype)

        jobs.append(_Job(fast, layer, list(layer.units), sink, bar.counter(layer.name)))
    build_tables(jobs, memory_budget=memory_budget)
    return [Enumerated(_as_tables(job.layer, job.outputs, job.blocks), (), job.fast.method, job.near) for job in jobs]


def _as_tables(layer: LayerPlan, outputs: dict[int, np.ndarray], blocks: Sequence[CodeBlock] = ()) -> TableList:
    """One table per unit, in unit order, each made on first access from its unit's outputs.

    A unit's outputs are an array ``(rows, fan_out)`` in ``outputs``, or columns of one of the fast path's
    ``blocks`` (found on first use, so that no per-unit work is done before a table is wanted).
    """
    units = layer.units
    found: dict[int, np.ndarray] = {}

    def make(i: int) -> IOTable:
        unit = units[i]
        out = outputs.get(unit.index)
        if out is None:
            if not found:
                found.update(entry for block in blocks for entry in block.entries())
            out = found[unit.index]
        return IOTable._trusted(
            out,
            input_domains=layer.unit_domains(unit),
            output_domain=layer.output_domain,
            layer=layer.name,
            unit=unit.index,
        )

    return TableList(len(units), make)


def _chunk_samples(layer: LayerPlan, memory_budget: int, dtype: torch.dtype) -> int:
    """Frame samples per forward pass: cache-sized, and always within the memory budget."""
    elements = math.prod(layer.frame_in) + math.prod(layer.frame_out)
    budget = max(1, memory_budget // (elements * _BYTES_PER_ELEMENT))
    cached = max(_MIN_CHUNK, _CACHE_BYTES // (elements * torch.empty(0, dtype=dtype).element_size()))
    return min(budget, cached)


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


@dataclass(frozen=True)
class _Run:
    """What every forward pass of one layer's enumeration shares."""

    module: nn.Module
    layer: LayerPlan
    frame: FrameValues
    chunk: int  # samples per forward call
    device: torch.device
    dtype: torch.dtype
    encoder: _Encoder | None

    def samples(self, forward_pass: list[_Class] | _Packed) -> int:
        """Frame samples a pass runs."""
        if isinstance(forward_pass, _Packed):
            return forward_pass.rows
        return -(-forward_pass[0].rows // len(self.layer.slots))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The module's outputs ``(batch, output elements)`` for the frame samples ``x`` ``(batch, elements)``."""
        tensor = torch.from_numpy(x).reshape(len(x), *self.frame.shape)
        if tensor.dtype != self.dtype or tensor.device != self.device:
            tensor = tensor.to(device=self.device, dtype=self.dtype)
        out = run_module(self.module, tensor, self.layer.name, switched=True)  # in eval_mode for the enumeration
        return out.detach().reshape(len(x), -1).cpu().numpy()


@dataclass(frozen=True)
class _Inputs:
    """Where one forward pass writes the inputs of classes that share their input domains (so their digits).

    A row's digits split into its last ``m`` digits (row % block) and the rest (row // block): the values of
    the last ones come from a table of every block position, the others from the few distinct ``row //
    block`` of a chunk, so a row costs one divmod and gathers instead of a division per digit.
    """

    low: np.ndarray  # (block, m) values of the last m digits of each row % block
    high_radices: np.ndarray  # (fan_in - m,)
    high_weights: np.ndarray  # (fan_in - m,) place value of each leading digit in row // block
    high_offsets: np.ndarray  # (fan_in - m,) start of each leading input's domain in ``values``
    values: np.ndarray  # the inputs' domain values, concatenated, in the buffer's dtype
    index: np.ndarray  # (slots, classes, fan_in) flat frame indices

    @classmethod
    def build(cls, members: list[_Class], dtype: np.dtype) -> list[_Inputs]:
        by_domains: dict[tuple[Domain, ...], list[_Class]] = {}
        for c in members:
            by_domains.setdefault(c.domains, []).append(c)
        found = []
        for domains, group in by_domains.items():
            radices = np.asarray([len(d) for d in domains], dtype=np.int64)
            weights = place_values(radices)  # lexicographic order: the first input most significant
            offsets = np.concatenate([[0], np.cumsum(radices)[:-1]]).astype(np.int64)
            values = np.concatenate([d.values for d in domains]).astype(dtype)
            m = 0
            while m < len(radices) and weights[-1 - m] * radices[-1 - m] <= _LOW_ROWS:
                m += 1
            split = len(radices) - m
            block = int(weights[split - 1]) if split else int(weights[0] * radices[0])
            low = np.arange(block, dtype=np.int64)[:, None] // weights[split:] % radices[split:]
            found.append(
                cls(
                    low=values[low + offsets[split:]],
                    high_radices=radices[:split],
                    high_weights=weights[:split] // block,
                    high_offsets=offsets[:split],
                    values=values,
                    index=np.stack([c.input_index for c in group], axis=1),
                )
            )
        return found

    def write(self, frame: np.ndarray, rows: np.ndarray) -> None:
        """Set every class's inputs in ``frame`` ``(batch, elements)`` to the codes of ``rows`` ``(batch, slots)``."""
        split = len(self.high_radices)
        high, low = np.divmod(rows, len(self.low))
        frame[:, self.index[..., split:]] = self.low[low][:, :, None, :]
        if split:
            first = int(high.min())
            leading = np.arange(first, int(high.max()) + 1)[:, None] // self.high_weights % self.high_radices
            frame[:, self.index[..., :split]] = self.values[leading + self.high_offsets][high - first][:, :, None, :]


class _Encoder:
    """Codes of float outputs in an output domain: a candidate code per output, kept where it decodes exactly.

    Outputs that are not exactly a domain value (float rounding within the domain's tolerance, or values
    outside it) make the whole chunk go through :meth:`Domain.encode`, which decides, so the codes (and
    the errors) are those of :meth:`Domain.encode`.
    """

    def __init__(self, domain: Domain, dtype: np.dtype) -> None:
        self.domain = domain
        self.dtype = domain.code_dtype
        values = domain.values.astype(dtype)
        # Where the domain's values are not exact in the output dtype, no output equals one: Domain.encode
        # decides every chunk. Exact values are distinct and ascending, so a binary search finds each one.
        self.values = values if np.array_equal(values.astype(np.float64), domain.values) else None
        n = len(values)
        with np.errstate(all="ignore"):
            step = (domain.values[-1] - domain.values[0]) / (n - 1) if n > 1 else 1.0
            self.scale = np.asarray(1 / step, dtype=dtype)
            self.shift = np.asarray(-domain.values[0] / step, dtype=dtype)
            # Evenly spaced values (integer quantization) take arithmetic instead of a search; the candidate
            # formula must give each value its own code, since an exact output is computed the same way.
            self.uniform = n > 1 and np.array_equal(self._arithmetic(values), np.arange(n))

    def _arithmetic(self, y: np.ndarray) -> np.ndarray:
        t = y * self.scale
        t += self.shift
        np.rint(t, out=t)
        # fmax/fmin send NaN to a bound (np.clip keeps it, and NaN has no integer); the check then rejects it.
        np.fmax(t, 0, out=t)
        np.fmin(t, len(self.domain) - 1, out=t)
        return t.astype(self.dtype)

    def __call__(self, y: np.ndarray) -> np.ndarray | None:
        """Codes of ``y``, or ``None`` when some output is not exactly a domain value."""
        if self.values is None:
            return None
        with np.errstate(all="ignore"):
            codes = self._arithmetic(y) if self.uniform else np.searchsorted(self.values[:-1], y).astype(self.dtype)
        if not np.array_equal(np.take(self.values, codes), y):  # NaN never equals: Domain.encode reports it
            return None
        return codes


def _fill(run: _Run, members: list[_Class], sinks: dict[int, MemorySink | FileSink], *, bar: Any) -> None:
    """Run every chunk of one colour's samples and send each unit's rows to its sink, in row order.

    Inputs are built in one reused buffer: the fill frame, then each class's inputs straight from its
    domains' values; only the classes' output columns are read back.
    """
    layer = run.layer
    n_slots = len(layer.slots)
    rows_total = members[0].rows
    total = run.samples(members)
    buffer_dtype = _numpy_dtype(run.dtype)
    inputs = _Inputs.build(members, buffer_dtype)
    out_index = np.concatenate([c.output_index for c in members], axis=1)  # (slots, sum of fan_outs)
    fill = run.frame.fill_values(buffer_dtype)
    buffer = np.empty((min(run.chunk, total), fill.size), dtype=buffer_dtype)
    slot_offsets = np.arange(n_slots, dtype=np.int64)
    for b0 in range(0, total, run.chunk):
        b1 = min(total, b0 + run.chunk)
        batch = b1 - b0
        x = buffer[:batch]
        x[:] = fill  # again every chunk: the module may have changed its input in place
        rows = np.arange(b0, b1, dtype=np.int64)[:, None] * n_slots + slot_offsets[None, :]
        np.minimum(rows, rows_total - 1, out=rows)
        for part in inputs:
            part.write(x, rows)
        r0, r1 = b0 * n_slots, min(b1 * n_slots, rows_total)
        result = run.forward(x)[:, out_index].reshape(batch * n_slots, -1)[: r1 - r0]
        codes = run.encoder(result) if run.encoder is not None else result
        column = 0
        for cls in members:
            width = sum(u.fan_out for u in cls.units)
            block = result[:, column : column + width]
            block = codes[:, column : column + width] if codes is not None else _encode(block, layer, cls, r0)
            start = 0
            for unit in cls.units:
                sinks[unit.index].write(r0, block[:, start : start + unit.fan_out])
                start += unit.fan_out
            column += width
        bar.update((r1 - r0) * sum(len(c.units) for c in members))  # rows, as the summary counts them


def _field_codes(gf: Field, forms: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """``(samples, inputs)`` codes ``forms[e] . z`` over ``gf`` of each sample ``z`` (its base-q digits).

    Field arithmetic runs on base-p digits: multiplication by a coefficient is a matrix over GF(p), so all
    inputs' codes come from one integer matrix product, reduced mod p.
    """
    p, k, q = gf.p, gf.k, gf.q
    n_in, fan_in = forms.shape
    place = ((q ** np.arange(fan_in - 1, -1, -1))[:, None] * (p ** np.arange(k))[None, :]).reshape(-1)
    digits = samples[:, None] // place % p  # (samples, fan_in * k): digit l of base-q digit f
    matrix = gf.times[forms].transpose(1, 3, 0, 2).reshape(fan_in * k, n_in * k)
    # A float product is exact here (sums of at most 64 * 6 terms below 64 each) and runs in BLAS.
    sums = (digits.astype(np.float64) @ matrix.astype(np.float64)).astype(np.int64)
    return (sums % p).reshape(len(samples), n_in, k) @ p ** np.arange(k)


def _fill_packed(run: _Run, packed: _Packed, sinks: dict[int, MemorySink | FileSink], *, bar: Any) -> None:
    """Run a packed pass: sample ``z`` sets input ``e`` to the code ``forms[e] . z`` over GF(q).

    Codes are linear in ``z``, so a chunk of whole blocks of ``q**m`` samples (the last m digits varying) adds
    (over the field) each block's high-digit codes to one table of low-digit codes computed once; in
    characteristic 2 that addition is a XOR, and so is each class's row number, whose base-q digits are its
    inputs' codes. Rows arrive out of order: outputs are kept in sample order and put in row order when the
    pass ends. Everything but the forward passes depends on the plan alone and is kept on the pass
    (:func:`_packed_inputs`), inputs and row orders included when the pass is one chunk.
    """
    layer = run.layer
    prep = _packed_inputs(run, packed)
    rows_total = packed.rows
    out_dtype = layer.output_domain.code_dtype if layer.output_domain is not None else _numpy_dtype(run.dtype)
    gathered = np.empty((len(prep.out_index), rows_total), dtype=out_dtype)  # outputs in sample order
    rows = prep.rows if prep.rows is not None else torch.empty((len(prep.permuted), rows_total), dtype=prep.dtype)
    for z0 in range(0, rows_total, prep.per_chunk):
        z1 = min(rows_total, z0 + prep.per_chunk)
        batch = z1 - z0
        if prep.inputs is not None:  # one chunk: its inputs are the plan's (a copy: a module may write to them)
            x = prep.inputs.copy()
        else:
            x, chunk_rows = prep.chunk(z0, z1)
            if chunk_rows is not None:
                rows[:, z0:z1] = chunk_rows
        result = run.forward(x)[:, prep.out_index]
        coded = run.encoder(result) if run.encoder is not None else result
        if coded is None:
            samples = np.arange(z0, z1)
            coded = _encode_packed(result, layer, packed, prep.owner, samples, rows[:, z0:z1].numpy())
        gathered[:, z0:z1] = coded.T
        bar.update(batch * sum(len(c.units) for c in packed.classes))  # a sample is a row of every unit

    # Every permuted column to row order at once: column j of class c puts sample z at row rows[c][z].
    if len(prep.moved):
        in_order = gathered.copy()
        in_order[prep.moved[:, None], rows.numpy()[prep.order[prep.owner[prep.moved]]]] = gathered[prep.moved]
        gathered = in_order
    column = 0
    for cls in packed.classes:
        for unit in cls.units:
            sinks[unit.index].write(0, gathered[column : column + unit.fan_out].T)
            column += unit.fan_out


@dataclass
class _PackedInputs:
    """What a packed pass's forward passes read, made once per pass (see :func:`_packed_inputs`)."""

    per_chunk: int
    dtype: torch.dtype  # of indices and rows
    out_index: np.ndarray  # every class's output columns
    owner: np.ndarray  # class of each output column
    permuted: np.ndarray  # classes whose rows are not in sample order
    order: np.ndarray  # (classes,) each class's place among the permuted ones, -1 for the others
    moved: np.ndarray  # output columns of permuted classes
    chunk: Callable[[int, int], tuple[np.ndarray, torch.Tensor | None]]  # inputs and rows of samples z0:z1
    inputs: np.ndarray | None  # the one chunk's inputs, when the pass is one chunk
    rows: torch.Tensor | None  # (permuted classes, rows) every permuted class's row of each sample, then


def _packed_inputs(run: _Run, packed: _Packed) -> _PackedInputs:
    """The structural part of :func:`_fill_packed`, kept on the pass (per dtype and chunk size)."""
    key = (run.dtype, run.chunk)
    if key in packed.memo:
        return packed.memo[key]
    gf = packed.gf
    q = gf.q
    fan_in = packed.forms.shape[1]
    rows_total = packed.rows
    n_frame = run.frame.offsets.numel()
    block = 1  # samples whose last digits vary: the largest power of q in a chunk (at most all rows)
    while block * q <= min(run.chunk, rows_total):
        block *= q
    per_chunk = run.chunk // block * block

    # Gather index into ``values`` ``(frame elements, q)``, whose row e holds element e's domain values (the
    # fill value throughout for elements no class of the pass reads): e * q + code.
    buffer_dtype = _numpy_dtype(run.dtype)
    elements = torch.as_tensor(packed.elements)
    table = np.repeat(run.frame.fill_values(buffer_dtype)[:, None], q, axis=1)
    table[packed.elements] = run.frame.exact[run.frame.offsets.numpy()[packed.elements, None] + np.arange(q)]
    values = torch.from_numpy(table.astype(buffer_dtype).reshape(-1))
    # int32 indices and rows where they fit: the per-chunk XOR and gather move half the bytes.
    index_dtype = torch.int32 if n_frame * q < 2**31 and rows_total < 2**31 else torch.int64
    low = torch.zeros((block, n_frame), dtype=index_dtype)
    low[:, elements] = torch.as_tensor(_field_codes(gf, packed.forms, np.arange(block, dtype=np.int64))).to(low)
    base = torch.arange(n_frame, dtype=index_dtype) * q
    low_index = low + base if gf.p == 2 else None
    add = torch.as_tensor(gf.add.reshape(-1))

    # Rows of the classes not in sample order: the base-q number of their inputs' codes.
    permuted = np.flatnonzero(~packed.identity)
    place = torch.as_tensor(q ** np.arange(fan_in - 1, -1, -1)).to(index_dtype)
    positions = torch.as_tensor(packed.positions[permuted])  # (permuted classes, fan_in) into ``elements``
    low_rows = (low[:, elements][:, positions] * place).sum(-1)  # (block, permuted classes)

    def chunk(z0: int, z1: int) -> tuple[np.ndarray, torch.Tensor | None]:
        batch, blocks = z1 - z0, (z1 - z0) // block
        high = torch.zeros((blocks, 1, n_frame), dtype=index_dtype)
        high_codes = torch.as_tensor(_field_codes(gf, packed.forms, np.arange(z0, z1, block, dtype=np.int64)))
        high_codes = high_codes.to(index_dtype)
        high[:, 0, elements] = high_codes
        if low_index is not None:  # GF(2**k): field addition is a XOR of codes, which leaves e * q's bits alone
            index = low_index ^ high
        else:
            index = add[low * q + high] + base
        x = np.empty((batch, n_frame), dtype=buffer_dtype)
        torch.index_select(values, 0, index.reshape(-1), out=torch.from_numpy(x).view(-1))
        chunk_rows = None
        if len(permuted):
            if gf.p == 2:  # the digits of a row are disjoint bit fields: XOR them all at once
                chunk_rows = low_rows[None] ^ (high_codes[:, positions] * place).sum(-1)[:, None]
            else:
                codes = (index - base).reshape(batch, n_frame)[:, elements]
                chunk_rows = (codes[:, positions] * place).sum(-1)
            chunk_rows = chunk_rows.reshape(batch, -1).T
        return x, chunk_rows

    widths = [sum(u.fan_out for u in c.units) for c in packed.classes]
    owner = np.repeat(np.arange(len(packed.classes)), widths)  # class of each output column
    order = np.full(len(packed.classes), -1)
    order[permuted] = np.arange(len(permuted))
    inputs, rows = None, None
    if per_chunk >= rows_total:
        inputs, chunk_rows = chunk(0, rows_total)
        rows = chunk_rows if chunk_rows is not None else torch.empty((0, rows_total), dtype=index_dtype)
    found = _PackedInputs(
        per_chunk=per_chunk,
        dtype=index_dtype,
        out_index=np.concatenate([c.output_index[0] for c in packed.classes]),
        owner=owner,
        permuted=permuted,
        order=order,
        moved=np.flatnonzero(order[owner] >= 0),
        chunk=chunk,
        inputs=inputs,
        rows=rows,
    )
    packed.memo[key] = found
    return found


def _encode_packed(
    result: np.ndarray, layer: LayerPlan, packed: _Packed, owner: np.ndarray, samples: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """:meth:`Domain.encode` of a packed chunk's outputs; on failure, the error names the first bad row.

    ``rows`` holds the chunk's row of each class not in sample order (``(such classes, samples)``).
    """
    assert layer.output_domain is not None
    try:
        return layer.output_domain.encode(result)
    except DomainError:
        pass
    permuted = iter(range(len(rows)))
    for c, cls in enumerate(packed.classes):
        class_rows = samples if packed.identity[c] else rows[next(permuted)]
        by_row = np.argsort(class_rows)
        block, class_rows = result[:, owner == c][by_row], class_rows[by_row]
        if _encodes(layer.output_domain, block):
            continue
        low, high = 0, len(block)  # the shortest failing prefix ends at the class's lowest bad row
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _encodes(layer.output_domain, block[:middle]) else (low, middle)
        _encode(block[low:high], layer, cls, int(class_rows[low]))
    raise AssertionError("Domain.encode failed on a chunk but on none of its classes")


def _encodes(domain: Domain, values: np.ndarray) -> bool:
    try:
        domain.encode(values)
    except DomainError:
        return False
    return True


def _encode(result: np.ndarray, layer: LayerPlan, cls: _Class, first_row: int) -> np.ndarray:
    assert layer.output_domain is not None
    try:
        return layer.output_domain.encode(result)
    except DomainError as exc:
        msg = (
            f"{layer.name}: unit(s) {[u.index for u in cls.units]}, rows from {first_row}: {exc}; the module must "
            "end in that quantizer, or declare the right output_domain= in decompose()"
        )
        raise EnumerationError(msg) from None
