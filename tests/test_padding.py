"""Padding: every torch padding mode and asymmetric padding, in the graph, the runtime, the probe and bundles.

The model matrix runs whole models through ``precompute`` and ``verify``; the pad node's index map is checked
against torch's own padding; tampered maps and modes are caught; declared windows that are not the
convolution's own are refused, with or without the fast path.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from torch import nn

import iotable
import iotable.bundle.bundle
from iotable import Domain, OptionError, decompose, load, plan, precompute, save, spec_of, verify
from iotable.errors import BundleError, GraphError, SpecError, SpecMismatchError
from iotable.front.plan import Geometry
from iotable.front.spec import PaddingMode
from iotable.graph.graph import PadMeta, pad_index_map
from iotable.nn import Quantize
from iotable.nodekinds.pad import _pad_by_axes, _pad_by_gather
from iotable.tabulate.fastpath import recognize
from iotable.tabulate.probe import _allowed

from .oracle import assert_tables_match
from .strategies import PADDING_MODES, pad_configs, padded_conv_configs
from .test_bundle import stamp
from .test_network import assert_bit_exact, random_inputs, random_stats_

# torch warns that it copies the input for padding="same" with an even kernel; that is what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
S2 = Domain.uniform(2, signed=True, scale=0.5)  # real 0 is code 2
S1 = Domain.uniform(1, signed=True)  # values -1, 0: real 0 is code 1
DATA = Path(__file__).parent / "data"


def torch_pad(x: torch.Tensor, padding, mode: str, *, channels_last: bool = False, value: float = 0.0):
    """torch's own padding of a batch ``x`` (channels first or last): the reference for pad nodes."""
    if channels_last:
        x = torch.movedim(x, -1, 1)
    pad = [side for before, after in reversed(padding) for side in (before, after)]
    out = F.pad(x, pad, mode="constant", value=value) if mode == "zeros" else F.pad(x, pad, mode=mode)
    return torch.movedim(out, 1, -1) if channels_last else out


# -- the index map against torch --------------------------------------------------------------------------


@FAST
@given(config=pad_configs())
def test_pad_index_map_is_torch_padding(config):
    """Gathering the input by the index map (-1: a sentinel) is exactly torch's padding of that input."""
    shape, padding, mode, channels_last = config
    index_map = pad_index_map(shape, padding, mode, channels_last=channels_last)
    x = torch.arange(float(np.prod(shape))).reshape(1, *shape)
    expected = torch_pad(x, padding, mode, channels_last=channels_last, value=-1.0)[0]
    flat = torch.cat([x.reshape(-1), torch.tensor([-1.0])])
    assert index_map.dtype == np.int64 and index_map.shape == tuple(expected.shape)
    assert torch.equal(flat[torch.as_tensor(index_map)], expected)


