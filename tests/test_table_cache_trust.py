"""Table cache entries as untrusted input: signed under the folder's secret key, malformed ones recomputed."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from iotable import Domain, precompute
from iotable._util.trust import SECRET_FILE
from iotable.errors import CacheError
from iotable.nn import Quantize
from iotable.tabulate import cache as store

from .test_table_cache_key import depthwise, entries, rerun

U2 = Domain.uniform(2)


@pytest.fixture
def poisoned(tmp_path: Path) -> tuple[Path, Path]:
    """A cache folder of depthwise()'s three tables, and one of its entries."""
    folder = tmp_path / "cache"
    precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    return folder, entries(folder)[1]


def _forge(victim: Path) -> None:
    """Rewrite every row of the entry (code c -> 3 - c) and its trailer's checksum as a plain sha256 of the
    marker, the key and the bytes, as an edit that knows the format but not the folder's secret would."""
    raw = victim.read_bytes()
    at = raw.rindex(b"iotable-cache-")
    marker = raw[at : raw.index(b":", at) + 1]
    body = bytearray(raw[:at])
    header = 128  # the .npy 1.0 header of a small table
    body[header:] = bytes(3 - b for b in body[header:])
    key = victim.stem.encode()
    digest = hashlib.sha256(marker + key + b"\n" + bytes(body)).digest()
    victim.write_bytes(bytes(body) + marker + key + b"\n" + digest)


def test_an_entry_with_rewritten_rows_and_checksum_is_recomputed(poisoned):
    """Rows rewritten with the trailer's checksum computed anew fail the signature: warned, recomputed, replaced."""
    folder, victim = poisoned
    _forge(victim)
    rerun(folder, "checksum", "secret key", victim.name)


def test_an_entry_signed_under_another_key_file_is_recomputed(poisoned):
    """An entry written under another folder's secret key (the key file replaced) is recomputed."""
    folder, _victim = poisoned
    key = folder / SECRET_FILE
    key.unlink()  # iotable writes a new key: every entry made with the old one is redone
    fresh = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3))
    with pytest.warns(Warning, match="checksum") as caught:
        again = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    assert len(caught) == 3 and again["0"].cached == () and again.tables == fresh.tables
    third = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    assert third["0"].cached == (0, 1, 2)


def test_an_unchanged_entry_keeps_hitting(poisoned):
    """The contrast: untouched signed entries are served, every table from the cache."""
    folder, _victim = poisoned
    again = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    assert again["0"].cached == (0, 1, 2) and again["0"].method == "cache"


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda raw: b"", "holds 0 bytes"),
        (lambda raw: raw[:100], "holds 100 bytes"),
        (lambda raw: raw[:8], "holds 8 bytes"),
        (lambda raw: raw[:10] + b"{'garbage': (((1,}" + raw[28:], "header"),
        (lambda raw: raw[:8] + b"\xff\xff" + raw[10:], "header"),
        (lambda raw: b"\x93NUMPY\x02\x00" + raw[8:], "header"),
        (lambda raw: raw.replace(b"(64, 1)", b"(16, 4)", 1), "header"),
    ],
    ids=["empty", "truncated", "magic-only", "garbage-dict", "header-length-65535", "version-2", "other-shape"],
)
def test_a_malformed_entry_is_recomputed_with_a_warning(poisoned, damage: Any, words: str):
    """A truncated, empty or garbled entry (header, its length, its version) is a bad entry: warned, recomputed."""
    folder, victim = poisoned
    raw = victim.read_bytes()
    victim.write_bytes(damage(raw))
    assert victim.read_bytes() != raw
    rerun(folder, words, victim.name)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda key: os.chmod(key, 0o644), "may be read by other users"),
        (lambda key: key.write_bytes(b"short"), "holds a key of 5 bytes"),
    ],
    ids=["readable-by-others", "wrong-size"],
)
def test_a_secret_key_that_cannot_be_trusted_is_a_cache_error(poisoned, damage: Any, words: str):
    """A key file others may read, or of the wrong size, is refused by name with the fix; nothing is served."""
    folder, _victim = poisoned
    damage(folder / SECRET_FILE)
    with pytest.raises(CacheError) as caught:
        precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    message = str(caught.value)
    for word in (words, SECRET_FILE, "secret key", "remove"):
        assert word in message, message


def test_a_secret_key_of_another_user_is_a_cache_error(poisoned, monkeypatch):
    """A key file owned by another user (as the reader sees it) is refused: it cannot sign anything."""
    folder, _victim = poisoned
    uid = os.lstat(folder / SECRET_FILE).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.raises(CacheError, match=r"secret key cannot be trusted: .*owned by user"):
        store.TableCache(folder)


def test_the_secret_key_is_written_for_its_owner_alone(tmp_path):
    """A new cache folder's key file is a regular file, mode 0600, of 32 bytes."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Linear(2, 1), Quantize(2, scale=0.5)).eval()
    precompute(model, input_domain=U2, example_input=torch.zeros(1, 2), cache_dir=tmp_path)
    info = os.lstat(tmp_path / SECRET_FILE)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == 32


def test_a_secret_key_that_cannot_be_written_is_a_cache_error(tmp_path, monkeypatch):
    """A full disk while the folder's key is first written is a CacheError naming the key file and the fix."""
    import errno

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(CacheError, match=r"secret key '.*key': No space left on device; free space on that disk"):
        store.TableCache(tmp_path)
