"""The on-disk cache of mapping results: a JSON record per (function, k, script, ABC version) in one folder
(:class:`Cache`), and the results it holds read back, each netlist checked against its table again
(:func:`cached_results`), so that a rerun, or a run after an interruption, maps only what is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._util.files import atomic_write
from ..errors import CacheError, NetlistMismatchError, SynthError
from ..lutnet import RECORD_FORMAT, BitFunction, LutNetlist, LutResult, check_netlist, result_name
from .records import MappedTable, from_record

__all__ = ["Cache", "cached_results", "from_cache"]


class Cache:
    """JSON records of mapped functions in one folder, one file per (function, k, script, ABC version), and
    in memory: ``memory`` maps each file name to its checked :class:`~iotable.lutnet.LutResult`, first those
    a network holds (``net.luts``, see :func:`iotable.synth.cost`; read before the folder), then every result checked or
    mapped here."""

    def __init__(self, folder: Any, *, what: str, held: Mapping[str, LutResult] | None = None) -> None:
        self.what = what
        self.memory: dict[str, LutResult] = dict(held or {})
        self.folder: Path | None = None
        if folder is None:
            return
        if not isinstance(folder, (str, os.PathLike)) or "\0" in os.fspath(folder):
            msg = f"{what}: cache_dir must be a folder path (str or os.PathLike), received {folder!r}"
            raise SynthError(msg)
        path = Path(folder)
        try:
            if path.exists() and not path.is_dir():
                msg = f"{what}: cache_dir {str(path)!r} exists and is not a folder; pass a folder for the cache"
                raise CacheError(msg)
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"{what}: cannot use cache_dir {str(path)!r}: {exc.strerror or exc}; pass a writable folder"
            raise CacheError(msg) from None
        self.folder = path

    @staticmethod
    def name(key: str, k: int, script: str, version: str) -> str:
        """The file name of a result (:func:`iotable.lutnet.result_name`)."""
        return result_name(key, k, script, version)

    def load(self, file: str) -> dict[str, Any] | None:
        """The record the folder holds in ``file`` (its fields' types checked), or ``None`` without one."""
        if self.folder is None or not (self.folder / file).exists():
            return None
        path = self.folder / file
        try:
            record = json.loads(path.read_text())
            ok = isinstance(record, dict) and record.get("format") == RECORD_FORMAT
            ok = ok and all(isinstance(record.get(f), int) for f in ("k", "input_bits", "output_bits", "luts"))
            ok = ok and all(isinstance(record.get(f), str) for f in ("key", "script", "abc_version", "blif", "method"))
        except (OSError, ValueError):
            ok = False
        if not ok:
            msg = f"{self.what}: the cache file {str(path)!r} is unreadable or not a mapping record; delete it, rerun"
            raise CacheError(msg)
        return record

    def keep(self, file: str, record: dict[str, Any], netlist: LutNetlist) -> None:
        """Hold a checked result in memory (from the record as the cache file holds it, and its parsed netlist)."""
        self.memory[file] = LutResult.from_record(record, netlist)

    def save(self, file: str, record: dict[str, Any]) -> None:
        """Write ``record`` to ``file`` in the folder, atomically (nothing without a folder)."""
        if self.folder is None:
            return
        path = self.folder / file
        try:
            atomic_write(path, json.dumps(record, indent=1).encode())
        except OSError as exc:
            reason = exc.strerror or exc
            msg = f"{self.what}: cannot write the cache file {str(path)!r}: {reason}; free space or move cache_dir"
            raise CacheError(msg) from None


def cached_results(
    distinct: dict[str, tuple[BitFunction, str]], cache: Any, k: int, script: str, version: str, *, what: str
) -> tuple[dict[str, MappedTable], list[tuple[BitFunction, str]]]:
    """The results the cache holds (checked as read), and the functions still to map."""
    results: dict[str, MappedTable] = {}
    pending = []
    for key, (fn, name) in distinct.items():
        file = cache.name(key, k, script, version)
        if file in cache.memory:  # checked when it was mapped, read from the cache or loaded from a bundle
            held = cache.memory[file]
            results[key] = from_record(held.record(), held.netlist, cached=True, fn=fn)
            continue
        record = cache.load(file)
        if record is None:
            pending.append((fn, name))
            continue
        results[key] = from_cache(record, fn, name, k, cache, file, what=what)
        cache.keep(file, record, results[key].netlist)
    return results, pending


def from_cache(
    record: dict[str, Any], fn: BitFunction, name: str, k: int, cache: Cache, file: str, *, what: str
) -> MappedTable:
    """A cached record as a result, after checking its netlist against the table like a fresh one."""
    where = f"the cache file {str(cache.folder / file) if cache.folder else file!r}"
    try:
        netlist = LutNetlist.from_blif(record["blif"], what=f"{what}: {where}")
        check_netlist(netlist, fn, name=f"{name} (from {where}; delete it and rerun)", k=k)
    except SynthError as exc:
        raise CacheError(f"{exc}; delete it and rerun") from None
    except NetlistMismatchError:
        raise
    return from_record(record, netlist, cached=True, fn=fn)
