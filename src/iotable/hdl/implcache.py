"""The cache of :func:`~iotable.hdl.implement`: one JSON record per run, under the sha256 of everything that
determines the result, read as untrusted input.

The key (the file's name) is the sha256 of the record's identity: the design's checksums and top, the
target and package, the options (frequency, seed), the versions of the tools as they answered for this call,
the yosys script's text and the place-and-route command. A record is believed only when

- the file is a regular file of at most :data:`MAX_CACHE_BYTES`, ours and writable by us alone (a folder or
  a link at its name is an error naming the path: the cache cannot write there either);
- it holds exactly a result's fields, each of its type and range, and the numbers derived from others agree
  (the LUT, flip-flop, carry, RAM and mux counts are the cells' sums; the critical path's delay the sum of
  its steps; a resource's use at most what the device has; no Fmax without place and route);
- its identity equals the one this call computed, and its name the key recomputed from it;
- its ``mac``, an HMAC-SHA256 of the record under a secret key of the user's (:func:`secret`), is right.

The HMAC is what makes a forged record fail: anyone who may write the cache folder can write a record of
consistent numbers under the right name, but not sign it without the key file (``key`` in the cache folder,
shared with the other caches' scheme, :func:`iotable._util.trust.secret_key`), created with mode 0600 and
refused when another user owns it or may read or write it. A record that fails a check (other than a
folder or a link at its name) is implemented again with a warning and replaced.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._util.files import atomic_write
from .._util.trust import SECRET_FILE, Untrusted, check_owned, read_bounded, secret_key
from ..errors import CacheError, IOTableWarning, OptionError
from .reports import MAX_CELLS, MAX_DELAY_NS, MAX_FMAX_MHZ

__all__ = ["MAX_CACHE_BYTES", "cache_folder", "key_of", "lookup", "secret", "store"]

#: The largest cache file read, in bytes.
MAX_CACHE_BYTES = 1 << 20
#: The identity of a run: the fields its key is the hash of.
IDENTITY = ("format", "design", "top", "target", "package", "tools", "options", "flow", "script", "place")
_COUNTS = ("luts", "lut_inputs", "flip_flops", "carry", "block_ram", "lut_ram", "muxes")
_FIELDS = frozenset(
    (*IDENTITY, *_COUNTS, "key", "cells", "fmax_mhz", "clock", "critical_path_ns", "critical_path", "utilization",
     "seconds", "mac", "io_path_ns")
)  # fmt: skip
_STEP = re.compile(r"\S+  (\d+\.\d{3}) ns  ")


def key_of(identity: dict[str, Any]) -> str:
    """The sha256 of a run's identity (canonical JSON): the name of its cache file, without ``.json``."""
    return hashlib.sha256(_canonical(identity)).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


# -- the secret key -------------------------------------------------------------------------------------------------


def secret(folder: Path, *, what: str) -> bytes:
    """The cache folder's secret key (:func:`iotable._util.trust.secret_key`); :class:`CacheError` naming the
    file and the fix when it cannot be made, is not ours, or other users may read or write it."""
    path = folder / SECRET_FILE
    fix = f"remove {str(path)!r} (iotable writes a new key; cached results made with the old one are redone)"
    try:
        return secret_key(folder)
    except Untrusted as exc:
        msg = f"{what}: the cache's secret key cannot be trusted: {exc}; {fix}, or fix its owner and mode 0600"
        raise CacheError(msg) from None
    except OSError as exc:
        msg = f"{what}: cannot use the cache's secret key {str(path)!r} ({exc.strerror or exc}); {fix}"
        raise CacheError(msg) from None


def _mac(key: bytes, record: dict[str, Any]) -> str:
    return hmac.new(key, _canonical({k: v for k, v in record.items() if k != "mac"}), hashlib.sha256).hexdigest()


# -- the folder and its files ---------------------------------------------------------------------------------------


