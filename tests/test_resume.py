"""Resumable precompute (cache_dir) and tables larger than the memory budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from iotable import Domain, decompose, precompute
from iotable.nn import Quantize

U2 = Domain.uniform(2, scale=0.5)


def model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv1d(4, 4, 3, groups=4, padding=1),
        Quantize(2, scale=0.5),
        nn.Conv1d(4, 4, 2, groups=2),
        nn.ReLU(),
        Quantize(2, scale=0.5),
    ).eval()


def test_rerun_loads_every_table_from_the_cache(tmp_path):
    """A second precompute with the same cache_dir computes nothing and gives identical tables."""
    first = precompute(model(), input_domain=U2, example_input=torch.zeros(1, 4, 6), cache_dir=tmp_path)
    assert all(layer.cached == () for layer in first.layers.values())
    files = sorted(tmp_path.glob("*.npy"))
    assert len(files) == len(first.tables)
    second = precompute(model(), input_domain=U2, example_input=torch.zeros(1, 4, 6), cache_dir=tmp_path)
    for name, layer in second.layers.items():
        assert layer.cached == tuple(range(len(layer.tables))), name
    assert second.tables == first.tables
    fresh = precompute(model(), input_domain=U2, example_input=torch.zeros(1, 4, 6))
    assert fresh.tables == second.tables


def test_changing_one_layer_recomputes_exactly_that_layer(tmp_path):
    """New weights in one layer change that layer's keys only."""
    precompute(model(), input_domain=U2, example_input=torch.zeros(1, 4, 6), cache_dir=tmp_path)
    changed = model()
    with torch.no_grad():
        changed[2].weight.mul_(-1)
    net = precompute(changed, input_domain=U2, example_input=torch.zeros(1, 4, 6), cache_dir=tmp_path)
    assert net["0"].cached == (0, 1, 2, 3)
    assert net["2"].cached == ()
    assert net.tables == precompute(changed, input_domain=U2, example_input=torch.zeros(1, 4, 6)).tables


def test_corrupt_cache_entry_is_recomputed(tmp_path):
    """A cache file that is truncated or of the wrong shape is recomputed, not trusted."""
    conv = decompose(nn.Conv1d(2, 2, 3, groups=2), groups=2)
    precompute(conv, input_domain=U2, cache_dir=tmp_path)
    victim = sorted(tmp_path.glob("*.npy"))[0]
    victim.write_bytes(victim.read_bytes()[:-7])
    again = precompute(conv, input_domain=U2, cache_dir=tmp_path)
    assert len(again.cached) == 1 and again.tables == precompute(conv, input_domain=U2).tables


def test_cache_dir_that_is_a_file_is_an_error(tmp_path):
    """A cache_dir that names a file is a clear error before any work."""
    target = tmp_path / "file"
    target.write_text("x")
    from iotable import IOTableError

    with pytest.raises(IOTableError, match="exists and is not a directory"):
        precompute(nn.Linear(2, 1), input_domain=U2, cache_dir=target)


SLOW_SCRIPT = """
import sys, time
import torch
from torch import nn
import iotable
from iotable.nn import Quantize


@iotable.decompose(groups=4)
class Slow(nn.Module):
    # A per-channel function that takes a while, so that the run can be killed part-way.
    def __init__(self, k):
        super().__init__()
        self.k = nn.Parameter(torch.tensor(float(k)))

    def forward(self, x):
        time.sleep(0.4)
        return torch.tanh(self.k * x)


torch.manual_seed(0)
layers = []
for k in range(6):
    layers += [Slow(k + 1), Quantize(2, signed=True, scale=0.25)]
model = nn.Sequential(*layers).eval()
net = iotable.precompute(
    model, input_domain=iotable.Domain.uniform(2, signed=True), example_input=torch.zeros(1, 4), cache_dir=sys.argv[1]
)
print("cached", sum(len(layer.cached) for layer in net.layers.values()))
"""


@pytest.mark.slow  # test_no_part_file_survives_a_resume_after_kill_minus_nine kills a run in the quick tier
def test_kill_minus_nine_then_resume(tmp_path):
    """A precompute killed with SIGKILL part-way resumes: finished tables are kept, the rest computed."""
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent(SLOW_SCRIPT))
    cache = tmp_path / "cache"
    process = subprocess.Popen([sys.executable, str(script), str(cache)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(cache.glob("*.npy"))) < 8:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.glob("*.npy")}
    assert 8 <= len(finished) < 24, "the run should have been killed part-way"
    rerun = subprocess.run([sys.executable, str(script), str(cache)], capture_output=True, text=True, check=True)
    assert rerun.stdout.strip() == f"cached {len(finished)}"
    for name, stamp in finished.items():  # not recomputed: the very same files
        path = cache / name
        assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp
    assert len(list(cache.glob("*.npy"))) == 24
    assert not list(cache.glob("*.part"))  # nothing half-written is left behind once the rerun is done


