"""Graph.check as a validator of untrusted graphs: each invariant, broken on purpose, is refused by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from iotable import Domain, Graph, Layout, NodeKind
from iotable.errors import GraphError
from iotable.front.plan import Unit
from iotable.graph.graph import Edge, ElementOrder, OutputMeta
from iotable.graph.kind import BUILTIN_KINDS

from .test_bundle import build


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    """A CNN graph (pad, windows, pool, duplicate, concat and add joins), one with a flatten and host nodes, and one
    with arithmetic (partial sums, a sum, a threshold and an argmax)."""
    graphs = {kind: build(kind)[1].graph for kind in ("cnn", "host")}
    graphs["arith"] = _arithmetic_graph()
    return graphs


def _arithmetic_graph() -> Graph:
    import torch
    from torch import nn

    import iotable
    from tests.test_arith_front import Decide
    from tests.test_arith_split import D2, dyadic_linear

    model = nn.Sequential(*dyadic_linear(), Decide()).eval()
    return iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64)).graph


def with_node(graph: Graph, name: str, **changes: Any) -> Graph:
    """The graph with node ``name`` changed; the edges it drives carry its new shape, layout and domain."""
    node = dataclasses.replace(graph[name], **changes)
    carried = {k: v for k, v in changes.items() if k in ("shape", "layout", "domain")}
    edges = [dataclasses.replace(e, **carried) if e.producer == name else e for e in graph.edges]
    return Graph([node if n.name == name else n for n in graph.nodes], edges)


def with_meta(graph: Graph, name: str, **changes: Any) -> Graph:
    """The graph with fields of node ``name``'s metadata record changed."""
    return graph.replace(dataclasses.replace(graph[name], meta=dataclasses.replace(graph[name].meta, **changes)))


def with_edge(graph: Graph, consumer: str, **changes: Any) -> Graph:
    """The graph with the edge into ``consumer`` (port 0) changed."""
    edges = [
        dataclasses.replace(e, **changes) if e.consumer == consumer and e.consumer_port == 0 else e for e in graph.edges
    ]
    return Graph(graph.nodes, edges)


def with_unit(graph: Graph, table: str, u: int, **changes: Any) -> Graph:
    units = list(graph[table].meta.units)
    units[u] = dataclasses.replace(units[u], **changes)
    return with_meta(graph, table, units=tuple(units))


def with_index_map(graph: Graph, table: str, edit: Callable[[np.ndarray], Any]) -> Graph:
    index_map = np.array(graph[table].meta.index_map)
    edit(index_map)
    return with_meta(graph, table, index_map=index_map)


def swapped(graph: Graph, a: str, b: str) -> Graph:
    nodes = list(graph.nodes)
    i, j = (next(k for k, n in enumerate(nodes) if n.name == name) for name in (a, b))
    nodes[i], nodes[j] = nodes[j], nodes[i]
    return Graph(nodes, graph.edges)


def ghost_edge(g: Graph) -> Graph:
    return Graph(g.nodes, (*g.edges, Edge("add", 0, "ghost", 0, g["add"].shape, g["add"].layout, g["add"].domain)))


