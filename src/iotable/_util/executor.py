"""One ``executor=`` for every heavy stage: where its independent tasks run.

``executor`` is ``None`` (this process), any ``concurrent.futures.Executor`` (a thread or process pool), or a
``dask.distributed.Client`` (a cluster: a ``LocalCluster`` on a laptop, or the scheduler of a batch system).
:func:`submitter` turns it into a :class:`Submitter` once, at the public boundary, and :func:`run_all` runs a
list of tasks on it and returns their results in order.

A task is a module-level function and picklable arguments (arrays, strings, plans, modules), and its result is
plain data: nothing but the arguments and the result crosses the network. A dask worker that dies mid-task has
its task run again on another worker by the scheduler; every task here is a pure function of its arguments
(and of content-addressed cache entries, written atomically), so a task run twice gives the same result.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import IOTableError

__all__ = ["Submitter", "check_executor", "collect", "run_all", "submitter"]


class Submitter:
    """An executor seen one way: :meth:`submit` a task.

    Arguments travel with each task, never scattered ahead: on dask, data scattered to a worker that dies is
    lost, and the scheduler cancels the tasks that needed it instead of running them again elsewhere."""

    def __init__(self, executor: concurrent.futures.Executor, client: Any = None) -> None:
        self.executor = executor
        self.client = client  # the dask Client, when the executor is one of its ClientExecutors

    @property
    def workers(self) -> int | None:
        """How many tasks the executor runs at once (a dask cluster's threads, a pool's workers), or ``None``
        when it does not say (an executor of another kind, a cluster with no worker yet)."""
        if self.client is not None:
            try:
                threads = sum(self.client.nthreads().values())
            except Exception:  # a scheduler that does not answer: the stage finds out when it submits
                return None
            return threads or None
        found = getattr(self.executor, "_max_workers", None)  # ThreadPool- and ProcessPoolExecutor's size
        return found if isinstance(found, int) and found > 0 else None

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` on the executor."""
        return self.executor.submit(fn, *args)


def _is_client(executor: Any) -> bool:
    return type(executor).__module__.split(".")[0] == "distributed" and hasattr(executor, "get_executor")


def check_executor(executor: Any, *, what: str, error: type[IOTableError]) -> None:
    """Refuse an ``executor`` that is neither ``None``, a ``concurrent.futures.Executor`` nor a
    ``dask.distributed.Client``, before any work."""
    if executor is None or isinstance(executor, concurrent.futures.Executor) or _is_client(executor):
        return
    msg = (
        f"{what}: executor must be None (run here), a concurrent.futures.Executor or a dask.distributed.Client, "
        f"received {type(executor).__name__}; for a cluster pass its Client (see docs/cluster.md)"
    )
    raise error(msg)


def submitter(executor: Any, *, what: str, error: type[IOTableError]) -> Submitter | None:
    """The :class:`Submitter` of ``executor`` (``None``: run here), or ``error`` naming the accepted kinds."""
    check_executor(executor, what=what, error=error)
    if executor is None:
        return None
    if isinstance(executor, concurrent.futures.Executor):
        return Submitter(executor)
    return Submitter(executor.get_executor(pure=False), client=executor)  # a Client, seen as an Executor


def run_all(
    pool: Submitter | None,
    fn: Callable[..., Any],
    tasks: Sequence[tuple[Any, ...]],
    *,
    what: str,
    error: type[IOTableError],
    done: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(*task) for task in tasks]``, on ``pool`` when there is one (every task submitted at once).

    ``done(index, result)`` is called as each task finishes (in any order). The first failure cancels the
    tasks not yet started and is raised: an :class:`IOTableError` from a task as it is (its message says what
    failed), anything else (a lost worker, a result that does not unpickle) as ``error`` naming the executor.
    """
    if pool is None:
        results = []
        for index, task in enumerate(tasks):
            results.append(fn(*task))
            if done is not None:
                done(index, results[-1])
        return results
    futures = [pool.submit(fn, *task) for task in tasks]
    return collect(futures, what=what, error=error, done=done)


def collect(
    futures: Sequence[concurrent.futures.Future[Any]],
    *,
    what: str,
    error: type[IOTableError],
    done: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """The results of ``futures`` in order, failing as :func:`run_all` says (the rest cancelled)."""
    index = {future: i for i, future in enumerate(futures)}
    found: dict[int, Any] = {}
    try:
        for future in concurrent.futures.as_completed(index):
            found[index[future]] = future.result()
            if done is not None:
                done(index[future], found[index[future]])
    except IOTableError:
        raise
    except Exception as exc:  # the executor or the cluster failed outside iotable: say where
        msg = (
            f"{what}: a task failed in the executor ({type(exc).__name__}: {str(exc)[:500]}); check that every "
            "worker can import iotable and the tools the stage runs, then call again (finished cache entries "
            "are kept)"
        )
        raise error(msg) from exc
    finally:
        for future in futures:
            future.cancel()
    return [found[i] for i in range(len(futures))]
