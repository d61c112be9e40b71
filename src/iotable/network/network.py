"""Whole models: the table network (tables + interlayer graph) and its bit-exact verification."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .. import bits
from .._util import display as _display
from .._util.modules import module_dtype, run_module
from .._util.progress import progress_bar
from ..domain import Domain
from ..errors import InputError, LayerNotFoundError, ModelError, SpecError, TableTooLargeError
from ..front.modelcheck import check_float32, warn_training
from ..front.plan import LayerPlan, _plan
from ..front.registry import Role, kind_of, role_of
from ..front.reuse import remember, remembered, structure_key
from ..front.spec import _ATTR, Layout, PaddingMode, Spec, decompose, spec_of
from ..front.trace import Arithmetic, Step, segment, trace
from ..graph.graph import (
    SUMMARY_COLUMNS,
    DuplicateMeta,
    Edge,
    ElementOrder,
    Graph,
    HostMeta,
    InputMeta,
    JoinMeta,
    Meta,
    Node,
    NodeKind,
    OutputMeta,
    PadMeta,
    PoolMeta,
    ReshapeMeta,
    TableMeta,
    WindowMeta,
    pad_index_map,
    text_table,
    window_buffer_depth,
)
from ..graph.kind import definition
from ..lutnet import LutResults
from ..nn import domain_of
from ..nodekinds.table import expected_index_map  # importing the kinds registers them
from ..runtime.runtime import Runtime, decode
from ..table import IOTable
from ..tabulate.layers import LayerTables, tabulate_layers
from .observe import restrict

if TYPE_CHECKING:
    from ..graph.diagram import Diagram

__all__ = ["InputError", "TableNetwork", "VerifyReport", "build_network", "verify"]


class _Chain(nn.Sequential):
    """The modules of one table layer, run in order (they stay the model's own modules)."""


class _AddThen(nn.Module):
    """An add of two quantized tensors stacked along the channel axis, then the modules after it."""

    def __init__(self, modules: Sequence[nn.Module], *, channels: int, channel_axis: int) -> None:
        super().__init__()
        self.tail = _Chain(*modules)
        self.channels, self.channel_axis = channels, channel_axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(x, self.channels, dim=self.channel_axis)
        return self.tail(a + b)


def _layout_of(node: Node, rank: int) -> Layout:
    return node.layout if node.layout is not None else Layout.channels_first(rank + 1)


def _domain_for_layer(node: Node) -> Domain | tuple[Domain, ...]:
    if node.domain is None:
        msg = f"{node.name}: produces raw values, which no table can read; end that layer in a quantizer"
        raise ModelError(msg)
    return node.domain if isinstance(node.domain, Domain) else tuple(node.domain)


def _window_domain(domain: Any, channels_last: bool, kernel: int) -> Any:
    if isinstance(domain, Domain) or domain is None:
        return domain
    return tuple(domain) * kernel if channels_last else tuple(d for d in domain for _ in range(kernel))


def _unit_bits(plan: LayerPlan) -> tuple[int, ...]:
    """Address bits of each unit (units reading the same channels have the same)."""
    shared = plan.shared_domain  # one domain for every input: bits by fan-in, no walk over the domains
    if shared is not None:
        return tuple(u.fan_in * shared.bits for u in plan.units)
    bits: dict[tuple[int, ...], int] = {}
    for u in plan.units:
        if u.in_channels not in bits:
            bits[u.in_channels] = sum(d.bits for d in plan.unit_domains(u))
    return tuple(bits[u.in_channels] for u in plan.units)


def _unit_index_map(plan: LayerPlan) -> np.ndarray:
    """Index of each unit input in the vector a table reads (features, or one window in element order)."""
    units = plan.units
    lengths = np.fromiter((len(u.in_channels) for u in units), dtype=np.int64, count=len(units))
    flat = np.fromiter(itertools.chain.from_iterable(u.in_channels for u in units), dtype=np.int64)
    order = ElementOrder.of(plan.layout) if plan.geometry.rank else None
    return expected_index_map(lengths, flat, taps=plan.geometry.window, channels=plan.in_channels, order=order)


def _flatten_domain(domain: tuple[Domain, ...], src: Node) -> tuple[Domain, ...]:
    """Every element's domain of a flattened output of per-channel domains."""
    shape = (1,) * (len(src.shape) - 1)
    channels_last = src.layout is not None and src.layout.channels_last
    per_channel = np.arange(len(domain)).reshape((*shape, -1) if channels_last else (-1, *shape))
    return tuple(domain[c] for c in np.broadcast_to(per_channel, src.shape).reshape(-1))


class _Builder:
    """Turns segmented steps into graph nodes, precomputing each table layer on the way.

    Nodes are collected with the producers they read, by port; :meth:`finish` adds a duplicate node where
    a node feeds several consumers and makes the edges.
    """

    def __init__(self, *, input_domain: Any, input_layout: Layout | None, options: dict[str, Any]) -> None:
        self.nodes: dict[str, Node] = {}
        self.reads: dict[str, tuple[str, ...]] = {}
        self.planned: dict[str, tuple[nn.Module, LayerPlan]] = {}
        self.node_of: dict[str, str] = {}
        self.input_domain = input_domain
        self.input_layout = input_layout
        self.options = options

    def _unique(self, name: str) -> str:
        if name not in self.nodes:
            return name
        k = 1
        while f"{name}_{k}" in self.nodes:
            k += 1
        return f"{name}_{k}"

    def _add(self, node: Node, *reads: Node) -> Node:
        self.nodes[node.name] = node
        self.reads[node.name] = tuple(r.name for r in reads)
        return node

    def add(self, step: Step) -> None:
        handler = getattr(self, f"_{step.kind}")
        node = handler(step)
        self.nodes[node.name] = replace(node, fx_node=step.meta.get("fx_node"))
        self.node_of[step.name] = node.name

    def source(self, step: Step, k: int = 0) -> Node:
        return self.nodes[self.node_of[step.sources[k]]]

    # -- steps --------------------------------------------------------------------------------------------

    def _input(self, step: Step) -> Node:
        layout = self.input_layout or Layout.channels_first(len(step.shape) + 1)
        domain = self.input_domain
        if not isinstance(domain, Domain):
            channels = step.shape[-1] if layout.channels_last else step.shape[0]
            if len(domain) != channels:
                msg = (
                    f"input_domain lists {len(domain)} domain(s) for an input of {channels} channel(s) in layout "
                    f"{layout.value}; give one domain per channel, or pass input_layout= (e.g. 'NWC', 'NHWC') when "
                    "the input is channels-last"
                )
                raise ModelError(msg)
            domain = tuple(domain)
        return self._add(_node("input", InputMeta(), tuple(step.shape), layout, domain))

    def _output(self, step: Step) -> Node:
        src = self.source(step)
        return self._add(_node(self._unique("output"), OutputMeta(), src.shape, src.layout, src.domain), src)

    def _reshape(self, step: Step) -> Node:
        src = self.source(step)
        domain = src.domain
        if isinstance(domain, tuple) and step.shape != src.shape:
            if len(set(domain)) == 1:
                domain = domain[0]
            elif len(step.shape) == 1:  # flatten: every element keeps its channel's domain
                domain = _flatten_domain(domain, src)
            else:
                msg = f"{step.name}: reshaping channels of different domains into shape {step.shape} is not supported"
                raise ModelError(msg)
        layout = Layout.channels_first(len(step.shape) + 1) if domain is not None and len(step.shape) <= 3 else None
        node = _node(self._unique(step.name), ReshapeMeta(), tuple(step.shape), layout, domain)
        return self._add(node, src)

    def _pool(self, step: Step) -> Node:
        src = self.source(step)
        module = step.modules[0]
        if src.domain is None:
            msg = f"{step.name}: max-pool reads raw values from {src.name!r}; end that layer in a quantizer"
            raise ModelError(msg)
        if src.layout is not None and src.layout.channels_last:
            msg = f"{step.name}: torch max-pools read channels-first tensors, but {src.name!r} is {src.layout.value}"
            raise ModelError(msg)
        rank = len(step.shape) - 1
        fields = {key: _per_axis(getattr(module, key), rank) for key in ("kernel_size", "padding", "dilation")}
        stride = module.stride if module.stride is not None else module.kernel_size  # torch's default
        meta = PoolMeta(
            **fields, stride=_per_axis(stride, rank), ceil_mode=bool(module.ceil_mode), modules=tuple(step.module_names)
        )
        node = _node(self._unique(step.name), meta, tuple(step.shape), src.layout, src.domain)
        return self._add(node, src)

    def _concat(self, step: Step) -> Node:
        sources = [self.source(step, k) for k in range(len(step.sources))]
        domains: list[Domain] = []
        for src in sources:
            if src.layout is not None and src.layout.channels_last:
                msg = (
                    f"{step.name}: concat along dim 1 of the channels-last tensor {src.name!r} is not the channel axis"
                )
                raise ModelError(msg)
            domains += list(src.channel_domains() or ())
        domain: Any = domains[0] if len(set(domains)) == 1 else tuple(domains)
        layout = Layout.channels_first(len(step.shape) + 1)
        node = _node(self._unique(step.name), JoinMeta(), tuple(step.shape), layout, domain)
        return self._add(node, *sources)

    def _host(self, step: Step) -> Node:
        src = self.source(step)
        module = step.modules[0] if len(step.modules) == 1 else _Chain(*step.modules)
        meta = HostMeta(module=module, modules=tuple(step.module_names))
        return self._add(_node(self._unique(step.name), meta, tuple(step.shape), None, None), src)

    def _table(self, step: Step) -> Node:
        if step.mixing == "add":
            src, module = self._add_join(step)
        else:
            src = self.source(step)
            module = self._chain(step, src)
        try:
            layer_plan = _plan(
                module,
                input_domain=_domain_for_layer(src),
                example_input=torch.zeros(1, *src.shape),
                name=step.name,
                max_rows=self.options["max_rows"],
                frame_out=tuple(step.shape),  # the traced model ran these modules on an input of this shape
            )
        except TableTooLargeError as exc:
            layer_name = step.mixing or step.name
            msg = f"{exc}; or, to keep {layer_name!r} as a float layer run by torch, pass host=[{layer_name!r}]"
            raise TableTooLargeError(msg) from None
        if layer_plan.layout.channels_last:
            _refuse_channel_tensors(step, layer_plan)
        self.planned[step.name] = (module, layer_plan)
        return self._table_nodes(step, src, layer_plan)

    def _add_join(self, step: Step) -> tuple[Node, nn.Module]:
        """An add of two quantized tensors: a join gathering both, and the module summing them (fan-in 2)."""
        a, b = self.source(step, 0), self.source(step, 1)
        layout = _layout_of(a, len(a.shape))
        axis = len(a.shape) if layout.channels_last else 1
        shape = list(a.shape)
        shape[axis - 1] *= 2
        domains = tuple(a.channel_domains() or ()) + tuple(b.channel_domains() or ())
        if not domains:
            raise ModelError(f"{step.name}: an add must read two quantized tensors")
        name = self._unique(f"{step.name}:join")
        join = self._add(_node(name, JoinMeta(for_add=True), tuple(shape), layout, domains), a, b)
        channels = a.channels
        module = _AddThen(step.modules, channels=channels, channel_axis=axis)
        kernel: dict[str, Any] = {"kernel_size": 1} if layout.spatial_rank else {}
        out_domain = domain_of(step.modules[-1]) if step.modules else None
        decompose(
            module,
            fan_in=[[c, channels + c] for c in range(channels)],
            layout=layout,
            output_domain=out_domain,
            **kernel,
        )
        return join, module

    @staticmethod
    def _chain(step: Step, src: Node) -> nn.Module:
        """The step's modules as one module carrying the decomposition metadata of its mixing module."""
        module = _Chain(*step.modules)
        mixing = [m for m, n in zip(step.modules, step.module_names) if n == step.mixing]
        if mixing:
            # A declared output domain closes the layer (trace._closes), so it is the chain's only when the
            # mixing module comes last; the plan otherwise reads the chain's closing quantizer.
            spec = spec_of(mixing[0])
            if step.modules[-1] is not mixing[0]:
                spec = replace(spec, output_domain=None)
        else:
            spec = Spec(elementwise=True, layout=src.layout, source="elementwise modules between quantizers")
        module.__dict__[_ATTR] = spec
        return module

    def _table_nodes(self, step: Step, src: Node, plan: LayerPlan) -> Node:
        if src.kind is NodeKind.INPUT and src.layout != plan.layout and self.input_layout is None:
            src = self._add(replace(src, layout=plan.layout))  # the first layer tells the input's layout
        if src.layout is not None and src.layout != plan.layout and not isinstance(src.domain, Domain):
            msg = f"{step.name}: reads {src.name!r} as {plan.layout.value}, but it was produced as {src.layout.value}"
            raise ModelError(msg)
        if tuple(plan.frame_out) != tuple(step.shape) and plan.geometry.rank == 0:
            msg = f"{step.name}: the table layer makes shape {plan.frame_out}, but the model makes {step.shape}"
            raise ModelError(msg)
        reader = self._window_nodes(step, src, plan) if plan.geometry.rank else src
        meta = TableMeta(
            layer=step.name,
            units=plan.units,
            unit_bits=_unit_bits(plan),
            index_map=_unit_index_map(plan),
            modules=tuple(step.module_names),
        )
        node = _node(self._unique(step.name), meta, tuple(step.shape), plan.layout, plan.output_domain)
        return self._add(node, reader)

    def _window_nodes(self, step: Step, src: Node, plan: LayerPlan) -> Node:
        """The pad (where the layer pads) and window nodes a spatial table reads through."""
        g = plan.geometry
        channels_last = plan.layout.channels_last
        size = src.shape[:-1] if channels_last else src.shape[1:]
        positions = g.output_size(size)
        expected = (*positions, plan.out_channels) if channels_last else (plan.out_channels, *positions)
        if expected != tuple(step.shape):
            msg = (
                f"{step.name}: the window (kernel {g.kernel}, stride {g.stride}, dilation {g.dilation}, padding "
                f"{g.padding} as (before, after) per axis) over {size} gives outputs {expected}, but the model "
                f"makes {step.shape}"
            )
            raise ModelError(msg)
        reader = src
        if g.padded:
            reader = self._add(self._pad_node(step, src, plan), src)
            size = g.padded_size(size)
        meta = WindowMeta(
            kernel=g.kernel,
            stride=g.stride,
            dilation=g.dilation,
            channels=plan.in_channels,
            element_order=ElementOrder.of(plan.layout),
            buffer_depth=window_buffer_depth(g.kernel, g.dilation, size, plan.in_channels),
        )
        window = _node(
            self._unique(f"{step.name}:window"),
            meta,
            (*positions, plan.in_channels * g.window),
            plan.layout,
            _window_domain(reader.domain, channels_last, g.window),
        )
        return self._add(window, reader)

    def _pad_node(self, step: Step, src: Node, plan: LayerPlan) -> Node:
        """The pad node before a window: its mode, widths, pad codes and what each element copies."""
        g = plan.geometry
        codes = None
        if g.padding_mode is PaddingMode.ZEROS:
            codes = []
            for c, d in enumerate(plan.input_domains):
                if d.zero_code is None:
                    msg = (
                        f"{step.name}: padding feeds real 0, but input channel {c}'s domain {d!r} has no 0; "
                        "use a domain that holds 0, padding=0, or a padding_mode that copies input elements "
                        "('reflect', 'replicate', 'circular')"
                    )
                    raise ModelError(msg)
                codes.append(d.zero_code)
        try:
            index_map = pad_index_map(src.shape, g.padding, g.padding_mode, channels_last=plan.layout.channels_last)
        except SpecError as exc:
            msg = f"{step.name}: {exc} (input {src.shape})"
            raise ModelError(msg) from None
        meta = PadMeta(
            padding=g.padding,
            mode=g.padding_mode,
            pad_codes=None if codes is None else tuple(codes),
            index_map=index_map,
        )
        name = self._unique(f"{step.name}:pad")
        return _node(name, meta, tuple(index_map.shape), plan.layout, src.domain)

    # -- edges --------------------------------------------------------------------------------------------

    def finish(self) -> Graph:
        """The graph: the nodes in order, a duplicate node after each node read by several, and the edges."""
        consumers: dict[str, list[tuple[str, int]]] = {}
        for name, producers in self.reads.items():
            for port, producer in enumerate(producers):
                consumers.setdefault(producer, []).append((name, port))
        nodes: list[Node] = []
        source: dict[tuple[str, int], tuple[str, int]] = {}  # (consumer, port) -> (producer, output port)
        for node in self.nodes.values():
            nodes.append(node)
            readers = consumers.get(node.name, [])
            if len(readers) > 1:
                meta = DuplicateMeta(outputs=len(readers))
                dup = _node(f"{node.name}:dup", meta, node.shape, node.layout, node.domain)
                nodes.append(dup)
                source[(dup.name, 0)] = (node.name, 0)
                for out_port, reader in enumerate(readers):
                    source[reader] = (dup.name, out_port)
        by_name = {n.name: n for n in nodes}
        edges = []
        for node in nodes:
            ports = len(self.reads[node.name]) if node.name in self.reads else 1  # a duplicate reads one
            for port in range(ports):
                key = (node.name, port)
                producer, out_port = source[key] if key in source else (self.reads[node.name][port], 0)
                made = by_name[producer]
                edges.append(Edge(producer, out_port, node.name, port, made.shape, made.layout, made.domain))
        return Graph(nodes, edges).check()


def _node(name: str, meta: Meta, shape: tuple[int, ...], layout: Layout | None, domain: Any) -> Node:
    """A node of the kind its record belongs to (``meta.kind``, registered in :mod:`iotable.graph.kind`)."""
    return Node(name, definition(meta.kind).kind, shape, layout, domain, meta)


def _per_axis(value: Any, rank: int) -> tuple[int, ...]:
    """A pool's setting (one int for every axis, or one per axis) as one int per axis."""
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),) * rank


