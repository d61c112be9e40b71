"""``python -m benchmarks.arith``: what arithmetic costs in LUT6, estimated and mapped by ABC, and what it saves
against tables.

Sections:

- ``adders``: popcounts of 16, 64, 128 and 256 bits; weighted sums of 8 codes of 4 bits (all ones, small
  mixed weights, powers of two, odd weights).
- ``argmax``: 10 codes of 8 bits (and 4 bits, and 100 of 7 bits).
- ``thresholds``: a 12-bit code into 2 and 3 bits (3 and 7 thresholds at random places), an 8-bit and a
  16-bit one into 3 bits.
- ``kanele``: KANELE's Wine neuron, a sum of 13 per-edge codes of 6 to 8 bits then a 3-bit quantizer: the
  one big table (LogicNets' formula; refused by iotable), the tree of pairwise add tables and its quantizer
  table (the formula per table), against the sum and threshold nodes (estimate and ABC).
- ``dwn``: DWN's GroupSum on MNIST, 10 classes of 100 bits each then the argmax: one table per class
  (formula) against 10 popcounts and a comparator tree.

Every function is mapped by :func:`iotable.synth.map_function` (the pinned ``ARITH_SCRIPT``) and its netlist
checked against the node kind's kernel (exhaustively up to 16 input bits, on random codes beyond). Options:
``--only NAME ...``, ``--json FILE``. Counts are those of the pinned ABC flow, printed with its version; a
vendor tool with carry chains packs adders differently (the estimate models that).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import iotable
from iotable.lutcount import lut_estimate
from iotable.synth import ARITH_SCRIPT, ArithFunction, abc_version, map_function

SECTIONS = ("adders", "argmax", "thresholds", "kanele", "dwn")


def _print(text: str = "") -> None:
    print(text, flush=True)


def formula(input_bits: int, output_bits: int) -> int:
    """LogicNets' formula for a table of any width, in Python integers (``lut_estimate`` stops at 67 bits)."""
    if input_bits <= 61 + 6:
        return int(lut_estimate(input_bits, output_bits))
    return output_bits * (2 ** (input_bits - 4) - (-1) ** input_bits) // 3


def measured(name: str, fn: ArithFunction) -> dict[str, Any]:
    """One function: its estimate, ABC's LUTs and depth, the seconds of mapping and checking."""
    start = time.perf_counter()
    result = map_function(fn)
    seconds = time.perf_counter() - start
    row = {
        "case": name,
        "input_bits": fn.input_bits,
        "output_bits": fn.output_bits,
        "estimate": fn.estimate(),
        "luts": result.luts,
        "depth": result.depth,
        "seconds": round(seconds, 2),
    }
    _print(
        f"  {name:<44} {fn.input_bits:>5} {fn.output_bits:>4} {row['estimate']:>9} {result.luts:>6} "
        f"{result.depth:>6} {seconds:>7.2f}"
    )
    return row


def _header(title: str) -> None:
    _print(f"\n{title}")
    _print(f"  {'case':<44} {'in':>5} {'out':>4} {'estimate':>9} {'ABC':>6} {'depth':>6} {'seconds':>7}")


def popcount(n: int) -> ArithFunction:
    return ArithFunction("sum", (2,) * n, n.bit_length(), weights=(1,) * n)


def weighted(weights: tuple[int, ...], bits: int = 4) -> ArithFunction:
    """A sum of codes of ``bits`` bits times ``weights``, offset to make every result a code."""
    top = (1 << bits) - 1
    low = sum(min(w, 0) * top for w in weights)
    high = sum(max(w, 0) * top for w in weights)
    width = max(1, (high - low).bit_length())
    return ArithFunction("sum", (1 << bits,) * len(weights), width, weights=weights, constant=-low)


def adders() -> list[dict[str, Any]]:
    _header("adder trees")
    rows = [measured(f"popcount of {n} bits", popcount(n)) for n in (16, 64, 128, 256)]
    for label, weights in (
        ("ones", (1,) * 8),
        ("mixed (1, -2, 3, 5, -7, 2, 1, -1)", (1, -2, 3, 5, -7, 2, 1, -1)),
        ("powers of two (1, 2, 4, ..., 128)", tuple(1 << i for i in range(8))),
        ("odd (3, 5, 7, 9, 11, 13, 15, 17)", (3, 5, 7, 9, 11, 13, 15, 17)),
    ):
        rows.append(measured(f"8 x 4-bit, weights {label}", weighted(weights)))
    return rows


