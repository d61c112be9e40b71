"""Simulation at speed: Verilator's cached program equal to net.run on many vectors (reused, rebuilt when the
design or the entry changes), and the memory model of the tables under iotable's simulators equal to net.run
and to the ``case`` model, don't-care rows included."""

from __future__ import annotations

import json
import shutil
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, IOTable, OptionError
from iotable.errors import HDLError, HDLToolError
from iotable.hdl import VerilatorModel, export, simulate, verilator_model
from iotable.hdl.verilator import pack_words, unpack_words
from iotable.hdl.verilog_simtables import memory_hex, memory_verilog, rows_file, simulation_sources
from iotable.nn import Quantize
from tests.optional import require_program
from tests.test_hdl_export import D2, small_mlp, sparse, values
from tests.test_hdl_stream import conv2d_net


def needs_verilator() -> None:
    require_program("verilator", package="verilator")
    require_program("g++", package="g++")
    require_program("make", package="make")


def needs_iverilog() -> None:
    require_program("iverilog", package="iverilog")


def wide_mlp(seed: int = 3) -> nn.Sequential:
    """36 inputs of 2 bits (a 72-bit in_data: wider than 64) -> 8 -> 5 signed 3-bit codes; fan-in 3."""
    torch.manual_seed(seed)
    return nn.Sequential(
        OrderedDict(
            fc1=sparse(36, 8, 3, seed), bn1=nn.BatchNorm1d(8), q1=Quantize(2, scale=0.5),
            fc2=sparse(8, 5, 3, seed + 1), q2=Quantize(3, signed=True, scale=0.5),
        )
    ).eval()  # fmt: skip


def tiny(seed: int) -> iotable.TableNetwork:
    """4 inputs of 2 bits -> 3 codes of 2 bits: one table layer (a design Verilator builds in seconds)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 3), Quantize(2)).eval()
    return iotable.precompute(model, input_domain=D2)


@pytest.fixture(scope="module")
def mlp() -> iotable.TableNetwork:
    return iotable.precompute(small_mlp(), input_domain=D2)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Verilator cache for the module's tests: Verilator's runtime library is compiled once."""
    return tmp_path_factory.mktemp("verilator-cache")


@pytest.fixture(scope="module")
def partial(mlp: iotable.TableNetwork) -> tuple[iotable.TableNetwork, torch.Tensor]:
    """The small MLP's tables restricted to the rows 40 vectors reach, and those vectors."""
    seen = values(D2, (40, 12), 7)
    return iotable.restrict(mlp, iotable.observe(mlp, seen)), seen


# -- the memory model's text -------------------------------------------------------------------------------


def test_memory_hex_holds_every_row_at_its_address() -> None:
    """Line a of the hex file is the packed codes of address a (first output most significant); the addresses a
    partial table lacks and the bit patterns that are no code hold the fill."""
    three = Domain([0.0, 1.0, 2.0])  # 2 bits, pattern 3 is no code
    table = IOTable(
        np.array([[0, 1], [2, 3], [1, 0]]),
        np.array([[1, 2], [3, 0], [0, 1]]),
        input_domains=[three, D2],
        output_domain=D2,
    )
    lines = memory_hex(table, fill="x").split()
    assert len(lines) == 16
    assert (lines[0b0001], lines[0b1011], lines[0b0100]) == ("6", "c", "1")
    assert all(line == "x" for a, line in enumerate(lines) if a not in (0b0001, 0b1011, 0b0100))
    assert set(memory_hex(table, fill="0").split()) == {"6", "c", "1", "0"}
    text = memory_verilog(table, "t")
    assert "input  wire [3:0] address" in text and "output reg  [3:0] codes" in text
    assert (
        f'$readmemh("{rows_file("t")}", rows);' in text and "always @(address or loaded) codes = rows[address];" in text
    )
    text = memory_verilog(table, "t", two_state=True)
    assert "output wire [3:0] codes" in text and "assign codes = rows[address];" in text


def test_memory_hex_pads_codes_to_whole_digits() -> None:
    """Codes of 6 bits take two hex digits, zero-padded on the left."""
    table = IOTable.dense([[0, 1], [3, 2], [2, 3], [1, 0]], input_domains=[D2], output_domain=Domain.uniform(3))
    assert memory_hex(table, fill="x").split() == ["01", "1a", "13", "08"]


