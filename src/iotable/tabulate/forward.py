"""Running the black box: inputs built straight from the domains' values in a reused buffer of frame samples,
chunks sized for the cache within the memory budget, outputs encoded into codes (see
:mod:`iotable.tabulate.enumerate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.modules import run_module
from .._util.order import frame_channels
from ..domain import Domain
from ..errors import DomainError, EnumerationError
from ..front.layerplan import LayerPlan
from ..table import place_values
from .cache import FileSink, MemorySink
from .passes import _Class, _Packed

# Bytes per frame element per sample held at once: codes (int64), values, outputs and the module's own
# intermediate activations (a small multiple of the input).
_BYTES_PER_ELEMENT = 8 + 4 * 6

# A forward pass is several times faster per sample while its inputs, outputs and temporaries stay in the
# core's cache (measured on a 100-wide masked block: 0.4-0.6 us/sample at 1-8k samples, 1 us at 32k, 3 us
# at 131k), so chunks aim at this many bytes of inputs and outputs, never fewer than _MIN_CHUNK samples.
_CACHE_BYTES = 2**20
_MIN_CHUNK = 64


# Rows of the table of trailing-digit values in row-order passes (see _Inputs).
_LOW_ROWS = 4096


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


def _chunk_samples(layer: LayerPlan, memory_budget: int, dtype: torch.dtype) -> int:
    """Frame samples per forward pass: cache-sized, and always within the memory budget."""
    elements = math.prod(layer.frame_in) + math.prod(layer.frame_out)
    budget = max(1, memory_budget // (elements * _BYTES_PER_ELEMENT))
    cached = max(_MIN_CHUNK, _CACHE_BYTES // (elements * torch.empty(0, dtype=dtype).element_size()))
    return min(budget, cached)


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
