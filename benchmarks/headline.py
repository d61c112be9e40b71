"""The whole loop for one model, stage by stage: ``python -m benchmarks.headline`` (``--workload``, ``--target``,
``--seeds``, ``--vectors``, ``--pipeline-luts``, ``--cells``, ``--cache``, ``--json FILE``).

model → tables (``iotable.precompute``) → Verilog (``iotable.hdl.export``, the tables as ``case`` files) →
``--vectors`` random vectors under Verilator equal to ``net.run`` (its memory model of the tables) → LUTs and
Fmax after routing (``iotable.hdl.implement`` with ``tables="mapped"``: every table's ABC netlist, checked row by
row, placed as the target family's LUT cells; ``--seeds`` placements; ``verify``: the synthesized and the routed
netlists simulated against the design's vectors). With ``--cells`` the Verilog is exported mapped as the
family's cells and Verilator compiles those (slower to build: every LUT a cell instance), as does
``--pipeline-luts`` (registers inside the mapped tables).

Each stage's wall-clock seconds, and the whole loop's; the peak memory of this process and of the largest tool
it ran (resident set, from ``getrusage``); the LUTs placed against ABC's count of the live tables
(``iotable.synth.cost`` with the target's K) and the LUTs outside the tables (registers' enables, handshake,
output logic). The ABC cache (``--cache``) is cold unless the folder holds an earlier run's tables; the
Verilator build cache is a fresh folder each run, so its compile time is counted.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import iotable
from iotable.hdl import export, implement, simulate

from . import workloads


def _peak_mib() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tools = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"python_mib": round(own, 1), "largest_tool_mib": round(tools, 1)}


def _stage(stages: dict[str, float], name: str, fn: Any) -> Any:
    start = time.perf_counter()
    result = fn()
    stages[name] = round(time.perf_counter() - start, 2)
    print(f"  {name}: {stages[name]:.1f} s")
    return result


def loop(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The loop for ``options.workload`` on ``options.target``; the row it reports."""
    stages: dict[str, float] = {}
    family = options.target.split("-")[0]
    k = 6 if family == "xilinx" else 4
    cache = Path(options.cache) if options.cache else work / "abc"
    print(f"{options.workload} on {options.target} ({options.seeds} seeds, {options.vectors} vectors):")
    workload = _stage(stages, "model", lambda: workloads.build(options.workload))
    net = _stage(stages, "tables", workload.precompute)
    cells = options.cells or options.pipeline_luts > 0
    mapped: dict[str, Any] = {"tables": "mapped", "k": k, "primitives": family, "cache_dir": cache}
    mapped["pipeline_luts"] = options.pipeline_luts
    design = _stage(
        stages, "verilog",
        lambda: export(
            net, work / "design", top="net", vectors=max(options.verify, 16), table_benches=False,
            **(mapped if cells else {}),
        ),
    )  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    domain = workload.input_domain
    x = torch.randint(0, len(domain), (options.vectors, *workload.example_input.shape[1:]), generator=generator)

    def simulated() -> bool:
        out = simulate(design, x, codes=True, simulator="verilator", cache_dir=work / "verilator", timeout=3600)
        return bool(torch.equal(out, design.reference(x, codes=True)))

    equal = _stage(stages, "simulation", simulated) if options.vectors else True
    if not equal:
        raise SystemExit(f"{options.workload}: Verilator's outputs differ from net.run")
    result = _stage(
        stages, "implement",
        lambda: implement(
            design, target=options.target, seeds=options.seeds, verify=options.verify, timeout=3600,
            tables=None if cells else "mapped", placer=options.placer,
        ),
    )  # fmt: skip
    total = round(sum(stages.values()), 1)
    cost = iotable.synth.cost(net, k=k, cache_dir=cache, progress=False)
    print(result.summary())
    row = {
        "workload": options.workload, "target": options.target, "seeds": list(result.seeds), "placer": result.placer,
        "pipeline_luts": options.pipeline_luts, "cells": cells, "vectors": options.vectors, "stages_s": stages,
        "total_s": total,
        "luts": result.luts, "abc_luts": cost.luts, "luts_per_abc": round(result.luts / max(cost.luts, 1), 3),
        "flip_flops": result.flip_flops, "fmax_mhz": result.fmax_mhz, "fmax_range_mhz": result.fmax_range,
        "latency_cycles": design.latency, "verified": [[v.netlist, v.vectors, v.simulator] for v in result.verified],
        "tools": dict(result.tools), "peak": _peak_mib(),
    }  # fmt: skip
    print(json.dumps(row, indent=1))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.headline", description=__doc__)
    parser.add_argument("--workload", default="jsc-m", help="a benchmarks.workloads name (default: %(default)s)")
    parser.add_argument("--target", default="ecp5-85k", help="an implement target (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="placement seeds (default: %(default)s)")
    parser.add_argument("--placer", default="heap", help="nextpnr's placer: heap, static, sa (default: %(default)s)")
    parser.add_argument("--vectors", type=int, default=200_000, help="Verilator's vectors (0: none; %(default)s)")
    parser.add_argument("--verify", type=int, default=64, help="vectors run on the netlists (default: %(default)s)")
    parser.add_argument("--pipeline-luts", type=int, default=0, help="registers every N LUT levels (0: none)")
    parser.add_argument("--cells", action="store_true", help="export and simulate the tables as device cells")
    parser.add_argument("--cache", default=None, help="a folder for ABC's mapped tables (default: a fresh one)")
    parser.add_argument("--json", default=None, help="also write the row as JSON")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="iotable-bench-headline-") as tmp:
        row = loop(options, Path(tmp))
    if options.json:
        Path(options.json).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
