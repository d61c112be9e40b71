"""The lower bound of LUT cells of a design whose tables are device cells (Design.min_luts): what synthesis must
keep of them, counted before synthesis, merged (duplicates, constants, wires), without dead cells, never above
what yosys reports; and implement's refusal, before any tool runs, of a design whose bound exceeds the device."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

import iotable
from iotable import Domain
from iotable.errors import HDLError
from iotable.hdl import Design, export, implement, reports
from iotable.hdl import devices as devices_module
from iotable.hdl import fit as fit_module
from iotable.hdl.fit import _reduce
from iotable.hdl.target import parse_target
from iotable.nn import Quantize
from tests.optional import require_program

implement_module = importlib.import_module("iotable.hdl.implement")
D2 = Domain.uniform(2)


def _two_layers() -> iotable.TableNetwork:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), Quantize(2), torch.nn.Linear(3, 2), Quantize(2)).eval()
    return iotable.precompute(model, input_domain=D2)


def _mapped(net: iotable.TableNetwork, folder: Path, family: str = "ice40", **options: Any) -> Design:
    require_program("berkeley-abc", package="berkeley-abc")
    return export(net, folder, top="t", vectors=4, tables="mapped", k=4, primitives=family, **options)


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> Design:
    """Two layers of 8- and 6-input tables, exported as iCE40 LUT cells."""
    return _mapped(_two_layers(), tmp_path_factory.mktemp("fit") / "d")


class _ToolRan(Exception):
    """A tool was started."""


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No yosys on PATH (ABC alone, for tables="mapped"), and any program implement would start fails the test
    with :class:`_ToolRan`."""
    require_program("berkeley-abc", package="berkeley-abc")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "berkeley-abc").symlink_to(shutil.which("berkeley-abc") or "berkeley-abc")
    monkeypatch.setenv("PATH", str(tools))

    def run(command: list[str], *args: Any, **kwargs: Any) -> Any:
        raise _ToolRan(command[0])

    monkeypatch.setattr(implement_module, "run_in_group", run)


# -- the refusal ----------------------------------------------------------------------------------------------------


