"""Whole models: the table network (tables + interlayer graph) and its bit-exact verification."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from . import _display
from ._modelcheck import check_float32, warn_training
from ._progress import progress_bar
from ._reuse import remember, remembered, structure_key
from .domain import Domain
from .errors import IOTableError, SpecError, TableTooLargeError
from .graph import Edge, Graph, Node, NodeKind, pad_index_map, window_buffer_depth
from .nn import domain_of
from .plan import LayerPlan, _plan, module_dtype, run_module
from .precompute import LayerTables, tabulate_layers
from .runtime import Runtime, decode
from .spec import _ATTR, ELEMENTWISE, Layout, PaddingMode, Spec, decompose, spec_of
from .table import IOTable
from .trace import Arithmetic, ModelError, Step, segment, trace

if TYPE_CHECKING:
    from .diagram import Diagram

__all__ = ["InputError", "TableNetwork", "VerifyReport", "build_network", "verify"]


class InputError(IOTableError, ValueError):
    """An input given to a table network is malformed (shape, dtype, or codes out of range)."""


class LayerNotFoundError(IOTableError, KeyError):
    """``net[name]`` names no table layer of the network."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


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


def _unit_bits(plan: LayerPlan) -> list[int]:
    """Address bits of each unit (units reading the same channels have the same)."""
    shared = plan.shared_domain  # one domain for every input: bits by fan-in, no walk over the domains
    if shared is not None:
        return [u.fan_in * shared.bits for u in plan.units]
    bits: dict[tuple[int, ...], int] = {}
    for u in plan.units:
        if u.in_channels not in bits:
            bits[u.in_channels] = sum(d.bits for d in plan.unit_domains(u))
    return [bits[u.in_channels] for u in plan.units]


def _unit_index_map(plan: LayerPlan) -> np.ndarray:
    """Index of each unit input in the vector a table reads (features, or one window in element order)."""
    window = plan.geometry.window
    width = max(u.fan_in for u in plan.units)
    index_map = np.full((len(plan.units), width), -1, dtype=np.int64)
    taps = np.arange(window, dtype=np.int64)
    by_width: dict[int, list[int]] = {}  # units reading as many channels, filled at once
    for u, unit in enumerate(plan.units):
        by_width.setdefault(len(unit.in_channels), []).append(u)
    for members in by_width.values():
        channels = np.asarray([plan.units[u].in_channels for u in members], dtype=np.int64)  # (units, channels)
        if plan.geometry.rank == 0:
            rows = channels
        elif plan.layout.channels_last:
            rows = (taps[None, :, None] * plan.in_channels + channels[:, None, :]).reshape(len(members), -1)
        else:
            rows = (channels[:, :, None] * window + taps[None, None, :]).reshape(len(members), -1)
        index_map[members, : rows.shape[1]] = rows
    return index_map


