"""Names are data, never code: what a model, a bundle or a caller names reaches files and HDL only as a legal,
unique identifier or as escaped comment text, or is refused with a library error that shows it escaped."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from torch import nn

import iotable
from iotable import Domain
from iotable.cli import main as cli
from iotable.errors import BundleError, HDLError, ModelError, SpecOptionError
from iotable.hdl import Design, export, simulate, simulate_files, table_verilog, table_vhdl
from iotable.hdl.language import Language
from iotable.hdl.names import check_name, check_unique
from iotable.nn import Quantize
from iotable.pla import export_pla
from tests.optional import require_program

from .test_bundle import manifest_of, write_manifest

D2 = Domain.uniform(2)
SIMULATOR = {"verilog": "iverilog", "vhdl": "ghdl"}
XOR = iotable.IOTable.dense(
    [[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2, output_domain=Domain.uniform(1)
)


def two_layers(first: str = "fc0", second: str = "fc1", *, quantizers: tuple[str, str] = ("q0", "q1")) -> nn.Module:
    """Two small table layers whose submodules carry the given names."""
    torch.manual_seed(0)
    parts = [
        (first, nn.Linear(4, 3)),
        (quantizers[0], Quantize(2)),
        (second, nn.Linear(3, 2)),
        (quantizers[1], Quantize(2)),
    ]
    return nn.Sequential(OrderedDict(parts)).eval()


def agrees(design: Design, language: str) -> None:
    """The design, run in the language's simulator on every input of a small batch, gives ``net.run``'s codes."""
    require_program(SIMULATOR[language], package=SIMULATOR[language])
    x = torch.randint(0, 4, (12, *design.network.input_shape))
    out = simulate(design, x, codes=True, simulator=SIMULATOR[language], timeout=120)
    assert torch.equal(out, design.reference(x, codes=True))


# -- VHDL library and package names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "top",
    ["ieee", "std", "work", "std_logic", "STD_Logic", "numeric_std", "std_logic_1164", "textio", "env", "rising_edge"],
)
def test_a_vhdl_library_or_package_name_is_refused_as_a_top(top: str, tmp_path: Path) -> None:
    """A VHDL top or table named after a library or what a standard package declares is refused with the fix."""
    net = iotable.precompute(two_layers(), input_domain=D2)
    with pytest.raises(HDLError, match=rf"'{top}' is the name of a VHDL library.*choose another \(e.g. {top}_t\)"):
        export(net, tmp_path / "d", top=top, language="vhdl")
    with pytest.raises(HDLError, match="VHDL library"):
        table_vhdl(XOR, top)
    assert not (tmp_path / "d").exists()


def test_the_suggested_vhdl_name_and_the_same_name_in_verilog_compile(tmp_path: Path) -> None:
    """The fix the refusal suggests gives a VHDL design that ghdl runs; Verilog, which has no libraries, keeps the
    name and iverilog runs it."""
    net = iotable.precompute(two_layers(), input_domain=D2)
    agrees(export(net, tmp_path / "vhdl", top="std_logic_t", language="vhdl", vectors=8), "vhdl")
    agrees(export(net, tmp_path / "verilog", top="std_logic", language="verilog", vectors=8), "verilog")
    assert "module std_logic" in table_verilog(XOR, "std_logic")


# -- identifiers unique after cleaning, in both languages --------------------------------------------------------


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_layer_names_equal_after_cleaning_or_ignoring_case_give_distinct_modules(language: str, tmp_path: Path) -> None:
    """Layers named 'A' and 'a', or 'a b' and 'a_b', become modules that differ ignoring case (VHDL and some file
    systems ignore it), one file each, and the design equals net.run."""
    for k, (first, second) in enumerate([("A", "a"), ("a b", "a_b")]):
        net = iotable.precompute(two_layers(first, second), input_domain=D2)
        design = export(net, tmp_path / str(k), top="Net", language=language, vectors=8)
        stems = [Path(name).stem for name in design.sources]
        assert len({stem.lower() for stem in stems}) == len(stems) >= 3  # distinct tables (2 layers), the top
        written = [p.name for p in design.directory.iterdir()]
        assert set(design.sources) <= set(written) and len({n.lower() for n in written}) == len(written)
        agrees(design, language)


def test_module_names_equal_ignoring_case_are_refused() -> None:
    """Two module names of one design that differ only in case are refused as a generator bug, naming both."""
    check_unique(["net", "net_layer0_u0", "net_pool0"], what="export")
    with pytest.raises(HDLError, match=r"'net_Layer0' and 'net_layer0', the same name ignoring case"):
        check_unique(["net", "net_Layer0", "net_layer0"], what="export")


# -- control characters refused where names enter -----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"])
def test_a_module_name_with_a_control_character_is_refused_at_precompute(bad: str) -> None:
    """A submodule whose name holds a control character or line break is refused, the name shown escaped, with
    the fix."""
    name = f"fc{bad}module evil; endmodule //"
    with pytest.raises(ModelError) as caught:
        iotable.precompute(two_layers(name), input_domain=D2)
    message = str(caught.value)
    assert repr(name) in message and repr(bad) in message and "\n" not in message
    assert "precompute" in message and "rename the submodule" in message


def test_a_control_character_in_a_nested_module_name_is_refused_at_precompute() -> None:
    """The qualified name of a nested submodule is shown, and the fix names the submodule to rename."""
    model = nn.Sequential(OrderedDict([("block", two_layers("fc\x0b"))])).eval()
    with pytest.raises(ModelError, match=re.escape("the module 'block.fc\\x0b'") + r".*rename the submodule 'fc\\x0b'"):
        iotable.precompute(model, input_domain=D2)


def test_a_layer_name_given_with_a_control_character_is_refused() -> None:
    """``precompute(layer, name=...)`` refuses a name with a line break, shown escaped, before any work."""
    with pytest.raises(SpecOptionError, match=re.escape("name 'fc\\nx' holds the unprintable character '\\n'")):
        iotable.precompute(nn.Linear(2, 1), input_domain=D2, name="fc\nx")


@pytest.mark.parametrize("bad", ["\n", "\x00", "\u2028"])
def test_a_bundle_name_with_a_control_character_is_refused_at_load(bad: str, tmp_path: Path) -> None:
    """A bundle whose layer and node names were edited to hold a control character (checksum stamped anew) is
    refused by load and by ``iotable check``, the name shown escaped."""
    net = iotable.precompute(two_layers("fc"), input_domain=D2)
    path = iotable.save(net, tmp_path / "net")
    name = f"fc{bad}module evil; endmodule //"
    text = json.dumps(manifest_of(path)).replace('"fc"', json.dumps(name))
    write_manifest(path, json.loads(text))
    with pytest.raises(BundleError) as caught:
        iotable.load(path)
    assert repr(name) in str(caught.value) and "rename the submodule" in str(caught.value)
    assert cli(["check", str(path)]) != 0


@pytest.mark.parametrize(
    "field", [("nodes", 1, "fx_node"), ("nodes", 1, "meta", "modules", 1), ("edges", 0, "consumer")]
)
def test_one_name_field_of_a_bundle_with_a_control_character_is_refused_at_load(field: tuple, tmp_path: Path) -> None:
    """A control character in a single name field of the graph (a module name in a node's metadata, an fx node, an
    edge's end) is refused too, the field named."""
    net = iotable.precompute(nn.Sequential(OrderedDict([("fc", nn.Linear(4, 3)), ("q", Quantize(2))])), input_domain=D2)
    path = iotable.save(net, tmp_path / "net")
    manifest = manifest_of(path)
    record = manifest["graph"]
    for key in field[:-1]:
        record = record[key]
    record[field[-1]] = "q\rx"
    write_manifest(path, manifest)
    with pytest.raises(BundleError, match=re.escape("'q\\rx' holds the unprintable character '\\r'")):
        iotable.load(path)


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_layer_name_cannot_end_a_comment_and_become_code(language: str, tmp_path: Path) -> None:
    """A layer named with a newline and a module declaration is refused; one named with comment delimiters and a
    module declaration exports, stays inside its comment line, and the bench and net.run agree."""
    with pytest.raises(ModelError, match="rename the submodule"):
        iotable.precompute(two_layers("a\nmodule evil; endmodule //"), input_domain=D2)
    evil = "a */ module evil; endmodule /* -- // "
    net = iotable.precompute(two_layers(evil), input_domain=D2)
    assert evil in net.layers  # the name reaches the graph unchanged
    design = export(net, tmp_path, top="net_t", language=language, vectors=40)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    for name, text in files.items():
        assert not re.search(r"^\s*module\s+evil\b", text, re.MULTILINE), name
        assert "*/ module" not in text and "/* --" not in text
    assert any("module evil; endmodule" in text for text in files.values())  # kept, inside a comment
    require_program(SIMULATOR[language], package=SIMULATOR[language])
    result = simulate_files(files, "net_t_tb", simulator=SIMULATOR[language], timeout=300)
    assert result.passed and "40/40 vectors match" in result.stdout, result.stdout + result.stderr
    agrees(design, language)


# -- PLA files ----------------------------------------------------------------------------------------------------


def test_pla_tables_whose_names_collide_after_cleaning_get_distinct_files(tmp_path: Path) -> None:
    """Layers 'a b', 'a_b' (and a table given twice) give one file per table: the returned paths are the files
    written, and each file reads back as its own table."""
    net = iotable.precompute(two_layers("a b", "a_b"), input_domain=D2)
    tables = [*net.tables, net.tables[0]]
    paths = export_pla(tables, tmp_path / "pla")
    assert len(set(paths)) == len(paths) == 6
    assert sorted(paths) == sorted((tmp_path / "pla").iterdir())
    assert [p.name for p in paths] == [
        "a_b.u0.pla", "a_b.u1.pla", "a_b.u2.pla", "a_b.u0.2.pla", "a_b.u1.2.pla", "a_b.u0.3.pla",
    ]  # fmt: skip
    for table, path in zip(tables, paths):
        assert path.read_bytes() == iotable.pla.pla_text(table)


def test_pla_file_names_differ_ignoring_case_and_stay_short(tmp_path: Path) -> None:
    """Layer names equal ignoring case get distinct files (for case-insensitive file systems); a long name is
    cut so that the file can be created."""
    net = iotable.precompute(two_layers("A" * 300, "a" * 300), input_domain=D2)
    paths = export_pla(net, tmp_path)
    assert len({p.name.lower() for p in paths}) == 5 and all(len(p.name) < 140 for p in paths)
    assert sorted(paths) == sorted(tmp_path.iterdir())


def test_the_pla_command_writes_every_table_of_colliding_layers(tmp_path: Path) -> None:
    """``iotable pla`` on a bundle whose layer names collide after cleaning writes every table, none overwritten."""
    net = iotable.precompute(two_layers("a b", "a_b"), input_domain=D2)
    bundle = iotable.save(net, tmp_path / "net")
    assert cli(["pla", str(bundle), str(tmp_path / "pla")]) == 0
    assert len(list((tmp_path / "pla").iterdir())) == 5


# -- any name: a design equal to net.run, or a clear refusal -----------------------------------------------------

# printable names that look like code in one language or the other, and names precompute must refuse
TRICKY = ["*/ module evil; endmodule /*", "-- x", "// x", "end", "module", "entity", "é", "a b", "A"]
UNPRINTABLE = ["a\nmodule evil; endmodule //", "\u2028x", "\x1b[31m", "a\x00"]
# (a quote or a backslash cannot name a submodule torch.fx traces: refused by name, see the test below)
QUOTES = "\"'\\"
cleaned = st.text(min_size=1, max_size=10).map(
    lambda s: "".join(c for c in s if c.isprintable() and c != "." and c not in QUOTES) or "x"
)
printable = st.one_of(cleaned, cleaned, st.sampled_from(TRICKY))
identifiers = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True)
top_names = st.one_of(
    identifiers,
    identifiers,
    identifiers,
    st.one_of(
        st.text(max_size=10),
        st.sampled_from(["ieee", "std_logic", "Work", "module", "entity", "logic", "dut", "a__b", "a_", "_a", ""]),
    ),
)


