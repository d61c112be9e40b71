"""The QONNX front end's pooling, truncation, joining and data-movement operations: each from a brevitas export
and from hand-written graphs, exact against qonnx's executor (onnxruntime for the QCDQ form), equal to the torch
route's tables where brevitas has the model, and equal as plain ONNX and Verilog to net.run."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import iotable

from . import qonnxmodels as qm
from . import qonnxopmodels as om
from .optional import require_program

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install 'iotable[onnx]')")
pytest.importorskip("qonnx", reason="the onnx extra (pip install 'iotable[onnx]')")

_SHAPES = {1: (2, 8), 2: (2, 6, 6)}


def _plain_onnx_equal(net: iotable.TableNetwork, x: np.ndarray, path: Path) -> bool:
    """Whether ``export_onnx``'s model gives ``net.run``'s codes under onnxruntime."""
    onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra (pip install 'iotable[onnx]')")
    iotable.export_onnx(net, path, codes=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.astype(np.int64)})[0]
    return bool(np.array_equal(got, net.run(torch.from_numpy(x), codes=True, return_codes=True).numpy()))


# -- MaxPool and AveragePool -------------------------------------------------------------------------------------


@pytest.mark.slow  # brevitas' exports take ~10 s
@pytest.mark.parametrize("rank", [1, 2])
def test_brevitas_pools_give_the_torch_routes_tables_and_agree_in_both_forms(rank: int, tmp_path: Path) -> None:
    """A max-pool and an average pool after a quantized convolution: the torch route's nodes and tables, and all
    of 300 inputs agree with qonnx's executor (export_qonnx) and onnxruntime (export_onnx_qcdq)."""
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    shape = _SHAPES[rank]
    model = om.brevitas_pool(rank, trunc=False)
    path = om.export(model, tmp_path / "pools.onnx", shape)
    net = iotable.precompute(path)
    ref = iotable.precompute(model, input_domain=net.input_node.domain, example_input=torch.zeros(1, *shape))
    assert [n.kind.value for n in net.graph.nodes] == ["input", "window", "table", "pool", "window", "table", "output"]
    assert [n.kind.value for n in net.graph.nodes] == [n.kind.value for n in ref.graph.nodes]
    assert _same_pool(net, ref)
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in ref.tables]
    x = np.random.default_rng(2).integers(0, 4, size=(300, *shape))
    assert iotable.verify(path, net, x, codes=True).ok
    qcdq = om.export(model, tmp_path / "pools_qcdq.onnx", shape, qcdq=True)
    assert [t.outputs.tolist() for t in iotable.precompute(qcdq).tables] == [t.outputs.tolist() for t in net.tables]
    assert iotable.verify(qcdq, net, x, codes=True).ok


def _same_pool(net: iotable.TableNetwork, ref: iotable.TableNetwork) -> bool:
    """Whether the two networks' pool nodes pool the same windows (the records' information fields aside)."""
    fields = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
    mine = [tuple(getattr(n.meta, f) for f in fields) for n in net.graph.nodes if n.kind.value == "pool"]
    theirs = [tuple(getattr(n.meta, f) for f in fields) for n in ref.graph.nodes if n.kind.value == "pool"]
    return mine == theirs


@pytest.mark.slow  # brevitas' exports take ~10 s
def test_brevitas_trunc_avg_pool_agrees_in_both_forms_and_runs_equal_as_plain_onnx(tmp_path: Path) -> None:
    """brevitas' TruncAvgPool2d (AveragePool then QONNX's Trunc, or QuantizeLinear in the QCDQ form): all of 300
    inputs agree with the reference executors, and export_onnx runs equal to net.run."""
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    shape = _SHAPES[2]
    model = om.brevitas_pool(2, trunc=True)
    path = om.export(model, tmp_path / "trunc.onnx", shape)
    assert "Trunc" in {n.op_type for n in onnx.load(str(path)).graph.node}
    net = iotable.precompute(path)
    x = np.random.default_rng(3).integers(0, 4, size=(300, *shape))
    assert iotable.verify(path, net, x, codes=True).ok
    qcdq = om.export(model, tmp_path / "trunc_qcdq.onnx", shape, qcdq=True)
    assert iotable.verify(qcdq, iotable.precompute(qcdq), x, codes=True).ok
    assert _plain_onnx_equal(net, x, tmp_path / "tables.onnx")


