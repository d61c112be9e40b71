"""Codes in the runtime: their dtypes, decoding to values, the input encoder and small helpers every kernel
uses (numbers measured for the kernels' choices live here too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..domain import Domain
from ..errors import DomainError, InputError

if TYPE_CHECKING:
    from ..graph.nodes import Node

Kernel = Callable[[list[torch.Tensor]], torch.Tensor]

# Bytes of scratch one call of a spatial table kernel may use (window vectors, addresses, looked-up outputs).
_RUN_BUDGET = 128 * 2**20

# Bytes of intermediates one chunk of samples may use (an estimate from the graph's shapes). Chunks bound
# the memory of a large batch; each one pays a few microseconds of dispatch per node, so they must not be
# small. Measured: 2-4 MiB lose to that overhead on the MLP benchmarks and 8 MiB on the CNN (large samples,
# few per chunk); 128 MiB loses on an MLP batch of 65536 once memory is handed back between runs.
_CHUNK_BUDGET = 16 * 2**20

# A fused table's addresses may form as one dense product over its whole frame up to this many matrix entries
# (1 MiB of float32), for batches of at most _SMALL_BATCH samples at least.
_DENSE_ENTRIES = 2**18
_SMALL_BATCH = 64

# Batches of at most this many samples run non-spatial tables through numpy (see Runtime._schedule): below it,
# the fixed cost of each torch call is most of the work.
_SMALL_RUN = 64
# ... and a spatial table through numpy while its gathered window codes (samples x addresses x inputs) are at
# most this many: beyond, its convolution is faster (measured: the crossover lies near 1e5 on both CNNs).
_SMALL_GATHER = 2**17
# Batches of more than this many input codes in all take the usual kernels whatever their samples: a
# 32x32x3 image gives them enough work per torch call from about 10 samples (measured on both CNNs).
_SMALL_CODES = 2**15

# Float32 holds every integer below 2**24 exactly: the bound for float32 codes and addresses.
FLOAT32_EXACT = 2**24

# Address matrices with at most this fraction of nonzero entries multiply as sparse (COO) matrices.
_SPARSE_DENSITY = 0.25


def channel_values(node: Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(values, offsets)`` to decode a node's per-channel codes: ``values[code + offsets[channel]]``."""
    domains = node.channel_domains()
    if domains is None:
        return None
    if isinstance(node.domain, Domain):
        return torch.tensor(node.domain.values, dtype=torch.float32), torch.zeros(1, dtype=torch.int64)
    sizes = np.asarray([len(d) for d in domains])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    values = np.concatenate([d.values for d in domains])
    return torch.tensor(values, dtype=torch.float32), torch.as_tensor(offsets, dtype=torch.int64)


