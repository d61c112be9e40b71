"""Nothing on disk is trusted: the manifest's checksum, its bounds, every field, the golden vectors, and save
refusing what load would refuse. Each check has a tamper test beside it."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch

import iotable
from iotable import Domain, IOTable, load, precompute, save
from iotable.bundle.bundle import MAX_DEPTH, MAX_MANIFEST_BYTES
from iotable.bundle.manifest import MAX_DOMAIN_VALUES
from iotable.cli import main as cli
from iotable.errors import BundleError
from iotable.network.precompute import LayerTables

from .manifest_fuzz import direct_results
from .test_bundle import build, manifest_of, stamp, write_manifest
from .test_network import U2, random_inputs


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[iotable.TableNetwork, Path]:
    _, net, _ = build("mlp")
    return net, save(net, tmp_path_factory.mktemp("untrusted") / "mlp")


@pytest.fixture
def bundle(saved: tuple[iotable.TableNetwork, Path], tmp_path: Path) -> Path:
    """A private copy of the MLP bundle, free to damage."""
    return Path(shutil.copytree(saved[1], tmp_path / "bundle"))


def check(path: Path) -> tuple[int, str]:
    """``iotable check PATH`` in this process: the exit status and what it printed on stderr."""
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        status = cli(["check", str(path)])
    return status, err.getvalue()


def edited(path: Path, edit) -> Path:
    """The bundle with its manifest edited and its checksum written anew (the checks behind it are reached)."""
    manifest = manifest_of(path)
    edit(manifest)
    write_manifest(path, manifest)
    return path


def replace_array(path: Path, rel: str, array: np.ndarray, *, version: tuple[int, int] = (1, 0)) -> None:
    """Rewrite one array file and its files entry (sha256, dtype, shape, bytes) and stamp the manifest."""
    with open(path / rel, "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=False)
    data = (path / rel).read_bytes()
    manifest = manifest_of(path)
    manifest["files"][rel] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        "bytes": len(data),
    }
    write_manifest(path, manifest)


# -- the manifest's checksum --------------------------------------------------------------------------------


def test_a_changed_manifest_byte_fails_the_checksum(bundle: Path) -> None:
    """A manifest edited by hand (one digit of a scale) is refused by load and by iotable check."""
    data = (bundle / "manifest.json").read_bytes()
    assert data.count(b'"scale": 0.25') == 1
    (bundle / "manifest.json").write_bytes(data.replace(b'"scale": 0.25', b'"scale": 0.75'))
    with pytest.raises(BundleError, match=r"manifest\.json: checksum mismatch .* manifest\.sha256 says"):
        load(bundle)
    status, err = check(bundle)
    assert status == 1 and "checksum mismatch" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda p: (p / "manifest.sha256").unlink(), r"manifest\.sha256: missing; a format_version 6 bundle"),
        (lambda p: (p / "manifest.sha256").write_text("0" * 64 + "\n"), r"expected one line '<sha256 in hex>"),
        (
            lambda p: (p / "manifest.sha256").write_text("0" * 64 + "  manifest.json\n"),
            r"manifest\.json: checksum mismatch",
        ),
        (
            lambda p: [
                (p / "manifest.sha256").rename(p / "real.sha256"),
                os.symlink("real.sha256", p / "manifest.sha256"),
            ],
            r"manifest\.sha256: is a symlink",
        ),
    ],
    ids=["missing", "malformed", "other-digest", "symlink"],
)
def test_a_damaged_checksum_file_is_refused(bundle: Path, damage, words: str) -> None:
    """The checksum file missing, malformed, of another manifest or a symlink is a BundleError naming it."""
    damage(bundle)
    with pytest.raises(BundleError, match=words):
        load(bundle)


def test_the_checksum_file_reads_as_sha256sum_writes_it(bundle: Path) -> None:
    """manifest.sha256 is one sha256sum line for manifest.json, so `sha256sum -c` verifies it from a shell."""
    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert (bundle / "manifest.sha256").read_text() == f"{digest}  manifest.json\n"
    if shutil.which("sha256sum"):
        result = subprocess.run(["sha256sum", "-c", "manifest.sha256"], cwd=bundle, capture_output=True, timeout=60)
        assert result.returncode == 0 and b"manifest.json: OK" in result.stdout


# -- bounds -------------------------------------------------------------------------------------------------


def test_deeply_nested_json_is_refused_without_recursion(bundle: Path) -> None:
    """A manifest nested 500 deep (in a node's meta) is a BundleError about the nesting, not a RecursionError."""
    deep: object = 0
    for _ in range(500):
        deep = [deep]
    edited(bundle, lambda m: m["graph"]["nodes"][1]["meta"].update(deep=deep))
    with pytest.raises(BundleError, match=rf"nested deeper than {MAX_DEPTH} levels"):
        load(bundle)


def test_nesting_just_past_the_limit_is_refused(bundle: Path) -> None:
    """The depth bound is exact: nesting that takes the manifest one level past it is refused."""
    deep: object = 0
    for _ in range(MAX_DEPTH - 4):  # manifest, graph, nodes, node, meta: the value starts 5 levels down
        deep = [deep]
    edited(bundle, lambda m: m["graph"]["nodes"][1]["meta"].update(deep=deep))
    with pytest.raises(BundleError, match="nested deeper than"):
        load(bundle)


@pytest.fixture
def domains_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bit widths of every uniform domain built from here on."""
    built: list[int] = []
    uniform = Domain.uniform.__func__

    def counting(cls, bits, **kwargs):
        built.append(bits)
        return uniform(cls, bits, **kwargs)

    monkeypatch.setattr(Domain, "uniform", classmethod(counting))
    return built


def big_domain(scale: float) -> dict:
    return {
        "kind": "uniform",
        "size": 2**24,
        "bits": 24,
        "signed": False,
        "narrow": False,
        "scale": scale,
        "zero_point": 0.0,
    }


def test_an_unused_24_bit_domain_is_refused_before_it_is_built(bundle: Path, domains_built: list[int]) -> None:
    """A domain no node, plan or table uses is refused from its record, before 2**24 values are computed."""
    edited(bundle, lambda m: m["domains"].append(big_domain(1.0)))
    with pytest.raises(BundleError, match=r"domains\[2\]: no node, plan or table uses this domain"):
        load(bundle)
    assert 24 not in domains_built


def test_more_domain_values_than_the_limit_are_refused_before_any_is_built(
    bundle: Path, domains_built: list[int]
) -> None:
    """300 declared 24-bit domains (a 62 KB memory bomb) are refused from their sizes alone."""
    edited(bundle, lambda m: m["domains"].extend(big_domain(2.0**-k) for k in range(300)))
    with pytest.raises(
        BundleError, match=rf"302 domain\(s\) of \d+ values in all; a bundle holds at most {MAX_DOMAIN_VALUES}"
    ):
        load(bundle)
    assert domains_built == []


def test_a_declared_size_that_disagrees_with_the_parameters_is_refused(bundle: Path) -> None:
    """A domain's size must be the number of values its bits, signed and narrow give."""
    edited(bundle, lambda m: m["domains"][0].update(size=5))
    with pytest.raises(BundleError, match=r"domains\[0\]: size 5 disagrees with the 4 value\(s\)"):
        load(bundle)


def test_an_oversized_manifest_is_refused_unread(bundle: Path) -> None:
    """A manifest larger than the bound is refused from its size (a sparse file: nothing is read)."""
    os.truncate(bundle / "manifest.json", MAX_MANIFEST_BYTES + 1)
    with pytest.raises(BundleError, match=rf"holds {MAX_MANIFEST_BYTES + 1} bytes, more than the {MAX_MANIFEST_BYTES}"):
        load(bundle)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"format": 1, "format": 2}', "the key 'format' appears twice"),
        ('{"format": NaN}', "NaN is not a number JSON holds"),
        ('{"format": 1e999}', "1e999 is not a finite number"),
        ("[1, 2]", "expected a JSON object, received list"),
    ],
    ids=["duplicate-key", "nan", "infinite", "not-an-object"],
)
def test_json_a_writer_never_makes_is_refused(bundle: Path, text: str, words: str) -> None:
    """Duplicate keys, NaN, infinities and a non-object manifest are refused, even with a matching checksum."""
    (bundle / "manifest.json").write_text(text)
    stamp(bundle)
    with pytest.raises(BundleError, match=words):
        load(bundle)


