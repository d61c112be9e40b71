"""QONNX in: a MatMul/Gemm layer too wide for one table becomes partial-sum tables, a sum node and a closing table
(or thresholds), as the torch route splits the same linear layer; refused with the reason where its float32 sums
may round."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind
from iotable.errors import TableTooLargeError
from iotable.nn import Quantize

from . import qonnxmodels as qm
from .optional import require_program

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install 'iotable[onnx]')")
pytest.importorskip("qonnx", reason="the onnx extra (pip install 'iotable[onnx]')")

D2 = Domain.uniform(2, scale=0.5)  # the input quantizer of qm.linear_model (2-bit unsigned, scale 0.5)


def eighths(inputs: int, outputs: int, seed: int = 0) -> np.ndarray:
    """Weights ``(inputs, outputs)`` in eighths from -7/8 to 7/8 (a power-of-two grid: exact float32 sums)."""
    return np.random.default_rng(seed).integers(-7, 8, (inputs, outputs)).astype(np.float32) / 8


def gemm_model(weights: np.ndarray, bias: np.ndarray) -> Any:
    """Input Quant (2-bit unsigned, scale 0.5) -> Gemm(transB=1, ``weights`` (outputs, inputs), ``bias``) -> Relu
    -> Quant (3-bit unsigned, scale 1): brevitas' form of a QuantLinear with a bias, then a QuantReLU."""
    from onnx import helper

    outputs, inputs = weights.shape
    nodes = [
        qm.quant("qin", "x", "xq", bits=2, signed=0),
        helper.make_node("Gemm", ["xq", "w", "b"], ["h"], name="gemm", transB=1),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        qm.quant("qout", "r", "y", bits=3, signed=0),
    ]
    inits = [
        qm.constant("w", weights),
        qm.constant("b", bias),
        *qm.quant_constants("qin", scale=0.5),
        *qm.quant_constants("qout", scale=1.0, bits=3),
    ]
    return qm.model(nodes, inits, features=inputs, outputs=outputs)


def torch_twin(weights: np.ndarray, bias: np.ndarray | None, *, relu: bool, signed: bool) -> nn.Module:
    """The torch model computing what the QONNX model does: ``nn.Linear`` (``weights`` (outputs, inputs)), then the
    same 3-bit quantizer (after a ReLU where ``relu``)."""
    outputs, inputs = weights.shape
    linear = nn.Linear(inputs, outputs, bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weights))
        if bias is not None:
            linear.bias.copy_(torch.from_numpy(bias))
    rest = [nn.ReLU()] if relu else []
    return nn.Sequential(linear, *rest, Quantize(3, scale=1.0, signed=signed)).eval()


def samples(features: int, n: int = 2000, seed: int = 0) -> np.ndarray:
    index = np.random.default_rng(seed).integers(0, len(D2), (n, features))
    return np.asarray(D2.values, np.float32)[index]


def assert_same_network(net: iotable.TableNetwork, twin: iotable.TableNetwork) -> None:
    """Same node kinds in the same order, same domains, same sum and threshold records, same tables."""
    assert [n.kind for n in net.graph.nodes] == [n.kind for n in twin.graph.nodes]
    for mine, theirs in zip(net.graph.nodes, twin.graph.nodes):
        assert mine.shape == theirs.shape and mine.domain == theirs.domain, (mine.name, theirs.name)
        if mine.kind is NodeKind.SUM:
            for field in ("index_map", "weights", "constant"):
                assert np.array_equal(getattr(mine.meta, field), getattr(theirs.meta, field)), field
        if mine.kind is NodeKind.THRESHOLD:
            assert np.array_equal(mine.meta.thresholds, theirs.meta.thresholds)
    assert len(net.tables) == len(twin.tables) and all(a == b for a, b in zip(net.tables, twin.tables))


@pytest.fixture(scope="module")
def wide() -> tuple[Any, np.ndarray, iotable.TableNetwork]:
    """A MatMul of 64 two-bit inputs to 6 outputs (4**64 rows per output as one table), split."""
    weights = eighths(64, 6)
    proto = qm.linear_model(weights, out_signed=1)
    return proto, weights, iotable.precompute(proto)


