"""Plain ONNX out: ``iotable.export_onnx`` writes a network as standard operators that onnxruntime runs equal, bit for
bit, to ``net.run`` (values, and codes with ``codes=True``), on every exportable node kind; the nodes ONNX cannot hold
and every bad argument are refused by name before anything is written."""

from __future__ import annotations

import itertools
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
import iotable.onnxout
from iotable import Domain, TableNetwork
from iotable.errors import ModelError, ONNXNotInstalledError, OptionError
from iotable.nn import Quantize

from .test_arith_families import FAMILIES
from .test_cli import assert_clean_error, call
from .test_kind_conformance import SAMPLE_OF, inputs, sample
from .test_network import S2, conv_model

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install 'iotable[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (pip install 'iotable[onnx]')")

U2 = Domain.uniform(2)
SAMPLES = ("arithmetic", "convolution", "residual")


def run_onnx(path: Path, x: torch.Tensor) -> np.ndarray:
    """The model's output for the batch ``x`` (float32 values, or int64 codes), by onnxruntime."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = x.numpy().astype(np.int64 if not x.is_floating_point() else np.float32)
    return session.run(None, {"input": feed})[0]


def assert_equal_to_net(net: TableNetwork, path_of: Path, x: torch.Tensor, codes: torch.Tensor) -> None:
    """Values in, values out, and codes in, codes out: each bit for bit ``net.run``'s."""
    values = iotable.export_onnx(net, path_of / "values.onnx")
    got = run_onnx(values, x)
    expected = net.run(x).numpy()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got, expected)
    coded = iotable.export_onnx(net, path_of / "codes.onnx", codes=True)
    got = run_onnx(coded, codes)
    expected = net.run(codes, codes=True, return_codes=net.output_node.domain is not None).numpy()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got, expected)


def every_input(net: TableNetwork) -> tuple[torch.Tensor, torch.Tensor]:
    """Every input of ``net`` (a small input domain), as values and as codes."""
    node = net.graph.nodes[0]
    rows = itertools.product(range(len(node.domain)), repeat=int(np.prod(node.shape)))
    codes = torch.tensor(list(rows), dtype=torch.int64).reshape(-1, *node.shape)
    return torch.tensor(node.domain.values, dtype=torch.float32)[codes], codes


def small_net() -> TableNetwork:
    """One table layer of two units reading three 2-bit inputs: 64 inputs reach every row."""
    torch.manual_seed(1)
    return iotable.precompute(nn.Sequential(nn.Linear(3, 2), Quantize(2)).eval(), input_domain=U2)


def test_the_samples_cover_every_exportable_kind() -> None:
    """The networks below hold a node of every built-in kind but host, which is refused."""
    covered = {node.kind.value for name in SAMPLES for node in sample(name).net.graph.nodes}
    expected = {kind for kind, name in SAMPLE_OF.items() if name in SAMPLES}
    assert covered >= expected >= set(iotable.graph.kind.BUILTIN_KINDS) - {"host"}


@pytest.mark.parametrize("name", SAMPLES)
def test_each_kind_runs_equal_to_net_run(name: str, tmp_path: Path) -> None:
    """Each conformance network's ONNX model equals net.run on 300 random inputs, as values and as codes."""
    net = sample(name).net
    x, codes = inputs(net, 300, seed=3)
    assert_equal_to_net(net, tmp_path, x, codes)


@pytest.mark.parametrize("name", ["arithmetic", "residual"])
def test_small_input_domains_are_equal_on_every_input(name: str, tmp_path: Path) -> None:
    """Where the input domain is small, the ONNX model equals net.run on every input there is."""
    net = sample(name).net
    assert_equal_to_net(net, tmp_path, *every_input(net))


@pytest.mark.parametrize("family", FAMILIES[:6], ids=[f[0] for f in FAMILIES[:6]])
def test_the_arithmetic_families_run_equal_to_net_run(family: tuple, tmp_path: Path) -> None:
    """DWN, DiffLogic, TreeLUT and KANELÉ networks (tables, sums, thresholds, argmax) equal net.run in ONNX."""
    _, build, domain, features = family
    net = iotable.precompute(build(), input_domain=domain, example_input=torch.zeros(1, features))
    index = torch.randint(0, len(domain), (300, features), generator=torch.Generator().manual_seed(5))
    x = torch.tensor(domain.values, dtype=torch.float32)[index]
    assert_equal_to_net(net, tmp_path, x, index)


