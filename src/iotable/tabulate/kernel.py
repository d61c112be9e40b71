"""Fixed-point codes of affine tails: a block of columns' rounding arguments as int32 outer sums, the rows
near a boundary found from their fraction bits and settled in float64 with their own error bounds, and the
rows still within them computed by their layers' operations (see :mod:`iotable.tabulate.fastpath`)."""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from .affine import _AffineTail
from .columns import _U32, _Group, _outer_sums, _row_values, _Segment

# Elements of one fixed-point chunk (two int32 buffers): large enough that the few microseconds each torch call
# costs stay small next to its work (measured: 2**19-2**20 best, 2**14 four times slower), within L3 cache.
_CHUNK = 2**19
# Fraction bits of the fixed-point rounding argument; fewer when the argument's range needs them.
_MAX_FRACTION_BITS = 16
_MIN_FRACTION_BITS = 8


# Blocks of at most this many codes are computed directly in float64 (every row settled with its own bounds):
# fewer operations than the fixed-point kernel, whose per-call costs dominate small blocks.
_DIRECT_ENTRIES = 2**16


def _direct_codes(batch: _Batch, out: np.ndarray, *, memory_budget: int) -> None:
    """Codes ``(K, rows)`` of a small batch: every row decided as a flagged one (:func:`_decide`)."""
    terms = batch.terms()
    width = batch.width
    # z and sum |w x| of every row in one outer sum: the first K rows hold z, the last K the sizes.
    both = _outer_sums([np.concatenate([t, np.abs(t)]) for t in terms], 2 * width)
    both[:width] += batch.bias[:, None]
    both[width:] += np.abs(batch.bias)[:, None]
    _decide(batch, out, both[:width], both[width:], (slice(None), None), memory_budget=memory_budget)


def _decide(
    batch: _Batch,
    out: np.ndarray,
    z: np.ndarray,
    size: np.ndarray,
    columns: Any,
    entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    *,
    memory_budget: int,
) -> None:
    """Codes of entries whose pre-activation is ``z`` (float64) and ``sum |w x|`` (with ``|b|``) is ``size``:
    all of ``out`` (``columns`` indexes the batch's per-column arrays so that they broadcast against ``z``), or
    the ``entries`` (positions in ``out`` and table rows; ``columns`` their batch columns).

    Every float32 evaluation of the layer lies within ``error = factor (f + 2) u size`` of ``z``; the tail at
    the row's own size adds ``error0 + error1 (|z| + error)`` (code units). The entries within that margin
    of a boundary lie within float rounding of it and are computed by their layers' operations
    (:meth:`_Batch.tie_codes`).
    """
    tail = batch.tail
    gain = tail.gain[columns]
    phi = gain * z
    phi += tail.offset[columns]
    nearest = np.round(phi)
    # The margin |gain| error + error0 + error1 (|z| + error) + 1e-9 (1 + |phi|), with the per-column
    # factors gathered: (|gain| + error1) f_u size + error1 |z| + error0 + 1e-9 (1 + |phi|).
    unit = batch.factor[columns] * ((len(batch.group.domains) + 2) * _U32)
    slope = (np.abs(gain) + tail.error1[columns]) * unit
    gap = np.abs(phi - nearest)
    gap -= slope * size
    gap -= tail.error1[columns] * np.abs(z)
    gap -= 1e-9 * np.abs(phi)
    gap -= tail.error0[columns] + 1e-9
    near = gap <= 0
    codes = np.floor(phi)
    np.maximum(codes, tail.low[columns], out=codes)
    np.minimum(codes, tail.high[columns], out=codes)
    if entries is None:
        out[...] = codes
    else:
        out[entries[0], entries[1]] = codes
    if not near.any():
        return
    # Only integers low + 1 .. high are boundaries between codes; the clip settles the others.
    found = np.nonzero(near & (nearest > tail.low[columns]) & (nearest <= tail.high[columns]))
    if entries is None:
        at, which, rows = found, found[0], found[1]
    else:
        at, which, rows = (entries[0][found], entries[1][found]), columns[found], entries[2][found]
    if len(which):
        out[at] = batch.tie_codes(which, rows, memory_budget=memory_budget)


_SCRATCH = threading.local()


def _scratch(count: int, size: int) -> list[torch.Tensor]:
    """``count`` int32 work buffers of ``size`` elements, kept per thread from one call to the next.

    A fresh buffer of a few MiB costs a page fault per 4 KiB on its first pass; reusing the same memory
    keeps that cost out of every chunk of every layer.
    """
    held = getattr(_SCRATCH, "buffers", [])
    if len(held) < count or held[0].numel() < size:
        held = [torch.empty(size, dtype=torch.int32) for _ in range(count)]
        _SCRATCH.buffers = held
    return [b[:size] for b in held[:count]]