@pytest.mark.parametrize(
    "name",
    ["tables/layer0/unit0\0.outputs.npy", "tables/" + "a" * 300 + ".npy", "tables//x.npy", "tables/.hidden.npy"],
    ids=["nul", "300-characters", "empty-part", "hidden"],
)
def test_file_names_a_bundle_never_holds_are_refused(bundle: Path, name: str) -> None:
    """A files entry named with a NUL, a 300-character part, an empty or hidden part is refused by name."""
    rel = "tables/layer0/unit0.outputs.npy"

    def rename(m: dict) -> None:
        m["files"][name] = m["files"].pop(rel)
        m["layers"][0]["tables"][0]["outputs"] = name

    edited(bundle, rename)
    with pytest.raises(BundleError, match=r"files: the file name .* is not one a bundle holds"):
        load(bundle)


def test_a_symlink_loop_is_a_bundle_error(bundle: Path) -> None:
    """A table folder replaced by a symlink loop is refused as a symlink (no RuntimeError, no OSError)."""
    shutil.rmtree(bundle / "tables/layer1")
    os.symlink("layer1", bundle / "tables/layer1")
    with pytest.raises(BundleError, match=r"tables/layer1: is a symlink; a bundle holds its own files"):
        load(bundle)
    loop = bundle.parent / "loop"
    os.symlink(loop, loop)
    with pytest.raises(BundleError, match=r"loop does not exist; expected a bundle directory"):
        load(loop)


