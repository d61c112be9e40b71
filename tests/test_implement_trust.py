"""implement and the simulators believe nothing they are not shown: names reach a tool's script only through
the checks check uses, the cache believes a record only when it is consistent, signed and its design's files
are there, and a tool's output is read bounded and range-checked. Fake tools (small shell scripts on a
temporary PATH) stand for yosys, nextpnr, iverilog and vvp, so that every test here takes seconds."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import warnings
from pathlib import Path

import pytest
import torch

import iotable
from iotable import Domain
from iotable.errors import CacheError, HDLError, HDLToolError, IOTableWarning, OptionError
from iotable.hdl import export, implement, simulate_files
from iotable.hdl.implcache import MAX_CACHE_BYTES
from iotable.nn import Quantize

STAT = {"modules": {"\\tiny": {"num_cells_by_type": {"SB_LUT4": 42, "SB_DFF": 7, "SB_CARRY": 2}}}}
STEP = {"from": {"cell": "a", "port": "O"}, "to": {"cell": "b", "port": "I0"}}
REPORT = {
    "fmax": {"clk": {"achieved": 123.5, "constraint": 12.0}},
    "critical_paths": [
        {
            "from": "posedge clk",
            "to": "posedge clk",
            "path": [{"type": "logic", "delay": 1.25, **STEP}, {"type": "routing", "delay": 2.5, **STEP}],
        }
    ],
    "utilization": {"ICESTORM_LC": {"used": 44, "available": 1280}},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> iotable.hdl.Design:
    """Two layers of small tables: the design the fake tools 'implement'."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2)).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2))
    return export(net, tmp_path_factory.mktemp("trust") / "tiny", top="tiny", vectors=8, table_benches=False)


def _script(path: Path, text: str) -> None:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of fake tools first on PATH: yosys runs its script's ``!`` lines (as yosys runs them in a
    shell) and copies ``stat.json`` as its statistics; nextpnr-ice40 copies ``report.json`` as its report;
    each counts its runs."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "yosys_version").write_text("Yosys 0.99+fake (git sha1 0)\n")
    (tools / "stat.json").write_text(json.dumps(STAT))
    (tools / "report.json").write_text(json.dumps(REPORT))
    _script(
        tools / "yosys",
        f'if [ "$1" = "-V" ]; then cat {tools}/yosys_version; exit 0; fi\n'
        f"echo run >> {tools}/yosys_runs\n"
        f"sed -n 's/^!//p' \"$3\" | sh\n"
        f"[ -f {tools}/stat.json ] && cp {tools}/stat.json iotable_stat.json\nexit 0\n",
    )
    _script(
        tools / "nextpnr-ice40",
        'if [ "$1" = "--version" ]; then echo "nextpnr-ice40 -- Next Generation Place and Route (Version fake-1)";'
        " exit 0; fi\n"
        f"echo run >> {tools}/nextpnr_runs\n"
        f"[ -f {tools}/report.json ] && cp {tools}/report.json iotable_report.json\nexit 0\n",
    )
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return tools


def _runs(tools: Path) -> int:
    return len((tools / "yosys_runs").read_text().split()) if (tools / "yosys_runs").exists() else 0


# -- 5: names --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["top", "sources", "target", "package"])
def test_no_name_reaches_a_tool_script_unchecked(tiny, fakes: Path, tmp_path: Path, where: str) -> None:
    """A top, a source file name, a target or a package that would run a shell command from yosys's script is
    refused before any tool runs: the command's file is never created."""
    marker = tmp_path / "ran"
    evil = f"tiny\n!touch {marker} #"
    design, target, package = tiny, "ice40-hx1k", None
    if where == "top":
        design = dataclasses.replace(tiny, top=evil)
    elif where == "sources":
        design = dataclasses.replace(tiny, sources=(*tiny.sources[:-1], f"{tiny.sources[-1]}\n!touch {marker} #"))
    elif where == "target":
        target = f"ice40-hx1k\n!touch {marker}"
    else:
        package = f"ct256\n!touch {marker}"
    with pytest.raises((HDLError, OptionError), match="not a legal|not a plain file name|unknown target|package"):
        implement(design, target=target, package=package)
    assert not marker.exists() and _runs(fakes) == 0