class _Builder:
    """Turns segmented steps into graph nodes, precomputing each table layer on the way."""

    def __init__(self, *, input_domain: Any, input_layout: Layout | None, options: dict[str, Any]) -> None:
        self.graph = Graph()
        self.planned: dict[str, tuple[nn.Module, LayerPlan]] = {}
        self.node_of: dict[str, str] = {}
        self.pending: dict[tuple[str, int], dict[str, Any]] = {}
        self.input_domain = input_domain
        self.input_layout = input_layout
        self.options = options

    def _unique(self, name: str) -> str:
        taken = {n.name for n in self.graph.nodes}
        if name not in taken:
            return name
        k = 1
        while f"{name}_{k}" in taken:
            k += 1
        return f"{name}_{k}"

    def add(self, step: Step) -> None:
        handler = getattr(self, f"_{step.kind}")
        node = handler(step)
        node.meta.setdefault("fx_node", step.meta.get("fx_node"))
        self.node_of[step.name] = node.name

    def source(self, step: Step, k: int = 0) -> Node:
        return self.graph[self.node_of[step.sources[k]]]

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
        return self.graph.add(Node("input", NodeKind.INPUT, (), step.shape, layout, domain, {"layout": layout}))

    def _output(self, step: Step) -> Node:
        src = self.source(step)
        return self.graph.add(
            Node(self._unique("output"), NodeKind.OUTPUT, (src.name,), src.shape, src.layout, src.domain)
        )

    def _reshape(self, step: Step) -> Node:
        src = self.source(step)
        domain = src.domain
        if isinstance(domain, tuple) and step.shape != src.shape:
            if len(set(domain)) == 1:
                domain = domain[0]
            elif len(step.shape) == 1:  # flatten: every element keeps its channel's domain
                per_element = np.broadcast_to(
                    np.arange(len(domain)).reshape((1,) * (len(src.shape) - 1) + (-1,))
                    if src.layout is not None and src.layout.channels_last
                    else np.arange(len(domain)).reshape((-1,) + (1,) * (len(src.shape) - 1)),
                    src.shape,
                ).reshape(-1)
                domain = tuple(domain[c] for c in per_element)
            else:
                msg = f"{step.name}: reshaping channels of different domains into shape {step.shape} is not supported"
                raise ModelError(msg)
        layout = Layout.channels_first(len(step.shape) + 1) if domain is not None and len(step.shape) <= 3 else None
        return self.graph.add(Node(self._unique(step.name), NodeKind.RESHAPE, (src.name,), step.shape, layout, domain))

    def _pool(self, step: Step) -> Node:
        src = self.source(step)
        module = step.modules[0]
        if src.domain is None:
            msg = f"{step.name}: max-pool reads raw values from {src.name!r}; end that layer in a quantizer"
            raise ModelError(msg)
        if src.layout is not None and src.layout.channels_last:
            msg = f"{step.name}: torch max-pools read channels-first tensors, but {src.name!r} is {src.layout.value}"
            raise ModelError(msg)
        meta = {"module": module, "rank": len(step.shape) - 1, "modules": step.module_names}
        for key in ("kernel_size", "stride", "padding", "dilation"):
            meta[key] = getattr(module, key)
        return self.graph.add(
            Node(self._unique(step.name), NodeKind.POOL, (src.name,), step.shape, src.layout, src.domain, meta)
        )

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
        meta = {"op": "concat", "input_shapes": [s.shape for s in sources]}
        return self.graph.add(
            Node(
                self._unique(step.name), NodeKind.JOIN, tuple(s.name for s in sources), step.shape, layout, domain, meta
            )
        )

    def _host(self, step: Step) -> Node:
        src = self.source(step)
        module = step.modules[0] if len(step.modules) == 1 else _Chain(*step.modules)
        meta = {"module": module, "modules": step.module_names, "input_shapes": [src.shape]}
        return self.graph.add(Node(self._unique(step.name), NodeKind.HOST, (src.name,), step.shape, None, None, meta))

    def _table(self, step: Step) -> Node:
        if step.mixing == "add":
            a, b = self.source(step, 0), self.source(step, 1)
            layout = _layout_of(a, len(a.shape))
            axis = len(a.shape) if layout.channels_last else 1
            shape = list(a.shape)
            shape[axis - 1] *= 2
            domains = tuple(a.channel_domains() or ()) + tuple(b.channel_domains() or ())
            if not domains:
                raise ModelError(f"{step.name}: an add must read two quantized tensors")
            join = self.graph.add(
                Node(
                    self._unique(f"{step.name}:join"),
                    NodeKind.JOIN,
                    (a.name, b.name),
                    tuple(shape),
                    layout,
                    domains,
                    {"op": "concat", "input_shapes": [a.shape, b.shape], "for": "add"},
                )
            )
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
            src = join
        else:
            src = self.source(step)
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
            for m, name in zip(step.modules, step.module_names):
                if isinstance(m, Arithmetic) and any(t.numel() > 1 for t in m.tensors()):
                    msg = (
                        f"{name}: {m.extra_repr()} with a per-channel tensor in a {layer_plan.layout.value} layer; "
                        "traced arithmetic is read channels-first (one value per axis-1 entry), which is not this "
                        "layer's channel axis: fold the tensor into the layer, or use one value for all channels"
                    )
                    raise ModelError(msg)
        self.planned[step.name] = (module, layer_plan)
        return self._table_nodes(step, src, layer_plan)

    def _table_nodes(self, step: Step, src: Node, plan: LayerPlan) -> Node:
        if src.kind is NodeKind.INPUT and src.layout != plan.layout and self.input_layout is None:
            src.layout = plan.layout  # the first layer tells the input's layout
            src.meta["layout"] = plan.layout
        if src.layout is not None and src.layout != plan.layout and not isinstance(src.domain, Domain):
            msg = f"{step.name}: reads {src.name!r} as {plan.layout.value}, but it was produced as {src.layout.value}"
            raise ModelError(msg)
        if tuple(plan.frame_out) != tuple(step.shape) and plan.geometry.rank == 0:
            msg = f"{step.name}: the table layer makes shape {plan.frame_out}, but the model makes {step.shape}"
            raise ModelError(msg)
        g = plan.geometry
        meta: dict[str, Any] = {
            "layer": step.name,
            "units": plan.units,
            "unit_bits": _unit_bits(plan),
            "modules": step.module_names,
            "spatial": g.rank > 0,
        }
        reader = src
        if g.rank:
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
            if g.padded:
                reader = self.graph.add(self._pad_node(step, src, plan))
                size = g.padded_size(size)
            window_shape = (*positions, plan.in_channels * g.window)
            order = "kernel-major" if channels_last else "channel-major"
            window = self.graph.add(
                Node(
                    self._unique(f"{step.name}:window"),
                    NodeKind.WINDOW,
                    (reader.name,),
                    window_shape,
                    plan.layout,
                    _window_domain(reader.domain, channels_last, g.window),
                    {
                        "kernel": g.kernel,
                        "stride": g.stride,
                        "dilation": g.dilation,
                        "channels": plan.in_channels,
                        "element_order": order,
                        "input_layout": plan.layout,
                        "input_shapes": [reader.shape],
                    },
                )
            )
            self.pending[(window.name, 0)] = {
                "buffer": {
                    "depth": window_buffer_depth(g.kernel, g.dilation, size, plan.in_channels),
                    "stride": g.stride,
                    "kernel": g.kernel,
                    "dilation": g.dilation,
                    "width": size[-1],
                    "channels": plan.in_channels,
                    "element_order": order,
                }
            }
            reader = window
            meta["positions"] = positions
        meta["input_shapes"] = [reader.shape]
        table = self.graph.add(
            Node(
                self._unique(step.name),
                NodeKind.TABLE,
                (reader.name,),
                tuple(step.shape),
                plan.layout,
                plan.output_domain,
                meta,
            )
        )
        self.pending[(table.name, 0)] = {"index_map": _unit_index_map(plan)}
        return table

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
        meta = {
            "padding": g.padding,
            "mode": g.padding_mode.value,
            "pad_codes": codes,
            "index_map": index_map,
            "input_shapes": [src.shape],
        }
        name = self._unique(f"{step.name}:pad")
        return Node(name, NodeKind.PAD, (src.name,), index_map.shape, plan.layout, src.domain, meta)

    # -- edges --------------------------------------------------------------------------------------------

    def finish(self) -> Graph:
        graph = self.graph
        uses: dict[str, list[tuple[Node, int]]] = {}
        for node in graph.nodes:
            for port, producer in enumerate(node.inputs):
                uses.setdefault(producer, []).append((node, port))
        nodes: list[Node] = []
        for node in graph.nodes:
            nodes.append(node)
            consumers = uses.get(node.name, [])
            if len(consumers) > 1:
                dup = Node(
                    f"{node.name}:dup",
                    NodeKind.DUPLICATE,
                    (node.name,),
                    node.shape,
                    node.layout,
                    node.domain,
                    {"outputs": len(consumers)},
                )
                nodes.append(dup)
                for out_port, (consumer, port) in enumerate(consumers):
                    inputs = list(consumer.inputs)
                    inputs[port] = dup.name
                    consumer.inputs = tuple(inputs)
                    consumer.meta.setdefault("_producer_ports", {})[port] = out_port
        graph.nodes = nodes
        for node in graph.nodes:
            ports = node.meta.pop("_producer_ports", {})
            for port, producer_name in enumerate(node.inputs):
                producer = graph[producer_name]
                extra = self.pending.get((node.name, port), {})
                graph.add_edge(
                    Edge(
                        producer.name,
                        ports.get(port, 0),
                        node.name,
                        port,
                        producer.shape,
                        producer.layout,
                        producer.domain,
                        extra.get("index_map"),
                        extra.get("buffer"),
                    )
                )
        return graph.check()


