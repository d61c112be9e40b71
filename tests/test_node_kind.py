"""A node kind added from outside the library: one class, registered, then checked, run, saved and loaded, and
exported as hardware (Verilog and VHDL, both styles) that simulates equal to ``net.run``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, IOTable, NodeKind, TableNetwork
from iotable.errors import GraphError, HDLError
from iotable.graph.graph import Edge, Graph, Node
from iotable.graph.interpret import GraphInterpreter, NodeExecutionError
from iotable.graph.kind import NodeKindDef, definition, register
from iotable.graph.nodes import Meta
from iotable.hdl import Design, check, export, simulate, simulate_files
from tests.optional import require_program

U2 = Domain.uniform(2)


@dataclass(frozen=True, eq=False)
class InvertMeta(Meta):
    """Inverts codes: ``code -> levels - 1 - code`` (``levels``: the values of the domain it reads)."""

    levels: int


@register
class Invert(NodeKindDef):
    """A toy kind: every code mirrored in its domain; shape, layout and domain pass through."""

    name = "invert"
    meta = InvertMeta
    dot_shape = "doublecircle"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        producer = producers[0]
        if (node.shape, node.layout, node.domain) != (producer.shape, producer.layout, producer.domain):
            msg = f"invert node {node.name!r}: shape, layout and domain must be those of {producer.name!r}"
            raise GraphError(msg)
        if not isinstance(node.domain, Domain) or node.meta.levels != len(node.domain):
            msg = f"invert node {node.name!r}: meta.levels is {node.meta.levels!r}, its domain has {len(node.domain)}"
            raise GraphError(msg)

    def compile(self, runtime: Any, node: Node) -> Any:
        top = node.meta.levels - 1
        return lambda xs: top - xs[0]

    def label(self, node: Node) -> list[str]:
        return [f"{node.meta.levels} levels"]

    # Hardware: one 1-input table per element (code c -> levels - 1 - c), through the builder's lookup. The
    # tables are equal, so the design holds one module, instantiated once per element.

    def hardware_codes(self, levels: int) -> np.ndarray:
        """What each code ``0..levels-1`` becomes in hardware."""
        return levels - 1 - np.arange(levels)

    def tables(self, node: Node, count: int) -> list[IOTable]:
        codes = self.hardware_codes(node.meta.levels)[:, None]
        return [IOTable.dense(codes, input_domains=[node.domain], output_domain=node.domain)] * count

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        x = np.asarray(inputs[0])
        return builder.lookup(node, self.tables(node, x.size), np.arange(x.size).reshape(-1, 1), x)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        stream = builder.read(node, inputs[0])  # a beat: one pixel (here, the whole flat tensor)
        count = len(stream.ids)
        return builder.lookup(node, self.tables(node, count), np.arange(count).reshape(-1, 1), stream)


def two_layers() -> TableNetwork:
    torch.manual_seed(0)  # the weights, and so the tables, are the same on every run
    model = nn.Sequential(nn.Linear(3, 4), iotable.nn.Quantize(2), nn.Linear(4, 2), iotable.nn.Quantize(2))
    with torch.no_grad():  # weights that spread the codes over the whole domain
        for layer in (model[0], model[2]):
            layer.weight.mul_(2.0).abs_()
            layer.bias.fill_(-1.0)
    return iotable.precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 3))


def with_invert(net: TableNetwork, levels: int | None = None) -> TableNetwork:
    """``net`` with an invert node between its first and second table nodes."""
    first, second = net.graph.nodes_of(NodeKind.TABLE)
    meta = InvertMeta(levels=len(first.domain) if levels is None else levels)
    inverted = Node("inv", NodeKind("invert"), first.shape, first.layout, first.domain, meta)
    nodes = list(net.graph.nodes)
    nodes.insert(nodes.index(first) + 1, inverted)
    edges = []
    for edge in net.graph.edges:
        if edge.producer == first.name and edge.consumer == second.name:
            edges.append(dataclasses.replace(edge, consumer="inv"))
            edges.append(dataclasses.replace(edge, producer="inv"))
        else:
            edges.append(edge)
    return dataclasses.replace(net, graph=Graph(nodes, edges))


def layer_by_hand(net: TableNetwork, node: Node, codes: np.ndarray) -> np.ndarray:
    """A table node's output codes from its tables' lookups, unit by unit (``codes``: its input, flat)."""
    out = np.zeros((len(codes), node.channels), dtype=np.int64)
    for unit, table in zip(node.meta.units, net[node.meta.layer].tables):
        reads = node.meta.index_map[unit.index, : unit.fan_in]
        out[:, list(unit.out_channels)] = table.lookup(codes[:, reads])
    return out


@pytest.fixture(scope="module")
def nets() -> tuple[TableNetwork, TableNetwork]:
    net = two_layers()
    return net, with_invert(net)


def test_the_kind_is_registered_by_name(nets: tuple[TableNetwork, TableNetwork]) -> None:
    """The new kind is looked up by name, is a NodeKind like the built-in ones, and its nodes are drawn its way."""
    assert NodeKind("invert") is definition("invert").kind and NodeKind.PAD is NodeKind("pad")
    assert NodeKind("invert") in set(NodeKind)
    _, net = nets
    assert [n.kind.value for n in net.graph.nodes] == ["input", "table", "invert", "table", "output"]
    assert "shape=doublecircle" in net.graph.to_dot() and "4 levels" in net.graph.to_dot()


def test_a_graph_with_the_kind_passes_its_check(nets: tuple[TableNetwork, TableNetwork]) -> None:
    """Graph.check runs the common checks and the kind's own."""
    _, net = nets
    assert net.graph.check() is net.graph


