"""One table as Verilog and VHDL: the I/O contract read back from the text, exhaustive benches under iverilog,
verilator and ghdl, tampered designs and vectors that must fail, yosys checks, and the tools' errors."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import numpy as np
import pytest

from iotable import Domain, IOTable, OptionError
from iotable.errors import HDLError, HDLToolError, SimulatorNotInstalledError
from iotable.hdl import check_files, simulate_files, table_bench, table_verilog, table_vhdl, write_files
from iotable.hdl.table import levels_of
from tests.optional import require_program

D1, D2, D3 = Domain.uniform(1), Domain.uniform(2), Domain.uniform(3)
TRI = Domain.values([-1.0, 0.0, 1.0])  # 3 values: 2 bits, one bit pattern that is no code
PACKAGES = {"iverilog": "iverilog", "ghdl": "ghdl", "verilator": "verilator", "yosys": "yosys"}


def dense(domains: list[Domain], fan_out: int, out: Domain, seed: int) -> IOTable:
    rows = int(np.prod([len(d) for d in domains]))
    codes = np.random.default_rng(seed).integers(0, len(out), size=(rows, fan_out))
    return IOTable.dense(codes, input_domains=domains, output_domain=out)


def restricted(seed: int = 5) -> IOTable:
    """A partial table: a random third of the rows of a table with a 3-valued input."""
    full = dense([TRI, D2, D1], 2, TRI, seed)
    keep = np.sort(np.random.default_rng(seed).choice(len(full), size=len(full) // 3, replace=False))
    return IOTable(full.inputs[keep], full.outputs[keep], input_domains=full.input_domains, output_domain=TRI)


TABLES = {
    "mixed3": dense([D2, TRI, D1], 2, D2, 0),  # the docs' example shape: a 3-valued input in the middle
    "four2": dense([D2] * 4, 1, D3, 1),  # 8 address bits, one 3-bit output
    "tri2": dense([TRI, TRI], 3, TRI, 2),  # only non-power-of-two domains, three outputs
    "one1": dense([D1], 1, D1, 3),  # the smallest table: 1 address bit, 1 code bit
    "part": restricted(),
}


def module(table: IOTable, name: str, language: str, dont_cares: str = "x") -> dict[str, str]:
    if language == "verilog":
        return {f"{name}.v": table_verilog(table, name, dont_cares=dont_cares)}
    return {f"{name}.vhd": table_vhdl(table, name, dont_cares=dont_cares)}


def bench(table: IOTable, name: str, language: str, dont_cares: str = "x") -> dict[str, str]:
    return {**module(table, name, language, dont_cares), **table_bench(table, name, language=language)}


def simulate(files: dict[str, str], name: str, simulator: str):
    require_program(simulator, package=PACKAGES[simulator])
    return simulate_files(files, f"{name}_tb", simulator=simulator, timeout=120)


_ITEM = re.compile(r"^( *)(?:\d+'b|when b\")([01_]+)\"?(?::| =>) codes <?= (?:\d+'b|b\")([01_]+)")
_HEADER = re.compile(r"^( *)(?:\d+'b|when b\")([01_]+)\"?(?:: case \(| =>$)")


def case_rows(text: str) -> tuple[list[list[int]], list[list[int]]]:
    """The case labels' input fields and the case values' output fields, read back from Verilog or VHDL; a
    nested case's item gets the labels of the cases around it (by indentation) in front of its own."""
    outer: list[tuple[int, str]] = []  # (indentation, label) of the open nested cases
    fields, values = [], []
    for line in text.splitlines():
        if header := _HEADER.match(line):
            outer = [o for o in outer if o[0] < len(header.group(1))] + [(len(header.group(1)), header.group(2))]
        elif item := _ITEM.match(line):
            label = "_".join([o[1] for o in outer if o[0] < len(item.group(1))] + [item.group(2)])
            fields.append([int(f, 2) for f in label.split("_")])
            values.append([int(f, 2) for f in item.group(3).split("_")])
    return fields, values


# -- the contract, read back from the text ----------------------------------------------------------------


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
@pytest.mark.parametrize("key", sorted(TABLES))
def test_case_rows_are_the_table(key: str, language: str) -> None:
    """Each case label holds one row's input codes as fields (first input first) and its value the row's output codes."""
    table = TABLES[key]
    text = next(iter(module(table, key, language).values()))
    fields, values = case_rows(text)
    assert fields == table.inputs.tolist()
    assert values == table.outputs.tolist()


