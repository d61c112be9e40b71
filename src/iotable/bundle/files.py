"""The files of a bundle: paths, atomic writing, and reading the manifest and array files without trusting
them (plain files inside the bundle, bounded sizes, ``.npy`` 1.0 headers, sha256 of every byte)."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .._util.files import fsync_directory, path_text, plain_mode
from .._util.strictjson import finite, no_constant, unique_keys
from .._util.trust import Untrusted, read_bounded
from ..errors import BundleError
from .jsonfields import _field, _int, _ints, _obj, _str
from .manifest import CHECKSUMMED, FORMAT, FORMAT_VERSION

MANIFEST = "manifest.json"
CHECKSUM = "manifest.sha256"
_CHUNK = 1 << 20

# Bounds on what a manifest may make a reader do (docs/bundle.md, "Limits"); the domains' bound is the
# manifest validator's (iotable.bundle.manifest.MAX_DOMAIN_VALUES).
MAX_MANIFEST_BYTES = 256 * 2**20  # manifest.json
MAX_DEPTH = 32  # nesting of JSON arrays and objects
MAX_NAME = 1024  # characters of an array file's path, in at most 16 parts of at most 255
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _path_text(path: Any, what: str) -> str:
    """A path argument as text, or a :class:`BundleError`: a str or os.PathLike, not empty, without NUL."""
    noun = "a bundle directory path" if what == "load" else "a directory path"
    fix = "pass the bundle directory's path"
    return path_text(path, what=what, noun=noun, subject="path", fix=fix, error=BundleError)


def _disk_error(action: str, exc: OSError) -> BundleError:
    """A :class:`BundleError` for a failed disk operation: what failed, the system's reason, what to do."""
    fixes = {
        errno.ENOSPC: "free space on that disk or save elsewhere",
        errno.EDQUOT: "free space within your quota or save elsewhere",
        errno.EACCES: "choose a folder you may write to",
        errno.EPERM: "choose a folder you may write to",
        errno.EROFS: "choose a writable file system",
        errno.ENAMETOOLONG: "choose a shorter path",
        errno.ELOOP: "remove the symlink loop from the path",
    }
    where = f" ({exc.filename})" if exc.filename else ""
    fix = fixes.get(exc.errno or 0, "check the path and the disk")
    return BundleError(f"{action}: {exc.strerror or exc}{where}; {fix}")


def _target(path: Any) -> Path:
    target = Path(_path_text(path, "save"))
    try:
        if target.exists() or target.is_symlink():
            if not target.is_dir():
                msg = f"save: {target} exists and is not a directory; a bundle is a directory, choose another path"
                raise BundleError(msg)
            if any(target.iterdir()):
                _check_previous_bundle(target)
        for parent in target.absolute().parents:
            if parent.exists():
                if not parent.is_dir():
                    msg = f"save: {parent} is a file, so {target} cannot be created inside it"
                    raise BundleError(msg)
                break
    except OSError as exc:
        raise _disk_error(f"save: cannot use the path {str(target)[:200]!r}", exc) from None
    return target


def _check_previous_bundle(target: Path) -> None:
    """Refuse to replace the non-empty directory ``target`` unless it is a bundle iotable wrote (its manifest a
    regular file that parses, of the bundle format) holding nothing else (but empty folders): what save deletes
    must be ours."""
    try:
        manifest = _parse(target / MANIFEST, read_bounded(target / MANIFEST, limit=MAX_MANIFEST_BYTES, owned=False))
    except (Untrusted, FileNotFoundError, BundleError):
        manifest = None
    files = manifest.get("files") if manifest is not None and manifest.get("format") == FORMAT else None
    present = sorted(entry.name for entry in target.iterdir())
    if not isinstance(files, dict):
        msg = (
            f"save: {target} is a non-empty directory without an iotable bundle's {MANIFEST} (it holds "
            f"{present[:5]}{' ...' if len(present) > 5 else ''}), not an iotable bundle; refusing to replace it, "
            "which would delete all of it: choose a new path or an existing bundle"
        )
        raise BundleError(msg)
    ours = {MANIFEST, CHECKSUM} | {str(rel).split("/")[0] for rel in files}
    extra = [name for name in present if name not in ours and not _empty_folder(target / name)]
    if extra:
        msg = (
            f"save: {target} is an iotable bundle but also holds files a bundle does not ({extra[:5]}"
            f"{' ...' if len(extra) > 5 else ''}); refusing to replace it, which would delete them: move them out "
            "of the bundle, or choose a new path"
        )
        raise BundleError(msg)