def _refuse_channel_tensors(step: Step, plan: LayerPlan) -> None:
    """Traced arithmetic with per-channel tensors is read channels-first: refuse it in a channels-last layer."""
    for m, name in zip(step.modules, step.module_names):
        if isinstance(m, Arithmetic) and any(t.numel() > 1 for t in m.tensors()):
            msg = (
                f"{name}: {m.extra_repr()} with a per-channel tensor in a {plan.layout.value} layer; "
                "traced arithmetic is read channels-first (one value per axis-1 entry), which is not this "
                "layer's channel axis: fold the tensor into the layer, or use one value for all channels"
            )
            raise ModelError(msg)


@dataclass(frozen=True)
class TableNetwork:
    """A model as a network of lookup tables: its tables, its interlayer graph and a table-only runtime.

    ``net.tables`` lists every table; ``net[name]`` gives one layer's :class:`LayerTables`; ``net.graph``
    is the :class:`~iotable.graph.Graph`; ``net.run(x)`` evaluates the network from the tables alone.
    A network is immutable (its graph too), so networks may share a graph; two are equal when their
    graphs, layers and input shapes are, and ``dataclasses.replace`` gives one with its own runtime.

    ``net.luts`` holds the checked LUT mapping results of its tables (:class:`~iotable.lutnet.LutResults`, empty
    unless the cost layer, :func:`iotable.synth.cost`, or a loaded bundle gave them; never compared):
    :func:`iotable.save` stores them.
    """

    graph: Graph
    layers: dict[str, LayerTables]
    input_shape: tuple[int, ...]
    luts: LutResults = field(default_factory=LutResults, compare=False, repr=False)

    @property
    def tables(self) -> list[IOTable]:
        """Every table of every layer, layer by layer in graph order, units in unit order."""
        return [t for layer in self.layers.values() for t in layer.tables]

    def __getitem__(self, name: str) -> LayerTables:
        if name not in self.layers:
            msg = f"no table layer named {name!r}; layers are {list(self.layers)}"
            raise LayerNotFoundError(msg)
        return self.layers[name]

    @property
    def input_node(self) -> Node:
        """The graph's input node (its domain is the network's input domain)."""
        return self.graph.nodes[0]

    @property
    def output_node(self) -> Node:
        """The graph's output node (domain ``None`` when the network outputs raw values)."""
        return self.graph.nodes[-1]

    @cached_property
    def runtime(self) -> Runtime:
        """The compiled runtime (built on first use, kept with the network, never compared or copied)."""
        return Runtime(self.graph, self.layers)

    def encode_input(self, x: Any, *, codes: bool = False, what: str = "net.run") -> torch.Tensor:
        """Validate a batch and return its input codes (``codes=True``: ``x`` already holds codes); errors start
        with ``what``, the caller's name."""
        return self.runtime.encode(x, codes=codes, input_shape=self.input_shape, what=what).to(torch.int64)

    def run(self, x: Any, *, codes: bool = False, return_codes: bool = False) -> torch.Tensor:
        """Evaluate the network from its tables alone (no layer's forward runs, except host nodes).

        Args:
            x: a batch, as values of the input domain or (``codes=True``) as integer codes.
            codes: ``x`` holds codes.
            return_codes: return output codes instead of values (needs a quantized output).

        Returns:
            Output values (float32) or codes (int64), shaped as the model's output.
        """
        node = self.output_node
        if return_codes and node.domain is None:
            msg = "net.run: return_codes=True needs a quantized output, but this network outputs raw values"
            raise InputError(msg)
        # The runtime takes codes in any dtype that holds them exactly: no int64 copy of the batch.
        input_codes = self.runtime.encode(x, codes=codes, input_shape=self.input_shape)
        if input_codes.shape[0] == 0:  # an empty batch gives an empty output
            return torch.empty((0, *node.shape), dtype=torch.int64 if return_codes else torch.float32)
        out, _ = self.runtime.run(input_codes, values=not return_codes)
        return out

    def restrict(self, observation: Any, *, min_count: int = 1, default: Any = None) -> TableNetwork:
        """Partial tables keeping the rows observed at least ``min_count`` times (see :func:`iotable.restrict`)."""
        return restrict(self, observation, min_count=min_count, default=default)

    def summary(self) -> str:
        """A readable table of the graph (kind, name, shape, units, fan-in, bits, rows, buffer, stride) with,
        for table layers, LogicNets' LUT6 estimate of their tables and the pipeline register bits after them
        (what ``iotable.hdl.export(pipeline=1)`` registers), both known from the plans before any row.

        For partial tables (after :meth:`restrict`) a line per layer gives the rows kept of the rows in all.
        """
        return "\n".join([text_table(self.rows(), (*SUMMARY_COLUMNS, "estimate", "registers")), *self._notes()])

    def _notes(self) -> list[str]:
        """The summary's lines after the graph's table: totals, rows kept of partial tables, host nodes."""
        total = sum(t.rows for t in self.tables)
        host = [n.name for n in self.graph.nodes_of(NodeKind.HOST)]
        lines = [f"{len(self.tables)} tables, {total} rows"]
        rows = [r for r in self.rows() if r["kind"] == "table"]
        if rows and all(r["estimate"] is not None for r in rows):
            lines.append(
                f"LogicNets estimate: {sum(r['estimate'] for r in rows)} LUT6 (each table once; iotable.synth.cost "
                f"maps them); pipeline registers: {sum(r['registers'] for r in rows)} bits"
            )
        if not all(t.is_dense for t in self.tables):
            lines.append("rows kept / rows in all, per layer:")
            for name, layer in self.layers.items():
                kept, full = sum(t.rows for t in layer.tables), layer.plan.total_rows
                lines.append(f"  {name}: {kept} / {full} ({100 * kept / full:.1f}%)")
        if host:
            lines.append(f"host nodes (run with torch, not tabulated): {', '.join(host)}")
        return lines

    def rows(self) -> list[dict[str, Any]]:
        """One dict per graph node: :meth:`Graph.rows` plus, for tables, ``method``, ``near_ties``,
        ``estimate`` and ``registers``.

        ``method`` says how the layer's tables were built and ``near_ties`` counts the rows the fast path
        computed through the module (see :class:`LayerTables`); ``estimate`` is LogicNets' LUT6 estimate of
        the layer's tables (:meth:`LayerPlan.lut_estimate`, each table once) and ``registers`` the bits of a
        pipeline register after the layer (every output code, as ``iotable.hdl.export(pipeline=1)``
        registers it); both are ``None`` for raw outputs. The notebook view shows these columns.

        Example:
            >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(1))
            >>> net = precompute(model, input_domain=Domain.uniform(1))
            >>> [(r["kind"], r["name"], r.get("rows"), r.get("method")) for r in net.rows()]
            [('input', 'input', None, None), ('table', '0', 8, 'linear fast path'), ('output', 'output', None, None)]
        """
        result = self.graph.rows()
        for row, node in zip(result, self.graph.nodes):
            layer = self.layers.get(node.meta.layer) if isinstance(node.meta, TableMeta) else None
            if layer is not None:
                row.update(method=layer.method, near_ties=layer.near_ties)
                row.update(estimate=layer.plan.lut_estimate(), registers=pipeline_registers(node))
        return result

    def draw(self) -> Diagram:
        """The interlayer graph's picture, which a Jupyter notebook shows inline (see :meth:`Graph.draw`).

        Needs the optional extra ``iotable[notebook]`` and Graphviz's ``dot`` program; without them it
        raises :class:`~iotable.diagram.GraphvizNotInstalledError`, which says what to install.
        """
        return self.graph.draw()

    def __repr__(self) -> str:
        tables = sum(len(layer) for layer in self.layers.values())
        kept = sum(t.rows for t in self.tables)
        full = sum(layer.plan.total_rows for layer in self.layers.values())
        rows = f"{kept:,} rows" if kept == full else f"{kept:,} of {full:,} rows kept"
        hosts = len(self.graph.nodes_of(NodeKind.HOST))
        host = f", {hosts} host node{'s' if hosts > 1 else ''}" if hosts else ""
        return _display.bounded(
            f"TableNetwork({len(self.layers)} table layers, {tables:,} tables, {rows}; {len(self.graph)} graph nodes"
            f"{host}; input {self.input_shape} -> output {self.output_node.shape})"
        )

    def _repr_html_(self) -> str:
        table = _display.table(self.rows())
        return _display.view(repr(self), table, notes=self._notes(), picture=self.graph.picture_html())