_POOLS = [
    ("MaxPool", {}),
    ("MaxPool", {"pads": [1, 1], "strides": [2]}),
    ("MaxPool", {"kernel_shape": [2], "dilations": [2]}),
    ("AveragePool", {"pads": [1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3], "strides": [2]}),
]


@pytest.mark.parametrize(("op", "attributes"), _POOLS, ids=[f"{op}-{sorted(a)}" for op, a in _POOLS])
def test_hand_written_pools_agree_with_execute_onnx_on_every_input(op: str, attributes: dict) -> None:
    """Pools with pads, strides and dilations on every one of 4,096 inputs: the codes of qonnx's executor."""
    proto = om.pool_model(op, **attributes)
    net = iotable.precompute(proto)
    kinds = [n.kind.value for n in net.graph.nodes]
    assert ("pool" in kinds) == (op == "MaxPool")
    assert ("pad" in kinds) == (op == "AveragePool" and "pads" in attributes)
    assert iotable.verify(proto, net, om.every_input((2, 5), 4), codes=True).ok


def test_a_pool_network_runs_equal_as_plain_onnx_and_verilog(tmp_path: Path) -> None:
    """A max-pool then a quantizer: export_onnx under onnxruntime and the Verilog under iverilog give net.run."""
    from iotable.hdl import export, simulate

    net = iotable.precompute(om.pool_model("MaxPool", pads=[1, 1], strides=[2]))
    x = om.every_input((2, 5), 4)[::41]
    assert _plain_onnx_equal(net, x, tmp_path / "tables.onnx")
    require_program("iverilog", package="iverilog")
    design = export(net, tmp_path / "hdl", top="t", vectors=8)
    got = simulate(design, torch.from_numpy(x[:60]), codes=True)
    assert torch.equal(got, design.reference(torch.from_numpy(x[:60]), codes=True))


def test_an_average_pool_sums_in_float32_as_the_model_does() -> None:
    """A mean of float32 thirds that float32 puts on a rounding tie (0.25 / 0.5) rounds as the model's float32
    sum does, not as the exact rational (a hair above the tie) would."""
    proto = om.pool_model("AveragePool", kernel_shape=[4])
    for node in proto.graph.initializer:
        if node.name == "qin_s":
            node.CopyFrom(om.constant("qin_s", np.float32(1 / 3)))
        if node.name == "qout_s":
            node.CopyFrom(om.constant("qout_s", 0.5))
    net = iotable.precompute(proto)
    codes = (2, 3, 3, 3)  # values 0, 1/3, 1/3, 1/3 (signed 2-bit: code 2 is 0): a float32 mean of exactly 0.25
    exact = Fraction(float(np.float32(1 / 3))) * 3 / 4 / Fraction(1, 2)
    assert exact > Fraction(1, 2)  # the exact rational would round up to q = 1 (code 5)
    row = int(np.ravel_multi_index(codes, (4, 4, 4, 4)))
    assert net.tables[0].outputs[row, 0] == 4  # q = 0 of -4..3, as float32 rounds
    x = np.array([[[2, 3, 3, 3, 0], [0, 0, 0, 0, 0]]])
    assert iotable.verify(proto, net, x, codes=True).ok


_CHAINS = {"add-relu": (2, 3), "pool-mul": (2, 5), "pool-affine": (2, 5)}


@pytest.mark.parametrize("kind", list(_CHAINS))
def test_steps_after_a_float32_sum_compute_in_float32_as_the_model_does(kind: str) -> None:
    """A Relu after a residual add, a Mul or a BatchNormalization after an average pool: the layer stays in
    float32 up to its quantizer's division, so rows that float32 puts on a rounding tie agree with qonnx's
    executor on every input."""
    proto = om.float32_chain_model(kind)
    net = iotable.precompute(proto)
    assert sum(r.get("near_ties") or 0 for r in net.rows()) > 0  # the scales do put rows on ties
    assert iotable.verify(proto, net, om.every_input(_CHAINS[kind], 4), codes=True).ok


def test_steps_after_a_float32_sum_in_the_qcdq_form_agree_with_onnxruntime() -> None:
    """The AveragePool -> Mul chain in the QCDQ form: QuantizeLinear divides in float32 too, so every input agrees
    with onnxruntime and the codes are those of the QONNX form."""
    proto = om.float32_chain_qcdq()
    net = iotable.precompute(proto)
    x = om.every_input((2, 5), 4)
    assert iotable.verify(proto, net, x, codes=True).ok
    qonnx_net = iotable.precompute(om.float32_chain_model("pool-mul"))
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in qonnx_net.tables]


