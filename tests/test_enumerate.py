"""Exhaustive reference tests: every row of every unit table equals the module's own output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import prune

import iotable
import iotable.tabulate.forward as forward_module
import iotable.tabulate.passes as passes_module
from iotable import Domain, decompose, precompute
from iotable.nn import Quantize
from iotable.tabulate.passes import _classes, _colours, _Packed, _passes

from .conftest import dyadic_
from .oracle import assert_tables_match

D1 = Domain.uniform(1)
D2 = Domain.uniform(2)
S2 = Domain.uniform(2, signed=True)


def test_seed_depthwise_conv1d():
    """The seed example: 3 tables of 64 rows, 3 inputs and 1 output; (2,2,2)->6, (1,1,1)->3, (3,3,3)->9."""
    conv = nn.Conv1d(3, 3, kernel_size=3, groups=3, bias=False)
    nn.init.ones_(conv.weight)
    result = precompute(decompose(conv, groups=3), input_domain=D2)
    assert len(result.tables) == 3
    for table in result.tables:
        assert (table.rows, table.fan_in, table.fan_out) == (64, 3, 1)
        assert table.lookup([[2, 2, 2], [1, 1, 1], [3, 3, 3]]).tolist() == [[6.0], [3.0], [9.0]]
        rows = dict(table)
        assert rows[(2, 2, 2)] == (6.0,) and rows[(1, 1, 1)] == (3.0,) and rows[(3, 3, 3)] == (9.0,)
    assert_tables_match(result, conv, domain=D2, in_shape=(3, 5), positions=((0,), (2,)))


def test_linear_full_fan_in():
    """nn.Linear needs no decoration: one unit per output reading every input."""
    lin = dyadic_(nn.Linear(3, 2))
    result = precompute(lin, input_domain=D2)
    assert [u.in_channels for u in result.plan.units] == [(0, 1, 2), (0, 1, 2)]
    assert_tables_match(result, lin, domain=D2, in_shape=(3,))


def test_linear_sparse_fan_in_pruned_then_fused():
    """A pruned Linear + BatchNorm + Quantize with sparse fan_in gives exact code tables."""
    fan_in = [[0, 1, 2], [2, 3, 4], [4, 5, 0], [1, 3, 5]]
    lin = dyadic_(nn.Linear(6, 4))
    mask = torch.zeros(4, 6)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(lin, "weight", mask)
    block = decompose(dyadic_(nn.Sequential(lin, nn.BatchNorm1d(4), Quantize(2, scale=0.5))), fan_in=fan_in)
    result = precompute(block, input_domain=D2)
    assert result.plan.output_domain == Domain.uniform(2, scale=0.5)
    assert all(t.outputs.dtype == np.uint8 for t in result.tables)
    assert_tables_match(result, block, domain=D2, in_shape=(6,))


@pytest.mark.parametrize(
    ("conv", "domain", "positions"),
    [
        (nn.Conv1d(4, 4, 3, groups=2), D2, ((1,), (3,))),
        (nn.Conv1d(4, 4, 3, groups=4, stride=2), D2, ((0,), (2,))),
        (nn.Conv1d(2, 4, 2, groups=2, dilation=2), S2, ((0,), (3,))),
        (nn.Conv1d(2, 2, 3, groups=2, padding=1, stride=2), S2, ((1,), (2,))),
        (nn.Conv1d(2, 3, 2, padding=1), S2, ((1,), (4,))),
        (nn.Conv1d(2, 2, 3, groups=2, padding="same", dilation=2), D1, ((2,), (3,))),
    ],
    ids=["groups", "depthwise-stride2", "depthwise-mult2-dilation2", "pad1-stride2-signed", "dense-pad", "same"],
)
def test_conv1d_builtin(conv, domain, positions):
    """Conv1d with groups, depthwise, stride, dilation and padding: built-in rule, one unit per out channel."""
    conv = dyadic_(conv)
    result = precompute(conv, input_domain=domain)
    assert len(result.tables) == conv.out_channels
    assert_tables_match(result, conv, domain=domain, in_shape=(conv.in_channels, 9), positions=positions)


@pytest.mark.parametrize(
    ("conv", "domain", "positions"),
    [
        (nn.Conv2d(2, 2, 2, groups=2), D2, ((0, 0), (2, 3))),
        (nn.Conv2d(3, 3, 3, groups=3, stride=2, padding=1), D1, ((1, 1), (2, 1))),
        (nn.Conv2d(2, 2, (2, 3), groups=2, dilation=2), S2, ((0, 0), (1, 1))),
        (nn.Conv2d(4, 2, 1, groups=2), D2, ((0, 0), (3, 2))),
    ],
    ids=["depthwise-2x2", "depthwise-stride2-pad1", "dilation2-rect", "pointwise-groups"],
)
def test_conv2d_builtin(conv, domain, positions):
    """Conv2d with depthwise, stride 2, padding, dilation 2, rectangular and 1x1 kernels."""
    conv = dyadic_(conv)
    result = precompute(conv, input_domain=domain)
    assert_tables_match(result, conv, domain=domain, in_shape=(conv.in_channels, 6, 6), positions=positions)


class ChannelsLast(nn.Module):
    """A convolution that takes and returns channels-last tensors (NWC or NHWC)."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        moved = torch.movedim(x, -1, 1)
        return torch.movedim(torch.tanh(self.conv(moved)), 1, -1)


