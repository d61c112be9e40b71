"""The table-only runtime: evaluates an interlayer graph from its tables, never calling a layer's forward.

Every node is compiled once into a small kernel over batched code tensors. A table node forms the packed
addresses of all its units with one matrix product (row ``u`` holds unit ``u``'s place values at the
elements it reads, the bias the offset of its table in one flat array of all the layer's tables) and
reads that flat array with one gather, never comparing against rows. Windows copy their ``unfold`` views
once; pads fill each channel's code of real 0 and copy the elements their index maps name.

Codes travel between nodes in the smallest dtype that holds them exactly and become floats to form
addresses: floats add integers exactly while every sum stays below 2**24 (float32), so a layer whose flat
array has more rows forms its addresses in float64 (exact below 2**53), and codes travel as float32 only
for domains of at most 2**24 values.

Layouts: non-spatial table layers run *feature-major*, on ``(features, batch)`` tensors, so the addresses
of one unit are one contiguous row and its lookups all land in its own small table, which stays in cache;
their mostly-zero address matrices multiply as sparse ones. Every other node runs on the graph's own
``(batch, *shape)`` layout; switching is a transposed view, never a copy. A spatial table multiplies each
sample's transposed window vectors, so its output comes out channels-first.

Without host nodes, a large batch is evaluated in chunks of samples with a few MiB of intermediates, every
node of the graph on one chunk before the next; host modules always see the whole batch, as the model would.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._util.modules import eval_mode, run_module
from ..domain import Domain
from ..errors import (
    DomainError,
    EnumerationError,
    InputError,
    IOTableError,
    MissingRowError,
    OptionError,
    SpecError,
)
from ..front.spec import PaddingMode
from ..graph.graph import (
    ElementOrder,
    Graph,
    GraphError,
    HostMeta,
    Node,
    NodeKind,
    PadMeta,
    TableMeta,
    WindowMeta,
    pad_index_map,
)
from ..graph.interpret import GraphInterpreter

__all__ = ["InputError", "Runtime", "channel_values"]


Kernel = Callable[[list[torch.Tensor]], torch.Tensor]

#: An intermediate of a run: a node's output in one layout (``True``: feature-major).
Key = tuple[str, bool]

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
_FLOAT32_EXACT = 2**24

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


def _codes_dtype(low: int, high: int) -> torch.dtype:
    """The smallest integer dtype holding every value from ``low`` to ``high``."""
    for dtype in (torch.uint8, torch.int16, torch.int32):
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return torch.int64


@dataclass(frozen=True)
class _Step:
    """One kernel call of a run: the intermediates it reads, the one it writes, those it is the last to read."""

    kernel: Kernel
    inputs: tuple[Key, ...]
    output: Key
    release: tuple[Key, ...]


class Runtime(GraphInterpreter[Any]):
    """Compiled kernels of a graph's nodes; :meth:`run` evaluates a batch of input codes.

    Compiling is a walk over the graph (:class:`~iotable.interpret.GraphInterpreter`): one method per node
    kind makes that node's kernel. :meth:`_schedule` then orders the kernel calls of a run, fusing windows
    into the tables that read them and switching layouts where a node reads the other one.
    """

    def __init__(self, graph: Graph, layers: dict[str, Any]) -> None:
        super().__init__(graph)
        self._layers = layers
        self._kernels: dict[str, Any] = self.run_graph()
        self._input = InputEncoder(graph.nodes[0])
        self._output_values = channel_values(graph.nodes[-1])
        self._steps, self._feature_major = self._schedule(fuse=True)
        self._unfused: tuple[list[_Step], dict[str, bool]] | None = None  # every node's own step, for capture
        self._small: tuple[list[_Step], dict[str, bool]] | None = None  # for small batches (see _SMALL_RUN)
        self._host = any(node.kind is NodeKind.HOST for node in graph.nodes)
        self._per_sample = self._sample_bytes()

    def kernel(self, name: str) -> Any:
        """The compiled kernel of node ``name`` (a :class:`TableKernel` for a table node)."""
        return self._kernels[name]

    # -- the public face (used by TableNetwork) -----------------------------------------------------------

    def encode(self, x: Any, *, codes: bool, input_shape: tuple[int, ...], what: str = "net.run") -> torch.Tensor:
        """Validate a batch; return its input codes in a dtype that holds them exactly (float32 or integer).

        Errors start with ``what``, the name of the call that was given the batch."""
        return self._input(x, codes=codes, input_shape=input_shape, what=what)

    def run(
        self, codes: torch.Tensor, *, capture: bool = False, values: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Evaluate the graph on input codes ``(N, *input shape)``; return the output and, if asked, every node's.

        Output codes are int64 (``values=True``: float32 values of a quantized output, decoded chunk by
        chunk), raw outputs as the last node gives them; captured codes are int64 in the graph's layout.
        """
        with contextlib.ExitStack() as stack:  # host modules in eval mode once for the run, not once per call
            for node in self.graph.nodes_of(NodeKind.HOST) if self._host else ():
                stack.enter_context(eval_mode(node.meta.module))
            if self._host:
                stack.enter_context(torch.inference_mode())
            return self._run(codes, capture=capture, values=values)

    def _run(self, codes: torch.Tensor, *, capture: bool, values: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        n = codes.shape[0]
        if self._host and not capture and n > _SMALL_RUN and self._chunk(n) < n:
            return self._run_to_hosts(codes, values=values), {}
        chunk = n if capture or self._host or n == 0 else self._chunk(n)
        plan = (self._steps, self._feature_major)
        if capture:  # fused steps skip the window nodes they read through: capture every node's own output
            if self._unfused is None:
                self._unfused = self._schedule(fuse=True, fused=False)
            plan = self._unfused
        elif n <= _SMALL_RUN and codes.numel() <= _SMALL_CODES:
            if self._small is None:
                self._small = self._schedule(fuse=True, small=True)
            plan = self._small
        if chunk >= n:
            env = self._evaluate(codes, plan[0], capture=capture)
            return self._output(env, n, plan, values=values), (self._captured(env, n, plan) if capture else {})
        out: torch.Tensor | None = None
        try:
            for start in range(0, n, chunk):
                part = codes[start : start + chunk]
                env = self._evaluate(part, plan[0], capture=False)
                result = self._output(env, part.shape[0], plan, values=values)
                if out is None:
                    out = torch.empty((n, *result.shape[1:]), dtype=result.dtype)
                out[start : start + part.shape[0]] = result
        except MissingRowError:
            # Report the missing row a whole-batch run meets first (layer by layer), not the first chunk's.
            self._evaluate(codes, plan[0], capture=False)
            raise
        assert out is not None  # n > chunk >= 1
        return out, {}

    def _run_to_hosts(self, codes: torch.Tensor, *, values: bool) -> torch.Tensor:
        """A large batch through a graph with host nodes: the tables before the first host in chunks (cache-sized
        intermediates), the host nodes and what follows them on the whole batch, as the model runs them."""
        steps, feature_major = self._steps, self._feature_major
        first = next(i for i, step in enumerate(steps) if self.graph[step.output[0]].kind is NodeKind.HOST)
        before, after = steps[:first], steps[first:]
        made = {(self.graph.nodes[0].name, False)} | {step.output for step in before}
        needed = list(dict.fromkeys(k for step in after for k in step.inputs if k in made))
        n, chunk = codes.shape[0], self._chunk(codes.shape[0])
        parts: dict[Key, list[torch.Tensor]] = {k: [] for k in needed}
        try:
            for start in range(0, n, chunk):
                env = self._evaluate(codes[start : start + chunk], before, capture=False, keep=needed)
                for k in needed:
                    parts[k].append(_as_tensor(env[k]))
        except MissingRowError:
            # Report the missing row a whole-batch run meets first (layer by layer), not the first chunk's.
            self._evaluate(codes, before, capture=False, keep=needed)
            raise
        env = {k: torch.cat(v, dim=1 if k[1] else 0) for k, v in parts.items()}  # feature-major: samples last
        for step in after:
            env[step.output] = step.kernel([env[k] for k in step.inputs])
            for key in step.release:
                del env[key]
        return self._output(env, n, (steps, feature_major), values=values)

    # -- evaluation ---------------------------------------------------------------------------------------

    def _evaluate(
        self, codes: torch.Tensor, steps: list[_Step], *, capture: bool, keep: Sequence[Key] = ()
    ) -> dict[Key, torch.Tensor]:
        """Run ``steps`` on ``codes``; intermediates go when their last reader has run (``keep``: not these)."""
        env: dict[Key, torch.Tensor] = {(self.graph.nodes[0].name, False): codes}
        for step in steps:
            env[step.output] = step.kernel([env[k] for k in step.inputs])
            if not capture:
                for key in step.release:
                    if key not in keep:
                        del env[key]
        return env

    def _chunk(self, n: int) -> int:
        """Samples per chunk: about :data:`_CHUNK_BUDGET` bytes of intermediates, chunks of equal size."""
        chunk = max(1, _CHUNK_BUDGET // self._per_sample)
        parts = -(-n // chunk)
        return -(-n // parts)

    def _output(self, env: dict[Key, torch.Tensor], n: int, plan: Any, *, values: bool) -> torch.Tensor:
        """The output node's codes as int64 (or ``values``: decoded) in the graph's layout, contiguous."""
        node = self.graph.nodes[-1]
        steps, feature_major = plan
        if values and node.domain is not None:
            x = _as_tensor(env[steps[-1].output])
            x = x.t().reshape(n, *node.shape) if feature_major[node.name] else x
            return decode(x, node, self._output_values)
        return self._graph_layout(node, env[steps[-1].output], n, feature_major)

    def _graph_layout(self, node: Node, x: torch.Tensor, n: int, feature_major: dict[str, bool]) -> torch.Tensor:
        """A node's output in the graph's layout, contiguous; codes as int64."""
        x = _as_tensor(x)
        if feature_major[node.name]:
            x = x.t().reshape(n, *node.shape)
        dtype = torch.int64 if node.domain is not None else x.dtype
        return x.to(dtype, memory_format=torch.contiguous_format).contiguous()  # `to` keeps a same-dtype view

    def _captured(self, env: dict[Key, torch.Tensor], n: int, plan: Any) -> dict[str, torch.Tensor]:
        feature_major = plan[1]
        return {
            node.name: self._graph_layout(node, env[(node.name, feature_major[node.name])], n, feature_major)
            for node in self.graph.nodes
        }

    def _sample_bytes(self) -> int:
        """Estimated bytes of the intermediates of one sample, kernels' scratch included."""
        outputs = sum(math.prod(node.shape) * 4 for node in self.graph.nodes)
        scratch = max(
            (k.sample_bytes for k in self._kernels.values() if isinstance(k, TableKernel)),
            default=0,
        )
        return max(1, outputs + scratch)

    # -- scheduling ---------------------------------------------------------------------------------------

    def _schedule(self, *, fuse: bool, fused: bool = True, small: bool = False) -> tuple[list[_Step], dict[str, bool]]:
        """Kernel calls in graph order, with layout switches where a node reads the other layout, and whether
        each node's output is feature-major.

        ``fused``: a spatial table that is the only reader of its window node reads the window's input instead
        and forms its addresses as one convolution (:meth:`TableKernel.convolve`); the window is not run.
        ``small``: for a few samples, every node in the graph's layout and non-spatial tables by
        :meth:`TableKernel.small` (a few numpy calls, where each torch call's fixed cost dominates).
        """
        fuse = fuse and fused
        readers = {node.name: len(self.graph.consumers(node.name)) for node in self.graph.nodes}
        through = self._fusions(readers) if fuse else {}  # table -> the window (and pad) it reads through
        valued = self._valued_hosts(readers) if fuse else {}  # host -> the table whose values it reads
        self._place_channels(through)
        kernels = dict(self._kernels)
        for host, table in valued.items():
            kernels[table] = self._kernels[table].emitting_values()
            kernels[host] = self._host_kernel(self.graph[host], decoded=True)
        calls, feature_major = self._calls(kernels, through, valued, small=small)
        last_use: dict[Key, int] = {}
        for i, (_, inputs, _) in enumerate(calls):
            for key in inputs:
                last_use[key] = i
        steps = [
            _Step(kernel, inputs, output, tuple(k for k in dict.fromkeys(inputs) if last_use[k] == i))
            for i, (kernel, inputs, output) in enumerate(calls)
        ]
        return steps, feature_major

    def _fusions(self, readers: dict[str, int]) -> dict[str, tuple[str, ...]]:
        """Spatial tables that read their window's input directly (:meth:`TableKernel.fuse`): the window, and
        the constant pad before it, that each reads through."""
        fused: dict[str, tuple[str, ...]] = {}
        for node in self.graph.nodes_of(NodeKind.TABLE):
            compiled = self._kernels[node.name]
            window = self.graph.producers(node.name)[0]
            if window.kind is not NodeKind.WINDOW or readers[window.name] != 1:
                continue
            pad: Node | None = self.graph.producers(window.name)[0]
            if pad is None or pad.kind is not NodeKind.PAD or readers[pad.name] != 1 or not _constant_pad(pad):
                pad = None
            source = self.graph.producers((pad or window).name)[0]
            if compiled.fuse(window, pad, source.shape):
                fused[node.name] = (window.name,) if pad is None else (window.name, pad.name)
        return fused

    def _valued_hosts(self, readers: dict[str, int]) -> dict[str, str]:
        """Hosts that read one table's codes (through reshapes no one else reads): that table looks up values
        instead of codes, and the host decodes nothing."""
        valued: dict[str, str] = {}
        for node in self.graph.nodes_of(NodeKind.HOST):
            source = self.graph.producers(node.name)[0]
            while source.kind is NodeKind.RESHAPE and readers[source.name] == 1:
                source = self.graph.producers(source.name)[0]
            compiled = self._kernels[source.name]
            if isinstance(compiled, TableKernel) and readers[source.name] == 1 and compiled.can_emit_values():
                valued[node.name] = source.name
        return valued

    def _place_channels(self, fused: dict[str, tuple[str, ...]]) -> None:
        """A fused table whose every reader is another fused table hands it channels innermost (the layout its
        convolution reads fastest); others hand out channels first (what flattens and hosts read)."""
        through = {through[-1] for through in fused.values()}  # the first node each fused table reads through
        for table in fused:
            consumers = [self.graph[name] for name in self.graph.consumers(table)]
            self._kernels[table].channels_inner = bool(consumers) and all(
                n.kind in (NodeKind.WINDOW, NodeKind.PAD) and n.name in through for n in consumers
            )

    def _calls(
        self, kernels: dict[str, Any], fused: dict[str, tuple[str, ...]], valued: dict[str, str], *, small: bool
    ) -> tuple[list[tuple[Kernel, tuple[Key, ...], Key]], dict[str, bool]]:
        """The kernel calls of a run, node by node, and whether each node's output is feature-major."""
        skipped = {name for through in fused.values() for name in through}
        feature_major: dict[str, bool] = {}
        calls: list[tuple[Kernel, tuple[Key, ...], Key]] = []
        switched: set[Key] = set()
        for node in self.graph.nodes:
            if node.kind is NodeKind.INPUT:
                feature_major[node.name] = False
                continue
            mode = False if small else self._layout_of(node, feature_major)
            feature_major[node.name] = mode
            if node.name in skipped:
                continue
            compiled = kernels[node.name]
            if node.name in fused:
                source = self.graph.inputs(fused[node.name][-1])[0]
                kernel = compiled.small_convolve if small else compiled.convolve
                calls.append((kernel, ((source, False),), (node.name, False)))
            elif small:
                kernel = self._small_kernel(node, compiled, decoded=node.name in valued)
                calls.append((kernel, tuple((p, False) for p in self.graph.inputs(node.name)), (node.name, False)))
            else:
                calls += self._switched_call(node, mode, compiled, feature_major, switched)
        return calls, feature_major

    def _small_kernel(self, node: Node, compiled: Any, *, decoded: bool) -> Kernel:
        """A node's kernel for small batches: numpy between small tables; torch (a view of the same memory)
        for every other kernel."""
        if isinstance(compiled, TableKernel) and not compiled.spatial and compiled.care is None:
            return compiled.small
        if node.kind in (NodeKind.OUTPUT, NodeKind.DUPLICATE, NodeKind.RESHAPE):
            return compiled  # type: ignore[no-any-return]
        if node.kind is NodeKind.HOST:
            return self._small_host_kernel(node, decoded=decoded)
        return _torch_inputs(compiled)

    def _switched_call(
        self, node: Node, mode: bool, compiled: Any, feature_major: dict[str, bool], switched: set[Key]
    ) -> list[tuple[Kernel, tuple[Key, ...], Key]]:
        """A node's call in layout ``mode`` (feature-major or not), after a switch of each input that runs in
        the other layout (once per input and layout)."""
        calls: list[tuple[Kernel, tuple[Key, ...], Key]] = []
        keys = []
        for p in self.graph.inputs(node.name):
            if feature_major[p] != mode and (p, mode) not in switched:
                calls.append((self._switch(self.graph[p], to_feature_major=mode), ((p, not mode),), (p, mode)))
                switched.add((p, mode))
            keys.append((p, mode))
        calls.append((self._kernel(node, mode, compiled), tuple(keys), (node.name, mode)))
        return calls

    def _layout_of(self, node: Node, feature_major: dict[str, bool]) -> bool:
        """Whether ``node`` runs feature-major: non-spatial tables do; pass-through nodes follow their input."""
        if node.kind is NodeKind.TABLE:
            return not node.spatial_size
        if node.kind in (NodeKind.OUTPUT, NodeKind.DUPLICATE, NodeKind.RESHAPE):
            return feature_major[self.graph.inputs(node.name)[0]]
        return False

    @staticmethod
    def _switch(node: Node, *, to_feature_major: bool) -> Kernel:
        """A layout switch of ``node``'s output: a transposed view (the batch axis moves to the other end)."""
        if to_feature_major:
            return lambda xs: xs[0].reshape(xs[0].shape[0], -1).t()
        shape = node.shape
        return lambda xs: xs[0].t().reshape(xs[0].shape[1], *shape)

    @staticmethod
    def _kernel(node: Node, feature_major: bool, compiled: Any) -> Kernel:
        if isinstance(compiled, TableKernel):
            return compiled.columns if feature_major else compiled
        if feature_major and node.kind is NodeKind.RESHAPE:  # feature-major tensors are already flat
            return _identity
        return compiled  # type: ignore[no-any-return]

    # -- compilation: one kernel per node, by kind (GraphInterpreter) -------------------------------------

    def input(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """The input codes, as they are."""
        return _identity

    def output(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """The output: its producer's, as it is."""
        return _identity

    def duplicate(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """A fan-out: its producer's output, as it is (every consumer reads the same tensor)."""
        return _identity

    def reshape(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """A view of the codes in the node's shape."""
        shape = node.shape
        return lambda xs: xs[0].reshape(xs[0].shape[0], *shape)

    def join(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """Operands concatenated along the channel axis."""
        axis = -1 if node.layout is not None and node.layout.channels_last else 1
        return lambda xs: torch.cat(xs, dim=axis)

    def table(self, node: Node, inputs: Sequence[Any]) -> TableKernel:
        """The table layer's lookups (:class:`TableKernel`)."""
        assert isinstance(node.meta, TableMeta)  # a checked graph
        return TableKernel(node, self._layers[node.meta.layer], self.graph.producers(node.name)[0])

    def host(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """The host module on decoded values."""
        return self._host_kernel(node)

    def pad(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """A pad node's kernel: exactly what its index map says each element holds.

        The maps pads produce (axis by axis, by :func:`~iotable.graph.pad_index_map`) run as a fill with the
        pad codes, one copy of the input and a slab copy per padded line; any other map runs as one gather.
        """
        meta = node.meta
        assert isinstance(meta, PadMeta)  # a checked graph
        in_shape = self.graph.producers(node.name)[0].shape
        channels_last = node.layout is not None and node.layout.channels_last
        index_map = np.asarray(meta.index_map, dtype=np.int64)
        channels = node.shape[-1] if channels_last else node.shape[0]
        fill = None
        if (index_map < 0).any():
            if meta.pad_codes is None:
                msg = f"graph: pad node {node.name!r} holds pad codes (index -1) but no pad_codes; see graph.check()"
                raise GraphError(msg)
            pad_codes = np.asarray(meta.pad_codes, dtype=np.int64)
            codes = torch.as_tensor(pad_codes).to(_codes_dtype(int(pad_codes.min()), int(pad_codes.max())))
            fill_shape = [1] * (len(node.shape) + 1)
            fill_shape[-1 if channels_last else 1] = -1
            fill = codes.reshape(fill_shape)
        try:
            expected = pad_index_map(in_shape, meta.padding, meta.mode, channels_last=channels_last)
        except (SpecError, OptionError):
            expected = None
        if expected is not None and np.array_equal(expected, index_map):
            return self._pad_by_axes(node, in_shape, fill, channels_last)
        return self._pad_by_gather(node, in_shape, fill, channels, channels_last)

    @staticmethod
    def _pad_by_axes(node: Node, in_shape: tuple[int, ...], fill: torch.Tensor | None, channels_last: bool) -> Kernel:
        padding, mode = node.meta.padding, node.meta.mode
        first = 1 if channels_last else 2  # the first spatial axis of a batch
        spatial = in_shape[:-1] if channels_last else in_shape[1:]
        interior = [slice(None)] * (len(in_shape) + 1)
        copies: list[list[tuple[int, int]]] = []  # per axis: (padded line, the padded line it copies)
        for axis, (n, (before, after)) in enumerate(zip(spatial, padding)):
            interior[first + axis] = slice(before, before + n)
            sources = mode.sources(n, before, after)
            edges = [q for q in range(len(sources)) if not before <= q < before + n and sources[q] >= 0]
            copies.append([(q, int(sources[q]) + before) for q in edges])

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0]
            dtype = x.dtype if fill is None else torch.promote_types(x.dtype, fill.dtype)
            out = torch.empty((x.shape[0], *node.shape), dtype=dtype)
            if fill is not None:
                out.copy_(fill.expand(out.shape))
            out[tuple(interior)] = x
            # Axis by axis from the last: the lines an axis copies are complete along the later axes, and
            # the region is the input's along the earlier ones, so corners copy copies, as torch pads.
            # One slab copy per padded line (a few per axis), each over the whole batch.
            for axis in reversed(range(len(copies))):
                region = out[tuple(interior[: first + axis])]
                for target, source in copies[axis]:
                    region.select(first + axis, target).copy_(region.select(first + axis, source))
            return out

        return kernel

    @staticmethod
    def _pad_by_gather(
        node: Node, in_shape: tuple[int, ...], fill: torch.Tensor | None, channels: int, channels_last: bool
    ) -> Kernel:
        """One gather from the flat input followed by each channel's pad code (where the map holds ``-1``)."""
        index_map = np.asarray(node.meta.index_map, dtype=np.int64)
        n_in = math.prod(in_shape)
        channel = np.indices(index_map.shape)[-1 if channels_last else 0]
        flat = torch.as_tensor(np.where(index_map < 0, n_in + channel, index_map).reshape(-1))
        codes = None if fill is None else fill.reshape(1, -1)

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0].reshape(xs[0].shape[0], -1)
            if codes is not None:
                dtype = torch.promote_types(x.dtype, codes.dtype)
                x = torch.cat([x.to(dtype), codes.to(dtype).expand(x.shape[0], channels)], dim=1)
            return x.index_select(1, flat).view(x.shape[0], *node.shape)

        return kernel

    def window(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """Window vectors at every position, in the window's element order, copied once from unfold views."""
        meta = node.meta
        assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
        kernel_size, stride, dilation = meta.kernel, meta.stride, meta.dilation
        channels_last = node.layout.channels_last
        channel_major = meta.element_order is ElementOrder.CHANNEL_MAJOR
        rank, width = len(kernel_size), node.shape[-1]
        spatial_axes, kernel_axes = tuple(range(2, 2 + rank)), tuple(range(2 + rank, 2 + 2 * rank))
        vector_axes = (1, *kernel_axes) if channel_major else (*kernel_axes, 1)
        domains = self.graph.producers(node.name)[0].channel_domains() or ()
        narrow = max((len(d) for d in domains), default=0) <= _FLOAT32_EXACT

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0]
            if channels_last:
                x = torch.movedim(x, -1, 1)
            if narrow and x.element_size() > 4:  # int64 input codes: half the bytes to copy, exactly
                x = x.to(torch.float32)
            n = x.shape[0]
            for axis in range(rank):
                span = (kernel_size[axis] - 1) * dilation[axis] + 1
                x = x.unfold(2 + axis, span, stride[axis])
            taps: tuple[Any, ...] = (Ellipsis, *(slice(None, None, d) for d in dilation))
            x = x[taps]  # (N, C, *P, *K)
            positions = x.shape[2 : 2 + rank]
            # Copied vector-major, positions innermost (where the unfolded views are contiguous, many times
            # faster than a vector-innermost copy); the graph's (N, *P, vector) layout is a view of it, and
            # the table's product reads the vector-major copy in place.
            vectors = x.permute(0, *vector_axes, *spatial_axes).reshape(n, width, *positions)
            return torch.movedim(vectors, 1, -1)

        return kernel

    def pool(self, node: Node, inputs: Sequence[Any]) -> Kernel:
        """Max-pooling of codes: strided maxima where the windows tile the input, else torch's max-pool."""
        meta = node.meta
        rank = len(node.shape) - 1
        fn = F.max_pool1d if rank == 1 else F.max_pool2d
        args = {k: getattr(meta, k) for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode")}
        size = meta.kernel_size
        if (
            size == meta.stride
            and set(meta.padding) == {0}
            and set(meta.dilation) == {1}
            and not (node.layout is not None and node.layout.channels_last)
        ):
            out = node.shape[1:]

            def tiles(xs: list[torch.Tensor]) -> torch.Tensor:
                # Windows that tile the input: the maximum of the strided views of each tap, in the codes' own
                # dtype (codes ascend with values, so the max of codes is the code of the max).
                x = xs[0]
                whole: tuple[Any, ...] = (Ellipsis, *(slice(0, o * k) for o, k in zip(out, size)))
                x = x[whole]
                if rank == 1:
                    taps = [x[..., j :: size[0]] for j in range(size[0])]
                else:
                    taps = [x[..., i :: size[0], j :: size[1]] for i in range(size[0]) for j in range(size[1])]
                result = taps[0]
                for tap in taps[1:]:
                    result = torch.maximum(result, tap)
                return result.contiguous()

            return tiles

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            # Codes ascend with values, so the max of codes is the code of the max (exact below 2**24).
            return fn(xs[0].to(torch.float32), **args).to(xs[0].dtype)

        return kernel

    def _host_kernel(self, node: Node, *, decoded: bool = False) -> Kernel:
        """A host node's module on its input's values (``decoded``: the input already holds them)."""
        assert isinstance(node.meta, HostMeta)  # a checked graph
        module = node.meta.module
        producer = self.graph.producers(node.name)[0]
        table = channel_values(producer)

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            # Contiguous, as the model hands its tensors on: a kernel may sum in another order on other strides.
            values = (xs[0] if decoded else decode(xs[0], producer, table)).contiguous()
            return run_module(module, values, node.name, switched=True)  # in eval_mode for the run

        return kernel

    def _small_host_kernel(self, node: Node, *, decoded: bool) -> Kernel:
        """:meth:`_host_kernel` for a few samples: numpy codes decoded by numpy, the module called directly
        (the run holds eval and inference mode, see :meth:`run`)."""
        assert isinstance(node.meta, HostMeta)  # a checked graph
        module = node.meta.module
        producer = self.graph.producers(node.name)[0]
        full = self._host_kernel(node, decoded=decoded)
        table = channel_values(producer)
        values = None if table is None or len(table[1]) > 1 else table[0].numpy()

        def kernel(xs: list[Any]) -> torch.Tensor:
            x = xs[0]
            if not isinstance(x, np.ndarray) or (values is None and not decoded):
                return full([_as_tensor(x)])
            inputs = x if decoded or values is None else values[x]
            try:
                out = module(torch.from_numpy(np.ascontiguousarray(inputs)))
            except IOTableError:
                raise
            except Exception as exc:  # the host is a black box: its failure reported with context, as run_module
                msg = f"{node.name}: forward failed on an input of shape {inputs.shape}: {type(exc).__name__}: {exc}"
                raise EnumerationError(msg) from exc
            if not isinstance(out, torch.Tensor):
                return full([_as_tensor(x)])  # run_module reports it
            return out

        return kernel


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
        units, tables = layer.plan.units, layer.tables
        self.node, self.units = node, units
        self.spatial = producer.kind is NodeKind.WINDOW
        self.channels_last = node.layout is not None and node.layout.channels_last
        index_map = np.asarray(meta.index_map, dtype=np.int64)
        self.fan_out = fan_out = max(t.fan_out for t in tables)
        offsets, mapped = self._store_tables(tables, raw=layer.plan.output_domain is None)
        identity = len(mapped) == len(units) * fan_out and (mapped == np.arange(len(mapped))).all()
        self.sources = None if identity else torch.as_tensor(mapped)
        self.index = torch.as_tensor(np.where(index_map < 0, 0, index_map))
        self.offsets = torch.as_tensor(offsets)
        # Addresses as one matrix product: column u holds unit u's place values at the elements it reads.
        # Every partial sum is a non-negative integer no larger than the layer's last row, so floats form
        # it exactly while the layer has fewer than 2**24 rows (float32), else in float64 (below 2**53).
        width = int(producer.shape[-1] if self.spatial else math.prod(producer.shape))
        dtype = np.float32 if self.total <= _FLOAT32_EXACT else np.float64
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
            self.flat = self.flat.to(_codes_dtype(min(0, int(flat.min(initial=0))), max(top, int(flat.max(initial=0)))))
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


def _vector_at(vectors: torch.Tensor, positions: int) -> Callable[[int], torch.Tensor]:
    """The input vector of lookup ``at`` (sample ``at // positions``, position ``at % positions``)."""
    return lambda at: vectors[at // positions, at % positions]


def _identity(xs: list[torch.Tensor]) -> torch.Tensor:
    """A node that passes its one input on (input, output, duplicate)."""
    return xs[0]


def _address_matrix(tables: Sequence[Any], index_map: np.ndarray, width: int, dtype: Any) -> np.ndarray:
    """``(width, units)``: column ``u`` holds unit ``u``'s place values at the elements it reads (summed where
    an element feeds several of its inputs), filled for all units at once."""
    units, fan_in = index_map.shape
    weights = np.zeros((units, fan_in), dtype=np.int64)
    for u, table in enumerate(tables):  # one short vector per table
        weights[u, : table.fan_in] = table.address_weights
    driven = index_map >= 0
    matrix = np.zeros((width, units), dtype=dtype)
    np.add.at(matrix, (index_map[driven], np.nonzero(driven)[0]), weights[driven])
    return matrix


def _constant_pad(pad: Node) -> bool:
    """Whether a pad node pads with its channels' constant codes as wide before as after each axis: what a
    convolution's own padding (plus a fixed border term) does, so that it fuses into the convolution."""
    meta = pad.meta
    assert isinstance(meta, PadMeta)  # a checked graph
    zeros = meta.mode is PaddingMode.ZEROS and meta.pad_codes is not None
    return zeros and all(before == after for before, after in meta.padding)


def _conv_groups(weight: np.ndarray) -> int:
    """The most groups a convolution with ``weight`` ``(rows, channels, taps)`` splits into: row blocks that
    read only their own block of channels (a depthwise table layer is as many groups as channels)."""
    rows, channels = weight.shape[:2]
    reads = (weight != 0).any(axis=2)  # (rows, channels)
    for groups in range(math.gcd(rows, channels), 1, -1):
        if rows % groups or channels % groups:
            continue
        row_block = np.arange(rows) // (rows // groups)
        channel_block = np.arange(channels) // (channels // groups)
        if not (reads & (row_block[:, None] != channel_block[None, :])).any():
            return groups
    return 1


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
        self._grid = {dtype: _Grid.of(self.domains, dtype) for dtype in (torch.float32, torch.float64)}
        self._radix = len(self.domains[0]) if len(set(self.domains)) == 1 else None
        self._float32_codes = max(len(d) for d in self.domains) <= _FLOAT32_EXACT

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
        x = x.cpu()
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
class _Grid:
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
    def of(cls, domains: tuple[Domain, ...], dtype: torch.dtype) -> _Grid | None:
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