def test_a_batch_norm_after_a_float32_sum_folds_its_constants_as_onnxruntime() -> None:
    """The row whose mean equals the batch norm's mean gives the bias (0.1, a tie at scale 0.2) in float64, but
    onnxruntime's folded scale and bias give a hair more, which rounds up: the table holds the model's code."""
    net = iotable.precompute(om.float32_chain_model("pool-affine"))
    row = int(np.ravel_multi_index((3, 3), (4, 4)))  # 1/7 and 1/7: their mean is the batch norm's mean
    assert net.tables[0].outputs[row, 0] == 5  # q = 1 of -4..3 (0.5 rounded half to even would give 0)


def test_a_mismatch_at_a_tie_of_a_float32_layer_is_reported_as_one() -> None:
    """Tamper: a network built with HALF_UP against the model's ROUND differs only at halves; verify locates
    the row, its float32 value and says the layer computes in float32 rather than that it is exact."""
    wrong = iotable.precompute(om.float32_chain_model("pool-mul", mode="HALF_UP"))
    proto = om.float32_chain_model("pool-mul")
    report = iotable.verify(proto, wrong, om.every_input((2, 5), 4), codes=True)
    assert not report.ok and report.first is not None
    first = report.first
    assert first["tie"] and abs(first["table"] - first["model"]) == 1
    assert first["value"] == float(np.float32(first["value"]))
    assert "computes in float32" in first["note"] and "exact result" not in first["note"]


# -- Trunc -------------------------------------------------------------------------------------------------------

_MODES = ["FLOOR", "ROUND", "CEIL", "HALF_UP", "HALF_DOWN", "UP", "DOWN"]


def _exact_trunc(codes: tuple[int, int], mode: str, out_scale: float, bits: int, signed: int) -> int:
    """The Trunc of the mean of two 3-bit inputs (scale 1/2) by its opset-2 definition, in exact rationals."""
    mean = Fraction(sum(codes), 2) / 2
    integer = round(mean / Fraction(1, 4))  # input scale 1/4: the mean is an integer of it
    shift = 2 ** round(math.log2(out_scale / 0.25))
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    v = min(high, max(low, Fraction(integer, shift)))
    floor, ceil = math.floor(v), math.ceil(v)
    sign = 1 if v >= 0 else -1
    half = v - floor == Fraction(1, 2)
    rounded = {
        "FLOOR": floor,
        "CEIL": ceil,
        "UP": sign * math.ceil(abs(v)),
        "DOWN": sign * math.floor(abs(v)),
        "ROUND": (floor if floor % 2 == 0 else ceil) if half else round(v),
        "HALF_UP": sign * math.ceil(abs(v)) if half else round(v),
        "HALF_DOWN": sign * math.floor(abs(v)) if half else round(v),
    }[mode]
    return rounded - low


@pytest.mark.parametrize("mode", _MODES)
@pytest.mark.parametrize(("out_scale", "bits", "signed"), [(1.0, 2, 0), (0.5, 3, 0), (2.0, 2, 1)])
def test_trunc_is_exact_by_its_definition_and_agrees_with_execute_onnx(
    mode: str, out_scale: float, bits: int, signed: int
) -> None:
    """Every row of a Trunc after an average pool follows QONNX's opset-2 rules in exact rationals (half ties
    included), and all 4,096 inputs agree with qonnx's executor."""
    proto = om.trunc_model(mode=mode, out_scale=out_scale, bits=bits, signed=signed)
    net = iotable.precompute(proto)
    for table in net.tables:
        for codes, (out,) in table:
            assert out == _exact_trunc(codes, mode, out_scale, bits, signed), (mode, codes)
    assert iotable.verify(proto, net, om.every_input((2, 4), 8), codes=True).ok


