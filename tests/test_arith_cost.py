"""The cost of arithmetic nodes (``sum``, ``argmax``, ``threshold``): the estimate's formulas, the logic handed to
ABC against the node kinds' kernels, mapped netlists checked (a tampered one caught), the cache, dead outputs
and the summaries."""

from __future__ import annotations

import dataclasses
import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind, TableNetwork
from iotable.errors import IOTableWarning, NetlistMismatchError
from iotable.graph.graph import Edge, Graph, Node
from iotable.graph.kind import definition
from iotable.graph.nodes import ArgmaxMeta, SumMeta, ThresholdMeta
from iotable.lutcount import adder_tree_luts, comparator_tree_luts, signed_digits, threshold_luts
from iotable.lutnet import Lut, LutNetlist
from iotable.nodekinds.sum import code_layout
from iotable.synth import ArithFunction, arithmetic_estimate, check_arithmetic, cost
from iotable.synth.arith import function_blif, node_terms

from .optional import require_program

U2 = Domain.uniform(2)


def six_codes() -> TableNetwork:
    """One table layer of 6 outputs of 2-bit codes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), iotable.nn.Quantize(2))
    return iotable.precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 3))


def chained(net: TableNetwork, nodes: list[Node]) -> TableNetwork:
    """``net`` with ``nodes`` after its table node, each reading the one before, the last feeding the output."""
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    last = nodes[-1]
    output = dataclasses.replace(net.graph.nodes_of(NodeKind.OUTPUT)[0], shape=last.shape, layout=last.layout)
    output = dataclasses.replace(output, domain=last.domain)
    kept = [n for n in net.graph.nodes if n.kind is not NodeKind.OUTPUT]
    edges = [e for e in net.graph.edges if e.consumer != output.name]
    for producer, consumer in itertools.pairwise([table, *nodes, output]):
        edges.append(Edge(producer.name, 0, consumer.name, 0, producer.shape, producer.layout, producer.domain))
    return dataclasses.replace(net, graph=Graph([*kept, *nodes, output], edges))


def sum_node(name: str, index: list[list[int]], weights: list[list[int]], constant: list[int], codes: int) -> Node:
    meta = SumMeta(np.array(index), np.array(weights), np.array(constant), exact="integer codes")
    shape = (len(index),)
    return Node(name, NodeKind.SUM, shape, code_layout(shape), Domain(range(codes)), meta)


def with_arithmetic(net: TableNetwork) -> TableNetwork:
    """Sums of 2 groups of 3 codes (weights 1, 2, -1, plus 3), a threshold of each, the argmax of the two."""
    sums = sum_node("sums", [[0, 1, 2], [3, 4, 5]], [[1, 2, -1], [1, 2, -1]], [3, 3], 13)
    step = ThresholdMeta(np.array([[4, 8], [4, 8]]), np.array([0, 0]), np.array([1, 1]))
    levels = Node("levels", NodeKind.THRESHOLD, (2,), sums.layout, Domain(range(3)), step)
    best = Node("best", NodeKind.ARGMAX, (), None, Domain(range(2)), ArgmaxMeta(0))
    return chained(net, [sums, levels, best])


def with_dead_output(net: TableNetwork) -> TableNetwork:
    """Three sums of pairs of codes, then the sum of the first two: the third sum reaches no output."""
    pairs = sum_node("pairs", [[0, 1], [2, 3], [4, 5]], [[1, 1]] * 3, [0, 0, 0], 7)
    total = sum_node("total", [[0, 1]], [[1, 1]], [0], 13)
    return chained(net, [pairs, total])


@pytest.fixture
def abc() -> str:
    require_program("berkeley-abc", package="berkeley-abc")
    return "berkeley-abc"


@pytest.fixture(scope="module")
def net() -> TableNetwork:
    return with_arithmetic(six_codes())


# -- the estimate ----------------------------------------------------------------------------------------------


def test_signed_digits_rebuild_the_weight() -> None:
    """Every weight is the sum of its signed digits, no two adjacent (canonical signed-digit form)."""
    for weight in range(-300, 301):
        digits = signed_digits(weight)
        assert sum(d << p for p, d in digits) == weight
        assert all(b - a >= 2 for (a, _), (b, _) in itertools.pairwise(digits))


def test_estimates_are_positive_and_grow_with_width() -> None:
    """Adder trees, comparator trees and thresholds cost more LUTs as their codes widen or multiply."""
    popcounts = [adder_tree_luts([1] * n, [1] * n, output_bits=n.bit_length()) for n in (8, 16, 64, 128, 256)]
    sums = [
        adder_tree_luts([b] * 8, [1, 3, -2, 5, 1, 1, -1, 2], constant=8 << b, output_bits=b + 6) for b in range(2, 9)
    ]
    argmaxes = [comparator_tree_luts(10, b) for b in range(2, 13)]
    candidates = [comparator_tree_luts(n, 8) for n in range(2, 20)]
    thresholds = [threshold_luts(b, 3, output_bits=2) for b in range(7, 20)]
    for counts in (popcounts, sums, argmaxes, candidates, thresholds):
        assert counts[0] > 0
        assert all(a <= b for a, b in itertools.pairwise(counts)), counts
        assert counts[-1] > counts[0]


def test_the_estimate_of_small_logic_is_its_table() -> None:
    """Logic of at most k input bits is one LUT per output bit, whatever its arithmetic."""
    assert adder_tree_luts([2, 2, 2], [1, 2, -1], constant=3, output_bits=4) == 4
    assert comparator_tree_luts(3, 2) == 2
    assert threshold_luts(5, 4, output_bits=3) == 3
    assert threshold_luts(1, 1, output_bits=1) == 0  # a 1-bit code is its own comparison


def test_the_network_estimate_counts_each_node(net: TableNetwork) -> None:
    """arithmetic_estimate gives one record per arithmetic node, in graph order, each output counted."""
    found = arithmetic_estimate(net.graph)
    assert [(c.node, c.kind, c.outputs, c.dead, c.distinct) for c in found] == [
        ("sums", "sum", 2, 0, 1),
        ("levels", "threshold", 2, 0, 1),
        ("best", "argmax", 1, 0, 1),
    ]
    assert [(c.input_bits, c.output_bits) for c in found] == [(6, 4), (4, 2), (4, 1)]
    assert [c.estimate for c in found] == [8, 4, 1]  # 6 and 4 input bits: one LUT per output bit
    assert all(c.luts is None for c in found)


def test_the_estimate_summary_shows_tables_and_arithmetic(net: TableNetwork) -> None:
    """An estimate with arithmetic nodes lists them and adds their LUTs beside the tables'."""
    model = nn.Sequential(nn.Linear(4, 3), iotable.nn.Quantize(2)).eval()
    tables = iotable.estimate(model, input_domain=U2, example_input=torch.zeros(1, 4))
    estimate = dataclasses.replace(tables, arithmetic=arithmetic_estimate(net.graph))
    text = estimate.summary()
    assert "threshold" in text and "argmax" in text
    assert "tables: 30 LUT6, arithmetic: 13 LUT6 (estimate), in all 43 LUT6" in text
    assert (estimate.luts, estimate.arithmetic_luts, estimate.total_luts) == (30, 13, 43)


