"""The arithmetic node kinds (``sum``, ``argmax``, ``threshold``) on graphs made by hand: their checks, their
runtime kernels against numpy, bundles, and tampered records refused by name."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind, TableNetwork
from iotable.errors import GraphError
from iotable.graph.graph import Edge, Graph, Node
from iotable.graph.nodes import ArgmaxMeta, SumMeta, ThresholdMeta
from iotable.nodekinds.sum import code_layout
from iotable.nodekinds.threshold import step_function

U2 = Domain.uniform(2)


def four_codes() -> TableNetwork:
    """One table layer of 6 outputs of 2-bit codes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), iotable.nn.Quantize(2))
    with torch.no_grad():
        model[0].weight.mul_(2.0).abs_()
        model[0].bias.fill_(-1.0)
    return iotable.precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 3))


def with_arithmetic(net: TableNetwork, *, constant: int = 3, flip: bool = False) -> TableNetwork:
    """``net`` then: sums of its outputs in 2 groups of 3 (weights 1, 2, -1, plus ``constant``), a threshold of
    each sum (codes 0-3 -> 0, 4-7 -> 1, 8+ -> 2), and the argmax of the two."""
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    index = np.array([[0, 1, 2], [3, 4, 5]])
    weights = np.array([[1, 2, -1], [1, 2, -1]])
    meta = SumMeta(index, weights, np.array([constant, constant]), exact="integer codes")
    top = constant + 3 * 3
    sums = Node("sums", NodeKind.SUM, (2,), code_layout((2,)), Domain(range(top + 1)), meta)
    thresholds = np.array([[4, 8], [4, 8]]) if not flip else np.array([[4, 8], [3, 8]])
    step = ThresholdMeta(thresholds, np.array([0, 0]), np.array([1, 1]))
    levels = Node("levels", NodeKind.THRESHOLD, (2,), sums.layout, Domain(range(3)), step)
    best = Node("best", NodeKind.ARGMAX, (), None, Domain(range(2)), ArgmaxMeta(0))
    output = dataclasses.replace(net.graph.nodes_of(NodeKind.OUTPUT)[0], shape=(), layout=None, domain=best.domain)
    nodes = [n for n in net.graph.nodes if n.kind is not NodeKind.OUTPUT]
    edges = [e for e in net.graph.edges if e.consumer != output.name]
    chain = [table, sums, levels, best, output]
    for producer, consumer in itertools.pairwise(chain):
        edges.append(Edge(producer.name, 0, consumer.name, 0, producer.shape, producer.layout, producer.domain))
    return dataclasses.replace(net, graph=Graph([*nodes, sums, levels, best, output], edges))


def by_hand(codes: np.ndarray) -> np.ndarray:
    sums = 3 + codes[:, [0, 3]] + 2 * codes[:, [1, 4]] - codes[:, [2, 5]]
    levels = (sums >= 4).astype(int) + (sums >= 8)
    return np.argmax(levels, axis=1)


@pytest.fixture(scope="module")
def net() -> TableNetwork:
    return with_arithmetic(four_codes())


def test_the_graph_checks_and_runs_as_the_arithmetic_says(net: TableNetwork) -> None:
    net.graph.check()
    x = torch.randint(0, 4, (256, 3), generator=torch.Generator().manual_seed(1)).float()
    codes = four_codes().run(x, return_codes=True).numpy()
    assert np.array_equal(net.run(x, return_codes=True).numpy(), by_hand(codes))
    assert len(set(by_hand(codes).tolist())) == 2  # both classes happen


def test_it_is_saved_and_loaded(net: TableNetwork, tmp_path: Path) -> None:
    loaded = iotable.load(iotable.save(net, tmp_path / "bundle"))
    for name in ("sums", "levels", "best"):
        assert loaded.graph[name].meta == net.graph[name].meta
    x = torch.randint(0, 4, (32, 3), generator=torch.Generator().manual_seed(2)).float()
    assert torch.equal(loaded.run(x), net.run(x))


def test_liveness_follows_the_terms(net: TableNetwork) -> None:
    from iotable.graph.liveness import liveness

    assert liveness(net.graph).elements["sums"].all()


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        ("sums", {"constant": np.array([-5, 3])}, "reach codes -8"),
        ("sums", {"index_map": np.array([[0, 1, 9], [3, 4, 5]])}, "outside the 6"),
        (
            "sums",
            {"weights": np.array([[1, 2, 0], [1, 2, -1]]), "index_map": np.array([[0, 1, -1], [3, 4, -2]])},
            "below -1",
        ),
        ("levels", {"thresholds": np.array([[8, 4], [4, 8]])}, "must ascend"),
        ("levels", {"start": np.array([0, 2])}, "outside 0 .. 2"),
        ("best", {"dim": 1}, "meta.dim"),
    ],
)
def test_a_tampered_record_is_refused(net: TableNetwork, name: str, change: dict, match: str) -> None:
    node = net.graph[name]
    bad = dataclasses.replace(node, meta=dataclasses.replace(node.meta, **change))
    with pytest.raises(GraphError, match=match):
        net.graph.replace(bad).check()


def test_a_flipped_threshold_changes_the_result(net: TableNetwork) -> None:
    """The threshold is read: moving one changes what the network decides on some input."""
    flipped = with_arithmetic(four_codes(), flip=True)
    x = torch.cartesian_prod(*[torch.arange(4.0)] * 3)
    assert not torch.equal(flipped.run(x), net.run(x))


def test_a_step_function_is_recovered_from_its_table() -> None:
    thresholds, start, direction = step_function(np.array([2, 2, 1, 0, 0]))
    assert thresholds.tolist() == [2, 3] and (start, direction) == (2, -1)
    assert step_function(np.array([0, 1, 0])) is None
