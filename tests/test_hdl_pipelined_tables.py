"""Mapped tables pipelined inside (export's pipeline_luts): the design simulates equal to net.run under iverilog and
ghdl, with generic LUTs and iCE40 cells, its latency counts each layer's registers, its table benches hold each
address for the table's latency, a register bypassed in the written HDL fails the network bench, yosys and ghdl
accept it, and bad options are refused before anything is written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import iotable
from iotable import OptionError
from iotable.hdl import Design, check, simulate, simulate_files, table_bench
from tests.optional import require_program
from tests.test_hdl_export import files_of, run_bench
from tests.test_hdl_mapped import D2, SIMULATORS, export_mapped, table_benches_pass, wide_mlp


@pytest.fixture(scope="module")
def mlp() -> iotable.TableNetwork:
    return iotable.precompute(wide_mlp(), input_domain=D2)


def layer_depths(design: Design) -> dict[int, int]:
    """The deepest mapped table of each layer, as the table modules' headers say (the mapper's own depth)."""
    depths: dict[int, int] = {}
    for name in design.sources[:-1]:
        layer = int(re.search(r"_layer(\d+)_u\d+\.", name).group(1))  # type: ignore[union-attr]
        depth = int(re.search(r"depth (\d+);", (design.directory / name).read_text()).group(1))  # type: ignore[union-attr]
        depths[layer] = max(depths.get(layer, 0), depth)
    return depths


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_pipelined_tables_simulate_equal_to_net_run(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """With a register after every 2 LUT levels (k=3 tables of depth 3-5), the network bench (100 vectors), simulate
    and every table bench agree with net.run, and the latency is the layers' registers plus each layer's inner ones."""
    design = export_mapped(mlp, tmp_path, SIMULATORS[simulator], top="mlp", k=3, pipeline_luts=2, vectors=100)
    inner = {layer: -(-depth // 2) - 1 for layer, depth in layer_depths(design).items()}
    assert design.pipeline_luts == 2 and sum(inner.values()) > 0
    assert design.latency == len(design.layers) + sum(inner.values())
    assert "a register after every 2 LUT level(s) inside" in design.summary()
    result = run_bench(design, simulator)
    assert result.passed and "100/100 vectors match" in result.stdout, result.stdout
    x = torch.randint(0, 4, (40, 10), generator=torch.Generator().manual_seed(3))
    got = simulate(design, x, codes=True, simulator=simulator, tables="sources")
    assert torch.equal(got, design.reference(x, codes=True))
    assert all(line.endswith("vectors match") for line in table_benches_pass(design, simulator))


def test_latency_follows_the_levels_between_registers(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """A register after every LUT level adds depth - 1 registers per layer; levels beyond every table's depth add
    none and leave the table modules combinational (no clock port)."""
    every = export_mapped(mlp, tmp_path / "every", "verilog", top="mlp", k=3, pipeline_luts=1, vectors=100)
    inner = {layer: depth - 1 for layer, depth in layer_depths(every).items()}
    assert every.latency == len(every.layers) + sum(inner.values())
    assert run_bench(every, "iverilog").passed
    shallow = export_mapped(mlp, tmp_path / "shallow", "verilog", top="mlp", k=3, pipeline_luts=99, vectors=8)
    assert shallow.latency == len(shallow.layers)
    assert not any("clk" in (shallow.directory / name).read_text() for name in shallow.sources[:-1])


def test_design_latency_is_the_exported_designs(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """design_latency() gives the latency export writes, the registers inside the tables counted; a table of one
    layer (not a network) is refused by name."""
    from iotable.errors import HDLError
    from iotable.hdl.writer import design_latency

    for every in (0, 1, 2):
        design = export_mapped(mlp, tmp_path / str(every), "verilog", k=3, pipeline_luts=every, table_benches=False)
        got = design_latency(mlp, pipeline=1, pipeline_luts=every, k=3, cache_dir=tmp_path / "abc")
        assert got == design.latency and (every == 0 or got > len(design.layers))
    with pytest.raises(HDLError, match="design_latency: expected a TableNetwork .* received IOTable"):
        design_latency(mlp.tables[0])


def test_ice40_cells_pipelined_pass(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Tables as iCE40 SB_LUT4 cells, pipelined inside, pass the network bench and their table benches."""
    design = export_mapped(mlp, tmp_path, "verilog", top="mlp", k=4, primitives="ice40", pipeline_luts=1, vectors=100)
    assert design.latency > len(design.layers)
    table = (design.directory / design.sources[0]).read_text()
    assert "SB_LUT4" in table and "input  wire clk," in table and "_q1 <=" in table
    result = run_bench(design, "iverilog")
    assert result.passed and "100/100 vectors match" in result.stdout, result.stdout
    for bench in design.table_benches:
        module = bench[: -len("_tb")]
        files = files_of(design, (f"{module}.v", f"{bench}.v", f"{module}_vectors.hex", "mlp_primitives.v"))
        result = simulate_files(files, bench, simulator="iverilog", timeout=60)
        assert result.passed and "vectors match" in result.stdout, result.stdout


