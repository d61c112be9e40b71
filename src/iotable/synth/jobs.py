"""Mapping jobs: functions mapped in one ABC session (:class:`Job`, :func:`run_job`), grouped by
:func:`batches`, and run by :func:`mapped_records` in this process, a local process pool, any
``concurrent.futures.Executor`` or a ``dask.distributed.Client``.

A job is picklable (arrays and strings) and its result is plain data: the JSON records the cache stores,
each netlist already checked on every care row of its function by the worker that mapped it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool  # a submodule: ``import concurrent.futures`` lacks it
from dataclasses import dataclass
from typing import Any

from .._util.executor import submitter
from .._util.mainguard import unguarded_script
from ..errors import ABCError, IOTableError, SynthError
from ..lutnet import RECORD_FORMAT, BitFunction, LutNetlist, check_netlist
from .abcrun import run_abc
from .blif import blif_text, direct_blif, fill_dont_cares
from .floor import attempt_name, canonical_inputs, order_of, permuted_blif

__all__ = ["Job", "batches", "mapped_records", "run_job"]


# -- functions mapped in one ABC run, in whichever process runs it ----------------------------------------------


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to map some functions in one ABC run (picklable: arrays and strings)."""

    functions: tuple[BitFunction, ...]
    names: tuple[str, ...]
    program: str
    script: str
    k: int
    timeout: float
    version: str
    attempts: tuple[tuple[str, str], ...] = ()  # (order, script) each, for effort "floor"; () maps once

    @property
    def rows(self) -> int:
        return sum(fn.space for fn in self.functions)


def run_job(job: Job) -> list[dict[str, Any]]:
    """Map ``job``'s functions with ABC, check each netlist on every care row, and return the cache records
    (for a floor, each function's smallest checked netlist over the job's attempts)."""
    if job.attempts:
        return _floor_records(job)
    texts: list[tuple[str, float, str] | None] = []
    blifs, names = [], []
    for fn, name in zip(job.functions, job.names):
        values, care = fn.truth()
        if not care.all():
            values = fill_dont_cares(values, care)
        if fn.input_bits <= job.k:  # one LUT per output bit at most: no mapper needed
            texts.append((direct_blif(fn, values), 0.0, "direct"))
            continue
        texts.append(None)
        blifs.append(blif_text(fn, values))
        names.append(name)
    mapped = iter(run_abc(job.program, blifs, job.script, timeout=job.timeout, names=names) if blifs else [])
    records = []
    for fn, name, direct in zip(job.functions, job.names, texts):
        text, seconds, method = direct if direct is not None else (*next(mapped), "abc")
        netlist = LutNetlist.from_blif(text, what=f"{name}: ABC's netlist")
        check_netlist(netlist, fn, name=name, k=job.k)
        records.append(_record(job, fn, method, netlist, seconds))
    return records


def _record(job: Job, fn: BitFunction, method: str, netlist: LutNetlist, seconds: float) -> dict[str, Any]:
    """The cache record of ``fn`` mapped to ``netlist`` (checked) by ``job``."""
    return {
        "format": RECORD_FORMAT,
        "key": fn.key(),
        "k": job.k,
        "script": job.script,
        "abc_version": job.version,
        "input_bits": fn.input_bits,
        "output_bits": fn.output_bits,
        "method": method,
        "luts": netlist.luts,
        "depth": netlist.depth,
        "seconds": round(seconds, 4),
        "blif": netlist.blif,
    }


def _floor_records(job: Job) -> list[dict[str, Any]]:
    """A floor: every function of ``job`` under every attempt, each netlist checked on every care row, the
    smallest kept (fewest LUTs, then least depth, then the first tried); a record's ``attempts`` lists the
    LUTs of the attempts that passed, ``strategy`` names the winner. Functions of at most k bits are written
    directly (one attempt, ``"direct"``)."""
    large = [i for i, fn in enumerate(job.functions) if fn.input_bits > job.k]
    found = _attempted(job, large)
    records = []
    for i, fn in enumerate(job.functions):
        if i not in large:
            values, care = fn.truth()
            text = direct_blif(fn, values if care.all() else fill_dont_cares(values, care))
            netlist = LutNetlist.from_blif(text, what=f"{job.names[i]}: the direct netlist")
            check_netlist(netlist, fn, name=job.names[i], k=job.k)
            records.append(
                {**_record(job, fn, "direct", netlist, 0.0), "strategy": "direct", "attempts": [netlist.luts]}
            )
            continue
        passed = sorted(n for j, n in found if j == i)
        best = min(passed, key=lambda n: (found[i, n][0].luts, found[i, n][0].depth, n))
        netlist, seconds = found[i, best][0], sum(found[i, n][1] for n in passed)
        records.append(
            {
                **_record(job, fn, "abc", netlist, seconds),
                "strategy": attempt_name(*job.attempts[best]),
                "attempts": [found[i, n][0].luts for n in passed],
            }
        )
    return records


