"""Graph.check as a validator of untrusted graphs: each invariant, broken on purpose, is refused by name."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from torch import nn

from iotable import Domain, Graph, GraphError, Layout, NodeKind, Unit
from iotable.graph import Edge

from .test_bundle import build


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    """A CNN graph (pad, windows, pool, duplicate, concat and add joins) and one with a flatten and host nodes."""
    return {kind: build(kind)[1].graph for kind in ("cnn", "host")}


def replace_edge(graph: Graph, consumer: str, **changes: Any) -> None:
    """Swap the edge into ``consumer`` (port 0) for a copy with ``changes``."""
    k = next(i for i, e in enumerate(graph.edges) if e.consumer == consumer and e.consumer_port == 0)
    graph.edges[k] = dataclasses.replace(graph.edges[k], **changes)


def set_unit(graph: Graph, table: str, u: int, **changes: Any) -> None:
    units = list(graph[table].meta["units"])
    units[u] = dataclasses.replace(units[u], **changes)
    graph[table].meta["units"] = tuple(units)


def swap_row_entries(graph: Graph, table: str) -> None:
    index_map = graph.edges_into(table)[0].index_map
    index_map[0, [0, 1]] = index_map[0, [1, 0]]


def move_input_node(graph: Graph) -> None:
    graph.nodes.insert(1, graph.nodes.pop(0))


# Each case: which graph, the edit, and words the message must hold (the node or edge, expected and received).
CASES: list[tuple[str, str, Callable[[Graph], Any], str]] = [
    (
        "edge-into-missing-node",
        "cnn",
        lambda g: g.edges.append(Edge("add", 0, "ghost", 0, g["add"].shape, g["add"].layout, g["add"].domain)),
        r"its consumer 'ghost' is not a node of the graph",
    ),
    (
        "edge-from-missing-node",
        "cnn",
        lambda g: replace_edge(g, "output", producer="ghost"),
        r"its producer 'ghost' is not a node of the graph",
    ),
    (
        "edge-layout",
        "cnn",
        lambda g: replace_edge(g, "output", layout=Layout.NHWC),
        r"edge 'add' -> 'output' \(port 0\) carries layout NHWC, but 'add' produces NCHW",
    ),
    (
        "edge-port-out-of-range",
        "cnn",
        lambda g: replace_edge(g, "output", consumer_port=3),
        r"drives input port 3 of 'output', which has 1",
    ),
    (
        "output-port-used-twice",
        "cnn",
        lambda g: replace_edge(g, "b:window", producer_port=0),
        r"output port 0 of 'pool:dup' already drives 'a:window'",
    ),
    (
        "duplicate-outputs",
        "cnn",
        lambda g: g["pool:dup"].meta.update(outputs=4),
        r"duplicate node 'pool:dup': has 4 output port\(s\), but edges leave port\(s\) \[0, 1, 2\]",
    ),
    ("input-not-first", "cnn", move_input_node, "reads 'input', which comes at or after it"),
    (
        "input-without-layout-meta",
        "cnn",
        lambda g: g["input"].meta.pop("layout"),
        r"input node 'input': meta\['layout'\] is missing",
    ),
    (
        "shape-as-list",
        "cnn",
        lambda g: setattr(g["pool"], "shape", [4, 3, 3]),
        r"pool node 'pool': shape: expected a tuple of integers, received \[4, 3, 3\]",
    ),
    (
        "shape-beside-layout",
        "cnn",
        lambda g: setattr(g["input"], "layout", Layout.NC),
        r"shape \(2, 5, 5\) has 3 axes, but layout NC describes 1",
    ),
    (
        "channel-domains-count",
        "cnn",
        lambda g: setattr(g["input"], "domain", (Domain.uniform(2, signed=True),) * 3),
        r"lists 3 channel domain\(s\) for 2 channel\(s\)",
    ),
    (
        "input-shapes",
        "cnn",
        lambda g: g["conv:pad"].meta.update(input_shapes=[(2, 5, 4)]),
        r"'conv:pad' expects \(2, 5, 4\) on that port",
    ),
    (
        "table-without-units",
        "cnn",
        lambda g: g["conv"].meta.pop("units"),
        r"table node 'conv': meta\['units'\] is missing; a table node needs it",
    ),
    (
        "table-units-not-units",
        "cnn",
        lambda g: g["conv"].meta.update(units=({"index": 0},)),
        r"unit 0 is a dict, not a Unit",
    ),
    (
        "table-unit-rows",
        "cnn",
        lambda g: set_unit(g, "conv", 1, rows=512),
        r"table 'conv' unit 1 has 512 rows and 8 bits, but the codes it reads from 'conv:window' give 256 rows",
    ),
    (
        "table-unit-bits",
        "cnn",
        lambda g: g["conv"].meta["unit_bits"].__setitem__(2, 7),
        r"table 'conv' unit 2 has 256 rows and 7 bits, but the codes .* give 256 rows and 8 bits",
    ),
    (
        "table-channel-written-twice",
        "cnn",
        lambda g: set_unit(g, "a", 1, out_channels=(0,)),
        r"its units write output channels \[0, 0, 2, 3\]; expected each of its 4 channel\(s\) exactly once",
    ),
    (
        "table-index-map-order",
        "cnn",
        lambda g: swap_row_entries(g, "conv"),
        r"index_map row 0 is \[1, 0, 2, 3\], but unit 0 of 'conv' reads \[0, 1, 2, 3\]",
    ),
    (
        "table-index-map-float",
        "cnn",
        lambda g: replace_edge(g, "conv", index_map=g.edges_into("conv")[0].index_map.astype(np.float64)),
        r"must map the inputs of 4 unit\(s\) with an integer index_map of shape \(4, 4\)",
    ),
    (
        "table-index-map-missing",
        "cnn",
        lambda g: replace_edge(g, "conv", index_map=None),
        r"edge 'conv:window' -> 'conv' \(port 0\) lacks an index_map",
    ),
    (
        "table-spatial-flag",
        "cnn",
        lambda g: g["conv"].meta.update(spatial=1),
        r"meta\['spatial'\] is 1, but it reads a window node",
    ),
    (
        "table-domain-per-channel",
        "cnn",
        lambda g: [setattr(n, "domain", (n.domain,) * 4) for n in (g["conv"],)],
        r"a table's outputs are codes of one Domain or raw values",
    ),
    (
        "table-positions",
        "cnn",
        lambda g: g["conv"].meta.update(positions=(6, 5)),
        r"meta\['positions'\] \(6, 5\) disagree with the \(6, 6\) positions",
    ),
    (
        "pad-code",
        "cnn",
        lambda g: g["conv:pad"].meta["pad_codes"].__setitem__(0, 3),
        r"meta\['pad_codes'\]\[0\] is 3, but padding feeds real 0, code 2",
    ),
    (
        "pad-padding",
        "cnn",
        lambda g: g["conv:pad"].meta.update(padding=((1, 1), (1, 0))),
        r"shape \(2, 7, 7\) differs from \(2, 7, 6\), 'input''s \(2, 5, 5\) padded by \(\(1, 1\), \(1, 0\)\)",
    ),
    (
        "window-kernel",
        "cnn",
        lambda g: g["conv:window"].meta.update(kernel=(3, 3)),
        r"shape \(6, 6, 8\) differs from \(5, 5, 18\)",
    ),
    (
        "window-element-order",
        "cnn",
        lambda g: g["conv:window"].meta.update(element_order="kernel-major"),
        r"meta\['element_order'\] is 'kernel-major'; a NCHW window is 'channel-major'",
    ),
    (
        "window-buffer-depth",
        "cnn",
        lambda g: replace_edge(g, "conv:window", buffer={**g.edges_into("conv:window")[0].buffer, "depth": 17}),
        r"edge 'conv:pad' -> 'conv:window' carries the line buffer .*'depth': 17.*; expected .*'depth': 18",
    ),
    (
        "buffer-on-a-table-edge",
        "cnn",
        lambda g: replace_edge(g, "output", buffer={"depth": 1}),
        r"edge 'add' -> 'output' \(port 0\) has a buffer; edges into window nodes have one",
    ),
    (
        "window-channels",
        "cnn",
        lambda g: g["a:window"].meta.update(channels=3),
        r"reads 'pool:dup' of shape \(4, 3, 3\) as NCHW with 3 channel\(s\)",
    ),
    (
        "pool-meta-beside-module",
        "cnn",
        lambda g: g["pool"].meta.update(stride=1),
        r"pool node 'pool': meta\['stride'\] is 1, but its module's stride is 2",
    ),
    (
        "pool-padding-too-large",
        "cnn",
        lambda g: [g["pool"].meta.update(padding=2), setattr(g["pool"].meta["module"], "padding", 2)],
        r"cannot pool 'conv' of shape \(4, 6, 6\): pad should be at most half",
    ),
    (
        "pool-shape",
        "cnn",
        lambda g: [g["pool"].meta.update(module=nn.MaxPool2d(3), kernel_size=3, stride=3)],
        r"shape \(4, 3, 3\) differs from \(4, 2, 2\)",
    ),
    (
        "join-domains",
        "cnn",
        lambda g: setattr(g["cat"], "domain", (Domain.uniform(2, scale=0.5),) * 6),
        r"join node 'cat': 6 channel\(s\) of domains .* but its operands give 6 of",
    ),
    (
        "join-op",
        "cnn",
        lambda g: g["cat"].meta.update(op="add"),
        r"meta\['op'\] must be 'concat'",
    ),
    (
        "reshape-elements",
        "host",
        lambda g: setattr(g["flatten"], "shape", (26,)),
        r"reshape node 'flatten': shape \(26,\) holds 26 elements, 'pool' gives 27",
    ),
    (
        "host-with-domain",
        "host",
        lambda g: setattr(g["fc"], "domain", Domain.uniform(2)),
        r"host node 'fc': a host node outputs raw values",
    ),
    (
        "host-module",
        "host",
        lambda g: g["fc"].meta.update(module="fc"),
        r"host node 'fc': meta\['module'\] must be the torch module it runs, received str",
    ),
    (
        "pool-domain",
        "host",
        lambda g: setattr(g["pool"], "domain", None),
        r"pool node 'pool': domain None differs",
    ),
]


@pytest.mark.parametrize(("kind", "edit", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_refuses_each_broken_invariant(graphs: dict[str, Graph], kind: str, edit, words: str) -> None:
    """A graph with one invariant broken fails check() with a GraphError naming the node or edge and the values."""
    graph = copy.deepcopy(graphs[kind])
    assert graph.check() is graph  # intact before the edit
    edit(graph)
    with pytest.raises(GraphError, match=words):
        graph.check()


def test_graphs_of_every_test_model_pass(graphs: dict[str, Graph]) -> None:
    """The graphs precompute builds pass the check, every node kind included."""
    kinds = {n.kind for g in graphs.values() for n in g.nodes}
    assert kinds == set(NodeKind)
    for graph in graphs.values():
        assert graph.check() is graph


def test_units_are_validated_before_use(graphs: dict[str, Graph]) -> None:
    """A unit whose fields are of the wrong type is named, not met with an internal error."""
    graph = copy.deepcopy(graphs["cnn"])
    set_unit(graph, "b", 0, fan_in="2")
    with pytest.raises(GraphError, match=r"table node 'b': unit 0 fan_in: expected an integer >= 1, received '2'"):
        graph.check()
    assert isinstance(graphs["cnn"]["b"].meta["units"][0], Unit)
