"""Where enumerated rows go: memory, a temporary memory-mapped file, or a resumable on-disk cache.

Rows of a unit's table are produced in ascending order, chunk by chunk, so a sink appends raw bytes after
an ``.npy`` header and never holds more than one chunk. A finished file is renamed into place atomically,
then opened memory-mapped (read-only, ``allow_pickle=False``).

The cache (``precompute(..., cache_dir=...)``) keys each unit's table by a sha256 of everything its rows
depend on: every module's settings as the plan-reuse key sees them (class, metadata, quantizer domain,
hyper-parameters such as a leaky ReLU's slope, hooks), every parameter and buffer, the unit's channels and
geometry, its input domains and the output domain. A rerun after an interruption (even
``kill -9``) loads finished tables and computes only the missing ones; changing one layer's weights changes
only that layer's keys. Code changes inside a custom ``forward`` are not seen by the key: clear the cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ._reuse import settings, stable_bytes
from .errors import IOTableError
from .trace import Arithmetic

__all__ = ["CacheError", "FileSink", "MemorySink", "TableCache", "layer_fingerprint"]

_CACHE_FORMAT = b"iotable-table-cache-2"


class CacheError(IOTableError, OSError):
    """The table cache directory cannot be used (not a directory, not writable)."""


def layer_fingerprint(module: nn.Module, plan: Any) -> hashlib._Hash:
    """A running sha256 of what every table of a layer depends on, before the unit's own part.

    Every submodule's :func:`iotable._reuse.settings` (class, metadata, quantizer domain, hyper-parameters
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


class MemorySink:
    """Rows kept in one in-memory array."""

    def __init__(self, rows: int, width: int, dtype: np.dtype) -> None:
        self.array = np.empty((rows, width), dtype=dtype)

    def write(self, start: int, data: np.ndarray) -> None:
        self.array[start : start + len(data)] = data

    def finish(self) -> np.ndarray:
        return self.array


class FileSink:
    """Rows appended to an ``.npy`` file, renamed into place when complete, then memory-mapped."""

    def __init__(self, path: Path, rows: int, width: int, dtype: np.dtype, *, keep: bool) -> None:
        self.path, self.keep = path, keep
        self.expected = rows
        self.written = 0
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "wb")
        header = {
            "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
            "fortran_order": False,
            "shape": (rows, width),
        }
        np.lib.format.write_array_header_1_0(self.file, header)

    def write(self, start: int, data: np.ndarray) -> None:
        if start != self.written:  # rows arrive in order; anything else is a bug, not bad input
            raise AssertionError(f"{self.path.name}: rows {start}.. written after {self.written}")
        self.file.write(np.ascontiguousarray(data).tobytes())
        self.written += len(data)

    def finish(self) -> np.ndarray:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)
        array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        if not self.keep:
            try:  # the mapping stays valid after the name is gone (POSIX); elsewhere the file stays
                self.path.unlink()
            except OSError:
                pass
        return array

    def abandon(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


class TableCache:
    """A directory of finished unit tables, one ``<key>.npy`` file each."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        path = Path(directory)
        if path.exists() and not path.is_dir():
            msg = f"cache_dir: {str(path)!r} exists and is not a directory; pass a directory path"
            raise CacheError(msg)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"cache_dir: cannot create {str(path)!r}: {exc.strerror}"
            raise CacheError(msg) from None
        if not os.access(path, os.W_OK):
            msg = f"cache_dir: {str(path)!r} is not writable"
            raise CacheError(msg)
        self.path = path

    def load(self, key: str, rows: int, width: int, dtype: np.dtype) -> np.ndarray | None:
        """The cached table of ``key`` if present and whole; ``None`` (to recompute) otherwise."""
        file = self.path / f"{key}.npy"
        if not file.is_file():
            return None
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return None  # unreadable: recompute and replace it
        if array.shape != (rows, width) or array.dtype != dtype:
            return None
        return array

    def sink(self, key: str, rows: int, width: int, dtype: np.dtype) -> FileSink:
        return FileSink(self.path / f"{key}.npy", rows, width, dtype, keep=True)


def temporary_sink(rows: int, width: int, dtype: np.dtype) -> FileSink:
    """A file sink in the system's temporary directory, for a table larger than the memory budget."""
    directory = Path(tempfile.gettempdir())
    handle, name = tempfile.mkstemp(prefix="iotable-", suffix=".npy", dir=directory)
    os.close(handle)
    os.unlink(name)
    return FileSink(Path(name), rows, width, dtype, keep=False)