@dataclass
class TableNetwork:
    """A model as a network of lookup tables: its tables, its interlayer graph and a table-only runtime.

    ``net.tables`` lists every table; ``net[name]`` gives one layer's :class:`LayerTables`; ``net.graph``
    is the :class:`~iotable.graph.Graph`; ``net.run(x)`` evaluates the network from the tables alone.
    """

    graph: Graph
    layers: dict[str, LayerTables]
    input_shape: tuple[int, ...]
    _runtime: Runtime | None = None

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

    @property
    def runtime(self) -> Runtime:
        """The compiled runtime (built on first use)."""
        if self._runtime is None:
            self._runtime = Runtime(self.graph, self.layers)
        return self._runtime

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
        from .observe import restrict  # observe builds on this module

        return restrict(self, observation, min_count=min_count, default=default)

    def summary(self) -> str:
        """A readable table of the graph (kind, name, shape, units, fan-in, bits, rows, buffer, stride).

        For partial tables (after :meth:`restrict`) a line per layer gives the rows kept of the rows in all.
        """
        return "\n".join([self.graph.summary(), *self._notes()])

    def _notes(self) -> list[str]:
        """The summary's lines after the graph's table: totals, rows kept of partial tables, host nodes."""
        total = sum(t.rows for t in self.tables)
        host = [n.name for n in self.graph.nodes_of(NodeKind.HOST)]
        lines = [f"{len(self.tables)} tables, {total} rows"]
        if not all(t.is_dense for t in self.tables):
            lines.append("rows kept / rows in all, per layer:")
            for name, layer in self.layers.items():
                kept, full = sum(t.rows for t in layer.tables), layer.plan.total_rows
                lines.append(f"  {name}: {kept} / {full} ({100 * kept / full:.1f}%)")
        if host:
            lines.append(f"host nodes (run with torch, not tabulated): {', '.join(host)}")
        return lines

    def rows(self) -> list[dict[str, Any]]:
        """One dict per graph node: :meth:`Graph.rows` plus, for tables, ``method`` and ``near_ties``.

        ``method`` says how the layer's tables were built and ``near_ties`` counts the rows the fast path
        computed through the module (see :class:`LayerTables`). The notebook view shows these columns.

        Example:
            >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(1))
            >>> net = precompute(model, input_domain=Domain.uniform(1))
            >>> [(r["kind"], r["name"], r.get("rows"), r.get("method")) for r in net.rows()]
            [('input', 'input', None, None), ('table', '0', 8, 'linear fast path'), ('output', 'output', None, None)]
        """
        result = self.graph.rows()
        for row, node in zip(result, self.graph.nodes):
            layer = self.layers.get(str(node.meta.get("layer"))) if node.kind is NodeKind.TABLE else None
            if layer is not None:
                row.update(method=layer.method, near_ties=layer.near_ties)
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
        return _display.view(repr(self), table, notes=self._notes(), picture=_display.graph_picture(self.graph))


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
    """A one-sample input for a model whose first layer states its input size (``nn.Linear``)."""
    first = next((m for m in model.modules() if not isinstance(m, (nn.Sequential, *ELEMENTWISE))), None)
    if isinstance(first, nn.Linear):
        return torch.zeros(1, first.in_features)
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
    :mod:`iotable._reuse`) is reused; the tables are always built from the current weights.
    """
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
    total = sum(plan.total_rows for _, plan in skeleton.planned.values())
    with progress_bar(total=total, desc=type(model).__name__, enabled=options["progress"]) as bar:  # one bar
        layers = tabulate_layers(skeleton.planned, bar=bar, **options)
    return TableNetwork(graph=skeleton.graph, layers=layers, input_shape=skeleton.input_shape)


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
    hosts = frozenset(n.meta["modules"][-1] for n in net.graph.nodes_of(NodeKind.HOST))
    traced = trace(model, host=hosts, example_input=values)
    model_values: dict[str, torch.Tensor] = {}
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            interpreter = _Capture(traced, model_values)
            interpreter.run(values)
    finally:
        for m, training in flags:
            m.training = training
    _, env = net.runtime.run(codes, capture=True)
    for node in net.graph.nodes_of(NodeKind.TABLE):
        reference = model_values.get(node.meta.get("fx_node"))
        if reference is None:
            continue
        mine = decode(env[node.name], node).to(reference.dtype) if node.domain is not None else env[node.name]
        differs = ~((mine == reference) | (torch.isnan(mine) & torch.isnan(reference)))
        if differs.any():
            element = tuple(int(i) for i in torch.nonzero(differs[0])[0])
            channel_axis = -1 if node.layout is not None and node.layout.channels_last else 0
            channel = element[channel_axis]
            units = node.meta["units"]
            unit = next(u for u in units if channel in u.out_channels)
            reader = env[node.inputs[0]][0]
            index_map = net.graph.edges_into(node.name)[0].index_map[unit.index][: unit.fan_in]
            if node.meta["spatial"]:
                position = element[1:] if channel_axis == 0 else element[:-1]
                vector = reader[position]
            else:
                position, vector = (), reader.reshape(-1)
            return {
                "node": node.name,
                "unit": unit.index,
                "output": element,
                "position": position,
                "input_codes": tuple(int(v) for v in vector[torch.as_tensor(index_map)]),
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
