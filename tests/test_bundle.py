"""Bundles: save once, load many times without the model, bit for bit; every damaged bundle is refused."""

from __future__ import annotations

import dataclasses
import doctest
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
import iotable.bundle.bundle
from iotable import Domain, IOTable, NodeKind, TableNetwork, load, precompute, save
from iotable.bundle.files import MANIFEST as MANIFEST_NAME
from iotable.errors import BundleError
from iotable.network.precompute import LayerTables
from iotable.nn import Quantize

from .test_network import S2, U2, PoolFlattenHead, assert_bit_exact, mlp, random_inputs, random_stats_


class PoolBranches(nn.Module):
    """conv (padded) -> q -> max-pool, then two branches concatenated, a mix, and a residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 2, padding=1, groups=2)
        self.bn = nn.BatchNorm2d(4)
        self.q1 = Quantize(2, scale=0.5)
        self.pool = nn.MaxPool2d(2)
        self.a = nn.Conv2d(4, 4, 1, groups=4)
        self.qa = Quantize(2, scale=0.5)
        self.b = nn.Conv2d(4, 2, 1, groups=2)
        self.qb = Quantize(1)
        self.mix = nn.Conv2d(6, 4, 1, groups=2)
        self.qm = Quantize(2, scale=0.5)
        self.q3 = Quantize(3, scale=0.5)

    def forward(self, x):
        y = self.pool(self.q1(self.bn(self.conv(x))))
        c = torch.cat([self.qa(self.a(y)), self.qb(self.b(y))], dim=1)
        return self.q3(self.qm(self.mix(c)) + y)


def build(kind: str) -> tuple[nn.Module, TableNetwork, torch.Tensor]:
    """A model, its table network and a batch of inputs: a sparse MLP, a CNN, or a CNN with a host head."""
    if kind == "mlp":
        model = mlp()
        net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
        return model, net, random_inputs(U2, (12,), n=128)
    if kind == "cnn":
        model = random_stats_(PoolBranches())
        net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 5, 5))
        return model, net, random_inputs(S2, (2, 5, 5), n=64)
    model = PoolFlattenHead(host_head=True).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 1, 5, 5), host=["fc"])
    return model, net, random_inputs(U2, (1, 5, 5), n=64)


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[TableNetwork, Path]:
    _, net, _ = build("mlp")
    return net, save(net, tmp_path_factory.mktemp("bundles") / "mlp")


@pytest.fixture
def bundle(mlp_bundle: tuple[TableNetwork, Path], tmp_path: Path) -> Path:
    """A private copy of the MLP bundle, free to damage."""
    return Path(shutil.copytree(mlp_bundle[1], tmp_path / "bundle"))


def manifest_of(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text(encoding="utf-8"))


def stamp(path: Path) -> None:
    """Write the checksum of the bundle's manifest as it now is, as an edit that knows the format would."""
    digest = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    (path / "manifest.sha256").write_text(f"{digest}  manifest.json\n", encoding="ascii")


def write_manifest(path: Path, manifest: dict, *, checksum: bool = True) -> None:
    """Replace the bundle's manifest; ``checksum``: stamp its checksum too, so that the checks behind it are reached."""
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    if checksum:
        stamp(path)


def assert_same_network(loaded: TableNetwork, net: TableNetwork) -> None:
    """Same nodes, edges, plans and tables."""
    assert loaded.input_shape == net.input_shape
    assert loaded.summary() == net.summary() and loaded.graph.to_dot() == net.graph.to_dot()
    for a, b in zip(loaded.graph.nodes, net.graph.nodes, strict=True):
        assert (a.name, a.kind, a.shape, a.layout, a.domain, a.fx_node) == (
            b.name,
            b.kind,
            b.shape,
            b.layout,
            b.domain,
            b.fx_node,
        )
        assert loaded.graph.inputs(a.name) == net.graph.inputs(b.name)
        if a.kind is not NodeKind.HOST:
            assert a.meta == b.meta, a.name  # every field, index maps by value
        else:
            assert a.meta.modules == b.meta.modules
    assert loaded.graph.edges == net.graph.edges
    assert list(loaded.layers) == list(net.layers)
    for name, layer in net.layers.items():
        assert loaded[name].plan == layer.plan
        assert loaded[name].tables == layer.tables
        assert [(t.layer, t.unit) for t in loaded[name]] == [(t.layer, t.unit) for t in layer]
        for field in dataclasses.fields(LayerTables):  # how the tables were built (method, ...) too
            assert getattr(loaded[name], field.name) == getattr(layer, field.name), field.name


