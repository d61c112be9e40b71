"""Where enumerated rows go: memory, a temporary memory-mapped file, or a resumable on-disk cache.

Rows of a unit's table are produced in ascending order, chunk by chunk, so a sink appends raw bytes after
an ``.npy`` header and never holds more than one chunk. A cache entry is written as a hidden ``.part``
file, locked while it is written, and renamed into place atomically; a table larger than the memory budget
goes to a file in the system's temporary directory that has no name from the start, so that nothing is
left behind even by ``kill -9``. Finished tables are memory-mapped read-only.

Every cache entry carries its key and a signature: the key and an HMAC-SHA256 of the key and the ``.npy``
bytes under the cache folder's secret key (:func:`iotable._util.trust.secret_key`, the file ``key``, mode
0600), appended after the array (``.npy`` readers ignore them); an entry rewritten by anyone who cannot read
that key fails, whatever checksum they compute. An entry is untrusted input: loading it refuses a link,
another user's file or one that others may write (:mod:`iotable._util.trust`), then checks its size, its
header (byte for byte the one written for the table asked for: nothing of it is parsed), stored key (the one
asked for), signature and codes (below the output domain's size), reading no more than the table asked for,
and maps the very file it checked. An entry that fails is not served: a warning
names it and why, and it is recomputed and replaced (renamed over, never written through). Entries are written
writable by their owner only. Opening a cache removes ``.part`` files that no live process holds (left by an
interrupted run); a writer holds its lock until its file is renamed into place, so no cleanup removes a live
one, and two processes storing the same key each end with a whole, valid entry. Disk errors (a full disk, no
permission, a name too long) are :class:`CacheError` errors that name the path and the fix.

The cache (``precompute(..., cache_dir=...)``) keys each unit's table by a sha256 of everything its rows
depend on (:mod:`iotable.front.cachekey`): every module's class and the code of its methods, every
attribute by value at any depth (dicts, lists, sets, unregistered tensors, nested objects, dataclasses,
enums), every parameter, buffer and hook, the unit's channels and geometry, its input domains and the output
domain. An attribute that cannot be keyed by value is refused with a :class:`CacheError` naming it. A rerun
after an interruption (even ``kill -9``) loads finished tables and computes only the missing ones; changing
one layer's weights changes only that layer's keys.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import io
import os
import stat
import tempfile
import warnings
import weakref
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from torch import nn

from .._util.files import plain_mode, temporary_beside
from .._util.trust import SECRET_FILE, Untrusted, check_owned, secret_key
from ..errors import CacheError, IOTableWarning
from ..front.cachekey import module_key, value_bytes
from ..front.glue import Arithmetic

__all__ = ["CacheError", "FileSink", "MemorySink", "TableCache", "layer_fingerprint"]

_CACHE_FORMAT = b"iotable-table-cache-4"


try:  # POSIX: a writer locks its .part file, so that a cleanup never removes a live one
    import fcntl
except ImportError:  # pragma: no cover - other systems refuse to delete open files instead
    fcntl = None  # type: ignore[assignment]


def layer_fingerprint(module: nn.Module, plan: Any) -> hashlib._Hash:
    """A running sha256 of what every table of a layer depends on, before the unit's own part.

    The layer's content key (:func:`iotable.front.cachekey.module_key`: every submodule's class and code,
    attributes by value at any depth, parameters, buffers and hooks), the tensors traced arithmetic reads,
    and the plan's geometry, metadata and output domain.

    Raises:
        CacheError: an attribute that cannot be keyed by value (named, with the fix).
    """
    digest = hashlib.sha256(_CACHE_FORMAT)
    digest.update(module_key(module, layer=plan.name))
    for m in module.modules():
        if isinstance(m, Arithmetic):
            operands = tuple(m.tensors())
            digest.update(value_bytes(operands, layer=plan.name, what="the tensors its arithmetic reads"))
    g = plan.geometry
    parts = (plan.layout, g.kernel, g.stride, g.dilation, g.padding, plan.spec)
    digest.update(value_bytes(parts, layer=plan.name, what="its plan"))
    if plan.output_domain is not None:
        digest.update(plan.output_domain.values.tobytes())
    return digest


def unit_key(layer_digest: hashlib._Hash, plan: Any, unit: Any) -> str:
    """The cache key of one unit's table."""
    digest = layer_digest.copy()
    digest.update(repr((unit.index, unit.in_channels, unit.out_channels)).encode())
    for d in plan.unit_domains(unit):
        digest.update(d.values.tobytes())
    return digest.hexdigest()


