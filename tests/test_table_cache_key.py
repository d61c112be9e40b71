"""The table cache's key (every value the tables depend on) and the trust it gives its entries."""

from __future__ import annotations

import dataclasses
import os
import pickle
import stat
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from iotable import Domain, precompute
from iotable.errors import CacheError, IOTableWarning
from iotable.front import cachekey
from iotable.nn import Quantize
from iotable.tabulate import cache as store

U2 = Domain.uniform(2)
EXAMPLE = torch.zeros(1, 3)


class Scaled(nn.Module):
    """Multiplies by a gain read from ``read(self)``: the gain lives in whatever attribute the test sets."""

    def __init__(self, read: Any) -> None:
        super().__init__()
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.read(self)


@dataclasses.dataclass
class Inner:
    gain: float


class Options:
    def __init__(self, gain: float) -> None:
        self.inner = Inner(gain)


def _dict(m: Scaled) -> Any:
    return m.cfg["gain"]


def _long_list(m: Scaled) -> Any:
    return m.gains[20]


def _tensor(m: Scaled) -> Any:
    return m.scale


def _nested(m: Scaled) -> Any:
    return m.opts.inner.gain


def _set_dict(m: Scaled, gain: float) -> None:
    m.cfg = {"gain": gain, "name": "x"}


def _set_long_list(m: Scaled, gain: float) -> None:
    m.gains = [1.0] * 20 + [gain] + [1.0] * 11


def _set_tensor(m: Scaled, gain: float) -> None:
    m.scale = torch.tensor([gain, 1.0])


def _set_nested(m: Scaled, gain: float) -> None:
    m.opts = Options(gain)


CASES = {
    "dict": (_dict, _set_dict, lambda m, g: m.cfg.__setitem__("gain", g)),
    "list-of-32": (_long_list, _set_long_list, lambda m, g: m.gains.__setitem__(20, g)),
    "unregistered-tensor": (_tensor, _set_tensor, lambda m, g: m.scale.__setitem__(0, g)),
    "nested-object": (_nested, _set_nested, lambda m, g: setattr(m.opts.inner, "gain", g)),
}


def gained(read: Any, setup: Any, gain: float) -> nn.Sequential:
    torch.manual_seed(0)
    layer = Scaled(read)
    setup(layer, gain)
    return nn.Sequential(nn.Linear(3, 2), layer, Quantize(2, signed=True, scale=0.25)).eval()