def cache_folder(cache_dir: Any, *, what: str) -> Path | None:
    """``cache_dir`` as a folder, created if missing, ours and writable by us alone; ``None`` for no cache."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, os.PathLike)) or "\0" in os.fspath(cache_dir) or not os.fspath(cache_dir):
        msg = f"{what}: cache_dir must be a folder path (str or os.PathLike), received {cache_dir!r}"
        raise OptionError(msg)
    path = Path(cache_dir)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_owned(path, directory=True)
    except Untrusted as exc:
        msg = f"{what}: cache_dir {str(path)!r} cannot be trusted ({exc}); pass a folder only you may write"
        raise CacheError(msg) from None
    except OSError as exc:
        msg = f"{what}: cannot use cache_dir {str(path)!r} ({exc.strerror or exc}); pass a writable folder"
        raise CacheError(msg) from None
    return path


def _check_name(path: Path, *, what: str) -> None:
    """Refuse a folder or a link at a cache file's name: it is not a record, and a record cannot replace it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        msg = f"{what}: cannot use the cache file {str(path)!r} ({exc.strerror or exc}); check cache_dir"
        raise CacheError(msg) from None
    if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a symbolic link"
        msg = (
            f"{what}: the cache file {str(path)!r} is {kind}, not a result the cache wrote; remove it (or pass "
            "another cache_dir) so that the result can be written there"
        )
        raise CacheError(msg)


def lookup(
    folder: Path | None, identity: dict[str, Any], counts: Callable[[list[Any]], dict[str, Any]], *, what: str
) -> dict[str, Any] | None:
    """The checked record of ``identity`` in ``folder``: ``None`` without one, or (with a warning) when it fails
    a check; :class:`CacheError` for a folder or link at its name. ``counts`` derives the counts from cells."""
    if folder is None:
        return None
    path = folder / f"{key_of(identity)}.json"
    _check_name(path, what=what)
    if not os.path.lexists(path):
        return None
    where = f"{what}: the cache file {str(path)!r}"
    key = secret(folder, what=what)  # a key that cannot be trusted is an error, not a reason to run again
    try:
        try:
            data = read_bounded(path, limit=MAX_CACHE_BYTES, owned=True)
        except (Untrusted, OSError) as exc:
            raise CacheError(f"{where}: {exc}") from None
        return _verified(_json(data, where), identity, counts, key, where)
    except CacheError as exc:
        warnings.warn(f"{exc}; implementing again, the fresh result replaces the file", IOTableWarning, stacklevel=3)
        return None


def store(folder: Path | None, record: dict[str, Any], *, what: str) -> dict[str, Any]:
    """``record`` as JSON reads it back, signed; written to ``folder`` under its key (when there is one)."""
    record = json.loads(_canonical(record))
    if folder is None:
        return record
    record["mac"] = _mac(secret(folder, what=what), record)
    path = folder / f"{record['key']}.json"
    _check_name(path, what=what)
    try:
        atomic_write(path, (json.dumps(record, indent=1) + "\n").encode())
    except OSError as exc:
        msg = f"{what}: cannot write the cache file {str(path)!r} ({exc.strerror or exc}); check cache_dir"
        raise CacheError(msg) from None
    return record


# -- a record's checks ----------------------------------------------------------------------------------------------


def _json(data: bytes, where: str) -> dict[str, Any]:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("a key appears twice in one object")
        return dict(pairs)

    try:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=unique, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        msg = f"{where}: not valid JSON ({str(exc)[:200]})"
        raise CacheError(msg) from None
    if not isinstance(value, dict):
        msg = f"{where}: expected a JSON object, received {type(value).__name__}"
        raise CacheError(msg)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_CELLS


def _real(value: Any, low: float, high: float, *, optional: bool = False) -> bool:
    if value is None:
        return optional
    return type(value) in (int, float) and low <= value <= high


def _pairs(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, list)
        and len(item) == len(types)
        and all(type(x) is t and (t is not int or _count(x)) for x, t in zip(item, types))
        for item in value
    )


