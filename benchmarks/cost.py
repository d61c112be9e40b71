"""``python -m benchmarks.cost``: what LogicNets-style networks cost in LUTs, and how fast iotable maps them.

Sections:

- ``sizes``: one random dense table (2 output bits) at 6, 8, 12 and 16 input bits through ``map_table``:
  wall time, LUTs, the formula.
- ``jsc-s``, ``jsc-m``, ``jsc-l``: the workloads of :mod:`benchmarks.workloads`, precomputed with iotable,
  then mapped end to end by ``map_luts`` (no cache): per layer and in total the formula, ABC's LUTs and
  depth; wall time on 1 worker (in process) and 2 workers (a process pool, and a dask ``LocalCluster`` of 2
  single-threaded worker processes, cluster start-up not counted); LogicNets' published Vivado counts beside.
- ``digits``: the digits MLP of ``examples/digits_mlp.py``, trained, observed on its training split,
  restricted and mapped with ``dense=``: what the don't-cares save.

Options: ``--quick`` (sizes up to 12 bits, jsc-s and jsc-m on 2 pool workers, digits with 2 epochs: a smoke
run), ``--only NAME ...``, ``--json FILE``. The figures are this machine's; counts are estimates of the
pinned ABC flow (they change with the script and ABC's version, both printed), not Vivado's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import iotable
from iotable import Domain, IOTable
from iotable.synth import abc_version, lut_estimate, map_luts, map_table

from .workloads import build

#: LUT counts LogicNets publishes for its Vivado builds (README of Xilinx/logicnets).
PUBLISHED = {"jsc-s": 232, "jsc-m": 14_576, "jsc-l": 38_925}
#: The targets on 2 cores, in seconds (2 workers).
TARGETS = {"jsc-m": 120.0, "jsc-l": 600.0}


def _print(text: str = "") -> None:
    print(text, flush=True)


def sizes(bits: list[int]) -> list[dict[str, Any]]:
    """One random dense table per size (2-bit inputs, 2 output bits) through map_table, timed."""
    rows = []
    for n in bits:
        rng = np.random.default_rng(n)
        table = IOTable.dense(
            rng.integers(0, 4, (2**n, 1)), input_domains=[Domain.uniform(2)] * (n // 2), output_domain=Domain.uniform(2)
        )
        start = time.perf_counter()
        mapped = map_table(table)
        seconds = time.perf_counter() - start
        rows.append(
            {
                "input_bits": n,
                "luts": mapped.luts,
                "estimate": mapped.estimate,
                "depth": mapped.depth,
                "seconds": round(seconds, 3),
                "method": mapped.method,
            }
        )
        _print(
            f"  {n:2d} bits -> 2 bits: {mapped.luts:5d} LUTs (formula {mapped.estimate}), depth {mapped.depth}, "
            f"{seconds:.2f} s ({mapped.method})"
        )
    return rows


def _dask_run(net: Any, workers: int) -> tuple[float, Any]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(workers)
        start = time.perf_counter()
        report = map_luts(net, executor=client, progress=False)
        return time.perf_counter() - start, report


def network(name: str, *, runs: list[tuple[str, int]]) -> dict[str, Any]:
    """Precompute workload ``name`` and map it with each (executor kind, workers) of ``runs``."""
    start = time.perf_counter()
    net = build(name).precompute()
    _print(f"{name}: {net!r} (precompute {time.perf_counter() - start:.1f} s)")
    times: dict[str, float] = {}
    report = None
    for kind, workers in runs:
        if kind == "dask":
            try:
                seconds, report = _dask_run(net, workers)
            except ImportError:
                _print("  dask: not installed (pip install -e '.[dask]'), skipped")
                continue
        else:
            begin = time.perf_counter()
            report = map_luts(net, workers=workers, progress=False)
            seconds = time.perf_counter() - begin
        times[f"{kind}-{workers}"] = round(seconds, 2)
        where = "1 worker, in process" if kind == "pool" and workers == 1 else f"{kind} of {workers} workers"
        _print(f"  {where}: {seconds:.1f} s")
    assert report is not None
    _print("\n".join("  " + line for line in report.summary().splitlines()))
    _print(
        f"  published Vivado LUTs (LogicNets): {PUBLISHED[name]:,}; this flow: {report.luts:,}; "
        f"formula: {report.estimate:,}"
    )
    target = TARGETS.get(name)
    best = min((v for k, v in times.items() if k.endswith("-2")), default=None)
    if target is not None and best is not None:
        verdict = "met" if best <= target else "NOT met"
        _print(f"  target on 2 workers: {target:.0f} s, {verdict} ({best:.1f} s)")
    slowest = max(report.tables, key=lambda t: t.seconds)
    _print(
        f"  slowest table in ABC: {slowest.seconds:.2f} s ({slowest.input_bits} bits); ABC time in all: "
        f"{sum(t.seconds for t in report.tables):.1f} s over {report.distinct} distinct table(s)"
    )
    return {
        "workload": name,
        "tables": len(report.tables),
        "distinct": report.distinct,
        "luts": report.luts,
        "estimate": report.estimate,
        "depth": report.depth,
        "published_vivado_luts": PUBLISHED[name],
        "seconds": times,
        "abc_seconds": round(sum(t.seconds for t in report.tables), 2),
        "layers": {n: vars(c) for n, c in report.layers.items()},
    }


def digits(*, epochs: int) -> dict[str, Any]:
    """The digits MLP: train, precompute, observe on the training split, restrict, map with dense=."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    sys.path.insert(0, str(examples))
    import _digits
    import digits_mlp
    import torch

    torch.manual_seed(0)
    x_train, y_train, _, _ = _digits.load(image=False)
    model = digits_mlp.build_model()
    _digits.train(model, x_train, y_train, epochs=epochs)
    model.eval()
    net = iotable.precompute(model, input_domain=_digits.INPUT_DOMAIN, example_input=x_train[:1], progress=False)
    observed = iotable.observe(net, x_train)
    small = net.restrict(observed, min_count=1)
    kept, total = sum(t.rows for t in small.tables), sum(t.rows for t in net.tables)
    start = time.perf_counter()
    report = map_luts(small, dense=net, workers=2, progress=False)
    seconds = time.perf_counter() - start
    _print(
        f"digits MLP ({epochs} epochs): rows kept {kept:,} of {total:,} ({kept / total:.1%}); mapped in {seconds:.1f} s"
    )
    _print("\n".join("  " + line for line in report.summary().splitlines()))
    filled = sum(t.completion == "filled" for t in report.tables)
    _print(f"  {filled} of {len(report.tables)} tables use iotable's fill, the others their dense netlist (smaller)")
    return {
        "rows_kept": kept,
        "rows": total,
        "luts": report.luts,
        "dense_luts": report.dense_luts,
        "reduction": report.reduction,
        "estimate": report.estimate,
        "seconds": round(seconds, 2),
        "layers": {n: vars(c) for n, c in report.layers.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, jsc-s/m, 2 epochs")
    parser.add_argument("--only", nargs="*", default=None, help="sections: sizes jsc-s jsc-m jsc-l digits")
    parser.add_argument("--json", default=None, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    sections = args.only or (
        ["sizes", "jsc-s", "jsc-m", "digits"] if args.quick else ["sizes", "jsc-s", "jsc-m", "jsc-l", "digits"]
    )
    runs = [("pool", 2)] if args.quick else [("pool", 1), ("pool", 2), ("dask", 2)]
    report: dict[str, Any] = {
        "abc": abc_version(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "formula_12_2": lut_estimate(12, 2),
    }
    _print(f"{report['abc']}; {report['cores']} core(s); load {report['load']}")
    if "sizes" in sections:
        _print("sizes (map_table, one table each):")
        report["sizes"] = sizes([6, 8, 12] if args.quick else [6, 8, 12, 16])
    for name in ("jsc-s", "jsc-m", "jsc-l"):
        if name in sections:
            report[name] = network(name, runs=runs)
    if "digits" in sections:
        report["digits"] = digits(epochs=2 if args.quick else 10)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