@pytest.mark.parametrize("rank", [1, 2])
def test_channels_last_layout(rank):
    """A channels-last module declared with layout= gives tables in (kernel position, channel) input order."""
    conv_type = nn.Conv1d if rank == 1 else nn.Conv2d
    conv = dyadic_(conv_type(4, 2, 2, groups=2, stride=2, padding=1))
    module = decompose(
        ChannelsLast(conv), layout="NWC" if rank == 1 else "NHWC", groups=2, kernel_size=2, stride=2, padding=1
    )
    shape = (5, 4) if rank == 1 else (5, 5, 4)
    example = torch.zeros(1, *shape)
    result = precompute(module, input_domain=D1, example_input=example)
    assert result.plan.layout.channels_last
    positions = ((1,), (2,)) if rank == 1 else ((1, 1), (2, 1))
    assert_tables_match(result, module, domain=D1, in_shape=shape, layout=result.plan.layout.value, positions=positions)
    # The order is (kernel position, channel): in a 1-D group of channels (0, 1), input 1 is channel 1 at tap 0.
    assert result.tables[0].fan_in == 2 * 2**rank


def test_decorated_conv_bn_relu_quantize_block():
    """A decorated Conv -> BatchNorm -> ReLU -> Quantize block is one black box with code outputs."""
    block = dyadic_(
        nn.Sequential(nn.Conv2d(2, 4, 2, groups=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(), Quantize(2, scale=0.25))
    )
    block = decompose(block)
    result = precompute(block, input_domain=D2)
    assert result.plan.geometry.kernel == (2, 2) and len(result.tables) == 4
    assert result.tables[0].output_domain == Domain.uniform(2, scale=0.25)
    assert_tables_match(result, block, domain=D2, in_shape=(2, 4, 4), positions=((1, 1), (3, 2)))


def test_undecorated_sequential_is_a_model_whose_layer_fuses():
    """An undecorated Sequential is a whole model; its layer and elementwise modules fuse into one table layer."""
    block = dyadic_(nn.Sequential(nn.Linear(3, 2), nn.ReLU(), Quantize(2)))
    net = precompute(block, input_domain=D2)
    assert list(net.layers) == ["0"] and net["0"].plan.output_domain == Domain.uniform(2)
    assert net.tables == list(precompute(decompose(block), input_domain=D2).tables)
    assert_tables_match(net["0"], block, domain=D2, in_shape=(3,))


@decompose(groups=2)
class GroupMix(nn.Module):
    """Two groups of three features, each mixed non-linearly into two outputs."""

    def forward(self, x):
        a, b = x[:, :3], x[:, 3:]
        out = []
        for g in (a, b):
            out += [torch.sin(g[:, 0] * g[:, 1]) + g[:, 2] ** 2, torch.maximum(g[:, 0], g[:, 2]) - g[:, 1]]
        return torch.stack(out, dim=1)


@decompose(fan_in=[[0, 3], [1, 2, 4], [4, 0]], fan_out=[[2], [0], [1]])
class SparseProducts(nn.Module):
    """Three outputs, each a non-linear function of a sparse, overlapping set of inputs."""

    def forward(self, x):
        y0 = torch.relu(x[:, 1] - x[:, 2]) * x[:, 4]
        y1 = torch.exp(-x[:, 4] * x[:, 0])
        y2 = torch.abs(x[:, 0] - 2 * x[:, 3])
        return torch.stack([y0, y1, y2], dim=1)


def test_custom_module_with_groups():
    """A class decorated with groups= and an arbitrary forward is enumerated as a black box."""
    module = GroupMix()
    result = precompute(module, input_domain=S2, example_input=torch.zeros(1, 6))
    assert [t.fan_out for t in result.tables] == [2, 2]
    assert_tables_match(result, module, domain=S2, in_shape=(6,))


def test_custom_module_with_fan_in_and_fan_out():
    """A class decorated with overlapping sparse fan_in and fan_out writes the declared outputs."""
    module = SparseProducts()
    result = precompute(module, input_domain=D2, example_input=torch.zeros(1, 5))
    assert [u.out_channels for u in result.plan.units] == [(2,), (0,), (1,)]
    assert_tables_match(result, module, domain=D2, in_shape=(5,))


class FixedSizeConv(nn.Module):
    """A spatial module that only accepts 8x8 inputs (it checks), so tables come from tiled slots."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = dyadic_(nn.Conv2d(2, 2, 3, groups=2, padding=1))

    def forward(self, x):
        if x.shape[-2:] != (8, 8):
            raise ValueError("FixedSizeConv takes 8x8 inputs")
        return torch.relu(self.conv(x)) ** 0.5


def test_custom_spatial_module_enumerates_in_tiled_slots():
    """A custom spatial module enumerates on frames of the example's size, several windows per sample."""
    module = decompose(FixedSizeConv(), groups=2, kernel_size=3, padding=1)
    result = precompute(module, input_domain=D1, example_input=torch.zeros(2, 2, 8, 8))
    assert len(result.plan.slots) == 4  # windows at output rows/cols 1 and 4
    assert_tables_match(result, module, domain=D1, in_shape=(2, 8, 8), positions=((1, 1), (6, 3)))


def test_chunking_and_budget_give_identical_tables():
    """A tiny memory budget (many chunks) gives the same tables as the default."""
    conv = dyadic_(nn.Conv1d(4, 4, 3, groups=4, padding=1))
    a = precompute(conv, input_domain=D2)
    b = precompute(conv, input_domain=D2, memory_budget=1, check=False)
    assert a.tables == b.tables


def test_training_flag_restored():
    """Enumeration runs in eval mode and restores each submodule's training flag."""
    block = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), Quantize(1))
    block.train()
    block[1].eval()
    before = block[1].running_mean.clone()
    precompute(block, input_domain=D1)
    assert block.training and block[0].training and not block[1].training
    assert torch.equal(block[1].running_mean, before)


