"""The cache of Verilator's programs: where an entry lives, what it records, and the checks before it runs.

A cache entry holds native code, so nothing in it is believed for being there. The design:

- **The cache root** (``cache_dir``) is created with mode ``0o700``; it must be a folder of the user running
  iotable that no one else may write (a link to such a folder is followed first). It holds a secret
  ``key``: 32 random bytes, mode ``0o600``, created once (written aside and linked into place, so that two
  processes agree on one key). A key file that others may read or write, or that is not 32 bytes, is refused.
- **Entry names** are an HMAC of the entry's cache key (design checksums, table model, Verilator version,
  driver, flags) under the secret: another user cannot predict them, so cannot plant an entry in advance.
- **The record** (``entry.json``) lists the sha256 of every file the program needs (the program itself and
  the memory models' hex files) and the cache key, sealed with an HMAC under the secret. Rewriting it with
  new digests ("resealing") without the secret gives a record whose seal fails: the entry is refused with
  :class:`~iotable.errors.CacheError`, as is an entry that is a link, belongs to another user or that
  others may write. An entry whose seal holds but whose files differ from it (a damaged entry) is built
  again.
- **Each run** (not only the load) checks again: the model keeps in memory the digests it verified at load;
  before every run the program and the hex files are read through a descriptor that follows no link (ours,
  not writable by others), compared with those digests and written into a fresh private folder (mode
  ``0o700``) in the cache root, and the program runs from there. What runs is what was checked, even if
  the entry is changed while the model lives, and a changed or missing file is an error, never wrong rows.
- **Storing** renames a whole staged entry into place only where no entry is: a builder that finds a valid
  entry already there (another process was faster) keeps it and discards its own; only a damaged entry is
  moved aside and replaced. A live entry is never deleted under a running model.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

from .._util.strictjson import no_constant, unique_keys
from .._util.trust import SECRET_FILE, Untrusted, check_owned, digest_file, read_bounded, secret_key
from ..errors import CacheError

__all__ = ["ENTRY", "entry_name", "load", "open_root", "refusal", "run_folder", "store", "verified_copy"]

#: The record of an entry.
ENTRY = "entry.json"
_FORMAT = 2
_RECORD_LIMIT = 1 << 20
_FILE_LIMIT = 1 << 30  # a program or hex file read into memory for a run
_FIX = "delete it or pass another cache_dir"


def refusal(what: str, path: Path, reason: str) -> CacheError:
    """The error for a cache path that may not be believed: the path, why, and the fix."""
    return CacheError(f"{what}: the Verilator cache entry {str(path)!r} is refused ({reason}); {_FIX}")


def open_root(folder: Path, *, what: str) -> tuple[Path, bytes]:
    """The cache root (created with mode ``0o700``, checked: a folder of ours no one else may write) and its
    secret key (created on first use)."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        root = folder.resolve(strict=True)
        check_owned(root, directory=True)
    except Untrusted as exc:
        msg = f"{what}: the Verilator cache folder {str(folder)!r} cannot be used ({exc}); {_FIX}"
        raise CacheError(msg) from None
    except OSError as exc:
        msg = f"{what}: cannot create the Verilator cache folder {str(folder)!r} ({exc.strerror or exc}); {_FIX}"
        raise CacheError(msg) from None
    return root, _secret(root, what=what)


def _secret(root: Path, *, what: str) -> bytes:
    """The cache root's secret key (:func:`iotable._util.trust.secret_key`)."""
    path = root / SECRET_FILE
    try:
        return secret_key(root)
    except Untrusted as exc:
        raise refusal(what, path, str(exc)) from None
    except OSError as exc:
        raise refusal(what, path, f"cannot be read or created: {exc.strerror or exc}") from None


def entry_name(secret: bytes, key: str) -> str:
    """The name of the entry for ``key``: not predictable without the secret."""
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()[:32]


def _seal(secret: bytes, key: str, files: dict[str, str]) -> str:
    body = json.dumps({"format": _FORMAT, "key": key, "files": files}, sort_keys=True)
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..", ENTRY) and "/" not in name and "\\" not in name