def test_a_symlinked_manifest_is_refused(bundle: Path, tmp_path: Path) -> None:
    """manifest.json itself may not be a link (to a file elsewhere that would pass its checks)."""
    elsewhere = tmp_path / "elsewhere.json"
    shutil.move(bundle / "manifest.json", elsewhere)
    os.symlink(elsewhere, bundle / "manifest.json")
    with pytest.raises(BundleError, match=r"manifest\.json: is a symlink"):
        load(bundle)


def test_declared_bytes_are_checked(bundle: Path) -> None:
    """A files entry whose bytes disagree with the file is refused, naming both sizes."""
    rel = "tables/layer0/unit1.outputs.npy"
    size = (bundle / rel).stat().st_size
    edited(bundle, lambda m: m["files"][rel].update(bytes=size + 1))
    with pytest.raises(
        BundleError, match=rf"unit1\.outputs\.npy: holds {size} bytes, but manifest\.json says {size + 1}"
    ):
        load(bundle)


def test_npy_format_2_is_refused(bundle: Path) -> None:
    """An array file written as .npy format 2.0 (with a matching files entry) is refused: a bundle holds 1.0."""
    rel = "tables/layer0/unit1.outputs.npy"
    replace_array(bundle, rel, np.load(bundle / rel), version=(2, 0))
    with pytest.raises(BundleError, match=r"unit1\.outputs\.npy: \.npy format version 2\.0 is not supported"):
        load(bundle)


# -- every field --------------------------------------------------------------------------------------------


