"""Whole models: the table network (tables + interlayer graph) and its bit-exact verification."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .. import bits
from .._util import display as _display
from .._util.modules import module_dtype
from .._util.progress import progress_bar
from ..domain import Domain
from ..errors import InputError, LayerNotFoundError, ModelError
from ..front.modelcheck import check_float32, check_function_of_inputs
from ..front.plan import LayerPlan
from ..front.registry import Role, kind_of, role_of
from ..front.reuse import remember, remembered, structure_key, tensor_digest
from ..front.spec import Layout
from ..front.trace import segment, trace
from ..graph.graph import (
    SUMMARY_COLUMNS,
    Graph,
    Node,
    TableMeta,
    text_table,
)
from ..graph.liveness import Liveness, liveness
from ..lutnet import LutResults
from ..nodekinds.functions import ARITHMETIC_KINDS, live_outputs, node_estimate
from ..runtime.runtime import Runtime
from ..table import IOTable
from ..tabulate.layers import LayerTables, tabulate_layers
from .builder import GraphBuilder, refit_tables
from .heldluts import held_luts
from .inputformat import input_format
from .observe import restrict
from .thresholds import thresholds

if TYPE_CHECKING:
    from ..graph.diagram import Diagram

__all__ = ["TableNetwork", "build_network", "model_skeleton", "pipeline_registers"]


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
    def liveness(self) -> Liveness:
        """Which elements and table units reach the network's output (:func:`iotable.graph.liveness.liveness`;
        computed on first use and kept with the network, as its graph never changes)."""
        return liveness(self.graph)

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
        for table layers, the tables whose outputs reach no network output (``dead``), LogicNets' LUT6 estimate
        of the live tables and the pipeline register bits of their codes after them (what
        ``iotable.hdl.export(pipeline=1)`` registers), all known from the plans before any row; then the
        totals and "dead: N tables".

        For partial tables (after :meth:`restrict`) a line per layer gives the rows kept of the rows in all.
        """
        columns = (*SUMMARY_COLUMNS, "dead", "estimate", "registers")
        return "\n".join([text_table(self.rows(), columns), *self._notes()])

    def _notes(self) -> list[str]:
        """The summary's lines after the graph's table: totals, rows kept of partial tables, host nodes."""
        total = sum(t.rows for t in self.tables)
        host = [n.name for n in self.graph.host_nodes()]
        lines = [f"{len(self.tables)} tables, {total} rows"]
        every = self.rows()
        rows = [r for r in every if r["kind"] == "table"]
        if rows and all(r["estimate"] is not None for r in rows):
            lines.append(self._estimate_line(rows))
        arithmetic = [r for r in every if r["kind"] in ARITHMETIC_KINDS]
        if arithmetic:
            kinds = ", ".join(sorted({r["kind"] for r in arithmetic}))
            lines.append(
                f"arithmetic ({kinds}): {sum(r['estimate'] for r in arithmetic)} LUT6 estimated (adder trees, "
                "comparators: iotable.lutcount)"
            )
        lines.append(f"dead: {self.liveness.dead()} tables (their outputs reach no network output; not counted)")
        if not all(t.is_dense for t in self.tables):
            lines.append("rows kept / rows in all, per layer:")
            for name, layer in self.layers.items():
                kept, full = sum(t.rows for t in layer.tables), layer.plan.total_rows
                lines.append(f"  {name}: {kept} / {full} ({100 * kept / full:.1f}%)")
        if host:
            lines.append(f"host nodes (run with torch, not tabulated): {', '.join(host)}")
        return lines

    def _estimate_line(self, rows: list[dict[str, Any]]) -> str:
        """LogicNets' estimate of the live tables, ABC's count when the network holds every live table's
        mapping (:func:`iotable.synth.cost` returns such a network), and the pipeline registers."""

        abc = held_luts(self)
        mapped = "iotable.synth.cost maps them" if abc is None else f"ABC: {abc} LUT6, held from iotable.synth.cost"
        return (
            f"LogicNets estimate: {sum(r['estimate'] for r in rows)} LUT6 (each live table once; {mapped}); "
            f"pipeline registers: {sum(r['registers'] for r in rows)} bits"
        )

    def rows(self) -> list[dict[str, Any]]:
        """One dict per graph node: :meth:`Graph.rows` plus, for tables, ``method``, ``near_ties``, ``dead``,
        ``estimate`` and ``registers``.

        ``method`` says how the layer's tables were built and ``near_ties`` counts the rows the fast path
        computed through the module (see :class:`LayerTables`); ``dead`` counts the node's tables whose outputs
        reach no network output (:attr:`liveness`); ``estimate`` is LogicNets' LUT6 estimate of the node's live
        tables (:meth:`LayerPlan.lut_estimates`, each table once) and ``registers`` the bits of a pipeline
        register after the layer (every live output code, as ``iotable.hdl.export(pipeline=1)`` registers
        it); both are ``None`` for raw outputs. The notebook view shows these columns.

        Example:
            >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(1))
            >>> net = precompute(model, input_domain=Domain.uniform(1))
            >>> [(r["kind"], r["name"], r.get("rows"), r.get("method")) for r in net.rows()]
            [('input', 'input', None, None), ('table', '0', 8, 'linear fast path'), ('output', 'output', None, None)]
        """
        result = self.graph.rows()
        for row, node in zip(result, self.graph.nodes):
            layer = self.layers.get(node.meta.layer) if isinstance(node.meta, TableMeta) else None
            if node.kind.value in ARITHMETIC_KINDS:
                outputs, dead = live_outputs(node, self.liveness, keep_dead=False)
                luts = node_estimate(self.graph, node, outputs)
                row.update(dead=dead, estimate=luts, registers=pipeline_registers(node, outputs))
            if layer is not None:
                live = self.liveness.units[node.name]
                estimates = layer.plan.lut_estimates()
                estimate = None if estimates is None else int(estimates[live].sum())
                registers = pipeline_registers(node, self.liveness.elements[node.name])
                row.update(method=layer.method, near_ties=layer.near_ties, dead=int((~live).sum()))
                row.update(estimate=estimate, registers=registers)
        return result

    def draw(self) -> Diagram:
        """The interlayer graph's picture, which a Jupyter notebook shows inline (see :meth:`Graph.draw`).

        Needs the optional extra ``iotable[notebook]`` and Graphviz's ``dot`` program; without them it
        raises :class:`~iotable.errors.GraphvizNotInstalledError`, which says what to install.
        """
        return self.graph.draw()

    def __repr__(self) -> str:
        tables = sum(len(layer) for layer in self.layers.values())
        kept = sum(t.rows for t in self.tables)
        full = sum(layer.plan.total_rows for layer in self.layers.values())
        rows = f"{kept:,} rows" if kept == full else f"{kept:,} of {full:,} rows kept"
        hosts = len(self.graph.host_nodes())
        host = f", {hosts} host node{'s' if hosts > 1 else ''}" if hosts else ""
        return _display.bounded(
            f"TableNetwork({len(self.layers)} table layers, {tables:,} tables, {rows}; {len(self.graph)} graph nodes"
            f"{host}; input {self.input_shape} -> output {self.output_node.shape})"
        )

    def _repr_html_(self) -> str:
        table = _display.table(self.rows())
        return _display.view(repr(self), table, notes=self._notes(), picture=self.graph.picture_html())


