"""A design directory as one unit: where :func:`~iotable.hdl.export` may write, how it writes, and how
:func:`~iotable.hdl.simulate` and :func:`~iotable.hdl.check` verify what they read.

:func:`target_directory` checks the path before any work (a path, not empty, no NUL; not a file, a bundle,
a path inside a bundle or below a file; no dangling or looping link; empty, or with ``overwrite`` a
directory that holds an earlier design and nothing else: its ``<top>_design.json``, read back, lists every
entry).
:func:`write_design` writes every file into a hidden staging directory beside the target, hashes each file
back from there, adds the design description with the checksums, and renames the directory into place: a
reader (or a killed export) sees the old design or the whole new one. :func:`read_verified` refuses a
directory whose file set or any file's sha256 differs from the :class:`~iotable.hdl.Design`'s manifest.
Every ``OSError`` becomes an :class:`~iotable.errors.HDLError` naming the path and the fix.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._util.files import path_text, remove_leftovers, replace_directory, staging_directory
from .._util.trust import Untrusted, read_bounded
from ..errors import HDLError
from .table import Text
from .tools import write_files

__all__ = ["file_sha256", "read_verified", "target_directory", "write_design"]

#: The files that make a directory an iotable bundle (iotable.bundle writes them; formats 1-6 have the first).
_BUNDLE_MANIFEST = "manifest.json"
_BUNDLE_FORMAT = b'"iotable-bundle"'
_CHUNK = 1 << 20
_RECORD_SUFFIX = "_design.json"  # the design record export writes: <top>_design.json
_MAX_RECORD = 64 << 20  # bytes of a design record read to decide whether a directory holds a design

_FIXES = {
    errno.ENOSPC: "free space on that disk or export elsewhere",
    errno.EDQUOT: "free space within your quota or export elsewhere",
    errno.EACCES: "choose a folder you may write to (or read, to simulate)",
    errno.EPERM: "choose a folder you may write to (or read, to simulate)",
    errno.EROFS: "choose a writable file system",
    errno.ENAMETOOLONG: "choose a shorter path (a file name has at most 255 bytes)",
    errno.ELOOP: "remove the symlink loop from the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another path",
    errno.ENOENT: "check the path (a folder on it is missing, or a link on it dangles)",
    errno.EEXIST: "choose another path, or pass overwrite=True to replace the directory",
    errno.ENOTEMPTY: "choose another path, or pass overwrite=True to replace the directory",
}


def path_error(what: str, action: str, path: Path | str, exc: OSError) -> HDLError:
    """An :class:`HDLError` for a failed disk operation: the path, the system's reason, what to do."""
    reason = exc.strerror or type(exc).__name__
    fix = _FIXES.get(exc.errno or 0, "check the path and the disk")
    return HDLError(f"{what}: cannot {action} {str(path)[:300]!r} ({reason}); {fix}")


def _path_text(directory: Any, what: str) -> str:
    return path_text(
        directory,
        what=what,
        noun="a directory path",
        subject="directory path",
        fix="pass the folder to write the design into",
        error=HDLError,
    )


def _is_bundle(folder: Path) -> bool:
    """``folder`` holds an iotable bundle's manifest (whose ``format`` is written near its start)."""
    try:
        with open(folder / _BUNDLE_MANIFEST, "rb") as manifest:
            return _BUNDLE_FORMAT in manifest.read(4096)
    except OSError:
        return False


def _resolved(target: Path, what: str) -> Path:
    """``target`` with a link at its end followed (dangling or looping links refused)."""
    if not target.is_symlink():
        return target
    try:
        return target.resolve(strict=True)
    except FileNotFoundError:
        msg = f"{what}: {str(target)!r} is a link to a missing path ({os.readlink(target)!r}); fix or remove the link"
        raise HDLError(msg) from None
    except (OSError, RuntimeError):
        msg = f"{what}: {str(target)!r} is a link that loops; remove the symlink loop or choose another path"
        raise HDLError(msg) from None


def _check_ancestors(target: Path, what: str) -> None:
    for parent in target.parents:
        if parent.is_symlink() and not parent.exists():
            msg = f"{what}: {str(parent)!r} on the path {str(target)!r} is a dangling or looping link; fix it"
            raise HDLError(msg)
        if not parent.exists():
            continue
        if not parent.is_dir():
            msg = f"{what}: {str(parent)!r} is a file, so {str(target)!r} cannot be a directory inside it"
            raise HDLError(msg)
        if _is_bundle(parent):
            msg = f"{what}: {str(target)!r} is inside the iotable bundle {str(parent)!r}; export outside the bundle"
            raise HDLError(msg)


def target_directory(directory: Any, *, overwrite: bool, what: str) -> Path:
    """Where :func:`write_design` will put the design, checked (see the module docstring); nothing written."""
    text = _path_text(directory, what)
    try:
        target = _resolved(Path(os.path.abspath(text)), what)
        _check_ancestors(target, what)
        if not target.exists():
            return target
        if not target.is_dir():
            msg = f"{what}: {text!r} exists and is not a directory; give a directory for the design's files"
            raise HDLError(msg)
        if _is_bundle(target):
            msg = f"{what}: {text!r} is an iotable bundle; export the design into another directory"
            raise HDLError(msg)
        if overwrite and (target == Path.cwd() or target in Path.cwd().parents):
            msg = (
                f"{what}: {text!r} holds the working directory, which overwrite=True would remove; export into a "
                "new directory or change to another working directory first"
            )
            raise HDLError(msg)
        if not overwrite and not _empty(target):
            msg = (
                f"{what}: {text!r} is a directory that is not empty; choose a new or empty directory, or pass "
                "overwrite=True to replace the design an earlier export wrote there"
            )
            raise HDLError(msg)
        if overwrite and not _empty(target):
            _check_previous_design(target, text, what)
    except OSError as exc:
        raise path_error(what, "use the directory", text, exc) from None
    return target