def swap_outputs(m: dict) -> None:
    tables = m["layers"][0]["tables"]
    tables[0]["outputs"], tables[1]["outputs"] = tables[1]["outputs"], tables[0]["outputs"]


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (swap_outputs, r"layers\[0\]\.tables\[0\]\.outputs holds 'tables/layer0/unit1\.outputs\.npy', but the objects"),
        (
            lambda m: m["layers"][0]["tables"][2].update(input_taps=[0, 1, 0]),
            r"layers\[0\]\.tables\[2\]\.input_taps\[1\] holds 1, but the objects it describes give 0",
        ),
        (
            lambda m: m["layers"][0]["tables"][2].update(unit=3),
            r"tables\[2\]: layer '0' and unit 3 must be the table's own \('0' and 2\)",
        ),
        (
            lambda m: m["domains"].append(dict(m["domains"][0])),
            r"domains\[2\]: no node, plan or table uses this domain",
        ),
        (
            lambda m: m["files"].update({"graph/array9.npy": m["files"]["golden/inputs.npy"]}),
            r"graph/array9\.npy",
        ),
        (
            lambda m: m["layers"][1]["tables"][0].update(outputs=m["layers"][1]["tables"][1]["outputs"]),
            r"names the file 'tables/layer1/unit1\.outputs\.npy', which another field already names",
        ),
        (
            lambda m: m["graph"]["nodes"][1]["meta"].update(Fx_node="x"),
            r"graph\.nodes\[1\] \('0'\)\.meta: expected the fields \['index_map', 'layer', 'modules', 'unit_bits', 'units'\]; "
            r"missing \[\], unknown \['Fx_node'\]",
        ),
        (
            lambda m: m["layers"][0]["plan"].update(fill_codes=[1] * 12),
            r"fill_codes: expected each input channel's code of real 0",
        ),
        (
            lambda m: m["domains"][1].update(signed="true"),
            r"domains\[1\]\.signed: expected true or false, received 'true'",
        ),
        (lambda m: m["domains"][1].update(scale=0.1), r"domains\[1\]: scale and zero_point must be the float32 values"),
        (lambda m: m.update(extra=1), r"unknown \['extra'\]"),
        (lambda m: m["graph"]["nodes"][0].update(layout="nc"), r"nodes\[0\] \('input'\)\.layout: unknown layout 'nc'"),
    ],
    ids=[
        "swapped-table-paths",
        "input-taps",
        "table-unit",
        "unused-domain-copy",
        "unused-file",
        "file-named-twice",
        "unknown-meta-key",
        "fill-codes",
        "truthy-string",
        "scale-not-float32",
        "unknown-field",
        "layout-case",
    ],
)
def test_fields_that_disagree_with_what_they_describe_are_refused(bundle: Path, edit, words: str) -> None:
    """Edits behind a valid checksum that change what a reader would be told are refused, naming the field."""
    edited(bundle, edit)
    with pytest.raises(BundleError, match=words):
        load(bundle)


# -- golden vectors -----------------------------------------------------------------------------------------


def test_an_edited_output_domain_fails_the_golden_vectors(bundle: Path) -> None:
    """A consistent edit of the output domain's scale (behind a valid checksum) changes outputs: golden refuses it."""
    edited(bundle, lambda m: m["domains"][1].update(scale=0.5))
    with pytest.raises(BundleError, match=r"golden: node 'output' gives other values than when the bundle was saved"):
        load(bundle)


def test_an_edited_input_domain_fails_the_golden_inputs(bundle: Path) -> None:
    """A consistent edit of the input domain's scale leaves the golden inputs outside it: refused, with the reason."""
    edited(bundle, lambda m: m["domains"][0].update(scale=0.25))
    with pytest.raises(BundleError, match=r"golden: the network fails on its golden inputs \(DomainError: .*\)"):
        load(bundle)


def test_replaced_golden_values_are_refused(bundle: Path) -> None:
    """Golden values that the tables do not reproduce (a rewritten file, listed with its checksum) are refused."""
    rel = "golden/probe0.npy"
    values = np.load(bundle / rel)
    values[3, 0] += 0.25
    replace_array(bundle, rel, values)
    with pytest.raises(BundleError, match=r"node 'output' gives other values .* \(golden sample 3\)"):
        load(bundle)


def test_golden_vectors_hold_generated_inputs_and_the_outputs(saved: tuple[iotable.TableNetwork, Path]) -> None:
    """Eight inputs of the input domain (all first codes, all last codes, random) and the network's outputs."""
    net, path = saved
    inputs, outputs = np.load(path / "golden/inputs.npy"), np.load(path / "golden/probe0.npy")
    assert inputs.shape == (8, 12) and inputs.dtype == np.float64 and outputs.dtype == np.float32
    assert (inputs[0] == 0).all() and (inputs[1] == 1.5).all() and set(np.unique(inputs)) <= set(U2.values)
    np.testing.assert_array_equal(outputs, net.run(torch.from_numpy(inputs)).numpy())