def test_address_of_power_of_two_domains_is_the_packed_address() -> None:
    """With every domain a power of two in size, a case label read as one binary number is the table's packed address."""
    table = dense([D3, D2, D1, D2], 2, D2, 7)
    labels = re.findall(r"(\d+)'b([01_]+): codes", table_verilog(table, "pow2"))
    assert {int(width) for width, _ in labels} == {8}
    assert [int(bits.replace("_", ""), 2) for _, bits in labels] == table.addresses.tolist()


def test_worked_example_of_the_docs() -> None:
    """Inputs (2-bit, 3-valued, 1-bit) with codes (2, 1, 1) sit at address 10_01_1; outputs (3, 0) at codes 11_00."""
    table = IOTable([[2, 1, 1]], [[3, 0]], input_domains=[D2, TRI, D1], output_domain=D2)
    text = table_verilog(table, "example")
    assert "input  wire [4:0] address" in text and "output reg  [3:0] codes" in text
    assert "5'b10_01_1: codes = 4'b11_00;" in text
    assert table_bench(table, "example", language="verilog")["example_vectors.hex"] == "13c\n"  # 10011 1100


@pytest.mark.parametrize("language, x_line, zero_line", [
    ("verilog", "default: codes = 4'bxxxx;", "default: codes = 4'b0000;"),
    ("vhdl", "when others => codes <= (others => '-');", "when others => codes <= (others => '0');"),
])  # fmt: skip
def test_dont_care_modes(language: str, x_line: str, zero_line: str) -> None:
    """Rows a table lacks fall to a default of x / '-' with dont_cares="x", of code 0 with "zero"."""
    table = TABLES["part"]
    assert x_line in module(table, "p", language, "x")[f"p.{'v' if language == 'verilog' else 'vhd'}"]
    assert zero_line in module(table, "p", language, "zero")[f"p.{'v' if language == 'verilog' else 'vhd'}"]


_BLOCK = re.compile(r"^ *(?:\d+'b|when b\")([01]+)\"?(?::| =>) chunk <?= (?:\d+'b|b\")([01x-]+)")


def block_codes(text: str, layout_bits: int, code_bits: int) -> np.ndarray:
    """Every address's codes ``(2**A, C)`` read back from a table in blocks (``-1`` where a bit is a
    don't-care): block ``b``'s constant holds address ``b * 2**low + j`` at bits ``[j*C +: C]``."""
    low = layout_bits // 2
    codes = np.full((1 << layout_bits, code_bits), -1, dtype=np.int64)
    for line in text.splitlines():
        if item := _BLOCK.match(line):
            block, constant = int(item.group(1), 2), item.group(2)
            assert len(constant) == code_bits << low
            for j in range(1 << low):  # a test reader, not the emitter: a loop is the plainest oracle
                field = constant[len(constant) - (j + 1) * code_bits : len(constant) - j * code_bits]
                codes[(block << low) + j] = [int(c) if c in "01" else -1 for c in field]
    return codes


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
@pytest.mark.parametrize("kept", [None, 3000])
def test_large_table_text_is_exact(language: str, kept: int | None) -> None:
    """A 2**16-row table (and a partial one of 3,000 rows) in blocks holds every row's codes at its address and
    don't-cares everywhere else."""
    table = dense([D2] * 8, 2, D2, 11)
    if kept is not None:
        keep = np.sort(np.random.default_rng(2).choice(len(table), size=kept, replace=False))
        table = IOTable(table.inputs[keep], table.outputs[keep], input_domains=table.input_domains, output_domain=D2)
    text = next(iter(module(table, "big", language).values()))
    assert "chunk" in text and "codes = 4'b" not in text
    codes = block_codes(text, 16, 4)
    bits = ((table.outputs[:, :, None] >> np.array([1, 0])) & 1).reshape(len(table), 4)
    assert np.array_equal(codes[table.addresses], bits)
    others = np.setdiff1d(np.arange(2**16), table.addresses)
    assert (codes[others] == -1).all()