def pipeline_registers(node: Node, live: np.ndarray | None = None) -> int | None:
    """Bits of a pipeline register after table node ``node``: every output code of every position, each a field
    of :func:`iotable.bits.width` bits (what ``iotable.hdl.export`` registers); ``None`` for raw outputs. With
    ``live`` (a boolean array of the node's shape, :func:`iotable.graph.liveness.liveness`), the live codes only."""
    if not isinstance(node.domain, Domain):
        return None
    count = math.prod(node.shape) if live is None else int(np.count_nonzero(live))
    return count * bits.width(node.domain)


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
    layers = (m for m in model.modules() if not isinstance(m, nn.Sequential) and role_of(m) is not Role.ELEMENTWISE)
    first = next(layers, None)
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
    graph = refit_tables(skeleton.graph, layers)  # units inferred from a structure may have lost inputs
    graph, layers = input_format(graph, layers)  # an input quantizer that is the identity on codes: no layer
    graph, layers = thresholds(graph, layers)  # quantizers after sums, as comparisons where those cost less
    return TableNetwork(graph=graph, layers=layers, input_shape=skeleton.input_shape)


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
    if 0 in example_input.shape[1:]:
        msg = (
            f"precompute: example_input has shape {tuple(example_input.shape)}, samples of no elements; a table "
            "network reads at least one input element per sample: pass a batch (N, ...) of the model's real input"
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
    check_function_of_inputs(model, _samples(example_input, input_domain), host=hosts, what="precompute")
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
    if skeleton is not None and not skeleton.current():
        skeleton = None  # an arithmetic node was made from values that changed since (a trained linear layer)
    if skeleton is None:
        dtype, device = module_dtype(model)
        example = example_input[:1].to(dtype=dtype, device=device)
        traced = trace(model, host=hosts, example_input=example, lean=True)
        steps = segment(traced, host=hosts)
        builder = GraphBuilder(input_domain=input_domain, input_layout=layout, options=options)
        for step in steps:  # plans every layer (all sizes checked) before any table is built
            builder.add(step)
        read = tuple((t, tensor_digest(t)) for t in builder.arithmetic_tensors)
        skeleton = _Skeleton(builder.finish(), dict(builder.planned), tuple(example.shape[1:]), read)
        remember(model, key, skeleton)
    return skeleton


@dataclass(frozen=True)
class _Skeleton:
    """What a model's structure fixes: the finished graph and each table layer's module and plan."""

    graph: Graph
    planned: dict[str, tuple[nn.Module, LayerPlan]]
    input_shape: tuple[int, ...]
    read: tuple[tuple[torch.Tensor, bytes], ...] = ()  # the tensors arithmetic nodes were made from, and digests

    def current(self) -> bool:
        """Whether every tensor an arithmetic node was made from still holds the values it was made from."""
        return all(tensor_digest(t) == digest for t, digest in self.read)


def _samples(example_input: torch.Tensor, input_domain: Domain | Sequence[Domain]) -> torch.Tensor:
    """Four different inputs shaped as ``example_input``'s samples, values of the input domain (seeded)."""
    domains = [input_domain] if isinstance(input_domain, Domain) else list(input_domain)
    values = torch.tensor(sorted({v for d in domains for v in d.values}), dtype=example_input.dtype)
    generator = torch.Generator().manual_seed(0)
    picks = torch.randint(0, len(values), (4, *example_input.shape[1:]), generator=generator)
    return values[picks].to(example_input.device)