# -- round trips --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mlp", "cnn", "host"])
def test_round_trip_is_bit_exact_without_the_model(kind: str, tmp_path: Path) -> None:
    """save -> load -> run equals the original network and the model bit for bit, and loading runs no model code."""
    model, net, x = build(kind)
    kinds = {n.kind for n in net.graph}
    if kind == "cnn":
        assert {NodeKind.PAD, NodeKind.WINDOW, NodeKind.POOL, NodeKind.JOIN, NodeKind.DUPLICATE} <= kinds
    assert_bit_exact(model, net, x)
    path = save(net, tmp_path / kind)
    calls = []
    for m in model.modules():
        m.register_forward_hook(lambda *args: calls.append(1))
    host_modules = None
    if kind == "host":
        fresh = PoolFlattenHead(host_head=True)  # other random weights: the bundle's weights replace them
        assert not torch.equal(fresh.fc.weight, model.fc.weight)
        host_modules = {"fc": fresh.fc, "q2": fresh.q2}
    loaded = load(path, host_modules=host_modules)
    got = loaded.run(x)
    assert calls == []
    assert torch.equal(got, net.run(x)) and got.dtype == net.run(x).dtype
    with torch.no_grad():
        assert torch.equal(got, model(x))
    assert_same_network(loaded, net)
    if kind == "host":
        assert torch.equal(fresh.fc.weight, model.fc.weight)


def test_loaded_network_runs_in_a_fresh_interpreter(mlp_bundle: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """A bundle runs where the model's code was never imported: only iotable, torch and numpy."""
    net, path = mlp_bundle
    x = random_inputs(U2, (12,), n=32)
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "expected.npy", net.run(x).numpy())
    script = (
        "import sys, numpy as np, torch, iotable\n"
        "net = iotable.load(sys.argv[1])\n"
        "got = net.run(torch.from_numpy(np.load(sys.argv[2]))).numpy()\n"
        "assert 'tests' not in sys.modules and not any(m.startswith('tests.') for m in sys.modules)\n"
        "sys.exit(0 if np.array_equal(got, np.load(sys.argv[3])) else 3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"), str(tmp_path / "expected.npy")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_loaded_tables_are_memory_mapped(mlp_bundle: tuple[TableNetwork, Path]) -> None:
    """Table outputs are read-only memory maps of the bundle's .npy files, not copies."""
    _, path = mlp_bundle
    for table in load(path).tables:
        outputs = table.outputs
        assert isinstance(outputs, np.memmap) or isinstance(outputs.base, np.memmap)
        assert not outputs.flags.writeable


def test_layer_tables_round_trip_with_a_partial_table(tmp_path: Path) -> None:
    """One layer's LayerTables round-trips too, partial tables with their inputs, addresses and don't-care."""
    conv = nn.Conv1d(2, 2, kernel_size=2, groups=2)
    layer = precompute(conv, input_domain=Domain.uniform(2))
    dense = layer[1]
    keep = np.arange(0, dense.rows, 3)
    partial = IOTable(
        dense.inputs[keep],
        dense.outputs[keep],
        input_domains=dense.input_domains,
        dont_care=-1.5,
        layer=dense.layer,
        unit=0,
    )
    original = LayerTables(plan=layer.plan, tables=(partial, dense))
    loaded = load(save(original, tmp_path / "layer"))
    assert isinstance(loaded, LayerTables) and loaded.plan == layer.plan
    assert loaded.tables == original.tables and not loaded[0].is_dense and loaded[1].is_dense
    np.testing.assert_array_equal(loaded[0].inputs, partial.inputs)
    np.testing.assert_array_equal(loaded[0].dont_care, [-1.5])
    probe = dense.inputs  # every row: those the partial table lacks return the don't-care
    np.testing.assert_array_equal(loaded[0].lookup(probe), partial.lookup(probe))
    assert loaded.summary() == original.summary()
    manifest = manifest_of(tmp_path / "layer")
    assert manifest["content"] == "layer" and manifest["graph"] is None
    first = manifest["layers"][0]["tables"][0]
    assert first["dense"] is False and first["rows"] == len(keep) and first["address_space"] == 16
    assert first["inputs"].endswith(".inputs.npy") and first["addresses"].endswith(".addresses.npy")