MEMORY_SCRIPT = """
import sys
import numpy as np
import torch
import iotable

def status_kib(field):
    # /proc/self/status, not getrusage: ru_maxrss survives exec and so starts at the parent's size
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

budget = int(sys.argv[1])
layer = torch.nn.Linear(24, 2)  # two units (one per output): 2 x 2**24 rows x float32 = 128 MiB
with torch.no_grad():  # multiples of 1/8: sums are exact whatever the batch, so rows compare exactly
    layer.weight.copy_(torch.randint(-8, 9, layer.weight.shape) / 8)
    layer.bias.copy_(torch.randint(-8, 9, layer.bias.shape) / 8)
iotable.precompute(torch.nn.Linear(2, 1), input_domain=iotable.Domain.uniform(1))  # warm up torch
before = status_kib("VmRSS")
result = iotable.precompute(layer, input_domain=iotable.Domain.uniform(1), memory_budget=budget, check=False)
peak = status_kib("VmHWM")
probe = [t.lookup([[1] * 24, [0] * 24])[:, 0] for t in result.tables]
expected = layer(torch.tensor([[1.0] * 24, [0.0] * 24])).detach().numpy()
assert (np.stack(probe, axis=1) == expected).all(), (probe, expected)
print(before, peak, sum(t.outputs.nbytes for t in result.tables))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_table_larger_than_budget_stays_within_budget(tmp_path):
    """A 128 MiB table built under a 4 MiB budget raises peak memory by far less than the table."""
    script = tmp_path / "memory.py"
    script.write_text(textwrap.dedent(MEMORY_SCRIPT))
    budget = 4 * 2**20
    out = subprocess.run([sys.executable, str(script), str(budget)], capture_output=True, text=True, check=True)
    before, peak, table_bytes = (int(v) for v in out.stdout.split())
    grew = (peak - before) * 1024
    assert table_bytes == 2 * 2**24 * 4
    overhead = 48 * 2**20  # interpreter, torch kernels and allocator slack, independent of the table size
    assert grew < budget + overhead < table_bytes, f"peak grew by {grew / 2**20:.1f} MiB"


def test_large_table_is_memory_mapped_and_equal_to_in_memory():
    """Above the budget, tables are memory-mapped files with the same rows as in memory."""
    # Quantized outputs: float matrix products may round differently for different batch sizes, so raw
    # float rows of two enumerations with different chunking could differ in the last bit.
    layer = decompose(nn.Sequential(nn.Linear(10, 1), Quantize(3, signed=True, scale=0.25)))
    small = precompute(layer, input_domain=Domain.uniform(1), memory_budget=512, check=False)
    large = precompute(layer, input_domain=Domain.uniform(1))
    assert isinstance(small.tables[0].outputs, np.memmap) and not isinstance(large.tables[0].outputs, np.memmap)
    assert small.tables == large.tables
    assert os.name != "posix" or not Path(small.tables[0].outputs.filename).exists()


# -- cache integrity ------------------------------------------------------------------------------------------


def depthwise() -> nn.Module:
    torch.manual_seed(3)
    return decompose(nn.Sequential(nn.Conv1d(3, 3, 3, groups=3), Quantize(2, scale=0.5)).eval(), groups=3)


def cached_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("[!.]*.npy"))


def test_cache_entry_with_a_changed_byte_is_recomputed(tmp_path):
    """A cache entry with one data byte changed fails its checksum and is recomputed, not reused."""
    fresh = precompute(depthwise(), input_domain=U2)  # in memory: the cache's files are edited below
    precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    victim = cached_files(tmp_path)[1]
    data = bytearray(victim.read_bytes())
    data[128 + 10] = (data[128 + 10] + 1) % 4  # row 10's code, after the 128-byte header: another valid code
    victim.write_bytes(bytes(data))
    again = precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    assert len(again.cached) == 2 and again.tables == fresh.tables
    assert precompute(depthwise(), input_domain=U2, cache_dir=tmp_path).cached == (0, 1, 2)  # replaced


def test_swapped_cache_entries_are_recomputed(tmp_path):
    """Two cached tables of the same shape swapped on disk are both recomputed: each checksum covers its key."""
    fresh = precompute(depthwise(), input_domain=U2)
    precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    a, b = cached_files(tmp_path)[:2]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    assert len(data_a) == len(data_b) and data_a != data_b
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    again = precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    assert len(again.cached) == 1 and again.tables == fresh.tables


def test_cache_entry_with_codes_outside_the_domain_is_recomputed(tmp_path):
    """A well-formed, checksummed entry holding code 255 of a 4-code domain is recomputed, and the result runs."""
    from iotable.tabulate.cache import TableCache

    fresh = precompute(depthwise(), input_domain=U2)
    precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    key = cached_files(tmp_path)[0].stem
    sink = TableCache(tmp_path).sink(key, 64, 1, np.dtype(np.uint8))
    sink.write(0, np.full((64, 1), 255, np.uint8))
    sink.finish()  # a valid entry, checksum and all, of codes the layer's domain does not have
    again = precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    assert len(again.cached) == 2 and again.tables == fresh.tables
    assert all(int(t.outputs.max()) < 4 for t in again.tables)


def test_stale_part_files_go_when_the_cache_opens_and_live_ones_stay(tmp_path):
    """A .part file no process holds is removed when the cache is opened; one still being written is kept."""
    from iotable.tabulate.cache import TableCache

    cache = TableCache(tmp_path)
    stale = tmp_path / ".0123.npy.abcd.part"
    stale.write_bytes(b"half a table")
    live = cache.sink("4567", 4, 1, np.dtype(np.uint8))
    opened = TableCache(tmp_path)
    assert opened.removed == 1 and not stale.exists() and Path(live.tmp).exists()
    live.abandon()
    assert not list(tmp_path.glob(".*.part"))


def fail_with(code: int):
    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return failing


def test_full_disk_while_caching_is_a_cache_error_and_leaves_no_part_file(tmp_path, monkeypatch):
    """A full disk while a cache entry is written raises CacheError naming the file and the fix; no .part stays."""
    import errno

    from iotable.errors import CacheError
    from iotable.tabulate.cache import TableCache

    TableCache(tmp_path)  # the folder's secret key, written before the disk fills
    monkeypatch.setattr("iotable.tabulate.cache.os.fsync", fail_with(errno.ENOSPC))
    with pytest.raises(CacheError, match=r"cannot write '.*\.part': No space left on device; free space on that disk"):
        precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_full_temporary_disk_is_a_cache_error_and_leaves_nothing(tmp_path, monkeypatch):
    """A full temporary directory while a large table is written raises CacheError with the fix; nothing stays."""
    import errno
    import tempfile

    from iotable.errors import CacheError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr("iotable.tabulate.cache.os.fsync", fail_with(errno.ENOSPC))
    layer = decompose(nn.Sequential(nn.Linear(10, 1), Quantize(3, signed=True, scale=0.25)))
    with pytest.raises(CacheError, match=r"No space left on device; .*point TMPDIR at a folder with room"):
        precompute(layer, input_domain=Domain.uniform(1), memory_budget=512, check=False)
    assert not list(tmp_path.iterdir())


def test_unwritable_cache_folder_is_a_cache_error(tmp_path, monkeypatch):
    """No permission to create a table file is a CacheError naming the folder and the fix."""
    import errno

    from iotable.errors import CacheError
    from iotable.tabulate.cache import TableCache

    TableCache(tmp_path)  # the folder's secret key, written before permission goes
    monkeypatch.setattr("iotable.tabulate.cache.tempfile.mkstemp", fail_with(errno.EACCES))
    with pytest.raises(CacheError, match=r"cannot create a table file in '.*': Permission denied; make it writable"):
        precompute(depthwise(), input_domain=U2, cache_dir=tmp_path)


PART_SCRIPT = """
import os, sys, time
import numpy as np
import torch
from torch import nn
import iotable
from iotable.tabulate import cache as _store
from iotable.nn import Quantize