@FAST
@given(config=pad_configs())
def test_pad_kernels_follow_the_index_map(config):
    """The runtime's axis-by-axis pad kernel and its one-gather kernel both copy what the map names, pad codes
    where it holds -1; in the copying modes that is torch's own padding."""
    shape, padding, mode, channels_last = config
    rank, channel_axis = len(shape) - 1, len(shape) - 1 if channels_last else 0
    layout = iotable.Layout.channels_first(rank + 2)
    layout = iotable.Layout.parse(layout.value[0] + layout.value[2:] + "C") if channels_last else layout
    index_map = pad_index_map(shape, padding, mode, channels_last=channels_last)
    codes = np.arange(shape[channel_axis]) % 4 if mode == "zeros" else None
    pad_codes = None if codes is None else tuple(int(c) for c in codes)
    meta = PadMeta(
        padding=padding, mode=iotable.front.spec.PaddingMode.parse(mode), pad_codes=pad_codes, index_map=index_map
    )
    node = iotable.Node("pad", iotable.NodeKind.PAD, index_map.shape, layout, S2, meta)
    x = torch.randint(0, 4, (5, *shape), generator=torch.Generator().manual_seed(0)).to(torch.uint8)
    held = 0 if codes is None else codes[np.indices(index_map.shape)[channel_axis]]
    expected = np.where(index_map >= 0, x.numpy().reshape(5, -1)[:, np.maximum(index_map, 0)], held)
    channel_shape = [1] + [-1 if a == channel_axis else 1 for a in range(rank + 1)]  # a batch's channel axis
    fill = None if codes is None else torch.as_tensor(codes, dtype=torch.uint8).reshape(channel_shape)
    by_axes = _pad_by_axes(node, shape, fill, channels_last)([x])
    by_gather = _pad_by_gather(node, shape, fill, shape[channel_axis], channels_last)([x])
    np.testing.assert_array_equal(by_axes.numpy(), expected)
    np.testing.assert_array_equal(by_gather.numpy(), expected)
    if codes is None:
        assert torch.equal(by_axes, torch_pad(x.float(), padding, mode, channels_last=channels_last).to(torch.uint8))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("zeros", [-1, 0, 1, 2, 3, -1, -1]),
        ("reflect", [1, 0, 1, 2, 3, 2, 1]),
        ("replicate", [0, 0, 1, 2, 3, 3, 3]),
        ("circular", [3, 0, 1, 2, 3, 0, 1]),
    ],
)
def test_padding_mode_sources_by_hand(mode, expected):
    """What each padded position of a 4-element axis padded (1, 2) reads, written out by hand."""
    assert PaddingMode.parse(mode).sources(4, 1, 2).tolist() == expected


# -- the model matrix -------------------------------------------------------------------------------------

# (id, rank, kernel, stride, dilation, padding, groups): torch forbids padding="same" with stride > 1.
GEOMETRIES = [
    ("odd-same", 1, 3, 1, 1, "same", "depthwise"),
    ("even-same", 1, 4, 1, 1, "same", "grouped"),
    ("even-same-dilated", 1, 2, 1, 2, "same", "depthwise"),
    ("odd-same-dilated", 1, 3, 1, 2, "same", "grouped"),
    ("stride2", 1, 3, 2, 1, 1, "grouped"),
    ("stride2-dilated", 1, 2, 2, 2, 2, "depthwise"),
    ("odd-same", 2, 3, 1, 1, "same", "depthwise"),
    ("even-same", 2, 2, 1, 1, "same", "grouped"),
    ("even-same-dilated", 2, 2, 1, 2, "same", "depthwise"),
    ("odd-same-dilated", 2, 3, 1, 2, "same", "depthwise"),
    ("stride2", 2, 3, 2, 1, 1, "depthwise"),
    ("stride2-dilated", 2, 2, 2, 2, 1, "grouped"),
]