@pytest.mark.parametrize("default", [None, "zero"], ids=["no-default", "default-zero"])
def test_restricted_network_round_trip(default, tmp_path: Path) -> None:
    """A network of partial tables (after observe/restrict) runs the same after a round trip, don't-cares too."""
    _, net, x = build("mlp")
    restricted = iotable.restrict(net, iotable.observe(net, x[:8]), default=default)
    assert not all(t.is_dense for t in restricted.tables)
    loaded = load(save(restricted, tmp_path / "restricted"))
    assert_same_network(loaded, restricted)
    assert torch.equal(loaded.run(x[:8]), restricted.run(x[:8])) and torch.equal(loaded.run(x[:8]), net.run(x[:8]))
    if default is None:  # unseen inputs hit don't-care rows: the same error, loaded or not
        with pytest.raises(iotable.errors.MissingRowError) as expected:
            restricted.run(x)
        with pytest.raises(iotable.errors.MissingRowError) as got:
            loaded.run(x)
        assert str(got.value) == str(expected.value)
    else:
        assert torch.equal(loaded.run(x), restricted.run(x))


def test_manifest_fields(mlp_bundle: tuple[TableNetwork, Path]) -> None:
    """The manifest holds the format, versions, graph, domains, per-table metadata, input shape and checksums."""
    net, path = mlp_bundle
    m = manifest_of(path)
    assert (
        m["format"] == "iotable-bundle"
        and m["format_version"] == iotable.bundle.bundle.FORMAT_VERSION == 6
        and m["luts"] == []
    )
    assert m["library_version"] == iotable.__version__ and m["content"] == "network"
    assert m["input_shape"] == [12] and m["address_digit_order"] == "first input most significant"
    assert m["domains"][0] == {
        "kind": "uniform",
        "size": 4,
        "bits": 2,
        "signed": False,
        "narrow": False,
        "scale": 0.5,
        "zero_point": 0.0,
    }
    nodes = m["graph"]["nodes"]
    assert [n["name"] for n in nodes] == [n.name for n in net.graph]
    assert all(set(n) == {"kind", "name", "shape", "layout", "domain", "fx_node", "meta"} for n in nodes)
    edges = m["graph"]["edges"]
    assert all(
        set(e) == {"producer", "producer_port", "consumer", "consumer_port", "shape", "layout", "domain"} for e in edges
    )
    assert set(nodes[1]["meta"]) == {"layer", "units", "unit_bits", "index_map", "modules"}
    assert nodes[1]["meta"]["index_map"] == {"$array": "graph/node1.index_map.npy"}
    table = m["layers"][0]["tables"][2]
    unit = net["0"].plan.units[2]
    assert table["layer"] == "0" and table["unit"] == 2 and table["fan_in"] == 3 and table["rows"] == 64
    assert table["in_channels"] == list(unit.in_channels) and table["input_channels"] == list(unit.in_channels)
    assert table["dense"] is True and table["input_domains"] == [0, 0, 0] and table["output_domain"] == 0
    assert table["address_digit_order"] == "first input most significant" and table["input_order"] == "features"
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*.npy")}
    assert set(m["files"]) == on_disk and len(on_disk) == len(net.tables) + len(edges) - 1 + 2  # + golden
    for rel, entry in m["files"].items():
        data = (path / rel).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        assert data[:8] == b"\x93NUMPY\x01\x00"  # .npy format version 1.0


def test_spatial_tables_record_their_input_order(tmp_path: Path) -> None:
    """Each table lists the channel and kernel position of its inputs, in the plan's element order."""
    layer = precompute(nn.Conv1d(2, 2, kernel_size=3, groups=1), input_domain=Domain.uniform(1))
    table = manifest_of(save(layer, tmp_path / "conv"))["layers"][0]["tables"][0]
    assert table["input_order"] == "channel-major"
    assert table["input_channels"] == [0, 0, 0, 1, 1, 1] and table["input_taps"] == [0, 1, 2, 0, 1, 2]