def test_a_model_without_arithmetic_estimates_as_before() -> None:
    """iotable.estimate of a table-only model has no arithmetic record and no arithmetic line."""
    model = nn.Sequential(nn.Linear(4, 3), iotable.nn.Quantize(2)).eval()
    found = iotable.estimate(model, input_domain=U2, example_input=torch.zeros(1, 4))
    assert found.arithmetic == () and found.total_luts == found.luts == 30
    assert "arithmetic" not in found.summary()


def test_dead_outputs_are_left_out_unless_kept() -> None:
    """A sum output no network output reads is counted only with keep_dead=True."""
    graph = with_dead_output(six_codes()).graph
    live = {c.node: (c.outputs, c.dead) for c in arithmetic_estimate(graph)}
    every = {c.node: (c.outputs, c.dead) for c in arithmetic_estimate(graph, keep_dead=True)}
    assert live == {"pairs": (2, 1), "total": (1, 0)}
    assert every == {"pairs": (3, 1), "total": (1, 0)}


# -- the logic against the kernels ------------------------------------------------------------------------------


def unmapped(fn: ArithFunction) -> LutNetlist:
    """The logic iotable hands ABC, read as a netlist of its gates (each of at most 3 inputs)."""
    return LutNetlist.from_blif(function_blif(fn))


FUNCTIONS = [
    ArithFunction("sum", (4, 4, 4), 4, weights=(1, 2, -1), constant=3),
    ArithFunction("sum", (2,) * 20, 5, weights=(1,) * 20),
    ArithFunction("sum", (16,) * 8, 9, weights=(1, 3, -2, 5, -7, 2, 1, -1), constant=150),
    ArithFunction("sum", (3, 5, 1), 4, weights=(-4, 3, 6), constant=12),
    ArithFunction("threshold", (4096,), 2, constant=0, thresholds=(100, 1000, 3000), direction=1),
    ArithFunction("threshold", (5,), 3, constant=5, thresholds=(0, 2, 2, 4, 9), direction=-1),
    ArithFunction("argmax", (4,) * 3, 2),
    ArithFunction("argmax", (256,) * 10, 4),
    ArithFunction("argmax", (3,) * 5, 3),
    ArithFunction("argmax", (8,), 1),
    ArithFunction("sum", (), 3, constant=5),
]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda fn: f"{fn.kind}-{len(fn.radices)}x{fn.input_bits}")
def test_the_generated_logic_computes_the_kernel(fn: ArithFunction) -> None:
    """Adders, comparators and multiplexers equal the node kind's kernel (exhaustive up to 16 bits)."""
    check_arithmetic(unmapped(fn), fn, name="the logic")


