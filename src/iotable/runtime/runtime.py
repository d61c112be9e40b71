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
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._util.modules import eval_mode
from ..errors import InputError, MissingRowError
from ..graph.graph import Graph, Node
from ..graph.interpret import GraphInterpreter
from ..graph.kind import definition
from .addressing import _constant_pad
from .codes import (
    _CHUNK_BUDGET,
    _SMALL_CODES,
    _SMALL_RUN,
    InputEncoder,
    Kernel,
    _as_tensor,
    _torch_inputs,
    channel_values,
    decode,
    identity,
)
from .host import host_kernel, small_host_kernel
from .table import TableKernel

__all__ = ["InputEncoder", "InputError", "Kernel", "Runtime", "TableKernel", "channel_values", "decode"]

#: An intermediate of a run: a node's output in one layout (``True``: feature-major).
Key = tuple[str, bool]


@dataclass(frozen=True)
class _Step:
    """One kernel call of a run: the intermediates it reads, the one it writes, those it is the last to read."""

    kernel: Kernel
    inputs: tuple[Key, ...]
    output: Key
    release: tuple[Key, ...]


class Runtime(GraphInterpreter[Any]):
    """Compiled kernels of a graph's nodes; :meth:`run` evaluates a batch of input codes.

    Compiling is a walk over the graph (:class:`~iotable.graph.GraphInterpreter`): one method per node
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
        self._host = any(node.kind.hosted for node in graph.nodes)
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
            for node in self.graph.host_nodes() if self._host else ():
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
        first = next(i for i, step in enumerate(steps) if self.graph[step.output[0]].kind.hosted)
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
            kernels[host] = host_kernel(self.graph, self.graph[host], decoded=True)
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
        for node in self.graph.table_nodes():
            compiled = self._kernels[node.name]
            window = self.graph.producers(node.name)[0]
            if not window.kind.windowed or readers[window.name] != 1:
                continue
            pad: Node | None = self.graph.producers(window.name)[0]
            if pad is None or not pad.kind.pads or readers[pad.name] != 1 or not _constant_pad(pad):
                pad = None
            source = self.graph.producers((pad or window).name)[0]
            if compiled.fuse(window, pad, source.shape):
                fused[node.name] = (window.name,) if pad is None else (window.name, pad.name)
        return fused

    def _valued_hosts(self, readers: dict[str, int]) -> dict[str, str]:
        """Hosts that read one table's codes (through reshapes no one else reads): that table looks up values
        instead of codes, and the host decodes nothing."""
        valued: dict[str, str] = {}
        for node in self.graph.host_nodes():
            source = self.graph.producers(node.name)[0]
            while source.kind.reshapes and readers[source.name] == 1:
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
                (n.kind.windowed or n.kind.pads) and n.name in through for n in consumers
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
            if node.kind.is_input:
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
        if definition(node.kind).passes_through:
            return compiled  # type: ignore[no-any-return]
        if node.kind.hosted:
            return small_host_kernel(self.graph, node, decoded=decoded)
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
        if node.kind.tabulated:
            return not node.spatial_size
        if definition(node.kind).passes_through:
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
        if feature_major and definition(node.kind).passes_through:  # feature-major tensors are already flat
            return identity
        return compiled  # type: ignore[no-any-return]

    # -- compilation: one kernel per node, by its kind's definition -------------------------------------

    @property
    def layers(self) -> dict[str, Any]:
        """The network's table layers by name (what table nodes look up)."""
        return self._layers

    def run_node(self, node: Node, inputs: Sequence[Any]) -> Any:
        """The node's kernel, made by its kind (:meth:`~iotable.graph.kind.NodeKindDef.compile`)."""
        return definition(node.kind).compile(self, node)
