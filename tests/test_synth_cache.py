"""The mapping cache is trusted no more than a bundle, the mapping jobs surface real errors, and an ABC script is
an allow-list of commands: the regressions of an adversarial sweep and its cases, kept as a test module."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import stat
import subprocess
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import iotable
import iotable.hdl
import iotable.synth.jobs
from iotable import Domain, IOTable
from iotable.errors import CacheError, IOTableWarning, SynthError
from iotable.lutnet import result_name
from iotable.synth import DEFAULT_SCRIPT, abc_version, map_luts, map_table, table_lut_estimate
from iotable.synth.abcrun import SCRIPT_COMMANDS, resolve_script
from iotable.synth.cache import MAX_RECORD_BYTES

from .optional import require_program

TWO = Domain.uniform(2)


def _abc() -> str:
    require_program("berkeley-abc", package="berkeley-abc")
    return "berkeley-abc"


def _table(seed: int, inputs: int = 4, output_bits: int = 2) -> IOTable:
    """A dense table of random codes over ``inputs`` 2-bit inputs."""
    rng = np.random.default_rng(seed)
    return IOTable.dense(
        rng.integers(0, 2**output_bits, (4**inputs, 1)), input_domains=[TWO] * inputs, output_domain=Domain.uniform(2)
    )


def _file(folder: Path, table: IOTable, k: int = 6) -> Path:
    """The cache file of ``table``'s result for ``k`` and the default script."""
    key = iotable.lutnet.bit_function(table, what="test").key()
    return folder / result_name(key, k, resolve_script(None, k, what="test"), abc_version(_abc()))