def test_a_wrong_trunc_rounding_is_found_and_located_at_its_window() -> None:
    """Tamper: a network built with FLOOR is caught by verify against a CEIL Trunc, and the report names the
    unit's window of two input codes at the element that differs, its mean and both roundings."""
    wrong = iotable.precompute(om.trunc_model(mode="FLOOR"))
    report = iotable.verify(om.trunc_model(mode="CEIL"), wrong, om.every_input((2, 4), 8), codes=True)
    assert not report.ok and report.first is not None
    first = report.first
    codes = first["input_codes"]
    assert len(codes) == 2 and first["value"] == sum(codes) * 0.5 / 2
    assert (first["table"], first["model"]) == (
        _exact_trunc(codes, "FLOOR", 1.0, 2, 0),
        _exact_trunc(codes, "CEIL", 1.0, 2, 0),
    )


# -- Concat, residual Add, Transpose -----------------------------------------------------------------------------


@pytest.mark.slow  # brevitas' exports take ~10 s
@pytest.mark.parametrize("kind", ["add", "concat"])
def test_brevitas_joins_give_the_torch_routes_nodes_and_tables_and_run_equal(kind: str, tmp_path: Path) -> None:
    """A residual add and a concat of the input quantizer's codes and a quantized convolution of them: the torch
    route's duplicate, join and table nodes and its tables; all of 300 inputs agree with both reference
    executors; plain ONNX and Verilog give net.run."""
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    model = om.brevitas_branches(kind)
    path = om.export(model, tmp_path / "joins.onnx", (2, 4))
    net = iotable.precompute(path)
    ref = iotable.precompute(model, input_domain=net.input_node.domain, example_input=torch.zeros(1, 2, 4))
    kinds = [n.kind.value for n in net.graph.nodes]
    assert kinds == ["input", "duplicate", "window", "table", "join", "window", "table", "output"]
    assert kinds == [n.kind.value for n in ref.graph.nodes]
    assert [n.meta.for_add for n in net.graph.nodes if n.kind.value == "join"] == [kind == "add"]
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in ref.tables]
    x = np.random.default_rng(5).integers(0, 4, size=(300, 2, 4))
    assert iotable.verify(path, net, x, codes=True).ok
    qcdq = om.export(model, tmp_path / "joins_qcdq.onnx", (2, 4), qcdq=True)
    assert iotable.verify(qcdq, iotable.precompute(qcdq), x, codes=True).ok
    assert _plain_onnx_equal(net, x, tmp_path / "tables.onnx")
    _simulates_equal(net, x[:40], tmp_path)


def _simulates_equal(net: iotable.TableNetwork, x: np.ndarray, folder: Path) -> None:
    from iotable.hdl import export, simulate

    require_program("iverilog", package="iverilog")
    design = export(net, folder / "hdl", top="t", vectors=8)
    inputs = torch.from_numpy(x)
    assert torch.equal(simulate(design, inputs, codes=True), design.reference(inputs, codes=True))


@pytest.mark.slow  # brevitas' exports take ~10 s
def test_a_brevitas_transpose_and_flatten_feed_the_moved_elements_to_the_next_layer(tmp_path: Path) -> None:
    """x.transpose(1, 2).flatten(1) of the input's codes into a sparse QuantLinear: each neuron's unit reads the
    elements the permutation puts under its weights, and all of 300 inputs agree with both reference executors."""
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    model = om.brevitas_branches("transpose")
    path = om.export(model, tmp_path / "transpose.onnx", (2, 4))
    net = iotable.precompute(path)
    assert [n.kind.value for n in net.graph.nodes] == ["input", "reshape", "table", "output"]
    # transposed element (l, c) is element (c, l): the neurons' inputs 0-2, 3-4, 5-7 are these of the (2, 4) input
    assert [u.in_channels for u in net["layer0"].plan.units] == [(0, 1, 4), (2, 5), (3, 6, 7)]
    x = np.random.default_rng(6).integers(0, 4, size=(300, 2, 4))
    assert iotable.verify(path, net, x, codes=True).ok
    qcdq = om.export(model, tmp_path / "transpose_qcdq.onnx", (2, 4), qcdq=True)
    assert iotable.verify(qcdq, iotable.precompute(qcdq), x, codes=True).ok
    assert _plain_onnx_equal(net, x, tmp_path / "tables.onnx")