def padded_model(rank: int, kernel: int, stride: int, dilation: int, padding, groups: str, mode: str) -> nn.Module:
    """q -> padded conv (depthwise over 4 channels, or 2 groups of 2) -> batch norm -> q -> 1x1 conv -> q."""
    conv = nn.Conv1d if rank == 1 else nn.Conv2d
    norm = nn.BatchNorm1d if rank == 1 else nn.BatchNorm2d
    first = conv(
        4,
        4,
        kernel,
        stride=stride,
        dilation=dilation,
        padding=padding,
        padding_mode=mode,
        groups=4 if groups == "depthwise" else 2,
    )
    return random_stats_(
        nn.Sequential(
            Quantize(1, signed=True) if rank == 2 else Quantize(2, signed=True, scale=0.5),
            first,
            norm(4),
            Quantize(2, signed=True, scale=0.5),
            conv(4, 2, 1, groups=2),
            Quantize(2, scale=0.5),
        )
    )


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "black-box"])
@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize(
    ("rank", "kernel", "stride", "dilation", "padding", "groups"),
    [g[1:] for g in GEOMETRIES],
    ids=[f"{g[1]}d-{g[0]}-{g[6]}" for g in GEOMETRIES],
)
def test_padded_convolutions_are_bit_exact(rank, kernel, stride, dilation, padding, groups, mode, fast_path):
    """Conv1d/Conv2d in every padding mode, odd and even kernels, "same", stride and dilation: bit-exact."""
    model = padded_model(rank, kernel, stride, dilation, padding, groups, mode)
    domain = S1 if rank == 2 else S2
    size = (9,) if rank == 1 else (6, 5)
    x = random_inputs(domain, (4, *size), n=48)
    net = precompute(model, input_domain=domain, example_input=x[:1], fast_path=fast_path)
    (pad,) = net.graph.nodes_of("pad")
    layer = net["1"]
    assert pad.meta.mode.value == mode and pad.meta.padding == layer.plan.geometry.padding
    total = dilation * (kernel - 1)
    if padding == "same":  # torch pads total // 2 before and the rest after
        assert layer.plan.geometry.padding == ((total // 2, total - total // 2),) * rank
    assert layer.method == ("conv fast path" if fast_path else "black box")
    assert_bit_exact(model, net, x)


def test_even_same_padding_pads_the_extra_element_after():
    """padding="same" with kernel 4: one element before, two after, in the graph and the window buffer."""
    model = random_stats_(nn.Sequential(nn.Conv1d(2, 2, 4, padding="same", groups=2), Quantize(2, signed=True)))
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 6))
    pad = net.graph["0:pad"]
    assert pad.meta.padding == ((1, 2),) and pad.shape == (2, 9) and pad.meta.pad_codes == (2, 2)
    assert pad.meta.index_map[0].tolist() == [-1, 0, 1, 2, 3, 4, 5, -1, -1]
    assert net.graph["0:window"].shape == (6, 8)
    assert net.graph.edges_into("0:window")[0].shape[-1] == 9
    assert net.graph["0:window"].meta.buffer_depth == 4 * 2  # (kernel - 1) * dilation + 1 elements of 2 channels
    assert_bit_exact(model, net, random_inputs(S2, (2, 6)))


def test_copying_modes_need_no_zero_in_the_domain():
    """Reflect padding copies input codes, so a domain without 0 pads fine; zeros padding is refused."""
    domain = Domain.values([1.0, 2.0, 3.0])
    reflect = random_stats_(nn.Sequential(nn.Conv1d(1, 1, 3, padding=1, padding_mode="reflect"), Quantize(2)))
    net = precompute(reflect, input_domain=domain, example_input=torch.zeros(1, 1, 5))
    assert net.graph.nodes_of("pad")[0].meta.pad_codes is None
    assert_bit_exact(reflect, net, random_inputs(domain, (1, 5)))
    zeros = nn.Sequential(nn.Conv1d(1, 1, 3, padding=1), Quantize(2)).eval()
    with pytest.raises(iotable.ModelError, match=r"padding feeds real 0.*has no 0.*a padding_mode that copies"):
        precompute(zeros, input_domain=domain, example_input=torch.zeros(1, 1, 5))


def test_channels_last_reflect_is_bit_exact():
    """A channels-last convolution declared with reflect padding pads along the right axes."""

    class ChannelsLast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 2, padding="same", padding_mode="reflect", groups=2)

        def forward(self, x):
            return torch.movedim(self.conv(torch.movedim(x, -1, 1)), 1, -1)

    block = decompose(ChannelsLast(), layout="NHWC", groups=2, kernel_size=2, padding="same", padding_mode="reflect")
    model = nn.Sequential(block, Quantize(2, signed=True, scale=0.5)).eval()
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 5, 4, 2))
    assert net.graph.nodes_of("pad")[0].shape == (6, 5, 2)
    assert_bit_exact(model, net, random_inputs(S2, (5, 4, 2)))