def test_format_page_snippets_run() -> None:
    """The pycon snippets of docs/bundle.md, run in order in one session, print what the page shows."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "bundle.md"
    blocks = re.findall(r"^```pycon\n(.*?)^```$", docs.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    assert blocks
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "bundle.md", str(docs), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0 and runner.tries > 10, "".join(report)


# -- damaged bundles ----------------------------------------------------------------------------------------


def test_flipping_one_byte_of_any_array_file_is_detected(bundle: Path, tmp_path: Path) -> None:
    """A single flipped byte in any array file fails its checksum, and the message names the file."""
    files = manifest_of(bundle)["files"]
    assert len(files) > 10
    for k, rel in enumerate(files):
        copy = Path(shutil.copytree(bundle, tmp_path / f"copy{k}"))
        data = bytearray((copy / rel).read_bytes())
        data[-1] ^= 0x01
        (copy / rel).write_bytes(bytes(data))
        with pytest.raises(BundleError, match="checksum mismatch") as info:
            load(copy)
        assert rel in str(info.value)


def test_damaged_npy_header_is_detected(bundle: Path) -> None:
    """A damaged .npy header is reported as a corrupted file, by name."""
    rel = "tables/layer0/unit0.outputs.npy"
    data = bytearray((bundle / rel).read_bytes())
    data[0:6] = b"garbag"
    (bundle / rel).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"unit0\.outputs\.npy: not a valid \.npy file"):
        load(bundle)


def test_truncated_table_file_is_detected(bundle: Path) -> None:
    """A truncated table file is reported with the expected and found sizes."""
    rel = "tables/layer1/unit3.outputs.npy"
    data = (bundle / rel).read_bytes()
    (bundle / rel).write_bytes(data[:-10])
    with pytest.raises(BundleError, match=rf"{rel}: truncated: expected {len(data)} bytes .* found {len(data) - 10}"):
        load(bundle)


def test_missing_table_file_is_detected(bundle: Path) -> None:
    """A deleted table file is reported by name."""
    (bundle / "tables/layer0/unit5.outputs.npy").unlink()
    with pytest.raises(BundleError, match=r"tables/layer0/unit5\.outputs\.npy: missing from the bundle"):
        load(bundle)


def test_missing_manifest_is_detected(bundle: Path) -> None:
    """A bundle without its manifest is not a bundle; the message names manifest.json."""
    (bundle / "manifest.json").unlink()
    with pytest.raises(BundleError, match=r"manifest\.json: missing; .* is not an iotable bundle"):
        load(bundle)


def test_missing_bundle_directory_is_detected(tmp_path: Path) -> None:
    """Loading a path that does not exist says so."""
    with pytest.raises(BundleError, match="does not exist; expected a bundle directory"):
        load(tmp_path / "nothing")


def edit_file_entry(m: dict, key: str, value) -> str:
    rel = "tables/layer0/unit1.outputs.npy"
    m["files"][rel][key] = value
    return rel


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: edit_file_entry(m, "sha256", "0" * 64), r"tables/layer0/unit1\.outputs\.npy: checksum mismatch"),
        (
            lambda m: edit_file_entry(m, "shape", [65, 1]),
            r"unit1\.outputs\.npy: holds dtype \|u1 and shape \(64, 1\), but manifest\.json says dtype \|u1 and shape \(65, 1\)",
        ),
        (lambda m: edit_file_entry(m, "dtype", "<u2"), r"unit1\.outputs\.npy: holds dtype \|u1 .* says dtype <u2"),
        (
            lambda m: m.update(format_version=7),
            r"manifest\.json: format_version 7 was written by a newer iotable .* Upgrade iotable",
        ),
        (lambda m: m.update(format_version="1"), r"manifest\.json: unknown format_version '1'"),
        (lambda m: m.update(format_version=0), r"manifest\.json: unknown format_version 0"),
        (
            lambda m: m.update(format="safetensors"),
            r"manifest\.json: format is 'safetensors', expected 'iotable-bundle'",
        ),
        (lambda m: m.pop("graph"), r"manifest\.json: expected the fields .*; missing \['graph'\], unknown \[\]"),
        (
            lambda m: m["layers"][0]["tables"][0].update(rows=63),
            r"layers\[0\] \('0'\)\.tables\[0\]: dense is True but the table holds 63 of 64 rows",
        ),
        (
            lambda m: m["graph"]["nodes"][1]["meta"].update(layer="nope"),
            r"graph: the table nodes use the layers \['nope', '4'\]; expected each of \['0', '4'\] once",
        ),
        (
            lambda m: m["graph"]["edges"][1].update(shape=[9]),
            r"the graph fails its checks: graph: edge '0' -> '4' \(port 0\) carries shape \(9,\)",
        ),
        (
            lambda m: m["domains"].append({"kind": "uniform", "size": 4, "bits": 0}),
            r"domains\[2\]: expected the fields .*; missing \['narrow', 'scale', 'signed', 'zero_point'\]",
        ),
        (lambda m: m["layers"][1]["plan"].update(units="many"), r"plan\.units: expected a list, received str"),
    ],
    ids=[
        "checksum",
        "shape",
        "dtype",
        "newer-version",
        "version-string",
        "version-zero",
        "format-name",
        "missing-field",
        "rows",
        "unknown-layer",
        "graph-check",
        "domain-field",
        "wrong-type",
    ],
)
def test_edited_manifest_is_detected(bundle: Path, edit, words) -> None:
    """Edits to the manifest that break a checksum, version, shape, dtype or the structure are refused."""
    m = manifest_of(bundle)
    edit(m)
    write_manifest(bundle, m)
    with pytest.raises(BundleError, match=words):
        load(bundle)


def test_corrupt_manifest_json_is_detected(bundle: Path) -> None:
    """A manifest that is not JSON is reported by name (even with a matching checksum)."""
    (bundle / "manifest.json").write_text('{"format": "iotable-bundle", ', encoding="utf-8")
    stamp(bundle)
    with pytest.raises(BundleError, match=r"manifest\.json: not valid JSON"):
        load(bundle)


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_paths_escaping_the_bundle_are_refused(bundle: Path, where: str) -> None:
    """A manifest path with '..' or an absolute path is refused, even when the file outside exists and matches."""
    rel = "tables/layer0/unit0.outputs.npy"
    outside = bundle.parent / "x.npy"
    shutil.copy(bundle / rel, outside)
    escape = "../x.npy" if where == "relative" else str(outside.resolve())
    m = manifest_of(bundle)
    m["files"][escape] = m["files"].pop(rel)
    m["layers"][0]["tables"][0]["outputs"] = escape
    write_manifest(bundle, m)
    with pytest.raises(BundleError, match=rf"files: the file name '{escape}' is not one a bundle holds"):
        load(bundle)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_symlink_out_of_the_bundle_is_refused(bundle: Path) -> None:
    """A table file that is a symlink (here to a file outside the bundle) is refused."""
    rel = "tables/layer0/unit0.outputs.npy"
    outside = bundle.parent / "outside.npy"
    shutil.move(bundle / rel, outside)
    os.symlink(outside, bundle / rel)
    with pytest.raises(BundleError, match=r"unit0\.outputs\.npy: is a symlink; a bundle holds its own files"):
        load(bundle)


def test_pickled_arrays_are_refused(bundle: Path) -> None:
    """An object array (which only pickle can hold) is refused, even with a matching manifest entry."""
    rel = "tables/layer0/unit0.outputs.npy"
    np.save(bundle / rel, np.array([[object()]] * 64, dtype=object), allow_pickle=True)
    m = manifest_of(bundle)
    m["files"][rel].update(dtype="|O", sha256=hashlib.sha256((bundle / rel).read_bytes()).hexdigest())
    write_manifest(bundle, m)
    with pytest.raises(BundleError, match=r"unit0\.outputs\.npy'\]\.dtype: '\|O' is not a numeric \.npy type"):
        load(bundle)


def test_table_codes_outside_the_output_domain_are_refused(bundle: Path) -> None:
    """A table rewritten with codes its output domain lacks is refused, even with a matching checksum."""
    rel = "tables/layer0/unit0.outputs.npy"
    np.save(bundle / rel, np.full((64, 1), 7, dtype=np.uint8))
    m = manifest_of(bundle)
    m["files"][rel]["sha256"] = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    write_manifest(bundle, m)
    with pytest.raises(BundleError, match=r"unit0\.outputs\.npy\): holds code 7; expected codes 0\.\.3"):
        load(bundle)


# -- host modules -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, TableNetwork, torch.Tensor, Path]:
    model, net, x = build("host")
    return model, net, x, save(net, tmp_path_factory.mktemp("bundles") / "host")


def test_host_weights_are_stored_as_arrays(host_bundle) -> None:
    """A host module is stored as its class name and state_dict arrays, listed with the node it belongs to."""
    model, _, _, path = host_bundle
    host = manifest_of(path)["host"]
    assert [h["node"] for h in host] == ["fc", "q2"]
    assert host[0]["class"] == "torch.nn.modules.linear.Linear"
    assert [s["key"] for s in host[0]["state"]] == ["weight", "bias"]
    np.testing.assert_array_equal(np.load(path / host[0]["state"][0]["array"]), model.fc.weight.detach().numpy())


def test_missing_host_module_is_an_error_when_running(host_bundle) -> None:
    """Without its host modules a network still loads and summarises; running names the node and the fix."""
    _, net, x, path = host_bundle
    loaded = load(path)
    assert loaded.summary() == net.summary()
    with pytest.raises(BundleError, match=r"host node 'fc' has no module.*host_modules=\{'fc': \.\.\., 'q2': \.\.\.\}"):
        loaded.run(x)


def test_resaving_without_host_modules_keeps_their_weights(host_bundle, tmp_path: Path) -> None:
    """save(load(path)) keeps the host weights it could not attach, so the copy still runs once they are given."""
    _, net, x, path = host_bundle
    copy = save(load(path), tmp_path / "copy")
    fresh = PoolFlattenHead(host_head=True)
    assert torch.equal(load(copy, host_modules={"fc": fresh.fc, "q2": fresh.q2}).run(x), net.run(x))


@pytest.mark.parametrize(
    ("modules", "words"),
    [
        ({"head": nn.Linear(27, 5)}, r"host_modules names \['head'\], but the bundle's host nodes are \['fc', 'q2'\]"),
        (
            {"fc": nn.Linear(27, 4)},
            r"host_modules\['fc'\] state 'weight' has shape \(4, 27\), the bundle stores \(5, 27\)",
        ),
        ({"fc": nn.Linear(27, 5, bias=False)}, r"does not fit host node 'fc'.*pass a module of the saved architecture"),
        ({"fc": "fc"}, r"host_modules\['fc'\] must be a torch\.nn\.Module, received str"),
    ],
    ids=["unknown-node", "wrong-shape", "wrong-keys", "not-a-module"],
)
def test_host_modules_that_do_not_fit_are_refused(host_bundle, modules, words) -> None:
    """A host module for an unknown node, or of another architecture, is refused at load."""
    with pytest.raises(BundleError, match=words):
        load(host_bundle[3], host_modules=modules)


# -- atomic saves -------------------------------------------------------------------------------------------


def test_save_refuses_bad_targets_before_writing(tmp_path: Path) -> None:
    """A file, a non-empty foreign directory, or a non-network object is refused, and nothing is written."""
    _, net, _ = build("mlp")
    file = tmp_path / "file"
    file.write_text("keep")
    with pytest.raises(BundleError, match="exists and is not a directory"):
        save(net, file)
    assert file.read_text() == "keep"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(BundleError, match="not an iotable bundle; refusing to replace it"):
        save(net, foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    with pytest.raises(BundleError, match="expected a TableNetwork or LayerTables .*received dict"):
        save({"tables": []}, tmp_path / "new")
    with pytest.raises(BundleError, match="cannot be created inside it"):
        save(net, file / "sub")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "foreign"]


def test_save_replaces_an_existing_bundle(mlp_bundle, tmp_path: Path) -> None:
    """Saving over a bundle replaces it with the new network and leaves no temporary directory."""
    _, path = mlp_bundle
    target = Path(shutil.copytree(path, tmp_path / "bundle"))
    _, cnn, x = build("cnn")
    save(cnn, target)
    assert torch.equal(load(target).run(x), cnn.run(x))
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_save_replaces_only_a_bundle(mlp_bundle, tmp_path: Path) -> None:
    """save refuses to replace a folder whose manifest.json is another program's (or not JSON), or a bundle
    beside files of the user's (.git): each is left untouched and the message names the folder and the fix."""
    net, path = mlp_bundle
    web = tmp_path / "web"
    web.mkdir()
    (web / MANIFEST_NAME).write_text('{"name": "app", "files": {}}')
    (web / "index.html").write_text("<html></html>")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / MANIFEST_NAME).write_text("{not json")
    mixed = Path(shutil.copytree(path, tmp_path / "mixed"))
    (mixed / ".git").mkdir()
    (mixed / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    cases = [
        (web, r"web is a non-empty directory without an iotable bundle's manifest.json .*'index.html'.*new path"),
        (broken, r"broken is a non-empty directory without an iotable bundle's manifest.json"),
        (mixed, r"mixed is an iotable bundle but also holds files a bundle does not \(\['.git'\]\).*move them out"),
    ]
    for folder, words in cases:
        before = snapshot(folder)
        with pytest.raises(BundleError, match=f"save: .*{words}"):
            save(net, folder)
        assert snapshot(folder) == before
    save(net, Path(shutil.copytree(path, tmp_path / "plain")))  # a bundle alone is replaced


def test_a_saved_bundle_gets_the_mode_of_a_plain_folder(mlp_bundle, tmp_path: Path) -> None:
    """A saved bundle's folder has the mode a plain mkdir gives (readable by others under the usual umask),
    not the 0700 of a temporary folder, whether it is new or replaces an old bundle."""
    net, _ = mlp_bundle
    old = os.umask(0o022)
    try:
        save(net, tmp_path / "new")
        save(net, tmp_path / "new")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]


