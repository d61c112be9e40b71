"""Where enumerated rows go: memory, a temporary memory-mapped file, or a resumable on-disk cache.

Rows of a unit's table are produced in ascending order, chunk by chunk, so a sink appends raw bytes after
an ``.npy`` header and never holds more than one chunk. A cache entry is written as a hidden ``.part``
file, locked while it is written, and renamed into place atomically; a table larger than the memory budget
goes to a file in the system's temporary directory that has no name from the start, so that nothing is
left behind even by ``kill -9``. Finished tables are memory-mapped read-only.

Every cache entry carries its own checksum: a sha256 of its key and its ``.npy`` bytes, appended after the
array (``.npy`` readers ignore it). Loading an entry checks its header, size, checksum and codes (below the
output domain's size); an entry that fails is recomputed and replaced, never trusted. Opening a cache
removes ``.part`` files that no live process holds (left by an interrupted run), and a failed write removes
its own. Disk errors (a full disk, no permission, a name too long) are :class:`CacheError` errors that
name the path and the fix.

The cache (``precompute(..., cache_dir=...)``) keys each unit's table by a sha256 of everything its rows
depend on: every module's settings as the plan-reuse key sees them (class, metadata, quantizer domain,
hyper-parameters such as a leaky ReLU's slope, hooks), every parameter and buffer, the unit's channels and
geometry, its input domains and the output domain. A rerun after an interruption (even
``kill -9``) loads finished tables and computes only the missing ones; changing one layer's weights changes
only that layer's keys. Code changes inside a custom ``forward`` are not seen by the key: clear the cache.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
import weakref
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from torch import nn

from .._util.files import commit, temporary_beside
from ..errors import CacheError
from ..front.glue import Arithmetic
from ..front.reuse import settings, stable_bytes

__all__ = ["CacheError", "FileSink", "MemorySink", "TableCache", "layer_fingerprint"]

_CACHE_FORMAT = b"iotable-table-cache-2"


try:  # POSIX: a writer locks its .part file, so that a cleanup never removes a live one
    import fcntl
except ImportError:  # pragma: no cover - other systems refuse to delete open files instead
    fcntl = None  # type: ignore[assignment]


def layer_fingerprint(module: nn.Module, plan: Any) -> hashlib._Hash:
    """A running sha256 of what every table of a layer depends on, before the unit's own part.

    Every submodule's :func:`iotable.front.reuse.settings` (class, metadata, quantizer domain, hyper-parameters
    such as a leaky ReLU's slope, hooks: the description the plan-reuse key compares), every parameter and
    buffer (dtype, shape and bytes), the tensors traced arithmetic reads, and the plan's geometry and domains.
    """
    digest = hashlib.sha256(_CACHE_FORMAT)
    for name, m in module.named_modules():
        digest.update(f"module {name!r}:".encode())
        digest.update(stable_bytes(settings(m)))
        own = [*m._parameters.items(), *m._buffers.items()]
        if isinstance(m, Arithmetic):
            own += [(f"operand{k}", t) for k, t in enumerate(m.tensors())]
        for key, tensor in own:
            if tensor is None:
                digest.update(f"{key}:None;".encode())
                continue
            array = tensor.detach().cpu().contiguous().numpy()
            digest.update(f"{key}:{array.dtype}:{array.shape};".encode())
            digest.update(array.tobytes())
    g = plan.geometry
    digest.update(repr((plan.layout, g.kernel, g.stride, g.dilation, g.padding)).encode())
    digest.update(stable_bytes(plan.spec))
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


#: Ends every cache entry: this marker, then the sha256 of the entry's key and of the ``.npy`` bytes before it.
_TRAILER = b"iotable-cache-sha256:"
_TRAILER_SIZE = len(_TRAILER) + 32

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


def _lock(file: BinaryIO) -> None:
    """Mark an open ``.part`` file as being written (released when the process ends, however it ends).

    Where the file system has no locks (some network file systems), the file goes unmarked; a cleanup
    there cannot tell a live file from a stale one either, and leaves both.
    """
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


class FileSink:
    """Rows appended to an ``.npy`` file, then memory-mapped.

    A cache entry (``key`` given) is written to a locked hidden ``.part`` file in its folder, ends with
    the checksum trailer and is renamed to ``path`` when complete. Without a key the file is a temporary
    one: unnamed from the start where the system allows (POSIX), so that it never outlives the process.
    A write that fails removes the partial file and raises :class:`CacheError`; a sink dropped unfinished
    removes it too.
    """

    def __init__(self, path: Path, rows: int, width: int, dtype: np.dtype, *, key: str | None, fix: str) -> None:
        self.path, self.key, self.fix = path, key, fix
        self.expected = rows
        self.written = 0
        self.digest = hashlib.sha256(f"{_TRAILER.decode()}{key}\n".encode()) if key is not None else None
        self.tmp: str | None = None
        try:
            self.file, self.tmp = temporary_beside(path, hidden=key is not None)  # closed in finish or abandon
        except OSError as exc:
            raise disk_error("cannot create a table file in", path.parent, exc, fix=fix) from None
        self._cleanup = weakref.finalize(self, _discard, self.file, self.tmp)
        try:
            if key is not None:
                _lock(self.file)
            else:
                self._forget_name()
            header = {
                "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                "fortran_order": False,
                "shape": (rows, width),
            }
            self._write_header(header)
        except OSError as exc:
            self.abandon()
            raise disk_error("cannot write", self.tmp, exc, fix=fix) from None
        self.header_end = self.file.tell()
        self.dtype, self.shape = np.dtype(dtype), (rows, width)

    def _forget_name(self) -> None:
        """Unlink a temporary file at once (POSIX keeps it until closed and unmapped)."""
        try:
            os.unlink(self.tmp)  # type: ignore[arg-type]
        except OSError:  # systems that cannot unlink an open file: it goes when the sink finishes
            return
        self._cleanup.detach()
        self._cleanup = weakref.finalize(self, _discard, self.file, None)
        self.tmp = None

    def _write_header(self, header: dict[str, Any]) -> None:
        start = self.file.tell()
        np.lib.format.write_array_header_1_0(self.file, header)
        if self.digest is not None:
            end = self.file.tell()
            self.file.seek(start)
            self.digest.update(self.file.read(end - start))

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
                self.file.write(_TRAILER + self.digest.digest())
            if self.key is None or self.tmp is None:  # a temporary table: mapped, never renamed
                self.file.flush()
                os.fsync(self.file.fileno())
                return self._mapped_temporary()
            commit(self.file, self.tmp, self.path)
        except OSError as exc:
            self.abandon()
            raise disk_error("cannot write", self.tmp or self.path.parent, exc, fix=self.fix) from None
        self._cleanup.detach()
        return _map(self.path, self.dtype, self.shape, self.header_end)

    def _mapped_temporary(self) -> np.ndarray:
        if not self.expected * self.shape[1]:
            array = np.zeros(self.shape, dtype=self.dtype)
        else:
            array = np.memmap(self.file, dtype=self.dtype, mode="r", offset=self.header_end, shape=self.shape)
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


def _map(path: Path, dtype: np.dtype, shape: tuple[int, int], offset: int) -> np.ndarray:
    """A read-only memory map of a table file's array (an empty array where there is nothing to map)."""
    if not shape[0] * shape[1]:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