def test_host_networks_keep_golden_values_of_what_the_host_reads(tmp_path: Path) -> None:
    """With a host head, golden values are taken where the host reads (exact everywhere), with or without its module."""
    model, net, _ = build("host")
    path = save(net, tmp_path / "host")
    golden = manifest_of(path)["golden"]
    assert [p["node"] for p in golden["probes"]] == ["flatten"]
    load(path)  # no host module: the table part is still checked
    manifest = manifest_of(path)
    manifest["domains"][0]["scale"] = 1.0  # the domain of the pooled codes the head reads
    write_manifest(path, manifest)
    with pytest.raises(BundleError, match="golden"):
        load(path, host_modules={"fc": model.fc, "q2": model.q2})


def test_partial_tables_read_missing_rows_as_code_0_in_golden_runs(tmp_path: Path) -> None:
    """A restricted network's golden samples all run: a row its tables lack reads as code 0, so edits still show."""
    _, net, x = build("mlp")
    restricted = iotable.restrict(net, iotable.observe(net, x[:2]))
    path = save(restricted, tmp_path / "restricted")
    inputs = np.load(path / "golden/inputs.npy")
    assert len(inputs) == 8
    with pytest.raises(iotable.errors.MissingRowError):  # the generated inputs reach rows the tables lack
        restricted.run(torch.from_numpy(inputs))
    assert torch.equal(load(path).run(x[:2]), restricted.run(x[:2]))
    edited(path, lambda m: m["domains"][1].update(scale=0.5))
    with pytest.raises(BundleError, match=r"golden: node 'output' gives other values"):
        load(path)


# -- save refuses what load would refuse --------------------------------------------------------------------


def layer() -> LayerTables:
    conv = torch.nn.Conv1d(2, 2, kernel_size=2, groups=2)
    return precompute(conv, input_domain=Domain.uniform(2))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: dataclasses.replace(layer(), plan=dataclasses.replace(layer().plan, name=5)),
            r"name: expected a string",
        ),
        (
            lambda: LayerTables(
                plan=layer().plan,
                tables=tuple(precompute(torch.nn.Conv1d(2, 2, 2, groups=2), input_domain=Domain.uniform(1)).tables),
            ),
            r"input or output domains disagree with the plan of unit 0",
        ),
        (
            lambda: LayerTables(
                plan=precompute(
                    iotable.decompose(torch.nn.Sequential(torch.nn.Linear(2, 1), iotable.nn.Quantize(2))),
                    input_domain=Domain.uniform(1),
                ).plan,
                tables=(
                    IOTable._trusted(
                        np.full((4, 1), 255, np.uint8),
                        input_domains=(Domain.uniform(1),) * 2,
                        output_domain=Domain.uniform(2),
                        layer="Sequential",
                        unit=0,
                    ),
                ),
            ),
            r"holds code 255; expected codes 0\.\.3",
        ),
    ],
    ids=["name-int", "tables-of-another-plan", "codes-outside-the-domain"],
)
def test_save_refuses_what_load_would_refuse_before_writing(tmp_path: Path, make, words: str) -> None:
    """A LayerTables that could not load back (an int name, tables of another plan, codes outside the domain)
    is refused by save before a byte is written."""
    with pytest.raises(BundleError, match=rf"save: refusing to write .*, which load would refuse: .*{words}"):
        save(make(), tmp_path / "bad")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_saving_is_a_bundle_error_that_leaves_the_old_bundle(bundle: Path, monkeypatch) -> None:
    """ENOSPC while writing is a BundleError naming the bundle, the reason and the fix; the old bundle stays."""
    import errno

    before = (bundle / "manifest.json").read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", full)
    _, net, _ = build("mlp")
    with pytest.raises(
        BundleError, match=r"save: cannot write the bundle .*bundle: No space left on device; free space"
    ):
        save(net, bundle)
    assert (bundle / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in bundle.parent.iterdir()) == ["bundle"]