#: Ends every cache entry: this marker, the entry's key and a newline, then the HMAC-SHA256 (under the cache
#: folder's secret key) of the marker, the key, the newline and the ``.npy`` bytes before it.
_TRAILER = b"iotable-cache-hmac-sha256:"
#: Group and other write bits: a cache entry has neither (a reader refuses one that has).
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _trailer(key: str, digest: bytes) -> bytes:
    return _TRAILER + key.encode() + b"\n" + digest


def _signer(secret: bytes, key: str) -> Any:
    """A running HMAC of an entry under the cache's secret key, its trailer's marker and key already in."""
    return hmac.new(secret, _TRAILER + key.encode() + b"\n", hashlib.sha256)


def _header(shape: tuple[int, int], dtype: np.dtype) -> bytes:
    """The ``.npy`` (version 1.0) magic and header written for a table of ``shape`` and ``dtype``."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


_FIXES = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space within your disk quota",
    errno.EACCES: "make it writable or choose a folder you may write to",
    errno.EPERM: "make it writable or choose a folder you may write to",
    errno.EROFS: "choose a folder on a writable file system",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ENOENT: "create the folder or choose an existing one",
}


def disk_error(action: str, path: Any, exc: OSError, *, fix: str) -> CacheError:
    """A :class:`CacheError` for a failed disk operation: the path, the system's reason and what to do."""
    reason = exc.strerror or str(exc)
    hint = _FIXES.get(exc.errno or 0)
    error = CacheError(f"{action} {str(path)!r}: {reason}; {hint + ', or ' if hint else ''}{fix}")
    error.errno, error.strerror, error.filename = exc.errno, exc.strerror, str(path)
    return error


def check_cache_dir(directory: Any) -> Path:
    """``cache_dir`` as a path, or a :class:`CacheError`: a path (str or os.PathLike), not empty, no NUL."""
    if not isinstance(directory, (str, os.PathLike)):
        msg = f"cache_dir: expected a directory path (str or os.PathLike), received {type(directory).__name__}"
        raise CacheError(msg)
    text = os.fspath(directory)
    if not isinstance(text, str) or not text:
        msg = (
            f"cache_dir: expected a directory path, received {text!r}; an empty path would write into the "
            "current directory: pass the folder by name (cache_dir='.' for the current one)"
        )
        raise CacheError(msg)
    if "\0" in text:
        msg = f"cache_dir: the path {text!r} holds a NUL character, which no file name can; pass another path"
        raise CacheError(msg)
    return Path(text)


class MemorySink:
    """Rows kept in one in-memory array."""

    def __init__(self, rows: int, width: int, dtype: np.dtype) -> None:
        self.array = np.empty((rows, width), dtype=dtype)

    def write(self, start: int, data: np.ndarray) -> None:
        self.array[start : start + len(data)] = data

    def finish(self) -> np.ndarray:
        return self.array


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _claim(file: BinaryIO, name: str) -> bool:
    """Lock a new ``.part`` file as being written (released when the process ends, however it ends); False
    when a cleanup in another process got to it first (it holds the lock, or has removed the name).

    Where the file system has no locks (some network file systems), the file goes unmarked; a cleanup
    there cannot tell a live file from a stale one either, and leaves both.
    """
    if fcntl is None:
        return True
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN)  # held: a cleanup is removing it
    try:  # locked now, so no cleanup removes it from here on; one may have done so just before
        return os.stat(name).st_ino == os.fstat(file.fileno()).st_ino
    except OSError:
        return False