def cnn() -> nn.Module:
    """docs/graph.md's running example without its float head: 2-D pads, strided and depthwise windows, a pool."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            q_in=Quantize(2, signed=True, scale=0.5),
            conv1=nn.Conv2d(1, 4, 3, stride=2, padding=1),
            bn1=nn.BatchNorm2d(4),
            relu1=nn.ReLU(),
            q1=Quantize(2, scale=0.5),
            dw=nn.Conv2d(4, 4, 3, padding=1, groups=4, padding_mode="reflect"),
            q2=Quantize(2, signed=True, scale=0.5),
            pool=nn.MaxPool2d(3, stride=2, padding=1),
            flatten=nn.Flatten(),
        )
    ).eval()


def test_a_two_dimensional_network_runs_equal_to_net_run(tmp_path: Path) -> None:
    """Zero and reflect padding, a strided 2-D window, a depthwise table and a padded max-pool equal net.run."""
    domain = Domain.uniform(4, signed=True, scale=0.125)
    net = iotable.precompute(cnn(), input_domain=domain, example_input=torch.zeros(1, 1, 8, 8))
    codes = torch.randint(0, 16, (200, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    assert_equal_to_net(net, tmp_path, torch.tensor(domain.values, dtype=torch.float32)[codes], codes)


@pytest.mark.parametrize("rank", [1, 2])
def test_channels_last_networks_run_equal_to_net_run(rank: int, tmp_path: Path) -> None:
    """Channels-last (NWC, NHWC) grouped convolutions with stride, padding and kernel-major windows equal net.run."""
    model = conv_model(rank, channels_last=True, stride=2, dilation=1, padding=1, groups=2)
    shape = (9, 4) if rank == 1 else (7, 6, 4)
    net = iotable.precompute(model, input_domain=S2, example_input=torch.zeros(1, *shape))
    assert net.graph.nodes[-1].layout is not None and net.graph.nodes[-1].layout.channels_last
    codes = torch.randint(0, len(S2), (100, *shape), generator=torch.Generator().manual_seed(rank))
    assert_equal_to_net(net, tmp_path, torch.tensor(S2.values, dtype=torch.float32)[codes], codes)


def test_raw_outputs_and_per_channel_domains_pass_through(tmp_path: Path) -> None:
    """A last layer without a quantizer outputs raw float32 values, and per-channel input domains encode exactly."""
    torch.manual_seed(2)
    domains = [Domain.uniform(2), Domain.uniform(3, signed=True, scale=0.25), Domain.uniform(1)]
    model = nn.Sequential(nn.Linear(3, 3), Quantize(2), nn.Linear(3, 2)).eval()
    net = iotable.precompute(model, input_domain=domains)
    assert net.output_node.domain is None
    codes = torch.stack([torch.randint(0, len(d), (300,), generator=torch.Generator().manual_seed(c)) for c, d in
                         enumerate(domains)], dim=1)  # fmt: skip
    x = torch.stack([torch.tensor(d.values, dtype=torch.float32)[codes[:, c]] for c, d in enumerate(domains)], dim=1)
    assert_equal_to_net(net, tmp_path, x, codes)


@pytest.mark.parametrize(
    "domains",
    [
        [Domain.uniform(10, scale=1 / 256)] * 3,
        [Domain.uniform(10, scale=1 / 256), Domain.uniform(9, signed=True, scale=0.1), Domain.uniform(2)],
    ],
    ids=["one-domain", "per-channel"],
)
def test_large_evenly_spaced_input_domains_encode_on_their_grid(domains: list[Domain], tmp_path: Path) -> None:
    """Inputs of more than COMPARISONS values are encoded by arithmetic on each channel's grid, equal to net.run
    on every value of every channel's domain."""
    torch.manual_seed(3)
    net = iotable.precompute(nn.Sequential(Quantize(3, scale=0.25)).eval(), input_domain=domains,
                             example_input=torch.zeros(1, 3))  # fmt: skip
    model = onnx.load(str(iotable.export_onnx(net, tmp_path / "net.onnx")))
    assert "GreaterOrEqual" not in {node.op_type for node in model.graph.node}
    size = max(len(d) for d in domains)
    codes = torch.stack([torch.arange(size) % len(d) for d in domains], dim=1)
    x = torch.stack([torch.tensor(d.values, dtype=torch.float32)[codes[:, c]] for c, d in enumerate(domains)], dim=1)
    assert_equal_to_net(net, tmp_path, x, codes)


