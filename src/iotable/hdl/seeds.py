"""Several placements of one synthesized design: :func:`~iotable.hdl.implement`'s ``seeds``.

One placement seed is a sample: nextpnr's Fmax moves by 3-13% between seeds on small designs. ``seeds``
places and routes the same netlist once per seed (each a separate cache entry), a few at a time in threads
(each a nextpnr process), and the result reports the median Fmax, its range and each seed's Fmax.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import OptionError

__all__ = ["MAX_SEEDS", "check_seeds", "median_record", "run_seeds"]

#: The most placements one call makes.
MAX_SEEDS = 64


def check_seeds(seed: Any, seeds: Any, *, what: str) -> tuple[int, ...]:
    """The placement seeds to run: ``seeds`` (a count ``n``: seeds 1 to ``n``; or distinct seeds) when given,
    else ``(seed,)``; an :class:`OptionError` naming the accepted forms otherwise."""

    def one(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int) and 0 <= value < 2**31

    if not one(seed):
        msg = f"{what}: seed must be a non-negative integer below 2**31, received {seed!r}"
        raise OptionError(msg)
    if seeds is None:
        return (seed,)
    accepted = (
        f"a number of placements from 1 to {MAX_SEEDS} (seeds 1..n) or a tuple of 1 to {MAX_SEEDS} distinct "
        "non-negative integers below 2**31"
    )
    if one(seeds) and 1 <= seeds <= MAX_SEEDS:
        return tuple(range(1, seeds + 1))
    if isinstance(seeds, (tuple, list)) and 1 <= len(seeds) <= MAX_SEEDS and all(one(s) for s in seeds):
        if len(set(seeds)) == len(seeds):
            return tuple(seeds)
    msg = f"{what}: seeds must be {accepted}, received {seeds!r}"
    raise OptionError(msg)


def run_seeds(place: Callable[[int], Any], seeds: Sequence[int]) -> dict[int, Any]:
    """``place(seed)`` for every seed (each one process); the first error raised is raised once all have ended.

    Up to twice as many seeds as cores run at once, sharing the cores, so that none waits for a second round
    while a core idles (three placements on two cores take one and a half placement times, not two); more
    seeds than that run as many at a time as there are cores."""
    cores = os.cpu_count() or 1
    workers = max(1, len(seeds) if len(seeds) <= 2 * cores else cores)
    if workers == 1:
        return {seed: place(seed) for seed in seeds}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iotable-seed") as pool:
        futures = {seed: pool.submit(place, seed) for seed in seeds}
        return {seed: future.result() for seed, future in futures.items()}


def median_record(records: dict[int, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The seed whose Fmax is the median's (the lower middle one for an even count) and its record; the
    first seed when no seed has an Fmax."""
    timed = sorted((r["fmax_mhz"], seed) for seed, r in records.items() if r["fmax_mhz"] is not None)
    if not timed:
        seed = next(iter(records))
        return seed, records[seed]
    seed = timed[(len(timed) - 1) // 2][1]
    return seed, records[seed]


def spread(records: dict[int, dict[str, Any]]) -> tuple[float | None, tuple[float, float] | None]:
    """The median Fmax over the seeds that have one and its ``(min, max)``; ``(None, None)`` without any."""
    values = [r["fmax_mhz"] for r in records.values() if r["fmax_mhz"] is not None]
    if not values:
        return None, None
    return float(statistics.median(values)), (min(values), max(values))
