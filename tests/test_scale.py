"""Wide layers and rows near rounding boundaries: every pass of the fast path within the memory budget, and
rows within float rounding of a boundary computed by the layer's own operations on the units they belong to."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

import iotable.tabulate.fastpath as fastpath
import iotable.tabulate.recognition as recognition
from iotable import Domain, decompose, precompute
from iotable.nn import Quantize

S2 = Domain.uniform(2, signed=True, scale=0.5)

# A 2**24-row table whose sums are exact and land on rounding boundaries (weights in steps of 1/8 over inputs in
# steps of 1/2, a quantizer of step 1/8): about 4.3M near ties, under a 4 MiB budget. The peak of anonymous
# memory (arrays, tensors) is sampled every half millisecond; the table goes to a memory-mapped file.
TIES_SCRIPT = """
import sys, threading, time
import numpy as np, torch
from torch import nn
import iotable
from iotable.nn import Quantize

def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

torch.set_num_threads(1)
budget = int(sys.argv[1])
gen = torch.Generator().manual_seed(0)
linear = nn.Linear(12, 1)
with torch.no_grad():
    linear.weight.copy_(torch.randint(-8, 9, (1, 12), generator=gen) / 8)
    linear.bias.zero_()
block = iotable.decompose(nn.Sequential(linear, Quantize(4, signed=True, scale=0.125)))
domain = iotable.Domain.uniform(2, signed=True, scale=0.5)
iotable.precompute(nn.Sequential(nn.Linear(2, 1), Quantize(2)), input_domain=domain)  # warm up torch and iotable
peak = [0]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], anon_kib())
        time.sleep(0.0005)
before = anon_kib()
thread = threading.Thread(target=sample, daemon=True)
thread.start()
result = iotable.precompute(block, input_domain=domain, memory_budget=budget)
stop.set()
thread.join()
peak[0] = max(peak[0], anon_kib())
table = result.tables[0].outputs
# Every row against the module itself, in chunks (the sums are exact: no batch can round them otherwise).
codes = np.arange(2**24, dtype=np.int64)[:, None] // 4 ** np.arange(11, -1, -1) % 4
values = torch.tensor(domain.values, dtype=torch.float32)
wrong = 0
with torch.inference_mode():
    for start in range(0, 2**24, 2**20):
        x = values[torch.from_numpy(codes[start : start + 2**20])]
        expected = Quantize(4, signed=True, scale=0.125).domain.encode(block(x).numpy())
        wrong += int((np.asarray(table[start : start + 2**20]) != expected).sum())
print((peak[0] - before) * 1024, table.nbytes, result.near_ties, wrong, type(table).__name__)
"""


@pytest.mark.slow  # tabulates a 2^24-row layer in a subprocess
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_near_ties_stay_within_the_memory_budget(tmp_path):
    """4.3M near-tie rows of a 2**24-row table under a 4 MiB budget: peak within the budget plus the table, exact."""
    script = tmp_path / "ties.py"
    script.write_text(textwrap.dedent(TIES_SCRIPT))
    budget = 4 * 2**20
    done = subprocess.run(
        [sys.executable, str(script), str(budget)], capture_output=True, text=True, check=True, timeout=600
    )
    grew, table_bytes, near_ties, wrong, kind = done.stdout.split()
    assert int(near_ties) > 4 * 10**6 and int(wrong) == 0 and kind == "memmap"
    assert int(grew) <= int(table_bytes) + budget, f"peak grew by {int(grew) / 2**20:.1f} MiB"


def wide_layer(units: int, n_in: int, *, seed: int, tail: list[nn.Module] | None = None) -> nn.Module:
    """A pruned Linear of ``units`` outputs reading 3 inputs each, weights in steps of 1/4 (many exact ties)."""
    gen = torch.Generator().manual_seed(seed)
    linear = nn.Linear(n_in, units)
    fan_in = torch.argsort(torch.rand(units, n_in, generator=gen), dim=1)[:, :3].sort(dim=1).values.tolist()
    with torch.no_grad():
        linear.weight.copy_(torch.randint(-4, 5, linear.weight.shape, generator=gen) / 4)
        linear.bias.copy_(torch.randint(-4, 5, linear.bias.shape, generator=gen) / 8)
    mask = torch.zeros(units, n_in)
    for k, inputs in enumerate(fan_in):
        mask[k, inputs] = 1
    prune.custom_from_mask(linear, "weight", mask)
    modules = tail if tail is not None else [Quantize(3, signed=True, scale=0.25)]
    return decompose(nn.Sequential(linear, *modules), fan_in=fan_in).eval()


@pytest.mark.parametrize("budget", [256 * 2**20, 2**16], ids=["default-budget", "64-KiB-budget"])
def test_ties_of_a_wide_layer_equal_the_black_box(budget):
    """Ties spread over 300 units (chunks of channels), under a roomy and a tiny budget: the black box's tables."""
    block = wide_layer(300, 40, seed=1)
    fast = precompute(block, input_domain=S2, memory_budget=budget)
    slow = precompute(block, input_domain=S2, fast_path=False)
    assert fast.method == "linear fast path" and fast.near_ties > 300
    assert fast.tables == slow.tables