def _attempted(job: Job, large: list[int]) -> dict[tuple[int, int], tuple[LutNetlist, float]]:
    """Each checked netlist of the functions ``large`` (indices into ``job.functions``) by ``(function,
    attempt)``, with ABC's time: one ABC session per script over every function and input order, bounded by
    the job's timeout.

    The first attempt (the given order under the script asked for) is what effort "fast" maps: its failure is
    raised as there. Any other attempt whose session fails or runs out of time, or whose netlist is wrong, is
    left out: a wrong netlist is never a floor."""
    blifs: dict[tuple[int, str], bytes] = {}
    if not large:
        return {}
    for i in large:
        values, care = job.functions[i].truth()
        for order in dict.fromkeys(order for order, _ in job.attempts):
            blifs[i, order] = permuted_blif(job.functions[i], values, care, order_of(order, values, care))
    found: dict[tuple[int, int], tuple[LutNetlist, float]] = {}
    for script in dict.fromkeys(s for _, s in job.attempts):
        wanted = [(i, n, order) for i in large for n, (order, s) in enumerate(job.attempts) if s == script]
        names = [f"{job.names[i]} ({attempt_name(order, script)})" for i, _, order in wanted]
        try:
            texts = run_abc(job.program, [blifs[i, o] for i, _, o in wanted], script, timeout=job.timeout, names=names)
        except ABCError:
            if script == job.attempts[0][1]:
                raise
            continue
        for (i, n, _), name, (text, seconds) in zip(wanted, names, texts):
            try:
                netlist = LutNetlist.from_blif(canonical_inputs(text, job.functions[i]), what=f"{name}: ABC's netlist")
                check_netlist(netlist, job.functions[i], name=name, k=job.k)
            except IOTableError:
                if n == 0:
                    raise
                continue
            found[i, n] = (netlist, seconds)
    return found


# ABC runs share one session up to this many rows, or this many tables (the start-up is ~0.07 s).
_BATCH_ROWS = 2**14
_BATCH_TABLES = 64


def batches(
    pending: list[tuple[BitFunction, str]],
    *,
    program: str,
    script: str,
    k: int,
    timeout: float,
    version: str,
    attempts: tuple[tuple[str, str], ...] = (),
) -> list[Job]:
    """Jobs of one or more functions, the largest first (the pool's tail stays short); with ``attempts`` (a
    floor), each function is mapped once per attempt, and a job holds that many times fewer rows."""
    limit = _BATCH_ROWS // max(1, len(attempts))
    pending = sorted(pending, key=lambda item: -item[0].input_bits)
    jobs: list[Job] = []
    group: list[tuple[BitFunction, str]] = []

    def flush() -> None:
        if group:
            functions, names = zip(*group)
            jobs.append(Job(tuple(functions), tuple(names), program, script, k, timeout, version, attempts))
            group.clear()

    for fn, name in pending:
        if group and (sum(f.space for f, _ in group) + fn.space > limit or len(group) >= _BATCH_TABLES):
            flush()
        group.append((fn, name))
    flush()
    return jobs


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_workers(workers: Any, *, what: str) -> None:
    """Refuse a ``workers=`` that is not a positive integer (or ``None``), before any work."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        msg = f"{what}: workers must be a positive integer, received {workers!r}"
        raise SynthError(msg)


class _QuietProcess(multiprocessing.context.SpawnProcess):
    """A spawned worker that never sees Ctrl-C: SIGINT is blocked while it starts, and a new interpreter
    keeps the signal mask it inherits, so the terminal's SIGINT reaches the parent alone (one
    KeyboardInterrupt there, not a traceback per worker); the parent ends the workers (:meth:`_Pool.stop`)."""

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            super().start()
            return
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            super().start()
        finally:  # a Ctrl-C meanwhile stays pending, and is raised here once unblocked
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class _QuietSpawn(multiprocessing.context.SpawnContext):
    """The spawn context whose processes are :class:`_QuietProcess`, each remembered to be ended."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[_QuietProcess] = []

    def Process(self, *args: Any, **kwargs: Any) -> _QuietProcess:  # type: ignore[override]  # its name, a method
        process = _QuietProcess(*args, **kwargs)
        self.started.append(process)
        return process


