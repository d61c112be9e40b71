"""A sweep's folder: one JSON record per finished stage of each variant or candidate, written atomically.

A record is ``records/<stage>-<key>.json`` and holds the stage, the variant's fingerprint
(:meth:`~iotable.sweep.Variant.fingerprint`), the stage's options and its result; the key is a digest of the
first three. A rerun reads a record as untrusted input: the file must be ours (:mod:`iotable._util.trust`),
bounded, strict JSON of this format, and its stage, fingerprint and options must equal the ones asked for.
A record that fails the last checks (edited, or left by another variant or options) is not reused: the
stage runs again and its record is replaced. A file that is not ours (a link, another user's, writable by
others) stops the sweep with a :class:`~iotable.errors.CacheError`: someone else may have put it there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .._util.files import atomic_write
from .._util.strictjson import finite, no_constant, unique_keys
from .._util.trust import Untrusted, check_owned, read_bounded
from ..errors import CacheError, FileError, OptionError

__all__ = ["FORMAT", "RecordStore", "write_output"]

FORMAT = "iotable-sweep-record/1"
_LIMIT = 1 << 20  # the largest record read


def canonical(value: Any) -> str:
    """``value`` as the one JSON text the records compare (sorted keys, no spaces, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class RecordStore:
    """The records of one sweep folder (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder) or "\0" in os.fspath(folder):
            msg = f"sweep: folder must be a folder path (str or os.PathLike), received {folder!r}"
            raise OptionError(msg)
        self.folder = Path(folder)
        self.records = self.folder / "records"
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.records.mkdir(mode=0o700, exist_ok=True)
            for path in (self.folder, self.records):
                check_owned(path, directory=True)
        except Untrusted as exc:
            msg = f"sweep: the folder {self.folder} cannot hold records: {exc}; give a folder of your own"
            raise CacheError(msg) from None
        except OSError as exc:
            msg = f"sweep: the folder {self.folder} cannot be used ({exc.strerror or exc}); give a writable folder"
            raise CacheError(msg) from None

    @staticmethod
    def key(stage: str, fingerprint: str, options: Any) -> str:
        """The digest naming a stage's record for a variant and options."""
        return hashlib.sha256(canonical([FORMAT, stage, fingerprint, options]).encode()).hexdigest()

    def path(self, stage: str, fingerprint: str, options: Any) -> Path:
        """Where the record of ``stage`` for this fingerprint and options lives."""
        return self.records / f"{stage}-{self.key(stage, fingerprint, options)[:40]}.json"

    def load(self, stage: str, fingerprint: str, options: Any) -> dict[str, Any] | None:
        """The result of a finished stage, or ``None`` when there is none this sweep may reuse."""
        path = self.path(stage, fingerprint, options)
        try:
            data = read_bounded(path, limit=_LIMIT, owned=True)
        except FileNotFoundError:
            return None
        except Untrusted as exc:
            msg = f"sweep: the record {path} is not to be trusted: {exc}; remove it (the stage then runs again)"
            raise CacheError(msg) from None
        except OSError as exc:
            msg = f"sweep: the record {path} cannot be read ({exc.strerror or exc}); remove it or fix its permissions"
            raise CacheError(msg) from None
        try:
            record = json.loads(data, object_pairs_hook=unique_keys, parse_constant=no_constant, parse_float=finite)
        except (ValueError, RecursionError):
            return None  # not a record this version wrote whole: measured again, and replaced
        expected = {"format": FORMAT, "stage": stage, "fingerprint": fingerprint, "options": options}
        if not isinstance(record, dict) or not isinstance(record.get("result"), dict):
            return None
        if any(canonical(record.get(name)) != canonical(value) for name, value in expected.items()):
            return None
        return record["result"]  # type: ignore[no-any-return]

    def save(self, stage: str, fingerprint: str, options: Any, result: dict[str, Any], *, variant: str) -> None:
        """Write a finished stage's record atomically."""
        path = self.path(stage, fingerprint, options)
        record = {
            "format": FORMAT, "stage": stage, "variant": variant, "fingerprint": fingerprint, "options": options,
            "result": result,
        }  # fmt: skip
        try:
            atomic_write(path, (json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n").encode())
        except OSError as exc:
            msg = f"sweep: cannot write the record {path} ({exc.strerror or exc}); free disk space or fix permissions"
            raise CacheError(msg) from None


def write_output(path: Path, data: bytes) -> None:
    """Write a file the user asked for (a CSV table, a plot) atomically, or raise the library's error naming it."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        msg = f"sweep: cannot write {path} ({exc.strerror or exc}); give a writable path"
        raise FileError(msg) from None