def _types(record: dict[str, Any]) -> list[str]:
    """The fields that do not hold what a result holds."""
    path = record["critical_path"]
    checks = {
        **{field: _count(record[field]) for field in _COUNTS},
        "key": isinstance(record["key"], str),
        "mac": isinstance(record["mac"], str),
        "fmax_mhz": _real(record["fmax_mhz"], 1e-9, MAX_FMAX_MHZ, optional=True),
        "critical_path_ns": _real(record["critical_path_ns"], 0.0, MAX_DELAY_NS, optional=True),
        "io_path_ns": _real(record["io_path_ns"], 0.0, MAX_DELAY_NS, optional=True),
        "seconds": _real(record["seconds"], 0.0, 1e7),
        "clock": record["clock"] is None or isinstance(record["clock"], str),
        "cells": _pairs(record["cells"], (str, int)),
        "utilization": _pairs(record["utilization"], (str, int, int)),
        "critical_path": isinstance(path, list) and all(isinstance(step, str) for step in path),
    }
    return [name for name, good in checks.items() if not good]


def _disagreements(record: dict[str, Any], counts: Callable[[list[Any]], dict[str, Any]]) -> list[str]:
    """The numbers that do not agree with the others they derive from."""
    derived = counts(record["cells"])
    bad = [f"{f} {record[f]} (the cells give {derived[f]})" for f in _COUNTS if record[f] != derived[f]]
    if len({name for name, _ in record["cells"]}) != len(record["cells"]):
        bad.append("cells name a type twice")
    bad += [f"{name} uses {used} of {available}" for name, used, available in record["utilization"] if used > available]
    if (record["fmax_mhz"] is None) != (record["clock"] is None):
        bad.append("an Fmax without its clock (or a clock without an Fmax)")
    if (record["critical_path_ns"] is None) != (not record["critical_path"]):
        bad.append("a critical path delay without its steps (or steps without a delay)")
    steps = [_STEP.match(step) for step in record["critical_path"]]
    if None in steps:
        bad.append("a critical path step not as implement writes it")
    elif record["critical_path_ns"] is not None and len(steps) < 200:
        total = sum(float(m.group(1)) for m in steps if m is not None)
        if not math.isclose(total, record["critical_path_ns"], abs_tol=0.0005 * len(steps) + 1e-9):
            bad.append(f"critical_path_ns {record['critical_path_ns']} (its steps add up to {total:.3f})")
    if record["place"] == [] and (
        record["fmax_mhz"] is not None or record["utilization"] or record["io_path_ns"] is not None
    ):
        bad.append("an Fmax, an I/O path or a device's use without place and route")
    return bad


def _verified(
    record: dict[str, Any],
    identity: dict[str, Any],
    counts: Callable[[list[Any]], dict[str, Any]],
    key: bytes,
    where: str,
) -> dict[str, Any]:
    """``record`` if it passes every check of the module docstring; :class:`CacheError` saying which fails."""
    if set(record) != _FIELDS:
        missing, extra = sorted(_FIELDS - set(record)), sorted(str(f)[:40] for f in set(record) - _FIELDS)
        msg = f"{where}: not an implementation result: fields missing {missing}, unknown {extra[:10]}"
        raise CacheError(msg)
    bad = _types(record)
    if bad:
        msg = (
            f"{where}: field(s) {bad} do not hold what a result holds (counts are integers from 0 to "
            f"{MAX_CELLS:,}, Fmax above 0 and below {MAX_FMAX_MHZ:g} MHz)"
        )
        raise CacheError(msg)
    for field, value in identity.items():
        if record[field] != value:
            msg = f"{where}: {field} is {str(record[field])[:80]!r}, expected {str(value)[:80]!r} for this run"
            raise CacheError(msg)
    if record["key"] != key_of(identity):
        msg = f"{where}: key is {record['key'][:80]!r}, not the hash of its identity {key_of(identity)!r}"
        raise CacheError(msg)
    bad = _disagreements(record, counts)
    if bad:
        msg = f"{where}: its numbers do not agree: {'; '.join(bad[:5])}"
        raise CacheError(msg)
    if not hmac.compare_digest(record["mac"], _mac(key, record)):
        msg = (
            f"{where}: its signature (mac) is not the one the cache's secret key ({SECRET_FILE!r} beside it) "
            "gives: not a record this user's iotable wrote (or written with another key)"
        )
        raise CacheError(msg)
    return record
