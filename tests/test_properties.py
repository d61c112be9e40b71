"""Property tests on random small layers, and equivalences between ways that must agree."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils import prune

from iotable import Domain, decompose, plan, precompute
from iotable.errors import DomainError, SpecError
from iotable.nn import Quantize
from iotable.tabulate.forward import _Encoder
from iotable.tabulate.passes import _classes, _colours, _Packed, _passes
from iotable.tabulate.probe import _allowed

from .conftest import dyadic_
from .oracle import assert_tables_match
from .strategies import conv1d_configs, domains, output_domains, packed_layers, sparse_fan_ins

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(config=conv1d_configs(), domain=domains)
def test_random_conv1d_tables_match_oracle(config, domain):
    """Any small Conv1d gives tables equal to the module at two positions."""
    conv = dyadic_(nn.Conv1d(**config))
    result = precompute(conv, input_domain=domain)
    span = (config["kernel_size"] - 1) * config["dilation"] + 1
    last = (12 - span + config["padding"]) // config["stride"]
    first = -(-config["padding"] // config["stride"])
    assert_tables_match(
        result, conv, domain=domain, in_shape=(config["in_channels"], 12), positions=((first,), (last,))
    )


@FAST
@given(layer=sparse_fan_ins(), domain=domains)
def test_random_sparse_linear_tables_match_oracle(layer, domain):
    """A pruned Linear + Quantize with random sparse fan-in matches the module exhaustively."""
    n_in, fan_in = layer
    lin = dyadic_(nn.Linear(n_in, len(fan_in)))
    mask = torch.zeros(len(fan_in), n_in)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(lin, "weight", mask)
    block = decompose(nn.Sequential(lin, Quantize(3, signed=True, scale=0.25)), fan_in=fan_in)
    result = precompute(block, input_domain=domain)
    assert_tables_match(result, block, domain=domain, in_shape=(n_in,))


def test_per_group_and_per_output_units_hold_the_same_outputs():
    """Built-in per-output-channel units equal the columns of decorated per-group units."""
    conv = dyadic_(nn.Conv1d(4, 6, 2, groups=2, padding=1))
    per_output = precompute(conv, input_domain=Domain.uniform(2))
    same_conv = dyadic_(nn.Conv1d(4, 6, 2, groups=2, padding=1))
    per_group = precompute(decompose(same_conv, groups=2), input_domain=Domain.uniform(2))
    assert [t.fan_out for t in per_group.tables] == [3, 3]
    for k, table in enumerate(per_output.tables):
        group, column = divmod(k, 3)
        np.testing.assert_array_equal(table.outputs[:, 0], per_group.tables[group].outputs[:, column])


def test_minimal_frame_equals_tiled_example_frame():
    """Enumerating on a minimal frame and on tiled slots of a large example frame give identical tables."""
    conv = dyadic_(nn.Conv2d(2, 2, 3, groups=2, stride=2, padding=1, dilation=2))
    minimal = precompute(conv, input_domain=Domain.uniform(1))
    tiled = precompute(conv, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 2, 16, 16))
    assert len(minimal.plan.slots) == 1 and len(tiled.plan.slots) == 4
    assert minimal.tables == tiled.tables


@FAST
@given(domain=output_domains(), data=st.data())
def test_output_encoder_gives_domain_encode_codes_or_defers(domain, data):
    """The enumerator's output encoder returns Domain.encode's codes, or None (defer to it); never other codes."""
    encoder = _Encoder(domain, np.dtype(np.float32))
    codes = np.asarray(data.draw(st.lists(st.integers(0, len(domain) - 1), min_size=1, max_size=40)))
    exact = domain.values.astype(np.float32)[codes]
    if np.array_equal(exact.astype(np.float64), domain.values[codes]):
        np.testing.assert_array_equal(encoder(exact), codes)  # exact outputs never need Domain.encode
    nudge = data.draw(st.sampled_from([0.0, 1e-6, 0.3, np.nan, 1e3]))
    y = exact.copy()
    y[data.draw(st.integers(0, len(y) - 1))] += np.float32(nudge)
    found = encoder(y)
    try:
        expected = domain.encode(y)
    except DomainError:
        assert found is None
    else:
        if found is not None:
            np.testing.assert_array_equal(found, expected)
            assert found.dtype == expected.dtype


@FAST
@given(layer=sparse_fan_ins(max_inputs=10, max_units=12, max_fan_in=4))
def test_colours_partition_classes_into_disjoint_forward_passes(layer):
    """Every class is in exactly one colour, a colour's classes read disjoint channels, and no colouring does
    better than the largest number of classes reading one channel."""
    n_in, fan_in = layer
    lin = decompose(nn.Linear(n_in, len(fan_in)), fan_in=fan_in)
    classes = _classes(plan(lin, input_domain=Domain.uniform(1)))
    colours = _colours(classes)
    assert sorted(id(c) for members in colours for c in members) == sorted(id(c) for c in classes)
    for members in colours:
        channels = [ch for c in members for ch in c.channels]
        assert len(channels) == len(set(channels))
    readers = np.bincount([ch for c in classes for ch in c.channels], minlength=n_in)
    assert len(colours) >= readers.max()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=packed_layers(), budget=st.sampled_from([2**14, 2**28]))
def test_random_packed_layers_match_oracle(layer, budget):
    """Sparse layers whose units share packed forward passes match the module exhaustively, chunked or not."""
    domain, n_in, fan_in = layer
    lin = dyadic_(nn.Linear(n_in, len(fan_in)))
    mask = torch.zeros(len(fan_in), n_in)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(lin, "weight", mask)
    block = decompose(nn.Sequential(lin, nn.Tanh()), fan_in=fan_in)
    result = precompute(block, input_domain=domain, memory_budget=budget, fast_path=False)
    if budget == 2**28:
        passes = _passes(result.plan, _classes(result.plan), capacity=budget, itemsize=4)
        assert all(isinstance(p, _Packed) for p in passes)
    assert_tables_match(result, block, domain=domain, in_shape=(n_in,))


def reference_allowed(layer, elements):
    """Straightforward (element, output) dependence mask: every pair checked against every unit's window."""
    channels_last = layer.layout.channels_last
    g = layer.geometry
    out_coords = np.stack(np.unravel_index(np.arange(np.prod(layer.frame_out)), layer.frame_out), axis=1)
    in_coords = np.stack(np.unravel_index(elements, layer.frame_in), axis=1)
    allowed = np.zeros((len(elements), len(out_coords)), dtype=bool)
    for i, ci in enumerate(in_coords):
        c_in, p_in = (ci[-1], ci[:-1]) if channels_last else (ci[0], ci[1:])
        for o, co in enumerate(out_coords):
            c_out, p_out = (co[-1], co[:-1]) if channels_last else (co[0], co[1:])
            if not any(c_in in u.in_channels and c_out in u.out_channels for u in layer.units):
                continue
            allowed[i, o] = all(
                0 <= p - (q * s - pad) <= (k - 1) * d and (p - (q * s - pad)) % d == 0
                for p, q, s, pad, k, d in zip(p_in, p_out, g.stride, g.before, g.kernel, g.dilation)
            )
    return allowed


