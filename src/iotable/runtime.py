"""The table-only runtime: evaluates an interlayer graph from its tables, never calling a layer's forward.

Every node is compiled once into a small kernel over batched integer-code tensors: a table node gathers
each unit's inputs, forms packed addresses with per-unit address weights and reads one flat array holding
all of the layer's tables (one gather, never a comparison against rows); windows are ``unfold`` views; pads
fill each channel's code of real 0. Batches are chunked under a memory budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .domain import Domain
from .errors import MissingRowError
from .graph import Graph, Node, NodeKind
from .plan import run_module

__all__ = ["Runtime", "channel_values"]

Kernel = Callable[[list[torch.Tensor]], torch.Tensor]

# Bytes one sample may use inside a table kernel (gathered codes and addresses, int64).
_RUN_BUDGET = 128 * 2**20


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


def decode(codes: torch.Tensor, node: Node) -> torch.Tensor:
    """Float32 values of a node's output codes (raw outputs pass through)."""
    table = channel_values(node)
    if table is None:
        return codes
    values, offsets = table
    if len(offsets) > 1:
        shape = [1] * codes.dim()
        axis = codes.dim() - 1 if node.layout is not None and node.layout.channels_last else 1
        shape[axis] = -1
        codes = codes + offsets.reshape(shape)
    return values[codes]