def _empty_folder(path: Path) -> bool:
    """``path`` is a folder (not a link) with nothing in it: replacing it loses nothing."""
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


class _HashingWriter:
    """A write-only file wrapper that feeds every byte to a sha256 on its way to disk."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self.size += len(view)
        return self.file.write(view)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write(target: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".saving", dir=parent))
    try:
        os.chmod(staging, plain_mode(directory=True))  # mkdtemp's 0o700 would outlive the rename
        folders = {staging}
        for rel, array in arrays.items():
            file = staging / rel
            file.parent.mkdir(parents=True, exist_ok=True)
            folders.add(file.parent)
            with open(file, "wb") as f:
                writer = _HashingWriter(f)
                np.lib.format.write_array(writer, array, version=(1, 0), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            manifest["files"][rel] = {
                "sha256": writer.digest.hexdigest(),
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "bytes": writer.size,
            }
        data = (json.dumps(manifest, indent=1, allow_nan=False) + "\n").encode("utf-8")
        _write_file(staging / MANIFEST, data)
        _write_file(staging / CHECKSUM, f"{hashlib.sha256(data).hexdigest()}  {MANIFEST}\n".encode("ascii"))
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            fsync_directory(folder)
        if target.exists():
            # No portable atomic swap of directories: move the old bundle aside, the new one in, then drop
            # the old one. Between the two renames the target is absent, never half-written.
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            previous = aside / "bundle"
            try:
                os.replace(target, previous)
                try:
                    os.replace(staging, target)
                except BaseException:
                    os.replace(previous, target)  # put the previous bundle back
                    raise
            finally:
                fsync_directory(parent)
                if target.exists():  # else the previous bundle survives only aside: keep it
                    shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(staging, target)
        fsync_directory(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _regular_file(path: Path, what: str, *, limit: int) -> bytes:
    """The bytes of ``path``, a plain file (not a symlink) of at most ``limit`` bytes."""
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            msg = f"{path}: is a symlink; a bundle holds its own files, never links (copy the file in)"
            raise BundleError(msg)
        if not stat.S_ISREG(info.st_mode):
            msg = f"{path}: is not a regular file; {what}"
            raise BundleError(msg)
        if info.st_size > limit:
            msg = f"{path}: holds {info.st_size} bytes, more than the {limit} a bundle's {path.name} may hold"
            raise BundleError(msg)
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except FileNotFoundError:
        msg = f"{path}: missing; {what}"
        raise BundleError(msg) from None
    except OSError as exc:
        raise _disk_error(f"{path}: cannot be read", exc) from None


def _read_manifest(root: Path) -> dict[str, Any]:
    """The parsed manifest: checksum (before parsing), size, JSON, nesting depth, format and version checked."""
    file = root / MANIFEST
    missing = f"{root} is not an iotable bundle (or its save did not finish). Save it again with iotable.save"
    data = _regular_file(file, missing, limit=MAX_MANIFEST_BYTES)
    checksum = None
    if os.path.lexists(root / CHECKSUM):
        checksum = _regular_file(root / CHECKSUM, "", limit=4096)
        _check_checksum(root, data, checksum)
    manifest = _parse(file, data)
    version = manifest.get("format_version")
    if manifest.get("format") != FORMAT:
        msg = f"{file}: format is {manifest.get('format')!r}, expected {FORMAT!r}; this is not an iotable bundle"
        raise BundleError(msg)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        msg = f"{file}: unknown format_version {version!r}; expected an integer from 1 to {FORMAT_VERSION}"
        raise BundleError(msg)
    if version > FORMAT_VERSION:
        written = manifest.get("library_version")
        written = written if isinstance(written, str) and len(written) < 64 else "an unknown version"
        msg = (
            f"{file}: format_version {version} was written by a newer iotable ({written}); this iotable reads "
            f"format_version {FORMAT_VERSION} and older. Upgrade iotable to load it"
        )
        raise BundleError(msg)
    if checksum is None and version >= CHECKSUMMED:
        msg = (
            f"{root / CHECKSUM}: missing; a format_version {version} bundle carries the sha256 of its manifest "
            "there. The bundle is incomplete or was edited: save it again"
        )
        raise BundleError(msg)
    return manifest


def _check_checksum(root: Path, data: bytes, checksum: bytes) -> None:
    expected = hashlib.sha256(data).hexdigest()
    line = re.fullmatch(rb"([0-9a-f]{64})  manifest\.json\n", checksum)
    if line is None:
        msg = (
            f"{root / CHECKSUM}: expected one line '<sha256 in hex>  {MANIFEST}', received {checksum[:100]!r}; the "
            "checksum file is damaged"
        )
        raise BundleError(msg)
    if line.group(1).decode() != expected:
        msg = (
            f"{root / MANIFEST}: checksum mismatch (sha256 {expected}, {CHECKSUM} says {line.group(1).decode()}); "
            "the manifest was altered or damaged: save the bundle again (iotable never loads an edited manifest)"
        )
        raise BundleError(msg)


def _parse(file: Path, data: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(
            data.decode("utf-8"), object_pairs_hook=unique_keys, parse_constant=no_constant, parse_float=finite
        )
    except RecursionError:
        msg = f"{file}: nested deeper than {MAX_DEPTH} levels; not a manifest iotable writes"
        raise BundleError(msg) from None
    except (UnicodeDecodeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        msg = f"{file}: not valid JSON ({exc}); the manifest is corrupted"
        raise BundleError(msg) from None
    if not isinstance(manifest, dict):
        msg = f"{file}: expected a JSON object, received {type(manifest).__name__}"
        raise BundleError(msg)
    stack: list[tuple[Any, int]] = [(manifest, 1)]
    while stack:  # iterative: a deep manifest cannot exhaust the interpreter's stack here
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            msg = f"{file}: nested deeper than {MAX_DEPTH} levels; not a manifest iotable writes"
            raise BundleError(msg)
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return manifest


def _read_files(root: Path, manifest: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every array file the manifest lists, verified (name, no symlink, header, size, sha256), memory-mapped."""
    where = f"{root / MANIFEST}: files"
    files = _obj(_field(manifest, "files", str(root / MANIFEST)), where)
    arrays = {}
    for rel, entry in files.items():
        parts = _file_name(rel, where)
        here = f"{where}[{rel!r}]"
        entry = _obj(entry, here)
        if set(entry) != {"sha256", "dtype", "shape", "bytes"}:
            msg = f"{here}: expected the fields bytes, dtype, sha256 and shape, received {sorted(entry)}"
            raise BundleError(msg)
        digest = _str(entry["sha256"], f"{here}.sha256")
        if not _SHA256.fullmatch(digest):
            msg = f"{here}.sha256: expected 64 lowercase hexadecimal digits, received {digest[:80]!r}"
            raise BundleError(msg)
        dtype = _npy_dtype(_str(entry["dtype"], f"{here}.dtype"), f"{here}.dtype")
        shape = _ints(entry["shape"], f"{here}.shape", minimum=0)
        if len(shape) > 8:
            msg = f"{here}.shape: {len(shape)} axes; a bundle's arrays have at most 8"
            raise BundleError(msg)
        size = _int(entry["bytes"], f"{here}.bytes", minimum=0)
        arrays[rel] = _read_array(root, parts, rel, dtype, shape, size, digest)
    return arrays