def pipeline_registers(node: Node) -> int | None:
    """Bits of a pipeline register after table node ``node``: every output code of every position, each a field
    of :func:`iotable.bits.width` bits (what ``iotable.hdl.export`` registers); ``None`` for raw outputs."""
    if not isinstance(node.domain, Domain):
        return None
    return math.prod(node.shape) * bits.width(node.domain)


def _host_names(model: nn.Module, host: Any) -> frozenset[str]:
    if isinstance(host, (str, nn.Module)):
        host = [host]  # one name or module, not the characters of a name
    names = dict((id(m), n) for n, m in model.named_modules())
    result = set()
    for item in host:
        if isinstance(item, nn.Module):
            if id(item) not in names:
                msg = f"host=: {type(item).__name__} is not a submodule of the model"
                raise ModelError(msg)
            result.add(names[id(item)])
        elif isinstance(item, str):
            if item not in dict(model.named_modules()):
                msg = (
                    f"host=: no submodule named {item!r}; expected one of {[n for n, _ in model.named_modules() if n]}"
                )
                raise ModelError(msg)
            result.add(item)
        else:
            msg = f"host=: expected submodule names or modules, received {type(item).__name__}"
            raise ModelError(msg)
    return frozenset(result)


def _infer_example(model: nn.Module) -> torch.Tensor:
    """A one-sample input for a model whose first layer states its input size (its kind's ``input_shape``:
    ``nn.Linear``)."""
    first = next((m for m in model.modules() if not isinstance(m, nn.Sequential) and not _elementwise(m)), None)
    kind = kind_of(first) if first is not None else None
    if first is not None and kind is not None and kind.input_shape is not None:
        return torch.zeros(1, *kind.input_shape(first))
    msg = (
        f"precompute: cannot tell the input shape of {type(model).__name__}; pass example_input=, a batch (N, ...) "
        "of the model's input"
    )
    raise ModelError(msg)