def test_elementwise_module_alone():
    """An elementwise module alone gives one single-input table per channel."""
    bn = dyadic_(nn.BatchNorm1d(3))
    result = precompute(bn, input_domain=S2)
    assert [t.fan_in for t in result.tables] == [1, 1, 1]
    assert_tables_match(result, bn, domain=S2, in_shape=(3,))


def test_iotable_namespace_exports_pipeline():
    """The public names of the pipeline are importable from the package root."""
    for name in ("Domain", "IOTable", "decompose", "precompute", "IOTableError", "plan", "spec_of"):
        assert name in iotable.__all__ and hasattr(iotable, name)


@pytest.mark.parametrize("layout", ["NCW", "NWC"])
def test_per_channel_input_domains(layout):
    """Each input channel may have its own domain; rows mix radices in the unit's input order."""
    conv = dyadic_(nn.Conv1d(4, 2, 2, groups=2))
    module = ChannelsLast(conv) if layout == "NWC" else conv
    module = decompose(module, layout=layout, groups=2, kernel_size=2)
    domains = [D1, S2, Domain.values([-1, 0.5, 2]), D2]
    shape = (5, 4) if layout == "NWC" else (4, 5)
    result = precompute(module, input_domain=domains, example_input=torch.zeros(1, *shape))
    assert [t.rows for t in result.tables] == [2 * 4 * 2 * 4, 3 * 4 * 3 * 4]
    assert result.plan.input_domain is None and "per-channel domains" in result.summary()
    assert_tables_match(result, module, domain=domains, in_shape=shape, layout=layout, positions=((0,), (3,)))


