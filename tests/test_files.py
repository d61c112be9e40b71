"""The one atomic-write helper: the old file or the whole new one, never a part, and no leftovers."""

from __future__ import annotations

from pathlib import Path

import pytest

from iotable._util import files as _files


def test_atomic_write_replaces_the_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    """A second write replaces the first whole, and no temporary file is left in the folder."""
    target = tmp_path / "out.txt"
    _files.atomic_write(target, b"first")
    _files.atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_failed_write_keeps_the_old_file_and_removes_its_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails before the rename leaves the old content and removes its temporary file."""
    target = tmp_path / "out.txt"
    _files.atomic_write(target, b"old")

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_files.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        _files.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_temporary_file_is_named_after_its_target(tmp_path: Path) -> None:
    """A temporary file sits beside its target, named after it (hidden by default), ending in .part."""
    file, name = _files.temporary_beside(tmp_path / "table.npy")
    file.close()
    assert Path(name).parent == tmp_path and Path(name).name.startswith(".table.npy.") and name.endswith(".part")
    _files.discard(name)
    _files.discard(name)  # a second discard of a file already gone is no error
    assert not Path(name).exists()
