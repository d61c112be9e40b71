"""Tables at the edges of the HDL writer: partial tables without rows, vector words wider than 64 bits, table texts
streamed to disk a chunk at a time, and (slow) a 2**24-row table exported in bounded memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from iotable import Domain, IOTable, nn, observe, precompute, restrict
from iotable.errors import HDLError
from iotable.hdl import export, simulate, simulate_files, table_bench, table_verilog, table_vhdl, write_files
from iotable.hdl.table import Text, in_blocks, layout_of, levels_of
from tests.optional import require_program

D2 = Domain.uniform(2)
SIMULATORS = {"verilog": "iverilog", "vhdl": "ghdl"}
SUFFIX = {"verilog": ".v", "vhdl": ".vhd"}


def emitted(table: IOTable, name: str, language: str, dont_cares: str = "x") -> dict[str, str]:
    text = (table_verilog if language == "verilog" else table_vhdl)(table, name, dont_cares=dont_cares)
    return {f"{name}{SUFFIX[language]}": text}


def run_bench(files: dict, top: str, language: str):
    simulator = SIMULATORS[language]
    require_program(simulator, package=simulator)
    return simulate_files(files, top, simulator=simulator, timeout=300)


# -- partial tables without rows -------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
@pytest.mark.parametrize("bits", [13, 14])
def test_a_nested_table_without_rows_is_its_default(language: str, bits: int) -> None:
    """A partial table of 13 or 14 address bits and no row (nested cases) is a case holding its default alone."""
    domains = [D2] * (bits // 2) + [Domain.uniform(1)] * (bits % 2)
    empty = IOTable(np.zeros((0, len(domains)), np.int64), np.zeros((0, 1), np.int64), input_domains=domains,
                    output_domain=D2)  # fmt: skip
    layout = layout_of(empty, what="test")
    assert layout.address_bits == bits and len(levels_of(layout.input_widths)) > 1 and not in_blocks(layout)
    text = next(iter(emitted(empty, "e", language, dont_cares="zero").values()))
    assert ("default: codes = 2'b00;" if language == "verilog" else "when others => codes <= (others => '0');") in text
    assert "2'b0" not in text.split("default")[0] and 'when b"' not in text


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_network_of_tables_without_rows_exports_and_passes_its_bench(language: str, tmp_path: Path) -> None:
    """A network restricted to no row (14 address bits per table) exports; its bench passes and simulate gives
    net.run's codes (the default, code 0, everywhere); a table without rows gets no bench, as it has nothing to test."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(7, 2), nn.Quantize(2)).eval()
    net = precompute(model, input_domain=D2)
    x = torch.as_tensor(np.random.default_rng(0).choice(np.asarray(D2.values), size=(8, 7)), dtype=torch.float32)
    part = restrict(net, observe(net, x), min_count=10**9, default="zero")
    assert all(len(t) == 0 and t.input_bits == 14 for layer in part.layers.values() for t in layer.tables)
    design = export(part, tmp_path / "hw", language=language, dont_cares="zero", inputs=x)
    assert design.table_benches == ()
    files = {n: (tmp_path / "hw" / n).read_text() for n in (*design.sources, *design.bench)}
    result = run_bench(files, f"{design.top}_tb", language)
    assert result.passed, result.stdout + result.stderr
    out = simulate(design, x, simulator=SIMULATORS[language])
    assert torch.equal(out, design.reference(x)) and not out.any()


# -- wide vector words ------------------------------------------------------------------------------------------


def wide_table(seed: int = 0) -> IOTable:
    """10 address bits (two 5-bit inputs) and 60 code bits (four 15-bit outputs): a 70-bit vector word."""
    codes = np.random.default_rng(seed).integers(0, 2**15, size=(1024, 4))
    return IOTable.dense(codes, input_domains=[Domain.uniform(5)] * 2, output_domain=Domain.uniform(15))


def test_wide_vectors_are_the_rows() -> None:
    """The vectors of a 70-bit word are 18 hex digits per row: the address, then the codes, read back exactly."""
    table = wide_table()
    words = str(table_bench(table, "w", language="verilog")["w_vectors.hex"]).split()
    assert len(words) == 1024 and {len(w) for w in words} == {18}
    values = [int(w, 16) for w in words]
    assert [v >> 60 for v in values] == list(range(1024))
    for j in range(4):
        assert [(v >> (15 * (3 - j))) & (2**15 - 1) for v in values] == table.outputs[:, j].tolist()


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_table_wider_than_64_bits_passes_its_bench(language: str) -> None:
    """A table of 10 address and 60 code bits gets its exhaustive bench, which passes, and fails on a flipped
    high code bit."""
    table = wide_table()
    files = {**emitted(table, "w", language), **table_bench(table, "w", language=language)}
    result = run_bench(files, "w_tb", language)
    assert result.passed and "1024/1024 vectors match" in result.stdout, result.stdout + result.stderr
    lines = str(files["w_vectors.hex"]).splitlines()
    lines[700] = format(int(lines[700], 16) ^ (1 << 59), "018x")  # the first output's most significant bit
    files["w_vectors.hex"] = "\n".join(lines) + "\n"
    result = run_bench(files, "w_tb", language)
    assert not result.passed and "mismatch at vector 700" in result.stdout + result.stderr


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_blocks_of_wide_codes_stay_within_8192_bits(language: str) -> None:
    """A table of 15 address bits and 128 code bits (halves would be 16,384-bit literals, which iverilog's lexer
    refuses) is written in blocks of 64 addresses, compiles and passes its exhaustive bench of 143-bit words."""
    codes = np.random.default_rng(7).integers(0, 256, size=(2**15, 16))
    table = IOTable.dense(codes, input_domains=[Domain.uniform(5)] * 3, output_domain=Domain.uniform(8))
    files = {**emitted(table, "wide", language), **table_bench(table, "wide", language=language)}
    text = next(iter(files.values()))
    assert text.count(": chunk = 8192'b" if language == "verilog" else '" => chunk <= b"') == 2**9
    result = run_bench(files, "wide_tb", language)
    assert result.passed and f"{2**15}/{2**15} vectors match" in result.stdout, result.stdout + result.stderr


