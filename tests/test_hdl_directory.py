"""A design directory is one unit: staged and renamed into place, verified against the Design's manifest by
simulate and check, never written into a bundle or over another directory unasked; path errors are HDLErrors."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, OptionError
from iotable.cli import main
from iotable.errors import HDLError
from iotable.hdl import check, export, simulate
from iotable.hdl import directory as directory_module
from iotable.hdl import writer as hdl_writer
from iotable.hdl.directory import file_sha256, read_verified
from iotable.nn import Quantize

ROOT = Path(__file__).resolve().parent.parent
MODEL = """
import torch
from iotable import Domain, precompute, nn
def tiny(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), nn.Quantize(2)).eval()
    return precompute(model, input_domain=Domain.uniform(2))
"""
namespace: dict = {}
exec(MODEL, namespace)  # the same networks in this process and in the killed exports below
tiny = namespace["tiny"]


@pytest.fixture(scope="module")
def nets() -> tuple[iotable.TableNetwork, iotable.TableNetwork]:
    """Two different tiny networks (4 inputs -> 3 codes), so that their files under one top differ."""
    return tiny(1), tiny(2)


def verified(design: iotable.hdl.Design) -> None:
    """Raise unless the design's directory holds exactly its files, as written."""
    read_verified(Path(design.directory), dict(design.checksums), (), what="test")


# -- the manifest -------------------------------------------------------------------------------------------------