def test_simulation_sources_replace_only_the_table_modules(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Every case file becomes its memory model and a hex file; the top file stays as written."""
    design = export(mlp, tmp_path / "d", top="mlp", vectors=4, table_benches=False)
    sources = {name: (design.directory / name).read_text() for name in design.sources}
    replaced = simulation_sources(design, sources, two_state=False)
    tables = [n for n in design.sources if n != "mlp.v"]
    assert replaced["mlp.v"] == sources["mlp.v"]
    assert all("$readmemh" in replaced[n] and "case (" not in replaced[n] for n in tables)
    assert sorted(replaced) == sorted([*design.sources, *(rows_file(n[:-2]) for n in tables)])


def test_simulation_sources_refuse_another_network(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """A design whose network does not give the table modules of its files is refused by name."""
    design = export(mlp, tmp_path / "d", top="mlp", vectors=4, table_benches=False)
    sources = {name: (design.directory / name).read_text() for name in design.sources}
    with pytest.raises(HDLError, match="gives the table modules"):
        simulation_sources(replace(design, network=tiny(0)), sources, two_state=False)


# -- iverilog: the memory model against net.run and the case model ------------------------------------------


@pytest.mark.parametrize("pipeline", [1, 0])
def test_iverilog_memory_model_equals_net_run_and_case(
    mlp: iotable.TableNetwork, tmp_path: Path, pipeline: int
) -> None:
    """The memory model (the default) and the case files as written give net.run's codes on 300 vectors, the
    first of them all code 0 (the bench's in_data before the first vector: no address change to look up on)."""
    needs_iverilog()
    design = export(mlp, tmp_path / "d", top="mlp", vectors=4, pipeline=pipeline, table_benches=False)
    x = values(D2, (300, 12), 1)
    x[0] = float(D2.values[0])
    memory = simulate(design, x)
    assert torch.equal(memory, design.reference(x))
    assert torch.equal(simulate(design, x, tables="sources"), memory)


@pytest.mark.parametrize("dont_cares", ["x", "zero"])
def test_iverilog_memory_model_keeps_dont_cares(
    partial: tuple[iotable.TableNetwork, torch.Tensor], tmp_path: Path, dont_cares: str
) -> None:
    """Partial tables: on the vectors they hold both models equal net.run; on other vectors the memory model
    gives the case model's codes, its unknown (-1) elements in the same places with dont_cares='x'."""
    needs_iverilog()
    net, seen = partial
    design = export(net, tmp_path / "d", top="p", inputs=seen, dont_cares=dont_cares, table_benches=False)
    assert torch.equal(simulate(design, seen), design.reference(seen))
    other = values(D2, (200, 12), 11)
    memory, case = simulate(design, other), simulate(design, other, tables="sources")
    assert torch.equal(memory, case)
    assert bool((memory == -1).any()) is (dont_cares == "x")


def test_iverilog_memory_model_streams(tmp_path: Path) -> None:
    """A streaming design (pad, line buffers, pools) under the memory model equals net.run."""
    needs_iverilog()
    net = conv2d_net()
    design = export(net, tmp_path / "d", style="streaming", top="s", vectors=4, table_benches=False)
    x = values(Domain.uniform(2, signed=True, scale=0.5), (12, 1, 9, 9), 4)
    assert torch.equal(simulate(design, x), design.reference(x))


def test_ghdl_runs_the_sources(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """ghdl has no memory model: tables='memory' runs the VHDL sources as written, equal to net.run."""
    require_program("ghdl", package="ghdl")
    design = export(mlp, tmp_path / "d", language="vhdl", top="mlp", vectors=4, table_benches=False)
    x = values(D2, (20, 12), 2)
    assert torch.equal(simulate(design, x, simulator="ghdl"), design.reference(x))


# -- Verilator: the cached program ---------------------------------------------------------------------------


def test_words_pack_and_unpack() -> None:
    """Words wider than 64 bits as 32-bit integers, element 0 lowest, and back."""
    widths = (3, 30, 5, 40)
    codes = np.array([[5, 2**30 - 1, 17, 2**40 - 3], [0, 1, 0, 2**39]], dtype=np.int64)
    packed = pack_words(codes, widths)
    assert packed.shape == (2, 3) and packed.dtype == np.dtype("<u4")
    assert int(packed[0, 0]) & 7 == 5 and (int(packed[1, 0]) >> 3) & 1 == 1
    assert np.array_equal(unpack_words(packed, widths), codes)


def test_verilator_equals_net_run_on_many_vectors(tmp_path: Path, cache: Path) -> None:
    """A 72-bit in_data design: 20,000 random vectors through Verilator's program equal net.run, and the
    program is reused by the next call."""
    needs_verilator()
    net = iotable.precompute(wide_mlp(), input_domain=D2)
    design = export(net, tmp_path / "d", top="wide", vectors=4, table_benches=False)
    model = verilator_model(design, cache_dir=cache)
    assert isinstance(model, VerilatorModel) and model.built and model.folder.parent == cache
    x = values(D2, (20_000, 36), 5)
    assert torch.equal(model(x), design.reference(x))
    again = verilator_model(design, cache_dir=cache)
    assert not again.built and again.folder == model.folder and again.key == model.key
    assert torch.equal(simulate(design, x[:500], simulator="verilator", cache_dir=cache), design.reference(x[:500]))
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".")]  # no build folder left behind


def test_verilator_cache_rebuilds_a_changed_design_and_a_damaged_entry(tmp_path: Path, cache: Path) -> None:
    """Another design in the same directory (same top) gets its own program; an entry whose program or rows
    differ from its record is built again; both stay equal to net.run."""
    needs_verilator()
    target = tmp_path / "d"
    first = export(tiny(0), target, top="t", vectors=4, table_benches=False)
    model = verilator_model(first, cache_dir=cache)
    second = export(tiny(1), target, top="t", vectors=4, table_benches=False, overwrite=True)
    other = verilator_model(second, cache_dir=cache)
    assert other.built and other.key != model.key
    x = values(D2, (300, 4), 3)
    assert torch.equal(other(x), second.reference(x))
    assert not torch.equal(second.reference(x), first.reference(x))  # the two designs differ on these vectors
    record = json.loads((other.folder / "entry.json").read_text())
    hexes = [name for name in record["files"] if name.endswith(".hex")]
    assert hexes
    (other.folder / hexes[0]).write_text("0\n" * 256)  # a damaged row file
    rebuilt = verilator_model(second, cache_dir=cache)
    assert rebuilt.built and rebuilt.folder == other.folder
    assert torch.equal(rebuilt(x), second.reference(x))
    (other.folder / "iotable_sim").write_bytes(b"not a program")
    assert verilator_model(second, cache_dir=cache).built
    shutil.rmtree(other.folder)  # a model whose entry is gone says how to get it back
    with pytest.raises(HDLToolError, match="call verilator_model"):
        other(x)


def test_verilator_dont_cares_are_code_zero(
    partial: tuple[iotable.TableNetwork, torch.Tensor], tmp_path: Path, cache: Path
) -> None:
    """Verilator is 2-state: a don't-care row comes out as code 0, the codes iverilog gives for the same design
    exported with dont_cares='zero', on every vector; on the vectors the tables hold, net.run's codes."""
    needs_verilator()
    needs_iverilog()
    net, seen = partial
    design = export(net, tmp_path / "x", top="p", inputs=seen, table_benches=False)
    zero = export(net, tmp_path / "zero", top="p", inputs=seen, dont_cares="zero", table_benches=False)
    model = verilator_model(design, cache_dir=cache)
    assert torch.equal(model(seen), design.reference(seen))
    other = values(D2, (200, 12), 11)
    got = model(other)
    assert torch.equal(got, simulate(zero, other))
    assert bool((simulate(design, other) == -1).any()) and bool((got >= 0).all())


def test_verilator_streams(tmp_path: Path, cache: Path) -> None:
    """A streaming design takes its vectors as beats; Verilator's program equals net.run."""
    needs_verilator()
    net = conv2d_net()
    design = export(net, tmp_path / "d", style="streaming", top="s", vectors=4, table_benches=False)
    x = values(Domain.uniform(2, signed=True, scale=0.5), (300, 1, 9, 9), 4)
    got = simulate(design, x, simulator="verilator", cache_dir=cache)
    assert torch.equal(got, design.reference(x))


def test_verilator_model_refusals(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """A VHDL design, an unknown table model, a cache_dir that is a file and a non-design are refused by name."""
    vhdl = export(mlp, tmp_path / "v", language="vhdl", top="mlp", vectors=4, table_benches=False)
    with pytest.raises(HDLError, match="Verilator reads Verilog"):
        verilator_model(vhdl)
    design = export(mlp, tmp_path / "d", top="mlp", vectors=4, table_benches=False)
    with pytest.raises(OptionError, match="unknown tables 'rom'; expected one of 'memory', 'sources'"):
        verilator_model(design, tables="rom")
    with pytest.raises(OptionError, match="unknown tables 'rom'"):
        simulate(design, values(D2, (2, 12), 0), tables="rom")
    (tmp_path / "file").write_text("")
    with pytest.raises(OptionError, match="is not a folder"):
        verilator_model(design, cache_dir=tmp_path / "file")
    with pytest.raises(HDLError, match="expected a Design"):
        verilator_model("design")  # type: ignore[arg-type]


def test_verilator_refuses_a_changed_directory(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """An edited source in the design's directory is refused before any build, as under the other simulators."""
    design = export(mlp, tmp_path / "d", top="mlp", vectors=4, table_benches=False)
    (design.directory / "mlp.v").write_text("module mlp; endmodule\n")
    with pytest.raises(HDLError, match="is not the file the design wrote"):
        verilator_model(design, cache_dir=tmp_path / "cache")


# -- jsc-m: the acceptance (slow) --------------------------------------------------------------------------


@pytest.mark.slow
def test_jsc_m_at_speed(tmp_path: Path) -> None:
    """jsc-m (unrolled): 200,000 random vectors through Verilator equal net.run; iverilog's memory model equals
    net.run and the case model."""
    needs_verilator()
    needs_iverilog()
    from benchmarks import workloads

    net = workloads.build("jsc-m").precompute()
    design = export(net, tmp_path / "d", top="net", vectors=8, table_benches=False)
    domain = net.input_node.domain
    x = values(domain, (200_000, 16), 0)
    model = verilator_model(design, cache_dir=tmp_path / "cache")
    assert torch.equal(model(x), design.reference(x))
    few = x[:2000]
    memory = simulate(design, few)
    assert torch.equal(memory, design.reference(few))
    assert torch.equal(simulate(design, few[:20], tables="sources"), memory[:20])