def test_save_over_the_bundle_a_network_was_loaded_from(mlp_bundle, tmp_path: Path) -> None:
    """A loaded network (its tables memory-mapped from the bundle) can be saved over that same bundle."""
    net, path = mlp_bundle
    target = Path(shutil.copytree(path, tmp_path / "bundle"))
    loaded = load(target)
    save(loaded, target)
    x = random_inputs(U2, (12,))
    assert torch.equal(load(target).run(x), net.run(x)) and torch.equal(loaded.run(x), net.run(x))
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def snapshot(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_failure_while_writing_keeps_the_previous_bundle(mlp_bundle, tmp_path: Path, monkeypatch) -> None:
    """An error after some array files are written leaves the previous bundle untouched and no temporary files."""
    _, path = mlp_bundle
    target = Path(shutil.copytree(path, tmp_path / "bundle"))
    before = snapshot(target)
    write_array = np.lib.format.write_array
    written = []

    def failing(*args, **kwargs):
        if len(written) == 3:
            raise OSError("disk full")
        written.append(1)
        return write_array(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", failing)
    _, cnn, _ = build("cnn")
    with pytest.raises(BundleError, match=r"save: cannot write the bundle .*bundle: disk full"):
        save(cnn, target)
    assert snapshot(target) == before and [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_failure_while_swapping_restores_the_previous_bundle(mlp_bundle, tmp_path: Path, monkeypatch) -> None:
    """If moving the new bundle in fails, the previous one is put back."""
    _, path = mlp_bundle
    target = Path(shutil.copytree(path, tmp_path / "bundle"))
    before = snapshot(target)
    replace = os.replace

    def failing(src, dst):
        if Path(src).name.endswith(".saving"):
            raise OSError("rename failed")
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    _, cnn, _ = build("cnn")
    with pytest.raises(BundleError, match=r"save: cannot write the bundle .*bundle: rename failed"):
        save(cnn, target)
    assert snapshot(target) == before and [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_crash_mid_save_never_leaves_a_half_written_bundle(mlp_bundle, tmp_path: Path) -> None:
    """A process killed half-way through a save leaves the previous bundle complete at the target."""
    _, path = mlp_bundle
    target = Path(shutil.copytree(path, tmp_path / "bundle"))
    before = snapshot(target)
    script = (
        "import os, sys, numpy as np, torch, iotable\n"
        "from torch import nn\n"
        "write, calls = np.lib.format.write_array, []\n"
        "def dying(*args, **kwargs):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 3:\n"
        "        os._exit(9)  # no cleanup, no finally: as if the power went\n"
        "    return write(*args, **kwargs)\n"
        "np.lib.format.write_array = dying\n"
        "model = nn.Sequential(nn.Conv1d(4, 4, 2, groups=4), iotable.nn.Quantize(2)).eval()\n"
        "net = iotable.precompute(model, input_domain=iotable.Domain.uniform(2), example_input=torch.zeros(1, 4, 5))\n"
        "iotable.save(net, sys.argv[1])\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, check=False)
    assert result.returncode == 9, result.stderr
    assert snapshot(target) == before
    load(target)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "bundle"]
    assert all(name.startswith(".bundle.") and name.endswith(".saving") for name in leftovers)