@FAST
@given(config=padded_conv_configs())
def test_random_padded_convolutions_are_bit_exact(config):
    """Random padded convolutions (any mode, kernel, stride, dilation, groups) give bit-exact networks."""
    conv = (nn.Conv1d if config["rank"] == 1 else nn.Conv2d)(**config["conv"])
    model = nn.Sequential(conv, Quantize(2, signed=True, scale=0.25)).eval()
    shape = (config["conv"]["in_channels"], *config["size"])
    x = random_inputs(S2, shape, n=16)
    net = precompute(model, input_domain=S2, example_input=x[:1], fast_path=False)
    assert_bit_exact(model, net, x)


# -- per-layer tables --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_even_same_layer_tables_match_the_oracle(mode):
    """Every row of a kernel-4 "same" layer equals the module at interior positions (the window starts 1 early)."""
    conv = nn.Conv1d(2, 2, 4, padding="same", padding_mode=mode, groups=2)
    result = precompute(conv, input_domain=S2, example_input=torch.zeros(1, 2, 7))
    assert result.plan.geometry.padding == ((1, 2),) and result.plan.geometry.padding_mode is PaddingMode(mode)
    assert_tables_match(result, conv, domain=S2, in_shape=(2, 7), layout="NCW", positions=((1,), (3,)))


def test_asymmetric_2d_layer_tables_match_the_oracle():
    """A 2x4 kernel with dilation (1, 2) and "same": per-axis (before, after) pairs place every window."""
    conv = nn.Conv2d(1, 1, (2, 4), padding="same", dilation=(1, 2), padding_mode="replicate")
    result = precompute(conv, input_domain=S1, example_input=torch.zeros(1, 1, 4, 8))
    assert result.plan.geometry.padding == ((0, 1), (3, 3))
    assert_tables_match(result, conv, domain=S1, in_shape=(1, 4, 8), layout="NCHW", positions=((0, 3), (2, 4)))


# -- the probe --------------------------------------------------------------------------------------------


def reference_allowed(layer, module_mode: str) -> np.ndarray:
    """(element, output) dependence from torch: pad a tensor of positions, read every output's window."""
    g = layer.geometry
    size = layer.frame_in[1:]
    positions = torch.arange(float(np.prod(size))).reshape(1, 1, *size)
    padded = torch_pad(positions, g.padding, module_mode, value=-1.0)[0, 0].numpy().astype(np.int64)
    allowed = np.zeros((int(np.prod(layer.frame_in)), int(np.prod(layer.frame_out))), dtype=bool)
    for out_flat in range(allowed.shape[1]):
        c_out, *pos = np.unravel_index(out_flat, layer.frame_out)
        taps = [np.arange(k) * d + p * s for k, d, p, s in zip(g.kernel, g.dilation, pos, g.stride)]
        read = padded[np.ix_(*taps)].reshape(-1)
        read = read[read >= 0]
        for unit in layer.units:
            if c_out in unit.out_channels:
                for c in unit.in_channels:
                    allowed[c * int(np.prod(size)) + read, out_flat] = True
    return allowed


@FAST
@given(config=padded_conv_configs())
def test_probe_dependence_mask_follows_padded_copies(config):
    """The probe's dependence mask equals torch's: an element feeds the windows that read its padded copies."""
    conv = (nn.Conv1d if config["rank"] == 1 else nn.Conv2d)(**config["conv"])
    layer = plan(conv, input_domain=S2, example_input=torch.zeros(1, config["conv"]["in_channels"], *config["size"]))
    elements = np.arange(int(np.prod(layer.frame_in)))
    expected = reference_allowed(layer, config["conv"]["padding_mode"])
    np.testing.assert_array_equal(_allowed(layer, elements, layer.reads.T), expected)