class ToChannelsLast(nn.Module):
    """A convolution taking and returning channels-last tensors."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.movedim(self.conv(torch.movedim(x, -1, 1)), 1, -1)


@FAST
@given(config=conv1d_configs(), channels_last=st.booleans(), two_d=st.booleans())
def test_probe_dependence_mask_matches_reference(config, channels_last, two_d):
    """The probe's factorised dependence mask equals checking every (input, output) pair against every unit."""
    conv = (nn.Conv2d if two_d else nn.Conv1d)(**config)
    size = (5, 6) if two_d else (7,)
    shape = (*size, config["in_channels"]) if channels_last else (config["in_channels"], *size)
    module = conv
    if channels_last:
        module = decompose(
            ToChannelsLast(conv),
            layout="NHWC" if two_d else "NWC",
            groups=config["groups"],
            kernel_size=config["kernel_size"],
            stride=config["stride"],
            dilation=config["dilation"],
            padding=config["padding"],
        )
    try:
        layer = plan(module, input_domain=Domain.uniform(1), example_input=torch.zeros(1, *shape))
    except SpecError:
        layer = None
    assume(layer is not None)  # a window that does not fit this frame: nothing to probe
    elements = np.arange(int(np.prod(layer.frame_in)))
    np.testing.assert_array_equal(_allowed(layer, elements, layer.reads.T), reference_allowed(layer, elements))
