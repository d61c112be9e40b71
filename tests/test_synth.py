"""iotable.synth: LogicNets' estimate, ABC's LUT mapping checked row by row, don't-cares, cache and executors."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

import iotable
import iotable.hdl
from iotable import Domain, IOTable
from iotable.errors import ABCNotInstalledError, CacheError, IOTableWarning, NetlistMismatchError, SynthError
from iotable.lutnet import LutNetlist, LutResults
from iotable.synth import (
    check_table,
    cost,
    lut_estimate,
    map_luts,
    map_table,
    table_lut_estimate,
)

from .optional import require, require_program

TWO, ONE, TRI = Domain.uniform(2), Domain.uniform(1), Domain.values([-1.0, 0.0, 1.0])


def _abc() -> str:
    require_program("berkeley-abc", package="berkeley-abc")
    return "berkeley-abc"


def _random_table(input_bits: int, output_bits: int, seed: int, **where: object) -> IOTable:
    """A dense table of random codes: 2-bit inputs (a 1-bit one first for odd widths), one output."""
    rng = np.random.default_rng(seed)
    domains = [ONE] * (input_bits % 2) + [TWO] * (input_bits // 2)
    out = Domain.uniform(output_bits)
    return IOTable.dense(
        rng.integers(0, 2**output_bits, (2**input_bits, 1)), input_domains=domains, output_domain=out, **where
    )


def _neuron(inputs: int, seed: int) -> IOTable:
    """A dense table of a quantized linear neuron over 2-bit inputs (the structure trained tables have)."""
    rng = np.random.default_rng(seed)
    codes = IOTable.dense(np.zeros((4**inputs, 1)), input_domains=[TWO] * inputs).inputs
    x = codes @ rng.normal(size=inputs)
    q = np.clip(np.round((x - x.mean()) / x.std() * 1.2 + 1.5), 0, 3).astype(np.int64)
    return IOTable.dense(q[:, None], input_domains=[TWO] * inputs, output_domain=TWO)


def _reference(netlist: LutNetlist, table: IOTable) -> np.ndarray:
    """The netlist's output codes on the table's rows, one signal at a time over rows (no bit packing)."""
    widths = [max(d.bits, 1) for d in table.input_domains]
    signals = {}
    for j, w in enumerate(widths):
        for b in range(w):
            signals[f"x{j}_{b}"] = (table.inputs[:, j].astype(np.int64) >> b) & 1
    for node in netlist.nodes:
        hit = np.zeros(len(table), dtype=bool)
        for cube in node.cubes:
            term = np.ones(len(table), dtype=bool)
            for name, literal in zip(node.inputs, cube):
                if literal != "-":
                    term &= signals[name] == int(literal)
            hit |= term
        signals[node.output] = (hit if node.onset else ~hit).astype(np.int64)
    width = max(table.output_domain.bits, 1)
    return np.stack([sum(signals[f"y{j}_{b}"] << b for b in range(width)) for j in range(table.fan_out)], axis=1)


# -- the estimate -------------------------------------------------------------------------------------------


def test_estimate_is_logicnets_formula_for_lut6():
    """For k = 6 and X >= 6 the estimate is (Y/3)(2^(X-4) - (-1)^X), vectorized over X and Y."""
    x = np.arange(6, 31)[:, None]
    y = np.arange(1, 8)[None, :]
    formula = (y * (2.0 ** (x - 4) - (-1.0) ** x)) / 3
    assert np.array_equal(lut_estimate(x, y), formula.astype(np.int64))
    assert lut_estimate(12, 2) == 170 and lut_estimate(16, 2) == 2730


def test_estimate_small_tables_and_other_k():
    """At most k bits cost one LUT per output bit (none without inputs); k = 4 is a 2:1 mux tree."""
    assert lut_estimate([0, 1, 4, 5, 6], 3).tolist() == [0, 3, 3, 3, 3]
    assert lut_estimate(np.arange(4, 12), 1, k=4).tolist() == [2 ** (x - 3) - 1 for x in range(4, 12)]
    t = _random_table(10, 3, seed=0)
    assert table_lut_estimate(t) == lut_estimate(10, 3) == 63


@pytest.mark.parametrize(
    ("args", "words"),
    [((-1, 2), "non-negative"), ((3.5, 2), "non-negative"), ((8, 1, 2), "from 3 to 12"), ((100, 1), "64-bit")],
)
def test_estimate_bad_inputs(args, words):
    """Negative or fractional bits, a k outside 3..12 and overflowing sizes raise SynthError."""
    *bits, k = args if len(args) == 3 else (*args, 6)
    with pytest.raises(SynthError, match=words):
        lut_estimate(*bits, k=k)


# -- one table through ABC ------------------------------------------------------------------------------------


_WIDTHS = [(x, 1) for x in range(6, 16)] + [pytest.param(16, 1, marks=pytest.mark.slow)]
_WIDTHS += [(x, 2) for x in (7, 9, 12, 13, 15)]


@pytest.mark.parametrize(("input_bits", "output_bits"), _WIDTHS)
def test_random_tables_map_within_the_estimate(input_bits, output_bits):
    """Random dense tables of every width from 6 to 16 bits, odd ones included, map to no more LUTs than
    LogicNets' formula, as deep as its mux tree, and the netlist equals the table on every row."""
    table = _random_table(input_bits, output_bits, seed=100 * input_bits + 10 * output_bits)
    mapped = map_table(table, abc=_abc())
    assert mapped.method == ("direct" if input_bits <= 6 else "abc") and mapped.completion == "none"
    assert 0 < mapped.luts <= mapped.estimate == lut_estimate(input_bits, output_bits)
    check_table(mapped.netlist, table, k=6)
    if input_bits <= 12:  # the unpacked reference is slow on large tables; check_table covers them
        assert np.array_equal(_reference(mapped.netlist, table), table.outputs)
    assert mapped.netlist.max_fan_in <= 6 and mapped.depth == max(1, (input_bits - 6 + 1) // 2 + 1)
    assert "ABC" in mapped.abc_version and mapped.script == "collapse; muxes; strash; if -K 6"


def test_small_tables_are_one_lut_per_output_bit():
    """Tables of at most k bits need no mapper: one LUT per output bit over its support, a wire, a constant."""
    inputs = IOTable.dense(np.zeros((64, 1)), input_domains=[TWO] * 3).inputs
    outputs = np.stack([inputs[:, 0] & 1, np.zeros(64, np.int64), (inputs.sum(1) % 2)], axis=1)
    table = IOTable.dense(outputs, input_domains=[TWO] * 3, output_domain=ONE)
    mapped = map_table(table, abc=_abc())
    assert mapped.method == "direct" and mapped.luts == 1 and mapped.depth == 1
    assert np.array_equal(_reference(mapped.netlist, table), table.outputs)


def test_non_power_of_two_domains_use_their_unused_patterns():
    """A 3-valued domain takes 2 bits; its fourth pattern is a don't-care, and the netlist equals every row."""
    rng = np.random.default_rng(3)
    table = IOTable.dense(rng.integers(0, 3, (3**5, 2)), input_domains=[TRI] * 5, output_domain=TRI)
    mapped = map_table(table, abc=_abc())
    assert mapped.completion == "filled" and mapped.input_bits == 10 and mapped.output_bits == 4
    assert mapped.luts <= mapped.estimate
    assert np.array_equal(_reference(mapped.netlist, table), table.outputs)


def test_a_corrupted_netlist_is_caught():
    """Flipping one literal of one cover in a mapped netlist makes the row check fail, naming the table."""
    table = _random_table(8, 2, seed=8, layer="fc1", unit=3)
    mapped = map_table(table, abc=_abc())
    check_table(mapped.netlist, table)
    node = next(n for n in mapped.netlist.nodes if n.output == "y0_0")
    line = next(ln for ln in mapped.netlist.blif.splitlines() if ln.startswith(".names") and ln.endswith(" y0_0"))
    blif = mapped.netlist.blif.splitlines()
    at = blif.index(line) + 1
    cube = blif[at].split()[0]
    position = next(i for i, c in enumerate(cube) if c in "01")
    blif[at] = cube[:position] + "10"[int(cube[position])] + cube[position + 1 :] + " " + blif[at].split()[1]
    corrupted = LutNetlist.from_blif("\n".join(blif) + "\n")
    assert corrupted.nodes != mapped.netlist.nodes and node.output == "y0_0"
    with pytest.raises(NetlistMismatchError, match=r"unit 3 of .*fc1.*does not compute the table: input codes"):
        check_table(corrupted, table)


def test_netlist_parsing_constants_wires_offsets_and_loops():
    """Constants and wires cost nothing, off-set covers are complements, loops and undriven signals raise."""
    text = (
        ".model m\n.inputs a b\n.outputs y0 y1 y2 y3\n.names y0\n.names a y1\n1 1\n"
        ".names a b y2\n11 0\n.names t y3\n0 1\n.names a \\\n b t\n1- 1\n-1 1\n.end\n"
    )
    net = LutNetlist.from_blif(text)
    assert net.luts == 3 and net.depth == 2
    words = {"a": np.array([0b1100], np.uint64), "b": np.array([0b1010], np.uint64)}
    out = {k: int(v[0]) & 0b1111 for k, v in net.simulate(words).items()}
    assert out == {"y0": 0, "y1": 0b1100, "y2": 0b0111, "y3": 0b0001}
    with pytest.raises(SynthError, match="loop"):
        LutNetlist.from_blif(".model m\n.inputs a\n.outputs y\n.names a z y\n11 1\n.names y z\n1 1\n.end\n")
    with pytest.raises(SynthError, match="never driven"):
        LutNetlist.from_blif(".model m\n.inputs a\n.outputs y\n.names a q y\n11 1\n.end\n")
    with pytest.raises(SynthError, match=r"\.latch is not supported"):
        LutNetlist.from_blif(".model m\n.inputs a\n.outputs y\n.latch a y 0\n.end\n")


# -- don't-cares ------------------------------------------------------------------------------------------------


def _observed(dense: IOTable, fraction: float, seed: int) -> IOTable:
    """``dense`` restricted to the rows of inputs drawn with low codes more likely (as real data is skewed)."""
    rng = np.random.default_rng(seed)
    weights = np.prod(np.where(dense.inputs < 2, 3.0, 1.0), axis=1)
    keep = np.sort(rng.choice(len(dense), int(len(dense) * fraction), replace=False, p=weights / weights.sum()))
    return IOTable(dense.inputs[keep], dense.outputs[keep], input_domains=dense.input_domains, output_domain=TWO)


def test_dont_cares_pay_on_a_restricted_table():
    """A restricted table maps with its don't-cares to fewer LUTs than its dense table, exact on its rows."""
    dense = _neuron(6, seed=1)
    partial = _observed(dense, 0.1, seed=2)
    alone = map_table(partial, abc=_abc())
    assert alone.completion == "filled"
    compared = map_table(partial, abc=_abc(), dense=dense)
    assert compared.dense_luts == map_table(dense, abc=_abc()).luts
    assert alone.luts < compared.dense_luts and compared.luts <= alone.luts
    assert 0 < compared.reduction < 1
    assert np.array_equal(_reference(alone.netlist, partial), partial.outputs)


def test_with_dense_a_restricted_table_never_costs_more():
    """With dense=, the dense netlist is kept where it is smaller (it computes the partial table too)."""
    dense = _neuron(6, seed=4)
    rng = np.random.default_rng(5)
    keep = np.sort(rng.choice(len(dense), len(dense) // 2, replace=False))  # scattered: the fill can lose
    partial = IOTable(dense.inputs[keep], dense.outputs[keep], input_domains=dense.input_domains, output_domain=TWO)
    report = map_luts([partial], abc=_abc(), dense=[dense], workers=1)
    mapped = report.tables[0]
    assert mapped.luts <= mapped.dense_luts and report.reduction is not None and report.reduction >= 0
    assert mapped.completion in ("filled", "dense")
    check_table(mapped.netlist, partial)
    assert np.array_equal(_reference(mapped.netlist, partial), partial.outputs)


# -- estimates at plan time ---------------------------------------------------------------------------------------


def _conv_net() -> iotable.TableNetwork:
    """Two grouped 1-D convolutions (per-channel input domains, a padded window, 3 and 2 output bits)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(2, 4, 3, padding=1, groups=2), iotable.nn.Quantize(2),
        torch.nn.Conv1d(4, 4, 2, groups=4), iotable.nn.Quantize(3),
    ).eval()  # fmt: skip
    return iotable.precompute(model, input_domain=[ONE, TRI], example_input=torch.zeros(1, 2, 8), progress=False)


def test_plan_estimates_equal_the_tables_estimates():
    """A plan's per-unit estimates equal table_lut_estimate of the tables later enumerated (per-channel domains)."""
    net = _conv_net()
    for layer in net.layers.values():
        address, code = layer.plan.table_bits
        assert address.tolist() == [sum(max(d.bits, 1) for d in t.input_domains) for t in layer.tables]
        assert layer.plan.lut_estimates().tolist() == [table_lut_estimate(t) for t in layer.tables]
        assert code.tolist() == [t.fan_out * max(t.output_domain.bits, 1) for t in layer.tables]
        assert layer.plan.lut_estimate(k=4) == sum(table_lut_estimate(t, k=4) for t in layer.tables)


def test_plan_estimate_needs_no_rows(monkeypatch):
    """iotable.plan of a layer of 24-bit tables gives the estimate at once, and no enumeration runs for it."""
    import iotable.tabulate.enumerate

    monkeypatch.setattr(iotable.tabulate.enumerate, "_enumerate", lambda *a, **k: pytest.fail("enumerated"))
    block = torch.nn.Sequential(torch.nn.Linear(24, 2), iotable.nn.Quantize(2))
    iotable.decompose(block, fan_in=[list(range(12)), list(range(12, 24))])
    layer = iotable.plan(block, input_domain=TWO)
    assert layer.total_rows == 2 * 2**24 and layer.lut_estimate() == 2 * lut_estimate(24, 2)
    text = layer.summary()
    assert f"LogicNets estimate: {2 * lut_estimate(24, 2)} LUT6" in text and "holds 4 bit(s) per output" in text


def test_summary_estimates_and_registers_match_the_exported_design(tmp_path):
    """net.summary() gives each layer's estimate and the register bits export(pipeline=1) puts after it."""
    net = _conv_net()
    design = iotable.hdl.export(net, tmp_path, pipeline=1, table_benches=False, vectors=4)
    rows = {r["name"]: r for r in net.rows() if r["kind"] == "table"}
    assert {r.node: r.registers for r in design.layers} == {n: r["registers"] for n, r in rows.items()}
    assert [r["estimate"] for r in rows.values()] == [layer.plan.lut_estimate() for layer in net.layers.values()]
    total = sum(table_lut_estimate(t) for t in net.tables)
    registers = sum(r.registers for r in design.layers)
    assert f"LogicNets estimate: {total} LUT6" in net.summary() and f"registers: {registers} bits" in net.summary()


def test_raw_outputs_have_no_estimate():
    """A layer that ends in no quantizer has no estimate, and its summary says why."""
    layer = iotable.plan(torch.nn.Linear(3, 2), input_domain=TWO)
    assert layer.table_bits[1] is None and layer.lut_estimate() is None and "raw outputs" in layer.summary()


# -- many tables: networks, cache, executors ---------------------------------------------------------------------


def _counting_abc(folder: Path) -> tuple[str, Path]:
    """An ABC wrapper that logs each mapping run (a call that reads a table) to a file."""
    log = folder / "calls.log"
    script = folder / "abc-wrapper"
    real = shutil.which(_abc())
    script.write_text(f'#!/bin/sh\ncase "$*" in *read_blif*) echo run >> "{log}";; esac\nexec "{real}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_cache_maps_only_what_is_missing(tmp_path):
    """A rerun reads every result from the cache (ABC not run); a lost file is the only one mapped again."""
    abc, log = _counting_abc(tmp_path)
    tables = [_random_table(8, 2, seed=s) for s in range(3)] + [_random_table(8, 2, seed=0)]
    first = map_luts(tables, abc=abc, cache_dir=tmp_path / "cache", workers=1)
    assert first.distinct == 3 and first.mapped == 3 and _calls(log) >= 1
    calls = _calls(log)
    again = map_luts(tables, abc=abc, cache_dir=tmp_path / "cache", workers=1)
    assert _calls(log) == calls and again.cached == 3 and again.mapped == 0
    assert [t.luts for t in again.tables] == [t.luts for t in first.tables] and all(t.cached for t in again.tables)
    files = sorted((tmp_path / "cache").glob("*.json"))
    assert len(files) == 3
    files[0].unlink()
    third = map_luts(tables, abc=abc, cache_dir=tmp_path / "cache", workers=1)
    assert third.mapped == 1 and third.cached == 2 and _calls(log) == calls + 1


def test_a_tampered_cache_file_is_caught(tmp_path):
    """A cached netlist is checked against its table when it is read: an edited one, or a file that is no
    record, is mapped again with a warning naming the file, and the fresh result replaces the file."""
    table = _random_table(9, 1, seed=9)
    first = map_luts([table], abc=_abc(), cache_dir=tmp_path, workers=1).tables[0]
    (file,) = tmp_path.glob("*.json")
    record = json.loads(file.read_text())
    lines = record["blif"].splitlines()
    at = next(i for i, ln in enumerate(lines) if ln[:1] in "01-" and " " in ln)
    cube, out = lines[at].split()
    lines[at] = ("1" if cube[0] == "0" else "0") + cube[1:] + " " + out
    file.write_text(json.dumps({**record, "blif": "\n".join(lines) + "\n"}))
    with pytest.warns(
        IOTableWarning, match=f"cache file '{re.escape(str(file))}'.*does not compute the table.*mapping .* again"
    ):
        again = map_luts([table], abc=_abc(), cache_dir=tmp_path, workers=1)
    assert again.mapped == 1 and again.tables[0].luts == first.luts and not again.tables[0].cached
    assert json.loads(file.read_text())["blif"] == record["blif"]
    file.write_text("{not json")
    with pytest.warns(IOTableWarning, match="not valid JSON"):
        assert map_luts([table], abc=_abc(), cache_dir=tmp_path, workers=1).mapped == 1
    assert map_luts([table], abc=_abc(), cache_dir=tmp_path, workers=1).cached == 1


def test_a_stored_netlist_carries_no_timestamp(tmp_path):
    """The netlist a mapping stores holds no date or time (ABC's header line is dropped), so that mapping the
    same table twice stores the same text."""
    table = _random_table(9, 1, seed=9)
    netlist = map_luts([table], abc=_abc(), cache_dir=tmp_path, workers=1).tables[0].netlist
    (file,) = tmp_path.glob("*.json")
    stored = json.loads(file.read_text())["blif"]
    assert stored.startswith(".model") and "written by ABC" not in stored
    assert netlist.luts == LutNetlist.from_blif(stored, what="stored").luts


def test_network_layers_and_process_pool():
    """A network's tables map on a pool of 2 processes, with per-layer totals that add up."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4)
    mask = torch.zeros(4, 8)
    for k in range(4):
        mask[k, [k, k + 1, k + 2, k + 4]] = 1
    torch.nn.utils.prune.custom_from_mask(linear, "weight", mask)
    fan_in = [[k, k + 1, k + 2, k + 4] for k in range(4)]
    model = torch.nn.Sequential(
        iotable.decompose(linear, fan_in=fan_in), iotable.nn.Quantize(2), torch.nn.Linear(4, 2), iotable.nn.Quantize(2)
    )
    net = iotable.precompute(model, input_domain=Domain.uniform(2), progress=False)
    report = map_luts(net, abc=_abc(), workers=2)
    assert list(report.layers) == list(net.layers)
    assert sum(c.luts for c in report.layers.values()) == report.luts
    assert [c.tables for c in report.layers.values()] == [4, 2]
    for mapped, table in zip(report.tables, net.tables):
        assert np.array_equal(_reference(mapped.netlist, table), table.outputs)
    assert "total" in report.summary() and "estimates" in report.summary()


def _pruned_net() -> iotable.TableNetwork:
    """Two layers: four 8-bit tables (a pruned linear layer) and two of 8 bits, 2-bit codes out."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4)
    mask = torch.zeros(4, 8)
    for k in range(4):
        mask[k, [k, k + 1, k + 2, k + 4]] = 1
    torch.nn.utils.prune.custom_from_mask(linear, "weight", mask)
    fan_in = [[k, k + 1, k + 2, k + 4] for k in range(4)]
    model = torch.nn.Sequential(
        iotable.decompose(linear, fan_in=fan_in), iotable.nn.Quantize(2), torch.nn.Linear(4, 2), iotable.nn.Quantize(2)
    )
    return iotable.precompute(model, input_domain=Domain.uniform(2), progress=False)


def test_cost_reports_layers_registers_and_remembers(tmp_path):
    """cost(net) gives per layer tables, input bits, estimate, LUTs, depth and registers, and the network holding
    the results, whose cost maps nothing; the network given is not changed."""
    abc, log = _counting_abc(tmp_path)
    net = _pruned_net()
    report = cost(net, abc=abc, workers=1)
    calls = _calls(log)
    assert calls >= 1 and report.mapped == report.distinct
    rows = {r["name"]: r for r in net.rows() if r["kind"] == "table"}
    for name, layer in report.layers.items():
        assert layer.input_bits == (8,) and layer.registers == rows[name]["registers"]
        assert layer.estimate == rows[name]["estimate"] == net[name].plan.lut_estimate()
    assert report.registers == 12 and report.estimate == sum(table_lut_estimate(t) for t in net.tables)
    text = report.summary()
    assert "input bits" in text and "registers" in text and "estimates tied to this pinned flow" in text
    assert len(net.luts) == 0 and len(report.network.luts) == report.distinct and report.network == net
    again = cost(report.network, abc=abc, workers=1)
    assert _calls(log) == calls and again.mapped == 0 and again.cached == report.distinct
    assert again.network.luts == report.network.luts
    assert [t.luts for t in again.tables] == [t.luts for t in report.tables]
    assert [(t.luts, t.depth) for t in map_luts(net, abc=abc, workers=1).tables] == [
        (t.luts, t.depth) for t in report.tables
    ]


def test_saved_results_map_only_what_is_missing(tmp_path):
    """A saved network's results load checked; cost() of the loaded network maps only what it lacks."""
    abc, log = _counting_abc(tmp_path)
    first = cost(_pruned_net(), abc=abc, workers=1)
    loaded = iotable.load(iotable.save(first.network, tmp_path / "net"))
    assert loaded.luts == first.network.luts
    calls = _calls(log)
    second = cost(loaded, abc=abc, workers=1)
    assert _calls(log) == calls and second.mapped == 0 and second.luts == first.luts
    lost = next(iter(loaded.luts))
    partial = dataclasses.replace(loaded, luts=LutResults(r for f, r in loaded.luts.items() if f != lost))
    third = cost(partial, abc=abc, workers=1)  # as a run interrupted before its last table
    assert third.mapped == 1 and _calls(log) == calls + 1 and third.luts == first.luts
    assert cost(loaded, abc=abc, workers=1, k=4).mapped == first.distinct  # another flow maps anew


def test_cost_takes_a_network():
    """cost() refuses what is not a network, and says what maps tables given alone."""
    with pytest.raises(SynthError, match=r"cost: expected a TableNetwork .* received list; map_luts maps tables"):
        cost([], workers=1)


def test_any_executor():
    """A concurrent.futures executor given by the caller runs the mapping (threads here)."""
    tables = [_random_table(9, 1, seed=s) for s in range(3)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        report = map_luts(tables, abc=_abc(), executor=pool)
    assert report.mapped == 3 and [t.luts for t in report.tables] == [map_table(t, abc=_abc()).luts for t in tables]


def test_dask_local_cluster(tmp_path):
    """On a dask LocalCluster of 2 worker processes, results equal the local ones and land in the cache."""
    require("distributed", install='pip install -e ".[dask]"')
    from distributed import Client, LocalCluster

    tables = [_random_table(10, 1, seed=s) for s in range(4)]
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        report = map_luts(tables, abc=_abc(), executor=client, cache_dir=tmp_path)
    assert report.mapped == 4 and len(list(tmp_path.glob("*.json"))) == 4
    local = map_luts(tables, abc=_abc(), cache_dir=tmp_path, workers=1)
    assert local.cached == 4 and [t.luts for t in local.tables] == [t.luts for t in report.tables]


def test_cost_section_example_runs(capsys):
    """The code block of docs/hardware.md's estimate section (under Cost) runs and maps its table to 170 LUTs."""
    _abc()
    page = (Path(__file__).resolve().parent.parent / "docs" / "hardware.md").read_text(encoding="utf-8")
    section = page[page.index("### The estimate") :]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "hardware.md", "exec"), {})
    assert capsys.readouterr().out.startswith("170 4 ")


# -- errors ---------------------------------------------------------------------------------------------------


def test_missing_abc_names_the_debian_package(tmp_path, monkeypatch):
    """Without any ABC program on PATH, the error names the package berkeley-abc."""
    monkeypatch.setenv("PATH", str(tmp_path))
    table = _random_table(8, 1, seed=0)
    with pytest.raises(ABCNotInstalledError, match="berkeley-abc"):
        map_table(table)
    with pytest.raises(ABCNotInstalledError, match="berkeley-abc"):
        map_luts([table], abc=os.fspath(tmp_path / "abc"))


def test_bad_arguments_raise_before_work(tmp_path):
    """Raw outputs, a bad k, script, timeout, executor, progress or dense raise SynthError naming them."""
    raw = IOTable.dense(np.zeros((16, 1)), input_domains=[TWO] * 2)
    table = _random_table(8, 1, seed=0)
    cases = [
        (lambda: map_table(raw), "raw output values"),
        (lambda: map_table(table, k=2), "from 3 to 12"),
        (lambda: map_table(table, script="strash; write_blif x.blif"), "reads, writes"),
        (lambda: map_table(table, timeout=0), "timeout"),
        (lambda: map_luts([table], executor=object()), "dask.distributed.Client"),
        (lambda: map_luts([table], progress="yes"), "progress"),
        (lambda: map_luts([table, "t"]), "item 1 is a str"),
        (lambda: map_luts([table], dense=[table, table]), "dense holds 2"),
        (lambda: map_luts([table], workers=0), "workers"),
    ]
    for call, words in cases:
        with pytest.raises(SynthError, match=words):
            call()
    (tmp_path / "file").write_text("")
    with pytest.raises(CacheError, match="not a folder"):
        map_luts([table], cache_dir=tmp_path / "file")
