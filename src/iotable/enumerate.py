"""The black-box enumerator: every combination of input codes of every unit, through the unmodified module.

How rows are batched (no Python loop over rows):

- Units that read the same input elements form a *class*: one enumeration fills all their tables (the
  output channels of a convolution group share their inputs).
- Classes whose inputs are disjoint are *coloured* together: their inputs are set independently in the same
  forward pass (the replicate-across-groups trick: one forward of a grouped convolution fills every group).
- Every slot of the enumeration frame (a non-overlapping window position, see :mod:`iotable.plan`) holds a
  different row, so sample ``b`` of a forward pass computes rows ``b * slots + i`` of each class.
- Codes come from index arithmetic on row numbers (``digit_j = row // weight_j % n``), chunked so that one
  forward pass stays under a memory budget.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ._fastpath import FastPath, recognize
from ._progress import progress_bar
from ._store import FileSink, MemorySink, TableCache, layer_fingerprint, temporary_sink, unit_key
from .errors import DomainError, EnumerationError
from .plan import LayerPlan, Unit, module_dtype, run_module
from .table import IOTable, TableList

__all__ = ["DEFAULT_MEMORY_BUDGET", "enumerate_tables"]

#: Default memory budget of one forward pass, in bytes (256 MiB).
DEFAULT_MEMORY_BUDGET = 256 * 2**20

# Bytes per frame element per sample held at once: codes (int64), values, outputs and the module's own
# intermediate activations (a small multiple of the input).
_BYTES_PER_ELEMENT = 8 + 4 * 6


@dataclass(frozen=True)
class _Class:
    units: tuple[Unit, ...]
    input_index: np.ndarray  # (slots, fan_in) flat frame indices
    output_index: np.ndarray  # (slots, sum of fan_outs)
    rows: int

    @property
    def channels(self) -> frozenset[int]:
        return frozenset(self.units[0].in_channels)


def _mixed_radix_weights(radices: torch.Tensor) -> torch.Tensor:
    """Place value of each digit, the first digit most significant."""
    weights = torch.ones_like(radices)
    for j in range(len(radices) - 2, -1, -1):
        weights[j] = weights[j + 1] * radices[j + 1]
    return weights


@dataclass(frozen=True)
class FrameValues:
    """Per-element code-to-value lookup of a plan's enumeration frame (channels may differ in domain)."""

    values: torch.Tensor  # every channel's values, concatenated
    offsets: torch.Tensor  # (frame elements,) start of each element's channel in ``values``
    radices: torch.Tensor  # (frame elements,) number of codes of each element
    fill: torch.Tensor  # (1, frame elements) code of real 0 (or 0) per element
    shape: tuple[int, ...]

    @classmethod
    def build(cls, layer: LayerPlan, *, dtype: torch.dtype, device: torch.device) -> FrameValues:
        sizes = np.asarray([len(d) for d in layer.input_domains], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        n_elements = math.prod(layer.frame_in)
        flat = np.arange(n_elements)
        channel = flat % layer.in_channels if layer.layout.channels_last else flat // (n_elements // layer.in_channels)
        values = np.concatenate([d.values for d in layer.input_domains])
        return cls(
            values=torch.tensor(values, dtype=dtype, device=device),
            offsets=torch.as_tensor(starts[channel]),
            radices=torch.as_tensor(sizes[channel]),
            fill=torch.as_tensor(np.asarray(layer.fill_codes, dtype=np.int64)[channel])[None, :],
            shape=layer.frame_in,
        )

    def values_of(self, codes: torch.Tensor) -> torch.Tensor:
        """Values of a batch of per-element codes ``(batch, frame elements)``, shaped as frame samples."""
        index = (codes + self.offsets).to(self.values.device)
        return self.values[index].reshape(codes.shape[0], *self.shape)


def _classes(layer: LayerPlan) -> list[_Class]:
    by_inputs: dict[tuple[int, ...], list[Unit]] = {}
    for unit in layer.units:
        by_inputs.setdefault(unit.in_channels, []).append(unit)
    return [
        _Class(
            units=tuple(units),
            input_index=layer.input_index(units[0]),
            output_index=np.concatenate([layer.output_index(u) for u in units], axis=1),
            rows=units[0].rows,
        )
        for units in by_inputs.values()
    ]


def _colours(classes: list[_Class]) -> list[list[_Class]]:
    """Greedy colouring: classes of equal row count and pairwise disjoint input channels share a forward."""
    colours: list[tuple[set[int], int, list[_Class]]] = []
    for cls in sorted(classes, key=lambda c: -c.rows):
        for used, rows, members in colours:
            if rows == cls.rows and used.isdisjoint(cls.channels):
                used |= cls.channels
                members.append(cls)
                break
        else:
            colours.append((set(cls.channels), cls.rows, [cls]))
    return [members for _, _, members in colours]


def enumerate_tables(
    module: nn.Module,
    layer: LayerPlan,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
) -> list[IOTable]:
    """Build every unit's dense table of ``layer`` by running ``module`` on all input combinations.

    The module runs in ``eval()`` and ``torch.inference_mode()``; its training flags are restored. A table
    larger than ``memory_budget`` is written chunk by chunk to a file and memory-mapped, so peak memory
    follows the budget, not the table size.

    Args:
        module: the module ``layer`` was planned for (see :func:`iotable.plan`).
        layer: the resolved plan.
        memory_budget: bytes one forward pass (and one in-memory table) may hold; larger work is chunked.
        progress: show a progress bar (``None``: only on a terminal for long enumerations).
        cache_dir: a directory of finished tables: each table is written there as soon as it is done and
            loaded instead of recomputed on a later call (see :mod:`iotable._store` for the key).
        fast_path: use the structured path for sparse linear layers when it applies (it gives the tables of
            the black-box path; see :mod:`iotable._fastpath`).

    Returns:
        One :class:`IOTable` per unit, in unit order.
    """
    return _enumerate(
        module, layer, memory_budget=memory_budget, progress=progress, cache_dir=cache_dir, fast_path=fast_path
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
    progress: bool | None,
    cache_dir: str | os.PathLike[str] | None,
    fast_path: bool = True,
    fast: FastPath | None = None,
) -> Enumerated:
    """:func:`enumerate_tables`, also saying which units came from the cache and which path ran.

    ``fast``: the fast path already recognized for this layer (see :func:`iotable._fastpath.recognize`).
    """
    cache = TableCache(cache_dir) if cache_dir is not None else None
    out_domain = layer.output_domain
    if out_domain is not None:
        dtype, device, out_dtype = torch.float32, torch.device("cpu"), out_domain.code_dtype
    else:  # raw outputs keep the module's own float type
        dtype, device = module_dtype(module)
        out_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    outputs: dict[int, np.ndarray] = {}
    keys: dict[int, str] = {}
    if cache is not None:
        fingerprint = layer_fingerprint(module, layer)
        for unit in layer.units:
            keys[unit.index] = unit_key(fingerprint, layer, unit)
            found = cache.load(keys[unit.index], unit.rows, unit.fan_out, out_dtype)
            if found is not None:
                outputs[unit.index] = found

    def sink(unit: Unit) -> MemorySink | FileSink:
        if cache is not None:
            return cache.sink(keys[unit.index], unit.rows, unit.fan_out, out_dtype)
        if unit.rows * unit.fan_out * out_dtype.itemsize > memory_budget:
            return temporary_sink(unit.rows, unit.fan_out, out_dtype)
        return MemorySink(unit.rows, unit.fan_out, out_dtype)

    cached = tuple(sorted(outputs))
    pending = [u for u in layer.units if u.index not in outputs]
    if fast is None and fast_path and pending:
        fast = recognize(module, layer)
    method, near_ties = ("black box" if pending else "cache"), 0
    todo: list[_Class] = []
    if fast is not None and pending:
        method = fast.method
        fast_outputs, near_ties = fast.tables(layer, pending, memory_budget=memory_budget, sink=sink)
        for index, out in fast_outputs.items():
            if cache is not None and isinstance(out, tuple):  # streamed units are in the cache already
                block, first, width = out
                s = sink(layer.units[index])
                s.write(0, block[first : first + width].T)
                out = s.finish()
            outputs[index] = out
        return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method=method, near_ties=near_ties)
    if pending:  # classes index the frame, which only the black box needs
        todo = [c for c in _classes(layer) if not all(u.index in outputs for u in c.units)]
    dtype, device = module_dtype(module)
    colours = _colours(todo)

    frame = FrameValues.build(layer, dtype=dtype, device=device)
    n_slots = len(layer.slots)
    frame_elements = math.prod(layer.frame_in) + math.prod(layer.frame_out)
    chunk = max(1, memory_budget // (frame_elements * _BYTES_PER_ELEMENT))
    samples = [-(-members[0].rows // n_slots) for members in colours]

    with progress_bar(total=sum(samples), desc=layer.name, enabled=progress, unit="sample") as bar:
        for members, total in zip(colours, samples):
            sinks = {u.index: sink(u) for c in members for u in c.units}
            try:
                _fill(module, layer, frame, members, sinks, total=total, chunk=chunk, device=device, bar=bar)
            except BaseException:
                for s in sinks.values():
                    if isinstance(s, FileSink):
                        s.abandon()
                raise
            for index, s in sinks.items():  # the colour is done: its tables are final (and cached)
                outputs[index] = s.finish()

    return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method=method, near_ties=near_ties)


def _as_tables(layer: LayerPlan, outputs: dict[int, Any]) -> TableList:
    """One table per unit, in unit order, each made on first access from its unit's outputs.

    An output is an array ``(rows, fan_out)`` or, from the fast path, ``(codes, first column, fan_out)``
    of a ``(columns, rows)`` block of codes.
    """
    units = layer.units

    def make(i: int) -> IOTable:
        unit = units[i]
        out = outputs[unit.index]
        if isinstance(out, tuple):
            block, first, width = out
            out = block[first : first + width].T
        return IOTable._trusted(
            out,
            input_domains=layer.unit_domains(unit),
            output_domain=layer.output_domain,
            layer=layer.name,
            unit=unit.index,
        )

    return TableList(len(units), make)


def _fill(
    module: nn.Module,
    layer: LayerPlan,
    frame: FrameValues,
    members: list[_Class],
    sinks: dict[int, MemorySink | FileSink],
    *,
    total: int,
    chunk: int,
    device: torch.device,
    bar: Any,
) -> None:
    """Run every chunk of one colour's samples and send each unit's rows to its sink, in row order."""
    n_slots = len(layer.slots)
    rows_total = members[0].rows
    radices = [torch.as_tensor([len(d) for d in layer.unit_domains(c.units[0])]) for c in members]
    weights = [_mixed_radix_weights(r) for r in radices]
    in_index = [torch.as_tensor(c.input_index.reshape(-1)) for c in members]
    out_index = [torch.as_tensor(c.output_index.reshape(-1)).to(device) for c in members]
    slot_offsets = torch.arange(n_slots, dtype=torch.int64)
    for b0 in range(0, total, chunk):
        b1 = min(total, b0 + chunk)
        batch = b1 - b0
        rows = torch.arange(b0, b1, dtype=torch.int64)[:, None] * n_slots + slot_offsets[None, :]
        rows = rows.clamp_(max=rows_total - 1)
        codes = frame.fill.repeat(batch, 1)
        for index, radix, weight in zip(in_index, radices, weights):
            digits = (rows[..., None] // weight) % radix  # (batch, slots, fan_in): lexicographic order
            codes[:, index] = digits.reshape(batch, -1)
        out = run_module(module, frame.values_of(codes), layer.name).reshape(batch, -1)
        r0, r1 = b0 * n_slots, min(b1 * n_slots, rows_total)
        for cls, index in zip(members, out_index):
            result = _encode(out[:, index].reshape(batch * n_slots, -1)[: r1 - r0], layer, cls, r0)
            column = 0
            for unit in cls.units:
                sinks[unit.index].write(r0, result[:, column : column + unit.fan_out])
                column += unit.fan_out
        bar.update(batch)


def _encode(result: torch.Tensor, layer: LayerPlan, cls: _Class, first_row: int) -> np.ndarray:
    array = result.detach().cpu().numpy()
    if layer.output_domain is None:
        return array
    try:
        return layer.output_domain.encode(array)
    except DomainError as exc:
        msg = (
            f"{layer.name}: unit(s) {[u.index for u in cls.units]}, rows from {first_row}: {exc}; the module must "
            "end in that quantizer, or declare the right output_domain= in decompose()"
        )
        raise EnumerationError(msg) from None
