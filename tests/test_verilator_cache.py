"""The Verilator cache as untrusted input: entries sealed under the cache's secret, checked again before every
run, a run's warnings and short output as errors, and a late builder that keeps the entry stored first."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from iotable.errors import CacheError, HDLToolError
from iotable.hdl import Design, VerilatorModel, export, verilator_model
from iotable.hdl.verilator_cache import entry_name, store
from tests.test_fast_sim import needs_verilator, tiny
from tests.test_hdl_export import D2, values

PROGRAM = "iotable_sim"
# A program that runs and writes all-zero output words (one 32-bit integer per word): wrong rows, exit 0.
ZEROS = '#!/bin/sh\nhead -c "$(($4 * 4))" /dev/zero > "$2"\n'


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Design, Path]:
    """One tiny design built once; each test tampers with its own copy of the cache."""
    needs_verilator()
    base = tmp_path_factory.mktemp("verilator-cache")
    design = export(tiny(0), base / "d", top="t", vectors=4, table_benches=False)
    assert verilator_model(design, cache_dir=base / "cache").built
    return design, base / "cache"


@pytest.fixture
def cache(built: tuple[Design, Path], tmp_path: Path) -> Path:
    """A copy of the built cache (modes kept)."""
    copy = tmp_path / "cache"
    shutil.copytree(built[1], copy, symlinks=True)
    return copy


@pytest.fixture
def x(built: tuple[Design, Path]) -> torch.Tensor:
    """300 vectors on which the design's outputs are not all code 0."""
    vectors = values(D2, (300, 4), 3)
    assert bool((built[0].reference(vectors) != 0).any())
    return vectors


def entry_of(cache: Path) -> Path:
    """The cache's one design entry (the folder holding a program)."""
    (entry,) = [p for p in cache.iterdir() if (p / PROGRAM).is_file()]
    return entry


def loaded(built: tuple[Design, Path], cache: Path, x: torch.Tensor) -> VerilatorModel:
    """The model taken from ``cache`` (not built again), equal to net.run before any tampering."""
    design = built[0]
    model = verilator_model(design, cache_dir=cache)
    assert not model.built and model.folder == entry_of(cache).resolve()
    assert torch.equal(model(x), design.reference(x))
    return model


# -- a live model: every run checks its files again --------------------------------------------------------


def test_deleted_hex_file_is_an_error(built: tuple[Design, Path], cache: Path, x: torch.Tensor) -> None:
    """A hex file deleted under a live model is an error naming the file, not 300 rows of wrong codes."""
    model = loaded(built, cache, x)
    hexes = sorted(model.folder.glob("*.hex"))
    assert hexes
    for path in hexes:
        path.unlink()
    with pytest.raises(HDLToolError, match=r"\.hex' is gone.*call verilator_model\(design\) again"):
        model(x)


def test_swapped_program_is_an_error(built: tuple[Design, Path], cache: Path, x: torch.Tensor) -> None:
    """A program swapped under a live model (one that exits 0 with all-zero rows) never runs."""
    model = loaded(built, cache, x)
    (model.folder / PROGRAM).write_text(ZEROS)
    with pytest.raises(HDLToolError, match="changed since the model was loaded"):
        model(x)


def test_readmem_warning_is_an_error(built: tuple[Design, Path], cache: Path, x: torch.Tensor) -> None:
    """A run without its hex files (a model that lists none) gets Verilator's own warning, and that is an error."""
    model = loaded(built, cache, x)
    bare = replace(model, digests=tuple(d for d in model.digests if not d[0].endswith(".hex")))
    with pytest.raises(HDLToolError, match=r"(?s)warning or error line.*\$readmem file not found"):
        bare(x)


@pytest.mark.parametrize("where", ["entry", "program"])
def test_writable_by_others_is_refused(built: tuple[Design, Path], cache: Path, x: torch.Tensor, where: str) -> None:
    """An entry or a program that others may write is refused, both by a live model and at load."""
    model = loaded(built, cache, x)
    (model.folder if where == "entry" else model.folder / PROGRAM).chmod(0o777)
    with pytest.raises(HDLToolError, match="writable by other users"):
        model(x)
    with pytest.raises(CacheError, match="writable by other users.*delete it or pass another cache_dir"):
        verilator_model(built[0], cache_dir=cache)


def test_entry_that_is_a_link_is_refused(built: tuple[Design, Path], cache: Path, x: torch.Tensor) -> None:
    """An entry replaced by a link to a copy of itself is refused, by a live model and at load."""
    model = loaded(built, cache, x)
    entry = entry_of(cache)
    entry.rename(cache / "elsewhere")
    entry.symlink_to(cache / "elsewhere", target_is_directory=True)
    with pytest.raises(HDLToolError, match="symbolic link"):
        model(x)
    with pytest.raises(CacheError, match="symbolic link"):
        verilator_model(built[0], cache_dir=cache)


# -- at load: a sealed record ------------------------------------------------------------------------------


def test_resealed_entry_is_refused(built: tuple[Design, Path], cache: Path) -> None:
    """A swapped program whose digest is written into entry.json (without the cache's secret) is refused."""
    entry = entry_of(cache)
    (entry / PROGRAM).write_text(ZEROS)
    record = json.loads((entry / "entry.json").read_text())
    record["files"][PROGRAM] = hashlib.sha256(ZEROS.encode()).hexdigest()
    (entry / "entry.json").write_text(json.dumps(record))
    with pytest.raises(CacheError, match="was rewritten"):
        verilator_model(built[0], cache_dir=cache)


