"""Progress bars counted in table rows: one per call, quiet where nobody watches, no warning on import.

A bar counts the rows the summary reports (every unit's rows, cached ones included) and ends at its total.
A whole model gets one bar whose description names the layer being built. tqdm is imported only when a
bar is made, and its flavour is chosen here, not by ``tqdm.auto``: a widget in a Jupyter kernel that has
ipywidgets, a text bar on stdout in one that has not (``tqdm.auto`` would warn "IProgress not found"), and
a text bar on stderr elsewhere.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# With progress=None, work smaller than this many rows never gets a bar, ...
_AUTO_MIN_ROWS = 2**16
# ... and a bar appears only once the work has lasted this many seconds, so quick builds print nothing.
_AUTO_DELAY = 0.5


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel), without importing IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or too broken to ask: not a notebook we can serve
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def _widget_bar() -> type | None:
    """tqdm's notebook widget bar, or ``None`` when ipywidgets is missing (or too old to draw it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from tqdm import notebook
        except ImportError:
            return None
    return notebook.tqdm if getattr(notebook, "IProgress", None) is not None else None


class Progress:
    """Rows done, shown on a tqdm bar (or nowhere: ``Progress(None)``)."""

    def __init__(self, bar: Any | None) -> None:
        self.bar = bar

    def layer(self, name: str) -> None:
        """Name the layer being built in the bar's description."""
        if self.bar is not None:
            self.bar.set_description_str(name, refresh=False)

    def update(self, rows: int) -> None:
        """Count ``rows`` more rows as done."""
        if self.bar is not None and rows:
            self.bar.update(rows)

    def counter(self, name: str) -> Callable[[int], None]:
        """:meth:`update` for layer ``name``'s rows, naming it in the description as it counts them (layers
        built together report their rows interleaved)."""

        def count(rows: int) -> None:
            self.layer(name)
            self.update(rows)

        return count


#: A progress that shows nothing.
QUIET = Progress(None)


@contextmanager
def progress_bar(
    *, total: int, desc: str, enabled: bool | None, unit: str = "row", auto_min: int = _AUTO_MIN_ROWS
) -> Iterator[Progress]:
    """A bar over ``total`` rows (or other ``unit``s); ``enabled=None`` shows it for long work in a terminal or
    a notebook (at least ``auto_min`` of them, after half a second).

    ``enabled=True`` shows it at once wherever the process runs (a text bar on stderr outside a notebook),
    ``False`` never.
    """
    notebook = in_notebook()
    if enabled is None:
        watched = notebook or sys.stderr.isatty()
        enabled = watched and total >= auto_min
        delay = _AUTO_DELAY
    else:
        delay = 0.0
    if not enabled:
        yield QUIET
        return
    options: dict[str, Any] = {"total": total, "desc": desc, "unit": unit, "unit_scale": unit == "row", "leave": False}
    from tqdm.std import tqdm  # here, not at import: importing iotable stays silent and light

    bar_class: Any = tqdm
    if notebook:
        bar_class = _widget_bar()
        if bar_class is None:  # a text bar, on stdout: a notebook shows stderr as an alarm
            bar_class, options["file"] = tqdm, sys.stdout
    bar = bar_class(delay=delay, **options)
    try:
        yield Progress(bar)
    finally:
        bar.close()