def _file_name(rel: Any, where: str) -> list[str]:
    """The parts of a file name in ``files``: a relative path of plain parts, as iotable writes them."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if (
        not isinstance(rel, str)
        or len(rel) > MAX_NAME
        or len(parts) > 16
        or not rel.endswith(".npy")
        or not all(_PART.fullmatch(p) for p in parts)
    ):
        shown = rel[:120] + "..." if isinstance(rel, str) and len(rel) > 120 else rel
        msg = (
            f"{where}: the file name {shown!r} is not one a bundle holds: expected a relative path inside the "
            f"bundle ending in .npy, of at most {MAX_NAME} characters, of parts of letters, digits, '_', '-' and "
            "'.' (not starting with '.', so no '..', no absolute path, no NUL)"
        )
        raise BundleError(msg)
    return parts


def _npy_dtype(descr: str, where: str) -> np.dtype:
    try:
        dtype = np.dtype(descr) if len(descr) <= 8 else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or dtype.str != descr or dtype.byteorder == ">":
        msg = f"{where}: {descr[:40]!r} is not a numeric .npy type string a bundle holds (e.g. '|u1', '<i8', '<f4')"
        raise BundleError(msg)
    return dtype


def _read_array(
    root: Path, parts: list[str], rel: str, dtype: np.dtype, shape: tuple[int, ...], size: int, digest: str
) -> np.ndarray:
    """Verify one array file against its manifest entry (no symlink on the way, header, size, sha256), map it."""
    path = root
    try:
        for k, part in enumerate(parts):
            path = path / part
            info = os.lstat(path)
            last = k == len(parts) - 1
            if stat.S_ISLNK(info.st_mode):
                msg = f"{path}: is a symlink; a bundle holds its own files, never links (files[{rel!r}])"
                raise BundleError(msg)
            if not (stat.S_ISREG(info.st_mode) if last else stat.S_ISDIR(info.st_mode)):
                kind = "a regular file" if last else "a directory"
                msg = f"{path}: is not {kind} (files[{rel!r}])"
                raise BundleError(msg)
        with open(path, "rb") as f:
            offset = _header(f, path, dtype, shape)
            expected = offset + dtype.itemsize * math.prod(shape)
            found = os.fstat(f.fileno()).st_size
            if found != expected or size != found:
                problem = "truncated" if found < expected else "longer than its header says" if found > expected else ""
                if problem:
                    msg = (
                        f"{path}: {problem}: expected {expected} bytes for dtype {dtype.str} shape {shape}, found "
                        f"{found}"
                    )
                else:
                    msg = f"{path}: holds {found} bytes, but {MANIFEST} says {size} (files[{rel!r}].bytes)"
                raise BundleError(msg)
            f.seek(0)
            hasher = hashlib.sha256()
            for block in iter(lambda: f.read(_CHUNK), b""):
                hasher.update(block)
    except FileNotFoundError:
        msg = f"{path}: missing from the bundle (listed in {MANIFEST}); the bundle is incomplete, save it again"
        raise BundleError(msg) from None
    except OSError as exc:
        raise _disk_error(f"{path}: cannot be read", exc) from None
    if hasher.hexdigest() != digest:
        msg = (
            f"{path}: checksum mismatch (sha256 {hasher.hexdigest()}, {MANIFEST} says {digest}); the file is corrupted"
        )
        raise BundleError(msg)
    if not math.prod(shape):
        return np.zeros(shape, dtype=dtype)  # an empty file region cannot be memory-mapped
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


def _header(f: Any, path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Check a ``.npy`` 1.0 header against the manifest's dtype and shape; return where the data starts."""
    try:
        version = np.lib.format.read_magic(f)
        if version != (1, 0):
            msg = f"{path}: .npy format version {version[0]}.{version[1]} is not supported; a bundle holds 1.0"
            raise BundleError(msg)
        file_shape, fortran, file_dtype = np.lib.format.read_array_header_1_0(f)
    except BundleError:
        raise
    except Exception as exc:  # numpy raises ValueError, EOFError, SyntaxError on a damaged header
        msg = f"{path}: not a valid .npy file ({type(exc).__name__}: {exc}); the file is corrupted"
        raise BundleError(msg) from None
    if file_dtype.hasobject or file_dtype.kind not in "biuf":
        msg = f"{path}: holds dtype {file_dtype}; a bundle stores numeric arrays only (never pickled objects)"
        raise BundleError(msg)
    if fortran:
        msg = f"{path}: is in Fortran order; a bundle stores C-order arrays"
        raise BundleError(msg)
    if file_dtype.str != dtype.str or tuple(file_shape) != shape:
        msg = (
            f"{path}: holds dtype {file_dtype.str} and shape {tuple(file_shape)}, but {MANIFEST} says dtype "
            f"{dtype.str} and shape {shape}"
        )
        raise BundleError(msg)
    return f.tell()