class FileSink:
    """Rows appended to an ``.npy`` file, then memory-mapped.

    A cache entry (``key`` given, with the cache's ``secret``) is written to a locked hidden ``.part`` file in
    its folder, ends with the signed trailer and is renamed to ``path`` when complete. Without a key the file is
    a temporary one: unnamed from the start where the system allows (POSIX), so that it never outlives the process.
    A write that fails removes the partial file and raises :class:`CacheError`; a sink dropped unfinished
    removes it too.
    """

    def __init__(
        self, path: Path, rows: int, width: int, dtype: np.dtype, *, key: str | None, fix: str, secret: bytes = b""
    ) -> None:
        self.path, self.key, self.fix = path, key, fix
        self.expected = rows
        self.written = 0
        self.digest = _signer(secret, key) if key is not None else None
        self.tmp: str | None = None
        try:
            self.file, self.tmp = self._create(path, key)  # closed in finish or abandon
        except OSError as exc:
            raise disk_error("cannot create a table file in", path.parent, exc, fix=fix) from None
        self._cleanup = weakref.finalize(self, _discard, self.file, self.tmp)
        try:
            if key is not None:
                os.fchmod(self.file.fileno(), plain_mode() & ~_OTHERS_WRITE)  # readers refuse shared entries
            else:
                self._forget_name()
            self._write_header(_header((rows, width), dtype))
        except OSError as exc:
            self.abandon()
            raise disk_error("cannot write", self.tmp, exc, fix=fix) from None
        self.header_end = self.file.tell()
        self.dtype, self.shape = np.dtype(dtype), (rows, width)

    @staticmethod
    def _create(path: Path, key: str | None) -> tuple[BinaryIO, str]:
        """A new partial file beside ``path``: a cache entry's is locked (claimed again if a cleanup in
        another process removed it between its creation and its lock)."""
        for _ in range(8):
            file, name = temporary_beside(path, hidden=key is not None)
            if key is None or _claim(file, name):
                return file, name
            file.close()
        raise OSError(errno.EBUSY, "every new partial file was removed by a cleanup while it was created")

    def _forget_name(self) -> None:
        """Unlink a temporary file at once (POSIX keeps it until closed and unmapped)."""
        try:
            os.unlink(self.tmp)  # type: ignore[arg-type]
        except OSError:  # systems that cannot unlink an open file: it goes when the sink finishes
            return
        self._cleanup.detach()
        self._cleanup = weakref.finalize(self, _discard, self.file, None)
        self.tmp = None

    def _write_header(self, header: bytes) -> None:
        self.file.write(header)
        if self.digest is not None:
            self.digest.update(header)

    def write(self, start: int, data: np.ndarray) -> None:
        if start != self.written:  # rows arrive in order; anything else is a bug, not bad input
            raise AssertionError(f"{self.path.name}: rows {start}.. written after {self.written}")
        raw = np.ascontiguousarray(data, dtype=self.dtype).tobytes()
        try:
            self.file.write(raw)
        except OSError as exc:
            self.abandon()
            raise disk_error("cannot write", self.tmp or self.path.parent, exc, fix=self.fix) from None
        if self.digest is not None:
            self.digest.update(raw)
        self.written += len(data)

    def finish(self) -> np.ndarray:
        if self.written != self.expected:  # every row is written before a table is finished: a bug otherwise
            raise AssertionError(f"{self.path.name}: {self.written} of {self.expected} rows written")
        try:
            if self.digest is not None:
                self.file.write(_trailer(self.key or "", self.digest.digest()))
            self.file.flush()
            os.fsync(self.file.fileno())
            if self.key is None or self.tmp is None:  # a temporary table: mapped, never renamed
                return self._mapped_temporary()
            # Renamed while open and locked: a cleanup never sees a finished .part file unlocked. The map is of
            # the file written, whatever another process renames over the entry's name afterwards.
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abandon()
            raise disk_error("cannot write", self.tmp or self.path.parent, exc, fix=self.fix) from None
        self._cleanup.detach()
        with self.file:
            return _map(self.file, self.dtype, self.shape, self.header_end)

    def _mapped_temporary(self) -> np.ndarray:
        array = _map(self.file, self.dtype, self.shape, self.header_end)
        self.file.close()  # the mapping keeps the data
        self._cleanup()
        return array

    def abandon(self) -> None:
        """Close and remove the partial file."""
        self._cleanup()