class Runtime:
    """Compiled kernels of a graph's nodes; :meth:`run` evaluates a batch of input codes."""

    def __init__(self, graph: Graph, layers: dict[str, Any]) -> None:
        self.graph = graph
        self._layers = layers
        self._kernels: dict[str, Kernel] = {node.name: self._compile(node) for node in graph.nodes}
        last_use = {p: i for i, node in enumerate(graph.nodes) for p in node.inputs}
        # Producers whose codes can be dropped once node i has run, to keep memory flat along the graph.
        self._release = [[p for p in node.inputs if last_use[p] == i] for i, node in enumerate(graph.nodes)]

    def run(self, codes: torch.Tensor, *, capture: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Evaluate the graph on input codes ``(N, *input shape)``; return the output and, if asked, every node's."""
        env: dict[str, torch.Tensor] = {}
        for i, node in enumerate(self.graph.nodes):
            args = [env[p] for p in node.inputs] if node.kind is not NodeKind.INPUT else [codes]
            env[node.name] = self._kernels[node.name](args)
            if not capture:
                for p in self._release[i]:
                    del env[p]
        output = env[self.graph.nodes[-1].name]
        return output, env if capture else {}

    # -- kernels ------------------------------------------------------------------------------------------

    def _compile(self, node: Node) -> Kernel:
        kind = node.kind
        if kind in (NodeKind.INPUT, NodeKind.OUTPUT, NodeKind.DUPLICATE):
            return lambda xs: xs[0]
        if kind is NodeKind.RESHAPE:
            shape = node.shape
            return lambda xs: xs[0].reshape(xs[0].shape[0], *shape)
        if kind is NodeKind.JOIN:
            axis = -1 if node.layout is not None and node.layout.channels_last else 1
            return lambda xs: torch.cat(xs, dim=axis)
        if kind is NodeKind.PAD:
            return self._pad(node)
        if kind is NodeKind.WINDOW:
            return self._window(node)
        if kind is NodeKind.POOL:
            return self._pool(node)
        if kind is NodeKind.TABLE:
            return self._table(node)
        if kind is NodeKind.HOST:
            return self._host(node)
        raise AssertionError(kind)  # NodeKind is closed

    def _pad(self, node: Node) -> Kernel:
        padding = node.meta["padding"]
        channels_last = node.layout is not None and node.layout.channels_last
        codes = torch.as_tensor(node.meta["pad_codes"], dtype=torch.int64)
        rank = len(padding)
        fill_shape = [1] * (rank + 2)
        fill_shape[-1 if channels_last else 1] = -1
        fill = codes.reshape(fill_shape)
        offset = 1 if not channels_last else 0

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0]
            out = fill.expand(x.shape[0], *node.shape).clone()
            index = [slice(None)] * x.dim()
            for axis, p in enumerate(padding):
                index[1 + offset + axis] = slice(p, p + x.shape[1 + offset + axis])
            out[tuple(index)] = x
            return out

        return kernel

    def _window(self, node: Node) -> Kernel:
        kernel_size, stride, dilation = node.meta["kernel"], node.meta["stride"], node.meta["dilation"]
        channels_last = node.meta["input_layout"].channels_last
        channel_major = node.meta["element_order"] == "channel-major"
        rank = len(kernel_size)

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0]
            if channels_last:
                x = torch.movedim(x, -1, 1)
            n, c = x.shape[:2]
            for axis in range(rank):
                span = (kernel_size[axis] - 1) * dilation[axis] + 1
                x = x.unfold(2 + axis, span, stride[axis])
            x = x[(Ellipsis, *(slice(None, None, d) for d in dilation))]  # (N, C, *P, *K)
            positions = x.shape[2 : 2 + rank]
            if channel_major:
                x = x.permute(0, *range(2, 2 + rank), 1, *range(2 + rank, 2 + 2 * rank))
            else:
                x = x.permute(0, *range(2, 2 + rank), *range(2 + rank, 2 + 2 * rank), 1)
            return x.reshape(n, *positions, c * math.prod(kernel_size))

        return kernel

    def _pool(self, node: Node) -> Kernel:
        pool = node.meta["module"]
        fn = F.max_pool1d if node.meta["rank"] == 1 else F.max_pool2d
        args = {k: getattr(pool, k) for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode")}

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            # Codes ascend with values, so the max of codes is the code of the max (exact below 2**24).
            return fn(xs[0].to(torch.float32), **args).to(torch.int64)

        return kernel

    def _host(self, node: Node) -> Kernel:
        module = node.meta["module"]
        producer = self.graph[node.inputs[0]]

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            return run_module(module, decode(xs[0], producer), node.name)

        return kernel

    def _table(self, node: Node) -> Kernel:
        return TableKernel(node, self._layers[node.meta["layer"]], self.graph.edges_into(node.name)[0].index_map)


class TableKernel:
    """One table layer compiled for lookups: per-unit address weights and one flat array of all its tables.

    Partial tables (don't-care rows) are stored densely with a *care* mask: a lookup that hits a row a
    table lacks returns the table's declared don't-care value, or raises :class:`MissingRowError` naming
    the node, the unit and the input codes.
    """

    def __init__(self, node: Node, layer: Any, index_map: np.ndarray) -> None:
        units, tables = layer.plan.units, layer.tables
        self.node, self.units = node, units
        fan_in = index_map.shape[1]
        fan_out = max(t.fan_out for t in tables)
        weights = np.zeros((len(units), fan_in), dtype=np.int64)
        for u, table in enumerate(tables):
            weights[u, : table.fan_in] = table.address_weights
        sizes = [math.prod(t.radices) for t in tables]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        raw = layer.plan.output_domain is None
        flat = np.zeros((sum(sizes), fan_out), dtype=np.float32 if raw else np.int64)
        care = None if all(t.is_dense for t in tables) else np.zeros(sum(sizes), dtype=bool)
        columns, sources = [], []
        for u, (unit, table) in enumerate(zip(units, tables)):
            rows = offsets[u] + table.addresses
            if table.dont_care is not None:
                flat[offsets[u] : offsets[u] + sizes[u], : table.fan_out] = table.dont_care
            flat[rows, : table.fan_out] = table.outputs
            if care is not None:
                care[rows] = True
                if table.dont_care is not None:  # a declared don't-care value answers every missing row
                    care[offsets[u] : offsets[u] + sizes[u]] = True
            columns += list(unit.out_channels)
            sources += [u * fan_out + j for j in range(table.fan_out)]
        self.flat = torch.as_tensor(flat)
        self.flat_column = self.flat[:, 0].contiguous()  # single-output tables gather from one column
        self.care = None if care is None or care.all() else torch.as_tensor(care)
        self.index = torch.as_tensor(np.where(index_map < 0, 0, index_map))
        self.offsets = torch.as_tensor(offsets)
        mapped = np.asarray(sources)[np.argsort(columns)]  # output column c <- looked-up column mapped[c]
        identity = len(mapped) == len(units) * fan_out and (mapped == np.arange(len(mapped))).all()
        self.sources = None if identity else torch.as_tensor(mapped)
        self.spatial = bool(node.meta.get("spatial"))
        self.channels_last = node.layout is not None and node.layout.channels_last
        # Addresses as one matrix product: column u holds unit u's place values at the elements it reads.
        # Floats add integers exactly while every sum stays below 2**24 (float32) or 2**53 (float64).
        shape = node.meta["input_shapes"][0]
        width = int(shape[-1] if self.spatial else math.prod(shape))
        dtype = np.float32 if max(sizes) <= 2**24 else np.float64
        matrix = np.zeros((width, len(units)), dtype=dtype)
        for u in range(len(units)):
            fan = int((index_map[u] >= 0).sum())
            np.add.at(matrix[:, u], index_map[u, :fan], weights[u, :fan])
        self.matrix = torch.as_tensor(matrix)
        self.per_sample = max(1, len(units) * (fan_out + 2) * 8)

    def vectors(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The input vectors of every position, shape ``(N, positions, vector)``, and the positions' shape."""
        n = x.shape[0]
        positions = tuple(x.shape[1:-1]) if self.spatial else ()
        return (x.reshape(n, math.prod(positions), -1) if self.spatial else x.reshape(n, 1, -1)), positions

    def addresses(self, vectors: torch.Tensor) -> torch.Tensor:
        """Packed address of every unit at every position (within its own table), shape ``(N, P, U)``."""
        return torch.matmul(vectors.to(self.matrix.dtype), self.matrix).to(torch.int64)

    def __call__(self, xs: list[torch.Tensor]) -> torch.Tensor:
        vectors, positions = self.vectors(xs[0])
        n = vectors.shape[0]
        chunk = max(1, _RUN_BUDGET // (self.per_sample * vectors.shape[1]))
        parts = []
        for start in range(0, n, chunk):
            v = vectors[start : start + chunk]
            rows = self.addresses(v) + self.offsets  # (n, P, U)
            if self.care is not None:
                self._check_care(v, rows, start)
            # One gather from the flat table: (n, P, U * fan_out).
            flat_rows = rows.reshape(-1)
            if self.flat.shape[1] == 1:
                looked = torch.gather(self.flat_column, 0, flat_rows)
            else:
                looked = torch.index_select(self.flat, 0, flat_rows)
            looked = looked.reshape(v.shape[0], v.shape[1], -1)
            parts.append(looked if self.sources is None else looked[:, :, self.sources])
        out = torch.cat(parts) if len(parts) > 1 else parts[0]
        if not self.spatial:
            return out.reshape(n, -1)
        out = out.reshape(n, *positions, -1)
        return out if self.channels_last else torch.movedim(out, -1, 1)

    def _check_care(self, vectors: torch.Tensor, rows: torch.Tensor, start: int) -> None:
        hit = ~self.care[rows]
        if hit.any():
            sample, position, unit = (int(i) for i in torch.nonzero(hit)[0])
            fan_in = self.units[unit].fan_in
            codes = vectors[sample, position, self.index[unit, :fan_in]].tolist()
            where = f" at position {position}" if self.spatial else ""
            msg = (
                f"{self.node.name}: unit {unit}{where}, sample {start + sample}: input codes {tuple(codes)} hit a "
                f"don't-care row (not observed); {int(hit.sum())} lookup(s) in this batch did. Restrict with a "
                "default (net.restrict(..., default=...)) to map them, or observe more data"
            )
            raise MissingRowError(msg)