def test_each_output_function_is_its_node_output(net: TableNetwork) -> None:
    """Every output's canonical function, on the codes of the elements it reads, gives the node's kernel output:
    sums (repeated elements merged, zero weights dropped), thresholds, and an argmax along an inner axis."""
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    grid = sum_node(
        "grid",
        [[0, 0], [1, 2], [3, -1], [4, 5], [5, 1], [2, 2]],
        [[1, 1], [2, 0], [3, 0], [1, 1], [2, -1], [1, 0]],
        [1, 0, 0, 0, 3, 0],
        10,
    )
    grid = dataclasses.replace(grid, shape=(2, 3), layout=code_layout((2, 3)))
    rows = Node("rows", NodeKind.ARGMAX, (2,), code_layout((2,)), Domain(range(3)), ArgmaxMeta(1))
    graphs = [net.graph, chained(six_codes(), [grid, rows]).graph]
    codes = torch.randint(0, 4, (64, 6), generator=torch.Generator().manual_seed(3))
    for graph in graphs:
        graph.check()
        values = {table.name: codes}
        for node in graph.nodes[graph.nodes.index(graph[table.name]) + 1 : -1]:
            kernel = definition(node.kind).compile(None, node)
            values[node.name] = kernel([values[graph.producers(node.name)[0].name]])
            flat = values[graph.producers(node.name)[0].name].reshape(64, -1).numpy()
            out = values[node.name].reshape(64, -1).numpy()
            for k, (fn, elements) in enumerate(node_terms(graph, node)):
                assert np.array_equal(fn.reference(flat[:, list(elements)]), out[:, k]), (node.name, k)
                check_arithmetic(unmapped(fn), fn, name=node.name)


def test_argmax_logic_takes_the_first_of_equal_codes() -> None:
    """Ties go to the first index, as torch.argmax: all-equal codes give 0, two equal maxima the first."""
    fn = ArithFunction("argmax", (4,) * 4, 2)
    codes = np.array([[2, 2, 2, 2], [1, 3, 0, 3], [0, 1, 3, 3]])
    assert fn.reference(codes).tolist() == [0, 1, 2]
    check_arithmetic(unmapped(fn), fn, name="the logic")


def flipped(netlist: LutNetlist, fn: ArithFunction) -> LutNetlist:
    """``netlist`` with one mask bit flipped: the LUT driving the last output bit, at the row the all-lowest
    input codes select (so that this output changes there)."""
    every = LutNetlist(netlist.inputs, tuple(n.output for n in netlist.nodes), netlist.nodes, "")
    values = every.simulate({name: np.zeros(1, np.uint64) for name in netlist.inputs})
    target = next(i for i, n in enumerate(netlist.nodes) if n.output == netlist.outputs[-1] and n.is_lut)
    node = netlist.nodes[target]
    seen = {name: int(values.get(name, np.zeros(1, np.uint64))[0] & np.uint64(1)) for name in node.inputs}
    row = "".join(str(seen[name]) for name in node.inputs)
    masks = itertools.product("01", repeat=len(node.inputs))
    covered = {"".join(m) for m in masks if _covers(node, "".join(m))}
    covered ^= {row}
    cubes = tuple(sorted(covered))
    return dataclasses.replace(
        netlist, nodes=(*netlist.nodes[:target], Lut(node.output, node.inputs, cubes), *netlist.nodes[target + 1 :])
    )


def _covers(node: Lut, row: str) -> bool:
    hit = any(all(c in ("-", r) for c, r in zip(cube, row)) for cube in node.cubes)
    return hit if node.onset else not hit