def build_network(
    model: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any,
    host: Iterable[Any] = (),
    input_layout: str | Layout | None = None,
    reuse: bool = True,
    **options: Any,
) -> TableNetwork:
    """Trace ``model``, cut it into table layers at quantizers, precompute them and build the graph.

    See :func:`iotable.precompute`, which calls this for whole models. With ``reuse``, the structural work
    (tracing, planning, the graph) done for the same model with the same structure (see
    :mod:`iotable.front.reuse`) is reused; the tables are always built from the current weights.
    """
    skeleton = model_skeleton(
        model,
        input_domain=input_domain,
        example_input=example_input,
        host=host,
        input_layout=input_layout,
        reuse=reuse,
        options=options,
    )
    total = sum(plan.total_rows for _, plan in skeleton.planned.values())
    with progress_bar(total=total, desc=type(model).__name__, enabled=options["progress"]) as bar:  # one bar
        layers = tabulate_layers(skeleton.planned, bar=bar, **options)
    return TableNetwork(graph=skeleton.graph, layers=layers, input_shape=skeleton.input_shape)


def model_skeleton(
    model: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any,
    host: Iterable[Any],
    input_layout: str | Layout | None,
    reuse: bool,
    options: dict[str, Any],
) -> _Skeleton:
    """What a model's structure fixes, before any row: the graph and every table layer's plan (all sizes
    checked), traced and planned once per structure (``reuse``). ``options`` are the network builder's."""
    if isinstance(example_input, np.ndarray):
        example_input = torch.from_numpy(example_input)
    if isinstance(example_input, (tuple, list)):
        msg = (
            f"precompute: example_input is a {type(example_input).__name__} of {len(example_input)} item(s), but a "
            "table network takes one input tensor; wrap a model of several inputs in a module that takes them "
            "stacked or concatenated in one tensor, and pass a batch (N, ...) of that tensor"
        )
        raise ModelError(msg)
    if example_input is None:
        example_input = _infer_example(model)
    if not isinstance(example_input, torch.Tensor) or example_input.dim() < 2:
        msg = (
            f"precompute: a whole model needs example_input=, a batch (N, ...) of the model's input; "
            f"received {type(example_input).__name__}"
        )
        raise ModelError(msg)
    if not isinstance(input_domain, Domain) and not (
        isinstance(input_domain, Sequence) and input_domain and all(isinstance(d, Domain) for d in input_domain)
    ):
        msg = (
            "precompute: input_domain must be an iotable.Domain or one Domain per input channel, "
            f"received {type(input_domain).__name__}"
        )
        raise ModelError(msg)
    check_float32(model, "precompute", ModelError)
    hosts = _host_names(model, host)
    layout = None if input_layout is None else Layout.parse(input_layout, what="input_layout")
    domain_key = input_domain if isinstance(input_domain, Domain) else tuple(input_domain)
    key = structure_key(
        model,
        input_domain=domain_key,
        input=tuple(example_input.shape[1:]),  # the model's dtype and device are in its tensors' part of the key
        host=hosts,
        input_layout=layout,
        max_rows=options["max_rows"],
    )
    skeleton = remembered(model, key) if reuse else None
    if skeleton is None:
        dtype, device = module_dtype(model)
        example = example_input[:1].to(dtype=dtype, device=device)
        traced = trace(model, host=hosts, example_input=example, lean=True)
        steps = segment(traced, host=hosts)
        builder = _Builder(input_domain=input_domain, input_layout=layout, options=options)
        for step in steps:  # plans every layer (all sizes checked) before any table is built
            builder.add(step)
        skeleton = _Skeleton(builder.finish(), dict(builder.planned), tuple(example.shape[1:]))
        remember(model, key, skeleton)
    return skeleton