def _end_worker(signum: int, frame: Any) -> None:
    """SIGTERM in a worker: raise, so that a running ABC is ended with its process group; a second one kills."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(1)


def _worker_start() -> None:
    signal.signal(signal.SIGTERM, _end_worker)


class _Pool(concurrent.futures.ProcessPoolExecutor):
    """The default pool: spawned workers that ignore Ctrl-C, and :meth:`stop` to end them at once."""

    def __init__(self, count: int) -> None:
        self.context = _QuietSpawn()
        super().__init__(max_workers=count, mp_context=self.context, initializer=_worker_start)

    def stop(self) -> None:
        """End every worker now (the parent was interrupted): SIGTERM, then SIGKILL for any still running."""
        # shutdown(wait=False) forgets the call queue and the manager thread: hold them first
        queue, thread = getattr(self, "_call_queue", None), getattr(self, "_executor_manager_thread", None)
        self.shutdown(wait=False, cancel_futures=True)
        if queue is not None:  # its feeder may be blocked writing to workers that are gone: never wait for it
            queue.cancel_join_thread()
        for attempt in range(3):
            alive = [p for p in self.context.started if p.pid is not None and p.exitcode is None]
            for process in alive:
                process.kill() if attempt == 2 else process.terminate()
            for process in alive:
                process.join(timeout=2.0)
        if thread is not None:
            thread.join(timeout=5.0)
            if thread.is_alive():  # some Pythons (3.11.2) leave it waiting on the ended workers: never wait at exit
                getattr(concurrent.futures.process, "_threads_wakeups", {}).pop(thread, None)


def _submitter(executor: Any, workers: Any, jobs: int, *, what: str) -> tuple[Any, bool]:
    """``(executor or None for in-process, whether we own it)`` from the user's ``executor``/``workers``."""
    if executor is None:
        count = min(workers if workers is not None else _available_cores(), jobs)
        if count <= 1:
            return None, False
        script = unguarded_script()
        if script is not None:
            msg = (
                f"{what}: the script {script!r} calls {what} from its top level, outside "
                "`if __name__ == '__main__':`; the process pool starts fresh Python processes (spawn) that each "
                "run the script again from the top before mapping anything. Put the script's main code under "
                "`if __name__ == '__main__':`, or pass workers=1 to map in this process"
            )
            raise SynthError(msg)
        # spawn, not fork: the parent holds torch's threads, and a forked copy of them can deadlock.
        return _Pool(count), True
    if workers is not None:
        msg = f"{what}: give workers= or executor=, not both (the executor decides its own workers)"
        raise SynthError(msg)
    pool = submitter(executor, what=what, error=SynthError)  # a dask Client is seen as an Executor
    return (pool.executor if pool is not None else None), False


def _results(pool: Any, jobs: list[Job]) -> Iterator[tuple[Job, list[dict[str, Any]]]]:
    """Each job with its records, as they finish; in this process when ``pool`` is ``None``."""
    if pool is None:
        for job in jobs:
            yield job, run_job(job)
        return
    futures = {pool.submit(run_job, job): job for job in jobs}
    try:
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    finally:
        for future in futures:
            future.cancel()


def mapped_records(
    jobs: list[Any], local: list[Any], executor: Any, workers: int | None, *, what: str, bar: Any
) -> Iterator[dict[str, Any]]:
    """Every record of ``local`` jobs (run here) and ``jobs`` (on the executor), as each job finishes; a
    failure outside iotable is a :class:`SynthError` that says where (results so far are cached)."""
    check_workers(workers, what=what)  # even when every table is cached
    pool, owned = _submitter(executor, workers, len(jobs), what=what) if jobs else (None, False)
    try:
        done = itertools.chain(((job, run_job(job)) for job in local), _results(pool, jobs))
        for job, records in done:
            yield from records
            bar.update(job.rows)
    except IOTableError:
        raise
    except (KeyboardInterrupt, GeneratorExit):
        if owned and isinstance(pool, _Pool):
            pool.stop()  # Ctrl-C, or the caller gave up: the workers end now, not after their jobs
            owned = False
        raise
    except Exception as exc:  # a worker or the cluster failed outside iotable: say where
        msg = f"{what}: mapping failed in the executor ({type(exc).__name__}: {exc}); results so far are cached"
        if isinstance(exc, BrokenProcessPool):
            msg += (
                ". The default pool starts fresh Python processes (spawn): a script that calls map_luts must guard "
                "its main code with `if __name__ == '__main__':`"
            )
        raise SynthError(msg) from exc
    finally:
        if owned and pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