def _discard(file: BinaryIO, tmp: str | None) -> None:
    file.close()
    if tmp is not None:
        _unlink(tmp)


def _map(file: BinaryIO, dtype: np.dtype, shape: tuple[int, int], offset: int) -> np.ndarray:
    """A read-only memory map of an open table file's array (it outlives the file object; an empty array
    where there is nothing to map)."""
    if not shape[0] * shape[1]:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=shape)


class TableCache:
    """A directory of finished unit tables, one ``<key>.npy`` file each, signed with the folder's secret key.

    Raises:
        CacheError: the folder cannot be made or written, or its secret key cannot be made or trusted.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        path = check_cache_dir(directory)
        fix = "pass another cache_dir"
        try:
            if path.exists() and not path.is_dir():
                msg = f"cache_dir: {str(path)!r} exists and is not a directory; pass a directory path"
                raise CacheError(msg)
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if isinstance(exc, CacheError):
                raise
            raise disk_error("cache_dir: cannot create", path, exc, fix=fix) from None
        if not os.access(path, os.W_OK):
            msg = f"cache_dir: {str(path)!r} is not writable; make it writable or {fix}"
            raise CacheError(msg)
        self.path = path
        self.secret = _secret(path)
        self.removed = sweep_parts(path)

    def load(self, key: str, rows: int, width: int, dtype: np.dtype, *, codes: int | None = None) -> np.ndarray | None:
        """The cached table of ``key`` if its entry can be believed; else ``None`` (recompute it: the fresh table
        then replaces the entry).

        Believed: a regular file (not a link), owned by the user running iotable and writable by no one else,
        whose header and size are those of the table asked for, whose stored key is ``key`` and whose checksum
        and signature hold; every code below ``codes`` (the output domain's size). An entry that fails is not served: an
        :class:`~iotable.errors.IOTableWarning` names it and why.
        """
        file = self.path / f"{key}.npy"
        if not os.path.lexists(file):
            return None
        shape, dtype = (rows, width), np.dtype(dtype)
        try:
            array = _read_entry(file, key, shape, dtype, self.secret)
            if codes is not None and array.size and int(array.max()) >= codes:
                raise _BadEntry(f"holds code {int(array.max())}, outside the output domain's {codes} codes")
        except Untrusted as exc:
            reason = f"cannot be trusted: {exc}"
        except _BadEntry as exc:
            reason = str(exc)
        except OSError as exc:
            reason = f"cannot be read ({exc.strerror or exc})"
        else:
            return array
        message = (
            f"precompute(cache_dir=...): the table cache entry {str(file)!r} {reason}; not used: the table is "
            "computed again and replaces it"
        )
        warnings.warn(message, IOTableWarning, stacklevel=2)
        return None

    def sink(self, key: str, rows: int, width: int, dtype: np.dtype) -> FileSink:
        path = self.path / f"{key}.npy"
        return FileSink(path, rows, width, dtype, key=key, fix="pass another cache_dir", secret=self.secret)


def _secret(folder: Path) -> bytes:
    """The cache folder's secret key; :class:`CacheError` naming its file and the fix when it cannot be made or
    trusted."""
    path = folder / SECRET_FILE
    fix = f"remove {str(path)!r} (iotable writes a new key; the tables cached under the old one are computed again)"
    try:
        return secret_key(folder)
    except Untrusted as exc:
        msg = f"cache_dir: the table cache's secret key cannot be trusted: {exc}; {fix}, or make it yours, mode 0600"
        raise CacheError(msg) from None
    except OSError as exc:
        raise disk_error("cache_dir: cannot use the table cache's secret key", path, exc, fix=fix) from None


class _BadEntry(Exception):
    """A cache entry that is not the table asked for: the message says how."""


def _read_entry(file: Path, key: str, shape: tuple[int, int], dtype: np.dtype, secret: bytes) -> np.ndarray:
    """The checked table of the entry ``file``, memory-mapped from the descriptor its checks read.

    Raises:
        Untrusted: a link, not a regular file, another user's, or writable by others.
        _BadEntry: a size, header, key or signature that is not the table's.
    """
    check_owned(file, directory=False)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(file, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Untrusted(f"{file} is a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as f:
        info, named = os.fstat(fd), os.lstat(file)
        if (info.st_dev, info.st_ino) != (named.st_dev, named.st_ino):
            raise _BadEntry("was replaced while it was opened")
        if not stat.S_ISREG(info.st_mode):
            raise _BadEntry("is not a regular file")
        offset = _verified_entry(f, key, shape, dtype, info.st_size, secret)
        return _map(f, dtype, shape, offset)


def _verified_entry(f: BinaryIO, key: str, shape: tuple[int, int], dtype: np.dtype, size: int, secret: bytes) -> int:
    """The data offset of the open cache entry ``f`` once its size, header, key and signature are checked.

    The header is compared byte for byte with the one written for the table asked for (an entry is never parsed),
    and the file is read no further than that table's size.
    """
    expected = f"a {shape[0]}x{shape[1]} table of {dtype}"
    header = _header(shape, dtype)
    data = dtype.itemsize * shape[0] * shape[1]
    trailer = len(_trailer(key, bytes(32)))
    if size != len(header) + data + trailer:
        raise _BadEntry(f"holds {size} bytes, expected {len(header) + data + trailer} for {expected} and its key")
    signer = _signer(secret, key)
    found = f.read(len(header))
    if found != header:
        raise _BadEntry(f"does not start with the .npy header of {expected}")
    signer.update(found)
    left = data
    while left:
        block = f.read(min(left, 1 << 22))
        if not block:
            raise _BadEntry("ended before its table did")
        signer.update(block)
        left -= len(block)
    stored = f.read(trailer)
    if not stored.startswith(_TRAILER) or stored[len(_TRAILER) : -33] != key.encode():
        found_key = stored[len(_TRAILER) : -33].decode("ascii", "replace")[:80]
        raise _BadEntry(f"was stored for the key {found_key!r}, not for its own name's key")
    if not hmac.compare_digest(stored, _trailer(key, signer.digest())):
        raise _BadEntry(
            "fails its checksum (an HMAC under the cache's secret key): its bytes changed after it was written, "
            "or it was written under another key"
        )
    return len(header)


def sweep_parts(directory: Path) -> int:
    """Remove the ``.part`` files in ``directory`` that no live writer holds; return how many went."""
    removed = 0
    try:
        names = [p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".part")]
    except OSError:
        return 0
    for part in names:
        try:
            with open(part, "rb") as f:
                if fcntl is not None:
                    try:
                        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        continue  # a live writer holds it (or the file system cannot say: keep it)
                if os.stat(part).st_ino != os.fstat(f.fileno()).st_ino:
                    continue  # the name went to another file since it was opened
                os.unlink(part)
                removed += 1
        except OSError:
            continue
    return removed


def temporary_sink(rows: int, width: int, dtype: np.dtype) -> FileSink:
    """A file sink in the system's temporary directory, for a table larger than the memory budget."""
    directory = Path(tempfile.gettempdir())
    fix = "point TMPDIR at a folder with room, or raise memory_budget to keep the table in memory"
    return FileSink(directory / "iotable-table", rows, width, dtype, key=None, fix=fix)