def test_the_kind_runs_as_its_kernel_says(nets: tuple[TableNetwork, TableNetwork]) -> None:
    """net.run equals the tables looked up by hand with every code of the first layer mirrored in between."""
    plain, net = nets
    x = torch.randint(0, 4, (64, 3), generator=torch.Generator().manual_seed(1)).float()
    codes = net.encode_input(x).to(torch.int64).numpy()
    first, second = net.graph.nodes_of(NodeKind.TABLE)
    middle = len(first.domain) - 1 - layer_by_hand(net, first, codes)
    expected = layer_by_hand(net, second, middle)
    assert np.array_equal(net.run(x, return_codes=True).numpy(), expected)
    assert not np.array_equal(plain.run(x, return_codes=True).numpy(), expected)  # the inversion matters


def test_the_kind_is_saved_and_loaded(nets: tuple[TableNetwork, TableNetwork], tmp_path: Path) -> None:
    """A bundle holds the node's record field by field, and loading gives the same graph, which runs the same."""
    _, net = nets
    path = iotable.save(net, tmp_path / "bundle")
    loaded = iotable.load(path)
    node = loaded.graph["inv"]
    assert node.kind is NodeKind("invert") and node.meta == net.graph["inv"].meta
    x = torch.randint(0, 4, (32, 3), generator=torch.Generator().manual_seed(2)).float()
    assert torch.equal(loaded.run(x), net.run(x))


def test_the_kind_refuses_a_bad_record(nets: tuple[TableNetwork, TableNetwork]) -> None:
    """A tampered record fails Graph.check with the kind's own message."""
    plain, _ = nets
    with pytest.raises(GraphError, match="meta.levels is 3, its domain has 4"):
        with_invert(plain, levels=3).graph.check()
    node = with_invert(plain).graph["inv"]
    with pytest.raises(GraphError, match=r"meta must be a InvertMeta"):
        bad = dataclasses.replace(node, meta=iotable.graph.nodes.OutputMeta())
        with_invert(plain).graph.replace(bad).check()


def test_a_kind_needs_a_fresh_identifier_and_a_record() -> None:
    """register refuses a bad name, a reserved or taken name, and a record that is not a dataclass."""

    class Bad(NodeKindDef):
        name = "not a name"
        meta = InvertMeta

    with pytest.raises(GraphError, match="identifier"):
        register(Bad)
    Bad.name = "pad"
    with pytest.raises(GraphError, match="registered already"):
        register(Bad)
    Bad.name, Bad.meta = "fresh", int
    with pytest.raises(GraphError, match="dataclass"):
        register(Bad)
    with pytest.raises(ValueError, match="not a NodeKind"):
        NodeKind("fresh")


