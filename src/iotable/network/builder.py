"""Building a table network's graph from a model's traced steps and its layers' plans: one node (or a pad,
window and table chain) per step, each node of its record's registered kind."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.text import unprintable, unprintable_module
from ..domain import Domain
from ..errors import IOTableWarning, ModelError, SpecError, TableTooLargeError
from ..front.infer import inferable
from ..front.plan import LayerPlan, infer_spec, plan_layer
from ..front.region import Region
from ..front.spec import SPEC_ATTRIBUTE, Layout, PaddingMode, Spec, declared_spec, decompose, spec_of
from ..front.trace import Arithmetic, Step
from ..graph.graph import (
    DuplicateMeta,
    ElementOrder,
    Graph,
    HostMeta,
    InputMeta,
    JoinMeta,
    Meta,
    Node,
    OutputMeta,
    PadMeta,
    PoolMeta,
    ReshapeMeta,
    TableMeta,
    WindowMeta,
    pad_index_map,
    wire,
)
from ..graph.kind import definition
from ..graph.operations import OperationRegistry
from ..nn import domain_of
from ..nodekinds.table import expected_index_map  # importing the kinds registers them
from ..tabulate.layers import LayerTables
from ..tabulate.outputs import with_table_domain
from .arithmetic import Inexact, SumHead, argmax_node, sum_groups, sum_node
from .edges import edge_split
from .split import declare, linear_split
from .sums import SPLIT_ROWS, cheaper_split


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
    """Address bits of each unit as hardware packs them (:attr:`LayerPlan.table_bits`, from :mod:`iotable.bits`)."""
    return tuple(int(b) for b in plan.table_bits[0])


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


def _check_printable(step: Step) -> None:
    """Refuse a step named after a module whose name holds a control character or line break: names become
    node names, file names and comments of generated code, where such a character could change the meaning."""
    for name in dict.fromkeys([step.name, *step.module_names]):
        bad = unprintable(name)
        if bad is not None:
            raise ModelError(unprintable_module(name, bad))


#: The torch front end's node builders by step kind (what :mod:`iotable.front.segment` makes of a traced
#: model): each a :class:`GraphBuilder` method that turns one step into graph nodes. A second front end keeps
#: its own registry of its source operations.
TORCH_OPERATIONS: OperationRegistry[Callable[[GraphBuilder, Step], Node]] = OperationRegistry("torch")


class GraphBuilder:
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
        self.arithmetic_tensors: list[torch.Tensor] = []  # the values sum nodes and regions' units were made from

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
        _check_printable(step)
        node = TORCH_OPERATIONS.builder(step.kind)(self, step)
        self.nodes[node.name] = replace(node, fx_node=step.meta.get("fx_node"))
        self.node_of[step.name] = node.name

    def source(self, step: Step, k: int = 0) -> Node:
        return self.nodes[self.node_of[step.sources[k]]]

    # -- steps --------------------------------------------------------------------------------------------

    @TORCH_OPERATIONS.register("input")
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

    @TORCH_OPERATIONS.register("output")
    def _output(self, step: Step) -> Node:
        src = self.source(step)
        return self._add(_node(self._unique("output"), OutputMeta(), src.shape, src.layout, src.domain), src)

    @TORCH_OPERATIONS.register("reshape")
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

    @TORCH_OPERATIONS.register("pool")
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

    @TORCH_OPERATIONS.register("concat")
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

    @TORCH_OPERATIONS.register("host")
    def _host(self, step: Step) -> Node:
        src = self.source(step)
        module = step.modules[0] if len(step.modules) == 1 else _Chain(*step.modules)
        meta = HostMeta(module=module, modules=tuple(step.module_names))
        return self._add(_node(self._unique(step.name), meta, tuple(step.shape), None, None), src)

    @TORCH_OPERATIONS.register("sum")
    def _sum(self, step: Step) -> Node:
        """A ``sum`` node where the integer sum is the model's; else a table of the sum's inputs (with a warning
        that says why), exact by enumeration where it fits."""
        src = self.source(step)
        self.arithmetic_tensors += [t for m in step.modules for t in getattr(m, "tensors", tuple)()]
        try:
            return self._add(sum_node(self._unique(step.name), step, src), src)
        except Inexact as exc:
            head = SumHead(step.meta["in_shape"], step.meta["dims"], step.meta["keepdim"], step.modules)
            decompose(head, fan_in=[tuple(row) for row in sum_groups(step).tolist()])
            warnings.warn(f"{exc}; so it is a table of its inputs, not an adder", IOTableWarning, stacklevel=2)
            flat = Step(f"{step.name}_flat", "reshape", list(step.sources), (math.prod(src.shape),), closed=True)
            self.add(flat)  # a table of features reads them flat
            table = Step(step.name, "table", [flat.name], step.shape, [head], [step.name], mixing=step.name)
            table.meta = dict(step.meta)
            return self._table(table)

    @TORCH_OPERATIONS.register("argmax")
    def _argmax(self, step: Step) -> Node:
        src = self.source(step)
        return self._add(argmax_node(self._unique(step.name), step, src), src)

    @TORCH_OPERATIONS.register("table")
    def _table(self, step: Step) -> Node:
        if step.mixing == "add":
            src, module = self._add_join(step)
        else:
            src = self.source(step)
            module = self._chain(step, src)
            for region in (m for m in step.modules if isinstance(m, Region)):  # its units follow the tensors it reads
                self.arithmetic_tensors += [*region.parameters(), *region.buffers()]
        try:
            layer_plan = plan_layer(
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
            try:
                form = self._cheaper_as_arithmetic(step, src, None)
            except Inexact as inexact:
                raise TableTooLargeError(f"{msg}; nor is it exact arithmetic: {inexact}") from None
            if form is None:
                raise TableTooLargeError(msg) from None
            return self._split(step, src, form)
        form = self._cheaper_as_arithmetic(step, src, layer_plan)
        if form is not None:
            return self._split(step, src, form)
        if layer_plan.layout.channels_last:
            _refuse_channel_tensors(step, layer_plan)
        if step.meta.get("domain_from_table") and layer_plan.output_domain is None:  # see segment.codes_from_table
            self.arithmetic_tensors += [*module.parameters(), *module.buffers()]  # the domain follows the weights
            where, required = step.mixing or step.name, step.meta["domain_from_table"] == "required"
            layer_plan = with_table_domain(module, layer_plan, where=where, options=self.options, required=required)
        self.planned[step.name] = (module, layer_plan)
        return self._table_nodes(step, src, layer_plan)

    def _arithmetic(self, step: Step, src: Node) -> ArithmeticForm:
        """The layer of ``step`` as exact arithmetic: a linear layer as partial-sum tables and a sum node
        (:mod:`.split`), a layer of the user's own that sums per-edge values as edge tables and a sum node
        (:mod:`.edges`); :class:`Inexact` where its sums may round."""
        module = step.modules[0]
        where = f"{step.mixing} ({type(module).__name__})"
        self.arithmetic_tensors += [*module.parameters(), *module.buffers()]  # weights baked into the sums
        if inferable(module):
            edges = edge_split(step.name, module, src, where)
            return ArithmeticForm(edges.edges, f"{step.name}_edges", len(edges.live), edges.sum_node, edges.estimate)
        split = linear_split(step.name, module, src, where)
        if split.partial is None or split.partial_domain is None:
            return ArithmeticForm(None, "", 0, split.sum_node, split.estimate)
        partial = declare(split.partial, split.partial_domain)
        return ArithmeticForm(partial, f"{step.name}_partial", len(split.partial.index), split.sum_node, split.estimate)

    def _split(self, step: Step, src: Node, form: ArithmeticForm) -> Node:
        """The layer as ``form``, then the rest of it (its quantizer) a table per output over the sum's codes."""
        reader = src
        if form.table is not None:
            name = form.name
            self.add(Step(name, "table", list(step.sources), (form.width,), [form.table], [name], mixing=name))
            reader = self.nodes[self.node_of[name]]
        total = self._add(replace(form.sum_node, name=self._unique(form.sum_node.name)), reader)
        self.node_of[f"{step.name}_sum"] = total.name
        if len(step.modules) == 1:
            return total  # the layer's raw outputs: the sum's values are the model's, exactly
        rest = Step(step.name, "table", [f"{step.name}_sum"], step.shape, step.modules[1:], step.module_names[1:])
        rest.meta = dict(step.meta)
        return self._table(rest)

    def _cheaper_as_arithmetic(self, step: Step, src: Node, plan: LayerPlan | None) -> ArithmeticForm | None:
        """The arithmetic form of a layer whose tables are too large (``plan`` None) or have more than 2**16 rows
        and cost more by the LUT estimates; ``None`` where it has none (or the tables cost less)."""
        if step.mixing in (None, "add") or step.module_names[0] != step.mixing or len(src.shape) != 1:
            return None
        if plan is not None and max(u.rows for u in plan.units) <= SPLIT_ROWS:
            return None
        try:
            form = self._arithmetic(step, src)
        except Inexact:
            if plan is None:
                raise
            return None  # tables that fit stay tables
        if plan is None:
            return form
        return form if cheaper_split(form.estimate, form.sum_node, plan) else None

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
        """The step's modules as one module carrying the decomposition metadata of its mixing module (for a
        module of the user's own that declares none, the units the chain's structure shows)."""
        module = _Chain(*step.modules)
        mixing = [m for m, n in zip(step.modules, step.module_names) if n == step.mixing]
        if mixing:
            # A declared output domain closes the layer (trace._closes), so it is the chain's only when the
            # mixing module comes last; the plan otherwise reads the chain's closing quantizer.
            cls = mixing[0].cls if isinstance(mixing[0], Region) else type(mixing[0]).__name__
            named = f"{step.name} ({cls})"  # refusals name the layer and its class (a region: its module's)
            if declared_spec(mixing[0]) is None and inferable(mixing[0]):
                spec = infer_spec(module, named, _domain_for_layer(src), tuple(src.shape))
            else:
                spec = spec_of(mixing[0])
                if spec.infer:  # decompose(fan_in="auto"): the structure's units, the declared output domain
                    inferred = infer_spec(module, named, _domain_for_layer(src), tuple(src.shape))
                    spec = replace(inferred, output_domain=spec.output_domain)
            if step.modules[-1] is not mixing[0]:
                spec = replace(spec, output_domain=None)
        else:
            spec = Spec(elementwise=True, layout=src.layout, source="elementwise modules between quantizers")
        module.__dict__[SPEC_ATTRIBUTE] = spec
        return module

    def _table_nodes(self, step: Step, src: Node, plan: LayerPlan) -> Node:
        if src.kind.is_input and src.layout != plan.layout and self.input_layout is None:
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
        meta = WindowMeta.of_plan(plan, size)
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

        def duplicate(node: Node, outputs: int) -> Node:
            return _node(f"{node.name}:dup", DuplicateMeta(outputs=outputs), node.shape, node.layout, node.domain)

        return wire(self.nodes.values(), self.reads, duplicate)


@dataclass
class ArithmeticForm:
    """A layer as a table layer of ``width`` tables (edges, partial sums; ``None``: none) named ``name``, a sum
    node over them, and the LUT estimate of both."""

    table: nn.Module | None
    name: str
    width: int
    sum_node: Node
    estimate: int


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


def refit_tables(graph: Graph, layers: dict[str, LayerTables]) -> Graph:
    """``graph`` with the table node of every layer whose tabulation removed unused inputs
    (:attr:`LayerTables.unused`) reading only the inputs its units kept."""
    changed = {name: tables.plan for name, tables in layers.items() if tables.unused}
    nodes = []
    for node in graph.nodes:
        meta = node.meta
        if isinstance(meta, TableMeta) and meta.layer in changed:
            plan = changed[meta.layer]
            fitted = replace(meta, units=plan.units, unit_bits=_unit_bits(plan), index_map=_unit_index_map(plan))
            nodes.append(replace(node, meta=fitted))
    return graph.replace(*nodes) if nodes else graph
