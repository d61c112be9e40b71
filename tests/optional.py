"""Optional dependencies of some tests: skipped with the package's name locally, a failure under ``CI=true``.

CI installs every extra, Graphviz's ``dot`` program and the HDL tools (see ``.ci/run``), so there a missing
one is a broken setup, not a reason to skip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def _missing(what: str) -> None:
    msg = f"needs {what}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{msg}, which CI must install (.ci/run)")
    pytest.skip(msg)


def require(module: str, *, install: str) -> None:
    """Skip (fail under CI) unless the Python package ``module`` is importable; ``install`` says how to get it."""
    if importlib.util.find_spec(module) is None:
        _missing(f"the Python package {module!r} ({install})")


def graphviz_available() -> bool:
    """Whether pictures can be drawn: the ``graphviz`` package and Graphviz's ``dot`` program are both here."""
    return importlib.util.find_spec("graphviz") is not None and shutil.which("dot") is not None


def require_graphviz() -> None:
    """Skip (fail under CI) unless the ``graphviz`` package and the ``dot`` program are installed."""
    require("graphviz", install='pip install -e ".[notebook]"')
    if shutil.which("dot") is None:
        _missing("Graphviz's 'dot' program (Debian package graphviz: apt-get install graphviz)")


def require_program(program: str, *, package: str) -> None:
    """Skip (fail under CI) unless the program ``program`` is on PATH; ``package`` is its Debian package."""
    if shutil.which(program) is None:
        _missing(f"the program {program!r} (Debian package {package}: apt-get install {package})")
