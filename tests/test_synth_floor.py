"""effort="floor": each table mapped under several input orders and ABC scripts, the smallest checked netlist kept."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import iotable.synth.floor
from iotable import Domain, IOTable
from iotable.errors import ABCError, IOTableWarning, NetlistMismatchError, SynthError
from iotable.lutnet import LutNetlist, bit_function, result_name
from iotable.synth import abc_version, check_table, map_luts, map_table
from iotable.synth.abcrun import resolve_script
from iotable.synth.floor import ORDERS, floor_script

from .optional import require_program

BIT = Domain.uniform(1)
TWO = Domain.uniform(2)
K = 3


def _abc() -> str:
    require_program("berkeley-abc", package="berkeley-abc")
    return "berkeley-abc"


def _greater_reversed() -> IOTable:
    """``a > b`` of two 4-bit numbers, as 8 one-bit inputs given least significant bit first (b's, then a's):
    the given order is a poor one for ABC's BDD, its reverse (most significant first) a good one."""
    rows = []
    for x in itertools.product((0, 1), repeat=8):
        natural = x[::-1]  # a3 a2 a1 a0 b3 b2 b1 b0
        a, b = int("".join(map(str, natural[:4])), 2), int("".join(map(str, natural[4:])), 2)
        rows.append([int(a > b)])
    return IOTable.dense(rows, input_domains=[BIT] * 8, output_domain=BIT)


def _random(seed: int) -> IOTable:
    """A dense table of random 2-bit codes over three 2-bit inputs (6 address bits)."""
    rng = np.random.default_rng(seed)
    return IOTable.dense(rng.integers(0, 4, (64, 1)), input_domains=[TWO] * 3, output_domain=TWO)


def _floor_file(folder: Path, table: IOTable) -> Path:
    """The cache file of ``table``'s floor for k=K and the default script."""
    key = bit_function(table, what="test").key()
    script = floor_script(resolve_script(None, K, what="test"), K)
    return folder / result_name(key, K, script, abc_version(_abc()))


def test_the_floor_is_at_most_the_single_mapping_where_order_matters():
    """On a table whose good input order is the reversed one, the floor has fewer LUTs than the single mapping."""
    table = _greater_reversed()
    fast = map_table(table, k=K, abc=_abc())
    floor = map_table(table, k=K, abc=_abc(), effort="floor")
    assert floor.luts < fast.luts
    assert floor.attempts[0] == fast.luts  # the first attempt is what "fast" maps
    assert floor.attempts[ORDERS.index("reversed")] < fast.luts
    assert floor.luts == min(floor.attempts)
    assert fast.strategy is None and fast.attempts == () and fast.spread is None


def test_the_winner_passes_the_row_check_with_its_inputs_in_the_table_order():
    """The winning netlist reads the table's own bit names in the table's order and computes it on every row;
    the same netlist with two inputs swapped (a permutation not undone) fails the check."""
    table = _greater_reversed()
    floor = map_table(table, k=K, abc=_abc(), effort="floor")
    assert not floor.strategy.startswith("given order")
    check_table(floor.netlist, table, k=K)
    names = bit_function(table, what="test").input_names()
    assert list(floor.netlist.inputs) == [n for n in names if n in floor.netlist.inputs]
    swapped = floor.netlist.blif.replace("x0_0", "@").replace("x7_0", "x0_0").replace("@", "x7_0")
    with pytest.raises(NetlistMismatchError, match="does not compute the table"):
        check_table(LutNetlist.from_blif(swapped), table, k=K)


def test_a_partial_table_is_checked_on_its_care_rows_in_every_order():
    """A partial table's don't-cares are filled after each permutation; the floor computes every care row."""
    dense = _random(3)
    keep = np.arange(0, 64, 3)
    partial = IOTable(dense.inputs[keep], dense.outputs[keep], input_domains=dense.input_domains, output_domain=TWO)
    floor = map_table(partial, k=K, abc=_abc(), effort="floor")
    check_table(floor.netlist, partial, k=K)
    assert floor.luts == min(floor.attempts) and floor.completion == "filled"


def test_the_report_names_the_strategy_and_the_spread(tmp_path):
    """Each result names its winning attempt and its attempts' spread, the report sums them, the cache keeps
    them; a table of at most k bits is written directly (strategy "direct")."""
    tables = [
        _greater_reversed(),
        _random(1),
        IOTable.dense([[0], [1], [1], [0]], input_domains=[BIT] * 2, output_domain=BIT),
    ]
    report = map_luts(tables, k=K, abc=_abc(), effort="floor", cache_dir=tmp_path, workers=1, progress=False)
    assert report.effort == "floor"
    big, small = report.tables[0], report.tables[2]
    low, median, high = big.spread
    assert low == big.luts <= median <= high
    assert big.strategy in {
        f"{o} order: {s}" for o in ORDERS for s in report.script.split("; scripts ")[1].split(" | ")
    }
    assert (small.strategy, small.attempts, small.method) == ("direct", (1,), "direct")
    assert report.spread == (
        sum(t.spread[0] for t in report.tables),
        sum(t.spread[1] for t in report.tables),
        sum(t.spread[2] for t in report.tables),
    )
    assert report.spread[0] == report.luts
    assert f"min {report.spread[0]}" in report.summary()
    record = json.loads(_floor_file(tmp_path, tables[0]).read_text())
    assert record["strategy"] == big.strategy and record["attempts"] == list(big.attempts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entries are trusted
        again = map_luts(tables, k=K, abc=_abc(), effort="floor", cache_dir=tmp_path, workers=1, progress=False)
    assert again.cached == 3 and [t.strategy for t in again.tables] == [t.strategy for t in report.tables]
    assert again.spread == report.spread


def test_the_cache_key_separates_efforts(tmp_path):
    """A fast result and a floor of the same table are two cache entries; neither is read for the other."""
    table = _greater_reversed()
    fast = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, progress=False)
    floor = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, progress=False, effort="floor")
    assert (fast.mapped, floor.mapped, floor.cached) == (1, 1, 0)
    assert floor.luts < fast.luts and len(list(tmp_path.iterdir())) == 2
    again = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, progress=False)
    assert again.cached == 1 and again.luts == fast.luts and again.tables[0].strategy is None