def test_the_fake_tools_implement_a_design(tiny, fakes: Path, tmp_path: Path) -> None:
    """With well-formed reports the counts, Fmax and critical path are what the reports say (the fakes work)."""
    result = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert (result.luts, result.flip_flops, result.carry, result.fmax_mhz) == (42, 7, 2, 123.5)
    assert result.critical_path_ns == pytest.approx(3.75) and len(result.critical_path) == 2
    assert implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache").cached and _runs(fakes) == 1


# -- 6: the cache ----------------------------------------------------------------------------------------------------


def _entry(tiny, tmp_path: Path) -> Path:
    implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    (entry,) = (tmp_path / "cache").glob("*.json")  # beside the cache's secret key
    return entry


def _edit(entry: Path, **changes: object) -> None:
    record = json.loads(entry.read_text())
    record.update(changes)
    entry.write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"luts": 1}, "luts 1 (the cells give 42)"),
        ({"utilization": [["ICESTORM_LC", 2000, 1280]]}, "uses 2000 of 1280"),
        ({"critical_path_ns": 0.5}, "its steps add up to 3.750"),
        ({"fmax_mhz": 1e308}, "do not hold"),
        ({"clock": None}, "an Fmax without its clock"),
    ],
)
def test_edited_numbers_are_refused(tiny, fakes: Path, tmp_path: Path, changes: dict, words: str) -> None:
    """A record whose numbers disagree with the ones they derive from, or lie out of range, is refused with a
    warning and implemented again."""
    entry = _entry(tiny, tmp_path)
    _edit(entry, **changes)
    with pytest.warns(IOTableWarning, match="implementing again") as caught:
        again = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert words in str(caught[0].message) and not again.cached and again.luts == 42 and _runs(fakes) == 2


def test_a_forged_record_under_its_recomputed_key_is_refused(tiny, fakes: Path, tmp_path: Path) -> None:
    """Consistent numbers under the right name and identity are still refused without the user's signature;
    the untouched record passes (the signature is what fails)."""
    entry = _entry(tiny, tmp_path)
    _edit(entry, luts=1, cells=[["SB_CARRY", 2], ["SB_DFF", 7], ["SB_LUT4", 1]])
    with pytest.warns(IOTableWarning, match="signature"):
        assert implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache").luts == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache").cached


def test_the_secret_key_is_refused_when_others_may_read_it(tiny, fakes: Path, tmp_path: Path) -> None:
    """The key file is made with mode 0600; one that other users may read is an error naming it and the fix."""
    _entry(tiny, tmp_path)
    key = tmp_path / "cache" / "key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    key.chmod(0o644)
    with pytest.raises(CacheError, match=r"may be read by other users.*remove"):
        implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")