class PadThenConv(nn.Module):
    """A user's module that pads inside its forward (``F.pad``), then convolves without padding."""

    def __init__(self, mode: str, pad: tuple[int, ...], rank: int = 1, kernel: int = 3) -> None:
        super().__init__()
        self.mode, self.pad = mode, pad
        self.conv = (nn.Conv1d if rank == 1 else nn.Conv2d)(2, 2, kernel, groups=2)

    def forward(self, x):
        if self.mode == "zeros":
            return self.conv(F.pad(x, self.pad))
        return self.conv(F.pad(x, self.pad, mode=self.mode))


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_custom_module_states_its_padding(mode):
    """A module padding (1 before, 2 after) in its forward, declared so, is probed clean and bit-exact."""
    module = decompose(
        PadThenConv(mode, (1, 2), kernel=4), groups=2, kernel_size=4, padding=((1, 2),), padding_mode=mode
    )
    model = nn.Sequential(module, Quantize(2, signed=True, scale=0.5)).eval()
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 6))
    assert net.graph.nodes_of("pad")[0].meta.padding == ((1, 2),)
    assert_bit_exact(model, net, random_inputs(S2, (2, 6)))


def test_custom_2d_module_with_per_axis_pairs():
    """Per-axis (before, after) pairs in two dimensions: ((0, 1), (1, 0)) in reflect mode."""
    module = PadThenConv("reflect", (1, 0, 0, 1), rank=2, kernel=2)  # F.pad lists the last axis first
    module = decompose(module, groups=2, kernel_size=2, padding=((0, 1), (1, 0)), padding_mode="reflect")
    model = nn.Sequential(module, Quantize(2, signed=True, scale=0.5)).eval()
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 5, 4))
    assert_bit_exact(model, net, random_inputs(S2, (2, 5, 4)))


@pytest.mark.parametrize(
    ("actual", "declared"),
    [(a, d) for a in PADDING_MODES for d in PADDING_MODES if a != d],
)
def test_probe_refuses_a_wrongly_declared_padding_mode(actual, declared):
    """A module that pads one way but declares another is refused, even where dependence cannot tell."""
    module = decompose(PadThenConv(actual, (1, 1)), groups=2, kernel_size=3, padding=1, padding_mode=declared)
    model = nn.Sequential(module, Quantize(2, signed=True, scale=0.5)).eval()
    with pytest.raises(SpecMismatchError, match=r"^0: .*(whose window reads padding|changed when input)"):
        precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 6))


def test_probe_names_the_declared_padding():
    """The value check's message names the edge output, the declared padding and mode, and the fix."""
    module = decompose(PadThenConv("replicate", (1, 1)), groups=2, kernel_size=3, padding=1)
    with pytest.raises(SpecMismatchError) as info:
        precompute(module, input_domain=S2, example_input=torch.zeros(1, 2, 6))
    message = str(info.value)
    for words in ("PadThenConv: output channel", "whose window reads padding", r"\(\(1, 1\),\)", "'zeros'"):
        assert re.search(words, message), message
    assert "declare the padding= and padding_mode= it uses" in message


# -- declared windows against the convolution's own ---------------------------------------------------------

OWN = {"groups": 2, "kernel_size": 3, "stride": 2, "dilation": 1, "padding": 1, "padding_mode": "reflect"}
WRONG = [
    ("kernel_size", {"kernel_size": 2}, r"kernel_size=\(2,\) where the Conv1d has kernel_size=\(3,\)"),
    ("stride", {"stride": 1}, r"stride=\(1,\) where the Conv1d has stride=\(2,\)"),
    ("dilation", {"dilation": 2}, r"dilation=\(2,\) where the Conv1d has dilation=\(1,\)"),
    ("padding-sides", {"padding": ((0, 2),)}, r"padding=\(\(0, 2\),\) where the Conv1d has padding=\(\(1, 1\),\)"),
    ("padding-mode", {"padding_mode": "zeros"}, "padding_mode='zeros' where the Conv1d has padding_mode='reflect'"),
    ("layout", {"layout": "NWC"}, "layout NWC where the Conv1d reads NCW"),
]