def _bypass(text: str, rank: int) -> str:
    """``text`` (a Verilog table module) with its registers of ``rank`` turned into wires: their sources unregistered."""
    loads = dict(re.findall(rf"^\s+(\w+_q{rank}) <= ([^;]+);$", text, flags=re.MULTILINE))
    assert loads
    for register, source in loads.items():
        text = text.replace(f"    reg {register};", f"    wire {register} = {source};")
        text = re.sub(rf"^\s+{register} <= [^;]+;\n", "", text, flags=re.MULTILINE)
    return text


def test_a_bypassed_register_fails_the_network_bench(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Turning one table's first rank of inner registers into wires (a path one cycle short) fails the network
    bench; the untouched files pass."""
    design = export_mapped(mlp, tmp_path, "verilog", top="mlp", k=3, pipeline_luts=1, vectors=100)
    files = files_of(design, design.sources + design.bench)
    assert run_bench(design, "iverilog", dict(files)).passed
    victim = next(name for name in design.sources[:-1] if "_q1 <=" in files[name])
    files[victim] = _bypass(files[victim], 1)
    result = run_bench(design, "iverilog", files)
    assert not result.passed and "vectors match" not in result.stdout


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_check_passes_on_pipelined_tables(mlp: iotable.TableNetwork, tmp_path: Path, language: str) -> None:
    """yosys (check -assert, no latch) and ghdl's synthesis accept a design whose tables are pipelined inside."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    design = export_mapped(mlp, tmp_path, language, top="mlp", k=3, pipeline_luts=2, vectors=4)
    result = check(design, timeout=300)
    assert result.top == "mlp" and (language == "vhdl" or result.cells)


def test_table_bench_of_a_pipelined_module_clocks_it() -> None:
    """table_bench with a latency drives clk and en and holds each address that many edges; a bad latency is refused."""
    from tests.test_hdl_tables import TABLES

    table = TABLES["four2"]
    bench = table_bench(table, "t", language="verilog", latency=2)["t_tb.v"]
    assert ".clk(clk), .en(1'b1)" in bench and "repeat (2)" in bench
    vhdl = table_bench(table, "t", language="vhdl", latency=2)["t_tb.vhd"]
    assert "clk => clk, en => '1'" in vhdl and "for edge in 1 to 2 loop" in vhdl
    with pytest.raises(OptionError, match="latency"):
        table_bench(table, "t", language="verilog", latency=-1)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tables": "mapped", "pipeline_luts": -1}, "number of LUT levels"),
        ({"tables": "mapped", "pipeline_luts": True}, "number of LUT levels"),
        ({"tables": "case", "pipeline_luts": 2}, "tables='mapped'"),
        ({"tables": "mapped", "style": "streaming", "pipeline_luts": 2}, "style 'unrolled' only"),
    ],
)
def test_bad_pipeline_luts_is_refused_before_writing(
    mlp: iotable.TableNetwork, tmp_path: Path, options: dict, words: str
) -> None:
    """A pipeline_luts that is no count, without mapped tables or with the streaming style is refused, nothing written."""
    target = tmp_path / "hw"
    with pytest.raises(OptionError, match=re.escape(words)):
        iotable.hdl.export(mlp, target, **options)
    assert not target.exists()
