"""Writing files atomically: a reader sees the old file or the whole new one, never a part.

The bytes go to a temporary file in the target's own folder (so that the final rename stays on one file
system), are flushed and fsynced, and the file is renamed over the target with ``os.replace``. A write that
fails removes its temporary file and re-raises the ``OSError``; callers turn it into their own error with
the path and the fix. Files get the mode a plain ``open()`` gives (``0o666`` less the umask), not the
``0o600`` of a temporary file.

A whole directory is written the same way (:func:`staging_directory`, :func:`replace_directory`): into a
hidden sibling, then renamed into place. Leftovers of an interrupted write are named
``.<name>.<pid>.<random>.staging`` (or ``.old`` for a directory moved aside) and
:func:`remove_leftovers` clears those of processes that no longer run.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "atomic_write",
    "commit",
    "discard",
    "fsync_directory",
    "path_text",
    "plain_mode",
    "remove_leftovers",
    "replace_directory",
    "staging_directory",
    "temporary_beside",
]

_STEM = 64  # characters of the target's name kept in a staging name (which must stay under 255)
_LEFTOVER = re.compile(r"\.(?P<stem>.*)\.(?P<pid>[0-9]+)\.[a-z0-9_]+\.(?:staging|old)")


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux), else by setting it back."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_mode(*, directory: bool = False) -> int:
    """The mode a plain ``open()`` (``directory``: ``mkdir()``) gives a new file under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


def temporary_beside(path: Path, *, hidden: bool = True) -> tuple[BinaryIO, str]:
    """A new temporary file in ``path``'s folder, open for reading and writing, and its name.

    Its name starts with ``path``'s (after a dot when ``hidden``) and ends in ``.part``, so that leftovers
    of an interrupted write are easy to recognize and remove.
    """
    prefix = f".{path.name}." if hidden else f"{path.name}."
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".part", dir=path.parent)
    try:
        os.fchmod(fd, plain_mode())  # mkstemp's 0o600 would outlive the rename
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


def fsync_directory(path: Path) -> None:
    """Make a directory's entries (new files, renames) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sibling(target: Path, suffix: str) -> Path:
    prefix = f".{target.name[:_STEM]}.{os.getpid()}."
    folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=target.parent))
    os.chmod(folder, plain_mode(directory=True))  # mkdtemp's 0o700 would outlive the rename
    return folder


def staging_directory(target: Path) -> Path:
    """A new empty hidden directory beside ``target`` (same folder, so that renaming it there is atomic),
    with the mode ``mkdir()`` gives; ``OSError`` on failure."""
    return _sibling(target, ".staging")


def replace_directory(staging: Path, target: Path) -> None:
    """Rename the directory ``staging`` to ``target``; ``OSError`` on failure, with ``target`` untouched.

    A missing or empty ``target`` is replaced in one rename. A non-empty one is moved aside, the new one
    renamed in, and the old one removed: there is no portable atomic swap of two directories, so between the
    two renames ``target`` is absent (never a mix), and a failed second rename puts the old one back.
    """
    try:
        os.replace(staging, target)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.is_dir() or target.is_symlink():
            raise
    else:
        fsync_directory(target.parent)
        return
    aside = _sibling(target, ".old")
    os.replace(target, aside)  # onto the empty directory just made
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(aside, target)
        raise
    fsync_directory(target.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True  # maybe another thread's write in progress
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # another user's process: alive
    return True


def remove_leftovers(target: Path) -> list[Path]:
    """Remove the staging and set-aside directories of writes to ``target`` whose process no longer runs;
    return them. Errors are ignored (a leftover that stays is only clutter)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = _LEFTOVER.fullmatch(entry.name)
        if match is None or match["stem"] != target.name[:_STEM] or _running(int(match["pid"])):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def path_text(value: Any, *, what: str, noun: str, subject: str, fix: str, error: type[Exception]) -> str:
    """A path argument as text: a str or os.PathLike, not empty, without NUL; else ``error`` saying ``what``
    expected (``noun``), what the ``subject`` holds and the ``fix``."""
    if not isinstance(value, (str, os.PathLike)) or not isinstance(os.fspath(value), str):
        msg = f"{what}: expected {noun} (str or os.PathLike), received {type(value).__name__}"
        raise error(msg)
    text = os.fspath(value)
    if not text or "\0" in text:
        problem = "is empty" if not text else "holds a NUL character, which no file name can"
        msg = f"{what}: the {subject} {text!r} {problem}; {fix}"
        raise error(msg)
    return text
