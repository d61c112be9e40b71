"""Every registered node kind through the same checks: its graph checks, net.run against a reference (the model or
numpy), a bundle round trip, Verilog and VHDL in both styles simulated equal to net.run, and tampered nodes refused.

The suite is parametrized over the registry (:func:`iotable.graph.kind.definitions`): a new kind is tested by
registering it and naming, in :data:`SAMPLE_OF`, a small network that holds one of its nodes. A registered kind
without a sample fails :func:`test_every_registered_kind_has_a_sample`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, TableNetwork
from iotable.errors import GraphError, HDLError
from iotable.graph.graph import Graph, Node
from iotable.graph.kind import BUILTIN_KINDS, definition, definitions
from iotable.hdl import export, simulate
from iotable.nn import Quantize
from iotable.runtime.runtime import Runtime
from tests.optional import require_program
from tests.test_arith_kinds import with_arithmetic
from tests.test_hdl_export import Residual, sparse
from tests.test_node_kind import layer_by_hand, two_layers, with_invert

U2 = Domain.uniform(2)
LANGUAGES = {"verilog": "iverilog", "vhdl": "ghdl"}
STYLES = ("unrolled", "streaming")
VECTORS = 6


@dataclass(frozen=True)
class Sample:
    """A small network and what it must compute: ``reference(x)`` is ``net.run(x)``'s result, found without the
    tables; ``refused`` names the styles whose export refuses one of its nodes (by name and kind)."""

    net: TableNetwork
    reference: Callable[[torch.Tensor], torch.Tensor]
    refused: tuple[str, ...] = ()
    host_modules: dict[str, nn.Module] = dataclasses.field(default_factory=dict)


def _model_sample(model: nn.Module, example: torch.Tensor, **options) -> Sample:
    """A network of ``model``, whose reference is the model itself (net.run's values equal the model's)."""
    net = iotable.precompute(model.eval(), input_domain=U2, example_input=example, **options)

    def reference(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    return Sample(net, reference)


def arithmetic() -> Sample:
    """A table layer of 6 two-bit codes, weighted sums plus 5, thresholds and an argmax (test_arith_kinds' graph);
    the reference computes the arithmetic on the model's codes with numpy."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), Quantize(2)).eval()
    with torch.no_grad():
        model[0].weight.mul_(2.0).abs_()
        model[0].bias.fill_(-1.0)
    net = with_arithmetic(iotable.precompute(model, input_domain=U2, example_input=torch.zeros(1, 3)), constant=5)

    def reference(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            codes = model[1].domain.encode(model(x).numpy())
        sums = 5 + codes[:, [0, 3]] + 2 * codes[:, [1, 4]] - codes[:, [2, 5]]
        return torch.from_numpy(np.argmax((sums >= 4).astype(np.int64) + (sums >= 8), axis=1)).float()

    return Sample(net, reference)


def convolution() -> Sample:
    """A zero-padded Conv1d, a max-pool and a flatten: pad, window, table, pool and reshape nodes."""
    torch.manual_seed(4)
    model = nn.Sequential(
        OrderedDict(c1=nn.Conv1d(2, 2, 3, padding=1), q1=Quantize(1), pool=nn.MaxPool1d(2), flat=nn.Flatten())
    )
    return _model_sample(model, torch.zeros(1, 2, 6))


def residual() -> Sample:
    """test_hdl_export's skip connection: a duplicate and a join; streaming refuses the duplicate by name."""
    return dataclasses.replace(_model_sample(Residual(), torch.zeros(1, 6)), refused=("streaming",))


def hosted() -> Sample:
    """A table layer and a float head left to torch (a host node): hardware ends at the table layer."""
    model = nn.Sequential(OrderedDict(fc1=sparse(4, 3, 2, 2), q1=Quantize(2), head=nn.Linear(3, 2)))
    sample = _model_sample(model, torch.zeros(1, 4), host=["head"])
    return dataclasses.replace(sample, host_modules={"head": model.head})


def inverted() -> Sample:
    """test_node_kind's kind registered from outside the library (an invert node between two table layers); the
    reference looks the second layer up by hand on the first layer's inverted codes."""
    plain = two_layers()
    net = with_invert(plain)

    def reference(x: torch.Tensor) -> torch.Tensor:
        first, second = plain.graph.table_nodes()
        codes = plain.runtime.run(plain.runtime.encode(x, codes=False, input_shape=(3,)), capture=True)[1]
        flipped = len(first.domain) - 1 - codes[first.name].numpy().reshape(len(x), -1)
        out = layer_by_hand(plain, second, flipped)
        return torch.from_numpy(np.asarray(second.domain.values, dtype=np.float32)[out])

    return Sample(net, reference)


SAMPLES: dict[str, Callable[[], Sample]] = {
    "arithmetic": arithmetic,
    "convolution": convolution,
    "residual": residual,
    "hosted": hosted,
    "inverted": inverted,
}
#: The sample network that holds a node of each kind.
SAMPLE_OF = {
    "input": "arithmetic", "output": "arithmetic", "table": "arithmetic", "sum": "arithmetic",
    "threshold": "arithmetic", "argmax": "arithmetic", "pad": "convolution", "window": "convolution",
    "pool": "convolution", "reshape": "convolution", "duplicate": "residual", "join": "residual",
    "host": "hosted", "invert": "inverted",
}  # fmt: skip
KINDS = [kind.value for kind in definitions()]


@cache
def sample(name: str) -> Sample:
    return SAMPLES[name]()


def inputs(net: TableNetwork, n: int = VECTORS, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random input values of ``net`` and their codes."""
    node = net.graph.nodes[0]
    codes = torch.randint(0, len(node.domain), (n, *node.shape), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(node.domain.values, dtype=torch.float32)[codes], codes


def node_of(kind: str) -> tuple[Sample, Node]:
    """The kind's sample network and its first node of the kind."""
    held = sample(SAMPLE_OF[kind])
    return held, next(n for n in held.net.graph.nodes if n.kind.value == kind)


def test_every_registered_kind_has_a_sample() -> None:
    """Each registered kind names a sample network that holds one of its nodes (the built-in ones among them)."""
    assert set(KINDS) >= set(BUILTIN_KINDS)
    missing = sorted(set(KINDS) - set(SAMPLE_OF))
    assert missing == [], f"name a sample network for the kind(s) {missing} in SAMPLE_OF"


@pytest.mark.parametrize("kind", KINDS)
def test_the_kind_passes_its_checks_and_says_what_it_is(kind: str) -> None:
    """The sample graph passes Graph.check (the kind's own check among them), and what the kind's definition says
    of its nodes (tabulated, hosted, windowed, ...) holds of the node."""
    held, node = node_of(kind)
    held.net.graph.check()
    kind_def = definition(node.kind)
    assert isinstance(node.meta, kind_def.meta)
    assert node in held.net.graph.table_nodes() if kind_def.tabulated else node not in held.net.graph.table_nodes()
    if kind_def.tabulated:
        assert held.net[node.meta.layer].plan.units == node.meta.units
    if kind_def.hosted:
        assert node in held.net.graph.host_nodes() and isinstance(node.meta.module, nn.Module)
    if kind_def.windowed:
        assert node.shape[-1] == node.meta.channels * node.meta.taps
    assert node.kind.is_input == (node is held.net.graph.nodes[0])
    assert node.kind.is_output == (node is held.net.graph.nodes[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_the_kind_runs_equal_to_its_reference(kind: str) -> None:
    """net.run of the sample equals its reference (the model, or numpy), value for value, on random inputs."""
    held, _ = node_of(kind)
    x, _ = inputs(held.net, 64, seed=1)
    result = held.net.run(x)
    assert torch.equal(result, held.reference(x).to(result.dtype))


@pytest.mark.parametrize("kind", KINDS)
def test_the_kind_survives_a_bundle_round_trip(kind: str, tmp_path: Path) -> None:
    """Saved and loaded, the sample's graph (the kind's node and record included) is equal and runs the same."""
    held, node = node_of(kind)
    iotable.save(held.net, tmp_path / "net")
    loaded = iotable.load(tmp_path / "net", host_modules=held.host_modules or None)
    assert isinstance(loaded, TableNetwork)
    assert loaded.graph == held.net.graph and loaded.graph[node.name].meta == node.meta
    x, _ = inputs(held.net, seed=2)
    assert torch.equal(loaded.run(x), held.net.run(x))


@cache
def hardware(name: str, style: str, language: str, directory: Path) -> tuple[torch.Tensor, torch.Tensor] | HDLError:
    """The sample's design simulated on a few inputs, and the codes net.run gives its output node (or the error its
    export raised); once per sample, style and language."""
    held = sample(name)
    try:
        design = export(held.net, directory / f"{name}_{style}_{language}", language=language, style=style, vectors=4)
    except HDLError as exc:
        return exc
    x, codes = inputs(held.net, seed=3)
    _, captured = held.net.runtime.run(codes, capture=True)
    simulated = simulate(design, x, simulator=LANGUAGES[language])
    return simulated, captured[design.output_node].reshape(simulated.shape)


@pytest.fixture(scope="module")
def designs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("designs")


@pytest.mark.parametrize("language", sorted(LANGUAGES))
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_the_kind_simulates_equal_to_net_run(kind: str, style: str, language: str, designs: Path) -> None:
    """The sample exported in the style and language simulates equal to net.run's codes of the design's output
    node (iverilog, GHDL); a style the sample's nodes cannot be built in is refused naming the node and kind."""
    require_program(LANGUAGES[language], package=LANGUAGES[language])
    held, _ = node_of(kind)
    result = hardware(SAMPLE_OF[kind], style, language, designs)
    if style in held.refused:
        assert isinstance(result, HDLError) and "cannot build node" in str(result), result
        return
    assert not isinstance(result, HDLError), result
    simulated, expected = result
    assert simulated.dtype == torch.int64 and torch.equal(simulated, expected)


def _tampered(net: TableNetwork, node: Node, changed: Node) -> Graph:
    return Graph([changed if n.name == node.name else n for n in net.graph.nodes], net.graph.edges)


class _Stranger:
    """A record of no kind."""


@pytest.mark.parametrize("kind", KINDS)
def test_a_node_with_another_record_is_refused(kind: str) -> None:
    """The kind's node holding a record that is not its kind's is refused by Graph.check, naming the node."""
    held, node = node_of(kind)
    graph = _tampered(held.net, node, dataclasses.replace(node, meta=_Stranger()))
    with pytest.raises(GraphError, match=rf"{node.name}"):
        graph.check()


@pytest.mark.parametrize("kind", KINDS)
def test_a_node_of_another_shape_is_refused(kind: str) -> None:
    """The kind's node claiming a shape one element longer than its edges carry is refused by Graph.check."""
    held, node = node_of(kind)
    shape = (*node.shape[:-1], node.shape[-1] + 1) if node.shape else (2,)
    graph = _tampered(held.net, node, dataclasses.replace(node, shape=shape))
    with pytest.raises(GraphError, match=rf"{node.name}"):
        graph.check()


#: Per kind whose record has fields: a corruption of its record its own check must refuse, and words of the refusal.
TAMPERS: dict[str, tuple[Callable[[Any], dict[str, Any]], str]] = {
    "table": (lambda m: {"index_map": np.where(m.index_map >= 0, m.index_map + 100, -1)}, "reads element 100"),
    "sum": (lambda m: {"weights": m.weights[:, :1]}, "meta.weights must be an integer array"),
    "threshold": (lambda m: {"direction": m.direction * 2}, "meta.direction be 1 or -1"),
    "argmax": (lambda m: {"dim": 3}, "meta.dim must be an axis"),
    "pad": (lambda m: {"padding": ((2, 2),)}, "padded by ((2, 2),)"),
    "window": (lambda m: {"buffer_depth": m.buffer_depth + 1}, "meta.buffer_depth is"),
    "pool": (lambda m: {"kernel_size": (5,)}, "what a max-pool of"),
    "duplicate": (lambda m: {"outputs": m.outputs + 1}, "output port(s), but edges leave"),
    "join": (lambda m: {"op": "add"}, "meta.op must be 'concat'"),
    "host": (lambda m: {"module": "head"}, "meta.module must be the torch module"),
    "invert": (lambda m: {"levels": 1}, "meta.levels is 1"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_corrupted_record_is_refused_by_its_kind(kind: str) -> None:
    """One field of the kind's record corrupted is refused by Graph.check with the kind's own words; a kind whose
    record has fields must name such a corruption in TAMPERS (kinds without fields: the shape test above)."""
    held, node = node_of(kind)
    if not dataclasses.fields(node.meta):
        assert kind not in TAMPERS
        return
    assert kind in TAMPERS, f"name a corruption of the {kind!r} record in TAMPERS"
    change, words = TAMPERS[kind]
    corrupted = dataclasses.replace(node, meta=dataclasses.replace(node.meta, **change(node.meta)))
    with pytest.raises(GraphError, match=re.escape(words)):
        _tampered(held.net, node, corrupted).check()


@pytest.mark.parametrize("name", ["arithmetic", "convolution"])
def test_the_runtime_reads_table_nodes_not_plans(name: str) -> None:
    """The planning record is history: layers whose tables keep no plan run exactly as the network does, the units
    read from the table nodes' own records."""
    net = sample(name).net
    bare = {layer: dataclasses.replace(tables, plan=None) for layer, tables in net.layers.items()}
    _, codes = inputs(net, 32, seed=4)
    assert torch.equal(Runtime(net.graph, bare).run(codes)[0], net.runtime.run(codes)[0])