# Each case: which graph, the edit, and words the message must hold (the node or edge, expected and received).
CASES: list[tuple[str, str, Callable[[Graph], Graph], str]] = [
    ("edge-into-missing-node", "cnn", ghost_edge, r"its consumer 'ghost' is not a node of the graph"),
    (
        "edge-from-missing-node",
        "cnn",
        lambda g: with_edge(g, "output", producer="ghost"),
        r"its producer 'ghost' is not a node of the graph",
    ),
    (
        "edge-layout",
        "cnn",
        lambda g: with_edge(g, "output", layout=Layout.NHWC),
        r"edge 'add' -> 'output' \(port 0\) carries layout NHWC, but 'add' produces NCHW",
    ),
    (
        "edge-port-out-of-range",
        "cnn",
        lambda g: with_edge(g, "output", consumer_port=3),
        r"output node 'output': edges drive its input port\(s\) \[3\]; a output node reads exactly one producer",
    ),
    (
        "node-not-driven",
        "cnn",
        lambda g: Graph(g.nodes, [e for e in g.edges if e.consumer != "conv"]),
        r"table node 'conv': edges drive its input port\(s\) \[\]",
    ),
    (
        "output-port-used-twice",
        "cnn",
        lambda g: with_edge(g, "b:window", producer_port=0),
        r"output port 0 of 'pool:dup' already drives 'a:window'",
    ),
    (
        "duplicate-outputs",
        "cnn",
        lambda g: with_meta(g, "pool:dup", outputs=4),
        r"duplicate node 'pool:dup': has 4 output port\(s\), but edges leave port\(s\) \[0, 1, 2\]",
    ),
    (
        "input-not-first",
        "cnn",
        lambda g: swapped(g, "input", "conv:pad"),
        r"expected the input node first and the output node last, received pad first",
    ),
    (
        "not-topological",
        "cnn",
        lambda g: swapped(g, "conv", "conv:window"),
        r"'conv' reads 'conv:window', which comes at or after it: the graph has a cycle or is not in topological",
    ),
    (
        "meta-as-dict",
        "cnn",
        lambda g: with_node(g, "conv", meta={"layer": "conv"}),
        r"table node 'conv': meta must be a TableMeta \(the table node's record\), received dict",
    ),
    (
        "meta-of-another-kind",
        "cnn",
        lambda g: with_node(g, "input", meta=OutputMeta()),
        r"input node 'input': meta must be a InputMeta .* received OutputMeta",
    ),
    (
        "shape-as-list",
        "cnn",
        lambda g: with_node(g, "pool", shape=[4, 3, 3]),
        r"pool node 'pool': shape: expected a tuple of integers, received \[4, 3, 3\]",
    ),
    (
        "shape-beside-layout",
        "cnn",
        lambda g: with_node(g, "input", layout=Layout.NC),
        r"shape \(2, 5, 5\) has 3 axes, but layout NC describes 1",
    ),
    (
        "channel-domains-count",
        "cnn",
        lambda g: with_node(g, "input", domain=(Domain.uniform(2, signed=True),) * 3),
        r"lists 3 channel domain\(s\) for 2 channel\(s\)",
    ),
    (
        "table-without-units",
        "cnn",
        lambda g: with_meta(g, "conv", units=()),
        r"table node 'conv': meta.units must be a non-empty tuple of its units",
    ),
    (
        "table-units-not-units",
        "cnn",
        lambda g: with_meta(g, "conv", units=({"index": 0},)),
        r"unit 0 is a dict, not a Unit",
    ),
    (
        "table-unit-rows",
        "cnn",
        lambda g: with_unit(g, "conv", 1, rows=512),
        r"table 'conv' unit 1 has 512 rows and 8 bits, but the codes it reads from 'conv:window' give 256 rows",
    ),
    (
        "table-unit-bits",
        "cnn",
        lambda g: with_meta(g, "conv", unit_bits=(8, 8, 7, 8)),
        r"table 'conv' unit 2 has 256 rows and 7 bits, but the codes .* give 256 rows and 8 bits",
    ),
    (
        "table-channel-written-twice",
        "cnn",
        lambda g: with_unit(g, "a", 1, out_channels=(0,)),
        r"its units write output channels \[0, 0, 2, 3\]; expected each of its 4 channel\(s\) exactly once",
    ),
    (
        "table-index-map-order",
        "cnn",
        lambda g: with_index_map(g, "conv", lambda m: m.__setitem__((0, [0, 1]), m[0, [1, 0]])),
        r"meta.index_map row 0 is \[1, 0, 2, 3\], but unit 0 of 'conv' reads \[0, 1, 2, 3\]",
    ),
    (
        "table-input-not-driven",
        "cnn",
        lambda g: with_index_map(g, "conv", lambda m: m.__setitem__((2, 1), -1)),
        r"table 'conv' unit 2 input 1 is not driven \(index -1 in meta.index_map\)",
    ),
    (
        "table-index-map-float",
        "cnn",
        lambda g: with_meta(g, "conv", index_map=g["conv"].meta.index_map.astype(np.float64)),
        r"meta.index_map must be an integer array of shape \(4, 4\), received float64",
    ),
    (
        "table-index-map-missing",
        "cnn",
        lambda g: with_meta(g, "conv", index_map=None),
        r"table node 'conv': meta.index_map must be an integer array of shape \(4, 4\), received NoneType",
    ),
    (
        "table-domain-per-channel",
        "cnn",
        lambda g: with_node(g, "conv", domain=(g["conv"].domain,) * 4),
        r"a table's outputs are codes of one Domain or raw values",
    ),
    (
        "table-positions",
        "cnn",
        lambda g: with_node(g, "conv", shape=(4, 6, 5)),
        r"shape \(4, 6, 5\) \(NCHW\) disagrees with the \(6, 6\) positions of the NCHW window 'conv:window'",
    ),
    (
        "pad-code",
        "cnn",
        lambda g: with_meta(g, "conv:pad", pad_codes=(3, 2)),
        r"meta.pad_codes\[0\] is 3, but padding feeds real 0, code 2",
    ),
    (
        "pad-padding",
        "cnn",
        lambda g: with_meta(g, "conv:pad", padding=((1, 1), (1, 0))),
        r"shape \(2, 7, 7\) differs from \(2, 7, 6\), 'input''s \(2, 5, 5\) padded by \(\(1, 1\), \(1, 0\)\)",
    ),
    (
        "pad-mode-as-string",
        "cnn",
        lambda g: with_meta(g, "conv:pad", mode="zeros"),
        r"pad node 'conv:pad': meta.mode is 'zeros'; expected one of PaddingMode.ZEROS",
    ),
    (
        "window-kernel",
        "cnn",
        lambda g: with_meta(g, "conv:window", kernel=(3, 3)),
        r"shape \(6, 6, 8\) differs from \(5, 5, 18\)",
    ),
    (
        "window-element-order",
        "cnn",
        lambda g: with_meta(g, "conv:window", element_order=ElementOrder.KERNEL_MAJOR),
        r"meta.element_order is 'kernel-major'; a NCHW window is 'channel-major'",
    ),
    (
        "window-buffer-depth",
        "cnn",
        lambda g: with_meta(g, "conv:window", buffer_depth=17),
        r"window node 'conv:window': meta.buffer_depth is 17; a kernel \(2, 2\) .* buffers 18 elements",
    ),
    (
        "window-channels",
        "cnn",
        lambda g: with_meta(g, "a:window", channels=3),
        r"reads 'pool:dup' of shape \(4, 3, 3\) as NCHW with 3 channel\(s\)",
    ),
    (
        "pool-stride",
        "cnn",
        lambda g: with_meta(g, "pool", stride=(1, 1)),
        r"pool node 'pool': shape \(4, 3, 3\) differs from \(4, 5, 5\)",
    ),
    (
        "pool-stride-as-int",
        "cnn",
        lambda g: with_meta(g, "pool", stride=2),
        r"pool node 'pool': meta.stride: expected a tuple of 2 integers >= 1, received 2",
    ),
    (
        "pool-padding-too-large",
        "cnn",
        lambda g: with_meta(g, "pool", padding=(2, 2)),
        r"cannot pool 'conv' of shape \(4, 6, 6\): pad should be at most half",
    ),
    (
        "pool-shape",
        "cnn",
        lambda g: with_meta(g, "pool", kernel_size=(3, 3), stride=(3, 3)),
        r"shape \(4, 3, 3\) differs from \(4, 2, 2\)",
    ),
    (
        "join-domains",
        "cnn",
        lambda g: with_node(g, "cat", domain=(Domain.uniform(2, scale=0.5),) * 6),
        r"join node 'cat': 6 channel\(s\) of domains .* but its operands give 6 of",
    ),
    ("join-op", "cnn", lambda g: with_meta(g, "cat", op="add"), r"meta.op must be 'concat'"),
    (
        "reshape-elements",
        "host",
        lambda g: with_node(g, "flatten", shape=(26,)),
        r"reshape node 'flatten': shape \(26,\) holds 26 elements, 'pool' gives 27",
    ),
    (
        "host-with-domain",
        "host",
        lambda g: with_node(g, "fc", domain=Domain.uniform(2)),
        r"host node 'fc': a host node outputs raw values",
    ),
    (
        "host-module",
        "host",
        lambda g: with_meta(g, "fc", module="fc"),
        r"host node 'fc': meta.module must be the torch module it runs, received str",
    ),
    (
        "pool-domain",
        "host",
        lambda g: with_node(g, "pool", domain=None),
        r"pool node 'pool': domain None differs",
    ),
]