def test_nesting_levels() -> None:
    """Up to 12 address bits one flat case; beyond, levels of whole fields of at most 10 bits, filled from the last."""
    assert levels_of((2,) * 6) == [(0, 6)]
    assert levels_of((2,) * 9) == [(0, 4), (4, 9)]  # 8 + 10 bits: the digits CNN's 18-bit tables
    assert levels_of((3,) * 8) == [(0, 2), (2, 5), (5, 8)]
    assert levels_of((13, 1)) == [(0, 1), (1, 2)]  # a wide field is a level of its own
    text = table_verilog(dense([D2] * 7, 1, D2, 3), "n")
    assert "case (address[13:10])" in text and "4'b01_10: case (address[9:0])" in text


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_nested_partial_table_text_is_exact(language: str) -> None:
    """A partial table of 14 address bits (random rows kept) nests only the groups that hold rows, each row once."""
    full = dense([D2] * 6 + [TRI], 2, D2, 17)
    keep = np.sort(np.random.default_rng(1).choice(len(full), size=300, replace=False))
    table = IOTable(full.inputs[keep], full.outputs[keep], input_domains=full.input_domains, output_domain=D2)
    fields, values = case_rows(next(iter(module(table, "np", language).values())))
    assert np.array_equal(np.asarray(fields), table.inputs) and np.array_equal(np.asarray(values), table.outputs)


# -- bad inputs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("function, name, words", [
    (table_verilog, "1abc", "not a legal VERILOG identifier"),
    (table_verilog, "a-b", "not a legal VERILOG identifier"),
    (table_verilog, "module", "reserved word"),
    (table_verilog, "logic", "reserved word"),
    (table_verilog, "codes", "uses itself"),
    (table_vhdl, "a__b", "not a legal VHDL identifier"),
    (table_vhdl, "_a", "not a legal VHDL identifier"),
    (table_vhdl, "Signal", "reserved word"),
    (table_vhdl, "", "not a legal VHDL identifier"),
])  # fmt: skip
def test_illegal_names(function, name: str, words: str) -> None:
    """An illegal or reserved module name raises HDLError quoting the name and the rule."""
    with pytest.raises(HDLError, match=re.escape(words)) as info:
        function(TABLES["one1"], name)
    assert repr(name) in str(info.value)


def test_bad_tables_and_options() -> None:
    """Raw-value tables, non-tables, unknown options and empty tables are refused with what to do."""
    raw = IOTable.dense([[0.5], [1.5]], input_domains=[D1])
    with pytest.raises(HDLError, match="raw output values, not codes"):
        table_verilog(raw, "raw")
    with pytest.raises(HDLError, match="expected an IOTable, received list"):
        table_vhdl([[0, 1]], "raw")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="unknown dont_cares 'maybe'; expected one of 'x', 'zero'"):
        table_verilog(TABLES["one1"], "m", dont_cares="maybe")
    with pytest.raises(OptionError, match="unknown language 'sv'; expected one of 'verilog', 'vhdl'"):
        table_bench(TABLES["one1"], "m", language="sv")
    empty = IOTable(np.zeros((0, 1), np.int64), np.zeros((0, 1), np.int64), input_domains=[D1], output_domain=D1)
    with pytest.raises(HDLError, match="holds no row"):
        table_bench(empty, "m", language="verilog")


def test_bad_file_sets() -> None:
    """simulate_files validates names, languages, the top and the timeout before running anything."""
    files = module(TABLES["one1"], "m", "verilog")
    with pytest.raises(HDLError, match="not a plain file name"):
        simulate_files({"../m.v": files["m.v"]}, "m")
    with pytest.raises(HDLError, match="no VHDL source"):
        simulate_files(files, "m", simulator="ghdl")
    with pytest.raises(HDLError, match="declares a module or entity 'nope'"):
        simulate_files(files, "nope")
    with pytest.raises(HDLError, match="timeout must be a positive number"):
        simulate_files(files, "m", timeout=0)
    with pytest.raises(OptionError, match="unknown simulator 'modelsim'"):
        simulate_files(files, "m", simulator="modelsim")


def test_write_files_checks_everything_first(tmp_path: Path) -> None:
    """write_files writes every file, and writes none when one name is bad."""
    files = bench(TABLES["one1"], "m", "verilog")
    assert sorted(p.name for p in write_files(files, tmp_path)) == sorted(files)
    assert (tmp_path / "m_vectors.hex").read_text() == files["m_vectors.hex"]
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(HDLError, match="not a plain file name"):
        write_files({"a.v": "x", "b/c.v": "y"}, other)
    assert not list(other.iterdir())


