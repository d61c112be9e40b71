"""The interlayer graph as standard ONNX operators: one lowering per node kind, every tensor ``(N, *shape)`` in
the graph's layout (codes ``int64``, raw values ``float32``), exactly what :meth:`TableNetwork.run` computes.

Lowering builds plain numpy initializers and ``onnx.helper`` nodes; :mod:`iotable.onnxout` checks and writes
the model. Every index tensor is a constant, so each structural kind (pad, window, pool, sum) is one ``Gather``
from its input flattened per sample, followed by arithmetic over the gathered axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..domain import Domain
from ..graph.liveness import pool_sources, window_gather
from ..graph.nodes import ArgmaxMeta, Node, PadMeta, PoolMeta, SumMeta, TableMeta, ThresholdMeta, WindowMeta
from ..runtime.codes import Grid
from ..runtime.table import TableKernel

#: Input domains of at most this many values are encoded by comparisons with their midpoints; larger evenly
#: spaced ones by arithmetic on their grid (comparisons would take a tensor of this many per input element).
COMPARISONS = 256


class Lowering:
    """Collects the ONNX nodes and initializers of one graph (``onnx`` is the imported package)."""

    def __init__(self, onnx: Any, net: Any, opset: int) -> None:
        self.onnx, self.net, self.graph, self.opset = onnx, net, net.graph, opset
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.values: dict[str, str] = {}  # graph node name -> its ONNX tensor
        self._count = 0

    # -- building blocks ----------------------------------------------------------------------------------

    def name(self, hint: str) -> str:
        """A fresh tensor name (graph node names may repeat after sanitising: a counter keeps them apart)."""
        self._count += 1
        return f"{hint}#{self._count}"

    def const(self, hint: str, array: np.ndarray) -> str:
        """An initializer holding ``array`` (its own dtype)."""
        name = self.name(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str, **attributes: Any) -> str:
        """One ONNX node with one output; returns the output's name."""
        out = self.name(hint)
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], name=out, **attributes))
        return out

    def reshape(self, x: str, shape: tuple[int, ...], hint: str) -> str:
        """``x`` reshaped to ``(N, *shape)``."""
        return self.op("Reshape", [x, self.const(f"{hint}/shape", np.asarray((-1, *shape), np.int64))], hint)

    def flat(self, x: str, producer: Node, hint: str) -> str:
        """``x`` as ``(N, elements)``, C order."""
        return self.reshape(x, (math.prod(producer.shape),), f"{hint}/flat")

    def reduce(self, op_type: str, x: str, axis: int, hint: str) -> str:
        """``ReduceSum`` / ``ReduceMax`` over one axis, dropped (axes an input from opset 13 / 18 on)."""
        if op_type == "ReduceSum" or self.opset >= 18:
            axes = self.const(f"{hint}/axes", np.asarray([axis], np.int64))
            return self.op(op_type, [x, axes], hint, keepdims=0)
        return self.op(op_type, [x], hint, axes=[axis], keepdims=0)

    def gather(self, x: str, index: np.ndarray, axis: int, hint: str) -> str:
        return self.op("Gather", [x, self.const(f"{hint}/index", np.asarray(index, np.int64))], hint, axis=axis)

    # -- the boundaries -----------------------------------------------------------------------------------

    def encode(self, x: str, node: Node) -> str:
        """Float32 values to codes: the number of midpoints between consecutive domain values at most each value,
        or, for evenly spaced domains of more than :data:`COMPARISONS` values, the value's offset from the first
        in steps, clipped to the codes and rounded.

        A value of the domain (within its tolerance, as :meth:`Domain.encode` accepts it) lies far from every
        midpoint, and within half a step of its code on the grid, so either way it gets its own code; a value off
        the domain gets the code of the value nearest to it.
        """
        domains = node.channel_domains() or ()
        grid = Grid.of(domains, torch.float32)
        if grid is not None and max(len(d) for d in domains) > COMPARISONS:
            return self._encode_on_grid(x, node, grid)
        mids = [(d.values[1:] + d.values[:-1]) / 2 for d in domains]
        width = max(len(m) for m in mids)
        if width == 0:  # one-value domains: every code is 0
            return self.op("Cast", [self.op("Mul", [x, self.const("zero", np.float32(0))], "zeros")], "codes", to=7)
        table = np.full((len(domains), width), np.inf, dtype=np.float64)
        for c, m in enumerate(mids):
            table[c, : len(m)] = m
        shape = [1] * (len(node.shape) + 1)  # the midpoints broadcast over a trailing axis
        channels_last = node.layout is not None and node.layout.channels_last
        shape[len(node.shape) - 1 if channels_last else 0] = len(domains)
        if isinstance(node.domain, Domain):
            table, shape = table[:1], [1] * (len(node.shape) + 1)
        shape[-1] = width
        midpoints = self.const("input/midpoints", table.astype(np.float32).reshape(shape))
        column = self.op("Unsqueeze", [x, self.const("input/axis", np.asarray([-1], np.int64))], "input/column")
        above = self.op("Cast", [self.op("GreaterOrEqual", [column, midpoints], "input/above")], "input/steps", to=7)
        return self.reduce("ReduceSum", above, -1, "input/codes")

    def _encode_on_grid(self, x: str, node: Node, grid: Grid) -> str:
        """``round(clip((x - first) * scale, 0, top))`` with each channel's grid, as ``net.run`` encodes."""
        shape = [1] * len(node.shape)
        channels_last = node.layout is not None and node.layout.channels_last
        shape[-1 if channels_last else 0] = -1

        def constant(hint: str, value: Any) -> str:
            array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray([value])
            return self.const(f"input/{hint}", array.astype(np.float32).reshape(shape if array.size > 1 else [1]))

        steps = self.op("Mul", [self.op("Sub", [x, constant("first", grid.first)], "input/offset"),
                                constant("scale", grid.scale)], "input/steps")  # fmt: skip
        steps = self.op("Max", [steps, constant("bottom", 0.0)], "input/above_zero")
        steps = self.op("Min", [steps, constant("top", grid.top)], "input/clipped")
        return self.op("Cast", [self.op("Round", [steps], "input/rounded")], "input/codes", to=7)

    def decode(self, x: str, node: Node) -> str:
        """Codes to float32 values: each channel's values, gathered by code (plus the channel's offset)."""
        domains = node.channel_domains()
        assert domains is not None  # raw outputs are not decoded
        if isinstance(node.domain, Domain):
            return self.gather_values(np.asarray(node.domain.values, np.float32), x, "output/values")
        sizes = np.asarray([len(d) for d in domains], np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        shape = [1] * len(node.shape)
        channels_last = node.layout is not None and node.layout.channels_last
        shape[-1 if channels_last else 0] = -1
        shifted = self.op("Add", [x, self.const("output/offsets", offsets.reshape(shape))], "output/shifted")
        values = np.concatenate([d.values for d in domains]).astype(np.float32)
        return self.gather_values(values, shifted, "output/values")

    def gather_values(self, values: np.ndarray, codes: str, hint: str) -> str:
        return self.op("Gather", [self.const(f"{hint}/table", values), codes], hint, axis=0)

    # -- one method per node kind -------------------------------------------------------------------------

    def lower(self, node: Node) -> None:
        """Add ``node``'s operators; its output tensor is ``self.values[node.name]``."""
        inputs = [self.values[p] for p in self.graph.inputs(node.name)]
        method: Callable[[Node, list[str]], str] = getattr(self, f"_{node.kind.value}")
        self.values[node.name] = method(node, inputs)

    def _output(self, node: Node, inputs: list[str]) -> str:
        return inputs[0]

    def _duplicate(self, node: Node, inputs: list[str]) -> str:
        return self.op("Identity", inputs, node.name)

    def _reshape(self, node: Node, inputs: list[str]) -> str:
        return self.reshape(inputs[0], node.shape, node.name)

    def _join(self, node: Node, inputs: list[str]) -> str:
        axis = -1 if node.layout is not None and node.layout.channels_last else 1
        return self.op("Concat", inputs, node.name, axis=axis)

    def _pad(self, node: Node, inputs: list[str]) -> str:
        """The input and one pad code per channel side by side, gathered by the index map."""
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, PadMeta)  # a checked graph
        index = np.asarray(meta.index_map, np.int64)
        x = self.flat(inputs[0], producer, node.name)
        if (index < 0).any():
            assert meta.pad_codes is not None  # a checked graph: -1 entries come with pad codes
            channels_last = node.layout is not None and node.layout.channels_last
            channel = np.indices(index.shape)[-1 if channels_last else 0]
            index = np.where(index < 0, math.prod(producer.shape) + channel, index)
            codes = np.asarray(meta.pad_codes, np.int64).reshape(1, -1)
            x = self.op("Concat", [x, self.pad_codes(x, codes, node.name)], f"{node.name}/padded", axis=1)
        return self.gather(x, index, 1, node.name)

    def pad_codes(self, x: str, codes: np.ndarray, hint: str) -> str:
        """``codes`` (``(1, C)``) repeated for every sample of ``x`` (``(N, ...)``): ``x[:, :1] * 0 + codes``."""
        first = self.gather(x, np.zeros(1, np.int64), 1, f"{hint}/first")
        zeros = self.op("Mul", [first, self.const(f"{hint}/zero", np.zeros(1, np.int64))], f"{hint}/zeros")
        return self.op("Add", [zeros, self.const(f"{hint}/codes", codes)], f"{hint}/pad")

    def _window(self, node: Node, inputs: list[str]) -> str:
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
        index = window_gather(producer.shape, meta, channels_last=node.layout.channels_last)
        return self.gather(self.flat(inputs[0], producer, node.name), index, 1, node.name)

    def _pool(self, node: Node, inputs: list[str]) -> str:
        """Every window's elements gathered (short windows repeat their first), then their maximum."""
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, PoolMeta)  # a checked graph
        channels_last = node.layout is not None and node.layout.channels_last
        sources = pool_sources(producer.shape, node.shape, meta, channels_last)
        taps = max(len(s) for s in sources)
        index = np.asarray([s + [s[0]] * (taps - len(s)) for s in sources], np.int64).reshape(*node.shape, taps)
        gathered = self.gather(self.flat(inputs[0], producer, node.name), index, 1, f"{node.name}/windows")
        return self.reduce("ReduceMax", gathered, -1, node.name)

    def _sum(self, node: Node, inputs: list[str]) -> str:
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, SumMeta)  # a checked graph
        terms = self.gather(self.flat(inputs[0], producer, node.name), np.maximum(meta.index_map, 0), 1, node.name)
        weighted = self.op("Mul", [terms, self.const(f"{node.name}/weights", meta.weights.astype(np.int64))], "terms")
        total = self.reduce("ReduceSum", weighted, -1, f"{node.name}/sum")
        total = self.op("Add", [total, self.const(f"{node.name}/constant", meta.constant.astype(np.int64))], "sum")
        return self.reshape(total, node.shape, node.name)

    def _threshold(self, node: Node, inputs: list[str]) -> str:
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, ThresholdMeta)  # a checked graph
        x = self.reshape(inputs[0], (math.prod(producer.shape), 1), f"{node.name}/column")
        reached = self.op("GreaterOrEqual", [x, self.const(f"{node.name}/thresholds", meta.thresholds)], "reached")
        count = self.reduce("ReduceSum", self.op("Cast", [reached], "steps", to=7), -1, f"{node.name}/count")
        code = self.op("Mul", [count, self.const(f"{node.name}/direction", meta.direction.astype(np.int64))], "step")
        code = self.op("Add", [code, self.const(f"{node.name}/start", meta.start.astype(np.int64))], "code")
        return self.reshape(code, node.shape, node.name)

    def _argmax(self, node: Node, inputs: list[str]) -> str:
        """ONNX ``ArgMax`` with ``select_last_index=0``: the first of equal maxima, as ``torch.argmax``."""
        meta = node.meta
        assert isinstance(meta, ArgmaxMeta)  # a checked graph
        return self.op("ArgMax", inputs, node.name, axis=meta.dim + 1, keepdims=int(meta.keepdim), select_last_index=0)

    def _table(self, node: Node, inputs: list[str]) -> str:
        """Packed addresses (codes times place values, summed, plus each unit's first row in the stacked
        tables), one ``Gather`` from every unit's rows stacked into one initializer, then the output channels
        in order."""
        meta, producer = node.meta, self.graph.producers(node.name)[0]
        assert isinstance(meta, TableMeta)  # a checked graph
        layer = self.net.runtime.layers[meta.layer]
        kernel = TableKernel(node, layer, producer)
        units, fan_in = meta.index_map.shape
        weights = np.zeros((units, fan_in), np.int64)
        for u, table in enumerate(layer.tables):
            weights[u, : table.fan_in] = table.address_weights
        index = np.where(meta.index_map < 0, 0, meta.index_map)
        weights = np.where(meta.index_map < 0, 0, weights)
        x = inputs[0] if kernel.spatial else self.flat(inputs[0], producer, node.name)
        positions = tuple(producer.shape[:-1]) if kernel.spatial else ()
        digits = self.gather(x, index, len(positions) + 1, f"{node.name}/digits")  # (N, *P, units, fan_in)
        digits = self.op("Mul", [digits, self.const(f"{node.name}/place", weights)], f"{node.name}/weighted")
        address = self.reduce("ReduceSum", digits, -1, f"{node.name}/address")
        address = self.op("Add", [address, self.const(f"{node.name}/offsets", kernel.offsets.numpy())], "address")
        rows = self.const(f"{node.name}/tables", kernel.flat.numpy())  # (rows of all units, fan-out)
        out = self.op("Gather", [rows, address], f"{node.name}/lookup", axis=0)  # (N, *P, units, fan_out)
        out = self.reshape(out, (*positions, units * kernel.fan_out), f"{node.name}/outputs")
        if kernel.sources is not None:
            out = self.gather(out, kernel.sources.numpy(), len(positions) + 1, f"{node.name}/channels")
        if node.domain is not None and kernel.flat.numpy().dtype != np.int64:
            out = self.op("Cast", [out], f"{node.name}/codes", to=7)
        if positions and not (node.layout is not None and node.layout.channels_last):
            rank = len(positions)
            out = self.op("Transpose", [out], f"{node.name}/channels_first", perm=[0, rank + 1, *range(1, rank + 1)])
        return self.reshape(out, node.shape, node.name)