# -- LUT mapping results ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[iotable.TableNetwork, Path]:
    """The MLP with mapping results for its tables (each of 6 bits: written directly, no ABC), saved (seeded: the
    edits below need tables that read all their inputs, whatever ran before)."""
    torch.manual_seed(0)
    _, net, _ = build("mlp")
    net = direct_results(net)
    assert len(net.luts) > 1
    return net, save(net, tmp_path_factory.mktemp("mapped") / "mlp")


@pytest.fixture
def mapped_bundle(mapped: tuple[iotable.TableNetwork, Path], tmp_path: Path) -> Path:
    """A private copy of the mapped MLP bundle, free to damage."""
    return Path(shutil.copytree(mapped[1], tmp_path / "bundle"))


def test_mapping_results_round_trip(mapped: tuple[iotable.TableNetwork, Path], tmp_path: Path) -> None:
    """A loaded bundle holds the saved mapping results, checked, and saving it again writes the same manifest."""
    net, path = mapped
    loaded = load(path)
    assert loaded.luts == net.luts and {f: r.luts for f, r in loaded.luts.items()}
    records = manifest_of(path)["luts"]
    assert len(records) == len(net.luts) and records[0]["netlist"] == "luts/netlist0.npy"
    again = save(loaded, tmp_path / "again")
    assert (again / "manifest.json").read_bytes() == (path / "manifest.json").read_bytes()
    assert check(path)[0] == 0


def test_a_wrong_stored_netlist_is_refused(mapped_bundle: Path) -> None:
    """A stored netlist that computes another function (one cover line changed) is refused, naming its file."""

    def cover_line(lines: list[str]) -> int | None:
        return next((i for i, line in enumerate(lines) if line[:1] in "01" and line.endswith(" 1")), None)

    netlists = [record["netlist"] for record in manifest_of(mapped_bundle)["luts"]]
    texts = [np.load(mapped_bundle / rel).tobytes().decode().splitlines() for rel in netlists]
    k = next(k for k, lines in enumerate(texts) if cover_line(lines) is not None)  # a netlist with one to change
    rel, lines = netlists[k], texts[k]
    at = cover_line(lines)
    assert at is not None
    lines[at] = ("1" if lines[at][0] == "0" else "0") + lines[at][1:]
    replace_array(mapped_bundle, rel, np.frombuffer(("\n".join(lines) + "\n").encode(), np.uint8))
    with pytest.raises(BundleError, match=rf"luts\[{k}\]\.netlist \({rel}\).*does not compute the table"):
        load(mapped_bundle)


@pytest.mark.parametrize(
    ("text", "words"),
    [(b".model m\n.latch a b\n.end\n", r"\.latch is not supported"), (b"\xff\xfe", "not ASCII")],
    ids=["not-a-netlist", "not-ascii"],
)
def test_a_damaged_netlist_file_is_refused(mapped_bundle: Path, text: bytes, words: str) -> None:
    """A netlist file that is no LUT netlist (or not text) is refused, naming the file."""
    rel = manifest_of(mapped_bundle)["luts"][1]["netlist"]
    replace_array(mapped_bundle, rel, np.frombuffer(text, np.uint8))
    with pytest.raises(BundleError, match=rf"luts\[1\]\.netlist \({rel}\).*{words}"):
        load(mapped_bundle)


def other_key(m: dict) -> None:
    m["luts"][0]["key"] = m["luts"][1]["key"]


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m["luts"][0].update(luts=7), r"luts\[0\]\.netlist .* the record says \(luts, depth"),
        (other_key, r"luts\[0\]\.netlist .* the record's key is not the content hash"),
        (lambda m: m["luts"][0].update(table=[0, 999]), r"luts\[0\]\.table: \[0, 999\] names no table"),
        (lambda m: m["luts"][0].update(method="abc"), r"luts\[0\]\.method: 'abc' for a table of 6 address bits"),
        (lambda m: m["luts"][0].update(k=13), r"luts\[0\]\.k: expected LUTs of 3 to 12 inputs"),
        (lambda m: m["luts"][0].update(seconds=-1.0), r"luts\[0\]\.seconds: expected a non-negative"),
        (lambda m: m["luts"][0].update(extra=1), r"luts\[0\]: expected the fields .* unknown \['extra'\]"),
        (lambda m: m["luts"].append(dict(m["luts"][0])), r"names the file 'luts/netlist0\.npy', which another"),
        (lambda m: m["luts"].reverse(), r"luts\[0\]\.\w+ holds .*, but the objects it describes give"),
        (lambda m: m["luts"][0].update(k=3, method="abc"), r"node .* reads \d signals; expected LUTs of at most 3"),
    ],
    ids=["luts", "key", "table", "method", "k", "seconds", "field", "twice", "order", "fan-in"],
)
def test_edited_mapping_records_are_refused(mapped_bundle: Path, edit, words: str) -> None:
    """A mapping record that disagrees with its table, its netlist or the format is refused, naming the record."""
    with pytest.raises(BundleError, match=words):
        load(edited(mapped_bundle, edit))


