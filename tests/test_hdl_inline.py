"""Tiny tables written inline in their layer modules (``export``'s ``inline_bits``): the same function as their
``case`` modules on every address, don't-cares included, a DiffLogic design equal to ``net.run`` under every
simulator, a flipped leaf caught by the bench, and a design of a few files."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import iotable
from iotable import Domain, IOTable, OptionError
from iotable.cli import main
from iotable.hdl import check, export, simulate, simulate_files, table_verilog, table_vhdl, verilog, vhdl
from iotable.hdl.inline import leaves, tree
from iotable.hdl.netlist import Layer, Netlist, TableModule
from iotable.hdl.table import DontCares, layout_of
from iotable.hdl.verilog_simtables import memory_hex
from tests import upstreamzoo as uz
from tests.optional import require_program

BITS = Domain([0.0, 1.0])
D2 = Domain.uniform(2)
THREE = Domain([0.0, 1.0, 2.0])  # 2 bits, pattern 3 is no code
SIMULATORS = {"iverilog": "verilog", "ghdl": "vhdl", "verilator": "verilog"}


def _partial() -> IOTable:
    """A partial table of a 3-valued and a 4-valued input, two outputs: 3 of the 16 addresses hold a row."""
    return IOTable(
        np.array([[0, 1], [2, 3], [1, 0]]),
        np.array([[1, 2], [3, 0], [0, 1]]),
        input_domains=[THREE, D2],
        output_domain=D2,
    )


@pytest.fixture(scope="module")
def difflogic() -> iotable.TableNetwork:
    """difflogic's gate network as its examples build it (24 bits -> 48 -> 40 gates -> GroupSum)."""
    model = uz.difflogic_model().eval()
    return iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 24))


@pytest.fixture(scope="module")
def dwn() -> iotable.TableNetwork:
    """torch-dwn's network as its examples build it: two layers of LUT-6 nodes (60 tables), then GroupSum."""
    model = uz.dwn_model().eval()
    return iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 24))