@dataclass(frozen=True)
class _Batch:
    """Columns of one or more segments (of parts of any layers) whose units read inputs of the same domains:
    one combination set, per-column weights, biases, error factors and tails."""

    segments: tuple[_Segment, ...]
    starts: np.ndarray  # (segments + 1,) first column of each segment in the batch, then the width
    weight: np.ndarray  # (K, f) float64
    bias: np.ndarray  # (K,) float64
    factor: np.ndarray  # (K,) the layers' float32 error factors
    tail: _AffineTail
    group: _Group  # the first segment's group: the domains every segment shares

    @classmethod
    def of(cls, segments: list[_Segment]) -> _Batch:
        widths = [c1 - c0 for _, c0, c1 in segments]
        tails = [p.affine if c1 - c0 == p.width else p.affine[c0:c1] for p, c0, c1 in segments]
        if len(segments) == 1:
            part, c0, c1 = segments[0]
            weight, bias = part.weight[c0:c1], part.bias[c0:c1]
            factor = np.full(c1 - c0, part.factor)
        else:
            weight = np.concatenate([p.weight[c0:c1] for p, c0, c1 in segments])
            bias = np.concatenate([p.bias[c0:c1] for p, c0, c1 in segments])
            factor = np.repeat([p.factor for p, _, _ in segments], widths)
        tail = _AffineTail.concat(tails)
        starts = np.asarray([0, *itertools.accumulate(widths)], dtype=np.int64)
        return cls(tuple(segments), starts, weight, bias, factor, tail, segments[0][0].group)

    @property
    def width(self) -> int:
        return int(self.starts[-1])

    @property
    def rows(self) -> int:
        return self.group.rows

    def error(self, magnitude: np.ndarray, columns: Any = slice(None)) -> np.ndarray:
        """Bound of the distance between any float32 evaluation of a sum and the exact sum.

        ``f`` products and a bias, added in any order (with or without fused multiply-adds), are within
        ``gamma(f + 1) * magnitude`` of the exact sum, ``gamma(n) = n u / (1 - n u) < (f + 2) u``.
        """
        return self.factor[columns] * (len(self.group.domains) + 2) * _U32 * magnitude

    def terms(self, gain: np.ndarray | None = None) -> list[np.ndarray]:
        """Per input ``j``, ``(K, n_j)``: weight times each value (times ``gain`` per column)."""
        w = self.weight if gain is None else self.weight * gain[:, None]
        matrix = self.group.value_matrix
        if matrix is not None:  # one product for all inputs, then a view per input
            return list((w[:, :, None] * matrix[None, :, :]).transpose(1, 0, 2))
        return [w[:, j, None] * v[None, :] for j, v in enumerate(self.group.values)]

    def reach(self) -> np.ndarray:
        """``sum_j max |w_j x_j|`` per column, ``|w_j|`` times input ``j``'s largest value."""
        return (np.abs(self.weight) * self.group.peak).sum(axis=1)

    def tie_codes(self, which: np.ndarray, rows: np.ndarray, *, memory_budget: int) -> np.ndarray:
        """Codes of single entries (batch column ``which``, table row ``rows``) by their layers' operations
        (:meth:`FastPath.tie_codes`), segment by segment; each layer counts its rows in ``near``."""
        codes = np.empty(len(rows), dtype=np.int64)
        owner = np.searchsorted(self.starts, which, side="right") - 1 if len(self.segments) > 1 else None
        for s in range(len(self.segments)) if owner is not None else (0,):
            part, c0, _ = self.segments[s]
            mine = np.flatnonzero(owner == s) if owner is not None else slice(None)
            local = which[mine] - self.starts[s] + c0
            if not len(local):
                continue
            fast, layer = part.job.fast, part.job.layer
            codes[mine] = fast.tie_codes(layer, part.group, local, rows[mine], memory_budget=memory_budget)
            part.job.near += len(local)
        return codes