@pytest.mark.parametrize("opset", [iotable.onnxout.OPSETS[0], iotable.onnxout.OPSETS[-1]])
def test_the_oldest_and_newest_opsets_run_equal(opset: int, tmp_path: Path) -> None:
    """Opsets 13 and 21 (ReduceMax's axes an attribute, then an input) give the same outputs as net.run."""
    net = sample("convolution").net
    x, _ = inputs(net, 100, seed=1)
    path = iotable.export_onnx(net, tmp_path / "net.onnx", opset=opset)
    model = onnx.load(str(path))
    assert [o.version for o in model.opset_import] == [opset]
    assert model.ir_version == onnx.helper.find_min_ir_version_for(list(model.opset_import))
    assert np.array_equal(run_onnx(path, x), net.run(x).numpy())


def test_the_model_is_plain_onnx_with_one_gather_per_table_layer(tmp_path: Path) -> None:
    """Only default-domain operators; each table layer's units are one stacked initializer read by one Gather."""
    net = sample("convolution").net
    model = onnx.load(str(iotable.export_onnx(net, tmp_path / "net.onnx")))
    assert {node.domain for node in model.graph.node} == {""}
    for layer in net.graph.table_nodes():
        tables = [i.name for i in model.graph.initializer if i.name.startswith(f"{layer.name}/tables#")]
        assert len(tables) == 1
        readers = [node for node in model.graph.node if tables[0] in node.input]
        assert [node.op_type for node in readers] == ["Gather"]


def test_a_changed_table_entry_is_seen(tmp_path: Path) -> None:
    """Tamper: one table entry changed in the ONNX initializer makes the outputs differ from net.run exactly where
    a lookup reads that row."""
    net = small_net()
    _, codes = every_input(net)
    path = iotable.export_onnx(net, tmp_path / "net.onnx", codes=True)
    assert np.array_equal(run_onnx(path, codes), net.run(codes, codes=True, return_codes=True).numpy())
    model = onnx.load(str(path))
    held = next(i for i in model.graph.initializer if i.name.startswith("0/tables#"))
    rows = onnx.numpy_helper.to_array(held).copy()
    rows[5, 0] = (rows[5, 0] + 1) % 4  # unit 0 (the first rows), row 5
    held.CopyFrom(onnx.numpy_helper.from_array(rows, held.name))
    onnx.save(model, str(tmp_path / "tampered.onnx"))
    got, expected = run_onnx(tmp_path / "tampered.onnx", codes), net.run(codes, codes=True, return_codes=True).numpy()
    differ = np.flatnonzero((got != expected).any(axis=1))
    assert differ.size == 1 and (got != expected).sum() == 1