def test_a_cache_hit_verifies_the_design_directory(tiny, fakes: Path, tmp_path: Path) -> None:
    """A cached result is not returned for a design whose files were changed since: the directory is checked
    on a hit as on a miss."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Quantize(2)).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2))
    design = export(net, tmp_path / "small", top="tiny", vectors=4, table_benches=False)
    implement(design, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    source = Path(design.directory) / design.sources[-1]
    source.write_text(source.read_text() + "// edited\n")
    with pytest.raises(HDLError, match="not the file the design wrote"):
        implement(design, target="ice40-hx1k", cache_dir=tmp_path / "cache")


def test_the_tools_versions_are_asked_at_every_call(tiny, fakes: Path, tmp_path: Path) -> None:
    """Another yosys on PATH (a new version) misses the cache in the same process: versions are not kept."""
    _entry(tiny, tmp_path)
    (fakes / "yosys_version").write_text("Yosys 0.100+fake\n")
    again = implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert not again.cached and ("yosys", "0.100+fake") in again.tools and _runs(fakes) == 2


def test_tool_versions_are_the_ones_implement_runs_with(tiny, fakes: Path, tmp_path: Path) -> None:
    """tool_versions() names the programs and versions implement reports for a target, and follows a new yosys."""
    from iotable.hdl.implement import tool_versions

    assert tool_versions("ice40-hx1k") == implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache").tools
    (fakes / "yosys_version").write_text("Yosys 0.100+fake\n")
    assert ("yosys", "0.100+fake") in tool_versions("ice40-hx1k")
    with pytest.raises(OptionError, match="tool_versions"):
        tool_versions("fpga-9000")


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_a_folder_or_link_at_the_cache_files_name_is_an_error(tiny, fakes: Path, tmp_path: Path, kind: str) -> None:
    """A folder or a link where the cache file belongs is a CacheError naming the path and the fix, raised
    before any tool runs (a result could not be written there)."""
    entry = _entry(tiny, tmp_path)
    entry.unlink()
    if kind == "folder":
        entry.mkdir()
    else:
        entry.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(CacheError, match=rf"{entry.name}.*is a (folder|symbolic link).*remove it"):
        implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache")
    assert _runs(fakes) == 1


# -- 7: the tools' output --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "content", "words"),
    [
        ("stat.json", None, "yosys finished but wrote no iotable_stat.json"),
        ("stat.json", "no json here", 'expected a JSON object with "modules"'),
        ("stat.json", '{"modules": []}', '"modules" an object'),
        ("stat.json", json.dumps({"modules": {"\\tiny": {"num_cells_by_type": {"SB_LUT4": -5}}}}), "counts from 0"),
        ("stat.json", json.dumps({"modules": {"\\tiny": {"num_cells_by_type": {"SB_LUT4": "5"}}}}), "counts from 0"),
        ("report.json", None, "nextpnr finished but wrote no iotable_report.json"),
        ("report.json", "[1]", "expected a JSON object"),
        ("report.json", '{"fmax": []}', '"fmax" an object'),
        ("report.json", json.dumps({"fmax": {"clk": {"achieved": 1e308}}}), "below 5000 MHz"),
        ("report.json", json.dumps({"fmax": {"clk": {"achieved": -3}}}), "above 0"),
        ("report.json", json.dumps({"critical_paths": [{"path": [{"delay": "x"}]}]}), "a delay from 0"),
        ("report.json", json.dumps({"utilization": {"LC": {"used": -1, "available": 9}}}), "used and available"),
    ],
)
def test_a_missing_or_malformed_report_is_a_tool_error(
    tiny, fakes: Path, file: str, content: str | None, words: str
) -> None:
    """A report that is missing, not JSON, of the wrong shape or out of range raises HDLToolError naming the
    tool, the file and what was expected, never a raw error or a number kept."""
    if content is None:
        (fakes / file).unlink()
    else:
        (fakes / file).write_text(content)
    with pytest.raises(HDLToolError) as caught:
        implement(tiny, target="ice40-hx1k")
    assert words in str(caught.value)


def test_an_oversized_report_is_refused_before_it_is_read(tiny, fakes: Path) -> None:
    """A statistics file larger than the bound is refused by its size (a sparse file: nothing is read)."""
    with open(fakes / "stat.json", "wb") as file:
        file.truncate(70 << 20)
    with pytest.raises(HDLToolError, match=r"iotable_stat\.json.*more than the 67,108,864 accepted"):
        implement(tiny, target="ice40-hx1k")


def test_a_fake_vvp_printing_the_pass_line_does_not_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulator that prints a bench's pass line and exits 0 without running the bench does not pass: a pass
    is proved by the bench's results file, not by what is printed."""
    tools = tmp_path / "tools"
    tools.mkdir()
    _script(tools / "iverilog", "touch sim.vvp\nexit 0\n")
    _script(tools / "vvp", 'echo "4/4 vectors match"\nexit 0\n')
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    bench = "module t_tb;\ninitial begin\n$finish;\nend\nendmodule\n"
    result = simulate_files({"t_tb.v": bench}, "t_tb", timeout=30)
    assert result.returncode == 0 and "4/4 vectors match" in result.stdout
    assert result.verdict is None and not result.passed


def test_a_cache_entry_too_large_is_refused_unread(tiny, fakes: Path, tmp_path: Path) -> None:
    """A cache file larger than the bound is refused by its size (a warning), implemented again and replaced."""
    entry = _entry(tiny, tmp_path)
    with open(entry, "wb") as file:
        file.truncate(MAX_CACHE_BYTES + 1)
    with pytest.warns(IOTableWarning, match="more than the 1,048,576 accepted"):
        assert not implement(tiny, target="ice40-hx1k", cache_dir=tmp_path / "cache").cached
    assert entry.stat().st_size < MAX_CACHE_BYTES