def decode(codes: torch.Tensor, node: Node, table: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Float32 values of a node's output codes (raw outputs pass through); ``table``: its channel values."""
    table = table if table is not None else channel_values(node)
    if table is None:
        return codes
    values, offsets = table
    if len(offsets) > 1:
        codes = codes.to(torch.int64)  # narrow codes index, never mask (a uint8 index would select by truth)
        shape = [1] * codes.dim()
        axis = codes.dim() - 1 if node.layout is not None and node.layout.channels_last else 1
        shape[axis] = -1
        codes = codes + offsets.reshape(shape)
        return values[codes]
    # One domain: one gather by int32 index (half the bytes of int64; codes of one domain fit).
    index = codes.to(torch.int32 if len(values) < 2**31 else torch.int64).reshape(-1)
    return torch.index_select(values, 0, index).view(codes.shape)


def codes_dtype(low: int, high: int) -> torch.dtype:
    """The smallest integer dtype holding every value from ``low`` to ``high``."""
    for dtype in (torch.uint8, torch.int16, torch.int32):
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return torch.int64


class _Shape:
    """A batch's expected shape, written ``(N, ...)`` when an error message formats it."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __format__(self, spec: str) -> str:
        return f"(N, {', '.join(map(str, self.shape))})"


def _as_tensor(x: Any) -> torch.Tensor:
    """A tensor of ``x`` (a numpy array from the small-batch kernels: the same memory)."""
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


def _torch_inputs(kernel: Kernel) -> Kernel:
    """``kernel`` reading numpy inputs as tensors (small-batch schedules hand numpy arrays between tables)."""
    return lambda xs: kernel([_as_tensor(x) for x in xs])


def identity(xs: list[torch.Tensor]) -> torch.Tensor:
    """A node that passes its one input on (input, output, duplicate)."""
    return xs[0]


class InputEncoder:
    """Validates a batch for a graph's input node and returns its codes.

    Values of evenly spaced domains (every uniform domain) are encoded arithmetically: scaled, shifted and
    rounded to the nearest code, then checked against that code's value with a tolerance a little tighter
    than :meth:`Domain.encode`'s, widened by every rounding error the arithmetic can make. A batch that
    passes gets exactly the codes ``Domain.encode`` gives; any other batch (a value off the domain, or one
    too close to the tolerance to decide in float) is encoded by ``Domain.encode`` itself, which raises the
    library's error for a value outside the domain.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self.domains = node.channel_domains() or ()
        self.channels_last = node.layout is not None and node.layout.channels_last
        self._grid = {dtype: Grid.of(self.domains, dtype) for dtype in (torch.float32, torch.float64)}
        self._radix = len(self.domains[0]) if len(set(self.domains)) == 1 else None
        self._float32_codes = max(len(d) for d in self.domains) <= FLOAT32_EXACT

    def __call__(self, x: Any, *, codes: bool, input_shape: tuple[int, ...], what: str = "net.run") -> torch.Tensor:
        given, x = self._batch(x, input_shape, what)
        if codes:
            if x.is_floating_point() or given == torch.bool:
                msg = f"{what}: codes must be an integer tensor, received dtype {given}; pass codes=False for values"
                raise InputError(msg)
            self._check_codes(x, what)
            return x
        if not x.is_floating_point():
            x = x.to(torch.float64)
        elif x.dtype not in (torch.float32, torch.float64):
            x = x.to(torch.float32)  # half precision widens exactly
        grid = self._grid[x.dtype]
        if grid is not None and x.numel():
            encoded = grid.encode(x, self._channel_axis(x))
            if encoded is not None:
                return encoded.to(torch.float32 if self._float32_codes else torch.int64)
        return self._encode_exactly(x, what)

    @staticmethod
    def _batch(x: Any, input_shape: tuple[int, ...], what: str) -> tuple[torch.dtype, torch.Tensor]:
        """The dtype ``x`` came in and ``x`` as a dense CPU tensor of shape ``(N, *input_shape)`` (integers as
        int64), or the error that says what it should be."""
        batch = _Shape(input_shape)  # formatted only into an error message
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "biuf":
                msg = f"{what}: expected a numeric array of shape {batch}, received dtype {x.dtype}"
                raise InputError(msg)
            x = torch.from_numpy(x.astype(np.int64) if x.dtype.kind in "bu" else x)
        if not isinstance(x, torch.Tensor):
            msg = f"{what}: expected a tensor or array of shape {batch}, received {type(x).__name__}"
            raise InputError(msg)
        if x.is_complex() or x.device.type == "meta" or x.is_quantized:
            msg = f"{what}: expected a real tensor with data, received dtype {x.dtype} on device {x.device.type}"
            raise InputError(msg)
        if x.layout != torch.strided:  # a sparse batch holds the same values as its dense form
            x = x.to_dense()
        x = x.detach().cpu()  # the tables compute no gradient: a batch that requires one is read as its values
        given = x.dtype
        if not x.is_floating_point() and given != torch.int64:
            x = x.to(torch.int64)  # unsigned and narrow integer codes compare and index as int64
        if tuple(x.shape[1:]) != input_shape or x.dim() != len(input_shape) + 1:
            msg = f"{what}: expected a batch of shape {batch}, received {tuple(x.shape)}"
            raise InputError(msg)
        return given, x

    def _channel_axis(self, x: torch.Tensor) -> int:
        return x.dim() - 1 if self.channels_last else 1

    def _check_codes(self, x: torch.Tensor, what: str) -> None:
        if not x.numel():
            return
        if self._radix is not None:
            low, high = torch.aminmax(x)
            if int(low) >= 0 and int(high) < self._radix:
                return
        axis = self._channel_axis(x)
        shape = [-1 if a == axis else 1 for a in range(x.dim())]
        radices = torch.as_tensor([len(d) for d in self.domains]).reshape(shape)
        bad = (x < 0) | (x >= radices)
        if bad.any():
            where = tuple(int(i) for i in torch.nonzero(bad)[0])
            limit = len(self.domains[where[axis]]) - 1
            msg = f"{what}: code {int(x[where])} at index {where} is outside 0..{limit} of the input domain"
            raise InputError(msg)

    def _encode_exactly(self, x: torch.Tensor, what: str) -> torch.Tensor:
        """Codes by :meth:`Domain.encode` (searching the domain's values), raising its error for a bad value."""
        x = x.to(torch.float64)
        if isinstance(self.node.domain, Domain):
            try:
                return torch.as_tensor(self.node.domain.encode(x).astype(np.int64))
            except DomainError as exc:
                msg = f"{what}: input values must belong to the input domain: {exc}"
                raise DomainError(msg) from None
        axis = self._channel_axis(x)
        out = torch.empty(x.shape, dtype=torch.int64)
        for c, d in enumerate(self.domains):
            index = (slice(None),) * axis + (c,)
            try:
                out[index] = torch.as_tensor(d.encode(x[index]).astype(np.int64))
            except DomainError as exc:
                msg = f"{what}: input channel {c} must belong to its domain: {exc}"
                raise DomainError(msg) from None
        return out


@dataclass(frozen=True)
class Grid:
    """Evenly spaced domains, one per channel: code ``q`` has about the value ``first + q * step``.

    ``first``, ``scale`` (``1 / step``), ``top`` (the last code) and ``accept`` (how far, in codes, a value
    may lie from its code's grid value and still be within the domain's tolerance of its code's value)
    are floats for one domain, else per-channel tensors.
    """

    first: Any
    scale: Any
    top: Any
    accept: Any

    @classmethod
    def of(cls, domains: tuple[Domain, ...], dtype: torch.dtype) -> Grid | None:
        """The grid of ``domains`` computed in ``dtype``, or ``None`` where some domain is not on one."""
        if not domains:
            return None
        eps = float(torch.finfo(dtype).eps)
        params = []
        for d in dict.fromkeys(domains):  # equal domains once, in order
            values = d.values
            n = len(values)
            step = float(values[-1] - values[0]) / (n - 1) if n > 1 else 1.0
            off_grid = float(np.max(np.abs(values - (values[0] + step * np.arange(n)))))
            tolerance = d._tolerance  # Domain.encode's own acceptance distance, the one to reproduce
            # Every rounding error of the arithmetic below, in value units: a few ulps of the largest value
            # involved (an accepted input lies within the tolerance of a domain value).
            largest = float(np.max(np.abs(values))) + tolerance + abs(step)
            margin = 8 * eps * largest
            accept = (tolerance - off_grid - margin) / step
            if accept * step < tolerance / 2:  # too little room to decide in this dtype
                return None
            params.append((d, float(values[0]), 1.0 / step, float(n - 1), accept))
        if len(params) == 1:
            _, first, scale, top, accept = params[0]
            return cls(first, scale, top, accept)
        by_domain = {p[0]: p[1:] for p in params}
        table = np.asarray([by_domain[d] for d in domains], dtype=np.float64)
        return cls(*(torch.as_tensor(table[:, i], dtype=dtype) for i in range(4)))

    def encode(self, x: torch.Tensor, channel_axis: int) -> torch.Tensor | None:
        """Codes of values ``x`` as floats of its dtype, or ``None`` where a value is not shown to be in its domain."""
        first, scale, top, accept = self.first, self.scale, self.top, self.accept
        if isinstance(first, torch.Tensor):
            shape = [-1 if a == channel_axis else 1 for a in range(x.dim())]
            first, scale, top, accept = (t.reshape(shape) for t in (first, scale, top, accept))
            q = torch.sub(x, first).mul_(scale)
            codes = torch.minimum(q.clamp(min=0), top).round_()
        else:
            q = torch.sub(x, first).mul_(scale)
            codes = q.clamp(0, top).round_()
        # The largest distance from a code decides (one pass for both extremes is cheaper than a boolean
        # mask); float subtraction keeps its sign exactly, and NaN (from a NaN or infinite input) fails the
        # comparison, so such a batch falls to the exact path, which names the value.
        q.sub_(codes)
        if isinstance(accept, torch.Tensor):  # per-channel tolerances: the excess over each channel's
            return codes if float(q.abs_().sub_(accept).max()) <= 0 else None
        low, high = torch.aminmax(q)
        return codes if float(high) <= accept and float(low) >= -accept else None
