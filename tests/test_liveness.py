"""Live logic: tables whose outputs reach no network output are left out of the estimate, the cost, the summary and
the export (``keep_dead=True`` keeps them), and the designs without them still equal ``net.run``."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from benchmarks.workloads import MLP_CONFIGS, build_mlp, input_domain_of
from torch import nn

import iotable
from iotable import Domain, OptionError
from iotable.graph.kind import NodeKindDef
from iotable.graph.liveness import liveness
from iotable.graph.nodes import NodeKind, TableMeta
from iotable.hdl import export, simulate_files
from iotable.hdl.build import build_netlist
from iotable.hdl.netlist import Pool, Style
from iotable.nn import Quantize
from iotable.synth import cost
from tests.optional import require_program
from tests.test_hdl_export import sparse


def workload(name: str) -> tuple[nn.Module, dict]:
    config = MLP_CONFIGS[name]
    return build_mlp(config), {"input_domain": input_domain_of(config), "example_input": torch.zeros(1, config.inputs)}


@pytest.fixture(scope="module")
def jsc_s() -> iotable.TableNetwork:
    model, kwargs = workload("jsc-s")
    return iotable.precompute(model, **kwargs)


def live_units_by_sets(graph: iotable.graph.Graph) -> dict[str, set[int]]:
    """The oracle for a chain of flat table layers: from the output back, the units some live unit reads."""
    tables = graph.nodes_of(NodeKind.TABLE)
    wanted = set(range(tables[-1].channels))  # the output reads every channel of the last layer
    found: dict[str, set[int]] = {}
    for node in reversed(tables):
        meta = node.meta
        assert isinstance(meta, TableMeta)
        live = {u.index for u in meta.units if wanted & set(u.out_channels)}
        found[node.name] = live
        wanted = {c for u in meta.units if u.index in live for c in u.in_channels}
    return found


def bench(design, tmp_path: Path):
    require_program("iverilog", package="iverilog")
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    return simulate_files(files, f"{design.top}_tb", simulator="iverilog", timeout=600)


def test_live_units_of_jsc_s_are_those_the_output_reaches(jsc_s: iotable.TableNetwork) -> None:
    """With random fan-in masks some units feed nothing; liveness finds exactly the units the output reaches."""
    live = liveness(jsc_s.graph)
    oracle = live_units_by_sets(jsc_s.graph)
    for name, units in live.units.items():
        assert set(np.flatnonzero(units).tolist()) == oracle[name], name
    assert live.dead() == sum(len(n.meta.units) - len(oracle[n.name]) for n in jsc_s.graph.nodes_of(NodeKind.TABLE))
    assert live.dead() > 0 and live.dead("fc4") == 0
    assert live.live + live.dead() == len(jsc_s.tables)


def test_summary_reports_the_dead_tables(jsc_s: iotable.TableNetwork) -> None:
    """summary() has a dead column per layer and a "dead: N tables" line; its estimate counts the live tables."""
    live = jsc_s.liveness
    text = jsc_s.summary()
    assert f"dead: {live.dead()} tables" in text
    rows = {r["name"]: r for r in jsc_s.rows() if r["kind"] == "table"}
    assert {name: r["dead"] for name, r in rows.items()} == {name: live.dead(name) for name in rows}
    full = sum(layer.plan.lut_estimate() for layer in jsc_s.layers.values())
    assert sum(r["estimate"] for r in rows.values()) < full


def test_estimate_counts_live_tables_unless_keep_dead(jsc_s: iotable.TableNetwork) -> None:
    """The estimate leaves out the dead tables and their registers; keep_dead=True counts every table."""
    model, kwargs = workload("jsc-s")
    live = iotable.estimate(model, **kwargs)
    full = iotable.estimate(model, **kwargs, keep_dead=True)
    units = jsc_s.liveness.units
    per_unit = {name: jsc_s.layers[name].plan.lut_estimates() for name in jsc_s.layers}
    assert live.luts == sum(int(per_unit[name][units[name]].sum()) for name in units)
    assert full.luts == sum(int(e.sum()) for e in per_unit.values())
    assert live.dead == full.dead == jsc_s.liveness.dead()
    assert [e.tables for e in live.layers] == [int(units[e.name].sum()) for e in live.layers]
    assert live.registers < full.registers
    assert f"dead: {live.dead} tables" in live.summary() and "not counted" in live.summary()
    assert "counted above" in full.summary()


def test_keep_dead_is_checked_everywhere(jsc_s: iotable.TableNetwork, tmp_path: Path) -> None:
    """A keep_dead that is not True or False is refused by the estimate, the cost and the export, by name."""
    model, kwargs = workload("tiny")
    for call in (
        lambda: iotable.estimate(model, **kwargs, keep_dead="yes"),
        lambda: cost(jsc_s, keep_dead=1, progress=False),
        lambda: export(jsc_s, tmp_path / "d", keep_dead=None),
    ):
        with pytest.raises(OptionError, match="keep_dead must be True"):
            call()
    assert not (tmp_path / "d").exists()


def test_cost_maps_live_tables_only() -> None:
    """cost() maps the live tables alone and reports the dead ones; keep_dead=True maps every table."""
    model, kwargs = workload("tiny")
    net = iotable.precompute(model, **kwargs)
    live = net.liveness
    assert live.dead() > 0  # 5 units, 3 after them of fan-in 2: one unit of the first layer is read by none
    report = cost(net, workers=1, progress=False)
    full = cost(net, workers=1, progress=False, keep_dead=True)
    assert len(report.tables) == live.live and len(full.tables) == len(net.tables)
    assert report.dead == full.dead == live.dead()
    assert {name: c.dead for name, c in report.layers.items()} == {
        name: int((~live.layers(net.graph)[name]).sum()) for name in net.layers
    }
    assert f"dead: {live.dead()} tables" in report.summary()


def test_the_default_reads_everything() -> None:
    """A kind that does not define live_reads reads every element of every producer (always correct)."""
    assert NodeKindDef().live_reads(None, [None, None], np.ones(3, bool)) == [None, None]  # type: ignore[arg-type]


@pytest.mark.parametrize("style", ["unrolled", "streaming"])
def test_jsc_s_without_dead_units_equals_net_run(jsc_s: iotable.TableNetwork, tmp_path: Path, style: str) -> None:
    """The export instantiates only the live units (their outputs tied to constants) and still equals net.run."""
    design = export(jsc_s, tmp_path / "live", style=style, vectors=200, table_benches=False, inline_bits=0)
    whole = export(jsc_s, tmp_path / "all", style=style, vectors=8, table_benches=False, keep_dead=True, inline_bits=0)
    instances = sum(layer.instances for layer in design.layers)
    assert instances == jsc_s.liveness.live < sum(layer.instances for layer in whole.layers) == len(jsc_s.tables)
    assert [layer.dead for layer in design.layers] == [jsc_s.liveness.dead(n) for n in jsc_s.layers]
    assert len(design.sources) < len(whole.sources)
    result = bench(design, tmp_path)
    assert result.verdict, result.stdout + result.stderr


def test_dead_positions_of_a_convolution_are_not_instantiated(tmp_path: Path) -> None:
    """Behind a pad and a window, a unit is instantiated only at the positions a live unit reads; the design
    equals net.run."""
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 3, 2, stride=2, padding=1),
            q1=Quantize(1),
            flat=nn.Flatten(),
            fc=sparse(27, 2, 2, seed=3),
            q2=Quantize(2),
        )
    ).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 1, 4, 4))
    live = net.liveness
    conv = next(n for n in net.graph.nodes_of(NodeKind.TABLE) if n.meta.layer == "conv")
    read = {c for u in net.graph.nodes_of(NodeKind.TABLE)[-1].meta.units for c in u.in_channels}
    assert set(np.flatnonzero(live.elements[conv.name].reshape(-1)).tolist()) == read
    design = export(net, tmp_path / "d", vectors=64, table_benches=False)
    (layer,) = [c for c in design.layers if c.node == conv.name]
    assert layer.instances == len(read) < 27  # one instance per live (unit, position): one channel each
    result = bench(design, tmp_path)
    assert result.verdict, result.stdout + result.stderr


def test_dead_outputs_of_a_pool_are_constants(tmp_path: Path) -> None:
    """A max-pool's outputs that nothing live reads get no comparator tree, the pool reads only the positions its
    live windows cover, and the design equals net.run."""
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 2, 3, padding=1),
            q1=Quantize(2),
            pool=nn.MaxPool2d(2),
            flat=nn.Flatten(),
            fc=sparse(8, 2, 2, seed=1),
            q2=Quantize(2),
        )
    ).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 1, 4, 4))
    live = net.liveness
    pool = net.graph.nodes_of(NodeKind.POOL)[0]
    read = {c for u in net.graph.nodes_of(NodeKind.TABLE)[-1].meta.units for c in u.in_channels}
    assert set(np.flatnonzero(live.elements[pool.name].reshape(-1)).tolist()) == read
    conv = net.graph.producers(pool.name)[0]
    covered = live.elements[conv.name]  # (2, 4, 4): the 2x2 windows of the live pool outputs
    expected = np.zeros((2, 4, 4), bool)
    for k in read:
        c, i, j = np.unravel_index(k, (2, 2, 2))
        expected[c, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2] = True
    assert np.array_equal(covered, expected)
    (block,) = [
        b
        for b in build_netlist(net.graph, net.layers, Style.UNROLLED, top="t", pipeline=1).blocks
        if isinstance(b, Pool)
    ]
    assert len(block.maxima) == len(read) < 8  # a comparator tree per live output alone
    design = export(net, tmp_path / "d", vectors=64, table_benches=False)
    result = bench(design, tmp_path)
    assert result.verdict, result.stdout + result.stderr


def test_a_design_kept_whole_simulates_with_the_memory_model(jsc_s: iotable.TableNetwork, tmp_path: Path) -> None:
    """``keep_dead=True`` is recorded in the Design, so simulate's table model rebuilds the same modules."""
    from iotable.hdl import export, simulate

    from .optional import require_program

    require_program("iverilog", package="iverilog")
    design = export(jsc_s, tmp_path / "whole", keep_dead=True, vectors=16)
    assert design.keep_dead and sum(layer.dead for layer in design.layers) == 0
    x = torch.randint(0, 4, (30, *jsc_s.input_shape))
    assert torch.equal(simulate(design, x, codes=True), design.reference(x, codes=True))