def test_an_interpreter_handles_the_kind_by_its_name(nets: tuple[TableNetwork, TableNetwork]) -> None:
    """A GraphInterpreter subclass meets the new kind in the method of its name, else in default."""
    _, net = nets

    class Kinds(GraphInterpreter[str]):
        def default(self, node: Node, inputs: Sequence[Any]) -> str:
            return "default"

        def invert(self, node: Node, inputs: Sequence[Any]) -> str:
            return f"invert of {inputs[0]}"

    assert Kinds(net.graph).run_graph()["inv"] == "invert of default"
    with pytest.raises(NodeExecutionError, match="no method for invert nodes"):
        GraphInterpreter(net.graph).run_node(net.graph["inv"], [])


# -- hardware ------------------------------------------------------------------------------------------------

SIMULATORS = {"verilog": "iverilog", "vhdl": "ghdl"}


def inputs(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 4, (n, 3), generator=torch.Generator().manual_seed(seed)).float()


def run_bench(design: Design) -> Any:
    simulator = SIMULATORS[design.language]
    require_program(simulator, package=simulator)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    return simulate_files(files, f"{design.top}_tb", simulator=simulator, timeout=300)


@pytest.mark.parametrize("style", ["unrolled", "streaming"])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_the_kind_exports_and_simulates_equal_to_net_run(
    nets: tuple[TableNetwork, TableNetwork], tmp_path: Path, language: str, style: str
) -> None:
    """The kind's hardware is a layer of its tables between the two table layers: the design simulates equal to
    net.run, code for code, and its own bench (vectors from net.run) passes."""
    plain, net = nets
    require_program(SIMULATORS[language], package=SIMULATORS[language])
    design = export(net, tmp_path, language=language, style=style, pipeline=1, vectors=64)
    assert [layer.node for layer in design.layers] == ["0", "inv", "2"]
    inv = design.layers[1]
    assert (inv.layer, inv.units, inv.instances, inv.distinct, inv.rows) == ("inv", 4, 4, 1, 16)
    assert "Layer module of invert node 'inv'" in (design.directory / design.sources[-1]).read_text()
    assert design.latency == 3  # a register after every table layer, the kind's included
    x = inputs(64, 3)
    hardware = simulate(design, x, simulator=SIMULATORS[language])
    assert hardware.dtype == torch.int64
    assert torch.equal(hardware, net.run(x, return_codes=True))
    assert not torch.equal(hardware, plain.run(x, return_codes=True))  # the inverter is in the hardware
    result = run_bench(design)
    assert result.passed and "64/64 vectors match" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_the_kind_passes_synthesis_checks(
    nets: tuple[TableNetwork, TableNetwork], tmp_path: Path, language: str
) -> None:
    """yosys (Verilog) or ghdl's synthesis (VHDL) accepts the design with the kind's layer, combinational too."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    _, net = nets
    design = export(net, tmp_path, language=language, pipeline=0, top="inverted", vectors=4)
    assert design.latency == 0
    assert check(design, timeout=300).top == "inverted"


@pytest.mark.parametrize("style", ["unrolled", "streaming"])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_wrong_hardware_fails_the_bench_and_the_comparison(
    nets: tuple[TableNetwork, TableNetwork], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, language: str, style: str
) -> None:
    """Hardware that disagrees with the kind's kernel (every code kept, not mirrored) is caught: the network bench
    fails, and the simulated codes differ from net.run."""
    _, net = nets
    require_program(SIMULATORS[language], package=SIMULATORS[language])
    monkeypatch.setattr(Invert, "hardware_codes", lambda self, levels: np.arange(levels))
    design = export(net, tmp_path, language=language, style=style, vectors=64)
    result = run_bench(design)
    assert not result.passed and "64/64 vectors match" not in result.stdout
    x = inputs(64, 4)
    assert not torch.equal(simulate(design, x, simulator=SIMULATORS[language]), net.run(x, return_codes=True))


@pytest.mark.parametrize("style", ["unrolled", "streaming"])
def test_a_kind_without_hardware_is_refused_by_name(
    nets: tuple[TableNetwork, TableNetwork], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, style: str
) -> None:
    """A kind that defines no hardware method for a style is refused naming the node, the kind and what to do."""
    _, net = nets
    monkeypatch.setattr(Invert, style, getattr(NodeKindDef, style))
    with pytest.raises(HDLError, match=rf"node kind 'invert' has no hardware in style '{style}'; define {style}\("):
        export(net, tmp_path, style=style)
    assert not any(tmp_path.iterdir())  # refused before the first file
