"""Writing files atomically: a reader sees the old file or the whole new one, never a part.

The bytes go to a temporary file in the target's own folder (so that the final rename stays on one file
system), are flushed and fsynced, and the file is renamed over the target with ``os.replace``. A write that
fails removes its temporary file and re-raises the ``OSError``; callers turn it into their own error with
the path and the fix.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "commit", "discard", "temporary_beside"]


def temporary_beside(path: Path, *, hidden: bool = True) -> tuple[BinaryIO, str]:
    """A new temporary file in ``path``'s folder, open for reading and writing, and its name.

    Its name starts with ``path``'s (after a dot when ``hidden``) and ends in ``.part``, so that leftovers
    of an interrupted write are easy to recognize and remove.
    """
    prefix = f".{path.name}." if hidden else f"{path.name}."
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".part", dir=path.parent)
    try:
        file = open(name, "r+b")  # opened by name, so that the file (and a map of it) knows its name
    except BaseException:
        discard(name)
        raise
    finally:
        os.close(fd)
    return file, name


def commit(file: BinaryIO, name: str, path: Path) -> None:
    """Flush, fsync and close ``file`` (the temporary file called ``name``), then rename it to ``path``."""
    file.flush()
    os.fsync(file.fileno())
    file.close()
    os.replace(name, path)


def discard(name: str) -> None:
    """Remove a temporary file, if it is still there."""
    Path(name).unlink(missing_ok=True)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring); ``OSError`` on failure."""
    file, name = temporary_beside(path)
    try:
        with file:
            file.write(data)
            commit(file, name, path)
    except BaseException:
        discard(name)
        raise
