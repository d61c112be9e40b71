"""Mapped tables as HDL: each table written as its ABC LUT netlist with the case module's ports, proved by the
unchanged benches under iverilog, ghdl and verilator, equal to net.run and to the case design, a tampered INIT
bit that the bench catches, yosys and ghdl synthesis, don't-cares of restricted tables, and bad options."""

from __future__ import annotations

import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, IOTable, OptionError
from iotable.cli import main
from iotable.errors import HDLError
from iotable.hdl import Design, check, export, mapped_verilog, mapped_vhdl, simulate, simulate_files, table_bench
from iotable.hdl.mapped import lut_init, map_modules
from iotable.hdl.netlist import TableModule
from iotable.hdl.table import layout_of
from iotable.lutnet import Lut
from iotable.nn import Quantize
from iotable.synth import map_table
from tests.optional import require_program
from tests.test_hdl_export import conv1d_net, conv2d_net, files_of, run_bench, sparse, values
from tests.test_hdl_tables import TABLES

D2 = Domain.uniform(2)
SIMULATORS = {"iverilog": "verilog", "ghdl": "vhdl"}
SUFFIX = {"verilog": ".v", "vhdl": ".vhd"}


def _abc() -> None:
    require_program("berkeley-abc", package="berkeley-abc")


def wide_mlp(seed: int = 0) -> nn.Sequential:
    """10 inputs of 2 bits -> 6 -> 4 -> 3 codes; fan-in 4 (tables of 8 address bits: ABC maps them)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        OrderedDict(
            fc1=sparse(10, 6, 4, seed), bn1=nn.BatchNorm1d(6), q1=Quantize(2, scale=0.5),
            fc2=sparse(6, 4, 4, seed + 1), q2=Quantize(2, scale=0.5),
            fc3=sparse(4, 3, 3, seed + 2), q3=Quantize(3, signed=True, scale=0.5),
        )
    ).eval()  # fmt: skip


@pytest.fixture(scope="module")
def mlp() -> iotable.TableNetwork:
    return iotable.precompute(wide_mlp(), input_domain=D2)


def export_mapped(net: iotable.TableNetwork, directory: Path, language: str, **options) -> Design:
    """``net`` exported with mapped tables, ABC run in this process (no pool to start)."""
    _abc()
    with ThreadPoolExecutor(max_workers=1) as pool:
        options = {"table_benches": True, **options}
        return export(net, directory, language=language, tables="mapped", executor=pool, **options)


def table_benches_pass(design: Design, simulator: str) -> list[str]:
    """Run every exhaustive table bench of ``design`` (each asserted to pass); return the first line each printed."""
    require_program(simulator, package=simulator)
    suffix = SUFFIX[design.language]
    lines = []
    for bench in design.table_benches:
        module = bench[: -len("_tb")]
        names = (f"{module}{suffix}", f"{bench}{suffix}", f"{module}_vectors.hex")
        result = simulate_files(files_of(design, names), bench, simulator=simulator, timeout=60)
        assert result.passed, result.stdout + result.stderr
        lines.append(result.stdout.strip().splitlines()[0])
    return lines


# -- one table: the emitter --------------------------------------------------------------------------------------


def test_lut_init_reads_the_cover_with_the_first_input_least_significant():
    """A cover's INIT mask has bit i set exactly where the inputs (first input least significant) read i."""
    node = Lut("y", ("a", "b", "c"), ("1-0", "011"))  # a & ~c, or ~a & b & c
    expected = sum(1 << i for i in range(8) if (i & 1 and not i & 4) or (not i & 1 and i & 2 and i & 4))
    assert lut_init(node) == expected
    assert lut_init(Lut("y", ("a", "b", "c"), ("1-0", "011"), onset=False)) == 0xFF ^ expected
    assert lut_init(Lut("y", (), ())) == 0 and lut_init(Lut("y", (), ("",))) == 1


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("key", sorted(TABLES))
def test_mapped_table_passes_the_case_tables_bench(key: str, simulator: str) -> None:
    """Each table of the case emitter's tests (non-power-of-two domains, several outputs, a partial one) mapped
    by ABC and written as LUTs passes the unchanged exhaustive bench."""
    _abc()
    table = TABLES[key]
    mapped = map_table(table)
    language = SIMULATORS[simulator]
    emit = mapped_verilog if language == "verilog" else mapped_vhdl
    files = {f"{key}{SUFFIX[language]}": emit(table, mapped, key), **table_bench(table, key, language=language)}
    require_program(simulator, package=simulator)
    result = simulate_files(files, f"{key}_tb", simulator=simulator, timeout=60)
    assert result.passed and f"{len(table)}/{len(table)} vectors match" in result.stdout, result.stdout


