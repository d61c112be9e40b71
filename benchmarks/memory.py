"""Peak memory of one ``iotable.precompute``, measured in a fresh process.

Run as ``python -m benchmarks.memory WORKLOAD [--threads N] [--budget MIB]``; prints one JSON object. The
process imports torch and iotable and builds the workload; then one precompute runs. ``peak_bytes`` is the
peak of anonymous resident memory (arrays, tensors, Python objects) above its level before the
precompute, sampled by :class:`~benchmarks.measure.AnonymousPeak`. ``table_bytes`` is what the tables
themselves hold.

``maxrss_delta_bytes``, the growth of ``ru_maxrss``, is reported too but not used: it counts the total
resident set, including the pages of torch's shared libraries a run touches first, and Linux starts a
process's ``ru_maxrss`` at the size of the process that forked it, so under a large parent (the runner)
it hides the precompute's peak entirely.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time

from . import workloads
from .measure import AnonymousPeak, configure_threads, status_kib

__all__ = ["main", "peak_of_precompute"]


def _table_bytes(result: object) -> int:
    tables = result.tables  # TableNetwork and LayerTables both list their tables
    return int(sum(t.outputs.nbytes for t in tables))


def peak_of_precompute(name: str, *, budget: int) -> dict[str, object]:
    """Build ``name``, then measure one precompute under ``memory_budget=budget`` (call in a fresh process)."""
    workload = workloads.build(name)
    gc.collect()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_before = status_kib("VmRSS")
    with AnonymousPeak() as anonymous:
        start = time.perf_counter()
        result = workload.precompute(memory_budget=budget)
        seconds = time.perf_counter() - start
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "workload": name,
        "seconds": seconds,
        "rows": int(sum(t.rows for t in result.tables)),
        "peak_bytes": anonymous.bytes,
        "maxrss_delta_bytes": max(0, maxrss - max(maxrss_before, rss_before or 0)) * 1024,
        "table_bytes": _table_bytes(result),
        "memory_budget": budget,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--budget", type=int, default=256, help="memory_budget in MiB (default 256)")
    args = parser.parse_args(argv)
    configure_threads(args.threads)
    json.dump(peak_of_precompute(args.workload, budget=args.budget * 2**20), sys.stdout)
    print()


if __name__ == "__main__":
    main()