def _model(names: list[str]) -> nn.Module:
    """``two_layers`` under the given names, or a rejected example where torch refuses one as a submodule name."""
    if len(set(names)) < 4:
        reject()
    try:
        return two_layers(names[0], names[2], quantizers=(names[1], names[3]))
    except (KeyError, TypeError):  # torch refuses names of existing attributes
        reject()


@settings(max_examples=15, deadline=None)
@given(
    names=st.lists(printable, min_size=3, max_size=3, unique=True),
    bad=st.one_of(
        st.sampled_from(UNPRINTABLE),
        st.builds(
            "{}{}{}".format, st.text(max_size=3), st.characters(categories=["Cc", "Zl", "Zp"]), st.text(max_size=3)
        ),
    ),
    at=st.integers(0, 3),
)
def test_any_unprintable_submodule_name_is_refused_at_precompute(names: list[str], bad: str, at: int) -> None:
    """Whichever submodule (layer or quantizer) has a name with an unprintable character, precompute refuses it
    with a ModelError showing that name escaped, before any table is built."""
    names.insert(at, bad.replace(".", "_"))
    with pytest.raises(ModelError) as caught:
        iotable.precompute(_model(names), input_domain=D2)
    assert repr(bad.replace(".", "_")) in str(caught.value) and "rename the submodule" in str(caught.value)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(printable, min_size=4, max_size=4, unique=True),
    top=top_names,
    language=st.sampled_from(["verilog", "vhdl"]),
)
def test_any_name_gives_a_design_equal_to_net_run_or_a_clear_refusal(names: list[str], top: str, language: str) -> None:
    """Any printable string as a layer or quantizer name (so as a node name) and any string as the top's name:
    the design compiles and equals net.run in the language's simulator, or export refuses the top's name with an
    HDLError naming it."""
    net = iotable.precompute(_model(names), input_domain=D2)
    directory = Path(tempfile.mkdtemp())
    try:
        try:
            design = export(net, directory / "design", top=top, language=language, vectors=8)
        except HDLError as exc:  # only the top's name can be refused, and the refusal names it
            assert f"module name {top!r}" in str(exc)
            with pytest.raises(HDLError):
                check_name(top, language=Language(language), what="export")
            event("top refused at export")
            return
        files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
        result = simulate_files(files, f"{top}_tb", simulator=SIMULATOR[language], timeout=120)
        assert result.passed and "8/8 vectors match" in result.stdout, result.stdout + result.stderr
        agrees(design, language)
        event(f"{language} design equals net.run")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("quote", ['"', "'", "\\"])
def test_a_quote_or_backslash_in_a_submodule_name_is_refused_by_name(quote: str) -> None:
    """torch.fx writes submodule names into generated code, where a quote or a backslash breaks it: refused by
    name, with the fix, before any work."""
    name = f"fc{quote}x"
    with pytest.raises(ModelError, match="rename the submodule") as caught:
        iotable.precompute(two_layers(name), input_domain=D2)
    assert repr(name) in str(caught.value)
