"""GraphInterpreter: a graph walked node by node, one method per kind; the runtime is one, a LUT-bit count another."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import iotable
from iotable import NodeKind, TableNetwork
from iotable.errors import EnumerationError
from iotable.graph.graph import Node
from iotable.graph.interpret import GraphInterpreter, NodeExecutionError
from iotable.runtime.runtime import Runtime

from .test_bundle import build

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class LutBits(GraphInterpreter[int]):
    """Bits of table memory each node holds: rows x outputs x bits per output of its layer's tables; 0 for
    structure (raw outputs count as 32-bit floats)."""

    def __init__(self, net: TableNetwork) -> None:
        super().__init__(net.graph)
        self.net = net

    def default(self, node: Node, inputs: Sequence[int]) -> int:
        return 0

    def table(self, node: Node, inputs: Sequence[int]) -> int:
        bits = node.domain.bits if node.domain is not None else 32
        return sum(t.rows * t.fan_out * bits for t in self.net[node.meta.layer].tables)


def expected_bits(net: TableNetwork) -> int:
    return sum(t.rows * t.fan_out * (t.output_domain.bits if t.output_domain is not None else 32) for t in net.tables)


@pytest.fixture(scope="module")
def example_networks() -> Iterator[dict[str, TableNetwork]]:
    """The networks of the example scripts (models as built, untrained), precomputed: every one a script builds."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        digits = importlib.import_module("_digits")
        image, flat = torch.zeros(1, 1, 8, 8), torch.zeros(1, 64)
        domain = digits.INPUT_DOMAIN
        nets = {
            "digits_cnn": iotable.precompute(
                importlib.import_module("digits_cnn").DigitsCNN().eval(),
                input_domain=domain,
                example_input=image,
                host=["fc"],
            ),
            "digits_mlp": iotable.precompute(
                importlib.import_module("digits_mlp").build_model().eval(), input_domain=domain, example_input=flat
            ),
            "logicnets_style": iotable.precompute(
                importlib.import_module("logicnets_style").JetStyleModel().eval(),
                input_domain=domain,
                example_input=flat,
            ),
        }
        if importlib.util.find_spec("brevitas") is not None:
            brevitas_example = importlib.import_module("digits_brevitas")
            nets["digits_brevitas"] = iotable.precompute(
                brevitas_example.build_model().eval(), input_domain=brevitas_example.PIXELS, example_input=flat
            )
        yield nets
    finally:
        sys.path.remove(str(EXAMPLES))


def test_a_subclass_counts_lut_bits_of_every_example_network(example_networks: dict[str, TableNetwork]) -> None:
    """A three-method subclass walks each example's graph; its per-node bits add up to the tables' own."""
    assert {"digits_cnn", "digits_mlp", "logicnets_style"} <= set(example_networks)
    for name, net in example_networks.items():
        bits = LutBits(net).run_graph()
        assert list(bits) == [n.name for n in net.graph.nodes], name  # every node, in topological order
        assert sum(bits.values()) == expected_bits(net) > 0, name
        assert all(bits[n.name] == 0 for n in net.graph.nodes if n.kind is not NodeKind.TABLE), name


def test_each_node_gets_its_producers_results_by_port() -> None:
    """A node's method receives its producers' results in input-port order; the input node run_graph's arguments."""

    class Shapes(GraphInterpreter[Any]):
        def default(self, node: Node, inputs: Sequence[Any]) -> Any:
            assert list(inputs) == [p.shape for p in self.graph.producers(node.name)]
            return node.shape

        def input(self, node: Node, inputs: Sequence[Any]) -> Any:
            assert list(inputs) == ["start"]
            return node.shape

    net = build("cnn")[1]
    shapes = Shapes(net.graph).run_graph("start")
    assert shapes == {n.name: n.shape for n in net.graph.nodes}


def test_errors_name_the_node_and_chain_the_original() -> None:
    """A failing node's error says "while executing node <name>": library errors keep their class, others
    become NodeExecutionError; the original is the cause."""
    net = build("mlp")[1]

    class Broken(LutBits):
        def table(self, node: Node, inputs: Sequence[int]) -> int:
            raise ValueError("no tables here")

    with pytest.raises(NodeExecutionError, match=r"ValueError: no tables here \(while executing node '0' \(table\)\)"):
        Broken(net).run_graph()
    try:
        Broken(net).run_graph()
    except NodeExecutionError as exc:
        assert isinstance(exc.__cause__, ValueError)

    class Failing(LutBits):
        def table(self, node: Node, inputs: Sequence[int]) -> int:
            raise EnumerationError("lookup failed")

    with pytest.raises(EnumerationError, match=r"lookup failed \(while executing node '0' \(table\)\)"):
        Failing(net).run_graph()


def test_kinds_a_subclass_does_not_handle_are_named() -> None:
    """The base class's methods raise for every kind, naming the kind and the method to define."""

    class OnlyTables(GraphInterpreter[int]):
        def table(self, node: Node, inputs: Sequence[int]) -> int:
            return 1

    with pytest.raises(NodeExecutionError, match=r"OnlyTables has no method for input nodes; define input\(self"):
        OnlyTables(build("mlp")[1].graph).run_graph()


def test_the_runtime_is_an_interpreter_that_compiles_kernels() -> None:
    """The runtime's compile step is a graph walk: one kernel per node, the tables' TableKernels."""
    net = build("cnn")[1]
    runtime = Runtime(net.graph, net.layers)
    assert isinstance(runtime, GraphInterpreter)
    kernels = {n.name: runtime.kernel(n.name) for n in net.graph.nodes}
    assert all(callable(k) for k in kernels.values())
    assert {type(kernels[n.name]).__name__ for n in net.graph.nodes_of("table")} == {"TableKernel"}
    x = torch.randint(0, 4, (3, *net.input_shape))
    np.testing.assert_array_equal(runtime.run(x)[0].numpy(), net.run(x, codes=True, return_codes=True).numpy())