def test_ports_and_header_match_the_case_module() -> None:
    """The mapped module declares the case module's port widths, and its header gives shape, LUTs, depth and ABC."""
    _abc()
    table = TABLES["four2"]
    mapped = map_table(table)
    text = mapped_verilog(table, mapped, "four2")
    for port in ("input  wire [7:0] address", "output wire [2:0] codes"):
        assert port in text
    vhdl = mapped_vhdl(table, mapped, "four2")
    assert "address : in  std_logic_vector(7 downto 0)" in vhdl and "codes   : out std_logic_vector(2 downto 0)" in vhdl
    assert f"{mapped.luts} LUT(s) of at most 6 inputs, depth {mapped.depth}" in text
    assert mapped.abc_version in text and mapped.script in text and "256 of 256 rows" in text
    assert len(re.findall(r"localparam \[\d+:0\] INIT\d+ = ", text)) == mapped.luts
    assert text == mapped_verilog(table, mapped, "four2")  # deterministic


def test_a_netlist_of_another_table_or_a_bad_name_is_refused() -> None:
    """A netlist whose signals are not the table's bits, and a module name the body uses, raise HDLError."""
    _abc()
    mapped = map_table(TABLES["four2"])
    with pytest.raises(HDLError, match=r"the netlist has inputs .* map this table"):
        mapped_verilog(TABLES["tri2"], mapped, "t")
    with pytest.raises(HDLError, match="is one the mapped netlist uses inside.*choose another"):
        mapped_vhdl(TABLES["four2"], mapped, "lut")
    with pytest.raises(HDLError, match="expected a MappedTable"):
        mapped_verilog(TABLES["four2"], "netlist", "t")


# -- whole networks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_mlp_network_and_table_benches_pass(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """The mapped MLP's network bench (120 vectors through the handshake) and every table bench pass."""
    design = export_mapped(mlp, tmp_path, SIMULATORS[simulator], top="mlp", vectors=120)
    assert design.tables == "mapped" and all(r.luts for r in design.layers)
    assert "tables as LUT netlists" in design.summary() and "LUTs" in design.summary()
    result = run_bench(design, simulator)
    assert result.passed and "120/120 vectors match" in result.stdout, result.stdout
    rows = [64 if bench.startswith("mlp_layer2_") else 256 for bench in design.table_benches]  # fc3: 6 bits
    assert table_benches_pass(design, simulator) == [f"{n}/{n} vectors match" for n in rows]


