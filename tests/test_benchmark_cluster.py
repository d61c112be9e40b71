"""The cluster benchmark's parts: its projection, its byte counts, its reading of dask's task stream, and (slow) a
whole quick run on real LocalClusters. Nothing here is timed: the figures live in ``benchmarks/``."""

from __future__ import annotations

import concurrent.futures
import json
import threading

import numpy as np
import pytest
from benchmarks import cluster

from .optional import require, require_program

ROW = {"wall_s": 12.0, "span_s": 10.0, "task_s": [4.0, 2.0, 2.0, 2.0], "sent_bytes": 1_000, "received_bytes": 250}


def test_projection_adds_the_time_outside_the_tasks_their_share_the_scheduler_and_the_link():
    """On a free link and many workers, the longest task bounds the stage; on few, the tasks' total over the
    workers; the scheduler's cost per task and the bytes over the link are added."""
    assert cluster.project(ROW, workers=64, per_task_s=0.0, link=None) == pytest.approx(2.0 + 4.0)
    assert cluster.project(ROW, workers=2, per_task_s=0.0, link=None) == pytest.approx(2.0 + 5.0)
    assert cluster.project(ROW, workers=64, per_task_s=0.5, link=125.0) == pytest.approx(2.0 + 4.0 + 2.0 + 10.0)


def test_projection_of_a_stage_whose_tasks_outlast_its_wall_time_adds_nothing_outside():
    """A span longer than the wall time (clocks of other processes) is not a negative time outside the tasks."""
    late = {**ROW, "span_s": 13.0}
    assert cluster.project(late, workers=64, per_task_s=0.0, link=None) == pytest.approx(4.0)


class _Client:
    """What Metered needs of a dask Client: an executor (threads here)."""

    def __init__(self, pool: concurrent.futures.Executor) -> None:
        self.pool = pool

    def get_executor(self, pure: bool) -> concurrent.futures.Executor:
        assert pure is False
        return self.pool


def _twice(values: np.ndarray) -> np.ndarray:
    return values * 2


def _fail(values: np.ndarray) -> np.ndarray:
    raise ValueError("no result")


def test_metered_counts_the_pickled_bytes_of_each_task_and_result():
    """Each submitted task's function and arguments, and each result, are counted at their pickled size."""
    require("distributed", install='pip install -e ".[dask]"')
    from distributed.protocol.pickle import dumps

    values = np.arange(10_000, dtype=np.int64)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # leaving it waits for the result's callback
        metered = cluster.Metered(_Client(pool))
        assert np.array_equal(metered.submit(_twice, values).result(), values * 2)
        assert np.array_equal(metered.submit(_twice, values[:10]).result(), values[:10] * 2)
    assert metered.sent == [len(dumps((_twice, (values,), {}))), len(dumps((_twice, (values[:10],), {})))]
    assert metered.sent[0] > values.nbytes > metered.sent[1]
    assert sorted(metered.received) == sorted([len(dumps(values * 2)), len(dumps(values[:10] * 2))])


def test_metered_counts_no_result_for_a_failed_task():
    """A task that raises returns nothing over the network: no received bytes are counted for it."""
    require("distributed", install='pip install -e ".[dask]"')
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        metered = cluster.Metered(_Client(pool))
        with pytest.raises(ValueError, match="no result"):
            metered.submit(_fail, np.zeros(4)).result()
    assert len(metered.sent) == 1 and metered.received == []


def test_compute_times_are_read_from_the_compute_steps_of_the_task_stream():
    """Only the ``compute`` steps of dask's task stream count as task time (not transfers or deserializing)."""
    stream = [
        {
            "startstops": [
                {"action": "transfer", "start": 0.0, "stop": 5.0},
                {"action": "compute", "start": 5, "stop": 7},
            ]
        },
        {"startstops": [{"action": "deserialize", "start": 1.0, "stop": 2.0}]},
        {"key": "no steps"},
    ]
    assert cluster._compute_times(stream) == [(5, 7)]


@pytest.mark.slow
def test_the_quick_benchmark_runs_every_stage_on_one_and_two_workers(tmp_path, capsys):
    """``python -m benchmarks.cluster --quick`` (smaller still) runs each stage here and on both clusters, checks
    their results equal, and reports times, tasks, bytes and the projection."""
    require("distributed", install='pip install -e ".[dask]"')
    for program, package in (("verilator", "verilator"), ("yosys", "yosys"), ("nextpnr-ice40", "nextpnr-ice40")):
        require_program(program, package=package)
    out = tmp_path / "report.json"
    argv = ["--quick", "--units", "64", "--vectors", "2048", "--seeds", "2", "--json", str(out)]
    assert cluster.main(argv) == 0
    report = json.loads(out.read_text())
    assert set(report["clusters"]) == {"1", "2"}
    for name in ("precompute", "simulate", "implement"):
        stage = report["stages"][name]
        assert stage["1"]["tasks"] >= 1 and stage["2"]["sent_bytes"] > 0
        assert set(stage["projected_s"]) == set(cluster.LINKS)
    assert "projected to 64 workers" in capsys.readouterr().out


class _Late(concurrent.futures.Future):
    """A future already done whose callbacks run only when released: a callback that lags its result."""

    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value
        self.callbacks: list = []

    def add_done_callback(self, fn) -> None:  # type: ignore[override]
        self.callbacks.append(fn)

    def release(self) -> None:
        self.set_result(self.value)
        for fn in self.callbacks:
            fn(self)


class _LatePool(concurrent.futures.Executor):
    def __init__(self) -> None:
        self.futures: list[_Late] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.futures.append(_Late(fn(*args, **kwargs)))
        return self.futures[-1]


def test_settle_waits_for_every_result_to_be_counted():
    """settle() returns once each task's result is counted, and gives up after its timeout otherwise."""
    require("distributed", install='pip install -e ".[dask]"')
    pool = _LatePool()
    metered = cluster.Metered(_Client(pool))
    metered.submit(_twice, np.arange(4))
    metered.settle(timeout=0.05)  # the callback has not run: it waits, then gives up
    assert metered.received == [] and metered.settled == 0
    releaser = threading.Timer(0.05, pool.futures[0].release)
    releaser.start()
    metered.settle(timeout=30)
    assert metered.settled == 1 and len(metered.received) == 1  # counted when settle returns
    releaser.join()