def test_a_wide_matmul_is_split_and_verify_agrees_with_execute_onnx(wide) -> None:  # type: ignore[no-untyped-def]
    """The layer becomes partial-sum tables, a sum node and thresholds; verify agrees on 2,000 inputs."""
    proto, _, net = wide
    kinds = [n.kind for n in net.graph.nodes]
    assert kinds.count(NodeKind.TABLE) == 1 and kinds.count(NodeKind.SUM) == 1 and NodeKind.THRESHOLD in kinds
    assert "exact" in net.graph.nodes_of(NodeKind.SUM)[0].meta.exact
    assert iotable.verify(proto, net, samples(64)).agreement == 1.0


def test_a_changed_partial_sum_row_is_caught_by_verify(wide) -> None:  # type: ignore[no-untyped-def]
    """Tamper: one row of one partial-sum table changed; verify against execute_onnx sees it on some input."""
    proto, _, net = wide
    name, layer = next(iter(net.layers.items()))
    table = layer.tables[0]
    outputs = np.array(table.outputs, copy=True)
    outputs[0, 0] = len(table.output_domain) - 1  # row 0 (every input at code 0): the group's largest sum
    bad = iotable.IOTable.dense(outputs, input_domains=table.input_domains, output_domain=table.output_domain)
    tampered = dataclasses.replace(
        net, layers={**net.layers, name: dataclasses.replace(layer, tables=(bad, *layer.tables[1:]))}
    )
    lowest = np.full((1, 64), D2.values[0], np.float32)  # every input at code 0: row 0 of every table
    assert iotable.verify(proto, tampered, np.concatenate([lowest, samples(64, 50)])).agreement < 1.0
    assert iotable.verify(proto, net, lowest).agreement == 1.0


def test_the_tables_and_network_equal_the_torch_routes(wide) -> None:  # type: ignore[no-untyped-def]
    """The same layer as nn.Linear and a quantizer gives the same partial sums, sum node, thresholds and runs."""
    _, weights, net = wide
    model = torch_twin(weights.T.copy(), None, relu=False, signed=True)
    twin = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))
    assert_same_network(net, twin)
    x = torch.from_numpy(samples(64, 500, seed=1))
    assert torch.equal(net.run(x), twin.run(x))


def test_a_gemm_with_bias_and_relu_is_split_as_the_torch_route_splits_it() -> None:
    """Gemm (transB=1) with a bias in quarters, then Relu and the quantizer: verify agrees, the network is the
    torch route's (the bias in the sum node, the ReLU in the closing table)."""
    weights = eighths(40, 4, seed=2).T.copy()
    bias = np.array([0.25, -1.5, 2.0, -0.75], np.float32)
    proto = gemm_model(weights, bias)
    net = iotable.precompute(proto)
    assert iotable.verify(proto, net, samples(40, seed=2)).agreement == 1.0
    twin = iotable.precompute(
        torch_twin(weights, bias, relu=True, signed=False), input_domain=D2, example_input=torch.zeros(1, 40)
    )
    assert_same_network(net, twin)


def test_weights_off_a_power_of_two_grid_stay_refused_with_the_reason() -> None:
    """Weights of 0.3 make the float32 sums round: the too-wide layer is refused, saying so and how to fix it."""
    weights = np.full((64, 2), 0.3, np.float32)
    with pytest.raises(TableTooLargeError, match=r"more than max_rows.*nor is it exact arithmetic.*'mm'.*may round"):
        iotable.precompute(qm.linear_model(weights))
    assert iotable.precompute(qm.linear_model(eighths(64, 2)))  # tamper: the same layer in eighths is split


def test_a_split_network_exports_to_onnx_equal_under_onnxruntime(wide, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """export_onnx of the split network runs under onnxruntime bit for bit as net.run."""
    ort = pytest.importorskip("onnxruntime", reason="the onnx extra (pip install 'iotable[onnx]')")
    _, _, net = wide
    x = torch.from_numpy(samples(64, 300, seed=4))
    path = iotable.export_onnx(net, tmp_path / "net.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": x.numpy()})[0]
    assert np.array_equal(got, net.run(x).numpy())


def test_a_small_split_network_simulates_equal_in_verilog(tmp_path: Path) -> None:
    """A 12-input MatMul split under max_rows=1024: the Verilog design under iverilog equals net.run."""
    require_program("iverilog", package="iverilog")
    from iotable.hdl import export, simulate

    proto = qm.linear_model(eighths(12, 3, seed=5), out_signed=1)
    net = iotable.precompute(proto, max_rows=1024)
    kinds = [n.kind for n in net.graph.nodes]
    assert kinds[1:4] == [NodeKind.TABLE, NodeKind.SUM, NodeKind.THRESHOLD]  # partial sums, adders, comparisons
    x = torch.from_numpy(samples(12, 60, seed=5))
    expected = net.run(x, return_codes=True)
    got = simulate(export(net, tmp_path / "verilog", language="verilog"), x, simulator="iverilog")
    assert torch.equal(got.reshape(expected.shape).to(expected.dtype), expected)