@pytest.mark.parametrize("case", list(CASES))
def test_an_edited_attribute_gives_the_new_tables(tmp_path, case):
    """An attribute edited in place between two precomputes with one cache_dir gives the edited module's tables."""
    read, setup, edit = CASES[case]
    model = gained(read, setup, 1.0)
    first = precompute(model, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    edit(model[1], 0.5)
    second = precompute(model, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    fresh = precompute(gained(read, setup, 0.5), input_domain=U2, example_input=EXAMPLE)  # all rows, by the module
    assert second["0"].cached == () and second.tables == fresh.tables
    assert first.tables != fresh.tables  # the edit changes rows: a stale table would be caught
    again = precompute(model, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    assert again["0"].method == "cache" and again.tables == fresh.tables  # an unchanged model still hits


def test_a_changed_method_changes_the_key():
    """Two classes that differ only in their forward's code give different keys."""

    class Double(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    class Triple(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 3

    Triple.__qualname__ = Double.__qualname__
    assert cachekey.module_key(Double(), layer="a") != cachekey.module_key(Triple(), layer="a")
    assert cachekey.module_key(Double(), layer="a") == cachekey.module_key(Double(), layer="a")


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (threading.Lock(), "lock"),
        (_cycle(), "holds itself"),
        ({"open": open(os.devnull, "rb")}, "BufferedReader"),
    ],
    ids=["lock", "cycle", "file"],
)
def test_an_attribute_that_cannot_be_keyed_is_refused_by_name(tmp_path, value, words):
    """An opaque attribute, or one that holds itself, is refused with its layer, path and the fix; none is written."""
    model = gained(_dict, _set_dict, 1.0)
    model[0].odd = value
    with pytest.raises(CacheError) as caught:
        precompute(model, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    message = str(caught.value)
    for word in ("'0'", ".0.odd", words, "pass no cache_dir", "plain data"):
        assert word in message, message
    assert not list(tmp_path.glob("*.npy"))
    del model[0].odd  # plain data again: the same model is keyed
    assert precompute(model, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)["0"].cached == ()


def test_a_value_too_large_to_key_is_refused(monkeypatch):
    """More values than the key takes is refused by path, not keyed by its type."""
    monkeypatch.setattr(cachekey, "MAX_ITEMS", 100)
    layer = Scaled(_long_list)
    layer.gains = list(range(200))
    with pytest.raises(CacheError, match=r"big\.gains\[.*too large"):
        cachekey.module_key(layer, layer="big")
    layer.gains = list(range(50))
    assert cachekey.module_key(layer, layer="big")


# -- entries that must not be served ------------------------------------------------------------------------------


def depthwise() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv1d(3, 3, 3, groups=3), Quantize(2, scale=0.5)).eval()


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("[!.]*.npy"))


def rerun(folder: Path, *words: str) -> Any:
    """Precompute with one poisoned entry in ``folder``: one warning with ``words``, the right tables, the entry
    replaced by a trusted one (a third run warns nothing and loads every table)."""
    fresh = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3))
    with pytest.warns(IOTableWarning) as caught:
        again = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    messages = [str(w.message) for w in caught if issubclass(w.category, IOTableWarning)]
    assert len(messages) == 1 and "table cache entry" in messages[0], messages
    for word in words:
        assert word in messages[0], messages[0]
    assert len(again["0"].cached) == 2 and again.tables == fresh.tables
    with warnings.catch_warnings():
        warnings.simplefilter("error", IOTableWarning)
        third = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    assert third["0"].cached == (0, 1, 2) and third.tables == fresh.tables
    for file in entries(folder):
        info = os.lstat(file)
        assert stat.S_ISREG(info.st_mode) and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return again


@pytest.fixture
def poisoned(tmp_path: Path) -> tuple[Path, Path]:
    """A cache folder of depthwise()'s three tables, and one of its entries."""
    folder = tmp_path / "cache"
    precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    return folder, entries(folder)[1]


def test_an_entry_with_an_edited_row_is_recomputed_with_a_warning(poisoned):
    """A table row edited on disk fails the checksum: warned, recomputed, replaced."""
    folder, victim = poisoned
    data = bytearray(victim.read_bytes())
    data[128] ^= 1
    victim.write_bytes(bytes(data))
    rerun(folder, "checksum", victim.name)


def test_an_entry_under_another_key_is_recomputed_with_a_warning(poisoned):
    """Another key's valid entry copied under this key's name is refused: the key it holds is not its name's."""
    folder, victim = poisoned
    other = next(f for f in entries(folder) if f != victim)
    victim.write_bytes(other.read_bytes())
    rerun(folder, "stored for the key", other.stem)


def test_a_linked_entry_is_refused_and_its_target_left_alone(poisoned, tmp_path):
    """An entry that is a symbolic link (to a valid entry elsewhere) is not followed; the link is replaced."""
    folder, victim = poisoned
    target = tmp_path / "elsewhere.npy"
    victim.rename(target)
    before = target.read_bytes()
    victim.symlink_to(target)
    rerun(folder, "symbolic link")
    assert target.read_bytes() == before and not victim.is_symlink()


def test_an_entry_others_may_write_is_refused(poisoned):
    """A valid entry with mode 0o666 is refused (anyone could have written it), recomputed and replaced."""
    folder, victim = poisoned
    os.chmod(victim, 0o666)
    rerun(folder, "writable by other users")