def test_entry_sealed_under_another_secret_is_refused(built: tuple[Design, Path], cache: Path) -> None:
    """Entry names depend on the cache's secret; an entry sealed under another secret, put under this
    secret's name for its key, is refused."""
    key = verilator_model(built[0], cache_dir=cache).key
    entry = entry_of(cache)
    assert entry.name == entry_name((cache / "key").read_bytes(), key) and entry.name != key[:32]
    (cache / "key").write_bytes(b"\1" * 32)  # another secret: the entry now has another name
    renamed = cache / entry_name(b"\1" * 32, key)
    assert renamed != entry
    entry.rename(renamed)
    with pytest.raises(CacheError, match="was rewritten"):
        verilator_model(built[0], cache_dir=cache)


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda root: root.chmod(0o777), "writable by other users"),
        (lambda root: (root / "key").chmod(0o644), "may be read by other users"),
        (lambda root: (root / "key").write_bytes(b"short"), "a key of 5 bytes"),
    ],
)
def test_cache_root_and_key_are_checked(
    built: tuple[Design, Path], cache: Path, tamper: Callable[[Path], object], words: str
) -> None:
    """A cache root others may write, a key others may read, or a key of the wrong size is refused by name."""
    verilator_model(built[0], cache_dir=cache)  # the copy as it was is accepted
    tamper(cache)
    with pytest.raises(CacheError, match=words):
        verilator_model(built[0], cache_dir=cache)


# -- storing: a late builder ---------------------------------------------------------------------------------


def late_copy(entry: Path, tmp_path: Path, *, program: str | None) -> Path:
    """A staged entry as a late builder has it: ``entry``'s files without the record (``program``: swapped)."""
    staged = tmp_path / "late"
    shutil.copytree(entry, staged)
    (staged / "entry.json").unlink()
    if program is not None:
        (staged / PROGRAM).write_text(program)
    return staged


def test_late_builder_keeps_the_first_entry(
    built: tuple[Design, Path], cache: Path, x: torch.Tensor, tmp_path: Path
) -> None:
    """A second store of the same key, late, keeps the valid entry stored first: the live model still runs it."""
    model = loaded(built, cache, x)
    staged = late_copy(model.folder, tmp_path, program=ZEROS)
    files = store(staged, model.folder, model.key, required=PROGRAM, what="t")
    assert files == dict(model.digests) and staged.is_dir()
    assert torch.equal(model(x), built[0].reference(x))
    again = verilator_model(built[0], cache_dir=cache)
    assert not again.built and again.digests == model.digests


def test_late_builder_replaces_a_damaged_entry(
    built: tuple[Design, Path], cache: Path, x: torch.Tensor, tmp_path: Path
) -> None:
    """A store onto a damaged entry (a file differs from its sealed record) replaces it, and the result runs."""
    model = loaded(built, cache, x)
    staged = late_copy(model.folder, tmp_path, program=None)
    damaged = next(model.folder.glob("*.hex"))
    damaged.write_text(damaged.read_text() + "// changed\n")
    files = store(staged, model.folder, model.key, required=PROGRAM, what="t")
    assert files == dict(model.digests) and not staged.exists()
    again = verilator_model(built[0], cache_dir=cache)
    assert not again.built and torch.equal(again(x), built[0].reference(x))


# -- the run: what the program says and writes -------------------------------------------------------------


@pytest.fixture
def design(tmp_path: Path) -> Design:
    """The tiny design, exported (no Verilator needed: the tests below run stand-in programs)."""
    return export(tiny(0), tmp_path / "d", top="t", vectors=4, table_benches=False)


def stand_in(design: Design, tmp_path: Path, script: str) -> VerilatorModel:
    """A model whose verified program is the shell ``script`` (arguments: inputs, outputs, counts, limit)."""
    entry = tmp_path / "root" / "entry"
    entry.mkdir(parents=True)
    (tmp_path / "root").chmod(0o700)
    entry.chmod(0o700)
    (entry / PROGRAM).write_text(script)
    (entry / PROGRAM).chmod(0o700)
    digest = hashlib.sha256(script.encode()).hexdigest()
    return VerilatorModel(design, entry, "k", "memory", built=False, seconds=0.0, digests=((PROGRAM, digest),))


@pytest.mark.parametrize(
    ("script", "words"),
    [
        (
            ZEROS + "echo '%Warning: t_l0_rows.hex:0: $readmem file not found' >&2\n",
            r"(?s)printed 1 warning or error line.*\$readmem file not found",
        ),
        ('#!/bin/sh\nhead -c 4 /dev/zero > "$2"\n', "wrote 4 bytes, not the 1,200 bytes expected"),
        ("#!/bin/sh\nexit 0\n", "wrote no output file"),
        (ZEROS + "exit 3\n", "failed \\(exit status 3\\)"),
    ],
    ids=["warning", "short", "missing", "exit"],
)
def test_run_failures_are_errors(
    design: Design, tmp_path: Path, x_plain: torch.Tensor, script: str, words: str
) -> None:
    """A warning, a short or missing output file and a non-zero exit are errors naming the entry's fix."""
    model = stand_in(design, tmp_path, script)
    with pytest.raises(HDLToolError, match=words):
        model(x_plain)


def test_stand_in_program_that_runs_clean_gives_its_rows(design: Design, tmp_path: Path, x_plain: torch.Tensor) -> None:
    """The checks pass a program that exits 0, prints nothing and writes every word: its rows come back."""
    got = stand_in(design, tmp_path, ZEROS)(x_plain)
    assert got.shape == (300, 3) and not bool(got.any())
    assert not [p.name for p in (tmp_path / "root").iterdir() if p.name.startswith(".")]  # no run folder left


@pytest.fixture
def x_plain() -> torch.Tensor:
    """300 vectors of the tiny design's inputs."""
    return values(D2, (300, 4), 3)