def reflect_block() -> nn.Sequential:
    conv = nn.Conv1d(2, 2, 3, stride=2, padding=1, padding_mode="reflect", groups=2)
    return random_stats_(nn.Sequential(conv, nn.BatchNorm1d(2), Quantize(2, signed=True, scale=0.5)))


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "black-box"])
@pytest.mark.parametrize(("field", "change", "words"), WRONG, ids=[w[0] for w in WRONG])
def test_wrong_declared_window_is_refused(field, change, words, fast_path):
    """Each declared field that differs from the convolution's own is a SpecError naming it, on either path."""
    block = decompose(reflect_block(), **{**OWN, **change})
    with pytest.raises(SpecError, match=rf"^Sequential: the layer's window is its Conv1d's own.*{words}"):
        precompute(block, input_domain=S2, example_input=torch.zeros(1, 2, 7), fast_path=fast_path)


def test_right_declared_window_takes_the_fast_path():
    """The same block declared with its own window is accepted, on the fast path."""
    block = decompose(reflect_block(), **OWN)
    result = precompute(block, input_domain=S2, example_input=torch.zeros(1, 2, 7))
    assert result.method == "conv fast path" and result.plan.geometry.padding_mode is PaddingMode.REFLECT


@pytest.mark.parametrize(
    "change",
    [
        {"kernel": (2,)},
        {"stride": (1,)},
        {"dilation": (2,)},
        {"padding": ((0, 2),)},
        {"padding": ((1, 0),)},
        {"padding_mode": PaddingMode.ZEROS},
    ],
    ids=["kernel", "stride", "dilation", "padding-before", "padding-after", "padding-mode"],
)
def test_fast_path_checks_every_window_field(change):
    """The fast path declines a plan whose window differs from its convolution's in any one field."""
    block = reflect_block()
    layer = plan(block, input_domain=S2, example_input=torch.zeros(1, 2, 7))
    assert recognize(block, layer) is not None
    wrong = dataclasses.replace(layer, geometry=dataclasses.replace(layer.geometry, **change))
    assert recognize(block, wrong) is None


def test_fast_path_declines_a_channels_last_layout():
    """A channels-last plan over a torch convolution is not the convolution's window: the fast path declines."""
    block = reflect_block()
    layer = plan(block, input_domain=S2, example_input=torch.zeros(1, 2, 7))
    assert recognize(block, dataclasses.replace(layer, layout=iotable.Layout.NWC)) is None


# -- decompose --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "padding"),
    [
        ({"kernel_size": 3, "padding": 1}, ((1, 1),)),
        ({"kernel_size": 3, "padding": (1, 2)}, ((1, 1), (2, 2))),
        ({"kernel_size": 2, "padding": ((0, 1),)}, ((0, 1),)),
        ({"kernel_size": 2, "padding": (1, (0, 1))}, ((1, 1), (0, 1))),
        ({"kernel_size": 4, "padding": "same"}, ((1, 2),)),
        ({"kernel_size": 4, "dilation": 2, "padding": "same"}, ((3, 3),)),
        ({"kernel_size": (2, 3), "padding": "same"}, ((0, 1), (1, 1))),
        ({"kernel_size": 2, "dilation": (1, 3), "padding": "same"}, ((0, 1), (1, 2))),
        ({"kernel_size": 3, "padding": "valid"}, ((0, 0),)),
    ],
)
def test_decompose_padding_forms(kwargs, padding):
    """Every accepted form of padding= becomes (before, after) pairs, "same" as torch resolves it."""
    assert spec_of(decompose(nn.Identity(), **kwargs)).padding == padding


@pytest.mark.parametrize(
    "conv", [nn.Conv1d(1, 1, 4, padding="same", dilation=3), nn.Conv2d(1, 1, (2, 5), padding="same")]
)
def test_builtin_same_padding_is_torchs(conv):
    """The built-in rule's pairs are the ones torch pads with (its reversed, repeated padding list)."""
    pairs = spec_of(conv).padding
    flat = conv._reversed_padding_repeated_twice  # torch: last axis first, (before, after) each
    assert pairs == tuple(zip(flat[::2], flat[1::2]))[::-1]