def _design_record(folder: Path, name: str) -> list[str] | None:
    """The files the design record ``name`` in ``folder`` lists, if it is one :func:`write_design` wrote (a
    regular file of JSON with the design's ``top``, ``files`` and ``sha256``, naming itself); else None."""
    try:
        data = read_bounded(folder / name, limit=_MAX_RECORD, owned=False)
        record = json.loads(data.decode("utf-8"))
    except (Untrusted, OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    top, files = record.get("top"), record.get("files")
    if not isinstance(top, str) or not isinstance(files, list) or not isinstance(record.get("sha256"), dict):
        return None
    if name != f"{top}_design.json" or name not in files or not all(isinstance(f, str) for f in files):
        return None
    return files


def _check_previous_design(target: Path, text: str, what: str) -> None:
    """Refuse to replace ``target`` unless it holds a design an earlier export wrote, and nothing else: what
    overwrite=True deletes must be iotable's own files."""
    with os.scandir(target) as entries:
        present = sorted(entry.name for entry in entries)
    records = (_design_record(target, name) for name in present if name.endswith(_RECORD_SUFFIX))
    listed = next((files for files in records if files is not None), None)
    if listed is None:
        msg = (
            f"{what}: {text!r} is a directory that holds no design of iotable (no <top>_design.json that export "
            f"wrote; it holds {present[:5]}{' ...' if len(present) > 5 else ''}), and overwrite=True would delete "
            "all of it; overwrite=True replaces only an earlier export: choose a new or empty directory"
        )
        raise HDLError(msg)
    extra = sorted(set(present) - set(listed))
    if extra:
        msg = (
            f"{what}: {text!r} holds an earlier design but also files the export did not write "
            f"({extra[:5]}{' ...' if len(extra) > 5 else ''}), which overwrite=True would delete; move them out "
            "of the directory, or choose a new or empty directory"
        )
        raise HDLError(msg)


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file (not a link), read in chunks; ``OSError`` if it is not one."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        digest = hashlib.sha256()
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_design(
    target: Path,
    files: Mapping[str, str | Text],
    description: str,
    json: Callable[[dict[str, str]], str],
    *,
    what: str,
) -> dict[str, str]:
    """Write ``files`` and the description (``json(checksums)``, named ``description``) as the directory
    ``target``, replacing what is there; return every file's sha256, the description's included."""
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(target)
        staging = staging_directory(target)
    except OSError as exc:
        raise path_error(what, "create a directory beside", target, exc) from None
    try:
        write_files(files, staging)
        checksums = {name: file_sha256(staging / name) for name in files}
        write_files({description: json(checksums)}, staging)
        checksums[description] = file_sha256(staging / description)
        replace_directory(staging, target)
    except OSError as exc:
        raise path_error(what, "write the design into", target, exc) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return checksums


def read_verified(directory: Path, manifest: Mapping[str, str], names: tuple[str, ...], *, what: str) -> dict[str, str]:
    """The texts of ``names``, after checking that ``directory`` holds exactly ``manifest``'s files, each with
    its sha256; refuses a difference by the file's name."""
    fix = "export the design again (or simulate the Design that export returned for this directory)"
    if not manifest:
        msg = f"{what}: the design carries no file checksums, so its directory cannot be verified; {fix}"
        raise HDLError(msg)
    try:
        present = {entry.name for entry in os.scandir(directory)}
    except OSError as exc:
        raise path_error(what, "read the design directory", directory, exc) from None
    missing = sorted(set(manifest) - present)
    extra = sorted(present - set(manifest))
    if missing or extra:
        parts = [f"missing {missing[:5]}"] if missing else []
        parts += [f"not part of the design {extra[:5]}"] if extra else []
        listed = "; ".join(parts)
        msg = f"{what}: {str(directory)!r} does not hold the design's files ({listed}); {fix}"
        raise HDLError(msg)
    for name, expected in manifest.items():
        try:
            if not stat.S_ISREG(os.lstat(directory / name).st_mode):
                msg = f"{what}: {str(directory / name)!r} is not a regular file (a link or other); {fix}"
                raise HDLError(msg)
            actual = file_sha256(directory / name)
        except OSError as exc:
            raise path_error(what, "read the design file", directory / name, exc) from None
        if actual != expected:
            msg = (
                f"{what}: {str(directory / name)!r} is not the file the design wrote (sha256 {actual[:16]}..., "
                f"expected {expected[:16]}...): another design or an edit replaced it; {fix}"
            )
            raise HDLError(msg)
    texts = {}
    for name in names:
        path = directory / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise path_error(what, "read the design file", path, exc) from None
        if hashlib.sha256(data).hexdigest() != manifest.get(name):
            msg = f"{what}: {str(path)!r} changed while it was read; {fix}"
            raise HDLError(msg)
        texts[name] = data.decode("utf-8", errors="replace")
    return texts
