"""Every heavy stage on a real dask cluster (a scheduler and two worker processes started with the ``dask``
command line): results equal to a local run's, also when a worker dies mid-stage."""

from __future__ import annotations

import concurrent.futures
import pickle
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from iotable import Domain, decompose, precompute
from iotable.errors import CacheError, HDLToolError, SpecOptionError
from iotable.hdl import check, export, implement, simulate
from iotable.hdl.writer import SHARD_VECTORS
from iotable.nn import Quantize
from iotable.synth import cost

from .daskcluster import Cluster
from .optional import require, require_program

U2 = Domain.uniform(2, scale=0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two workers for the module's tests, ended after them."""
    require("distributed", install='pip install -e ".[dask]"')
    started = Cluster(tmp_path_factory.mktemp("dask"))
    started.client.run(_warm)
    yield started
    started.close()


def _warm() -> None:
    """Import what the tasks run once on each worker (torch and iotable take seconds to import)."""
    import iotable.hdl
    import iotable.synth
    import iotable.tabulate.shards  # noqa: F401


def _pause(module: nn.Module, args: tuple) -> None:
    """A forward pre-hook that makes each forward pass last a while, so that a worker can die during one."""
    time.sleep(0.2)


def _network(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv1d(4, 4, 3, groups=4, padding=1),
        Quantize(2, scale=0.5),
        nn.Conv1d(4, 4, 2, groups=2),
        nn.ReLU(),
        Quantize(2, scale=0.5),
    ).eval()


@pytest.mark.slow
def test_precompute_of_a_network_on_the_cluster_equals_the_local_run(cluster, tmp_path):
    """precompute(executor=client) of a two-layer network gives the local tables, as results and through a
    shared cache_dir, where a second call finds every table."""
    example = torch.zeros(1, 4, 6)
    local = precompute(_network(), input_domain=U2, example_input=example)
    there = precompute(_network(), input_domain=U2, example_input=example, executor=cluster.client)
    assert there.tables == local.tables
    assert [layer.method for layer in there.layers.values()] == [layer.method for layer in local.layers.values()]
    stored = precompute(_network(), input_domain=U2, example_input=example, executor=cluster.client, cache_dir=tmp_path)
    assert stored.tables == local.tables and all(layer.cached == () for layer in stored.layers.values())
    again = precompute(_network(), input_domain=U2, example_input=example, executor=cluster.client, cache_dir=tmp_path)
    assert again.tables == local.tables
    assert all(layer.cached == tuple(range(len(layer))) for layer in again.layers.values())


@pytest.mark.slow
def test_precompute_of_a_black_box_layer_on_the_cluster_equals_the_local_run(cluster):
    """The units of one layer enumerated through the module itself (no fast path), shard by shard on the
    workers, give the local tables."""
    torch.manual_seed(1)
    conv = decompose(nn.Conv1d(6, 6, 2, groups=6), groups=6)
    example = torch.zeros(1, 6, 4)
    local = precompute(conv, input_domain=U2, example_input=example, fast_path=False)
    there = precompute(conv, input_domain=U2, example_input=example, fast_path=False, executor=cluster.client)
    assert list(there.tables) == list(local.tables) and there.method == local.method == "black box"


def test_an_executor_that_is_neither_is_refused_before_any_work():
    """executor= that is not an Executor or a dask Client is a SpecOptionError naming what is accepted."""
    with pytest.raises(SpecOptionError, match=r"executor must be None .* dask.distributed.Client, received str"):
        precompute(_network(), input_domain=U2, example_input=torch.zeros(1, 4, 6), executor="tcp://scheduler:8786")


@pytest.mark.slow
def test_a_worker_killed_mid_precompute_leaves_the_tables_complete_and_equal(cluster, tmp_path):
    """A worker killed while the shards of a layer run on the cluster: its task runs again elsewhere, and the
    tables (through a shared cache_dir) are complete and equal to the local run's."""
    torch.manual_seed(2)
    conv = decompose(nn.Conv1d(24, 24, 2, groups=24), groups=24)
    conv.register_forward_pre_hook(_pause)
    example = torch.zeros(1, 24, 4)
    local = precompute(conv, input_domain=U2, example_input=example, fast_path=False)
    found: dict[str, object] = {}

    def run() -> None:
        try:
            found["tables"] = precompute(
                conv, input_domain=U2, example_input=example, fast_path=False, executor=cluster.client,
                cache_dir=tmp_path,
            )  # fmt: skip
        except BaseException as exc:  # reported by the assertion below
            found["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    busy: list[str] = []
    while not busy and time.monotonic() < deadline:
        busy = sorted(worker for worker, keys in cluster.client.processing().items() if keys)
        time.sleep(0.05)  # until a worker holds a task of the stage (a layer of few passes is few tasks)
    assert busy, "the stage never reached a worker"
    cluster.kill_worker(busy[0])
    thread.join(timeout=300)
    assert not thread.is_alive() and "error" not in found, found.get("error")
    there = found["tables"]
    assert list(there.tables) == list(local.tables) and len(there.tables) == 24


class _Elsewhere(concurrent.futures.ThreadPoolExecutor):
    """Runs each shard with its cache_dir swapped for another folder: workers that write where the client
    cannot read."""

    def __init__(self, folder: Path) -> None:
        super().__init__(max_workers=2)
        self.folder = folder

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        args = (*args[:4], str(self.folder), *args[5:])
        return super().submit(fn, *args, **kwargs)


def test_a_cache_dir_the_workers_do_not_share_is_named(tmp_path):
    """When the tables the tasks wrote are not in the client's cache_dir, a CacheError names the folder and the
    fix instead of tables made up here."""
    with _Elsewhere(tmp_path / "elsewhere") as pool, pytest.raises(CacheError, match=r"every worker and this"):
        precompute(_network(), input_domain=U2, example_input=torch.zeros(1, 4, 6), executor=pool, cache_dir=tmp_path)
    assert list((tmp_path / "elsewhere").glob("*.npy"))  # the tasks did run, and wrote there


def test_precompute_on_a_thread_pool_equals_the_local_run():
    """Any concurrent.futures executor runs the shards (threads here): the tables equal the local run's."""
    example = torch.zeros(1, 4, 6)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        there = precompute(_network(), input_domain=U2, example_input=example, executor=pool)
    assert there.tables == precompute(_network(), input_domain=U2, example_input=example).tables


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A two-layer design with a pipeline register after each layer, and its network."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), Quantize(2), nn.Linear(3, 2), Quantize(2, signed=True)).eval()
    net = precompute(model, input_domain=Domain.uniform(2))
    return export(net, tmp_path_factory.mktemp("hdl") / "tiny", top="tiny", vectors=8, table_benches=False)


def _inputs(count: int) -> torch.Tensor:
    return torch.randint(0, 4, (count, 4), generator=torch.Generator().manual_seed(3))


@pytest.mark.slow
def test_simulate_on_the_cluster_equals_the_local_run(cluster, tiny, tmp_path):
    """simulate(executor=client) under Verilator and iverilog, cut into shards over the workers, gives the
    codes of a run here."""
    require_program("verilator", package="verilator")
    require_program("iverilog", package="iverilog")
    x = _inputs(8 * SHARD_VECTORS)
    local = simulate(tiny, x, simulator="verilator", codes=True, cache_dir=tmp_path / "here")
    there = simulate(
        tiny, x, simulator="verilator", codes=True, cache_dir=tmp_path / "workers", executor=cluster.client
    )
    assert torch.equal(there, local) and torch.equal(local, tiny.reference(x, codes=True))
    small = x[: 2 * SHARD_VECTORS]
    assert torch.equal(simulate(tiny, small, codes=True, executor=cluster.client), local[: 2 * SHARD_VECTORS])


@pytest.mark.slow
def test_a_worker_killed_mid_simulate_leaves_the_codes_complete_and_equal(cluster, tiny, tmp_path):
    """A worker killed while the shards of a simulation run: its shard runs again elsewhere, and the codes are
    complete and equal to the reference."""
    require_program("iverilog", package="iverilog")
    x = _inputs(16 * SHARD_VECTORS)
    victim = sorted(cluster.worker_pids())[0]
    found: dict[str, object] = {}

    def run() -> None:
        try:
            found["codes"] = simulate(tiny, x, codes=True, executor=cluster.client)
        except BaseException as exc:  # reported by the assertion below
            found["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while not cluster.client.processing().get(victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.client.processing().get(victim), "the stage never reached the worker"
    cluster.kill_worker(victim)
    thread.join(timeout=300)
    assert not thread.is_alive() and "error" not in found, found.get("error")
    assert torch.equal(found["codes"], tiny.reference(x, codes=True))


@pytest.mark.slow
def test_implement_with_two_seeds_on_the_cluster_equals_the_local_run(cluster, tiny):
    """implement(seeds=2, executor=client) on iCE40 places the second seed on a worker: every seed's Fmax and
    the counts equal a run here."""
    require_program("yosys", package="yosys")
    require_program("nextpnr-ice40", package="nextpnr-ice40")
    local = implement(tiny, target="ice40-hx1k", seeds=2)
    there = implement(tiny, target="ice40-hx1k", seeds=2, executor=cluster.client)
    assert there.seeds == local.seeds and len(there.seeds) == 2
    assert (there.luts, there.flip_flops, there.fmax_mhz, there.cells) == (
        local.luts, local.flip_flops, local.fmax_mhz, local.cells
    )  # fmt: skip


@pytest.mark.slow
def test_cost_on_the_cluster_equals_the_local_run(cluster, tiny):
    """cost(executor=client) maps the network's tables on the workers: the same LUTs as mapping here."""
    require_program("berkeley-abc", package="berkeley-abc")
    net = tiny.network
    local = cost(net, workers=1)
    there = cost(net, executor=cluster.client)
    assert any(t.input_bits > there.k for t in there.tables)  # tables that ABC maps: they ran on the workers
    assert [(t.key, t.luts, t.depth) for t in there.tables] == [(t.key, t.luts, t.depth) for t in local.tables]
    assert there.luts == local.luts


@pytest.mark.slow
def test_check_on_the_cluster_equals_the_local_run(cluster, tiny):
    """check(executor=client) checks the table modules on the workers: the same cells as a check here."""
    require_program("yosys", package="yosys")
    local = check(tiny)
    there = check(tiny, executor=cluster.client)
    assert (there.top, there.cells) == (local.top, local.cells) and there.cells


class _Silent(concurrent.futures.ThreadPoolExecutor):
    """Runs every task and returns no statistics: a worker whose answers are not what the check asked for."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        return super().submit(dict)


def test_a_check_whose_workers_return_nothing_fails(tiny):
    """A table module whose statistics no task returned is an error naming the file, never a clean check."""
    require_program("yosys", package="yosys")
    with _Silent(2) as pool, pytest.raises(HDLToolError, match=r"iotable_stat_"):
        check(tiny, executor=pool)


def test_a_plan_pickles_once_its_layer_is_enumerated():
    """A layer's plan, after its tables were built (its memo holds what later stages derived, functions
    among them), pickles and comes back with the same units: it can be sent to a worker."""
    torch.manual_seed(1)
    linear = nn.Linear(5, 3)
    with torch.no_grad():  # each output reads only its unit's inputs
        for reads, output in (([0, 3], 2), ([1, 2, 4], 0), ([4, 0], 1)):
            linear.weight[output, [i for i in range(5) if i not in reads]] = 0
    sparse = decompose(linear, fan_in=[[0, 3], [1, 2, 4], [4, 0]], fan_out=[[2], [0], [1]])
    layer = precompute(sparse, input_domain=U2, fast_path=False)  # overlapping inputs: one packed pass
    assert layer.plan.memo  # the check can fail: there is something derived to leave out
    copy = pickle.loads(pickle.dumps(layer.plan))
    assert copy.units == layer.plan.units and copy.memo == {}


class _Counting(concurrent.futures.ThreadPoolExecutor):
    """A pool of two threads that records the pickled size of every task's arguments."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.sizes: list[int] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.sizes.append(len(pickle.dumps(args)))
        return super().submit(fn, *args, **kwargs)


def _sparse_layer(units: int = 96, inputs: int = 32, fan_in: int = 4) -> nn.Module:
    """A LogicNets-style layer: each output reads ``fan_in`` inputs of ``inputs`` (its other weights zero)."""
    generator = torch.Generator().manual_seed(4)
    reads = [sorted(torch.randperm(inputs, generator=generator)[:fan_in].tolist()) for _ in range(units)]
    linear = nn.Linear(inputs, units)
    with torch.no_grad():
        for output, columns in enumerate(reads):
            linear.weight[output, [i for i in range(inputs) if i not in columns]] = 0
    return decompose(nn.Sequential(linear, Quantize(2, scale=0.5)), fan_in=reads, fan_out=[[o] for o in range(units)])


_TASK_SAMPLES: list[int] = []


def _count_task_samples(module: nn.Module, args: tuple) -> None:
    """A forward pre-hook that records the samples of each forward pass a pool's thread runs (not the probe's)."""
    if threading.current_thread() is not threading.main_thread():
        _TASK_SAMPLES.append(len(args[0]))


def test_a_black_box_layer_is_sent_in_few_tasks_that_run_each_pass_once():
    """A black-box layer on a pool of two threads is cut into at most three shards a thread, so its module is
    sent a few times rather than once per shard of 64, and the shards together run each forward pass once: the
    samples they put through the module are the local enumeration's."""
    from iotable.tabulate.enumerate import DEFAULT_MEMORY_BUDGET
    from iotable.tabulate.passes import _classes, _Packed, _passes

    layer = _sparse_layer()
    layer.register_forward_pre_hook(_count_task_samples)
    _TASK_SAMPLES.clear()
    local = precompute(layer, input_domain=U2, fast_path=False)
    with _Counting() as pool:
        there = precompute(layer, input_domain=U2, fast_path=False, executor=pool)
    assert list(there.tables) == list(local.tables) and there.method == "black box"
    assert 1 < len(pool.sizes) <= 3 * 2
    assert sum(pool.sizes) < 12 * len(pickle.dumps(layer))  # 64 shards would send the module 64 times
    plan = there.plan
    passes = _passes(plan, _classes(plan), capacity=DEFAULT_MEMORY_BUDGET, itemsize=1)
    assert all(isinstance(p, _Packed) for p in passes) and len(passes) > 1
    assert sum(_TASK_SAMPLES) == sum(p.rows for p in passes)


def test_a_fast_path_layer_is_cut_into_a_few_shards_a_worker():
    """A layer the fast path builds, of 96 input classes, is cut into at most three shards for each of a
    pool's two threads (not one shard per class up to 64), and its tables equal the local run's."""
    layer = _sparse_layer()
    with _Counting() as pool:
        there = precompute(layer, input_domain=U2, executor=pool)
    local = precompute(layer, input_domain=U2)
    assert list(there.tables) == list(local.tables) and there.method == local.method != "black box"
    assert 1 < len(pool.sizes) <= 3 * 2