def _remapped(table: IOTable, folder: Path, *words: str, k: int = 6) -> Any:
    """Map ``table`` with the cache in ``folder`` expecting one warning that names the file and ``words``; the
    result is mapped afresh (equal to a run without a cache) and the file replaced by a valid record."""
    with pytest.warns(IOTableWarning) as caught:
        report = map_luts([table], abc=_abc(), cache_dir=folder, workers=1, k=k)
    messages = [str(w.message) for w in caught if issubclass(w.category, IOTableWarning)]
    assert len(messages) == 1, messages
    assert "cache file" in messages[0] and "mapping" in messages[0] and "again" in messages[0], messages[0]
    for word in words:
        assert word in messages[0], messages[0]
    fresh = map_table(table, abc=_abc(), k=k)
    (result,) = report.tables
    assert report.mapped == 1 and not result.cached
    assert (result.luts, result.depth, result.estimate) == (fresh.luts, fresh.depth, fresh.estimate)
    path = _file(folder, table, k)
    assert stat.S_ISREG(os.lstat(path).st_mode)
    record = json.loads(path.read_text())
    assert (record["k"], record["luts"], record["input_bits"]) == (k, fresh.luts, fresh.input_bits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the replaced entry is trusted: no second warning
        again = map_luts([table], abc=_abc(), cache_dir=folder, workers=1, k=k)
    assert again.cached == 1 and again.tables[0].luts == fresh.luts
    return result


@pytest.fixture
def cached(tmp_path: Path) -> tuple[IOTable, Path, dict[str, Any]]:
    """A table, its cache folder holding its (valid) k=6 result, and that record."""
    table = _table(1)
    map_luts([table], abc=_abc(), cache_dir=tmp_path / "cache", workers=1)
    path = _file(tmp_path / "cache", table)
    return table, path, json.loads(path.read_text())


# -- the regressions of the sweep -------------------------------------------------------------------------------


def test_a_k4_entry_copied_over_the_k6_one_is_mapped_again(tmp_path):
    """An entry of another k under this k's name is refused (it reported k=4's LUTs for k=6) and mapped again."""
    table, folder = _table(2), tmp_path / "cache"
    four = map_luts([table], abc=_abc(), cache_dir=folder, workers=1, k=4).tables[0]
    six = map_luts([table], abc=_abc(), cache_dir=folder, workers=1, k=6).tables[0]
    assert four.luts > six.luts
    shutil.copyfile(_file(folder, table, 4), _file(folder, table, 6))
    result = _remapped(table, folder, "k is 4, expected 6")
    assert result.luts == six.luts and result.k == 6


def test_an_edited_input_bits_does_not_change_the_estimate(cached):
    """An edited input_bits is refused (it inflated the estimate): the estimate is the table's own."""
    table, path, record = cached
    path.write_text(json.dumps({**record, "input_bits": 12}))
    result = _remapped(table, path.parent, "input_bits is 12, expected 8")
    assert result.estimate == table_lut_estimate(table) and result.input_bits == 8


def _with_unused_nodes(record: dict[str, Any], count: int = 3) -> dict[str, Any]:
    """``record`` with ``count`` LUTs that feed no output added, and its LUT count raised to match."""
    extra = "".join(f".names x0_0 x0_1 x1_0 unused_lut{i}\n1{i % 2}1 1\n" for i in range(count))
    return {**record, "blif": record["blif"].replace(".end", extra + ".end"), "luts": record["luts"] + count}


def test_added_unused_luts_are_refused(cached):
    """LUTs that feed no output (counted in the record too) are refused; the result is the fresh netlist."""
    table, path, record = cached
    path.write_text(json.dumps(_with_unused_nodes(record)))
    result = _remapped(table, path.parent, "3 node(s) that feed no output", "unused_lut0")
    assert "unused_lut" not in result.netlist.blif


def test_unused_luts_never_reach_the_mapped_hdl(tmp_path):
    """A network exported with mapped tables from a cache whose entries hold unused LUTs: none is written."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), iotable.nn.Quantize(2))
    net = iotable.precompute(model, input_domain=TWO, progress=False)
    folder = tmp_path / "cache"
    map_luts(net, abc=_abc(), cache_dir=folder, workers=1)
    files = sorted(folder.glob("*.json"))
    assert files
    for file in files:
        file.write_text(json.dumps(_with_unused_nodes(json.loads(file.read_text()))))
    with pytest.warns(IOTableWarning, match="feed no output"), concurrent.futures.ThreadPoolExecutor(1) as pool:
        design = iotable.hdl.export(net, tmp_path / "hdl", tables="mapped", cache_dir=folder, executor=pool)
    written = [p for p in (tmp_path / "hdl").rglob("*") if p.is_file()]
    assert written and design.sources
    assert not [p.name for p in written if "unused_lut" in p.read_text(errors="replace")]


# -- every field checked ---------------------------------------------------------------------------------------


FIELD_EDITS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], str]] = {
    "format": (lambda r: {**r, "format": 1}, "format is 1"),
    "script": (lambda r: {**r, "script": "strash; if -K 6"}, "script is 'strash; if -K 6'"),
    "abc_version": (lambda r: {**r, "abc_version": "ABC 0.1"}, "abc_version is 'ABC 0.1'"),
    "key": (lambda r: {**r, "key": "0" * 64}, "key is '000"),
    "output_bits": (lambda r: {**r, "output_bits": 4}, "output_bits is 4, expected 2"),
    "method": (lambda r: {**r, "method": "direct"}, "method is 'direct', expected 'abc'"),
    "luts": (lambda r: {**r, "luts": r["luts"] + 1}, "luts is"),
    "depth": (lambda r: {**r, "depth": r["depth"] + 5}, "depth is"),
    "netlist": (lambda r: {**r, "blif": r["blif"].replace(".names", ".latch", 1)}, ".latch is not supported"),
    "function": (lambda r: {**r, "blif": _flip_one_cube(r["blif"])}, "does not compute the table"),
    "wide lut": (lambda r: {**r, "blif": _wide_lut(r["blif"])}, "expected LUTs of at most 6 inputs"),
}


def _flip_one_cube(blif: str) -> str:
    lines = blif.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln[:1] in "01-" and " " in ln)
    cube, out = lines[at].split()
    lines[at] = ("1" if cube[0] == "0" else "0") + cube[1:] + " " + out
    return "\n".join(lines) + "\n"


def _wide_lut(blif: str) -> str:
    names = [f"x{j}_{b}" for j in range(4) for b in (1, 0)][:7]  # a node of 7 inputs, for k = 6
    return blif.replace(".end", f".names {' '.join(names)} spare\n{'1' * len(names)} 1\n.end")


@pytest.mark.parametrize("edit", list(FIELD_EDITS))
def test_every_field_is_checked(cached, edit):
    """An entry whose flow, key, bits, method, counts or netlist disagree with what it is read for is refused."""
    table, path, record = cached
    change, words = FIELD_EDITS[edit]
    path.write_text(json.dumps(change(record)))
    _remapped(table, path.parent, words)


def test_an_entry_under_another_name_is_refused(cached, tmp_path):
    """A valid entry of another table copied under this table's name is refused (its key is not this table's)."""
    table, path, _ = cached
    other = _table(7)
    map_luts([other], abc=_abc(), cache_dir=path.parent, workers=1)
    shutil.copyfile(_file(path.parent, other), path)
    _remapped(table, path.parent, "key is")


# -- adversarial files: never a raw exception, never a hang, never a whole read ------------------------------------


BAD_CONTENTS: dict[str, tuple[Callable[[dict[str, Any]], bytes], str]] = {
    "not json": (lambda r: b"{not json", "not valid JSON"),
    "empty": (lambda r: b"", "not valid JSON"),
    "truncated": (lambda r: json.dumps(r).encode()[: len(json.dumps(r)) // 2], "not valid JSON"),
    "not utf-8": (lambda r: b"\xff\xfe{}", "not valid JSON"),
    "a list": (lambda r: b"[1, 2]", "expected a JSON object"),
    "deep": (lambda r: b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
    "deep object": (lambda r: b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deep"),
    "missing key": (lambda r: json.dumps({f: v for f, v in r.items() if f != "key"}).encode(), "missing ['key']"),
    "missing all": (lambda r: b"{}", "fields missing"),
    "extra field": (lambda r: json.dumps({**r, "extra": 1}).encode(), "unknown ['extra']"),
    "k a string": (lambda r: json.dumps({**r, "k": "6"}).encode(), "k is '6', expected a non-negative integer"),
    "k a bool": (lambda r: json.dumps({**r, "k": True}).encode(), "k is True"),
    "k a float": (lambda r: json.dumps({**r, "k": 6.0}).encode(), "k is 6.0"),
    "luts negative": (lambda r: json.dumps({**r, "luts": -1}).encode(), "luts is -1"),
    "huge int": (lambda r: json.dumps(r).replace('"k": 6', '"k": ' + "9" * 5000).encode(), "not valid JSON"),
    "blif a list": (lambda r: json.dumps({**r, "blif": ["x"]}).encode(), "blif is a JSON array"),
    "key null": (lambda r: json.dumps({**r, "key": None}).encode(), "key is None"),
    "seconds nan": (lambda r: json.dumps({**r, "seconds": 0.5}).replace("0.5", "NaN").encode(), "NaN"),
    "seconds inf": (lambda r: json.dumps({**r, "seconds": 0.5}).replace("0.5", "1e999").encode(), "seconds is inf"),
    "duplicate key": (lambda r: json.dumps(r).replace('"k": 6', '"k": 6, "k": 6').encode(), "appears twice"),
}


@pytest.mark.parametrize("case", list(BAD_CONTENTS))
def test_a_malformed_entry_is_mapped_again(cached, case):
    """Bad JSON, missing fields, wrong types, deep nesting: a warning naming the reason, never a raw exception."""
    table, path, record = cached
    content, words = BAD_CONTENTS[case]
    path.write_bytes(content(record))
    _remapped(table, path.parent, words)


def test_a_link_to_dev_zero_is_not_read(cached):
    """An entry that is a symbolic link (to /dev/zero here) is refused without reading it, and replaced."""
    table, path, _ = cached
    path.unlink()
    path.symlink_to("/dev/zero")
    _remapped(table, path.parent, "symbolic link")


def test_a_link_to_a_valid_entry_is_replaced_not_followed(cached, tmp_path):
    """A link to a valid entry elsewhere is refused too; the link is replaced, its target left as it was."""
    table, path, _ = cached
    target = tmp_path / "elsewhere.json"
    path.rename(target)
    before = target.read_bytes()
    path.symlink_to(target)
    _remapped(table, path.parent, "symbolic link")
    assert target.read_bytes() == before and not path.is_symlink()


def test_a_dangling_link_is_replaced(cached, tmp_path):
    """A link to nothing is an entry that cannot be read: mapped again, replaced."""
    table, path, _ = cached
    path.unlink()
    path.symlink_to(tmp_path / "nothing")
    _remapped(table, path.parent, "symbolic link")


def test_a_3_gib_sparse_file_is_not_read(cached):
    """A file larger than the cap is refused from its size alone (a 3 GiB sparse file, never read)."""
    table, path, _ = cached
    path.unlink()
    subprocess.run(["truncate", "-s", "3G", str(path)], check=True)
    assert path.stat().st_size == 3 * 2**30 > MAX_RECORD_BYTES
    _remapped(table, path.parent, f"holds {3 * 2**30} bytes", str(MAX_RECORD_BYTES))


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail the test (instead of hanging) if it runs for more than 60 s."""

    def expire(signum: int, frame: Any) -> None:
        raise AssertionError("the call blocked for 60 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_does_not_hang(cached, deadline):
    """An entry that is a FIFO with no writer is opened without blocking, refused and replaced."""
    table, path, _ = cached
    path.unlink()
    os.mkfifo(path)
    _remapped(table, path.parent, "not a regular file")


def test_a_folder_at_the_entry_name_is_refused_by_name(cached):
    """A folder where the entry should be is refused (warned) and cannot be replaced: a CacheError names it."""
    table, path, _ = cached
    path.unlink()
    path.mkdir()
    with pytest.warns(IOTableWarning, match="not a regular file"), pytest.raises(CacheError, match=path.name):
        map_luts([table], abc=_abc(), cache_dir=path.parent, workers=1)


# -- mapping jobs: the real error, and Ctrl-C ---------------------------------------------------------------------


def _failing(exc: BaseException) -> Callable[[Any], Any]:
    def run_job(job: Any) -> Any:
        raise exc

    return run_job


def test_a_worker_failure_surfaces_the_real_error(monkeypatch):
    """A job failing outside iotable in an executor is a SynthError carrying the worker's own error (not an
    AttributeError about concurrent.futures.process, which is not imported by ``import concurrent.futures``)."""
    _abc()
    monkeypatch.delattr(concurrent.futures, "process", raising=False)
    error = OSError(28, "No space left on device")
    monkeypatch.setattr(iotable.synth.jobs, "run_job", _failing(error))
    with concurrent.futures.ThreadPoolExecutor(1) as pool, pytest.raises(SynthError) as info:
        map_luts([_table(3)], abc=_abc(), executor=pool)
    assert "mapping failed in the executor (OSError: [Errno 28] No space left on device)" in str(info.value)
    assert info.value.__cause__ is error


class _BrokenExecutor(concurrent.futures.Executor):
    """An executor whose every job fails as a process pool's does when its workers die."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
        return future


def test_a_broken_process_pool_says_how_to_fix_it(monkeypatch):
    """A dead pool is a SynthError that names the spawn guard, whatever was imported before."""
    _abc()
    monkeypatch.delattr(concurrent.futures, "process", raising=False)
    with pytest.raises(SynthError, match=r"terminated abruptly.*if __name__ == '__main__'"):
        map_luts([_table(3)], abc=_abc(), executor=_BrokenExecutor())


@pytest.mark.parametrize("where", ["in this process", "in an executor"])
def test_keyboard_interrupt_propagates(monkeypatch, where):
    """Ctrl-C during mapping is a KeyboardInterrupt, here or raised by a job in an executor: never wrapped."""
    _abc()
    monkeypatch.delattr(concurrent.futures, "process", raising=False)
    monkeypatch.setattr(iotable.synth.jobs, "run_job", _failing(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        if where == "in this process":
            map_luts([_table(3)], abc=_abc(), workers=1)
        else:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                map_luts([_table(3)], abc=_abc(), executor=pool)


# -- the ABC script: an allow-list, no file names ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("&w /tmp/x", "'/'"),
        ("strash; &w /tmp/x; if -K {k}", "'/'"),
        ("strash; &w out.aig; if -K {k}", "'&w' is not one of the ABC commands"),
        ("&w 6", "'&w' is not one of the ABC commands"),
        ("&write x", "'&write' is not one of"),
        ("write_blif /x", "'/'"),
        ("strash; write_blif x.blif", "reads, writes or leaves ABC"),
        ("write_verilog x", "'write_verilog' is not one of"),
        ("read_blif table0.blif", "'read_blif' is not one of"),
        ("source x", "'source' is not one of"),
        ("strash; source abc.rc", "'source' is not one of"),
        ("strash;source x", "'source' is not one of"),
        ("strash;;if -K {k}", "empty command"),
        ("strash; if -K {k}\nwrite_blif x", "'\\n'"),
        ("strash; if -K {k} x.blif", "the argument 'x.blif' of 'if'"),
        ("if -K {k} ../x", "'/'"),
        ('strash; "write_blif" x', "'\"'"),
        ("strash # ; write_blif x", "'#'"),
        ("alias st strash; st", "'alias' is not one of"),
        ("quit", "'quit' is not one of"),
        ("strash; if -K {k} -Z $HOME", "'$'"),
        ("strash | write", "'|'"),
        ("strash > x", "'>'"),
        ("strash\tif", "'\\t'"),
        ("version; strash", "'version' is not one of"),
        ("time; strash", "'time' is not one of"),
        ("show", "'show' is not one of"),
    ],
)
def test_scripts_that_may_touch_files_are_refused(script, words):
    """A script of commands outside the allow-list, or with an argument that is no option or number, is refused."""
    with pytest.raises(SynthError, match="script") as info:
        map_table(_table(0), script=script)
    assert words in str(info.value)


def test_allowed_scripts_map_and_write_nothing_outside(tmp_path, monkeypatch):
    """Scripts of allowed commands (classic and & flows, options, numbers) map correctly, from a clean folder."""
    monkeypatch.chdir(tmp_path)
    table = _table(4)
    for script in (None, "strash; dch -f; if -K {k} -a", "&get -n; &st; &if -K {k}; &put", "balance; if -K 6"):
        mapped = map_table(table, script=script, abc=_abc())
        assert mapped.script == resolve_script(script, 6, what="test") and mapped.luts > 0
    assert list(tmp_path.iterdir()) == []
    assert resolve_script(None, 4, what="test") == DEFAULT_SCRIPT.replace("{k}", "4")


def test_every_allowed_command_is_one_abc_knows():
    """The allow-list names commands of the installed ABC (none is an alias of an abc.rc)."""
    program = shutil.which(_abc())
    assert program is not None
    for command in sorted(SCRIPT_COMMANDS):
        done = subprocess.run([program, "-c", f"{command} -h"], capture_output=True, text=True, timeout=30)
        assert "unknown command" not in done.stdout + done.stderr, command


# -- entries another user could have written ---------------------------------------------------------------------


def test_an_entry_others_may_write_is_mapped_again(cached):
    """A valid entry with mode 0o666 (anyone could have written it) is refused, mapped again and replaced."""
    table, path, _ = cached
    os.chmod(path, 0o666)
    _remapped(table, path.parent, "writable by other users")
    assert not os.lstat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def test_an_entry_of_another_user_is_mapped_again(cached, monkeypatch):
    """A valid entry owned by another user (as the reader sees it) is refused, mapped again and replaced."""
    table, path, _ = cached
    uid = os.lstat(path).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.warns(IOTableWarning, match="owned by user"):
        report = map_luts([table], abc=_abc(), cache_dir=path.parent, workers=1)
    assert report.mapped == 1 and not report.tables[0].cached