@pytest.mark.parametrize("kind", ["add", "concat", "concat-features", "transpose"])
def test_hand_written_joins_agree_with_execute_onnx_on_every_input(kind: str, tmp_path: Path) -> None:
    """A residual add, a concat (of images, and of features of two domains) and a transpose of quantized codes:
    every one of 4,096 inputs agrees with qonnx's executor, and plain ONNX gives net.run."""
    proto = om.join_model(kind)
    net = iotable.precompute(proto)
    x = om.every_input((2, 3), 4)
    assert iotable.verify(proto, net, x, codes=True).ok
    assert _plain_onnx_equal(net, x[::7], tmp_path / "tables.onnx")
    units = [u.in_channels for u in net.graph.table_nodes()[-1].meta.units]
    expected = {
        "add": [(0, 2), (1, 3)],
        "concat": [(0,), (1,), (2,), (3,)],
        "concat-features": [(0, 7, 11), (3, 6)],
        "transpose": [(0, 2, 3), (1, 5)],
    }
    assert units == expected[kind]


def test_a_transpose_read_in_the_wrong_order_is_found() -> None:
    """Tamper: the network of the untransposed graph (the same MatMul on the codes as they lie) fails verify."""
    proto = om.join_model("transpose")
    plain = onnx.load_from_string(proto.SerializeToString())
    node = next(n for n in plain.graph.node if n.name == "tr")
    del node.attribute[:]
    node.attribute.append(onnx.helper.make_attribute("perm", [0, 1, 2]))
    report = iotable.verify(proto, iotable.precompute(plain), om.every_input((2, 3), 4), codes=True)
    assert not report.ok


# -- per-channel input quantizers --------------------------------------------------------------------------------


def _per_channel_input(proto: object, scale: list[float], shape: tuple[int, ...]) -> None:
    for node in proto.graph.initializer:  # type: ignore[attr-defined]
        if node.name == "qin_s":
            node.CopyFrom(om.constant("qin_s", np.asarray(scale, np.float32).reshape(shape)))


@pytest.mark.parametrize(
    ("make", "scale", "shape"),
    [
        (lambda: qm.linear_model([[1.0, -1.0], [1.0, 0.5], [-0.5, 1.0]]), [0.5, 0.25, 1.0], (3,)),
        (qm.conv_model, [0.5, 0.25], (1, 2, 1)),
    ],
    ids=["features", "conv1d"],
)
def test_an_input_quantizer_per_channel_gives_per_channel_input_domains(
    make: object, scale: list, shape: tuple
) -> None:
    """An input Quant with one scale per channel gives the input node one domain per channel (the torch route's
    per-channel input domains), and every input agrees with qonnx's executor."""
    proto = make()  # type: ignore[operator]
    _per_channel_input(proto, scale, shape)
    net = iotable.precompute(proto)
    domains = net.input_node.domain
    assert isinstance(domains, tuple) and [float(d.values[-1] - d.values[-2]) for d in domains] == scale
    features = (3,) if shape == (3,) else (2, 5)
    x = om.every_input(features, 4)
    assert iotable.verify(proto, net, x, codes=True).ok
    uniform = make()  # type: ignore[operator]
    assert not iotable.verify(proto, iotable.precompute(uniform), x, codes=True).ok  # the scales matter


def test_an_input_quantizer_per_channel_gives_the_torch_routes_tables() -> None:
    """A padded Conv1d after an input Quant of one scale per channel gives the tables (and the pad node's codes of
    real 0) of the same convolution precomputed as a torch module with per-channel input domains."""
    from iotable import Domain
    from iotable.nn import Quantize

    proto = qm.conv_model(pads=(1, 1))
    _per_channel_input(proto, [0.5, 0.25], (1, 2, 1))
    net = iotable.precompute(proto)
    conv = torch.nn.Conv1d(2, 2, 2, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[[1.0, -1.0], [0.5, 1.0]], [[-1.0, 0.5], [1.0, 1.0]]]))  # conv_model's
        conv.bias.copy_(torch.tensor([0.25, -0.5]))
    model = torch.nn.Sequential(conv, Quantize(3, signed=True, scale=1.0)).eval()
    domains = (Domain.uniform(2, signed=True, scale=0.5), Domain.uniform(2, signed=True, scale=0.25))
    ref = iotable.precompute(model, input_domain=domains, example_input=torch.zeros(1, 2, 5))
    assert net.input_node.domain == ref.input_node.domain
    assert [n.kind.value for n in net.graph.nodes] == [n.kind.value for n in ref.graph.nodes]
    assert [n.meta.pad_codes for n in net.graph.nodes_of("pad")] == [
        n.meta.pad_codes for n in ref.graph.nodes_of("pad")
    ]
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in ref.tables]