@dataclass(frozen=True)
class _AffineKernel:
    """Fixed-point codes of one batch of columns: ``phi`` as int32 outer sums, ``F`` fraction bits.

    Rows split into a prefix (leading inputs) and a suffix (trailing inputs, a contiguous block of a few
    hundred rows): ``phi_fx[k, p * n_s + s] = prefix[k, p] + suffix[k, s]``.
    """

    batch: _Batch
    margin: np.ndarray  # (K,) code units: float32 error of the layer and the tail
    bits: int  # F
    slack: np.ndarray  # (K,) fixed-point units added to phi: a row is unproved when (phi_fx & mask) < 2 * slack
    prefix: torch.Tensor  # (K, n_p) int32, constant and slack included
    suffix: torch.Tensor  # (K, n_s) int32

    @classmethod
    def build(cls, batch: _Batch) -> _AffineKernel | None:
        """The kernel for ``batch``, or ``None`` when the margins do not fit in the fixed point."""
        tail = batch.tail
        spread = batch.reach()
        magnitude = np.abs(batch.bias) + spread  # bounds |z| and scales the float32 error
        fan_in = len(batch.group.domains)
        error = batch.error(magnitude)
        constant = tail.gain * batch.bias + tail.offset
        margin = np.abs(tail.gain) * error + tail.error_at(magnitude + error)
        reach = np.abs(constant) + np.abs(tail.gain) * spread
        bits = min(_MAX_FRACTION_BITS, 29 - math.ceil(math.log2(float(reach.max()) + 2)))
        if bits < _MIN_FRACTION_BITS:
            return None
        # Fixed point: each of f terms and the constant rounds by half a unit; two units for float64 sums.
        slack = np.ceil(margin * 2**bits).astype(np.int64) + (fan_in + 2) // 2 + 2
        if (4 * slack >= 2**bits).any():
            return None
        fixed = [np.rint(t * 2.0**bits).astype(np.int64) for t in batch.terms(tail.gain)]
        base = np.rint(constant * 2.0**bits).astype(np.int64) + slack
        split = batch.group.split
        prefix = (_outer_sums(fixed[:split], len(base), np.int64) + base[:, None]).astype(np.int32)
        suffix = _outer_sums(fixed[split:], len(base), np.int64).astype(np.int32)
        return cls(batch, margin, bits, slack, torch.from_numpy(prefix), torch.from_numpy(suffix))

    def codes(
        self, columns: tuple[int, int], prefixes: tuple[int, int], out: np.ndarray, *, memory_budget: int
    ) -> None:
        """Write the codes of columns ``k0:k1`` over the rows of prefixes ``p0:p1`` into ``out``
        ``(k1 - k0, (p1 - p0) * n_s)`` (uint8, or int32 for wider codes).

        Each chunk is five passes over int32 (sum, fraction bits, shift, clip, narrowing copy) and a minimum
        of the fraction bits per run of ``block`` rows; runs whose minimum is below the margin are searched
        once the codes are written, in pieces within a quarter of ``memory_budget``, and settled.
        """
        (k0, k1), (q0, q1) = columns, prefixes
        n_s = self.suffix.shape[1]
        block = 64 if n_s % 64 == 0 else n_s
        out3 = torch.from_numpy(out).view(k1 - k0, q1 - q0, n_s)
        minima = torch.empty((k1 - k0, q1 - q0, n_s // block), dtype=torch.int32)
        tail = self.batch.tail
        low, high = tail.low[k0:k1], tail.high[k0:k1]
        uniform = bool((low == low[0]).all() and (high == high[0]).all())
        lo_t = torch.from_numpy(low.astype(np.int32)).view(-1, 1, 1)
        hi_t = torch.from_numpy(high.astype(np.int32)).view(-1, 1, 1)
        mask = (1 << self.bits) - 1
        per_k = max(1, min(_CHUNK, memory_budget // 64) // n_s)  # two int32 buffers: an eighth of the budget
        k_step = max(1, min(k1 - k0, per_k))
        p_step = max(1, min(q1 - q0, per_k // k_step))
        work, bits_buf = _scratch(2, k_step * p_step * n_s)
        for a0 in range(k0, k1, k_step):
            a1 = min(k1, a0 + k_step)
            for p0 in range(q0, q1, p_step):
                p1 = min(q1, p0 + p_step)
                shape = (a1 - a0, p1 - p0, n_s)
                size = math.prod(shape)
                phi = work[:size].view(shape)
                torch.add(self.prefix[a0:a1, p0:p1, None], self.suffix[a0:a1, None, :], out=phi)
                frac = torch.bitwise_and(phi, mask, out=bits_buf[:size].view(shape))
                torch.bitwise_right_shift(phi, self.bits, out=phi)
                if uniform:
                    phi.clamp_(int(low[0]), int(high[0]))
                else:
                    torch.clamp(phi, lo_t[a0 - k0 : a1 - k0], hi_t[a0 - k0 : a1 - k0], out=phi)
                out3[a0 - k0 : a1 - k0, p0 - q0 : p1 - q0].copy_(phi)
                runs = frac.view(a1 - a0, p1 - p0, -1, block)
                torch.amin(runs, dim=3, out=minima[a0 - k0 : a1 - k0, p0 - q0 : p1 - q0])
        limit = torch.from_numpy((2 * self.slack[k0:k1]).astype(np.int32))
        flagged = minima < limit.view(-1, 1, 1)
        # The flagged runs again, as int32 sums: the entries whose fraction bits lie within the margin. Their
        # number is bounded by the memory for their indices and for settling them (per entry).
        # Per flagged entry: its sums and bits (int32, a mask), its indices and its settling (a few float64s).
        runs_step = max(1, (memory_budget // 4) // (block * 200))
        suffix = self.suffix.view(self.suffix.shape[0], -1, block)
        counts = np.cumsum(flagged.view(k1 - k0, -1).sum(dim=1).numpy())
        if not counts[-1]:
            return
        # Columns in pieces of about ``runs_step`` flagged runs each.
        cuts = np.searchsorted(counts, np.arange(runs_step, int(counts[-1]), runs_step), side="left")
        cuts = np.unique(np.concatenate([[0], cuts + 1, [k1 - k0]]).clip(0, k1 - k0))
        for c0, c1 in itertools.pairwise(cuts):
            k, p, b = torch.nonzero(flagged[c0:c1], as_tuple=True)
            k += int(c0)
            for r0 in range(0, len(k), runs_step):
                kk, pp, bb = k[r0 : r0 + runs_step] + k0, p[r0 : r0 + runs_step] + q0, b[r0 : r0 + runs_step]
                phi = self.prefix[kk, pp, None] + suffix[kk, bb]
                entry_limit = limit[kk - k0][:, None]
                run, offset = torch.nonzero(torch.bitwise_and(phi, mask) < entry_limit, as_tuple=True)
                which, prefix = kk[run].numpy(), pp[run].numpy()
                suffix_rows = (bb[run] * block + offset).numpy()
                self._settle(out, which, prefix, suffix_rows, origin=(k0, q0 * n_s), memory_budget=memory_budget)

    @cached_property
    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Float64 outer sums ``(K, n_p)``, ``(K, n_s)`` of ``z`` (the bias with the prefix's terms, the
        suffix's terms) and of ``sum |w x|`` (with ``|bias|``), made when a first entry needs settling."""
        batch = self.batch
        split = batch.group.split
        terms = batch.terms()
        sizes = [np.abs(t) for t in terms]
        width = batch.width
        return (
            _outer_sums(terms[:split], width) + batch.bias[:, None],
            _outer_sums(terms[split:], width),
            _outer_sums(sizes[:split], width) + np.abs(batch.bias)[:, None],
            _outer_sums(sizes[split:], width),
        )

    def _settle(
        self,
        out: np.ndarray,
        which: np.ndarray,
        prefix: np.ndarray,
        suffix: np.ndarray,
        *,
        origin: tuple[int, int],
        memory_budget: int,
    ) -> None:
        """Decide the flagged entries (column ``which``, table row ``prefix * n_s + suffix``) of ``out``, whose
        first entry is ``origin``.

        In float64 with each row's own error bounds (the layer's sum and the tail at that row's size); the
        rows still within their margin lie within float rounding of a boundary and are computed by their
        layers' operations (:meth:`_Batch.tie_codes`).
        """
        batch = self.batch
        n_s = self.suffix.shape[1]
        rows = prefix * n_s + suffix
        if "sums" in self.__dict__ or len(which) * len(batch.weight[0]) > batch.width * (self.prefix.shape[1] + n_s):
            z_prefix, z_suffix, size_prefix, size_suffix = self.sums
            z = z_prefix[which, prefix] + z_suffix[which, suffix]
            size = size_prefix[which, prefix] + size_suffix[which, suffix]
        else:  # a few entries: their terms one input at a time
            values = _row_values(batch.group, rows, dtype=np.float64)
            z, size = batch.bias[which].copy(), np.abs(batch.bias[which])
            for j in range(values.shape[1]):
                term = batch.weight[which, j] * values[:, j]
                z += term
                size += np.abs(term)
        entries = (which - origin[0], rows - origin[1], rows)
        _decide(batch, out, z, size, which, entries, memory_budget=memory_budget)