write = _store.FileSink.write


def stalled(self, start, data):
    write(self, start, data)
    open(sys.argv[2], "w").close()  # a .part file exists and is being written: tell the test, then hang
    time.sleep(600)


if len(sys.argv) > 3:
    _store.FileSink.write = stalled
torch.manual_seed(3)
model = iotable.decompose(nn.Sequential(nn.Conv1d(3, 3, 3, groups=3), Quantize(2, scale=0.5)).eval(), groups=3)
layer = iotable.precompute(model, input_domain=iotable.Domain.uniform(2, scale=0.5), cache_dir=sys.argv[1])
print(len(layer.cached), int(sum(int(t.outputs.sum()) for t in layer.tables)))
"""


def test_no_part_file_survives_a_resume_after_kill_minus_nine(tmp_path):
    """A run killed while a .part file is open leaves it; the resumed run removes it and finishes correctly."""
    script = tmp_path / "part.py"
    script.write_text(textwrap.dedent(PART_SCRIPT))
    cache, marker = tmp_path / "cache", tmp_path / "marker"
    process = subprocess.Popen([sys.executable, str(script), str(cache), str(marker), "stall"])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the run never started writing a table"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    assert list(cache.glob(".*.part")), "the killed run should have left its .part file"
    resumed = subprocess.run(
        [sys.executable, str(script), str(cache), str(marker)], capture_output=True, text=True, check=True, timeout=300
    )
    fresh = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "fresh"), str(marker)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert resumed.stdout.split()[1] == fresh.stdout.split()[1]
    assert not list(cache.glob("*.part")) and not list(cache.glob(".*.part"))