def test_export_benches_every_table_with_rows(tmp_path: Path) -> None:
    """export writes an exhaustive bench for each distinct table with rows, whatever its width."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), nn.Quantize(2)).eval()
    design = export(precompute(model, input_domain=D2), tmp_path / "hw", table_benches=True, inline_bits=0)
    assert design.table_benches == ("iotable_net_layer0_u0_tb", "iotable_net_layer0_u1_tb")


# -- text made in chunks ------------------------------------------------------------------------------------------


def test_a_large_table_text_comes_in_chunks(tmp_path: Path) -> None:
    """A table in blocks is made a group of blocks at a time and its vectors a chunk of rows at a time; what
    write_files streams equals the joined text."""
    table = IOTable.dense(np.random.default_rng(3).integers(0, 4, size=(2**18, 1)), input_domains=[D2] * 9,
                          output_domain=D2)  # fmt: skip
    from iotable.hdl.language import Language
    from iotable.hdl.sources import PRINTERS
    from iotable.hdl.table import DontCares

    text = PRINTERS[Language.VERILOG].table(table, "big", dont_cares=DontCares.X)
    vectors = table_bench(table, "big", language="verilog")["big_vectors.hex"]
    assert isinstance(text, Text) and isinstance(vectors, Text)
    assert len(list(text.chunks())) > 3 and len(list(vectors.chunks())) == 4
    write_files({"big.v": text, "big_vectors.hex": vectors}, tmp_path)
    assert (tmp_path / "big.v").read_text() == table_verilog(table, "big") == text
    assert (tmp_path / "big_vectors.hex").read_text() == str(vectors)


def test_write_files_streams_iterables_and_refuses_bad_chunks(tmp_path: Path) -> None:
    """write_files takes a str or an iterable of str chunks; a value that is neither is refused before any write,
    and a chunk that is no str leaves no file behind."""
    paths = write_files({"a.v": (f"// {k}\n" for k in range(3)), "b.v": "module b; endmodule\n"}, tmp_path)
    assert [p.name for p in paths] == ["a.v", "b.v"] and (tmp_path / "a.v").read_text() == "// 0\n// 1\n// 2\n"
    with pytest.raises(HDLError, match="must be a str or an iterable of str chunks, received bytes"):
        write_files({"c.v": "x", "d.v": b"module d; endmodule"}, tmp_path)
    assert not (tmp_path / "c.v").exists()
    with pytest.raises(HDLError, match="must be made of str chunks, received a int"):
        write_files({"e.v": iter(["ok", 3])}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.v", "b.v"]


def test_simulate_files_joins_chunked_texts() -> None:
    """simulate_files takes the same values: a table's Text, a list of chunks; a chunk that is no str is refused."""
    table = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2, output_domain=Domain.uniform(1))
    text = table_verilog(table, "x2")
    files = {"x2.v": [text[:40], text[40:]], **table_bench(table, "x2", language="verilog")}
    assert isinstance(files["x2_vectors.hex"], Text)
    result = run_bench(files, "x2_tb", "verilog")
    assert result.passed and "4/4 vectors match" in result.stdout
    with pytest.raises(HDLError, match="must be made of str chunks, received a bytes"):
        simulate_files({**files, "x2.v": [text.encode()]}, "x2_tb")


# -- a 2**24-row table in bounded memory ------------------------------------------------------------------------

_BIG = textwrap.dedent(
    """
    import resource, sys, torch
    from iotable import Domain, nn, precompute
    from iotable.hdl import export

    model = torch.nn.Sequential(torch.nn.Linear(3, 1), nn.Quantize(8)).eval()
    net = precompute(model, input_domain=Domain.uniform(8))
    design = export(net, sys.argv[1], language=sys.argv[2], vectors=16, table_benches=True)
    print(len(net.layers["0"].tables[0]), design.table_benches, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_table_of_2_24_rows_exports_within_1_gib(language: str, tmp_path: Path) -> None:
    """Exporting a network whose table has 2**24 rows (24 address bits, 8 code bits) peaks below 1 GiB of memory
    (the process's maximum resident set, torch included) and writes its blocks and its exhaustive vectors."""
    done = subprocess.run(
        [sys.executable, "-c", _BIG, str(tmp_path / "hw"), language],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows, benches, peak_kib = done.stdout.split("(")[0], done.stdout.split(")")[0], int(done.stdout.split()[-1])
    assert int(rows) == 2**24 and "iotable_net_layer0_u0_tb" in benches
    assert peak_kib < 2**20, f"peak resident set {peak_kib / 2**10:.0f} MiB"
    vectors = tmp_path / "hw" / "iotable_net_layer0_u0_vectors.hex"
    assert vectors.stat().st_size == 2**24 * 9  # 32-bit words: 8 hex digits and a newline per row
    with vectors.open() as lines:
        assert [int(next(lines), 16) >> 8 for _ in range(3)] == [0, 1, 2]
    module = (tmp_path / "hw" / f"iotable_net_layer0_u0{SUFFIX[language]}").read_text()
    # blocks of 2**10 addresses: 8,192-bit constants, the longest literal iverilog reads
    assert module.count('" => chunk <= b"' if language == "vhdl" else ": chunk = 8192'b") == 2**14