def _record(entry: Path, key: str, secret: bytes, *, what: str) -> dict[str, str] | None:
    """The files ``entry``'s record lists, after its seal is checked (``None``: no record)."""
    try:
        data = read_bounded(entry / ENTRY, limit=_RECORD_LIMIT)
    except FileNotFoundError:
        return None
    except Untrusted as exc:
        raise refusal(what, entry, str(exc)) from None
    try:
        record = json.loads(data, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except ValueError:
        raise refusal(what, entry, f"its {ENTRY} is not JSON") from None
    files = record.get("files") if isinstance(record, dict) else None
    seal = record.get("seal") if isinstance(record, dict) else None
    if (
        not isinstance(files, dict)
        or not all(_plain_name(n) and isinstance(d, str) for n, d in files.items())
        or not isinstance(seal, str)
        or record.get("format") != _FORMAT
        or not hmac.compare_digest(seal, _seal(secret, key, files))
    ):
        raise refusal(what, entry, f"its {ENTRY} was not written by iotable for this design, or was rewritten")
    return dict(files)


def load(entry: Path, key: str, secret: bytes, *, required: str | None, what: str) -> dict[str, str] | None:
    """The files of ``entry`` and their sha256, when it is a whole entry for ``key``; ``None`` when there is
    none or it is damaged (a file differs from its sealed record, or ``required`` is not among them: build it
    again).

    Raises:
        CacheError: the entry is a link, not ours, writable by others, or its record's seal fails.
    """
    try:
        check_owned(entry, directory=True)
    except FileNotFoundError:
        return None
    except Untrusted as exc:
        raise refusal(what, entry, str(exc)) from None
    files = _record(entry, key, secret, what=what)
    if files is None or (required is not None and required not in files):
        return None
    for name, expected in files.items():
        try:
            if digest_file(entry / name) != expected:
                return None
        except FileNotFoundError:
            return None
        except Untrusted as exc:
            raise refusal(what, entry, str(exc)) from None
    return files


def store(staged: Path, entry: Path, key: str, *, required: str | None, what: str) -> dict[str, str]:
    """Seal ``staged``'s files under ``key`` and rename it into ``entry`` where no entry is; return the files
    of the entry in place (a valid one another process stored first is kept and ``staged`` left for the
    caller to remove; a damaged one is moved aside and replaced).

    Raises:
        CacheError: the entry in place is refused (see :func:`load`); OSError: the disk refused.
    """
    secret = _secret(entry.parent, what=what)
    files = {p.name: digest_file(p) for p in sorted(staged.iterdir())}
    record = {"format": _FORMAT, "key": key, "files": files, "seal": _seal(secret, key, files)}
    (staged / ENTRY).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for path in staged.iterdir():  # writable by us alone, whatever the umask (else the entry would be refused)
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & 0o755)
    os.chmod(staged, 0o700)
    for _attempt in range(4):
        try:
            staged.rename(entry)  # fails where an entry (or anything else) is: it is never replaced here
            return files
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
        present = load(entry, key, secret, required=required, what=what)
        if present is not None:
            return present
        aside = entry.parent / f".old-{uuid.uuid4().hex}"
        try:
            entry.rename(aside)
        except FileNotFoundError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
    msg = f"{what}: cannot store the Verilator cache entry {str(entry)!r}: other processes keep replacing it; {_FIX}"
    raise CacheError(msg)


def run_folder(root: Path) -> Path:
    """A fresh private folder (mode ``0o700``) in the cache root, where a run's files are copied and run."""
    check_owned(root, directory=True)
    return Path(tempfile.mkdtemp(prefix=".run-", dir=root))


def verified_copy(folder: Path, files: dict[str, str], target: Path, *, program: str | None = None) -> None:
    """Copy ``files`` of ``folder`` into ``target``, each read through one descriptor that follows no link and
    compared with its sha256 in ``files`` before a byte is written (``program``: made executable).

    Raises:
        Untrusted: a file is a link, not ours, writable by others, too large, or differs from its sha256;
        FileNotFoundError: a file is missing.
    """
    check_owned(folder, directory=True)
    for name, expected in files.items():
        if not _plain_name(name):
            msg = f"{name!r} is not a file name of a cache entry"
            raise Untrusted(msg)
        data = read_bounded(folder / name, limit=_FILE_LIMIT)
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), expected):
            msg = f"{folder / name} is not the file that was verified when the model was loaded"
            raise Untrusted(msg)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target / name, flags, 0o700 if name == program else 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