class NearGrid(nn.Module):
    """Outputs on a quantization grid, nudged within float rounding on some rows (off the exact values)."""

    def forward(self, x):
        y = torch.clamp(torch.round(2 * (x[:, :2] + x[:, 1:]) * torch.tensor([1.0, -1.0])), -2, 1) / 2
        return y + torch.where(x[:, :2] > 0.5, 1e-7, 0.0)


def test_outputs_within_rounding_of_a_domain_value_encode_as_domain_encode():
    """Outputs a rounding error off the domain's values get Domain.encode's codes (the exact-match shortcut fails)."""
    module = decompose(NearGrid(), fan_in=[[0, 1], [1, 2]], output_domain=Domain.uniform(2, signed=True, scale=0.5))
    result = precompute(module, input_domain=D2, example_input=torch.zeros(1, 3))
    assert_tables_match(result, module, domain=D2, in_shape=(3,))


class Steps(nn.Module):
    """Each output one of three unevenly spaced values, chosen by a threshold on the sum of its two inputs."""

    def forward(self, x):
        s = x[:, :2] + x[:, 1:]
        return torch.where(s < 2, -1.0, torch.where(s < 4, 0.5, 2.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unevenly_spaced_output_domain_and_float64_modules(dtype):
    """An output domain of explicit, unevenly spaced values, in float32 and float64 modules."""
    module = decompose(Steps(), fan_in=[[0, 1], [1, 2]], output_domain=Domain.values([-1, 0.5, 2]))
    module.register_buffer("anchor", torch.zeros(1, dtype=dtype))  # the module's dtype, for the enumerator
    result = precompute(module, input_domain=D2, example_input=torch.zeros(1, 3))
    assert result.tables[0].outputs.dtype == np.uint8
    assert_tables_match(result, module, domain=D2, in_shape=(3,))


class InPlace(nn.Module):
    """A grouped convolution that then scales its own input in place (as in-place activations write into it)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = dyadic_(nn.Conv1d(4, 4, 2, groups=2))

    def forward(self, x):
        out = self.conv(x) + 0 * x.sum(dim=(1, 2), keepdim=True)  # adds exactly 0 while every input is finite
        x.mul_(1e30)
        return out


def test_module_that_changes_its_input_in_place():
    """A module writing into its input does not leak into later chunks: every chunk starts from the fill frame."""
    module = decompose(InPlace(), groups=2, kernel_size=2)
    domain = Domain.values([1, 2, 3])  # no 0: the fill is a value that scaling changes
    result = precompute(module, input_domain=domain, example_input=torch.zeros(1, 4, 7), memory_budget=1, check=False)
    assert_tables_match(result, module, domain=domain, in_shape=(4, 7), positions=((0,), (5,)))


def test_identity_module_returning_its_input():
    """A module that returns its (reused) input buffer itself gives one-input identity tables."""
    module = decompose(nn.Identity(), groups=3, output_domain=S2)
    result = precompute(module, input_domain=S2, example_input=torch.zeros(1, 3), memory_budget=1)
    for table in result.tables:
        assert table.outputs[:, 0].tolist() == [0, 1, 2, 3]


class SparseTanh(nn.Module):
    """Output k is a non-linear function of the inputs listed in ``fan_in[k]``."""

    def __init__(self, n_in: int, fan_in: list[list[int]]) -> None:
        super().__init__()
        mask = torch.zeros(len(fan_in), n_in)
        for k, inputs in enumerate(fan_in):
            mask[k, inputs] = torch.arange(1, len(inputs) + 1, dtype=torch.float32)
        self.register_buffer("mask", mask)

    def forward(self, x):
        return torch.tanh(x @ self.mask.T) + (x @ self.mask.T) ** 2


def crown_fan_in(n: int) -> tuple[int, list[list[int]]]:
    """Fan-ins whose conflict graph is the crown graph on 2n units: u_i and v_j share an input iff i != j.

    Units come in the order u_0, v_0, u_1, v_1, ..., where first-fit colouring needs n colours; the graph is
    bipartite, so 2 suffice.
    """
    channel = {}
    for i in range(n):
        for j in range(n):
            if i != j:
                channel[i, j] = len(channel)
    fan_in = []
    for k in range(n):
        fan_in.append(sorted(channel[k, j] for j in range(n) if j != k))
        fan_in.append(sorted(channel[i, k] for i in range(n) if i != k))
    return len(channel), fan_in


def test_colouring_reaches_two_forward_passes_on_a_bipartite_conflict_graph():
    """Units on a crown graph (first-fit needs n colours) share 2 forward passes, with exact tables."""
    n_in, fan_in = crown_fan_in(4)
    module = decompose(SparseTanh(n_in, fan_in), fan_in=fan_in)
    layer = iotable.plan(module, input_domain=D1, example_input=torch.zeros(1, n_in))
    colours = _colours(_classes(layer))
    assert len(colours) == 2
    for members in colours:
        channels = [ch for c in members for ch in c.channels]
        assert len(channels) == len(set(channels))
    result = precompute(module, input_domain=D1, example_input=torch.zeros(1, n_in))
    assert_tables_match(result, module, domain=D1, in_shape=(n_in,))


def overlapping_fan_in(n_in: int, units: int, width: int, seed: int = 0) -> list[list[int]]:
    """Random sparse fan-ins that overlap heavily (few inputs, many units)."""
    rng = np.random.default_rng(seed)
    return [sorted(rng.choice(n_in, width, replace=False).tolist()) for _ in range(units)]


class MaskedBlock(nn.Module):
    """A user's sparse layer: masked matmul with dyadic weights, ReLU, an inline 2-bit quantizer."""

    def __init__(self, n_in: int, fan_in: list[list[int]], seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        mask = torch.zeros(len(fan_in), n_in)
        for k, inputs in enumerate(fan_in):
            mask[k, inputs] = 1.0
        self.weight = nn.Parameter(torch.randint(-8, 9, (len(fan_in), n_in), generator=gen) / 8 * mask)
        self.bias = nn.Parameter(torch.randint(-8, 9, (len(fan_in),), generator=gen) / 8)

    def forward(self, x):
        return torch.clamp(torch.round(torch.relu(x @ self.weight.T + self.bias) * 2), 0, 3) / 2


@pytest.mark.parametrize(
    ("domain", "width"),
    [
        (Domain.uniform(2, scale=0.5), 5),  # GF(4): 1024 rows
        (Domain.uniform(1), 10),  # GF(2): 1024 rows
        (Domain.uniform(2, signed=True, narrow=True), 7),  # GF(3), an odd prime: 2187 rows
        (Domain.values(range(9)), 4),  # GF(9) = GF(3**2): 6561 rows
    ],
    ids=["gf4", "gf2", "gf3", "gf9"],
)
def test_overlapping_units_share_packed_passes_with_exact_tables(domain, width, monkeypatch):
    """Units whose fan-ins overlap share few forward passes (a linear design) and every row is the module's."""
    monkeypatch.setattr(forward_module, "_CACHE_BYTES", 1)  # chunks of a few blocks: codes add high digits
    n_in, units = 12, 6
    fan_in = overlapping_fan_in(n_in, units, width)
    module = decompose(MaskedBlock(n_in, fan_in), fan_in=fan_in, output_domain=Domain.uniform(2, scale=0.5))
    layer = iotable.plan(module, input_domain=domain, example_input=torch.zeros(1, n_in))
    passes = _passes(layer, _classes(layer), capacity=2**28, itemsize=1)
    readers = np.bincount([e for f in fan_in for e in f]).max()
    assert all(isinstance(p, _Packed) for p in passes) and len(passes) < readers
    result = precompute(module, input_domain=domain, example_input=torch.zeros(1, n_in))
    assert_tables_match(result, module, domain=domain, in_shape=(n_in,))


def test_packed_and_coloured_passes_give_identical_tables(monkeypatch):
    """A layer enumerated in packed passes equals the same layer in disjoint colours, with raw float outputs,
    per-channel domains of equal size, several outputs per unit and a small memory budget (many chunks)."""
    n_in = 9
    fan_in = overlapping_fan_in(n_in, 7, 5, seed=3)
    module = decompose(SparseTanh(n_in, fan_in), fan_in=fan_in)
    domains = [Domain.uniform(2, scale=0.5), Domain.uniform(2, signed=True), Domain.values([-1, 0.5, 2, 3])] * 3
    packed = precompute(module, input_domain=domains, example_input=torch.zeros(1, n_in), memory_budget=2**16)
    assert packed.tables[0].outputs.dtype == np.float32
    monkeypatch.setattr(passes_module, "_PACK_MIN_ROWS", 2**30)
    coloured = precompute(module, input_domain=domains, example_input=torch.zeros(1, n_in), memory_budget=2**16)
    assert packed.tables == coloured.tables
    assert_tables_match(packed, module, domain=domains, in_shape=(n_in,))


def test_packed_pass_with_several_outputs_per_unit():
    """Units of fan_out 2 in packed passes write both outputs in row order."""
    n_in = 8
    fan_in = overlapping_fan_in(n_in, 4, 5, seed=1)
    twice = [f for f in fan_in for _ in range(2)]
    module = decompose(
        MaskedBlock(n_in, twice),
        fan_in=fan_in,
        fan_out=[[2 * k, 2 * k + 1] for k in range(4)],
        output_domain=Domain.uniform(2, scale=0.5),
    )
    result = precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in))
    assert [t.fan_out for t in result.tables] == [2] * 4
    assert_tables_match(result, module, domain=D2, in_shape=(n_in,))


def test_packed_tables_larger_than_a_pass_capacity_are_streamed():
    """Tables that do not fit a packed pass's capacity go through disjoint colours streamed to files."""
    n_in = 8
    fan_in = overlapping_fan_in(n_in, 5, 5, seed=2)
    module = decompose(MaskedBlock(n_in, fan_in), fan_in=fan_in, output_domain=Domain.uniform(2, scale=0.5))
    layer = iotable.plan(module, input_domain=D2, example_input=torch.zeros(1, n_in))
    assert not any(isinstance(p, _Packed) for p in _passes(layer, _classes(layer), capacity=1000, itemsize=1))
    small = precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in), memory_budget=1000)
    assert all(isinstance(t.outputs, np.memmap) for t in small.tables)
    assert small.tables == precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in)).tables