@pytest.mark.slow  # a Verilator build of the whole mapped MLP
def test_mlp_bench_passes_under_verilator(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Verilator runs the mapped Verilog and the unchanged network bench."""
    design = export_mapped(mlp, tmp_path, "verilog", top="mlp", vectors=40)
    result = run_bench(design, "verilator")
    assert result.passed and "40/40 vectors match" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_simulate_equals_the_case_design_and_net_run(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """simulate on the mapped design returns the case design's codes, which are net.run's."""
    language = SIMULATORS[simulator]
    mapped = export_mapped(mlp, tmp_path / "mapped", language, top="mlp", vectors=4)
    case = export(mlp, tmp_path / "case", language=language, top="mlp", vectors=4)
    assert case.tables == "case" and all(r.luts is None for r in case.layers)
    x = values(D2, (60, 10), 7)
    hardware = simulate(mapped, x, simulator=simulator)
    assert torch.equal(hardware, simulate(case, x, simulator=simulator))
    assert torch.equal(hardware, mlp.run(x, return_codes=True))


@pytest.mark.parametrize(("simulator", "key"), [("iverilog", "conv2d"), ("ghdl", "conv1d"), ("iverilog", "conv1d")])
def test_convolutions_pass_their_benches(tmp_path: Path, simulator: str, key: str) -> None:
    """Unrolled convolutions (pads, windows, pools) with mapped tables (the 1D net's first tables have 12 address
    bits) pass the network bench and every table bench, and simulate equals net.run."""
    net = {"conv2d": conv2d_net, "conv1d": conv1d_net}[key]()
    design = export_mapped(net, tmp_path, SIMULATORS[simulator], top=key, vectors=60)
    result = run_bench(design, simulator)
    assert result.passed and "60/60 vectors match" in result.stdout, result.stdout
    table_benches_pass(design, simulator)
    x = values(net.input_node.domain, (20, *net.input_node.shape), 2)
    assert torch.equal(simulate(design, x, simulator=simulator), net.run(x, return_codes=True))


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_restricted_network_spends_its_dont_cares(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """A network restricted to the rows 40 inputs reach, mapped with its don't-cares, costs fewer LUTs than the
    dense one and passes its table benches (care rows) and its network bench on those inputs."""
    x = values(D2, (40, 10), 11)
    small = mlp.restrict(iotable.observe(mlp, x), min_count=1)
    assert not all(t.is_dense for t in small.tables)
    language = SIMULATORS[simulator]
    design = export_mapped(small, tmp_path / "small", language, top="restricted", inputs=x)
    dense = export_mapped(mlp, tmp_path / "dense", language, top="dense", vectors=4)
    assert sum(r.luts for r in design.layers) < sum(r.luts for r in dense.layers)
    result = run_bench(design, simulator)
    assert result.passed and "40/40 vectors match" in result.stdout, result.stdout
    lines = table_benches_pass(design, simulator)
    rows = {f"{len(t)}/{len(t)} vectors match" for t in small.tables}
    assert lines and set(lines) <= rows


# -- tampering ---------------------------------------------------------------------------------------------------


_VERILOG_LUT = re.compile(
    r"localparam \[(\d+):0\] (INIT\d+) = \d+'([hb])([0-9a-f]+);\n    wire (n\d+) = INIT\d+\[\{([^}]*)\}\];"
)
_VHDL_INIT = re.compile(r"constant (INIT\d+) : std_logic_vector\((\d+) downto 0\) := ([xb])\"([0-9a-f]+)\";")
_VHDL_CALL = re.compile(r"(n\d+) <= lut\((INIT\d+), ([^;]*)\);")


def flip_init_bit(text: str, language: str) -> tuple[str, int, list[int]]:
    """Flip the highest INIT bit of the first LUT that reads address bits only and drives ``codes``; return the
    text, the flipped index and the address bits of the LUT's select (most significant first)."""
    if language == "verilog":
        luts = [
            (init, high, base, digits, net, select)
            for high, init, base, digits, net, select in _VERILOG_LUT.findall(text)
        ]
        drives = re.search(r"assign codes = \{([^}]*)\};", text).group(1)
    else:
        calls = {init: (net, select) for net, init, select in _VHDL_CALL.findall(text)}
        luts = [(init, high, base, digits, *calls[init]) for init, high, base, digits in _VHDL_INIT.findall(text)]
        drives = re.search(r"codes <= ([^;]*);", text).group(1)

    def reads_address_only(lut: tuple[str, ...]) -> bool:
        net, select = lut[4], lut[5]
        return bool(re.search(rf"\b{net}\b", drives)) and all("address" in s for s in re.split(r"[,&]", select))

    init, high, base, digits, _, select = next(lut for lut in luts if reads_address_only(lut))
    bits = [int(b) for b in re.findall(r"address[\[(](\d+)[\])]", select)]
    index, radix = int(high), 16 if base in "hx" else 2
    flipped = format(int(digits, radix) ^ (1 << index), f"0{len(digits)}{'x' if radix == 16 else 'b'}")
    start = text.index(digits, text.index(f"{init} "))
    return text[:start] + flipped + text[start + len(digits) :], index, bits


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_a_flipped_init_bit_fails_the_table_bench_naming_the_vector(
    mlp: iotable.TableNetwork, tmp_path: Path, simulator: str
) -> None:
    """One flipped INIT bit of an output LUT of a last-layer table (6 address bits: one LUT per code bit) makes the
    table's bench fail at the first row whose address selects that bit, naming the vector."""
    language = SIMULATORS[simulator]
    design = export_mapped(mlp, tmp_path, language, top="mlp", vectors=4)
    bench = next(b for b in design.table_benches if b.startswith("mlp_layer2_"))
    module = bench[: -len("_tb")]
    names = (f"{module}{SUFFIX[language]}", f"{bench}{SUFFIX[language]}", f"{module}_vectors.hex")
    files = files_of(design, names)
    files[names[0]], index, bits = flip_init_bit(files[names[0]], language)
    address = np.arange(64)  # a dense table of three 2-bit codes: vector i is address i
    selected = sum(((address >> b) & 1) << (len(bits) - 1 - m) for m, b in enumerate(bits))
    vector = int(np.flatnonzero(selected == index)[0])
    assert vector > 0  # the highest index: every selected bit is 1
    require_program(simulator, package=simulator)
    result = simulate_files(files, bench, simulator=simulator, timeout=60)
    assert not result.passed and "vectors match" not in result.stdout
    assert f"mismatch at vector {vector}: address " in result.stdout, result.stdout


# -- synthesis, the command line, bad options ----------------------------------------------------------------------


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_check_passes_on_a_mapped_design(mlp: iotable.TableNetwork, tmp_path: Path, language: str) -> None:
    """yosys (synth, check -assert, no latch) and ghdl's synthesis accept the mapped MLP."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    design = export_mapped(mlp, tmp_path, language, top="mlp", vectors=4)
    result = check(design, timeout=300)
    assert result.top == "mlp" and (language == "vhdl" or result.cells)


def test_cli_export_tables_mapped(
    mlp: iotable.TableNetwork, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """iotable export --tables mapped writes LUT-netlist tables and prints their LUTs; a bad value exits 2."""
    _abc()
    bundle = iotable.save(mlp, tmp_path / "bundle")
    assert main(["export", "verilog", str(bundle), str(tmp_path / "hw"), "--top", "mlp", "--tables", "mapped"]) == 0
    assert "tables as LUT netlists" in capsys.readouterr().out
    assert "localparam" in (tmp_path / "hw" / "mlp_layer0_u0.v").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "verilog", str(bundle), str(tmp_path / "hw2"), "--tables", "rom"])
    assert exit_info.value.code == 2 and "invalid choice: 'rom'" in capsys.readouterr().err


def test_bad_tables_options_are_refused_before_writing(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """An unknown tables value, a bad k and dont_cares='zero' with mapped tables raise OptionError, writing nothing."""
    target = tmp_path / "out"
    with pytest.raises(OptionError, match="unknown tables 'rom'; expected one of 'case', 'mapped'"):
        export(mlp, target, tables="rom")
    with pytest.raises(OptionError, match="unknown tables 3"):
        export(mlp, target, tables=3)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"k \(inputs per LUT\) must be an integer from 3 to 12, received 2"):
        export(mlp, target, tables="mapped", k=2)
    with pytest.raises(OptionError, match="use dont_cares='x' with mapped tables, or tables='case'"):
        export(mlp, target, tables="mapped", dont_cares="zero")
    assert not target.exists()


def test_tables_too_wide_to_map_are_refused_by_name() -> None:
    """A table of more address bits than iotable.synth maps is refused before any mapping, naming layer and unit."""
    wide = IOTable([[0] * 13, [1] * 13], [[0], [1]], input_domains=[D2] * 13, output_domain=D2)  # 26 address bits
    module = TableModule("net_layer3_u5", wide, layout_of(wide, what="test"), (("fc9", 5),))
    with pytest.raises(HDLError, match=r"cannot map the table of layer 'fc9' unit 5 .* 26 address bits.*tables='case'"):
        map_modules({module.name: module}, k=6, executor=None, cache_dir=None, what="export")