def _bits(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2, (n, 24), generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("fill", ["x", "zero"])
def test_leaves_are_the_case_modules_function_on_every_address(fill: str) -> None:
    """The codes an inline table drives at each address are those of its memory model (the case module's function):
    the rows where the table has them, the fill where it lacks a row or the address is no input code."""
    table = _partial()
    mode = DontCares(fill)
    rows = ["".join(r) for r in leaves(table, layout_of(table, what="test"), mode)]
    hex_lines = memory_hex(table, fill="x" if fill == "x" else "0").split()
    assert rows == ["xxxx" if h == "x" else format(int(h, 16), "04b") for h in hex_lines]
    assert rows[0b0001] == "0110" and rows[0b1111] == ("xxxx" if fill == "x" else "0000")


def test_tree_merges_equal_branches_and_names_selects_from_the_first_address_bit() -> None:
    """A tree selects on the most significant address bit first, and a subtree whose leaves agree is one leaf."""
    assert tree("0110").format("a", "b") == "(a ? (b ? 1'b0 : 1'b1) : (b ? 1'b1 : 1'b0))"
    assert tree("0011").format("a", "b") == "(a ? 1'b1 : 1'b0)"
    assert tree("xx1x").format("a", "b") == "(a ? (b ? 1'bx : 1'b1) : 1'bx)"


def _layer(table: IOTable, mode: DontCares) -> tuple[Netlist, Layer]:
    """A one-instance layer ``t_layer`` of the table module ``t_u``, inline, whose address is ``x`` as it is (its
    first input, most significant, is element 1 of ``x``)."""
    layout = layout_of(table, what="test")
    netlist = Netlist(top="t", modules={"t_u": TableModule("t_u", table, layout, ())}, inline={"t_u": mode})
    block = Layer(
        name="t_layer", node="n", layer="l", x_ids=np.arange(2), x_widths=np.array([2, 2]),
        instances=[("u0_p0", "t_u", [1, 0])], instance_units=[(0, 0)], y_lsb=np.array([0]), y_width=4, output=0,
    )  # fmt: skip
    return netlist, block


_VERILOG_BENCH = """module cmp_tb;
    reg [3:0] x; wire [3:0] a, b; integer i, bad = 0;
    t_u case_module (.address(x), .codes(a));
    t_layer inline_layer (.x(x), .y(b));
    initial begin
        for (i = 0; i < 16; i = i + 1) begin x = i; #1; if (a !== b) begin bad = bad + 1; $display("differ %0d %b %b", i, a, b); end end
        if (bad == 0) $display("all 16 addresses agree");
        $finish;
    end
endmodule
"""

_VHDL_BENCH = """library ieee;
use ieee.std_logic_1164.all;
use ieee.numeric_std.all;
entity cmp_tb is end entity;
architecture sim of cmp_tb is
    signal x, a, b : std_logic_vector(3 downto 0);
begin
    case_module : entity work.t_u port map (address => x, codes => a);
    inline_layer : entity work.t_layer port map (x => x, y => b);
    process
        variable bad : integer := 0;
    begin
        for i in 0 to 15 loop
            x <= std_logic_vector(to_unsigned(i, 4)); wait for 1 ns;
            if a /= b then bad := bad + 1; report "differ " & integer'image(i); end if;
        end loop;
        if bad = 0 then report "all 16 addresses agree"; end if;
        wait;
    end process;
end architecture;
"""


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("fill", ["x", "zero"])
def test_an_inline_table_drives_what_its_case_module_drives(simulator: str, fill: str) -> None:
    """Simulated side by side on all 16 addresses, a partial table's inline form and its ``case`` module drive the
    same bits, the don't-cares (``x`` / ``'-'``, or 0) of the missing rows and of the patterns that are no code
    included."""
    require_program(simulator, package=simulator)
    table, mode = _partial(), DontCares(fill)
    netlist, block = _layer(table, mode)
    if simulator == "iverilog":
        files = {"t_u.v": table_verilog(table, "t_u", dont_cares=fill), "t_layer.v": verilog.layer(netlist, block)}
        files["cmp_tb.v"] = _VERILOG_BENCH
    else:
        files = {"t_u.vhd": table_vhdl(table, "t_u", dont_cares=fill), "t_layer.vhd": vhdl.layer(netlist, block)}
        files["cmp_tb.vhd"] = _VHDL_BENCH
    result = simulate_files(files, "cmp_tb", simulator=simulator, timeout=120)
    output = result.stdout + result.stderr
    assert "all 16 addresses agree" in output and "differ" not in output, output


@pytest.mark.parametrize(
    ("family", "simulator"),
    [
        ("difflogic", "iverilog"), ("difflogic", "ghdl"), pytest.param("difflogic", "verilator", marks=pytest.mark.slow),
        ("dwn", "iverilog"), ("dwn", "ghdl"), pytest.param("dwn", "verilator", marks=pytest.mark.slow),
    ],
)  # fmt: skip
def test_a_design_of_inline_tables_simulates_equal_to_net_run(
    request: pytest.FixtureRequest, tmp_path: Path, family: str, simulator: str
) -> None:
    """Every table of a DiffLogic network (2-input gates: trees) or a DWN (LUT-6 nodes: constants) written inline
    (no table module), the design equals ``net.run`` under the simulator, and its network bench passes."""
    net = request.getfixturevalue(family)
    require_program(simulator, package=simulator)
    design = export(net, tmp_path / "hw", language=SIMULATORS[simulator], top="gates", vectors=64)
    assert design.sources == (f"gates{'.v' if design.language == 'verilog' else '.vhd'}",)
    assert design.inline_bits == 6 and not design.table_benches
    x = _bits(100, 1)
    kwargs = {"cache_dir": tmp_path / "cache"} if simulator == "verilator" else {}
    assert torch.equal(simulate(design, x, simulator=simulator, **kwargs), design.reference(x))
    if simulator != "verilator":
        files = {name: (tmp_path / "hw" / name).read_text() for name in design.sources + design.bench}
        result = simulate_files(files, "gates_tb", simulator=simulator, timeout=120)
        assert result.passed and "64/64 vectors match" in result.stdout, result.stdout + result.stderr


def _flip_verilog(text: str) -> str:
    """The first ``1'b1`` leaf of the first tree of layer module ``gates_layer1`` turned to ``1'b0``."""
    start = text.index("module gates_layer1 ")
    found = re.compile(r"assign y\[\d+\] = .*1'b1.*;").search(text, start)
    assert found is not None
    line = found.group(0)
    return text[: found.start()] + line.replace("1'b1", "1'b0", 1) + text[found.end() :]


def _flip_constant(text: str) -> str:
    """Every bit of the first constant of layer module ``gates_layer1`` flipped: its output bit inverted at every
    address, whichever the vectors read."""
    start = text.index("module gates_layer1 ")
    found = re.compile(r"localparam \[\d+:0\] \w+ = \d+'b([01x]+);").search(text, start)
    assert found is not None
    flipped = found.group(1).translate(str.maketrans("01", "10"))
    return text[: found.start(1)] + flipped + text[found.end(1) :]


def _flip_vhdl(text: str) -> str:
    """The first constant of entity ``gates_layer1`` with its row 0 flipped."""
    start = text.index("entity gates_layer1 ")
    found = re.compile(r'(constant t_\w+ : rows_\w+ := \(0 => ")([01])').search(text, start)
    assert found is not None
    flipped = "1" if found.group(2) == "0" else "0"
    return text[: found.start(2)] + flipped + text[found.end(2) :]


@pytest.mark.parametrize(
    ("family", "simulator"), [("difflogic", "iverilog"), ("dwn", "iverilog"), ("difflogic", "ghdl")]
)
def test_a_flipped_bit_of_an_inline_table_fails_the_network_bench(
    request: pytest.FixtureRequest, tmp_path: Path, family: str, simulator: str
) -> None:
    """One leaf of a last-layer gate's tree (Verilog, DiffLogic's 2-input gates), the bits of a last-layer LUT-6's
    constant (Verilog, DWN) or one row of a gate's constant array (VHDL) flipped, the network bench fails and
    names a mismatch; the file as written passes."""
    require_program(simulator, package=simulator)
    net, language = request.getfixturevalue(family), SIMULATORS[simulator]
    design = export(net, tmp_path, language=language, top="gates", inputs=_bits(128, 2))
    files = {name: (tmp_path / name).read_text() for name in design.sources + design.bench}
    assert simulate_files(files, "gates_tb", simulator=simulator, timeout=120).passed
    source = design.sources[0]
    flip = _flip_vhdl if language == "vhdl" else _flip_constant if family == "dwn" else _flip_verilog
    files[source] = flip(files[source])
    result = simulate_files(files, "gates_tb", simulator=simulator, timeout=120)
    assert not result.passed and "mismatch at vector" in result.stdout + result.stderr


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_design_of_inline_tables_passes_check(difflogic: iotable.TableNetwork, tmp_path: Path, language: str) -> None:
    """yosys (Verilog) and ghdl's synthesis (VHDL) read a design whose every table is inline clean."""
    require_program("yosys" if language == "verilog" else "ghdl", package="yosys" if language == "verilog" else "ghdl")
    design = export(difflogic, tmp_path, language=language, top="gates", vectors=8)
    assert len(design.sources) == 1 and check(design).top == "gates"


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_dwn_exports_in_a_few_files(dwn: iotable.TableNetwork, tmp_path: Path, language: str) -> None:
    """A DWN of 60 LUT-6 tables exports as one source file, its bench, its vectors and the manifest: a handful of
    files, every one in the manifest; with ``inline_bits=0`` and ``table_benches=True`` each distinct table is a
    module, a bench and its vectors again."""
    design = export(dwn, tmp_path / "inline", language=language, top="dwn", vectors=16)
    assert sum(layer.tables for layer in design.layers) >= 50
    written = sorted(p.name for p in (tmp_path / "inline").iterdir())
    assert written == sorted(design.files) and len(written) <= 6
    assert {name for name, _ in design.checksums} == set(design.files)
    modules = export(
        dwn, tmp_path / "modules", language=language, top="dwn", vectors=16, inline_bits=0, table_benches=True
    )
    # a file, a bench and vectors per distinct table; the top, the network bench, its two vector files, the manifest
    assert len(modules.files) == 3 * sum(layer.distinct for layer in modules.layers) + 5


@pytest.mark.parametrize("value", [-1, 9, True, "6", 2.0])
def test_inline_bits_out_of_range_is_refused_before_writing(
    difflogic: iotable.TableNetwork, tmp_path: Path, value: object
) -> None:
    """An ``inline_bits`` that is not a count of 0 to 8 address bits is refused by name, nothing written."""
    with pytest.raises(OptionError, match=r"inline_bits must be .* 0 to 8"):
        export(difflogic, tmp_path / "out", vectors=4, inline_bits=value)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_the_command_line_inlines_by_default_and_writes_modules_and_benches_on_request(
    dwn: iotable.TableNetwork, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``iotable export`` writes a DWN in a few files; with ``--inline-bits 0 --table-benches`` a module, a bench
    and vectors per distinct table."""
    bundle = iotable.save(dwn, tmp_path / "bundle")
    assert main(["export", "verilog", str(bundle), str(tmp_path / "few"), "--top", "dwn", "--vectors", "4"]) == 0
    assert "wrote 5 file(s)" in capsys.readouterr().out
    args = ["--top", "dwn", "--vectors", "4", "--inline-bits", "0", "--table-benches"]
    assert main(["export", "verilog", str(bundle), str(tmp_path / "many"), *args]) == 0
    distinct = sum(layer.distinct for layer in export(dwn, tmp_path / "again", top="dwn", vectors=4).layers)
    assert f"wrote {3 * distinct + 5} file(s)" in capsys.readouterr().out
    assert (tmp_path / "many" / "dwn_layer0_u0_tb.v").is_file() and (tmp_path / "many" / "dwn_layer0_u0.v").is_file()