def test_packed_passes_resume_from_the_cache(tmp_path):
    """Packed tables are cached like any other: a rerun loads every one."""
    n_in = 8
    fan_in = overlapping_fan_in(n_in, 6, 5, seed=4)
    module = decompose(MaskedBlock(n_in, fan_in), fan_in=fan_in, output_domain=Domain.uniform(2, scale=0.5))
    first = precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in), cache_dir=tmp_path)
    again = precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in), cache_dir=tmp_path)
    assert first.cached == () and again.cached == tuple(range(6)) and again.method == "cache"
    fresh = precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in))
    assert again.tables == first.tables == fresh.tables


class OffDomainAt(nn.Module):
    """A masked block whose unit 2 outputs 0.3 (outside the declared domain) for one input combination."""

    def __init__(self, n_in: int, fan_in: list[list[int]], codes: list[int]) -> None:
        super().__init__()
        self.block = MaskedBlock(n_in, fan_in)
        self.inputs, self.codes = fan_in[2], torch.tensor(codes, dtype=torch.float32)  # D2's values are its codes

    def forward(self, x):
        y = self.block(x)
        hit = (x[:, self.inputs] == self.codes).all(dim=1)
        y[:, 2] = torch.where(hit, 0.3, y[:, 2])
        return y