@pytest.mark.parametrize("fn", [FUNCTIONS[0], FUNCTIONS[1]], ids=["exhaustive", "random vectors"])
def test_a_tampered_netlist_is_caught(fn: ArithFunction, abc: str) -> None:
    """One LUT mask bit flipped in ABC's netlist fails the check, on every combination or on random ones."""
    from iotable.synth.abcrun import find_abc, resolve_script, run_abc
    from iotable.synth.arithmap import ARITH_SCRIPT

    script = resolve_script(ARITH_SCRIPT, 6, what="test")
    ((text, _),) = run_abc(find_abc(abc, what="test"), [function_blif(fn).encode()], script, timeout=60, names=["fn"])
    mapped = LutNetlist.from_blif(text)
    check_arithmetic(mapped, fn, name="fn", k=6)
    with pytest.raises(NetlistMismatchError, match="does not compute the"):
        check_arithmetic(flipped(mapped, fn), fn, name="fn", k=6)


# -- net.cost -----------------------------------------------------------------------------------------------------


def test_cost_maps_and_reports_the_arithmetic(net: TableNetwork, abc: str) -> None:
    """cost() maps every arithmetic node beside the tables; the summary gives both counts."""
    report = cost(net, workers=1, abc=abc, progress=False)
    assert [(c.node, c.outputs, c.distinct, c.cached) for c in report.arithmetic] == [
        ("sums", 2, 1, 0),
        ("levels", 2, 1, 0),
        ("best", 1, 1, 0),
    ]
    assert all(c.luts is not None and 0 < c.luts <= c.estimate for c in report.arithmetic)
    assert report.total_luts == report.luts + report.arithmetic_luts > report.luts
    text = report.summary()
    assert f"tables: {report.luts} LUT6, arithmetic: {report.arithmetic_luts} LUT6 (ABC)" in text
    again = cost(report.network, workers=1, abc=abc)
    assert [c.cached for c in again.arithmetic] == [1, 1, 1] and again.arithmetic_luts == report.arithmetic_luts


def test_a_bundle_keeps_only_the_tables_results(net: TableNetwork, tmp_path: Path, abc: str) -> None:
    """The network a cost report holds saves and loads; the bundle stores its tables' results, not the arithmetic's."""
    report = cost(net, workers=1, abc=abc)
    loaded = iotable.load(iotable.save(report.network, tmp_path / "bundle"))
    assert {r.method for r in report.network.luts.values()} >= {"arith"}
    assert {r.method for r in loaded.luts.values()} <= {"abc", "direct"} and len(loaded.luts) == report.distinct
    assert [c.cached for c in cost(loaded, workers=1, abc=abc).arithmetic] == [0, 0, 0]


def test_the_cache_holds_arithmetic_results(net: TableNetwork, tmp_path: Path, abc: str) -> None:
    """A second run reads every arithmetic result from the cache; a tampered entry is mapped again, warned."""
    first = cost(net, workers=1, abc=abc, cache_dir=tmp_path)
    second = cost(net, workers=1, abc=abc, cache_dir=tmp_path)
    assert [c.cached for c in second.arithmetic] == [1, 1, 1]
    assert [c.luts for c in second.arithmetic] == [c.luts for c in first.arithmetic]
    arithmetic = [p for p in tmp_path.iterdir() if json.loads(p.read_text())["method"] == "arith"]
    assert len(arithmetic) == 3
    record = json.loads(arithmetic[0].read_text())
    record["luts"] += 1
    arithmetic[0].write_text(json.dumps(record))
    with pytest.warns(IOTableWarning, match="mapping .* again"):
        third = cost(net, workers=1, abc=abc, cache_dir=tmp_path)
    assert sorted(c.cached for c in third.arithmetic) == [0, 1, 1]
    assert json.loads(arithmetic[0].read_text())["luts"] == record["luts"] - 1


def test_cost_leaves_dead_outputs_out_unless_kept(abc: str) -> None:
    """A dead sum output is neither mapped nor counted unless keep_dead=True."""
    net = with_dead_output(six_codes())
    with warnings.catch_warnings():
        warnings.simplefilter("error", IOTableWarning)
        live = cost(net, workers=1, abc=abc)
        every = cost(net, workers=1, abc=abc, keep_dead=True)
    assert [(c.node, c.outputs, c.dead) for c in live.arithmetic] == [("pairs", 2, 1), ("total", 1, 0)]
    assert [(c.node, c.outputs, c.dead) for c in every.arithmetic] == [("pairs", 3, 1), ("total", 1, 0)]
    pairs = every.arithmetic[0].luts, live.arithmetic[0].luts
    assert pairs[0] is not None and pairs[1] is not None and pairs[0] > pairs[1]


def test_a_table_only_network_reports_as_before(abc: str) -> None:
    """Without arithmetic nodes the report has no arithmetic record and no arithmetic line."""
    report = cost(six_codes(), workers=1)
    assert report.arithmetic == () and report.total_luts == report.luts
    assert "arithmetic" not in report.summary()
