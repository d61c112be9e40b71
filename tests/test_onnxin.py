"""The QONNX front end: brevitas models exported with export_qonnx as table networks, exact against QONNX's rules
and qonnx's executor, equal to the torch route, simulated equal as Verilog; nothing in the file ever runs."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import iotable
from iotable import Domain
from iotable.errors import ModelError, ONNXNotInstalledError

from . import qonnxmodels as qm
from .optional import require_program

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install 'iotable[onnx]')")
pytest.importorskip("qonnx", reason="the onnx extra (pip install 'iotable[onnx]')")


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    model = qm.brevitas_mlp()
    return model, qm.export_brevitas(model, tmp_path_factory.mktemp("qonnx") / "mlp.onnx", 6)


def _inputs(n: int, features: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4, size=(n, features))


def test_a_brevitas_mlp_file_becomes_a_network_with_the_masks_fan_ins(mlp_file: tuple[torch.nn.Module, Path]) -> None:
    """precompute of an export_qonnx file gives one unit per neuron reading exactly its unmasked inputs."""
    model, path = mlp_file
    net = iotable.precompute(path)
    first, second = net.layers.values()
    assert [u.in_channels for u in first.plan.units] == [(0, 1, 2), (2, 3), (3, 4, 5), (0, 5)]
    assert [u.in_channels for u in second.plan.units] == [(0, 1), (1, 2), (0, 2, 3)]
    assert net.input_node.domain == Domain.uniform(2, signed=True, scale=float(model.inp.act_quant.scale()))
    assert [t.rows for t in net.tables] == [64, 16, 64, 16, 16, 16, 64]


def test_verify_agrees_with_execute_onnx_on_2000_inputs(mlp_file: tuple[torch.nn.Module, Path]) -> None:
    """verify compares the network with qonnx's executor in output codes: all 2,000 samples agree."""
    _, path = mlp_file
    net = iotable.precompute(str(path))
    report = iotable.verify(path, net, _inputs(2000, 6), codes=True)
    assert report.samples == 2000 and report.ok, str(report)


def test_the_tables_equal_the_torch_routes(mlp_file: tuple[torch.nn.Module, Path]) -> None:
    """The same brevitas model precomputed as a torch module, its masks declared, gives the same tables."""
    _, path = mlp_file
    net = iotable.precompute(path)
    model = qm.brevitas_mlp()  # a copy of its own to declare the masks on, as LogicNets models do
    iotable.decompose(model.fc1, fan_in=[u.in_channels for u in net["layer0"].plan.units])
    iotable.decompose(model.fc2, fan_in=[u.in_channels for u in net["layer1"].plan.units])
    ref = iotable.precompute(model, input_domain=net.input_node.domain, example_input=torch.zeros(1, 6))
    mine = [(t.input_domains, t.output_domain, t.outputs.tolist()) for t in net.tables]
    theirs = [(t.input_domains, t.output_domain, t.outputs.tolist()) for t in ref.tables]
    assert mine == theirs


def test_a_model_proto_gives_the_same_network_as_its_file(mlp_file: tuple[torch.nn.Module, Path]) -> None:
    """precompute and verify take an onnx.ModelProto as well as a path."""
    _, path = mlp_file
    proto = onnx.load(str(path))
    net = iotable.precompute(proto)
    assert net == iotable.precompute(path)
    assert iotable.verify(proto, net, _inputs(50, 6), codes=True).ok