def test_a_format_4_manifest_holds_no_mapping_results(bundle: Path) -> None:
    """A format 4 bundle with a luts field is refused (the field is not format 4's); without it, it loads."""
    edited(bundle, lambda m: m.update(format_version=4))
    with pytest.raises(BundleError, match=r"unknown \['luts'\]"):
        load(bundle)
    edited(bundle, lambda m: m.pop("luts"))
    assert load(bundle).luts == {}


# -- older bundles ------------------------------------------------------------------------------------------


def as_format_2(path: Path) -> None:
    """Rewrite a bundle as format 2 wrote it: no checksum file, no golden vectors, no mapping results (the rest as
    today)."""
    manifest = manifest_of(path)
    for rel in [r for r in manifest["files"] if r.startswith("golden/")]:
        del manifest["files"][rel]
        (path / rel).unlink()
    del manifest["golden"], manifest["luts"]
    manifest["format_version"] = 2
    (path / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (path / "manifest.sha256").unlink()


def test_format_2_bundles_load_and_upgrade_by_saving_again(bundle: Path, saved) -> None:
    """A format 2 bundle loads with every check but the checksum and golden vectors; check asks to save it again.

    (Format 1 is tests/test_padding.py's: a bundle written by that version, kept in tests/data.)
    """
    net, _ = saved
    as_format_2(bundle)
    x = random_inputs(U2, (12,))
    assert torch.equal(load(bundle).run(x), net.run(x))
    status, err = check(bundle)
    assert status == 1 and "format_version 2 has no manifest checksum" in err
    assert "iotable.save(iotable.load(path), path)" in err
    save(load(bundle), bundle)
    assert manifest_of(bundle)["format_version"] == iotable.bundle.manifest.FORMAT_VERSION and check(bundle)[0] == 0


def test_format_2_bundles_are_still_checked_field_by_field(bundle: Path) -> None:
    """Without a checksum to protect it, a format 2 manifest still goes through every other check."""
    as_format_2(bundle)
    manifest = manifest_of(bundle)
    manifest["layers"][0]["tables"][2]["input_taps"] = [0, 1, 0]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"input_taps\[1\] holds 1, but the objects it describes give 0"):
        load(bundle)


def test_a_format_1_bundle_is_checked_as_the_format_2_bundle_it_stands_for(tmp_path: Path) -> None:
    """The format-1 bundle kept in tests/data passes every check once read as format 2, and an edit of it does not."""
    source = Path(__file__).parent / "data" / "format1_padded.bundle"
    path = Path(shutil.copytree(source, tmp_path / "format1"))
    load(path)
    manifest = manifest_of(path)
    pad = next(n for n in manifest["graph"]["nodes"] if n["kind"] == "pad")
    pad["meta"]["pad_codes"] = [3] * len(pad["meta"]["pad_codes"])
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"pad node '1:pad': meta\.pad_codes\[0\] is 3, but padding feeds real 0"):
        load(path)


def test_the_command_line_never_prints_a_traceback(bundle: Path, monkeypatch) -> None:
    """An internal error inside a command is one line on stderr and exit status 1, never a traceback."""

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(iotable.cli, "open_bundle", broken)
    status, err = check(bundle)
    assert status == 1 and err.startswith("iotable check: internal error (RecursionError") and "Traceback" not in err
