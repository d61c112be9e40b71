"""The on-disk cache of mapping results: a JSON record per (function, k, script, ABC version) in one folder
(:class:`Cache`), and the results it holds read back (:func:`cached_results`), so that a rerun, or a run after
an interruption, maps only what is missing.

A cache folder is trusted no more than a bundle: a file is read only if it is a regular file (not a link, a
FIFO, a device or a folder; it is opened without blocking and without following links) of at most
:data:`MAX_RECORD_BYTES`; its JSON must be one flat object of exactly the fields a mapping record has, each of
its type; its flow (k, script, ABC version), key and bit counts must be the ones of the function asked for and
the file name must be the one those fields give; the file must be owned by the user running iotable and
writable by no one else (entries are written so); its netlist must compute the function on every care row, with
LUTs of at most k inputs, no node that feeds no output, and the LUTs and depth the record says. An entry that
fails any of this is mapped again, with an :class:`~iotable.errors.IOTableWarning` naming the file and the
reason, and the fresh result replaces the file (the file is replaced, never written through: a link is
replaced by a file, its target left alone).
"""

from __future__ import annotations

import json
import math
import os
import stat
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._util.files import commit, discard, plain_mode, temporary_beside
from .._util.strictjson import no_constant, unique_keys
from .._util.trust import Untrusted, check_owned
from ..errors import CacheError, IOTableError, IOTableWarning, SynthError
from ..lutnet import RECORD_FORMAT, BitFunction, LutNetlist, LutResult, check_netlist, result_name
from .floor import floor_strategies, is_floor
from .records import MappedTable, from_record

__all__ = ["MAX_RECORD_BYTES", "Cache", "cached_results", "checked_record", "from_cache"]

#: The largest cache file read, in bytes (a bundle's manifest has the same cap): a larger file is not read at
#: all, and no more than this many bytes (and one) are ever read from one file.
MAX_RECORD_BYTES = 256 * 2**20

# The fields of a mapping record (as jobs.run_job writes them), and the type of each.
_INTS = ("format", "k", "input_bits", "output_bits", "luts", "depth")
_STRS = ("key", "script", "abc_version", "method", "blif")
_FIELDS = frozenset((*_INTS, *_STRS, "seconds"))
# A floor's record (effort "floor") has these too: the attempt that won and the LUTs of every attempt that passed.
_FLOOR_FIELDS = _FIELDS | {"strategy", "attempts"}


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

    def where(self, file: str) -> str:
        """``file`` as messages name it: its path in the folder."""
        return f"the cache file {str(self.folder / file) if self.folder is not None else file!r}"

    def load(self, file: str) -> dict[str, Any] | None:
        """The record the folder holds in ``file``, or ``None`` without one (nothing at that name).

        Raises:
            CacheError: the entry is not a regular file of at most :data:`MAX_RECORD_BYTES`, or not one flat
                JSON object of a mapping record's fields, each of its type (see the module docstring).
        """
        if self.folder is None or not os.path.lexists(self.folder / file):
            return None
        where = f"{self.what}: {self.where(file)}"
        return _record(_parse(_read(self.folder / file, where), where), where)

    def keep(self, file: str, record: dict[str, Any], netlist: LutNetlist) -> None:
        """Hold a checked result in memory (from the record as the cache file holds it, and its parsed netlist)."""
        self.memory[file] = LutResult.from_record(record, netlist)

    def save(self, file: str, record: dict[str, Any]) -> None:
        """Write ``record`` to ``file`` in the folder, atomically (nothing without a folder): a new file is
        renamed over whatever has the name (a link is replaced, not followed)."""
        if self.folder is None:
            return
        path = self.folder / file
        try:
            _write_private(path, json.dumps(record, indent=1).encode())
        except OSError as exc:
            reason = exc.strerror or exc
            msg = (
                f"{self.what}: cannot write the cache file {str(path)!r}: {reason}; free space, remove what holds "
                "that name, or move cache_dir"
            )
            raise CacheError(msg) from None


def cached_results(
    distinct: dict[str, tuple[BitFunction, str]], cache: Any, k: int, script: str, version: str, *, what: str
) -> tuple[dict[str, MappedTable], list[tuple[BitFunction, str]]]:
    """The results the cache holds (checked as read), and the functions still to map: those it lacks, and
    those whose entry cannot be trusted (each with an :class:`~iotable.errors.IOTableWarning`; the fresh result
    replaces the entry)."""
    results: dict[str, MappedTable] = {}
    pending = []
    for key, (fn, name) in distinct.items():
        file = cache.name(key, k, script, version)
        if file in cache.memory:  # checked when it was mapped, read from the cache or loaded from a bundle
            held = cache.memory[file]
            results[key] = from_record(held.record(), held.netlist, cached=True, fn=fn)
            continue
        try:
            record = cache.load(file)
            if record is not None:
                results[key] = from_cache(record, fn, name, k, cache, file, script=script, version=version, what=what)
        except CacheError as exc:
            message = f"{exc}; mapping {name} again, the fresh result replaces the file"
            warnings.warn(message, IOTableWarning, stacklevel=4)  # the caller of map_luts / cost
            record = None
        if record is None:
            pending.append((fn, name))
            continue
        cache.keep(file, record, results[key].netlist)
    return results, pending


