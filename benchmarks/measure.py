"""Timing and memory measurement: medians of repeated runs, peak resident memory per run.

Peak memory of one run is read from Linux's high-water mark of the resident set (``VmHWM`` in
``/proc/self/status``), reset before the run by writing ``5`` to ``/proc/self/clear_refs``, after the
allocator's free memory went back to the system; the figure is the peak minus the resident set before the
run. Where that is unavailable the figure is ``None``. In one process these figures are indicative (the
runner measures the memory targets in fresh processes, see :mod:`benchmarks.memory`).
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "AnonymousPeak",
    "PeakMemory",
    "Timing",
    "configure_threads",
    "load_average",
    "measure",
    "peak_reset_supported",
    "release_free_memory",
    "status_kib",
]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def configure_threads(threads: int) -> int:
    """Set torch's intra-op threads (``0``: keep torch's default); return the number in use."""
    if threads > 0:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or ``None`` where there is none."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def release_free_memory() -> None:
    """Collect garbage and hand the C allocator's free memory back to the system (glibc ``malloc_trim``).

    Without it, memory freed by an earlier run stays resident and a later run reuses it unseen.
    """
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the figures may then undercount reused memory
        pass


def peak_reset_supported() -> bool:
    """Whether this process can reset and read its peak resident memory."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return status_kib("VmHWM") is not None


class PeakMemory:
    """Context manager: ``bytes`` is the peak resident memory inside the block above the level on entry."""

    def __init__(self) -> None:
        self.bytes: int | None = None
        self._before: int | None = None

    def __enter__(self) -> PeakMemory:
        release_free_memory()
        self._before = status_kib("VmRSS") if peak_reset_supported() else None
        return self

    def __exit__(self, *exc: object) -> None:
        peak = status_kib("VmHWM")
        if self._before is not None and peak is not None:
            self.bytes = max(0, peak - self._before) * 1024


class AnonymousPeak:
    """Context manager: ``bytes`` is the peak of anonymous resident memory inside the block above entry.

    Anonymous memory (``RssAnon``) holds arrays, tensors and Python objects, but not the pages of shared
    libraries a run touches for the first time, which the total resident set (and ``ru_maxrss``) counts
    and which vary with what the page cache holds. Linux keeps no high-water mark of it, so a thread
    samples it every ``interval`` seconds; a peak shorter than that can be missed.
    """

    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.bytes: int | None = None
        self._stop = threading.Event()
        self._peak = 0
        self._before: int | None = None
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, status_kib("RssAnon") or 0)
            time.sleep(self.interval)

    def __enter__(self) -> AnonymousPeak:
        release_free_memory()
        self._before = status_kib("RssAnon")
        if self._before is not None:
            self._peak = self._before
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None or self._before is None:
            return
        self._peak = max(self._peak, status_kib("RssAnon") or 0)
        self._stop.set()
        self._thread.join()
        self.bytes = (self._peak - self._before) * 1024


@dataclass
class Timing:
    """Seconds of every run, their median, the median peak memory of a run, and the last run's result."""

    runs: list[float]
    peak_bytes: int | None
    result: Any

    @property
    def seconds(self) -> float:
        return statistics.median(self.runs)


def measure(fn: Callable[..., Any], *, repeats: int, setup: Callable[[], Any] | None = None) -> Timing:
    """Run ``fn`` ``repeats`` times; the previous result is dropped before each run so it is not counted.

    With ``setup``, each run is ``fn(setup())`` and only ``fn`` is timed (e.g. a fresh copy of a model).
    """
    runs: list[float] = []
    peaks: list[int] = []
    result = None
    for _ in range(repeats):
        result = None
        args = () if setup is None else (setup(),)
        with PeakMemory() as peak:
            start = time.perf_counter()
            result = fn(*args)
            runs.append(time.perf_counter() - start)
        if peak.bytes is not None:
            peaks.append(peak.bytes)
    # The median: the first run also faults in library code pages the later ones find resident.
    return Timing(runs=runs, peak_bytes=int(statistics.median(peaks)) if peaks else None, result=result)


def load_average() -> float | None:
    """The 1-minute load average, to flag runs on a busy machine."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
