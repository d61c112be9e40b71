"""A table layer compiled for lookups (:class:`TableKernel`): address matrices and one flat array of all
its tables, run as gathers, products or convolutions."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..domain import Domain
from ..errors import MissingRowError
from ..graph.nodes import ElementOrder, Node, TableMeta, WindowMeta
from .addressing import _address_matrix, _conv_groups, _vector_at
from .codes import (
    _DENSE_ENTRIES,
    _RUN_BUDGET,
    _SMALL_BATCH,
    _SMALL_GATHER,
    _SPARSE_DENSITY,
    FLOAT32_EXACT,
    _torch_inputs,
    codes_dtype,
)


class TableKernel:
    """One table layer compiled for lookups: address matrices and one flat array of all its tables.

    Partial tables (don't-care rows) are stored densely with a *care* mask: a lookup that hits a row a
    table lacks returns the table's declared don't-care value, or raises :class:`MissingRowError` naming
    the node, the unit and the input codes.

    Calling the kernel evaluates the graph's layout (``(N, *shape)``, spatial layers); :meth:`columns`
    evaluates feature-major ``(features, N)`` tensors (non-spatial layers). :meth:`vectors` and
    :meth:`addresses` give the per-unit addresses a batch reaches, for observation.
    """

    def __init__(self, node: Node, layer: Any, producer: Node) -> None:
        meta = node.meta
        assert isinstance(meta, TableMeta)  # a checked graph
        units, tables = meta.units, layer.tables  # the node's own record: the layer's plan is history
        self.node, self.units = node, units
        self.spatial = producer.kind.windowed
        self.channels_last = node.layout is not None and node.layout.channels_last
        index_map = np.asarray(meta.index_map, dtype=np.int64)
        self.fan_out = fan_out = max(t.fan_out for t in tables)
        offsets, mapped = self._store_tables(tables, raw=node.domain is None)
        identity = len(mapped) == len(units) * fan_out and (mapped == np.arange(len(mapped))).all()
        self.sources = None if identity else torch.as_tensor(mapped)
        self.index = torch.as_tensor(np.where(index_map < 0, 0, index_map))
        self.offsets = torch.as_tensor(offsets)
        # Addresses as one matrix product: column u holds unit u's place values at the elements it reads.
        # Every partial sum is a non-negative integer no larger than the layer's last row, so floats form
        # it exactly while the layer has fewer than 2**24 rows (float32), else in float64 (below 2**53).
        width = int(producer.shape[-1] if self.spatial else math.prod(producer.shape))
        dtype = np.float32 if self.total <= FLOAT32_EXACT else np.float64
        matrix = _address_matrix(tables, index_map, width, dtype)
        self.matrix = torch.as_tensor(matrix)
        self._bias = torch.as_tensor(offsets.astype(dtype))
        # Lookup indices into the column-after-column array: int32 where every index fits.
        self._index_dtype = torch.int32 if fan_out * self.total < 2**31 else torch.int64
        self._column_base = torch.arange(fan_out, dtype=self._index_dtype).reshape(1, -1, 1) * self.total
        # Feature-major: one address row per output row. A single-output layer computes its rows directly
        # in output-channel order (the units permuted), so its gathered rows are the output as they stand.
        self._row_units = mapped if fan_out == 1 else np.arange(len(units))
        self._rows_dense = torch.as_tensor(np.ascontiguousarray(matrix.T[self._row_units]))
        # Each unit reads a few of the layer's inputs: a sparse product costs per place value, a dense one
        # per matrix entry, and wins only on dense matrices (crossover measured near a quarter of entries).
        self._sparse = not self.spatial and int(np.count_nonzero(matrix)) <= _SPARSE_DENSITY * matrix.size
        self._rows_matrix = self._rows_dense.to_sparse() if self._sparse else self._rows_dense
        self._rows_bias = torch.as_tensor(offsets[self._row_units].astype(dtype)).reshape(-1, 1)
        self._rows_sources = None if fan_out == 1 else self.sources
        # Integer addresses can overwrite the float ones element by element where both have one width.
        self._same_width = self.matrix.element_size() == self._index_dtype.itemsize
        self._in_place = fan_out == 1 and not self.flat.dtype.is_floating_point and self._same_width
        itemsize = self.flat.element_size()
        positions = math.prod(node.spatial_size) if self.spatial else 1
        # Float vectors, float and integer addresses and looked-up outputs of one sample (int64 at most).
        self.sample_bytes = positions * (width * 8 + len(units) * (16 + fan_out * itemsize))
        self._small_matrix: np.ndarray | None = None  # made on the first small batch (see small)
        self._small_bias: np.ndarray | None = None
        self._small_flat: np.ndarray | None = None
        self._small_index: Any = None  # see _flat_index
        self._shared: dict[str, Any] | None = None  # see _share_lookups (fused windows only)
        self._values: torch.Tensor | None = None  # see emitting_values

    def _store_tables(self, tables: Sequence[Any], *, raw: bool) -> tuple[np.ndarray, np.ndarray]:
        """Every table's rows in one flat array (:attr:`flat`, with its care mask for partial tables); returns
        each table's first row and, for each output channel, its column in the unit-by-unit outputs."""
        fan_out = self.fan_out
        sizes = [math.prod(t.radices) for t in tables]
        self._sizes = np.asarray(sizes, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.total = total = sum(sizes)
        flat = np.zeros((total, fan_out), dtype=np.float32 if raw else np.int64)
        care = None if all(t.is_dense for t in tables) else np.zeros(total, dtype=bool)
        for u, table in enumerate(tables):  # one block per table (a few per layer); rows in one assignment
            rows = offsets[u] + table.addresses
            if table.dont_care is not None:
                flat[offsets[u] : offsets[u] + sizes[u], : table.fan_out] = table.dont_care
            flat[rows, : table.fan_out] = table.outputs
            if care is not None:
                care[rows] = True
                if table.dont_care is not None:  # a declared don't-care value answers every missing row
                    care[offsets[u] : offsets[u] + sizes[u]] = True
        self.flat = torch.as_tensor(flat)
        if not raw:  # codes in the smallest dtype of the domain: a smaller table stays in cache, outputs shrink
            top = max(len(d) for d in self.node.channel_domains() or ()) - 1
            self.flat = self.flat.to(codes_dtype(min(0, int(flat.min(initial=0))), max(top, int(flat.max(initial=0)))))
        # Column j of every row, one after another: output j of a lookup at row r sits at j * total + r.
        self._flat_columns = self.flat.t().contiguous().reshape(-1)
        self.care = None if care is None or care.all() else torch.as_tensor(care)
        columns = np.fromiter(itertools.chain.from_iterable(u.out_channels for u in self.units), dtype=np.int64)
        fan_outs = np.asarray([t.fan_out for t in tables], dtype=np.int64)
        unit_of = np.repeat(np.arange(len(tables)), fan_outs)
        sources = unit_of * fan_out + (np.arange(len(unit_of)) - np.repeat(np.cumsum(fan_outs) - fan_outs, fan_outs))
        return offsets, sources[np.argsort(columns, kind="stable")]  # column c <- sources[...][c]

    def small(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Outputs of a non-spatial table in the graph's layout for a few samples, by numpy: the addresses as
        one float64 product (exact: integers below 2**53), then one lookup per address row."""
        x = xs[0]
        codes = x if isinstance(x, np.ndarray) else x.numpy()
        n = len(codes)
        if self._small_matrix is None:
            self._small_matrix = self._rows_dense.numpy().T.astype(np.float64)
            self._small_bias = self._rows_bias.numpy().reshape(-1).astype(np.float64)
            self._small_flat = self._flat_columns.numpy()
        rows = codes.reshape(n, -1) @ self._small_matrix
        rows += self._small_bias
        rows = rows.astype(np.intp)  # (N, address rows)
        assert self._small_flat is not None  # made above
        if self.fan_out == 1:
            out = self._small_flat[rows]
        else:
            out = self._small_flat[rows[:, :, None] + self._column_base.numpy().reshape(1, 1, -1)].reshape(n, -1)
            out = out if self._rows_sources is None else out[:, self._rows_sources.numpy()]
        return out if len(self.node.shape) == 1 else out.reshape(n, *self.node.shape)  # type: ignore[return-value]

    def can_emit_values(self) -> bool:
        """Whether :meth:`emitting_values` applies: quantized outputs of one domain, no don't-care checks."""
        domain = self.node.domain
        return isinstance(domain, Domain) and self.care is None

    def emitting_values(self) -> TableKernel:
        """This kernel looking up the float32 values of its outputs instead of their codes (a copy)."""
        assert isinstance(self.node.domain, Domain)  # can_emit_values
        values = torch.tensor(self.node.domain.values, dtype=torch.float32)
        valued = copy.copy(self)
        valued._flat_columns = torch.index_select(values, 0, self._flat_columns.to(torch.int64))
        valued._values = values  # shared lookups unpack codes, then read their values
        valued._small_index = None  # its numpy tables are the values
        valued._in_place = False  # float addresses must not receive values in place of codes
        return valued

    # -- windows fused into addresses ---------------------------------------------------------------------

    def fuse(self, window: Node, pad: Node | None, shape: tuple[int, ...]) -> bool:
        """Prepare :meth:`convolve` for a table that reads ``window`` (which reads ``pad``, a constant pad, when
        given) over an input of per-sample ``shape``: ``False`` where it does not apply.

        The packed address of a unit at an output position is a linear function of the input codes under its
        window: a convolution of the window's input codes with the unit's place values (the table's offset as
        its bias). Every partial sum is an integer of the table's address range, so the float convolution is
        exact (float32 below 2**24 rows, float64 beyond), whatever order its kernel adds the terms in. A pad
        of constant codes is the convolution's zero padding plus, at each output position, the pad codes times
        the place values of the taps that fall on the border: a fixed integer map added with the offsets.
        Partial tables with a care mask keep the window (their errors name the window's input vector).
        """
        meta = window.meta
        if not self.spatial or self.care is not None or not isinstance(meta, WindowMeta) or len(meta.kernel) > 2:
            return False
        assert window.layout is not None  # a checked graph
        kernel, channels = meta.kernel, meta.channels
        rows = self._rows_dense.numpy()  # (address rows, channels * taps) in the window's element order
        self._shared = self._share_lookups(rows)
        if self._shared is not None:  # one address row per group of channels reading the same inputs
            rows = self._shared["rows"]
        if meta.element_order is ElementOrder.CHANNEL_MAJOR:
            weight = rows.reshape(len(rows), channels, meta.taps)
        else:
            weight = rows.reshape(len(rows), meta.taps, channels).transpose(0, 2, 1)
        groups = _conv_groups(weight)
        per_group = channels // groups
        block = (np.arange(len(rows)) // (len(rows) // groups))[:, None] * per_group + np.arange(per_group)
        weight = np.take_along_axis(weight, block[:, :, None], axis=1)  # each row's own group of channels
        weight_t = torch.as_tensor(np.ascontiguousarray(weight).reshape(len(rows), per_group, *kernel))
        self._conv_fn = F.conv1d if len(kernel) == 1 else F.conv2d
        self._window_channels_last = window.layout.channels_last
        size = tuple(shape[:-1] if self._window_channels_last else shape[1:])
        codes = tuple(pad.meta.pad_codes or ()) if pad is not None else (0,) * channels
        padding = tuple(int(before) for before, _ in pad.meta.padding) if pad is not None else (0,) * len(kernel)
        self._conv: dict[str, Any] = {
            "weight": weight_t,
            "bias": self._border_bias(weight_t, meta, size, padding, codes, groups),
            "stride": meta.stride,
            "padding": padding,  # as wide after (see _constant_pad)
            "dilation": meta.dilation,
            "groups": groups,
        }
        self.channels_inner = True  # the schedule says where the outputs go (see Runtime._schedule)
        self._frame = (channels, size, np.asarray(codes, dtype=np.float64))
        self._choose_method(weight, block, per_group * meta.taps)
        return True

    def _border_bias(
        self,
        weight: torch.Tensor,
        meta: WindowMeta,
        size: tuple[int, ...],
        padding: tuple[int, ...],
        codes: tuple[int, ...],
        groups: int,
    ) -> torch.Tensor:
        """Each address row's offset, plus (where pad codes are not 0) the pad codes under the taps that fall
        on the border at each position: the border's codes through the same convolution."""
        bias: torch.Tensor = self._address_bias
        if not any(codes):
            return bias
        inside = torch.zeros((1, meta.channels, *size), dtype=weight.dtype)
        border = F.pad(inside, [p for p in reversed(padding) for _ in range(2)], value=1.0)
        border = border * torch.as_tensor(np.asarray(codes, dtype=np.float64)).to(weight.dtype).reshape(
            1, -1, *([1] * len(meta.kernel))
        )
        ones = (1,) * len(meta.kernel)
        return self._conv_fn(border, weight, None, meta.stride, 0, meta.dilation, groups)[0] + bias.reshape(-1, *ones)

    def _choose_method(self, weight: np.ndarray, block: np.ndarray, reads: int) -> None:
        """How the addresses are formed (all exact, each where it is fastest on small tensors): a product over
        the channels for 1x1 windows, one dense product over the whole frame where the frame is small and
        the windows cover a good part of it (a few thousand weights), else the convolution."""
        conv = self._conv
        channels, size, _ = self._frame
        weight_t, bias, rows = conv["weight"], conv["bias"], len(conv["weight"])
        kernel = tuple(weight_t.shape[2:])
        elements = channels * math.prod(size)
        positions = math.prod(self.node_positions)
        self._method = "conv"
        if set(kernel) == {1} and set(conv["padding"]) == {0}:
            dense = np.zeros((channels, rows), dtype=weight.dtype)
            np.put_along_axis(dense, block.T, weight[:, :, 0].T, axis=0)  # grouped weights as one matrix
            self._method, self._matrix = "pointwise", torch.as_tensor(dense).to(weight_t.dtype)
            self._matrix_bias = self._address_bias
        elif elements * rows * positions <= _DENSE_ENTRIES:
            identity = torch.eye(elements, dtype=weight_t.dtype).reshape(elements, channels, *size)
            images = self._conv_fn(
                identity, weight_t, None, conv["stride"], conv["padding"], conv["dilation"], conv["groups"]
            )  # (elements, rows, *P)
            self._matrix = images.reshape(elements, -1)
            self._matrix_bias = (bias.reshape(rows, -1) * torch.ones(1, positions, dtype=bias.dtype)).reshape(-1)
            # Dense where the windows cover much of the frame; else only for small batches, where a
            # convolution's fixed cost is larger than the product's extra work.
            self._method = "dense" if elements <= 16 * reads else "dense for small batches"

    @property
    def _address_bias(self) -> torch.Tensor:
        """Each address row's offset: in the flat tables, or in the shared tables (see :meth:`_share_lookups`)."""
        return self._shared["bias"] if self._shared is not None else self._rows_bias.reshape(-1)

    def _share_lookups(self, rows: np.ndarray) -> dict[str, Any] | None:
        """One lookup for every group of output channels whose units read the same inputs with the same place
        values (a convolution without groups: all of them), or ``None``.

        Such units have one address at every position, so one table holds all of their codes, each row
        packing the group's codes side by side in the bits of one integer; a lookup then reads them all, and
        shifts and masks take them apart. A layer of 8 units with 2**18 rows reads one table of 512 KiB (16
        bits a row), which stays in cache, instead of 8 tables of 2 MiB in all, and looks up 8 times fewer
        rows. Codes are unchanged: only their storage differs.
        """
        if self.fan_out != 1 or len(rows) < 2:
            return None
        unique, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse)
        if self.flat.dtype.is_floating_point or not self.flat.numel() or int(self.flat.min()) < 0:
            return None  # raw outputs, or codes of a signed dtype: no bits to pack
        bits = max(1, int(self.flat.max()).bit_length())
        if len(unique) == len(rows) or (counts != counts[0]).any() or bits * counts[0] > 62:
            return None
        order = np.argsort(first)  # groups in the order of their first channel
        members = np.stack([np.flatnonzero(inverse == g) for g in order])  # (groups, channels each)
        per = int(counts[0])
        codes = self._flat_columns.numpy().astype(np.int64)
        bias = self._rows_bias.numpy().reshape(-1).astype(np.int64)
        sizes = self._sizes[self._row_units][members[:, 0]]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        table = np.zeros(int(sizes.sum()), dtype=np.int64)
        for g, channels in enumerate(members):  # one group of channels at a time: a few per layer
            size = int(sizes[g])
            block = np.stack([codes[bias[c] : bias[c] + size] for c in channels])  # (channels, rows)
            table[starts[g] : starts[g] + size] = (block << (bits * np.arange(per))[:, None]).sum(axis=0)
        # Up to 32 bits a row fit int32, read as the same bit pattern: an arithmetic shift by s <= 32 - bits
        # then the mask keep bits s .. s + bits - 1 as stored (the sign only fills bits above 31), and int32
        # lookups and shifts cost about a third of int64 ones.
        narrow = bits * per <= 32
        if narrow:
            table = table.astype(np.uint32).view(np.int32)
        dtype = torch.int32 if narrow else torch.int64
        channel_of = members.reshape(-1)  # unpacked position -> output channel
        identity = bool((channel_of == np.arange(len(channel_of))).all())
        return {
            "rows": rows[members[:, 0]],
            "bias": torch.as_tensor(starts.astype(self._rows_bias.numpy().dtype)),
            "table": torch.as_tensor(table).to(dtype),
            "shifts": torch.as_tensor(bits * np.arange(per)).to(dtype),
            "mask": (1 << bits) - 1,
            "order": None if identity else torch.as_tensor(np.argsort(channel_of)),  # output channel -> position
        }

    def _unpack(self, packed: torch.Tensor, *, rows_last: bool) -> torch.Tensor:
        """Codes of every channel from shared lookups ``packed`` (``(M, groups)`` or ``(N, groups, P)``), as
        ``(M, channels)`` or ``(N, channels, P)`` in channel order, in the table's code dtype (or values)."""
        shared = self._shared
        assert shared is not None  # called for shared lookups only
        axis = -1 if rows_last else 2
        shifts = shared["shifts"].reshape(-1) if rows_last else shared["shifts"].reshape(1, 1, -1, 1)
        codes = torch.bitwise_right_shift(packed.unsqueeze(axis), shifts).bitwise_and_(shared["mask"])
        codes = (
            codes.reshape(packed.shape[0], -1) if rows_last else codes.reshape(packed.shape[0], -1, packed.shape[-1])
        )
        if shared["order"] is not None:
            codes = torch.index_select(codes, 1, shared["order"])
        if self._values is not None:
            return torch.index_select(self._values, 0, codes.reshape(-1).to(torch.int32)).view(codes.shape)
        return codes.to(self.flat.dtype)

    def convolve(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Outputs of the graph's layout from the window's input codes ``(N, C, *size)`` (channels-last:
        ``(N, *size, C)``): the addresses as one product or convolution, then one gather."""
        x = xs[0]
        n = x.shape[0]
        conv = self._conv
        dtype = conv["weight"].dtype
        if self._method == "pointwise":
            x = x if self._window_channels_last else torch.movedim(x, 1, -1)  # (N, *size, C)
            strided: tuple[Any, ...] = (slice(None), *(slice(None, None, s) for s in conv["stride"]))
            x = x[strided]
            shape = tuple(x.shape[1:-1])
            if self.channels_inner or self.channels_last:
                flat = x.reshape(-1, x.shape[-1]).to(dtype)
                rows = self._integer(torch.addmm(self._matrix_bias, flat, self._matrix))  # (N * positions, rows)
                return self._looked(rows, shape, rows_last=True)
            flat = x.reshape(n, -1, x.shape[-1]).to(dtype)  # (N, positions, C)
            addresses = torch.einsum("cr,npc->nrp", self._matrix, flat).add_(self._matrix_bias[:, None])
            return self._looked(self._integer(addresses), shape, rows_last=False)
        if self._window_channels_last:
            x = torch.movedim(x, -1, 1)
        if self._method == "dense" or (self._method == "dense for small batches" and n <= _SMALL_BATCH):
            flat = x.reshape(n, -1).to(dtype)
            rows = self._integer(torch.addmm(self._matrix_bias, flat, self._matrix))  # (N, rows * positions)
            return self._looked(rows.view(n, len(self._conv["weight"]), -1), self.node_positions, rows_last=False)
        # Channels innermost (what oneDNN's convolutions run fastest on) where codes must become floats anyway
        # (a previous table's), in the same pass; float codes (the input encoder's) stay as they are:
        # reordering them costs more than it saves.
        planar = x.dim() == 4
        x = x.to(dtype, memory_format=torch.channels_last if planar and x.dtype != dtype else torch.preserve_format)
        bias = conv["bias"]
        if bias.dim() == 1:  # no border codes: the offsets are the convolution's bias
            addresses = self._conv_fn(
                x, conv["weight"], bias, conv["stride"], conv["padding"], conv["dilation"], conv["groups"]
            )
        else:
            addresses = self._conv_fn(
                x, conv["weight"], None, conv["stride"], conv["padding"], conv["dilation"], conv["groups"]
            ).add_(bias)
        rows = self._integer(addresses)  # (N, address rows, *positions)
        if planar and rows.is_contiguous(memory_format=torch.channels_last):
            # Gather in memory order (positions, then rows) and keep that order: the next convolution reads it.
            inner = rows.permute(0, 2, 3, 1)
            return self._looked(inner.reshape(-1, inner.shape[-1]), tuple(inner.shape[1:-1]), rows_last=True)
        return self._looked(rows.reshape(n, rows.shape[1], -1), rows.shape[2:], rows_last=False)

    def small_convolve(self, xs: list[Any]) -> np.ndarray:
        """:meth:`convolve` for a few samples, by numpy: each address a sum over its unit's window of codes
        times place values, the codes gathered by precomputed flat indices (the pad's codes from one extra
        element per channel), where those indices stay small; else the convolution."""
        if self._small_index is None:
            self._small_index = self._flat_index()
        if self._small_index is False or len(xs[0]) * self._small_index["index"].size > _SMALL_GATHER:
            return _torch_inputs(self.convolve)(xs).numpy()
        prep = self._small_index
        x = xs[0]
        codes = x if isinstance(x, np.ndarray) else x.numpy()
        if self._window_channels_last:
            codes = np.moveaxis(codes, -1, 1)
        n = len(codes)
        frame = np.empty((n, prep["elements"] + len(prep["pads"])), dtype=np.float64)
        frame[:, : prep["elements"]] = codes.reshape(n, -1)
        frame[:, prep["elements"] :] = prep["pads"]
        rows = np.einsum("npf,pf->np", np.take(frame, prep["index"], axis=1), prep["place"])
        rows += prep["bias"]
        rows = rows.astype(np.intp).reshape(n, -1, prep["positions"])
        if "packed" in prep:  # shared lookups (numpy throughout: a torch call costs more than this batch)
            out = (prep["packed"][rows][:, :, None, :] >> prep["shifts"]) & prep["mask"]
            out = out.reshape(n, -1, rows.shape[-1])
            if prep["order"] is not None:
                out = out[:, prep["order"]]
            out = prep["values"][out] if prep["values"] is not None else out.astype(prep["dtype"])
        elif self.fan_out == 1:
            out = prep["flat"][rows]
        else:
            out = prep["flat"][rows[:, :, None, :] + prep["columns"]].reshape(n, -1, rows.shape[-1])
            out = out if prep["sources"] is None else out[:, prep["sources"]]
        out = out.reshape(n, -1, *self.node_positions)
        return np.moveaxis(out, 1, -1) if self.channels_last else out

    def _flat_index(self) -> dict[str, Any] | bool:
        """What :meth:`small_convolve` reads: each address's input elements ``(rows * positions, inputs)`` in
        the frame (its padded places point past the frame, at their channel's pad code), their place values
        and the row's offset, and the tables as numpy arrays; ``False`` when the indices would be large."""
        conv = self._conv
        weight = conv["weight"].numpy().astype(np.float64)  # (rows, channels per group, *kernel)
        rows, per_group = weight.shape[:2]
        kernel = weight.shape[2:]
        channels, size, _ = self._frame
        positions = self.node_positions
        taps = math.prod(kernel)
        if rows * math.prod(positions) * per_group * taps > 2**20:
            return False

        def grid(extent: tuple[int, ...]) -> np.ndarray:
            axes = np.meshgrid(*[np.arange(e) for e in extent], indexing="ij")
            return np.stack(axes, -1).reshape(-1, len(extent))

        origin = grid(positions) * np.asarray(conv["stride"]) - np.asarray(conv["padding"])  # (P, rank)
        coords = origin[:, None, :] + grid(kernel)[None, :, :] * np.asarray(conv["dilation"])  # (P, taps, rank)
        inside = ((coords >= 0) & (coords < np.asarray(size))).all(axis=-1)
        spatial = np.ravel_multi_index(tuple(np.clip(coords, 0, np.asarray(size) - 1).transpose(2, 0, 1)), size)
        group = np.arange(rows) // (rows // conv["groups"])
        channel = group[:, None] * per_group + np.arange(per_group)  # (rows, channels per group)
        elements = channels * math.prod(size)
        index = np.where(
            inside[None, :, None, :],
            channel[:, None, :, None] * math.prod(size) + spatial[None, :, None, :],
            elements + channel[:, None, :, None],
        )  # (rows, P, channels per group, taps)
        place = np.broadcast_to(weight.reshape(rows, 1, per_group, taps), index.shape)
        bias = np.repeat(self._address_bias.numpy().astype(np.float64), len(origin))
        width = per_group * taps
        prep: dict[str, Any] = {
            "index": index.reshape(-1, width),
            "place": np.ascontiguousarray(place.reshape(-1, width)),
            "bias": bias,
            "elements": elements,
            "pads": self._frame[2],
            "positions": math.prod(positions),
            "flat": self._flat_columns.numpy(),
            "columns": self._column_base.numpy().reshape(1, 1, -1, 1),
            "sources": None if self._rows_sources is None else self._rows_sources.numpy(),
        }
        if self._shared is not None:
            shared = self._shared
            prep["packed"] = shared["table"].numpy()
            prep["shifts"] = shared["shifts"].numpy().reshape(1, 1, -1, 1)
            prep["mask"] = shared["mask"]
            prep["order"] = None if shared["order"] is None else shared["order"].numpy()
            prep["values"] = None if self._values is None else self._values.numpy()
            prep["dtype"] = self.flat.numpy().dtype
        return prep

    @property
    def node_positions(self) -> tuple[int, ...]:
        return tuple(self.node.shape[:-1] if self.channels_last else self.node.shape[1:])

    def _looked(self, rows: torch.Tensor, positions: tuple[int, ...], *, rows_last: bool) -> torch.Tensor:
        """The table outputs of integer addresses ``rows`` (``rows_last``: ``(N * positions, address rows)``,
        else ``(N, address rows, positions)``), in the graph's layout (a view where the order allows)."""
        if self._shared is not None:  # one lookup per group of channels, then each channel's bits
            packed = torch.index_select(self._shared["table"], 0, rows.reshape(-1)).view(rows.shape)
            out = self._unpack(packed, rows_last=rows_last)
        elif self.fan_out == 1:  # address rows are output channels, in order
            out = torch.index_select(self._flat_columns, 0, rows.reshape(-1)).view(rows.shape)
        elif rows_last:  # (M, units) -> (M, units * fan_out) -> output channels
            index = rows.unsqueeze(-1) + self._column_base.reshape(1, 1, -1)
            out = torch.index_select(self._flat_columns, 0, index.reshape(-1)).view(rows.shape[0], -1)
            out = out if self._rows_sources is None else out[:, self._rows_sources]
        else:  # (N, units, P) -> (N, units * fan_out, P) -> output channels
            index = rows.unsqueeze(2) + self._column_base.reshape(1, 1, -1, 1)
            out = torch.index_select(self._flat_columns, 0, index.reshape(-1)).view(rows.shape[0], -1, rows.shape[-1])
            out = out if self._rows_sources is None else out[:, self._rows_sources]
        if rows_last:  # (N * positions, channels)
            out = out.view(-1, *positions, out.shape[-1])
            return out if self.channels_last else torch.movedim(out, -1, 1)
        out = out.view(out.shape[0], out.shape[1], *positions)  # (N, channels, *positions)
        return torch.movedim(out, 1, -1).contiguous() if self.channels_last else out

    # -- observation helpers (the graph's layout) ---------------------------------------------------------

    def vectors(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The input vectors of every position, shape ``(N, positions, vector)``, and the positions' shape."""
        n = x.shape[0]
        positions = tuple(x.shape[1:-1]) if self.spatial else ()
        return (x.reshape(n, math.prod(positions), -1) if self.spatial else x.reshape(n, 1, -1)), positions

    def addresses(self, vectors: torch.Tensor) -> torch.Tensor:
        """Packed address of every unit at every position (within its own table), shape ``(N, P, U)``."""
        return torch.matmul(vectors.to(self.matrix.dtype), self.matrix).to(torch.int64)

    # -- lookups ------------------------------------------------------------------------------------------

    def columns(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Outputs of a feature-major batch: input ``(vector, N)`` codes to output ``(channels, N)``.

        A single-output layer of codes returns them as floats of its address dtype (what the next
        table's matrix product reads); other layers return their table's dtype.
        """
        x = xs[0]
        x = x.to(self.matrix.dtype, memory_format=torch.contiguous_format)
        if self._sparse:  # the sparse product reads its dense operand row by row (`to` keeps a same-dtype view)
            x = x.contiguous()
        addresses = torch.addmm(self._rows_bias, self._rows_matrix, x)
        rows = self._integer(addresses)
        if self.care is not None:
            self._check_care(rows, self._row_units, lambda lookup: x[:, lookup], positions=None)
        if self.fan_out == 1:
            looked = torch.index_select(self._flat_columns, 0, rows.view(-1)).view(rows.shape)
            # A single-output layer's codes overwrite its integer addresses, as the floats the next reads.
            return addresses.copy_(looked) if self._in_place else looked
        looked = torch.index_select(self._flat_columns, 0, (rows.unsqueeze(1) + self._column_base).reshape(-1))
        looked = looked.reshape(-1, x.shape[1])  # (units * fan_out, N)
        return looked if self._rows_sources is None else looked[self._rows_sources]

    def __call__(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Outputs of the graph's layout: window vectors ``(N, *positions, vector)`` to ``(N, channels,
        *positions)``, or ``(N, *positions, channels)`` for a channels-last layer."""
        vectors, positions = self.vectors(xs[0])
        n, p = vectors.shape[:2]
        chunk = max(1, _RUN_BUDGET // (self.sample_bytes or 1))
        parts = []
        for start in range(0, n, chunk):
            v = vectors[start : start + chunk]
            # One product per sample, (rows, vector) x (vector, positions): channels come out first, and BLAS
            # reads the transposed vectors in place (as an unfolded window lays them out).
            addresses = torch.matmul(self._rows_dense, v.transpose(1, 2).to(self.matrix.dtype))
            rows = self._integer(addresses.add_(self._rows_bias))
            if self.care is not None:
                lookups = rows.transpose(0, 1).reshape(rows.shape[1], -1)  # (rows, sample * P + position)
                self._check_care(lookups, self._row_units, _vector_at(v, p), positions=(start, p))
            if self.fan_out == 1:
                looked = torch.index_select(self._flat_columns, 0, rows.view(-1)).view(rows.shape)
            else:
                index = rows.unsqueeze(2) + self._column_base.reshape(1, 1, -1, 1)  # (n, units, fan_out, P)
                looked = torch.index_select(self._flat_columns, 0, index.view(-1)).view(rows.shape[0], -1, p)
                looked = looked if self._rows_sources is None else looked[:, self._rows_sources]
            parts.append(looked)
        out = (torch.cat(parts) if len(parts) > 1 else parts[0]).reshape(n, -1, *positions)
        return out.movedim(1, -1).contiguous() if self.channels_last else out

    def _integer(self, addresses: torch.Tensor) -> torch.Tensor:
        """Integer lookup rows of float addresses, written over them element by element where both have one
        width: one scratch buffer per layer instead of two."""
        if self._same_width:
            return addresses.view(self._index_dtype).copy_(addresses)
        return addresses.to(self._index_dtype)

    def _check_care(
        self,
        rows: torch.Tensor,
        row_units: np.ndarray,
        vector: Callable[[int], torch.Tensor],
        *,
        positions: tuple[int, int] | None,
    ) -> None:
        """Raise :class:`MissingRowError` for the first lookup (sample, position, unit) of a don't-care row.

        ``rows`` holds flat rows, one row of lookups per entry of ``row_units`` (the unit it looks up);
        ``vector(lookup)`` gives the input vector of a lookup; ``positions``: ``(first sample,
        positions per sample)`` when lookups run over positions, else lookups are samples.
        """
        assert self.care is not None  # called only with a care mask
        hit = ~torch.index_select(self.care, 0, rows.reshape(-1)).reshape(rows.shape)
        if not hit.any():
            return
        found = torch.nonzero(hit).numpy()
        units = np.asarray(row_units)[found[:, 0]]
        lookup = found[:, 1]
        first = np.lexsort((units, lookup))[0]  # sample (and position) first, then unit, as a sweep meets them
        unit, at = int(units[first]), int(lookup[first])
        fan_in = self.units[unit].fan_in
        codes = vector(at)[self.index[unit, :fan_in]].tolist()
        start, per_sample = positions if positions is not None else (0, 1)
        sample, position = start + at // per_sample, at % per_sample
        where = f" at position {position}" if self.spatial else ""
        msg = (
            f"{self.node.name}: unit {unit}{where}, sample {sample}: input codes {tuple(int(c) for c in codes)} hit a "
            f"don't-care row (not observed); {int(hit.sum())} lookup(s) in this batch did. Restrict with a "
            "default (net.restrict(..., default=...)) to map them, or observe more data"
        )
        raise MissingRowError(msg)
