"""Progress bars that stay quiet off a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

# Enumerations shorter than this many forward samples finish too fast for a bar to help.
_AUTO_MIN_TOTAL = 4096


@contextmanager
def progress_bar(*, total: int, desc: str, enabled: bool | None, unit: str) -> Iterator[Any]:
    """A tqdm bar; ``enabled=None`` shows it only on a terminal and for long runs."""
    show = enabled if enabled is not None else (sys.stderr.isatty() and total >= _AUTO_MIN_TOTAL)
    bar = tqdm(total=total, desc=desc, unit=unit, disable=not show, leave=False)
    try:
        yield bar
    finally:
        bar.close()