@pytest.mark.parametrize("program", ["iverilog", "ghdl", "verilator", "yosys"])
def test_missing_tool_names_its_package(program: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing on PATH, each tool's absence raises SimulatorNotInstalledError naming apt-get install <package>."""
    monkeypatch.setenv("PATH", str(tmp_path))
    language = "vhdl" if program == "ghdl" else "verilog"
    files = bench(TABLES["one1"], "m", language)
    with pytest.raises(SimulatorNotInstalledError, match=re.escape(f"apt-get install {PACKAGES[program]}")):
        if program == "yosys":
            check_files(module(TABLES["one1"], "m", "verilog"), "m")
        else:
            simulate_files(files, "m_tb", simulator=program)


# -- simulation ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dont_cares", ["x", "zero"])
@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("key", sorted(TABLES))
def test_bench_passes(key: str, simulator: str, dont_cares: str) -> None:
    """The emitted module passes its exhaustive bench: every row the table holds matches."""
    table = TABLES[key]
    language = "vhdl" if simulator == "ghdl" else "verilog"
    result = simulate(bench(table, key, language, dont_cares), key, simulator)
    assert result.passed, result.stdout + result.stderr
    assert f"{len(table)}/{len(table)} vectors match" in result.stdout


def test_bench_passes_a_4096_row_table() -> None:
    """A 12-input-bit table (4,096 rows) passes its bench under iverilog."""
    table = dense([D3] * 4, 2, D2, 13)
    result = simulate(bench(table, "t12", "verilog"), "t12", "iverilog")
    assert result.passed and "4096/4096 vectors match" in result.stdout


# a Verilator build of the large tables is slow; test_bench_passes_under_verilator[part] keeps Verilator in the quick tier
@pytest.mark.parametrize("simulator", ["iverilog", "ghdl", pytest.param("verilator", marks=pytest.mark.slow)])
def test_nested_tables_and_blocks_pass_their_benches(simulator: str) -> None:
    """A nested 14-bit table (16,384 rows), a nested partial one, a 16-bit table in blocks (65,536 rows) and a
    partial one in blocks of 17 bits pass their exhaustive benches."""
    if simulator == "verilator":
        require_program("g++", package="g++")
    language = "vhdl" if simulator == "ghdl" else "verilog"
    big = dense([D2] * 7, 1, D2, 19)
    full = dense([D2] * 6 + [TRI], 2, D2, 17)
    keep = np.sort(np.random.default_rng(1).choice(len(full), size=300, replace=False))
    part = IOTable(full.inputs[keep], full.outputs[keep], input_domains=full.input_domains, output_domain=D2)
    blocks = dense([D2] * 8, 2, D2, 11)
    full17 = dense([D2] * 7 + [TRI, D1], 2, D2, 23)
    keep17 = np.sort(np.random.default_rng(3).choice(len(full17), size=2000, replace=False))
    part17 = IOTable(
        full17.inputs[keep17], full17.outputs[keep17], input_domains=full17.input_domains, output_domain=D2
    )
    tables = (("big14", big), ("part14", part), ("blocks16", blocks), ("part17", part17))
    for name, table in tables:
        result = simulate(bench(table, name, language), name, simulator)
        assert result.passed and f"{len(table)}/{len(table)} vectors match" in result.stdout, result.stdout


@pytest.mark.parametrize("key", [pytest.param("mixed3", marks=pytest.mark.slow), "part"])
def test_bench_passes_under_verilator(key: str) -> None:
    """The emitted Verilog and its bench also pass under verilator (a dense and a restricted table)."""
    require_program("g++", package="g++")
    table = TABLES[key]
    result = simulate(bench(table, key, "verilog"), key, "verilator")
    assert result.passed, result.stdout + result.stderr
    assert f"{len(table)}/{len(table)} vectors match" in result.stdout


def flip_row(text: str, row: int, language: str) -> str:
    """The module text with the last code bit of case row ``row`` flipped."""
    pattern = r"(: codes = \d+'b[01_]*)([01]);" if language == "verilog" else r"(=> codes <= b\"[01_]*)([01])\";"
    match = list(re.finditer(pattern, text))[row]
    flipped = "1" if match.group(2) == "0" else "0"
    return text[: match.start(2)] + flipped + text[match.end(2) :]


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_a_flipped_row_fails_and_names_its_vector(simulator: str) -> None:
    """Flipping one bit of one row of the emitted case makes the bench fail at that vector, naming address, expected and got."""
    language = "vhdl" if simulator == "ghdl" else "verilog"
    table, row = TABLES["mixed3"], 13
    files = bench(table, "t", language)
    source = "t.v" if language == "verilog" else "t.vhd"
    files[source] = flip_row(files[source], row, language)
    result = simulate(files, "t", simulator)
    assert not result.passed
    address = "_".join(format(c, f"0{w}b") for c, w in zip(table.inputs[row], (2, 2, 1)))
    expected = "_".join(format(c, "02b") for c in table.outputs[row])
    got = expected[:-1] + ("1" if expected[-1] == "0" else "0")
    assert f"mismatch at vector {row}: address {address} expected {expected} got {got}" in result.stdout
    assert "vectors match" not in result.stdout


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_wrong_expected_vectors_fail(simulator: str) -> None:
    """A vectors file whose expected codes are wrong on one line makes a correct module's bench fail there."""
    language = "vhdl" if simulator == "ghdl" else "verilog"
    table = TABLES["part"]
    files = bench(table, "p", language)
    lines = files["p_vectors.hex"].splitlines()
    lines[4] = lines[4][:-1] + ("1" if lines[4][-1] != "1" else "2")
    files["p_vectors.hex"] = "\n".join(lines) + "\n"
    result = simulate(files, "p", simulator)
    assert not result.passed
    assert "mismatch at vector 4: address " in result.stdout


def test_a_run_past_its_timeout_is_killed() -> None:
    """A simulation that never ends raises HDLToolError once the timeout has passed."""
    require_program("iverilog", package="iverilog")
    forever = "module forever_tb;\n    reg c = 0;\n    always #1 c = ~c;\nendmodule\n"
    with pytest.raises(HDLToolError, match="did not finish within the timeout"):
        simulate_files({"forever_tb.v": forever}, "forever_tb", timeout=2)


def test_a_compile_error_carries_the_tool_output() -> None:
    """A module that does not compile raises HDLToolError with iverilog's message."""
    require_program("iverilog", package="iverilog")
    files = bench(TABLES["one1"], "m", "verilog")
    files["m.v"] = files["m.v"].replace("endmodule", "")
    with pytest.raises(HDLToolError, match="syntax error"):
        simulate_files(files, "m_tb")


# -- synthesis checks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dont_cares", ["x", "zero"])
@pytest.mark.parametrize("key", ["mixed3", "part", "tri2"])
def test_yosys_check_passes(key: str, dont_cares: str) -> None:
    """yosys synthesizes the emitted Verilog with check -assert and no latch."""
    require_program("yosys", package="yosys")
    result = check_files(module(TABLES[key], key, "verilog", dont_cares), key, timeout=120)
    assert result.language == "verilog" and result.cells and result.cells > 0


def test_yosys_check_fails_on_a_latch() -> None:
    """The restricted table's case without its default leaves a latch, which check_files refuses, saying so."""
    require_program("yosys", package="yosys")
    text = table_verilog(TABLES["part"], "latch")
    tampered = re.sub(r"\n\s*default: codes = [^\n]*", "", text)
    assert tampered != text
    with pytest.raises(HDLToolError, match=r"(?s)DLATCH.*A latch: .*give its case a default"):
        check_files({"latch.v": tampered}, "latch", timeout=120)


def test_vhdl_check_passes_and_an_incomplete_case_fails() -> None:
    """ghdl's synthesis accepts the emitted VHDL and refuses it once its `when others` branch is gone."""
    require_program("ghdl", package="ghdl")
    require_program("yosys", package="yosys")
    text = table_vhdl(TABLES["part"], "part")
    assert check_files({"part.vhd": text}, "part", timeout=120).language == "vhdl"
    tampered = re.sub(r"\n\s*when others => [^\n]*", "", text)
    with pytest.raises(HDLToolError, match="ghdl"):
        check_files({"part.vhd": tampered}, "part", timeout=120)


# -- the documentation -----------------------------------------------------------------------------------------


def test_hardware_page_snippets_run() -> None:
    """Every ``pycon`` snippet of docs/hardware.md, run in order in one session, prints what the page shows."""
    require_program("iverilog", package="iverilog")
    require_program("yosys", package="yosys")
    require_program("berkeley-abc", package="berkeley-abc")  # the mapped-tables snippet
    page = Path(__file__).resolve().parent.parent / "docs" / "hardware.md"
    blocks = re.findall(r"^```pycon\n(.*?)^```$", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 5
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "hardware.md", str(page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