class TableCache:
    """A directory of finished unit tables, one ``<key>.npy`` file each, checksummed."""

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
        self.removed = sweep_parts(path)

    def load(self, key: str, rows: int, width: int, dtype: np.dtype, *, codes: int | None = None) -> np.ndarray | None:
        """The cached table of ``key`` if its file is whole, checksummed and within ``codes``; else ``None``.

        ``None`` means: recompute it (its file is then replaced). ``codes``: the output domain's size, every
        stored code must be below it.
        """
        file = self.path / f"{key}.npy"
        try:
            info = os.lstat(file)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):  # a symlink or anything but a plain file is not an entry
            return None
        try:
            offset = _verified_entry(file, key, (rows, width), np.dtype(dtype), info.st_size)
        except (OSError, ValueError):
            return None
        if offset is None:
            return None
        array = _map(file, np.dtype(dtype), (rows, width), offset)
        if codes is not None and array.size and int(array.max()) >= codes:
            return None  # codes outside the output domain: not what this layer makes
        return array

    def sink(self, key: str, rows: int, width: int, dtype: np.dtype) -> FileSink:
        return FileSink(self.path / f"{key}.npy", rows, width, dtype, key=key, fix="pass another cache_dir")


def _verified_entry(file: Path, key: str, shape: tuple[int, int], dtype: np.dtype, size: int) -> int | None:
    """The data offset of a cache entry whose header, size and checksum are right, else ``None``."""
    with open(file, "rb") as f:
        if np.lib.format.read_magic(f) != (1, 0):
            return None
        file_shape, fortran, file_dtype = np.lib.format.read_array_header_1_0(f)
        offset = f.tell()
        if tuple(file_shape) != shape or fortran or file_dtype != dtype:
            return None
        data = dtype.itemsize * shape[0] * shape[1]
        if size != offset + data + _TRAILER_SIZE:
            return None
        digest = hashlib.sha256(f"{_TRAILER.decode()}{key}\n".encode())
        f.seek(0)
        left = offset + data
        while left:
            block = f.read(min(left, 1 << 22))
            if not block:
                return None
            digest.update(block)
            left -= len(block)
        if f.read() != _TRAILER + digest.digest():
            return None
    return offset


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
