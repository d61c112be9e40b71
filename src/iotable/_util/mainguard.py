"""Whether a call comes from the top level of a script that a spawned worker would run again.

A process pool that spawns its workers (fresh interpreters, as iotable's pools do) imports the parent's
``__main__`` script in every worker, running its top level again. A script that calls a pool from its top
level without ``if __name__ == "__main__":`` therefore redoes everything before the call in each worker
(minutes of work) and then fails. :func:`unguarded_script` finds that case in the parent, before a worker
starts: the ``__main__`` module's frame on the call stack, at a line outside every main guard of its source.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from pathlib import Path
from types import FrameType

__all__ = ["unguarded_script"]

_MAX_SOURCE = 16 << 20  # bytes of a script read to find its main guards


def _is_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    texts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(texts) == 1


def _guarded(source: str, line: int) -> bool | None:
    """``line`` lies in the body of an ``if __name__ == "__main__":`` of ``source``; ``None`` when no statement
    of the module's own code is at ``line`` (inside a function or class body, or past every statement): the
    file changed since the script started, and the line says nothing."""
    tree = ast.parse(source)
    if not any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in tree.body):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            if node.lineno < node.body[0].lineno <= line <= (node.end_lineno or node.lineno):
                return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_guard(node.test) and node.body:
            first, last = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            if first <= line <= last:
                return True
    return False


def _main_frame(namespace: dict[str, object]) -> FrameType | None:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is namespace:
            return frame
        frame = frame.f_back
    return None


def unguarded_script() -> str | None:
    """The path of the ``__main__`` script when the current call runs at its top level outside a main guard
    (a spawned worker would run the script again), else ``None`` (a guarded script, an interactive session,
    a notebook, ``python -c``, a worker process, or a source that cannot be read: nothing to refuse)."""
    if multiprocessing.current_process().name != "MainProcess":
        return None
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None
    frame = _main_frame(vars(main))
    if frame is None:
        return None
    try:
        data = Path(path).read_bytes()[: _MAX_SOURCE + 1]
        if len(data) > _MAX_SOURCE:
            return None
        guarded = _guarded(data.decode("utf-8"), frame.f_lineno)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    return path if guarded is False else None  # None: the file changed since it started, and says nothing