def test_decompose_padding_mode():
    """padding_mode= takes torch's names in any case and needs a sliding window."""
    spec = spec_of(decompose(nn.Identity(), kernel_size=3, padding=1, padding_mode="Circular"))
    assert spec.padding_mode is PaddingMode.CIRCULAR
    with pytest.raises(OptionError, match=r"unknown padding mode 'mirror'; expected one of 'zeros', 'reflect'"):
        decompose(nn.Identity(), kernel_size=3, padding_mode="mirror")
    with pytest.raises(SpecError, match=r"padding_mode too\); give kernel_size= too"):
        decompose(nn.Identity(), padding_mode="reflect")


def test_geometry_wants_pairs():
    """Geometry's padding is (before, after) per axis; one integer per axis is refused with the fix."""
    with pytest.raises(SpecError, match=r"one \(before, after\) pair per spatial axis, received \(1,\).*\(p, p\)"):
        Geometry(kernel=(3,), stride=(1,), dilation=(1,), padding=(1,))
    g = Geometry(kernel=(3,), stride=(1,), dilation=(1,), padding=((1, 2),), padding_mode="reflect")
    assert g.padding_mode is PaddingMode.REFLECT and g.padded_size((5,)) == (8,) and g.output_size((5,)) == (6,)


# -- tampering --------------------------------------------------------------------------------------------


def reflect_network():
    model = random_stats_(
        nn.Sequential(
            nn.Conv2d(2, 2, 2, padding="same", padding_mode="reflect", groups=2),
            nn.BatchNorm2d(2),
            Quantize(2, signed=True, scale=0.5),
        )
    )
    x = random_inputs(S2, (2, 5, 4), n=64)
    return model, precompute(model, input_domain=S2, example_input=x[:1]), x


def test_tampered_index_map_is_caught():
    """One corrupted entry of the pad map: Graph.check refuses it, and verify sees the runtime follow it."""
    torch.manual_seed(0)  # a model and inputs for which the corner's copy changes an output
    model, net, x = reflect_network()
    pad = net.graph["0:pad"]
    index_map = pad.meta.index_map.copy()
    assert index_map[0, 5, 4] == 3 * 4 + 2  # the corner copies element (3, 2): row 5 reflects to 3, column 4 to 2
    index_map[0, 5, 4] = 0
    graph = net.graph.replace(dataclasses.replace(pad, meta=dataclasses.replace(pad.meta, index_map=index_map)))
    with pytest.raises(
        GraphError, match=r"pad node '0:pad': index_map\[\(0, 5, 4\)\] is 0, but mode 'reflect'.* 14 there"
    ):
        graph.check()
    net = dataclasses.replace(net, graph=graph)  # its runtime compiles the graph as it now stands
    report = verify(model, net, x)
    assert not report.ok and report.first["node"] == "0" and report.first["position"] == (4, 3)


def test_tampered_mode_is_caught():
    """A pad node whose mode no longer matches its map is refused by Graph.check, naming both."""
    _, net, _ = reflect_network()
    pad = net.graph["0:pad"]
    graph = net.graph.replace(
        dataclasses.replace(pad, meta=dataclasses.replace(pad.meta, mode=iotable.front.spec.PaddingMode.CIRCULAR))
    )
    with pytest.raises(GraphError, match=r"mode 'circular' with padding \(\(0, 1\), \(0, 1\)\).*disagree"):
        graph.check()


def test_pad_node_without_its_index_map_is_refused():
    """A hand-made pad node must carry its map: Graph.check names what is missing."""
    _, net, _ = reflect_network()
    pad = net.graph["0:pad"]
    graph = net.graph.replace(dataclasses.replace(pad, meta=dataclasses.replace(pad.meta, index_map=None)))
    with pytest.raises(GraphError, match=r"pad node '0:pad': meta.index_map must be an integer array of shape"):
        graph.check()