def from_cache(
    record: dict[str, Any],
    fn: BitFunction,
    name: str,
    k: int,
    cache: Cache,
    file: str,
    *,
    script: str,
    version: str,
    what: str,
) -> MappedTable:
    """A cached record (its fields' types checked by :meth:`Cache.load`) as a result, after checking it all
    (:func:`checked_record`); :class:`CacheError` naming the file and what is wrong otherwise."""
    where = f"{what}: {cache.where(file)}"
    netlist = checked_record(record, fn, k=k, script=script, version=version, file=file, where=where, name=name)
    return from_record(record, netlist, cached=True, fn=fn)


def checked_record(
    record: dict[str, Any], fn: BitFunction, *, k: int, script: str, version: str, file: str, where: str, name: str
) -> LutNetlist:
    """The netlist of ``record``, a mapping record read back for the function ``fn`` (the table ``name``) and
    the flow ``k``, ``script``, ``version``, once every field is checked against what they give: the flow, the
    key (``fn``'s content hash) and bit counts; the file name ``file`` (the name the record's own fields give);
    the method; the netlist, evaluated on every care row (LUTs of at most k inputs), with no node that feeds
    no output, and the LUTs and depth the record says.

    Raises:
        CacheError: what differs, the record's value and the expected one (``where`` names the file).
    """
    expected = {
        "format": RECORD_FORMAT,
        "k": k,
        "script": script,
        "abc_version": version,
        "key": fn.key(),
        "input_bits": fn.input_bits,
        "output_bits": fn.output_bits,
    }
    for field, value in expected.items():
        if record[field] != value:
            msg = f"{where}: {field} is {_shown(record[field])}, expected {_shown(value)} for {name} in this run"
            raise CacheError(msg)
    named = result_name(record["key"], record["k"], record["script"], record["abc_version"])
    if named != file:  # the key recomputed from the entry's own fields
        msg = f"{where}: its fields give the file name {named!r}; an entry is stored under its own name only"
        raise CacheError(msg)
    method = "direct" if fn.input_bits <= k else "abc"
    if record["method"] != method:
        msg = f"{where}: method is {_shown(record['method'])}, expected {method!r} for {fn.input_bits} address bits"
        raise CacheError(msg)
    try:
        netlist = LutNetlist.from_blif(record["blif"], what=where)
        check_netlist(netlist, fn, name=f"{where}, for {name}", k=k)
    except CacheError:
        raise
    except IOTableError as exc:  # SynthError (not a netlist), NetlistMismatchError (a wrong one)
        raise CacheError(str(exc)) from None
    unused = _unused(netlist)
    if unused:
        shown = ", ".join(map(repr, unused[:5])) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        msg = f"{where}: the netlist holds {len(unused)} node(s) that feed no output ({shown})"
        raise CacheError(msg)
    for field, found in (("luts", netlist.luts), ("depth", netlist.depth)):
        if record[field] != found:
            msg = f"{where}: {field} is {record[field]}, but its netlist has {found}"
            raise CacheError(msg)
    _check_floor(record, fn, k=k, script=script, where=where)
    return netlist


def _check_floor(record: dict[str, Any], fn: BitFunction, *, k: int, script: str, where: str) -> None:
    """A floor's record names one of its attempts as the winner and lists at most one LUT count per attempt,
    the netlist's the smallest; a single mapping's record has neither."""
    if not is_floor(script):
        if "strategy" in record:
            msg = f"{where}: holds a floor's strategy and attempts, but the script {script!r} maps once"
            raise CacheError(msg)
        return
    if "strategy" not in record:
        msg = f"{where}: lacks strategy and attempts, which every floor's record holds"
        raise CacheError(msg)
    names = floor_strategies(script, k, fn.input_bits)
    if record["strategy"] not in names:
        msg = f"{where}: strategy is {_shown(record['strategy'])}, not one of the {len(names)} attempt(s) of this floor"
        raise CacheError(msg)
    if len(record["attempts"]) > len(names) or min(record["attempts"]) != record["luts"]:
        msg = (
            f"{where}: attempts is {_shown(record['attempts'])}; expected at most {len(names)} LUT counts (one "
            f"per attempt), the smallest the netlist's {record['luts']}"
        )
        raise CacheError(msg)


def _unused(netlist: LutNetlist) -> list[str]:
    """The outputs of the nodes no output of ``netlist`` depends on (in the netlist's order)."""
    driver = {node.output: node for node in netlist.nodes}
    live: set[str] = set()
    stack = list(netlist.outputs)
    while stack:  # iterative: netlists can be deep
        signal = stack.pop()
        if signal not in live:
            live.add(signal)
            stack.extend(driver[signal].inputs if signal in driver else ())
    return [node.output for node in netlist.nodes if node.output not in live]