def test_a_host_node_is_refused_by_name_before_writing(tmp_path: Path) -> None:
    """A network with a float module run by torch is refused, the host node named, and no file written."""
    with pytest.raises(ModelError, match=r"host node\(s\) 'head' run float .*precompute without host=, or"):
        iotable.export_onnx(sample("hosted").net, tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_kind_without_a_lowering_is_refused_by_name(tmp_path: Path) -> None:
    """A node of a kind registered outside the library, which ONNX has no lowering for, is refused by name."""
    net = sample("inverted").net
    with pytest.raises(ModelError, match=r"node 'inv' is of kind 'invert', which has no ONNX lowering"):
        iotable.export_onnx(net, tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []


def test_partial_tables_export_with_a_dont_care_value_only(tmp_path: Path) -> None:
    """A partial table without a don't-care value is refused by name; with one, the model equals net.run."""
    net = small_net()
    x, codes = every_input(net)
    observation = iotable.observe(net, x[::3])
    with pytest.raises(ModelError, match=r"table layer '0' unit 0 is partial and has no don't-care value.*default="):
        iotable.export_onnx(iotable.restrict(net, observation), tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []
    assert_equal_to_net(iotable.restrict(net, observation, default="zero"), tmp_path, x, codes)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        ({"path": "missing/net.onnx"}, OptionError, "the folder of '.*missing/net.onnx' does not exist; create it"),
        ({"path": "."}, OptionError, "is a directory"),
        ({"path": ""}, OptionError, "is empty"),
        ({"net": "layer"}, OptionError, "expected a TableNetwork .*received LayerTables"),
        ({"opset": 12}, OptionError, "opset must be an integer from 13 to 21, received 12"),
        ({"opset": 22}, OptionError, "received 22"),
        ({"opset": "17"}, OptionError, "received '17'"),
        ({"codes": 1}, OptionError, "codes must be True or False"),
    ],
)
def test_bad_arguments_are_refused_before_writing(change: dict, error: type, words: str, tmp_path: Path) -> None:
    """Each bad argument raises the library's error naming it and what was expected; nothing is written."""
    args = {"net": small_net(), "path": "net.onnx", "opset": 17, "codes": False, **change}
    if args["net"] == "layer":
        args["net"] = iotable.precompute(nn.Conv1d(1, 1, 2), input_domain=U2)
    text = args.pop("path")
    path = tmp_path / text if text else text
    with pytest.raises(error, match=words):
        iotable.export_onnx(args.pop("net"), path, **args)
    assert list(tmp_path.rglob("*")) == []


def test_a_network_past_the_protobuf_limit_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Initializers past ONNX's 2 GiB limit (here a limit lowered below the tables' bytes) are refused, naming the
    size and the limit, before any operator is built; the real limit is 2**31 - 1 bytes."""
    assert iotable.onnxout.PROTOBUF_LIMIT == 2**31 - 1
    net = small_net()
    monkeypatch.setattr(iotable.onnxout, "PROTOBUF_LIMIT", 100)
    monkeypatch.setattr(iotable.onnxout, "_build", lambda *args: pytest.fail("built past the limit"))
    with pytest.raises(ModelError, match=r"take [0-9,]+ bytes, past ONNX's protobuf limit of 100 bytes"):
        iotable.export_onnx(net, tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_built_model_past_the_limit_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The built model's own size is checked too (here past the count before building, which is skipped): refused,
    naming its bytes and the limit; nothing written."""
    monkeypatch.setattr(iotable.onnxout, "_check_size", lambda net: None)
    monkeypatch.setattr(iotable.onnxout, "PROTOBUF_LIMIT", 100)
    with pytest.raises(ModelError, match=r"the model takes [0-9,]+ bytes, past ONNX's protobuf limit of 100 bytes"):
        iotable.export_onnx(small_net(), tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_onnx_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the package onnx, the error names the extra to install; nothing is written."""
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ONNXNotInstalledError, match=r"pip install 'iotable\[onnx\]'"):
        iotable.export_onnx(small_net(), tmp_path / "net.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_check_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model the checker refuses is never written: the file there before stays as it was."""
    target = tmp_path / "net.onnx"
    target.write_bytes(b"old")

    def refuse(model: object, full_check: bool = False) -> None:
        raise onnx.checker.ValidationError("refused")

    monkeypatch.setattr(onnx.checker, "check_model", refuse)
    with pytest.raises(onnx.checker.ValidationError):
        iotable.export_onnx(small_net(), target)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["net.onnx"]


def test_the_command_line_writes_plain_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``iotable export onnx BUNDLE -o FILE`` writes the model of the bundle's network, equal to net.run."""
    net = sample("convolution").net
    bundle = iotable.save(net, tmp_path / "bundle")
    result = call(capsys, "export", "onnx", str(bundle), "-o", str(tmp_path / "net.onnx"), "--codes")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {tmp_path / 'net.onnx'}\n"
    _, codes = inputs(net, 50)
    assert np.array_equal(run_onnx(tmp_path / "net.onnx", codes), net.run(codes, codes=True, return_codes=True).numpy())


def test_the_command_line_refuses_bad_onnx_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing -o, a missing folder and an unknown opset are one-line errors; nothing is written."""
    bundle = iotable.save(small_net(), tmp_path / "bundle")
    assert_clean_error(call(capsys, "export", "onnx", str(bundle)), "export", "give BUNDLE -o FILE.onnx")
    missing = str(tmp_path / "missing" / "net.onnx")
    assert_clean_error(call(capsys, "export", "onnx", str(bundle), "-o", missing), "export", "does not exist")
    out = str(tmp_path / "net.onnx")
    assert_clean_error(call(capsys, "export", "onnx", str(bundle), "-o", out, "--opset", "9"), "export", "opset")
    assert_clean_error(call(capsys, "export", "onnx", str(bundle), "-o", ""), "export", "the path is empty")
    assert_clean_error(call(capsys, "export", "verilog", str(bundle), "-o", out), "export", "without -o")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
