"""Reading cache entries and tool output as untrusted input.

Every cache of iotable (tables, LUT mappings, Verilator builds, implement results) and every file a tool
writes is checked here before a byte of it is believed:

- :func:`check_owned` refuses a path that is a symbolic link, is not owned by the user running iotable, or
  that a group or other users may write (someone else could have put it there, or change it later);
- :func:`read_bounded` reads a regular file through one descriptor (no link followed, so what is checked is
  what is read), after the same checks, and refuses a file larger than the limit the caller names before
  reading it;
- :func:`digest_file` hashes a file in chunks (for entries that hold programs or large outputs);
- :func:`secret_key` is a cache folder's own secret, which signs its records and names its entries.

The callers turn :class:`Untrusted` into their own error class with the cache or tool named and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["SECRET_BYTES", "SECRET_FILE", "Untrusted", "check_owned", "digest_file", "read_bounded", "secret_key"]

_CHUNK = 1 << 20


class Untrusted(Exception):
    """A path that may not be believed: its message says what is wrong with it."""


def _check_stat(info: os.stat_result, path: Path) -> None:
    """Refuse a file or folder owned by another user or writable by others."""
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        msg = f"{path} is owned by user {info.st_uid}, not by the user running iotable ({os.geteuid()})"
        raise Untrusted(msg)
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        msg = f"{path} is writable by other users (mode {stat.filemode(info.st_mode)})"
        raise Untrusted(msg)


@contextlib.contextmanager
def _open(path: Path, *, owned: bool) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """A regular file opened for reading through a descriptor that follows no link, with its status."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if os.path.islink(path):  # O_NOFOLLOW says so too, where the system has it
        msg = f"{path} is a symbolic link"
        raise Untrusted(msg)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        msg = f"{path} cannot be opened ({exc.strerror or exc})"
        raise Untrusted(msg) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            msg = f"{path} is not a regular file"
            raise Untrusted(msg)
        if owned:
            _check_stat(info, path)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as file:
        yield file, info


def check_owned(path: Path, *, directory: bool | None = None) -> None:
    """Refuse ``path`` unless it is a real file or folder (not a link), ours, and writable by us alone.

    Args:
        path: the file or folder.
        directory: True to require a folder, False a regular file, None either.

    Raises:
        Untrusted: with the reason; FileNotFoundError passes through for a missing path.
    """
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        msg = f"{path} is a symbolic link"
        raise Untrusted(msg)
    if directory is True and not stat.S_ISDIR(info.st_mode):
        msg = f"{path} is not a folder"
        raise Untrusted(msg)
    if directory is False and not stat.S_ISREG(info.st_mode):
        msg = f"{path} is not a regular file"
        raise Untrusted(msg)
    _check_stat(info, path)


def read_bounded(path: Path, *, limit: int, owned: bool = True) -> bytes:
    """The bytes of the regular file ``path``, read through one descriptor that follows no link.

    Args:
        path: the file.
        limit: the largest size accepted, in bytes; a larger file is refused before it is read.
        owned: also refuse a file of another user or writable by others (cache entries); False for the
            output of a tool that ran in a folder of ours.

    Raises:
        Untrusted: a link, not a regular file, too large, or (``owned``) not ours.
        FileNotFoundError: no such file.
    """
    with _open(path, owned=owned) as (file, info):
        if info.st_size > limit:
            msg = f"{path} holds {info.st_size:,} bytes, more than the {limit:,} accepted"
            raise Untrusted(msg)
        data = file.read(limit + 1)
    if len(data) > limit:  # grew while being read
        msg = f"{path} holds more than the {limit:,} bytes accepted"
        raise Untrusted(msg)
    return data


def digest_file(path: Path, *, owned: bool = True) -> str:
    """The SHA-256 of the regular file ``path`` (hex), read in chunks through a descriptor that follows no link.

    Raises:
        Untrusted: a link, not a regular file or (``owned``) not ours.
        FileNotFoundError: no such file.
    """
    digest = hashlib.sha256()
    with _open(path, owned=owned) as (file, _info):
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


#: The bytes of a cache folder's secret key (:func:`secret_key`).
SECRET_BYTES = 32
#: The name of that key's file in the cache folder.
SECRET_FILE = "key"


def secret_key(folder: Path) -> bytes:
    """The secret key of the cache folder ``folder`` (already checked as ours): :data:`SECRET_BYTES` random bytes
    in its file ``key``, mode ``0o600``, created on first use.

    The key signs what the cache stores (HMAC-SHA256) and names its entries, so that a record rewritten by
    anyone who cannot read the key fails, and entries cannot be planted in advance. A new key is written aside
    and linked into place: two processes starting at once end with the one linked first.

    Raises:
        Untrusted: the key file is a link, not ours, readable or writable by others, or not of its size.
        OSError: it cannot be created or read.
    """
    path = folder / SECRET_FILE
    if not os.path.lexists(path):
        fd, name = tempfile.mkstemp(prefix=".key-", dir=folder)  # mode 0o600
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(secrets.token_bytes(SECRET_BYTES))
                file.flush()
                os.fsync(file.fileno())
            with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
                os.link(name, path)
        finally:
            os.unlink(name)
    with _open(path, owned=True) as (file, info):
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            msg = f"{path} may be read by other users (mode {stat.filemode(info.st_mode)})"
            raise Untrusted(msg)
        data = file.read(SECRET_BYTES + 1)
    if len(data) != SECRET_BYTES:
        msg = f"{path} holds a key of {len(data)} bytes, not {SECRET_BYTES}"
        raise Untrusted(msg)
    return data