@dataclass(frozen=True)
class _Skeleton:
    """What a model's structure fixes: the finished graph and each table layer's module and plan."""

    graph: Graph
    planned: dict[str, tuple[nn.Module, LayerPlan]]
    input_shape: tuple[int, ...]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found: samples checked, samples that differ, and where the first one differs."""

    samples: int
    mismatches: int
    first: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """Whether every sample agrees bit for bit."""
        return self.mismatches == 0

    @property
    def agreement(self) -> float:
        """Fraction of samples that agree bit for bit."""
        return 1.0 - self.mismatches / self.samples if self.samples else 1.0

    def __str__(self) -> str:
        text = f"{self.samples - self.mismatches}/{self.samples} samples agree bit for bit"
        if self.first:
            text += f"; first mismatch: {self.first}"
        return text

    def _repr_html_(self) -> str:
        columns = (
            ("samples", "samples"),
            ("agree", "agree bit for bit"),
            ("mismatches", "differ"),
            ("agreement", "agreement"),
        )
        counts = {
            "samples": self.samples,
            "agree": self.samples - self.mismatches,
            "mismatches": self.mismatches,
            "agreement": f"{self.agreement:.2%}",
        }
        title = f"VerifyReport: {'OK' if self.ok else 'MISMATCH'}, {self.samples - self.mismatches}/{self.samples} "
        title += "samples agree bit for bit"
        parts = [_display.table([counts], columns)]
        if self.first:
            where = [{"what": key, "value": value} for key, value in self.first.items()]
            parts.append(_display.table(where, (("what", "first mismatch"), ("value", ""))))
        return _display.view(title, *parts)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    equal = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return equal.reshape(a.shape[0], -1).all(dim=1)


def verify(model: nn.Module, net: TableNetwork, inputs: Any, *, codes: bool = False) -> VerifyReport:
    """Compare ``net.run`` with the model's own forward, bit for bit, on a batch of inputs.

    Args:
        model: the model the network was built from.
        net: the table network.
        inputs: a batch of input values (or codes with ``codes=True``).

    Returns:
        A :class:`VerifyReport`; for the first mismatching sample it names the first table node whose
        output codes differ from the model's, the unit, the output element and that unit's input codes.
    """
    if not isinstance(model, nn.Module):
        msg = f"verify: expected the model (a torch.nn.Module) first, received {type(model).__name__}"
        raise ModelError(msg)
    if not isinstance(net, TableNetwork):
        msg = f"verify: expected a TableNetwork second (from iotable.precompute), received {type(net).__name__}"
        raise ModelError(msg)
    check_float32(model, "verify", ModelError)
    warn_training(model, "verify")
    input_codes = net.encode_input(inputs, codes=codes, what="verify")
    values = decode(input_codes, net.input_node).to(module_dtype(model)[0])
    expected = run_module(model, values, type(model).__name__)
    got = net.run(input_codes, codes=True)
    if got.shape != expected.shape:
        msg = f"verify: the network outputs shape {tuple(got.shape)}, the model {tuple(expected.shape)}"
        raise ModelError(msg)
    same = _same(got.to(expected.dtype), expected)
    mismatches = int((~same).sum())
    first = None
    if mismatches:
        sample = int(torch.nonzero(~same)[0])
        first = _locate(model, net, input_codes[sample : sample + 1], values[sample : sample + 1])
        first["sample"] = sample
    return VerifyReport(samples=int(same.numel()), mismatches=mismatches, first=first)


def _locate(model: nn.Module, net: TableNetwork, codes: torch.Tensor, values: torch.Tensor) -> dict[str, Any]:
    """Find the first table node whose codes differ from the model's quantized tensor at the same point."""
    hosts = frozenset(n.meta.modules[-1] for n in net.graph.nodes_of(NodeKind.HOST))
    traced = trace(model, host=hosts, example_input=values)
    model_values: dict[str, torch.Tensor] = {}
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            interpreter = _Capture(traced, model_values)  # type: ignore[arg-type]  # not lean: a GraphModule
            interpreter.run(values)
    finally:
        for m, training in flags:
            m.training = training
    _, env = net.runtime.run(codes, capture=True)
    for node in net.graph.nodes_of(NodeKind.TABLE):
        reference = model_values.get(node.fx_node) if node.fx_node is not None else None
        if reference is None:
            continue
        mine = decode(env[node.name], node).to(reference.dtype) if node.domain is not None else env[node.name]
        differs = ~((mine == reference) | (torch.isnan(mine) & torch.isnan(reference)))
        if differs.any():
            element = tuple(int(i) for i in torch.nonzero(differs[0])[0])
            channel_axis = -1 if node.layout is not None and node.layout.channels_last else 0
            channel = element[channel_axis]
            meta = node.meta
            unit = next(u for u in meta.units if channel in u.out_channels)
            reader = env[net.graph.inputs(node.name)[0]][0]
            index_map = meta.index_map[unit.index][: unit.fan_in]
            if node.spatial_size:
                position = element[1:] if channel_axis == 0 else element[:-1]
                vector = reader[position]
            else:
                position, vector = (), reader.reshape(-1)
            return {
                "node": node.name,
                "unit": unit.index,
                "output": element,
                "position": position,
                "input_codes": tuple(int(v) for v in vector[torch.tensor(index_map)]),
                "table": float(mine[0][element]),
                "model": float(reference[0][element]),
            }
    return {"node": net.output_node.name, "unit": None, "note": "tables agree; the difference arises after them"}


class _Capture(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule, store: dict[str, torch.Tensor]) -> None:
        super().__init__(module)
        self.store = store

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, torch.Tensor):
            self.store[n.name] = result
        return result


def _elementwise(m: nn.Module) -> bool:
    return role_of(m) is Role.ELEMENTWISE