def test_packed_pass_error_names_the_bad_row():
    """An output outside the declared domain in a packed pass names the unit and the row of its table."""
    n_in = 8
    fan_in = overlapping_fan_in(n_in, 6, 5, seed=5)
    codes = [1, 3, 0, 2, 1]
    module = decompose(OffDomainAt(n_in, fan_in, codes), fan_in=fan_in, output_domain=Domain.uniform(2, scale=0.5))
    row = int(np.dot(codes, 4 ** np.arange(4, -1, -1)))
    layer = iotable.plan(module, input_domain=D2, example_input=torch.zeros(1, n_in))
    (packed,) = _passes(layer, _classes(layer), capacity=2**28, itemsize=1)
    assert [c.units[0].index for c in packed.classes].index(2) > 0  # its rows come out of sample order
    with pytest.raises(iotable.errors.EnumerationError, match=rf"unit\(s\) \[2\], rows from {row}: value 0\.3"):
        precompute(module, input_domain=D2, example_input=torch.zeros(1, n_in), check=False)


@pytest.mark.parametrize("low_rows", [1, 5, 2**30])
@pytest.mark.parametrize("layout", ["NCW", "NWC"])
def test_row_digits_split_anywhere(low_rows, layout, monkeypatch):
    """Row-order passes take a row's trailing digits from a table and compute the leading ones; wherever the
    split falls (no table, mid-row, all digits), with tiled slots and mixed radices, rows are the module's."""
    monkeypatch.setattr(forward_module, "_LOW_ROWS", low_rows)
    conv = dyadic_(nn.Conv1d(4, 2, 2, groups=2))
    module = ChannelsLast(conv) if layout == "NWC" else conv
    module = decompose(module, layout=layout, groups=2, kernel_size=2)
    domains = [D1, S2, Domain.values([-1, 0.5, 2]), D2]
    shape = (9, 4) if layout == "NWC" else (4, 9)
    result = precompute(module, input_domain=domains, example_input=torch.zeros(1, *shape), memory_budget=2**12)
    assert len(result.plan.slots) == 4
    assert_tables_match(result, module, domain=domains, in_shape=shape, layout=layout, positions=((0,), (6,)))


def test_disjoint_units_of_a_packed_pass_keep_their_rows_in_sample_order():
    """A depthwise convolution on its minimal frame (one slot) packs every channel into one pass, each unit
    with unit vectors (no row permutation), and its tables are the module's."""
    conv = dyadic_(nn.Conv1d(3, 3, 5, groups=3, padding=2))
    layer = iotable.plan(conv, input_domain=D2)
    assert len(layer.slots) == 1 and layer.units[0].rows == 4**5
    (packed,) = _passes(layer, _classes(layer), capacity=2**28, itemsize=4)
    assert isinstance(packed, _Packed) and packed.identity.all()
    result = precompute(conv, input_domain=D2)
    assert_tables_match(result, conv, domain=D2, in_shape=(3, 9), positions=((2,), (4,)))