def test_tie_rows_compute_only_the_units_they_need(monkeypatch):
    """A tie row runs the head on its own units' weight rows (a few of them), never the whole layer."""
    block = wide_layer(200, 30, seed=2)
    widths = []
    real = fastpath.FastPath.head_weight

    def head_weight(self, channels):
        widths.append(len(channels))
        return real(self, channels)

    monkeypatch.setattr(fastpath.FastPath, "head_weight", head_weight)
    fast = precompute(block, input_domain=S2)
    assert fast.near_ties > 0 and widths and max(widths) <= recognition._TIE_CHANNELS < 200
    monkeypatch.undo()
    assert fast.tables == precompute(block, input_domain=S2, fast_path=False).tables


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_convolution_ties_on_selected_groups(groups):
    """Convolution ties evaluated on the groups of the channels they need give the black box's tables."""
    conv = nn.Conv2d(4, 4, 2, groups=groups, padding=1)  # at most 4 channels x 2x2 x 1 bit: 2**16 rows
    gen = torch.Generator().manual_seed(groups)
    with torch.no_grad():
        conv.weight.copy_(torch.randint(-4, 5, conv.weight.shape, generator=gen) / 4)
        conv.bias.fill_(0.125)  # every sum an odd multiple of 1/8: on a boundary of the quantizer's steps of 1/4
    block = decompose(nn.Sequential(conv, nn.ReLU(), Quantize(2, scale=0.25)).eval())
    example = torch.zeros(1, 4, 4, 4)
    fast = precompute(block, input_domain=Domain.uniform(1), example_input=example)
    slow = precompute(block, input_domain=Domain.uniform(1), example_input=example, fast_path=False)
    assert fast.method == "conv fast path" and fast.near_ties > 0
    assert fast.tables == slow.tables


def test_layers_of_a_model_share_their_analysis():
    """Layers with equal tails and input domains are analysed and tabulated in shared batches, bit for bit."""
    layers = []
    for k in range(3):
        block = wide_layer(8, 8, seed=10 + k, tail=[nn.BatchNorm1d(8), nn.ReLU(), Quantize(3, scale=0.25)])
        block[1].running_mean.uniform_(-0.5, 0.5)
        block[1].running_var.uniform_(0.5, 2)
        decompose(block[0], fan_in=[list(u) for u in iotable_fan_in(block)])
        layers += list(block)
    model = nn.Sequential(*layers).eval()
    u3 = Domain.uniform(3, scale=0.25)
    calls = []
    real = fastpath._analyse_tails
    fastpath._analyse_tails = lambda parts, **k: calls.append(len(parts)) or real(parts, **k)
    try:
        net = precompute(model, input_domain=u3, example_input=torch.zeros(1, 8))
    finally:
        fastpath._analyse_tails = real
    assert calls == [3]  # one batch of three layers
    for name, layer in net.layers.items():
        block = model[int(name) : int(name) + 4]
        alone = precompute(decompose(nn.Sequential(*block), fan_in=iotable_fan_in(block)), input_domain=u3)
        slow = precompute(
            decompose(nn.Sequential(*block), fan_in=iotable_fan_in(block)), input_domain=u3, fast_path=False
        )
        assert layer.tables == alone.tables == slow.tables


def iotable_fan_in(block):
    from iotable import spec_of

    return [list(unit) for unit in spec_of(block[0] if spec_of(block[0]).fan_in else block).fan_in]