def test_a_design_above_the_device_is_refused_before_any_tool(
    cells: Design, no_tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound above the device's logic cells is refused naming the design, the bound (said to be one), the
    device, its capacity and the fixes, and no tool is started."""
    assert cells.min_luts is not None and cells.min_luts > 1
    monkeypatch.setitem(devices_module._ICE40_CELLS, "hx1k", cells.min_luts - 1)
    with pytest.raises(HDLError) as caught:
        implement(cells, target="ice40-hx1k")
    text = str(caught.value)
    assert f"design 't' needs at least {cells.min_luts:,} LUT4 cells (a lower bound" in text
    assert f"ice40-hx1k has {cells.min_luts - 1:,} logic cells" in text
    assert "larger device (target=)" in text and "smaller model" in text and "out_of_context=True does not" in text


def test_a_design_at_the_device_size_goes_on_to_the_tools(
    cells: Design, no_tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound equal to the device's logic cells is not refused: implement goes on to run the tools."""
    assert cells.min_luts is not None
    monkeypatch.setitem(devices_module._ICE40_CELLS, "hx1k", cells.min_luts)
    with pytest.raises(_ToolRan):
        implement(cells, target="ice40-hx1k")


def test_tables_mapped_refuses_a_case_design_before_synthesis(
    tmp_path: Path, no_tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``case`` design has no bound (synthesis maps its tables its own way) and goes on to the tools; with
    ``tables="mapped"`` its tables become cells with a bound, and a device below it is refused first."""
    design = export(_two_layers(), tmp_path / "d", top="t", vectors=4)
    assert design.min_luts is None
    monkeypatch.setitem(devices_module._ICE40_CELLS, "hx1k", 1)
    with pytest.raises(_ToolRan):
        implement(design, target="ice40-hx1k")
    with pytest.raises(HDLError, match="needs at least .* LUT4 cells .* ice40-hx1k has 1 logic cells"):
        implement(design, target="ice40-hx1k", tables="mapped")


# -- what the bound takes off ---------------------------------------------------------------------------------------


def _duplicates(units: int) -> iotable.TableNetwork:
    """``units`` units of one table reading the same four inputs."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(4, units)
    with torch.no_grad():
        linear.weight[:] = torch.tensor([0.9, -0.4, 0.7, 0.3])
        linear.bias[:] = 0.1
    return iotable.precompute(torch.nn.Sequential(linear, Quantize(2)).eval(), input_domain=D2)


def test_cells_that_duplicate_cells_count_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three instances of one table on the same inputs cost one instance's cells; counted without merging (the
    tamper), they would cost three times as many."""
    one = _mapped(_duplicates(1), tmp_path / "one")
    three = _mapped(_duplicates(3), tmp_path / "three")
    assert three.layers[0].luts == 3 * one.layers[0].luts
    assert one.min_luts and three.min_luts == one.min_luts

    def unmerged(self: Any, key: tuple[Any, ...]) -> int:
        self.keys.append(key)
        return len(self.keys) - 1

    monkeypatch.setattr(fit_module._Nets, "net", unmerged)
    assert _mapped(_duplicates(3), tmp_path / "tampered").min_luts == 3 * one.min_luts


def test_cells_no_output_reads_count_nothing(tmp_path: Path) -> None:
    """Units whose outputs reach no network output add no cell to the bound when instantiated (keep_dead)."""
    from benchmarks import workloads

    net = workloads.build("tiny").precompute()
    live, kept = _mapped(net, tmp_path / "live"), _mapped(net, tmp_path / "kept", keep_dead=True)
    assert sum(layer.dead for layer in live.layers) > 0
    assert sum(layer.luts or 0 for layer in kept.layers) > sum(layer.luts or 0 for layer in live.layers)
    assert kept.min_luts == live.min_luts and live.min_luts and live.min_luts > 0


def test_a_streaming_design_has_no_bound(tmp_path: Path) -> None:
    """The streaming style's line buffers and handshakes are not followed: no bound, so no early refusal."""
    assert _mapped(_two_layers(), tmp_path / "s", style="streaming").min_luts is None


@pytest.mark.parametrize(
    ("truth", "inputs", "expected"),
    [
        (0x6666, [5, 6, 0, 0], (0b0110, [5, 6])),  # XOR of two nets, the other two inputs tied to 0
        (0x6666, [6, 5, 1, 1], (0b0110, [5, 6])),  # the same, inputs in another order, tied to 1
        (0b0110, [5, 5], (0, [])),  # XOR of a net with itself: a constant
        (0b1000, [5, 1], (0b10, [5])),  # AND with 1: a wire
        (0xFF00, [5, 6, 7, 8], (0b10, [8])),  # the last input alone: a wire
        (0b0010, [6, 5], (0b0100, [5, 6])),  # a AND NOT b, its inputs reordered
    ],
)
def test_a_lut_is_reduced_to_the_inputs_it_depends_on(truth: int, inputs: list[int], expected: tuple) -> None:
    """Constant inputs are folded in, a net repeated is read once, inputs the function ignores are dropped, and
    the rest are ordered by net: one key per function of the same nets."""
    assert _reduce(truth, inputs) == expected


# -- never above what synthesis keeps -------------------------------------------------------------------------------


def _synthesized_luts(design: Design, target: str) -> int:
    """yosys's LUT4 count of ``design`` synthesized as implement synthesizes it (no place and route)."""
    chosen = parse_target(target, package=None, what="test")
    work = Path(design.directory)
    (work / "s.ys").write_text(implement_module._script(chosen, design.sources, design.top))
    subprocess.run(["yosys", "-q", "-s", "s.ys"], cwd=work, check=True, timeout=1200, capture_output=True)
    stat = json.loads((work / implement_module._STAT).read_text())
    cells = reports.top_cells(json.dumps(stat), design.top, what="test", file="stat.json")
    return int(reports.cell_counts(chosen.family, cells)["luts"])


def _require_yosys() -> None:
    require_program("yosys", package="yosys")


@pytest.mark.parametrize(("family", "target"), [("ice40", "ice40-hx8k"), ("ecp5", "ecp5-85k")])
def test_the_bound_is_at_most_what_yosys_keeps(tmp_path: Path, family: str, target: str) -> None:
    """Two small layers as iCE40 and ECP5 cells, pipelined, combinational and with registers inside the tables:
    the bound never exceeds the synthesized LUT4."""
    _require_yosys()
    for pipeline, inside in ((1, 0), (0, 0), (1, 1)):
        folder = tmp_path / f"d{pipeline}{inside}"
        design = _mapped(_two_layers(), folder, family=family, pipeline=pipeline, pipeline_luts=inside)
        assert design.min_luts is not None and 0 < design.min_luts <= _synthesized_luts(design, target)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "target"), [("ice40", "ice40-hx8k"), ("ecp5", "ecp5-85k")])
def test_a_jsc_s_sized_bound_is_close_below_what_yosys_keeps(tmp_path: Path, family: str, target: str) -> None:
    """JSC-S (165 tables) as iCE40 and ECP5 cells: the bound is below the synthesized LUT4 and within 10% of it
    (the rest: the handshake's logic, cells synthesis keeps that the bound leaves out)."""
    from benchmarks import workloads

    _require_yosys()
    design = _mapped(workloads.build("jsc-s").precompute(), tmp_path / "d", family=family)
    luts = _synthesized_luts(design, target)
    assert design.min_luts is not None and 0.9 * luts <= design.min_luts <= luts