@pytest.mark.slow
def test_a_brevitas_export_of_a_wide_quant_linear_is_split_as_the_torch_route_splits_it(tmp_path: Path) -> None:
    """brevitas' export_qonnx of a fixed-point QuantLinear of 64 inputs: the same sum and thresholds as the torch
    route makes of the brevitas model itself, and verify agrees with execute_onnx on 2,000 inputs."""
    qnn = pytest.importorskip("brevitas.nn", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    bq = pytest.importorskip("brevitas.quant")
    torch.manual_seed(0)
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.Uint8ActPerTensorFixedPoint, bit_width=2),
        qnn.QuantLinear(64, 8, bias=False, weight_quant=bq.Int8WeightPerTensorFixedPoint, weight_bit_width=3),
        qnn.QuantIdentity(act_quant=bq.Int8ActPerTensorFixedPoint, bit_width=3),
    ).eval()
    path = qm.export_brevitas(model, tmp_path / "wide.onnx", 64)
    net = iotable.precompute(path)
    domain = net.graph.nodes[0].domain
    assert NodeKind.SUM in [n.kind for n in net.graph.nodes]
    twin = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, 64))
    assert_same_network(net, twin)
    index = np.random.default_rng(6).integers(0, len(domain), (2000, 64))
    assert iotable.verify(path, net, np.asarray(domain.values, np.float32)[index]).agreement == 1.0


def test_a_second_matmul_before_the_quantizer_is_not_split() -> None:
    """Two products before one quantizer mix the first one's sums, which a table per sum cannot read: the wide layer
    stays refused as too large (the single product, the tamper beside it, is split)."""
    from onnx import helper

    first, second = eighths(64, 4), eighths(4, 2, seed=1)
    nodes = [
        qm.quant("qin", "x", "xq", bits=2, signed=0),
        helper.make_node("MatMul", ["xq", "w1"], ["h1"], name="mm1"),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="mm2"),
        qm.quant("qout", "h2", "y", bits=3, signed=1),
    ]
    inits = [
        qm.constant("w1", first),
        qm.constant("w2", second),
        *qm.quant_constants("qin", scale=0.5),
        *qm.quant_constants("qout", scale=1.0, bits=3),
    ]
    with pytest.raises(TableTooLargeError, match=r"more than max_rows=16,777,216; prune its fan-in") as caught:
        iotable.precompute(qm.model(nodes, inits, features=64, outputs=2))
    assert "exact arithmetic" not in str(caught.value)
    single = iotable.precompute(qm.linear_model(first, out_signed=1))
    assert NodeKind.SUM in [n.kind for n in single.graph.nodes]


def test_tables_that_fit_but_cost_more_are_split_as_in_the_torch_route() -> None:
    """Nine 2-bit inputs per output (2**18 rows, under max_rows) cost more as tables than as sums by the estimates:
    split, as the torch route splits the same layer; verify agrees with execute_onnx."""
    weights = eighths(9, 4, seed=7)
    weights[weights == 0] = 0.125  # every output reads all nine inputs
    proto = qm.linear_model(weights, out_signed=1)
    net = iotable.precompute(proto)
    assert NodeKind.SUM in [n.kind for n in net.graph.nodes]
    twin = iotable.precompute(
        torch_twin(weights.T.copy(), None, relu=False, signed=True), input_domain=D2, example_input=torch.zeros(1, 9)
    )
    assert_same_network(net, twin)
    assert iotable.verify(proto, net, samples(9)).agreement == 1.0


def test_tables_of_up_to_2_16_rows_stay_tables() -> None:
    """Tamper for the estimate: eight 2-bit inputs per output (2**16 rows) are not compared, and stay tables."""
    weights = eighths(8, 4, seed=7)
    weights[weights == 0] = 0.125  # every output reads all eight inputs
    net = iotable.precompute(qm.linear_model(weights, out_signed=1))
    assert [n.kind for n in net.graph.nodes].count(NodeKind.TABLE) == 1 and len(net.tables) == 4
    assert NodeKind.SUM not in [n.kind for n in net.graph.nodes]