def argmax() -> list[dict[str, Any]]:
    _header("comparator trees (argmax)")
    return [
        measured(f"argmax of {n} x {b}-bit", ArithFunction("argmax", (1 << b,) * n, max(1, (n - 1).bit_length())))
        for n, b in ((10, 8), (10, 4), (100, 7))
    ]


def _steps(bits: int, count: int) -> ArithFunction:
    """A quantizer of a ``bits``-bit code into ``count + 1`` levels at random thresholds (a batch norm folded
    in puts them anywhere; evenly spread ones at powers of two would be the code's top bits, wires)."""
    rng = np.random.default_rng(bits * 100 + count)
    thresholds = tuple(sorted(int(t) for t in rng.choice(np.arange(1, 1 << bits), count, replace=False)))
    return ArithFunction("threshold", (1 << bits,), max(1, count.bit_length()), thresholds=thresholds)


def thresholds() -> list[dict[str, Any]]:
    _header("thresholds")
    return [measured(f"{b}-bit code, {t} thresholds", _steps(b, t)) for b, t in ((12, 3), (12, 7), (8, 7), (16, 7))]


#: KANELE's Wine neuron: 13 inputs, each edge's output code of 6 to 8 bits.
WINE_EDGE_BITS = (6, 7, 8, 6, 7, 8, 6, 7, 8, 6, 7, 8, 7)


def kanele() -> dict[str, Any]:
    _header("KANELE Wine neuron: 13 edge codes of 6-8 bits summed, then a 3-bit quantizer")
    radices = tuple(1 << b for b in WINE_EDGE_BITS)
    top = sum(r - 1 for r in radices)
    width = top.bit_length()
    total = ArithFunction("sum", radices, width, weights=(1,) * len(radices))
    step = ArithFunction("threshold", (top + 1,), 3, thresholds=tuple((i + 1) * (top + 1) // 8 for i in range(7)))
    hybrid = [measured("sum of the 13 edges", total), measured("3-bit quantizer of the sum", step)]
    one_table = formula(sum(WINE_EDGE_BITS), 3)
    tree, tree_rows = _pairwise_tables(list(WINE_EDGE_BITS))
    tree += formula(width, 3)  # the quantizer as a table of the whole sum
    tree_rows += 1 << width
    estimate = sum(r["estimate"] for r in hybrid)
    luts = sum(r["luts"] for r in hybrid)
    _print(f"  all tables, one table of {sum(WINE_EDGE_BITS)} bits (formula):   {one_table:.3e} LUT6")
    _print(f"  all tables, pairwise add tables + quantizer table:  {tree:,} LUT6 ({tree_rows:,} rows)")
    _print(f"  sum + threshold nodes:                             {estimate} LUT6 estimated, {luts} by ABC")
    return {"rows": hybrid, "one_table": one_table, "pairwise_tables": tree, "pairwise_rows": tree_rows}


def _pairwise_tables(bits: list[int]) -> tuple[int, int]:
    """LUT6 (formula) and rows of a tree of tables each adding two codes (widths ``bits``), narrowest first."""
    luts = rows = 0
    widths = sorted(bits)
    while len(widths) > 1:
        a, b = widths.pop(0), widths.pop(0)
        out = max(a, b) + 1
        luts += formula(a + b, out)
        rows += 1 << (a + b)
        widths = sorted([*widths, out])
    return luts, rows


def dwn() -> dict[str, Any]:
    _header("DWN GroupSum on MNIST: 10 classes of 100 bits, popcounts, argmax")
    count = popcount(100)
    best = ArithFunction("argmax", (101,) * 10, 4)
    rows = [measured("popcount of 100 bits (one class)", count), measured("argmax of 10 x 7-bit", best)]
    estimate = 10 * rows[0]["estimate"] + rows[1]["estimate"]
    luts = 10 * rows[0]["luts"] + rows[1]["luts"]
    tables = 10 * formula(100, 7)
    _print(f"  all tables, one table of 100 bits per class (formula): {tables:.3e} LUT6 (refused by iotable)")
    _print(f"  10 popcounts + argmax:                                 {estimate} LUT6 estimated, {luts} by ABC")
    return {"rows": rows, "tables": tables, "estimate": estimate, "luts": luts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.arith", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help=f"sections: {' '.join(SECTIONS)}")
    parser.add_argument("--json", default=None, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    chosen = args.only or list(SECTIONS)
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    _print(f"iotable {iotable.__version__}; {abc_version()}; script {ARITH_SCRIPT!r} (k=6)")
    runs = {"adders": adders, "argmax": argmax, "thresholds": thresholds, "kanele": kanele, "dwn": dwn}
    report = {name: runs[name]() for name in SECTIONS if name in chosen}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