# -- reading a cache file: never blocking, never more than the cap, never a raw exception -------------------------


def _read(path: Path, where: str) -> bytes:
    """The bytes of ``path``: a regular file of at most :data:`MAX_RECORD_BYTES`, opened without following a
    link and without blocking (a FIFO opens at once and is refused), read at most the cap and one byte."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if path.is_symlink():  # O_NOFOLLOW says so too, where the system has it
        msg = f"{where}: is a symbolic link; a cache entry must be a regular file"
        raise CacheError(msg)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        msg = f"{where}: cannot be opened ({exc.strerror or exc}); a cache entry must be a readable regular file"
        raise CacheError(msg) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            msg = f"{where}: is not a regular file (a folder, FIFO, socket or device); a cache entry is a JSON file"
            raise CacheError(msg)
        if info.st_size > MAX_RECORD_BYTES:
            msg = f"{where}: holds {info.st_size} bytes, more than the {MAX_RECORD_BYTES} a cache entry may hold"
            raise CacheError(msg)
        _check_ours(path, info, where)
        chunks, left = [], MAX_RECORD_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        msg = f"{where}: cannot be read ({exc.strerror or exc})"
        raise CacheError(msg) from None
    finally:
        os.close(fd)
    if left <= 0:
        msg = f"{where}: grew past the {MAX_RECORD_BYTES} bytes a cache entry may hold while it was read"
        raise CacheError(msg)
    return b"".join(chunks)


def _check_ours(path: Path, info: os.stat_result, where: str) -> None:
    """Refuse the open entry ``path`` (its status ``info``) unless the user running iotable owns it and no one
    else may write it (:func:`iotable._util.trust.check_owned`, on the very file opened)."""
    try:
        check_owned(path, directory=False)
        named = os.lstat(path)
    except (Untrusted, OSError) as exc:
        msg = f"{where}: cannot be trusted: {exc}; a cache entry must be a file of yours that no one else may write"
        raise CacheError(msg) from None
    if (named.st_dev, named.st_ino) != (info.st_dev, info.st_ino):
        msg = f"{where}: was replaced while it was opened"
        raise CacheError(msg)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, writable by its owner only (a reader refuses anything else)."""
    file, name = temporary_beside(path)
    try:
        with file:
            os.fchmod(file.fileno(), plain_mode() & ~(stat.S_IWGRP | stat.S_IWOTH))
            file.write(data)
            commit(file, name, path)
    except BaseException:
        discard(name)
        raise


def _parse(data: bytes, where: str) -> dict[str, Any]:
    """``data`` as one JSON object (no duplicate keys, no NaN or Infinity; deep nesting refused)."""
    try:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=unique_keys, parse_constant=no_constant)
    except RecursionError:
        msg = f"{where}: nested too deep to be a mapping record (a record is one flat JSON object)"
        raise CacheError(msg) from None
    except (UnicodeDecodeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        msg = f"{where}: not valid JSON ({str(exc)[:200]})"
        raise CacheError(msg) from None
    if not isinstance(value, dict):
        msg = f"{where}: expected a JSON object (a mapping record), received {type(value).__name__}"
        raise CacheError(msg)
    return value


def _record(value: dict[str, Any], where: str) -> dict[str, Any]:
    """``value`` if it has exactly a mapping record's fields, each of its type (ints are not booleans)."""
    fields = _FLOOR_FIELDS if "strategy" in value else _FIELDS
    if set(value) != fields:
        missing, extra = sorted(fields - set(value)), sorted(str(f)[:40] for f in set(value) - fields)
        msg = f"{where}: not a mapping record: fields missing {missing}, unknown {extra[:10]}"
        raise CacheError(msg)
    for field in _INTS:
        if type(value[field]) is not int or value[field] < 0:
            msg = f"{where}: {field} is {_shown(value[field])}, expected a non-negative integer"
            raise CacheError(msg)
    for field in _STRS:
        if not isinstance(value[field], str):
            msg = f"{where}: {field} is {_shown(value[field])}, expected a string"
            raise CacheError(msg)
    seconds = value["seconds"]
    if type(seconds) not in (int, float) or not 0 <= seconds < math.inf:
        msg = f"{where}: seconds is {_shown(seconds)}, expected a non-negative number of seconds"
        raise CacheError(msg)
    if fields is _FLOOR_FIELDS:
        attempts = value["attempts"]
        if not isinstance(value["strategy"], str) or not isinstance(attempts, list) or not attempts:
            msg = (
                f"{where}: strategy and attempts are {_shown(value['strategy'])}, {_shown(attempts)}; expected a "
                "string and a non-empty list of LUT counts"
            )
            raise CacheError(msg)
        if any(type(n) is not int or n < 0 for n in attempts):
            msg = f"{where}: attempts holds {_shown(attempts)}; expected non-negative LUT counts"
            raise CacheError(msg)
    return value


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut short."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