def test_the_network_simulates_equal_as_verilog(mlp_file: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    """The network of a QONNX file, exported as Verilog, simulates under iverilog equal to net.run."""
    from .optional import require_program

    require_program("iverilog", package="iverilog")
    _, path = mlp_file
    net = iotable.precompute(path)
    x = torch.from_numpy(_inputs(100, 6, seed=1))
    design = iotable.hdl.export(net, tmp_path / "rtl", vectors=16)
    got = iotable.hdl.simulate(design, x, codes=True, timeout=120)
    assert torch.equal(got.reshape(100, -1), net.run(x, codes=True, return_codes=True).reshape(100, -1))


def test_an_input_domain_given_must_be_the_first_quantizers(mlp_file: tuple[torch.nn.Module, Path]) -> None:
    """input_domain= agrees with the file's first quantizer or is refused, naming both domains and the fix."""
    _, path = mlp_file
    net = iotable.precompute(path, input_domain=iotable.precompute(path).input_node.domain)
    assert net.input_node.domain.params["bits"] == 2
    with pytest.raises(ModelError, match=r"input_domain=.*first quantizer gives.*leave input_domain unset"):
        iotable.precompute(path, input_domain=Domain.uniform(2))


@pytest.mark.parametrize(("group", "pads", "stride"), [(1, (1, 0), 1), (2, (1, 1), 2), (1, (0, 0), 3)])
def test_a_hand_written_conv_agrees_with_execute_onnx_on_every_input(
    group: int, pads: tuple[int, int], stride: int
) -> None:
    """Conv with asymmetric pads, strides and groups: units over the group's channels, the pad node holding the
    code of real 0, and the codes of 1,000 inputs equal to qonnx's executor's."""
    proto = qm.conv_model(group=group, pads=pads, stride=stride)
    net = iotable.precompute(proto)
    table = net["layer0"]
    assert [u.in_channels for u in table.plan.units] == ([(0, 1)] * 2 if group == 1 else [(0,), (1,)])
    pads_node = [n for n in net.graph.nodes if n.kind.value == "pad"]
    assert [n.meta.pad_codes for n in pads_node] == ([(2, 2)] if any(pads) else [])  # real 0 in {-1, -.5, 0, .5}
    every = np.array(list(itertools.product(range(4), repeat=10))).reshape(-1, 2, 5)
    assert iotable.verify(proto, net, every[:: 1024 // 1024 * 1][:1024], codes=True).ok


@pytest.mark.slow  # brevitas' export of a convolution takes ~15 s
@pytest.mark.parametrize("shape", [(2, 5), (1, 4, 3)], ids=["conv1d", "conv2d"])
def test_a_brevitas_cnn_gives_the_torch_routes_tables_and_agrees_with_execute_onnx(
    shape: tuple[int, ...], tmp_path: Path
) -> None:
    """Padded, strided convolutions with batch norm: the torch route's pad, window and table nodes and tables,
    and all of 300 inputs agree with qonnx's executor."""
    pytest.importorskip("brevitas", reason="the brevitas extra (pip install 'iotable[brevitas]')")
    model = qm.brevitas_cnn(len(shape) - 1)
    path = qm.export_brevitas(model, tmp_path / "cnn.onnx", shape)
    net = iotable.precompute(path)
    ref = iotable.precompute(model, input_domain=net.input_node.domain, example_input=torch.zeros(1, *shape))
    assert [n.kind.value for n in net.graph.nodes] == [n.kind.value for n in ref.graph.nodes]
    assert [n.meta for n in net.graph.nodes if n.kind.value in ("pad", "window")] == [
        n.meta for n in ref.graph.nodes if n.kind.value in ("pad", "window")
    ]
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in ref.tables]
    x = np.random.default_rng(2).integers(0, 4, size=(300, *shape))
    assert iotable.verify(path, net, x, codes=True).ok


# -- exact semantics -------------------------------------------------------------------------------------------

_MODES = ["ROUND", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"]


def _exact_round(v: Fraction, mode: str) -> int:
    """QONNX's rounding of an exact rational, written from the modes' definitions (not from numpy)."""
    floor, ceil = math.floor(v), math.ceil(v)
    half = v - floor == Fraction(1, 2)
    sign = 1 if v >= 0 else -1
    if mode == "CEIL":
        return ceil
    if mode == "FLOOR":
        return floor
    if mode == "UP":
        return sign * math.ceil(abs(v))
    if mode == "DOWN":
        return sign * math.floor(abs(v))
    if not half:
        return round(v)
    if mode == "HALF_UP":
        return sign * math.ceil(abs(v))
    if mode == "HALF_DOWN":
        return sign * math.floor(abs(v))
    return floor if floor % 2 == 0 else ceil  # ROUND: half to even


@pytest.mark.parametrize("mode", _MODES)
def test_every_rounding_mode_is_exact_on_rows_that_sit_on_ties(mode: str) -> None:
    """Rows whose sums sit exactly on rounding boundaries follow QONNX's mode, checked in exact rationals."""
    weights = [[1.0, -1.0], [1.0, 0.5], [-0.5, 1.0]]
    net = iotable.precompute(qm.linear_model(weights, mode=mode, out_signed=1))
    for unit, table in enumerate(net.tables):
        fan = net.graph.nodes[1].meta.units[unit].in_channels
        for codes, (out,) in table:
            total = sum(Fraction(c) / 2 * Fraction(weights[i][unit]) for c, i in zip(codes, fan))
            q = min(3, max(-4, _exact_round(total, mode)))
            assert out == q + 4, (mode, unit, codes, total)


@pytest.mark.parametrize("mode", ["ROUND", "CEIL", "FLOOR", "HALF_UP"])
def test_hand_written_graphs_agree_with_execute_onnx_on_every_input(mode: str) -> None:
    """On every input of a small hand-written graph, the network's codes equal qonnx's executor's."""
    proto = qm.linear_model([[1.0, -1.0], [1.0, 0.5], [-0.5, 1.0]], mode=mode, out_signed=1)
    net = iotable.precompute(proto)
    every = np.array(list(itertools.product(range(4), repeat=3)))
    assert iotable.verify(proto, net, every, codes=True).ok


def test_a_wrong_rounding_is_found_and_located() -> None:
    """Tamper: a network built with another rounding mode is caught by verify at its first table, with the row."""
    proto = qm.linear_model([[1.0], [1.0], [1.0]], mode="ROUND")
    wrong = iotable.precompute(qm.linear_model([[1.0], [1.0], [1.0]], mode="CEIL"))
    report = iotable.verify(proto, wrong, np.array([[1, 0, 0]]), codes=True)  # 0.5: ROUND gives 0, CEIL 1
    assert not report.ok
    assert report.first is not None and report.first["node"] == "layer0" and report.first["input_codes"] == (1, 0, 0)
    assert (report.first["table"], report.first["model"], report.first["tie"]) == (1, 0, True)
    assert report.first["note"].startswith("a float32 tie")


def test_bipolar_quantizers_binarize_weights_and_outputs_with_x_at_zero_going_up() -> None:
    """BipolarQuant: weights folded to +-scale (0 to +scale), outputs -2 or +2 (a sum of exactly 0 gives +2),
    every input equal to qonnx's executor."""
    proto = qm.bipolar_model()
    net = iotable.precompute(proto)
    assert net.output_node.domain == Domain([-2.0, 2.0])
    assert [u.in_channels for u in net["layer0"].plan.units] == [(0, 1, 2), (0, 1, 2)]
    # unit 0: 0.5 * (x0 - x1 + x2) + 0.25 with x0 = 0, x1 = 0.5, x2 = 0 gives 0: +2 (code 1)
    assert net.tables[0].lookup([[0, 1, 0]]).ravel().tolist() == [1]
    every = np.array(list(itertools.product(range(4), repeat=3)))
    assert iotable.verify(proto, net, every, codes=True).ok


def test_finns_multithreshold_form_counts_thresholds_reached_inclusively() -> None:
    """MatMul + MultiThreshold: a value equal to a threshold reaches it (>=), as qonnx's executor says."""
    proto = qm.threshold_model([[1.0, 2.0], [1.0, -1.0]], [[1.0, 2.0, 4.0], [-1.0, 0.0, 3.0]], out_scale=0.5)
    net = iotable.precompute(proto)
    first, second = net.tables
    assert first.lookup([[1, 0], [1, 1], [3, 1]]).ravel().tolist() == [1, 2, 3]  # sums 1, 2, 4: all reached
    assert second.lookup([[0, 0], [1, 2], [1, 3], [3, 3]]).ravel().tolist() == [2, 2, 1, 3]  # sums 0, 0, -1, 3
    every = np.array(list(itertools.product(range(4), repeat=2)))
    assert iotable.verify(proto, net, every, codes=True).ok


# -- the QCDQ form --------------------------------------------------------------------------------------------


def test_brevitas_qcdq_export_gives_the_tables_of_its_qonnx_export(
    mlp_file: tuple[torch.nn.Module, Path], tmp_path: Path
) -> None:
    """export_onnx_qcdq of the MLP gives the QONNX file's tables and agrees with onnxruntime on 2,000 inputs."""
    model, path = mlp_file
    qcdq = qm.export_brevitas_qcdq(model, tmp_path / "mlp_qcdq.onnx", 6)
    assert {n.op_type for n in onnx.load(str(qcdq)).graph.node} >= {"QuantizeLinear", "Clip", "DequantizeLinear"}
    net = iotable.precompute(qcdq)
    assert [t.outputs.tolist() for t in net.tables] == [t.outputs.tolist() for t in iotable.precompute(path).tables]
    assert iotable.verify(qcdq, net, _inputs(2000, 6), codes=True).ok


@pytest.mark.parametrize(
    ("clip", "bits", "signed", "narrow"), [((0, 3), 2, False, False), ((0, 6), 3, False, True), (None, 8, False, False)]
)
def test_qcdq_saturation_and_clip_give_the_output_domain(
    clip: tuple[int, int] | None, bits: int, signed: bool, narrow: bool
) -> None:
    """QuantizeLinear's type and a Clip fix the output range (bits, narrow); every input agrees with onnxruntime."""
    proto = qm.qcdq_model([[1.0, -1.0], [2.0, 0.5], [-0.5, 3.0]], clip=clip)
    net = iotable.precompute(proto)
    assert net.output_node.domain == Domain.uniform(bits, signed=signed, narrow=narrow)
    assert net.input_node.domain == Domain.uniform(2, signed=True, scale=0.5)
    every = np.array(list(itertools.product(range(4), repeat=3)))
    assert iotable.verify(proto, net, every, codes=True).ok


def test_a_qcdq_mismatch_is_located_at_its_table() -> None:
    """Tamper: a network of another Clip range, checked against a QCDQ model, is caught at its table and row."""
    weights = [[2.0, -2.0], [2.0, 1.0], [-1.0, 3.0]]
    proto = qm.qcdq_model(weights, clip=(0, 3))
    wrong = iotable.precompute(qm.qcdq_model(weights, clip=(0, 6)))
    report = iotable.verify(proto, wrong, np.array([[0, 3, 3]]), codes=True)  # -1, .5, .5: output 1 sums to 4
    assert not report.ok and report.first is not None
    found = [report.first[k] for k in ("node", "unit", "input_codes", "table", "model", "tie")]
    assert found == ["layer0", 1, (0, 3, 3), 4, 3, False]
    assert report.first["note"].startswith("not a float32 tie")


# -- nothing stored in the file runs ---------------------------------------------------------------------------


def _annotated(path: Path, marker: Path) -> onnx.ModelProto:
    """The MLP's file with Python code that would create ``marker`` in every tensor_layout and tensor_sparsity."""
    proto = onnx.load(str(path))
    code = f"__import__('pathlib').Path({str(marker)!r}).touch() or ['N', 'C']"
    for tensor in [proto.graph.input[0].name, *[n.output[0] for n in proto.graph.node]]:
        entry = proto.graph.quantization_annotation.add()
        entry.tensor_name = tensor
        for key in ("tensor_layout", "tensor_sparsity"):
            pair = entry.quant_parameter_tensor_names.add()
            pair.key, pair.value = key, code
    return proto


def test_code_in_annotations_is_never_run(mlp_file: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    """precompute and verify of a file whose annotations hold Python code leave the code unrun."""
    _, path = mlp_file
    marker = tmp_path / "ran"
    bad = tmp_path / "bad.onnx"
    onnx.save(_annotated(path, marker), str(bad))
    net = iotable.precompute(bad)
    assert iotable.verify(bad, net, _inputs(20, 6), codes=True).ok
    assert iotable.verify(onnx.load(str(bad)), net, _inputs(20, 6), codes=True).ok
    assert not marker.exists()


def test_the_annotation_payload_would_run_through_qonnxs_layout_reader(
    mlp_file: tuple[torch.nn.Module, Path], tmp_path: Path
) -> None:
    """Tamper: qonnx's own get_tensor_layout runs the payload, so the test above can fail."""
    from qonnx.core.modelwrapper import ModelWrapper

    _, path = mlp_file
    marker = tmp_path / "ran"
    proto = _annotated(path, marker)
    ModelWrapper(proto).get_tensor_layout(proto.graph.input[0].name)
    assert marker.exists()


def test_a_missing_onnx_package_is_named_with_its_extra(
    mlp_file: tuple[torch.nn.Module, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the onnx package, precompute of a file says to install iotable[onnx]."""
    _, path = mlp_file
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)
    with pytest.raises(ONNXNotInstalledError, match=r"iotable\[onnx\]"):
        iotable.precompute(path)


# -- the command line ------------------------------------------------------------------------------------------


def test_the_command_line_precomputes_a_file_into_a_bundle(
    mlp_file: tuple[torch.nn.Module, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """iotable precompute MODEL.onnx -o BUNDLE writes a bundle that loads as the network precompute gives."""
    from .test_cli import call

    _, path = mlp_file
    result = call(capsys, "precompute", str(path), "-o", str(tmp_path / "bundle"))
    assert result.returncode == 0 and result.stdout.startswith(f"wrote {tmp_path / 'bundle'}: TableNetwork(2 table")
    assert iotable.load(tmp_path / "bundle") == iotable.precompute(path)
    assert call(capsys, "check", str(tmp_path / "bundle")).returncode == 0


def test_the_command_line_refuses_a_broken_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A truncated model gives one error line naming the fix, and no bundle."""
    from .test_cli import assert_clean_error, call

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(qm.linear_model([[1.0], [1.0]]).SerializeToString()[:-9])
    result = call(capsys, "precompute", str(bad), "-o", str(tmp_path / "bundle"))
    assert_clean_error(result, "precompute", "'bad.onnx'", "truncated or not ONNX: export it again")
    assert not (tmp_path / "bundle").exists()


def test_a_conv_flattened_into_a_sparse_matmul_simulates_equal_as_verilog(tmp_path: Path) -> None:
    """Conv -> Quant -> Flatten -> sparse MatMul -> Quant: a reshape node between the layers, the MatMul's units
    reading its nonzero rows, equal to execute_onnx, and its Verilog simulating equal to net.run."""
    from onnx import TensorProto, helper

    from .optional import require_program

    proto = qm.conv_model()  # y: (2, 5)
    weight = np.zeros((10, 2), np.float32)
    weight[[0, 3, 7], 0] = [1.0, -1.0, 2.0]
    weight[[5, 9], 1] = [1.0, 1.0]
    proto.graph.node.extend(
        [
            helper.make_node("Flatten", ["y"], ["yf"], name="flat"),
            helper.make_node("MatMul", ["yf", "w2"], ["h2"], name="mm2"),
            qm.quant("q2", "h2", "z", bits=2, signed=0),
        ]
    )
    proto.graph.initializer.extend([qm.constant("w2", weight), *qm.quant_constants("q2", scale=1.0)])
    del proto.graph.output[:]
    proto.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2]))
    proto = qm.shapes(proto)
    net = iotable.precompute(proto)
    assert [n.kind.value for n in net.graph.nodes][-4:] == ["table", "reshape", "table", "output"]
    assert [u.in_channels for u in net["layer1"].plan.units] == [(0, 3, 7), (5, 9)]
    x = torch.from_numpy(np.random.default_rng(4).integers(0, 4, size=(200, 2, 5)))
    assert iotable.verify(proto, net, x.numpy(), codes=True).ok
    require_program("iverilog", package="iverilog")
    design = iotable.hdl.export(net, tmp_path / "rtl", vectors=16)
    got = iotable.hdl.simulate(design, x[:60], codes=True, timeout=120)
    assert torch.equal(got.reshape(60, -1), net.run(x[:60], codes=True, return_codes=True).reshape(60, -1))


# -- the whole way: file, tables, Verilog, plain ONNX ------------------------------------------------------------


def _acceptance_model(name: str, folder: Path) -> tuple[object, tuple[int, ...]]:
    if name == "brevitas-cnn1d":
        return qm.export_brevitas(qm.brevitas_cnn(1), folder / "cnn.onnx", (2, 5)), (2, 5)
    if name == "finn-multithreshold":
        return qm.threshold_model([[1.0, 2.0], [1.0, -1.0]], [[1.0, 2.0, 4.0], [-1.0, 0.0, 3.0]], out_scale=0.5), (2,)
    return qm.export_brevitas_qcdq(qm.brevitas_mlp(), folder / "mlp_qcdq.onnx", 6), (6,)


@pytest.mark.parametrize(
    "name",
    [pytest.param("brevitas-cnn1d", marks=pytest.mark.slow), "finn-multithreshold", "brevitas-mlp-qcdq"],
)
def test_each_form_runs_equal_from_file_to_verilog_and_plain_onnx(name: str, tmp_path: Path) -> None:
    """A brevitas CNN's QONNX file, FINN's MatMul + MultiThreshold and brevitas' QCDQ MLP: verify agrees with the
    reference executor on 2,000 inputs, the Verilog under iverilog and the plain ONNX under onnxruntime give
    net.run's codes."""
    from iotable.hdl import export, simulate

    require_program("iverilog", package="iverilog")
    onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra (pip install 'iotable[onnx]')")
    model, shape = _acceptance_model(name, tmp_path)
    net = iotable.precompute(model)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, len(net.input_node.domain), size=(2000, *shape)))
    assert iotable.verify(model, net, x.numpy(), codes=True).ok
    design = export(net, tmp_path / "hdl", top="t", vectors=8)
    assert torch.equal(simulate(design, x[:100], codes=True), design.reference(x[:100], codes=True))
    path = iotable.export_onnx(net, tmp_path / "tables.onnx", codes=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy().astype(np.int64)})[0]
    assert np.array_equal(got, net.run(x, codes=True, return_codes=True).numpy())