def test_an_entry_of_another_user_is_refused(poisoned, monkeypatch):
    """A valid entry owned by another user (as the reader sees it) is refused and recomputed."""
    folder, victim = poisoned
    uid = os.lstat(victim).st_uid
    secret = store.TableCache(folder).secret
    monkeypatch.setattr(store, "_secret", lambda _folder: secret)  # the key file's owner is checked apart
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.warns(IOTableWarning, match="owned by user"):
        again = precompute(depthwise(), input_domain=U2, example_input=torch.zeros(1, 3, 3), cache_dir=folder)
    assert again["0"].cached == ()  # every entry is now another user's: none served


# -- concurrent writers and cleanups -------------------------------------------------------------------------------


def test_a_cleanup_while_an_entry_is_renamed_into_place_removes_nothing(tmp_path, monkeypatch):
    """A cleanup that runs just before a finished entry is renamed into place leaves it: the rename succeeds."""
    cache = store.TableCache(tmp_path)
    real = os.replace

    def replace_after_a_cleanup(src: Any, dst: Any) -> None:
        store.sweep_parts(tmp_path)
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_a_cleanup)
    sink = cache.sink("k" * 64, 4, 1, np.dtype(np.uint8))
    sink.write(0, np.arange(4, dtype=np.uint8).reshape(4, 1))
    assert (sink.finish()[:, 0] == [0, 1, 2, 3]).all()
    monkeypatch.setattr(os, "replace", real)
    assert (cache.load("k" * 64, 4, 1, np.dtype(np.uint8))[:, 0] == [0, 1, 2, 3]).all()


def test_a_cleanup_between_creating_and_locking_a_part_file_costs_nothing(tmp_path, monkeypatch):
    """A cleanup that removes a new .part file before its writer locks it: the writer takes another and finishes."""
    cache = store.TableCache(tmp_path)
    real = store.temporary_beside
    swept: list[int] = []

    def created_then_swept(path: Path, *, hidden: bool = True) -> Any:
        made = real(path, hidden=hidden)
        if not swept:
            swept.append(store.sweep_parts(tmp_path))
        return made

    monkeypatch.setattr(store, "temporary_beside", created_then_swept)
    sink = cache.sink("c" * 64, 4, 1, np.dtype(np.uint8))
    sink.write(0, np.full((4, 1), 3, np.uint8))
    assert swept == [1] and (sink.finish() == 3).all()
    assert (cache.load("c" * 64, 4, 1, np.dtype(np.uint8)) == 3).all()


def test_two_writers_of_one_key_both_end_with_a_valid_entry(tmp_path):
    """Two sinks of the same key, interleaved, both finish with the table; the entry left is valid."""
    first, second = store.TableCache(tmp_path), store.TableCache(tmp_path)
    rows = np.arange(8, dtype=np.uint8).reshape(8, 1) % 4
    a = first.sink("d" * 64, 8, 1, np.dtype(np.uint8))
    b = second.sink("d" * 64, 8, 1, np.dtype(np.uint8))
    a.write(0, rows[:4])
    b.write(0, rows[:4])
    a.write(4, rows[4:])
    b.write(4, rows[4:])
    done_a = a.finish()
    done_b = b.finish()
    assert (done_a == rows).all() and (done_b == rows).all()
    assert (first.load("d" * 64, 8, 1, np.dtype(np.uint8), codes=4) == rows).all()
    assert not list(tmp_path.glob(".*.part"))


def _gain(m: Scaled) -> Any:
    return m.options.inner.gain


def test_the_key_is_the_same_once_the_module_has_been_pickled():
    """Pickling a module (as an executor does to send it to a worker) leaves its key unchanged, although pickle
    caches the slot names of each class it meets on the class itself."""
    for cls in (Scaled, Options, Inner):
        if "__slotnames__" in vars(cls):  # an earlier pickle in this process: start from a class pickle never saw
            delattr(cls, "__slotnames__")
    module = Scaled(_gain)
    module.options = Options(2.0)
    before = cachekey.module_key(module, layer="a")
    copy = pickle.loads(pickle.dumps(module))
    assert "__slotnames__" in vars(Inner)  # the check can fail: pickle did write on the class
    assert cachekey.module_key(module, layer="a") == before
    assert cachekey.module_key(copy, layer="a") == before
