"""The heavy stages on a dask cluster, 1 worker against 2 in the same run: ``python -m benchmarks.cluster``
(``--quick``, ``--units N``, ``--vectors N``, ``--seeds N``, ``--json FILE``).

Three stages, each run here (no executor), then on a ``distributed.LocalCluster`` of one worker and on one of
two workers (processes, one thread each), every result checked equal to the run here:

- **precompute** of a wide network: one LogicNets-style sparse layer of ``--units`` units (fan-in 6 x 2 bits,
  4,096 rows a unit) enumerated through the module itself (``fast_path=False``: the black box, the path whose
  rows cost enough to want a cluster); every shard's tables come back as results;
- **simulate** of ``--vectors`` random vectors of jsc-s under Verilator (each worker builds the design once);
- **implement** of jsc-s on ``ice40-hx8k`` with ``--seeds`` placements (Debian's yosys and nextpnr-ice40):
  synthesis and the first seed here, the other seeds on the workers.

For each cluster: its start (the processes up; run as ``python -m``, each spawned worker imports this module,
torch and iotable with it) and warm-up (what the tasks import, on every worker: little is left by then), the
cost of one trivial task alone (a round trip) and in a batch of many (the scheduler's per-task cost); for each
stage on it: the wall time, every task's compute time on its worker (dask's task stream) and the bytes moved
(each task's function and arguments, and its result, pickled as dask pickles them; pickling them again to
count them is timed and reported, a cost both cluster runs pay alike).

Then a projection to 64 workers (:func:`project`): the time the stage spends outside its tasks (the 1-worker
wall time less the span of its tasks), plus the longer of the longest task and the tasks' total time over the
workers, plus the scheduler's cost per task, plus every byte through the client's link at 1 Gb/s or 10 Gb/s.
The same model at 1 and 2 workers (the local link taken as free) is printed beside the measured times: how far
to trust it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import iotable
from iotable.hdl import export, implement, simulate

from . import workloads

ROOT = Path(__file__).resolve().parent.parent
#: Workers of the clusters measured, and of the projection.
CLUSTERS = (1, 2)
PROJECTED = 64
#: Links of the projection, in bytes per second.
LINKS = {"1 Gb/s": 1e9 / 8, "10 Gb/s": 10e9 / 8}
TARGET = "ice40-hx8k"
FULL = {"units": 4_000, "vectors": 1_000_000, "seeds": 4, "trivial": 500}
QUICK = {"units": 1_000, "vectors": 20_000, "seeds": 2, "trivial": 100}


def _warm() -> None:
    """Import what the tasks run once on each worker (torch and iotable take seconds to import)."""
    import iotable.hdl
    import iotable.synth
    import iotable.tabulate.shards  # noqa: F401


def _noop(index: int) -> int:
    """A trivial task: what a task costs when its work is nothing."""
    return index


class Metered(concurrent.futures.Executor):
    """A dask ``Client``'s executor that counts the pickled bytes of every task it submits and of each result."""

    def __init__(self, client: Any) -> None:
        from distributed.protocol.pickle import dumps

        self._dumps = dumps
        self._inner = client.get_executor(pure=False)
        self._lock = threading.Lock()
        self.sent: list[int] = []
        self.received: list[int] = []
        self.pickling = 0.0
        self.settled = 0  # futures whose callback has run

    def _count(self, into: list[int], value: Any) -> None:
        start = time.perf_counter()
        size = len(self._dumps(value))
        with self._lock:
            into.append(size)
            self.pickling += time.perf_counter() - start

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self._count(self.sent, (fn, args, kwargs))
        future = self._inner.submit(fn, *args, **kwargs)
        future.add_done_callback(self._returned)
        return future

    def _returned(self, future: concurrent.futures.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._count(self.received, future.result())
        with self._lock:
            self.settled += 1

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every submitted task's result is counted: a future's waiters wake before its callbacks
        run, so a stage can return before the last result is counted."""
        deadline = time.monotonic() + timeout
        while self.settled < len(self.sent) and time.monotonic() < deadline:
            time.sleep(0.01)


@dataclass
class Cluster:
    """A ``LocalCluster`` of ``workers`` processes (one thread each) and its client, with what starting took."""

    workers: int
    folder: Path
    start_s: float = 0.0
    warm_s: float = 0.0
    cluster: Any = None
    client: Any = None

    def __enter__(self) -> Cluster:
        from distributed import Client, LocalCluster

        began = time.perf_counter()
        self.cluster = LocalCluster(
            n_workers=self.workers, threads_per_worker=1, processes=True, dashboard_address=None,
            local_directory=str(self.folder),
        )  # fmt: skip
        self.client = Client(self.cluster)
        self.client.wait_for_workers(self.workers, timeout=120)
        self.start_s = time.perf_counter() - began
        began = time.perf_counter()
        self.client.run(_warm)
        self.warm_s = time.perf_counter() - began
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close(timeout=30)
        self.cluster.close(timeout=30)

    def trivial(self, count: int) -> dict[str, float]:
        """Milliseconds of one trivial task alone (median round trip) and per task in a batch of ``count``."""
        pool = self.client.get_executor(pure=False)
        trips = []
        for index in range(20):
            began = time.perf_counter()
            pool.submit(_noop, index).result()
            trips.append(time.perf_counter() - began)
        began = time.perf_counter()
        futures = [pool.submit(_noop, index) for index in range(count)]
        assert [f.result() for f in futures] == list(range(count))
        batch = time.perf_counter() - began
        return {"round_trip_ms": statistics.median(trips) * 1e3, "per_task_ms": batch / count * 1e3}


# -- the stages ---------------------------------------------------------------------------------------------


@dataclass
class Stage:
    """A stage: its name, what it runs, and ``run(executor)`` returning what must equal the run here."""

    name: str
    what: str
    run: Callable[[Any], Any]
    same: Callable[[Any, Any], bool] = field(default=lambda a, b: bool(a == b))
    #: called before each run, untimed (a fresh model: a model precomputed once keeps its plan)
    prepare: Callable[[], None] = field(default=lambda: None)


def precompute_stage(units: int) -> Stage:
    """The black-box precompute of a wide layer of ``units`` units, a fresh model each call (built untimed)."""
    domain = workloads.signed_domain(2)
    example = torch.zeros(1, workloads.WIDE_INPUTS)
    models: list[Any] = []

    def prepare() -> None:
        models.append(workloads.build_wide_layer(units))

    def run(executor: Any) -> Any:
        model = models.pop()
        net = iotable.precompute(
            model, input_domain=domain, example_input=example, fast_path=False, progress=False, executor=executor
        )
        return net.tables

    return Stage("precompute", f"wide layer of {units:,} units (fan-in 6 x 2 bits), black box", run, prepare=prepare)


def _jsc_s(work: Path) -> Any:
    workload = workloads.build("jsc-s")
    return export(workload.precompute(), work / "jsc-s", top="net", vectors=16, table_benches=False)


def simulate_stage(design: Any, vectors: int, work: Path) -> Stage:
    """``vectors`` random vectors of ``design`` under Verilator, a fresh build folder each call."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (vectors, *design.inputs.shape), generator=generator)
    expected = design.reference(x, codes=True)
    calls = iter(range(1_000))

    def run(executor: Any) -> Any:
        folder = work / f"verilator-{next(calls)}"
        return simulate(design, x, codes=True, simulator="verilator", cache_dir=folder, timeout=3600, executor=executor)

    def same(found: Any, _: Any) -> bool:
        return bool(torch.equal(found, expected))

    return Stage("simulate", f"{vectors:,} vectors of jsc-s under Verilator", run, same)


def implement_stage(design: Any, seeds: int) -> Stage:
    """jsc-s placed on ``TARGET`` with ``seeds`` seeds; its LUTs, flip-flops and each seed's Fmax."""

    def run(executor: Any) -> Any:
        result = implement(design, target=TARGET, seeds=seeds, timeout=3600, executor=executor)
        return result.luts, result.flip_flops, result.seeds

    return Stage("implement", f"jsc-s on {TARGET}, {seeds} seeds (nextpnr-ice40)", run)


def _compute_times(stream: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, stop) of every task's compute in dask's task stream."""
    return [
        (part["start"], part["stop"])
        for task in stream
        for part in task.get("startstops", ())
        if part.get("action") == "compute"
    ]


def on_cluster(stage: Stage, cluster: Cluster) -> tuple[dict[str, Any], Any]:
    """One run of ``stage`` on ``cluster``: its figures and its result."""
    from distributed import get_task_stream

    stage.prepare()
    metered = Metered(cluster.client)
    with get_task_stream(client=cluster.client) as stream:
        began = time.perf_counter()
        result = stage.run(metered)
        wall = time.perf_counter() - began
        metered.settle()
    spans = _compute_times(stream.data)
    tasks = [stop - start for start, stop in spans]
    span = (max(s for _, s in spans) - min(s for s, _ in spans)) if spans else 0.0
    row = {
        "wall_s": wall, "tasks": len(tasks), "task_s": tasks, "span_s": span,
        "sent_bytes": sum(metered.sent), "received_bytes": sum(metered.received), "pickling_s": metered.pickling,
    }  # fmt: skip
    return row, result


# -- the projection -----------------------------------------------------------------------------------------


def project(row: dict[str, Any], *, workers: int, per_task_s: float, link: float | None) -> float:
    """Seconds of a stage on ``workers`` workers from its 1-worker run ``row`` (see the module's docstring);
    ``link``: bytes per second through the client (``None``: free)."""
    tasks = row["task_s"]
    outside = max(0.0, row["wall_s"] - row["span_s"])
    compute = max(max(tasks, default=0.0), sum(tasks) / workers)
    moved = 0.0 if link is None else (row["sent_bytes"] + row["received_bytes"]) / link
    return outside + compute + len(tasks) * per_task_s + moved


# -- the run ------------------------------------------------------------------------------------------------


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - began, result


def measure(sizes: dict[str, int], work: Path) -> dict[str, Any]:
    """Every stage here and on each cluster of :data:`CLUSTERS`; the report."""
    design = _jsc_s(work)
    stages = [
        precompute_stage(sizes["units"]),
        simulate_stage(design, sizes["vectors"], work),
        implement_stage(design, sizes["seeds"]),
    ]
    report: dict[str, Any] = {"sizes": sizes, "clusters": {}, "stages": {}}
    local: dict[str, Any] = {}
    for stage in stages:
        stage.prepare()
        seconds, local[stage.name] = _timed(stage.run, None)
        report["stages"][stage.name] = {"what": stage.what, "local_s": seconds}
        print(f"  {stage.name} here: {seconds:.2f} s", flush=True)
    for workers in CLUSTERS:
        with Cluster(workers, work / f"dask-{workers}") as cluster:
            costs = {"start_s": cluster.start_s, "warm_s": cluster.warm_s, **cluster.trivial(sizes["trivial"])}
            report["clusters"][workers] = costs
            print(f"  {workers} worker(s): started in {cluster.start_s:.2f} s, warm in {cluster.warm_s:.2f} s")
            for stage in stages:
                row, result = on_cluster(stage, cluster)
                if not stage.same(result, local[stage.name]):
                    raise SystemExit(f"{stage.name} on {workers} worker(s): the result differs from the run here")
                report["stages"][stage.name][workers] = row
                print(f"  {stage.name} on {workers} worker(s): {row['wall_s']:.2f} s", flush=True)
    per_task = report["clusters"][CLUSTERS[-1]]["per_task_ms"] / 1e3
    for row in report["stages"].values():
        one, two = row[1], row[2]
        row["ratio"] = one["wall_s"] / two["wall_s"]
        row["model_s"] = {n: project(one, workers=n, per_task_s=per_task, link=None) for n in CLUSTERS}
        row["projected_s"] = {
            name: project(one, workers=PROJECTED, per_task_s=per_task, link=link) for name, link in LINKS.items()
        }
    return report


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def render(report: dict[str, Any]) -> str:
    """The report as text: the clusters' own cost, then per stage the times, tasks, bytes and projection."""
    lines = ["[cluster] LocalCluster, processes of one thread"]
    for workers, c in report["clusters"].items():
        lines.append(
            f"  {workers} worker(s): start {c['start_s']:.2f} s (processes up, torch and iotable imported), warm-up "
            f"{c['warm_s']:.2f} s, one trivial "
            f"task {c['round_trip_ms']:.1f} ms round trip, {c['per_task_ms']:.2f} ms per task in a batch"
        )
    for name, row in report["stages"].items():
        one, two = row[1], row[2]
        lines.append(f"[{name}] {row['what']}")
        lines.append(
            f"  here {row['local_s']:.2f} s; 1 worker {one['wall_s']:.2f} s; 2 workers {two['wall_s']:.2f} s; "
            f"ratio (1 worker / 2) {row['ratio']:.2f}x; 2 workers against here {row['local_s'] / two['wall_s']:.2f}x"
        )
        for workers in CLUSTERS:
            r = row[workers]
            t = r["task_s"] or [0.0]
            lines.append(
                f"  {workers} worker(s): {r['tasks']} tasks, each {min(t):.3f}-{max(t):.3f} s (median "
                f"{statistics.median(t):.3f}, total {sum(t):.2f}), span {r['span_s']:.2f} s; sent "
                f"{_mib(r['sent_bytes'])}, received {_mib(r['received_bytes'])} (counting them took "
                f"{r['pickling_s']:.2f} s)"
            )
        model = ", ".join(f"{n} worker(s) {s:.2f} s" for n, s in row["model_s"].items())
        lines.append(f"  model, free link: {model} (measured above)")
        projected = ", ".join(f"{s:.2f} s at {link}" for link, s in row["projected_s"].items())
        lines.append(f"  projected to {PROJECTED} workers: {projected}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    parser.add_argument("--units", type=int, default=None, help=f"units of the wide layer ({FULL['units']:,})")
    parser.add_argument("--vectors", type=int, default=None, help=f"simulated vectors ({FULL['vectors']:,})")
    parser.add_argument("--seeds", type=int, default=None, help=f"placement seeds ({FULL['seeds']})")
    parser.add_argument("--json", default=None, help="also write the report as JSON")
    options = parser.parse_args(argv)
    sizes = dict(QUICK if options.quick else FULL)
    sizes.update({k: getattr(options, k) for k in ("units", "vectors", "seeds") if getattr(options, k) is not None})
    torch.set_num_threads(1)
    # the workers import iotable (and these benchmarks) from this tree, as this process does
    paths = [str(Path(iotable.__file__).resolve().parent.parent), str(ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    print(f"iotable {iotable.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, {sizes}")
    with tempfile.TemporaryDirectory(prefix="iotable-bench-cluster-") as tmp:
        report = measure(sizes, Path(tmp))
    report["load_average_after"] = os.getloadavg()[0]
    print(render(report))
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