# -- bundles ----------------------------------------------------------------------------------------------


def test_reflect_bundle_round_trip(tmp_path):
    """A reflect-padded network saved and loaded runs bit-exact; the manifest holds the mode and the map."""
    model, net, x = reflect_network()
    path = save(net, tmp_path / "reflect.bundle")
    manifest = json.loads((path / "manifest.json").read_text())
    (node,) = [n for n in manifest["graph"]["nodes"] if n["kind"] == "pad"]
    assert node["meta"]["mode"] == "reflect" and node["meta"]["padding"] == [[0, 1], [0, 1]]
    assert node["meta"]["pad_codes"] is None
    stored = np.load(path / node["meta"]["index_map"]["$array"], allow_pickle=False)
    np.testing.assert_array_equal(stored, net.graph["0:pad"].meta.index_map)
    assert manifest["layers"][0]["plan"]["geometry"]["padding_mode"] == "reflect"
    loaded = load(path)
    assert loaded["0"].plan.geometry == net["0"].plan.geometry and loaded["0"].plan.spec == net["0"].plan.spec
    assert torch.equal(loaded.run(x), net.run(x))
    assert_bit_exact(model, loaded, x)


def test_bundle_with_a_tampered_mode_is_refused(tmp_path):
    """Editing a pad node's mode in the manifest is caught on load: the map no longer matches it."""
    _, net, _ = reflect_network()
    path = save(net, tmp_path / "reflect.bundle")
    manifest = json.loads((path / "manifest.json").read_text())
    next(n for n in manifest["graph"]["nodes"] if n["kind"] == "pad")["meta"]["mode"] = "replicate"
    (path / "manifest.json").write_text(json.dumps(manifest))
    stamp(path)  # the checksum written anew: the graph's own check is what is tested
    with pytest.raises(BundleError, match=r"the graph fails its checks: graph: pad node '0:pad'.*'replicate'"):
        load(path)


def test_bundle_with_malformed_padding_is_refused(tmp_path):
    """A format-2 plan whose padding is not (before, after) pairs is named by its field."""
    _, net, _ = reflect_network()
    path = save(net, tmp_path / "reflect.bundle")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["layers"][0]["plan"]["geometry"]["padding"] = [1, 1]
    (path / "manifest.json").write_text(json.dumps(manifest))
    stamp(path)
    with pytest.raises(BundleError, match=r"layers\[0\] \('0'\)\.plan\.geometry\.padding\[0\]: expected a list"):
        load(path)


def test_format_1_bundle_still_loads(tmp_path):
    """A bundle written in format 1 (symmetric zero padding) loads, runs bit-exact and saves in today's format."""
    source = DATA / "format1_padded.bundle"
    x = torch.from_numpy(np.load(DATA / "format1_padded.inputs.npy"))
    y = torch.from_numpy(np.load(DATA / "format1_padded.outputs.npy"))
    assert json.loads((source / "manifest.json").read_text())["format_version"] == 1
    net = load(source, host_modules={"8": nn.Linear(70, 3)})
    assert torch.equal(net.run(x), y)
    pad = net.graph["5:pad"]
    assert pad.meta.padding == ((1, 1), (0, 0)) and pad.meta.mode is iotable.front.spec.PaddingMode.ZEROS
    assert (
        pad.meta.pad_codes == (2, 2)
        and pad.meta.index_map.shape == (2, 8, 6)
        and net["5"].plan.geometry.padding == ((1, 1), (0, 0))
    )
    assert net["5"].plan.spec.padding == ((1, 1), (0, 0))
    copy = tmp_path / "copy.bundle"
    shutil.copytree(source, copy)
    again = load(save(net, copy), host_modules={"8": nn.Linear(70, 3)})
    assert json.loads((copy / "manifest.json").read_text())["format_version"] == iotable.bundle.bundle.FORMAT_VERSION
    assert torch.equal(again.run(x), y)