@pytest.mark.parametrize(("kind", "edit", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_refuses_each_broken_invariant(graphs: dict[str, Graph], kind: str, edit, words: str) -> None:
    """A graph with one invariant broken fails check() with a GraphError naming the node or edge and the values."""
    graph = graphs[kind]
    assert graph.check() is graph  # intact before the edit
    broken = edit(graph)
    with pytest.raises(GraphError, match=words):
        broken.check()
    assert graph.check() is graph  # the edit made a new graph: the original is unchanged


def test_graphs_of_every_test_model_pass(graphs: dict[str, Graph]) -> None:
    """The graphs precompute builds pass the check, every node kind included."""
    kinds = {n.kind for g in graphs.values() for n in g.nodes}
    assert kinds == {NodeKind(k) for k in BUILTIN_KINDS}
    for graph in graphs.values():
        assert graph.check() is graph


def test_units_are_validated_before_use(graphs: dict[str, Graph]) -> None:
    """A unit whose fields are of the wrong type is named, not met with an internal error."""
    graph = with_unit(graphs["cnn"], "b", 0, fan_in="2")
    with pytest.raises(
        GraphError, match=r"table node 'b': unit 0 fan_in: expected an integer >= 1 and < 2\*\*62, received '2'"
    ):
        graph.check()
    assert isinstance(graphs["cnn"]["b"].meta.units[0], Unit)


def test_a_unit_field_past_int64_is_named(graphs: dict[str, Graph]) -> None:
    """A unit whose channel index or fan-in is 10**20 is named with the range, not met with a C overflow."""
    for fields in ({"in_channels": (10**20,)}, {"fan_in": 10**20}):
        with pytest.raises(GraphError, match=r"table node 'b': unit 0 \w+: expected .*< 2\*\*62, received"):
            with_unit(graphs["cnn"], "b", 0, **fields).check()


def test_nodes_and_their_arrays_are_immutable(graphs: dict[str, Graph]) -> None:
    """A graph cannot be edited in place: nodes and records are frozen, their index maps read-only."""
    graph = graphs["cnn"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph["conv"].shape = (1,)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph["conv"].meta.layer = "x"  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        graph["conv"].meta.index_map[0, 0] = 1
    assert isinstance(graph.nodes, tuple) and isinstance(graph.edges, tuple)


def test_node_inputs_are_what_the_edges_say(graphs: dict[str, Graph]) -> None:
    """A node's producers come from the edges into it, port by port."""
    graph = graphs["cnn"]
    for node in graph.nodes:
        assert graph.inputs(node.name) == tuple(e.producer for e in graph.edges_into(node.name))
    assert len(graph.inputs("add:join")) == 2 and graph.inputs("input") == ()