def _flip_mask_bit(blif: str) -> str:
    """``blif`` with one bit of the output LUT's mask flipped: the first input pattern its (on-set) cover leaves
    at 0 is added to the cover."""
    lines = blif.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(".names") and ln.split()[-1].startswith("y"))
    width = len(lines[at].split()) - 2
    cubes = list(itertools.takewhile(lambda ln: not ln.startswith("."), lines[at + 1 :]))
    assert all(c.endswith(" 1") for c in cubes)  # an on-set cover, as ABC writes it

    def covered(bits: str) -> bool:
        return any(all(c in ("-", b) for c, b in zip(cube.split()[0], bits)) for cube in cubes)

    off = next("".join(p) for p in itertools.product("01", repeat=width) if not covered("".join(p)))
    lines.insert(at + 1, f"{off} 1")
    return "\n".join(lines) + "\n"


TAMPERS: dict[str, tuple[Any, str]] = {
    "a LUT mask bit flipped": (lambda r: {**r, "blif": _flip_mask_bit(r["blif"])}, "does not compute"),
    "an unknown strategy": (lambda r: {**r, "strategy": "best order: magic"}, "strategy is"),
    "attempts below the netlist": (lambda r: {**r, "attempts": [*r["attempts"], r["luts"] - 1]}, "attempts is"),
    "more attempts than tried": (lambda r: {**r, "attempts": r["attempts"] * 2}, "attempts is"),
    "attempts not counts": (lambda r: {**r, "attempts": ["1"]}, "attempts"),
    "no strategy": (lambda r: {f: v for f, v in r.items() if f not in ("strategy", "attempts")}, "lacks strategy"),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_a_tampered_floor_entry_is_mapped_again(tmp_path, tamper):
    """A cached floor whose winner, strategy or attempts were edited is refused, with a warning, and mapped again."""
    table = _greater_reversed()
    first = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, effort="floor", progress=False)
    path = _floor_file(tmp_path, table)
    change, words = TAMPERS[tamper]
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    with pytest.warns(IOTableWarning, match=words):
        again = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, effort="floor", progress=False)
    assert again.mapped == 1 and again.tables[0].luts == first.tables[0].luts
    assert json.loads(path.read_text())["strategy"] == first.tables[0].strategy


def test_a_fast_entry_with_a_strategy_is_refused(tmp_path):
    """A single mapping's entry never holds a floor's strategy and attempts (a floor copied under its name)."""
    table = _greater_reversed()
    map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, progress=False)
    (path,) = tmp_path.iterdir()
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "strategy": "direct", "attempts": [record["luts"]]}))
    with pytest.warns(IOTableWarning, match="maps once"):
        again = map_luts([table], k=K, abc=_abc(), cache_dir=tmp_path, workers=1, progress=False)
    assert again.mapped == 1 and again.tables[0].strategy is None


def test_the_floor_runs_on_an_executor():
    """Floors go through the executor given, and give the same results as in this process."""
    tables = [_greater_reversed(), _random(2)]
    here = map_luts(tables, k=K, abc=_abc(), effort="floor", workers=1, progress=False)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        there = map_luts(tables, k=K, abc=_abc(), effort="floor", executor=pool, progress=False)
    assert [(t.luts, t.strategy, t.attempts) for t in here.tables] == [
        (t.luts, t.strategy, t.attempts) for t in there.tables
    ]


def test_a_failing_extra_script_is_left_out_and_a_failing_first_one_raised(monkeypatch):
    """An extra script whose ABC run fails drops its attempts from the floor; the first script failing raises."""
    table = _greater_reversed()
    full = map_table(table, k=K, abc=_abc(), effort="floor")
    broken = "collapse; muxes; strash; if -K {k}; &put"  # &put without a & network: ABC writes no netlist
    monkeypatch.setattr(iotable.synth.floor, "FLOOR_SCRIPTS", (*iotable.synth.floor.FLOOR_SCRIPTS, broken))
    partial = map_table(table, k=K, abc=_abc(), effort="floor")
    assert partial.attempts == full.attempts and partial.luts == full.luts
    with pytest.raises(ABCError, match="given order"):
        map_table(table, k=K, abc=_abc(), effort="floor", script=broken)


@pytest.mark.parametrize("effort", ["best", "", None, 1, "FLOOR"])
def test_effort_is_validated(effort):
    """An effort other than 'fast' or 'floor' is refused before any work, naming both."""
    with pytest.raises(SynthError, match="effort must be one of 'fast', 'floor'"):
        map_luts([_random(0)], effort=effort, abc=_abc())
    with pytest.raises(SynthError, match="effort must be one of"):
        map_table(_random(0), effort=effort, abc=_abc())