def test_manifest_lists_every_file_with_its_sha256(nets, tmp_path: Path) -> None:
    """Design.checksums and <top>_design.json hold the sha256 of every file written; nothing else is there."""
    design = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    sums = dict(design.checksums)
    assert list(sums) == list(design.files)
    assert sorted(p.name for p in (tmp_path / "hw").iterdir()) == sorted(design.files)
    assert all(file_sha256(tmp_path / "hw" / name) == digest for name, digest in sums.items())
    record = json.loads((tmp_path / "hw" / "tiny_design.json").read_text())
    assert record["sha256"] == {k: v for k, v in sums.items() if k != "tiny_design.json"}
    assert "network" not in record and record["files"] == list(design.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw"]  # no staging directory left


def test_description_does_not_copy_the_tables(nets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The description JSON is built without deep-copying the network (asdict(design) copied every table)."""
    copied: list[str] = []
    original = dataclasses.copy.deepcopy  # what dataclasses.asdict copies leaves with

    def spy(value, memo=None):
        copied.append(type(value).__name__)
        return original(value, memo)

    monkeypatch.setattr(dataclasses.copy, "deepcopy", spy)
    export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    assert not {"TableNetwork", "IOTable", "ndarray", "Tensor"} & set(copied)


def test_simulate_refuses_another_design_in_the_directory(nets, tmp_path: Path) -> None:
    """simulate(a) after exporting b (same top, other tables) into the directory refuses, naming a changed file."""
    a = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    b = export(nets[1], tmp_path / "hw", top="tiny", vectors=4, overwrite=True)
    assert a.files == b.files and a.checksums != b.checksums
    with pytest.raises(HDLError, match=r"simulate: .*tiny\w*\.(v|hex|json)'.* not the file the design wrote"):
        simulate(a, torch.zeros(2, 4))
    with pytest.raises(HDLError, match=r"check: .* not the file the design wrote"):
        check(a)
    verified(b)


def test_simulate_refuses_a_directory_holding_another_top(nets, tmp_path: Path) -> None:
    """A design of another top in the directory: the missing and the foreign files are named."""
    a = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    export(nets[0], tmp_path / "hw", top="other", vectors=4, overwrite=True)
    with pytest.raises(HDLError, match=r"missing \['tiny.v'.*not part of the design \['other.v'"):
        simulate(a, torch.zeros(1, 4))


@pytest.mark.parametrize("verb", ["simulate", "check"])
def test_a_tampered_source_is_refused_by_name(nets, tmp_path: Path, verb: str) -> None:
    """One byte of a source changed: simulate and check refuse, naming that file; put back, it verifies."""
    design = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    path = tmp_path / "hw" / "tiny.v"
    text = path.read_text()
    path.write_text(text.replace("endmodule", "endmodule ", 1))
    run = (lambda: simulate(design, torch.zeros(1, 4))) if verb == "simulate" else (lambda: check(design))
    with pytest.raises(HDLError, match=rf"{verb}: '.*tiny\.v' is not the file the design wrote"):
        run()
    path.write_text(text)
    verified(design)


@pytest.mark.parametrize("verb", ["simulate", "check"])
def test_an_extra_missing_or_linked_file_is_refused(nets, tmp_path: Path, verb: str) -> None:
    """A stale extra file, a missing bench file, or a source replaced by a link to the same text: refused."""
    design = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    hw = tmp_path / "hw"
    run = (lambda: simulate(design, torch.zeros(1, 4))) if verb == "simulate" else (lambda: check(design))
    (hw / "stale_layer9.v").write_text("module stale; endmodule\n")
    with pytest.raises(HDLError, match=rf"{verb}: .*not part of the design \['stale_layer9.v'\]"):
        run()
    (hw / "stale_layer9.v").unlink()
    (hw / "tiny_expected.hex").rename(tmp_path / "moved.hex")
    with pytest.raises(HDLError, match=r"missing \['tiny_expected.hex'\]"):
        run()
    (tmp_path / "moved.hex").rename(hw / "tiny_expected.hex")
    (hw / "tiny.v").rename(tmp_path / "tiny.v")
    (hw / "tiny.v").symlink_to(tmp_path / "tiny.v")
    with pytest.raises(HDLError, match=rf"{verb}: '.*tiny\.v' is not a regular file"):
        run()


def test_a_design_without_checksums_is_refused(nets, tmp_path: Path) -> None:
    """A Design whose manifest was dropped cannot vouch for its directory: simulate refuses."""
    design = dataclasses.replace(export(nets[0], tmp_path / "hw", top="tiny", vectors=4), checksums=())
    with pytest.raises(HDLError, match="carries no file checksums"):
        simulate(design, torch.zeros(1, 4))


# -- where export may write -------------------------------------------------------------------------------------


def test_a_non_empty_directory_needs_overwrite(nets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-empty directory is refused (its files untouched); overwrite=True replaces an earlier design whole,
    no stale file, but not the working directory."""
    hw = tmp_path / "hw"
    old = export(nets[1], hw, top="tiny", vectors=4)
    with pytest.raises(HDLError, match=r"export: '.*hw' is a directory that is not empty; .*overwrite=True"):
        export(nets[0], hw, top="tiny", vectors=4)
    assert sorted(p.name for p in hw.iterdir()) == sorted(old.files)
    design = export(nets[0], hw, top="other", vectors=4, overwrite=True)
    assert sorted(p.name for p in hw.iterdir()) == sorted(design.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw"]
    verified(design)
    monkeypatch.chdir(hw)
    with pytest.raises(HDLError, match="holds the working directory"):
        export(nets[0], ".", top="tiny", vectors=4, overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    verified(export(nets[0], empty, top="tiny", vectors=4))  # an empty directory needs no overwrite


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def test_overwrite_replaces_only_an_earlier_design(nets, tmp_path: Path) -> None:
    """overwrite=True refuses a folder that holds no design of iotable (a repository with .git, a forged or
    damaged <top>_design.json) or a design beside other files, naming the folder and the fix; all untouched."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "notes.txt").write_text("mine")
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "x_design.json").write_text('{"top": "x", "files": ["x_design.json"]}')  # no sha256: not ours
    (forged / "keep.v").write_text("module keep; endmodule\n")
    damaged = tmp_path / "damaged"
    export(nets[0], damaged, top="tiny", vectors=4)
    (damaged / "tiny_design.json").write_text("{not json")
    mixed = tmp_path / "mixed"
    export(nets[0], mixed, top="tiny", vectors=4)
    (mixed / ".git").mkdir()
    cases = [
        (repo, r"'.*repo' is a directory that holds no design of iotable .*\['.git', 'notes.txt'\].*new or empty"),
        (forged, r"'.*forged' is a directory that holds no design of iotable"),
        (damaged, r"'.*damaged' is a directory that holds no design of iotable"),
        (mixed, r"'.*mixed' holds an earlier design but also files the export did not write \(\['.git'\]\).*move"),
    ]
    for folder, words in cases:
        before = _tree(folder)
        with pytest.raises(HDLError, match=f"export: {words}"):
            export(nets[1], folder, top="tiny", vectors=4, overwrite=True)
        assert _tree(folder) == before
    hw = tmp_path / "hw"
    (hw / "sub").mkdir(parents=True)  # a folder of this user's, no design in it
    assert main(["export", "verilog", str(_bundle(nets[0], tmp_path)), str(hw), "--overwrite"]) != 0
    assert (hw / "sub").is_dir()


def _bundle(net: Any, tmp_path: Path) -> Path:
    path = tmp_path / "net.bundle"
    if not path.exists():
        iotable.save(net, path)
    return path


def test_export_never_writes_into_a_bundle(nets, tmp_path: Path) -> None:
    """A bundle directory, a folder inside one, and a bundle with overwrite=True are all refused, untouched."""
    bundle = tmp_path / "model.bundle"
    iotable.save(nets[0], bundle)
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    for target, overwrite, words in [
        (bundle, False, "is an iotable bundle"),
        (bundle, True, "is an iotable bundle"),
        (bundle / "hw", False, "is inside the iotable bundle"),
    ]:
        with pytest.raises(HDLError, match=words):
            export(nets[0], target, top="tiny", vectors=4, overwrite=overwrite)
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    iotable.load(bundle)


def test_cli_export_into_its_own_bundle_is_refused(nets, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``iotable export verilog B B`` fails and leaves the bundle as it was; --overwrite replaces a design."""
    bundle = tmp_path / "model.bundle"
    iotable.save(nets[0], bundle)
    assert main(["export", "verilog", str(bundle), str(bundle), "--vectors", "4"]) != 0
    assert "iotable bundle" in capsys.readouterr().err
    assert main(["check", str(bundle)]) == 0 and not list(bundle.glob("*.v"))
    hw = tmp_path / "hw"
    assert main(["export", "verilog", str(bundle), str(hw), "--vectors", "4"]) == 0
    assert main(["export", "verilog", str(bundle), str(hw), "--vectors", "4"]) != 0
    assert "not empty" in capsys.readouterr().err
    assert main(["export", "verilog", str(bundle), str(hw), "--vectors", "4", "--overwrite"]) == 0


def test_path_errors_are_hdl_errors_naming_the_path(nets, tmp_path: Path) -> None:
    """Empty, NUL, a file, below a file, too long a name, dangling and looping links: HDLError, nothing written."""
    file = tmp_path / "file.txt"
    file.write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = [
        ("", "the directory path '' is empty"),
        ("a\0b", "holds a NUL character"),
        (file, "file.txt' exists and is not a directory"),
        (file / "hw", "file.txt' is a file, so .* cannot be a directory inside it"),
        (file / "a" / "b", "file.txt' is a file"),
        (tmp_path / ("n" * 300), "(File name too long).*choose a shorter path"),
        (tmp_path / "dangling", "dangling' is a link to a missing path"),
        (tmp_path / "dangling" / "hw", "dangling' on the path .* is a dangling or looping link"),
        (tmp_path / "loop", "loop' is a link that loops"),
        (tmp_path / "loop" / "hw", "loop' on the path .* is a dangling or looping link"),
    ]
    for target, words in cases:
        with pytest.raises(HDLError, match=f"export: .*{words}"):
            export(nets[0], target, top="tiny", vectors=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file.txt", "loop"]
    with pytest.raises(HDLError, match="expected a directory path"):
        export(nets[0], 3, top="tiny")  # type: ignore[arg-type]


def test_a_read_only_folder_is_an_hdl_error(nets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the system refuses to write into (EACCES: read-only for this user) is an HDLError naming the
    path and the fix, for every user (root included: the refusal is the system's answer, given here)."""

    def refuse(target: Path) -> Path:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target.parent))

    monkeypatch.setattr(directory_module, "staging_directory", refuse)
    with pytest.raises(HDLError, match=r"export: cannot .*ro/hw'.*choose a folder you may write to"):
        export(nets[0], tmp_path / "ro" / "hw", top="tiny", vectors=4)
    assert not (tmp_path / "ro" / "hw").exists()


def test_a_full_disk_is_an_hdl_error_and_keeps_the_old_design(
    nets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while writing: an HDLError with the path and the fix; the earlier design is intact, no staging left."""
    old = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    writes = []

    def full(path: Path, chunks: Any) -> None:
        writes.append(path)
        if len(writes) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        Path(path).write_bytes(b"".join(chunks))

    monkeypatch.setattr(iotable.hdl.tools, "_stream", full)
    with pytest.raises(HDLError, match=r"export: cannot write the design into '.*hw' \(No space.*free space"):
        export(nets[1], tmp_path / "hw", top="tiny", vectors=4, overwrite=True)
    verified(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw"]


def test_modes_follow_the_umask(nets, tmp_path: Path) -> None:
    """Files get 0o666 and directories 0o777 less the umask, as open() and mkdir() give them."""
    for mask in (0o022, 0o002, 0o077):
        previous = os.umask(mask)
        try:
            design = export(nets[0], tmp_path / f"hw{mask:o}", top="tiny", vectors=4)
        finally:
            os.umask(previous)
        folder = tmp_path / f"hw{mask:o}"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
        assert {stat.S_IMODE((folder / f).stat().st_mode) for f in design.files} == {0o666 & ~mask}


def test_bundles_and_atomic_writes_follow_the_umask(nets, tmp_path: Path) -> None:
    """atomic_write (which bundles, PLA files and caches use) gives 0o666 less the umask; a bundle still loads."""
    from iotable._util.files import atomic_write

    previous = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.txt", b"x")
        iotable.save(nets[0], tmp_path / "m.bundle")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
    assert torch.equal(iotable.load(tmp_path / "m.bundle").run(torch.zeros(2, 4)), nets[0].run(torch.zeros(2, 4)))


# -- killed exports -----------------------------------------------------------------------------------------------

KILLER = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {src!r})
{model}
import iotable.hdl.tools as tools
import iotable.hdl.directory as directory
from iotable.hdl import export
point, count = sys.argv[1], int(sys.argv[2])
calls = []
def dying(original):
    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) >= count:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return wrapped
if point == "write":
    tools._stream = dying(tools._stream)
else:
    import os as real_os
    renames = dying(real_os.replace)
    class Dying:
        def __getattr__(self, name):
            return getattr(real_os, name)
        @staticmethod
        def replace(source, target):  # count the renames of directories only, not each file's commit
            if real_os.path.isdir(source):
                return renames(source, target)
            return real_os.replace(source, target)
    import iotable._util.files as files
    files.os = Dying()
export(tiny(2), sys.argv[3], top="tiny", vectors=4, overwrite=True)
"""


@pytest.mark.parametrize(("point", "count"), [("write", 1), ("write", 8), ("rename", 2), ("rename", 3)])
def test_a_killed_export_leaves_the_old_design_or_none_and_is_cleaned(
    nets, tmp_path: Path, point: str, count: int
) -> None:
    """kill -9 at a file write or a rename: the directory holds the old design whole (or, between the two renames
    of a replacement, is absent with the old one set aside), never a mix; the next export removes the leftovers."""
    old = export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    script = KILLER.format(src=str(ROOT / "src"), model=textwrap.dedent(MODEL))
    run = subprocess.run(
        [sys.executable, "-c", script, point, str(count), str(tmp_path / "hw")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == -9, run.stderr[-2000:]
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name != "hw")
    assert leftovers and all(p.startswith(".hw.") and p.endswith((".staging", ".old")) for p in leftovers)
    if (tmp_path / "hw").exists():
        verified(old)  # the old design, whole and unchanged
    else:
        assert (point, count) == ("rename", 3)  # between moving the old design aside and the new one in
        (aside,) = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]
        verified(dataclasses.replace(old, directory=aside))
    new = export(nets[1], tmp_path / "hw", top="tiny", vectors=4, overwrite=True)
    verified(new)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw"]


def test_leftovers_of_a_running_export_are_kept(nets, tmp_path: Path) -> None:
    """A staging directory of a process that still runs is not removed (it may be writing); a dead one's is."""
    live = tmp_path / f".hw.{os.getppid()}.abc123.staging"
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".hw.{int(dead_pid.stdout)}.abc123.staging"
    other = tmp_path / f".other.{int(dead_pid.stdout)}.abc123.staging"
    for folder in (live, dead, other):
        folder.mkdir()
    export(nets[0], tmp_path / "hw", top="tiny", vectors=4)
    assert live.exists() and other.exists() and not dead.exists()


# -- smaller escapes ----------------------------------------------------------------------------------------------


def test_an_empty_input_batch_is_an_option_error(nets, tmp_path: Path) -> None:
    """export(inputs=<no vector>) is refused clearly, before anything is written."""
    with pytest.raises(OptionError, match="export: inputs holds no vector .*pass a non-empty batch"):
        export(nets[0], tmp_path / "hw", inputs=torch.zeros(0, 4))
    assert not (tmp_path / "hw").exists()


def conv_net(size: int, channels: int = 2) -> iotable.TableNetwork:
    """A 1x1 conv of ``channels`` units over a ``size`` x ``size`` 1-bit image, then a 2x2 conv: many positions."""
    torch.manual_seed(3)
    model = nn.Sequential(
        OrderedDict(
            c1=nn.Conv2d(1, channels, 1), q1=Quantize(1), c2=nn.Conv2d(channels, 1, 2, stride=2), q2=Quantize(1)
        )
    ).eval()
    return iotable.precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 1, size, size))


def test_the_unroll_count_is_the_built_netlist_s(tmp_path: Path) -> None:
    """Counted from the graph, the instances equal those the unrolled netlist builds (units x positions)."""
    net = conv_net(6)
    design = export(net, tmp_path / "hw", top="c", vectors=2, table_benches=False)
    assert hdl_writer.unrolled_instances(net.graph) == sum(r.instances for r in design.layers) == 2 * 36 + 9


def test_the_unroll_limit_is_checked_before_the_netlist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Over the limit, export refuses without building anything; under it, it builds."""
    net = conv_net(6)

    def never(*args, **kwargs):
        raise AssertionError("the netlist was built")

    monkeypatch.setattr(hdl_writer, "UNROLL_LIMIT", 80)
    monkeypatch.setattr(hdl_writer, "build_netlist", never)
    with pytest.raises(HDLError, match=r"export: style 'unrolled' needs 81 table instances \(more than 80\)"):
        export(net, tmp_path / "hw", top="c")
    assert not (tmp_path / "hw").exists()


def test_a_realistic_over_limit_design_is_refused_before_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A 1x1 conv over a 320x320 image (over 200,000 instances) is refused from the graph alone."""
    net = conv_net(320)

    def never(*args, **kwargs):
        raise AssertionError("the netlist was built")

    monkeypatch.setattr(hdl_writer, "build_netlist", never)
    with pytest.raises(HDLError, match=r"needs 230400 table instances \(more than 200000\).*style='streaming'"):
        export(net, tmp_path / "hw", top="c")
    assert not (tmp_path / "hw").exists()
