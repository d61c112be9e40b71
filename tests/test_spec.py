"""Decomposition metadata: attaching, reading back, built-in rules and the probe."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from iotable import Domain, Layout, OptionError, check_decomposition, decompose, plan, precompute, spec_of
from iotable.errors import NotDecomposedError, SpecError, SpecMismatchError, TableTooLargeError
from iotable.front.spec import has_spec
from iotable.nn import Quantize

D2 = Domain.uniform(2)


def test_decompose_instance_returns_same_object():
    """decompose(module, ...) attaches metadata to that instance only and returns it."""
    a, b = nn.Conv1d(3, 3, 3, groups=3), nn.Conv1d(3, 3, 3, groups=3)
    assert decompose(a, groups=3) is a
    assert spec_of(a).groups == 3 and spec_of(a).source.startswith("decompose()")
    assert spec_of(b).source == "built-in rule for nn.Conv1d"


def test_decompose_class_with_and_without_arguments():
    """@decompose and @decompose(...) both work on classes, and instances inherit the metadata."""

    @decompose
    class Whole(nn.Module):
        def forward(self, x):
            return x.sum(dim=1, keepdim=True)

    @decompose(fan_in=[[0], [1]])
    class Pairwise(nn.Module):
        def forward(self, x):
            return x * 2

    assert spec_of(Whole()).fan_in is None and spec_of(Whole()).groups is None
    assert spec_of(Pairwise()).fan_in == ((0,), (1,))
    result = precompute(Whole(), input_domain=D2, example_input=torch.zeros(1, 3))
    assert len(result.tables) == 1 and result.tables[0].fan_in == 3


def test_instance_metadata_overrides_class_metadata():
    """Metadata on an instance wins over metadata on its class."""

    @decompose(groups=1)
    class Block(nn.Module):
        def forward(self, x):
            return x

    block = decompose(Block(), groups=2)
    assert spec_of(block).groups == 2 and spec_of(Block()).groups == 1


def test_layout_parsing_and_unknown_layout():
    """Layouts parse case-insensitively; an unknown string lists the accepted ones."""
    assert Layout.parse("nchw") is Layout.NCHW
    with pytest.raises(
        OptionError, match=r"unknown layout 'NCDHW'; expected one of 'NC', 'NCW', 'NWC', 'NCHW', 'NHWC'"
    ):
        decompose(nn.Conv1d(1, 1, 1), layout="NCDHW")


def test_groups_must_divide_channels_at_attach_and_at_plan():
    """groups that don't divide the channels are rejected when attached, or at plan time for classes."""
    with pytest.raises(SpecError, match=r"groups=3 does not divide the 4 input channels; expected a divisor of 4"):
        decompose(nn.Conv1d(4, 4, 3), groups=3)

    @decompose(groups=3, kernel_size=1)
    class Pointwise(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(SpecError, match=r"Pointwise: groups=3 does not divide the 4 input channels"):
        plan(Pointwise(), input_domain=D2, example_input=torch.zeros(1, 4, 3))


def test_fan_in_index_out_of_range():
    """A fan_in index beyond the module's inputs names the unit, the index and the range."""
    with pytest.raises(SpecError, match=r"fan_in\[1\] = \[2, 7\] indexes element 7, but the module has 4"):
        decompose(nn.Linear(4, 2), fan_in=[[0, 1], [2, 7]])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"groups": 0}, "groups must be a positive integer"),
        ({"groups": 2, "fan_in": [[0]]}, "not both"),
        ({"fan_in": [[0], [1]], "fan_out": [[0, 0], [1]]}, "repeats an output"),
        ({"fan_in": [[]]}, "is empty"),
        ({"fan_in": 5}, "list of integer lists"),
        ({"fan_in": "abc"}, "fan_in='abc' names no attribute"),
        ({"fan_in": "mask weights"}, "a dotted path of identifiers"),
        ({"fan_in": "training"}, "must be a tensor of shape"),
        ({"fan_in": "mask", "fan_out": [[0]]}, "a mask gives each output its own unit"),
        ({"fan_out": [[0]]}, "needs fan_in="),
        ({"fan_in": [[0], [1]], "fan_out": [[0]]}, "lists 2 units but fan_out lists 1"),
        ({"kernel_size": 0}, "kernel_size must be an integer >= 1"),
        ({"stride": 2}, "give kernel_size= too"),
        ({"layout": "NC", "kernel_size": 3}, "has no spatial axis"),
        ({"output_domain": 3}, "must be an iotable.Domain"),
    ],
)
def test_malformed_metadata(kwargs, words):
    """Malformed metadata is rejected when attached, with what was expected."""
    with pytest.raises(SpecError, match=words):
        decompose(nn.Identity(), **kwargs)


def test_decompose_rejects_non_modules():
    """Only torch.nn.Module instances and subclasses can be decorated."""
    with pytest.raises(SpecError, match="expected a torch.nn.Module instance or subclass, received int"):
        decompose(3)


def test_undecorated_custom_module_and_multi_layer_sequential():
    """Modules with no rule say how to decorate them."""

    class Custom(nn.Module):
        def forward(self, x):
            return x

    assert not has_spec(Custom()) and has_spec(nn.ReLU())
    with pytest.raises(NotDecomposedError, match="Custom has no decomposition metadata .* iotable.decompose"):
        spec_of(Custom())
    with pytest.raises(NotDecomposedError, match=r"nn.Sequential\(Linear, ReLU, Linear\) is not one table layer"):
        spec_of(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)))


def test_probe_catches_metadata_that_omits_an_input():
    """A unit that reads an input outside its declared fan-in is reported with the unit and the input."""

    class Leaky(nn.Module):
        def forward(self, x):
            return torch.stack([x[:, 0] + x[:, 1], x[:, 1] * 2], dim=1)

    module = decompose(Leaky(), fan_in=[[0], [1]])
    with pytest.raises(
        SpecMismatchError, match=r"unit 0 \(output 0\) changed when input 1 changed.*fan-in as input channel\(s\) \[0\]"
    ):
        precompute(module, input_domain=D2, example_input=torch.zeros(1, 2))


class Wrapped(nn.Module):
    """A user's module around a convolution: iotable sees only its forward, not the convolution's settings."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x)


def test_probe_catches_a_too_small_kernel():
    """A module declared with a smaller kernel than it reads (and as many outputs) is caught by the probe."""
    conv = decompose(
        Wrapped(nn.Conv1d(2, 2, 3, groups=2, padding=1, bias=False)), groups=2, kernel_size=2, padding=((0, 1),)
    )
    with pytest.raises(
        SpecMismatchError,
        match=r"unit 0 \(output channel 0 at position \(1,\)\) changed when input channel 0 at position \(0,\)",
    ):
        precompute(conv, input_domain=D2, example_input=torch.zeros(1, 2, 4))


class NanWhereZero(nn.Module):
    """Output k is x_k / x_k: NaN wherever input k is 0, 1 elsewhere; it reads nothing else."""

    def forward(self, x):
        return x / x


def test_probe_treats_nan_that_stays_nan_as_unchanged():
    """An output that is NaN before and after a perturbation of another input did not change."""
    module = decompose(NanWhereZero(), fan_in=[[k] for k in range(4)])
    check_decomposition(module, plan(module, input_domain=D2, example_input=torch.zeros(1, 4)))


def test_nan_in_one_output_does_not_hide_a_leak_in_another():
    """A NaN output widens no tolerance: a raw float leak beside it is still found."""

    class NanBesideLeak(nn.Module):
        def forward(self, x):
            return torch.cat([x[:, :1] / x[:, :1], x[:, 1:] + 0.5 * x[:, :1]], dim=1)

    module = decompose(NanBesideLeak(), fan_in=[[k] for k in range(4)])
    layer = plan(module, input_domain=D2, example_input=torch.zeros(1, 4))
    with pytest.raises(SpecMismatchError, match=r"changed when input 0 changed"):
        check_decomposition(module, layer)


@pytest.mark.parametrize("memory_budget", [1, 2**28])
def test_probe_finds_a_leak_whatever_the_chunking(memory_budget):
    """A leak into one far input is found with one probed element per forward and with all of them at once."""

    class FarLeak(nn.Module):
        def forward(self, x):
            return x + x[:, -1:] * (torch.arange(x.shape[1]) == 3)

    module = decompose(FarLeak(), fan_in=[[k] for k in range(40)])
    layer = plan(module, input_domain=D2, example_input=torch.zeros(1, 40))
    with pytest.raises(SpecMismatchError, match=r"unit 3 \(output 3\) changed when input 39 changed"):
        check_decomposition(module, layer, memory_budget=memory_budget)


def test_declared_window_that_does_not_fit_the_output():
    """A declared receptive field that implies more outputs than the module makes is an error."""
    conv = decompose(Wrapped(nn.Conv1d(2, 2, 3, groups=2)), groups=2, kernel_size=2)
    with pytest.raises(
        SpecError, match=r"gives outputs of spatial size \(3,\) .* but the module's output has spatial size \(2,\)"
    ):
        precompute(conv, input_domain=D2, example_input=torch.zeros(1, 2, 4))


def test_probe_catches_cross_group_reads():
    """A dense convolution declared as grouped is caught: outputs read other groups' channels."""
    conv = decompose(nn.Conv1d(2, 2, 1, bias=False), groups=2)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    with pytest.raises(
        SpecMismatchError, match=r"unit 1 \(output channel 1 at position \(0,\)\) changed when input channel 0"
    ):
        precompute(conv, input_domain=D2)


def test_too_large_table_raised_before_any_work():
    """A table above the limit is an error naming layer, unit, fan-in, bits and rows, before any forward."""
    lin = nn.Linear(30, 1)
    calls = []
    lin.register_forward_hook(lambda *args: calls.append(1))
    with pytest.raises(
        TableTooLargeError,
        match=r"Linear: unit 0 reads 30 inputs .* of 1 bit\(s\) = 30 bits, a table of 1073741824 rows; the limit is 16777216 .* Decompose finer",
    ):
        precompute(lin, input_domain=Domain.uniform(1))
    assert calls == []
    with pytest.raises(TableTooLargeError, match="limit is 8"):
        plan(nn.Linear(4, 1), input_domain=Domain.uniform(1), max_rows=8)


def test_missing_shape_asks_for_example_input():
    """A custom module that cannot state its input shape asks for example_input."""
    module = decompose(nn.Sequential(nn.ReLU()), groups=1)
    with pytest.raises(SpecError, match="pass example_input="):
        plan(module, input_domain=D2)


def test_output_domain_mismatch_is_reported():
    """A declared output domain the module's outputs don't belong to is an error naming the unit."""
    module = decompose(nn.Linear(2, 1), output_domain=Domain.uniform(1))
    with torch.no_grad():
        module.weight.fill_(0.3)
    from iotable.errors import EnumerationError

    with pytest.raises(
        EnumerationError, match=r"Linear: unit\(s\) \[0\].*is not in Domain.uniform\(1\).*output_domain="
    ):
        precompute(module, input_domain=D2)


def test_quantizer_at_the_end_sets_output_domain():
    """Tables of a block that ends in Quantize hold codes of its domain."""
    block = decompose(nn.Sequential(nn.Linear(2, 2), Quantize(3, signed=True, scale=0.5)))
    result = precompute(block, input_domain=D2)
    assert result.tables[0].output_domain == Domain.uniform(3, signed=True, scale=0.5)
    assert "Sequential" in result.summary() and "rows" in result.summary()


class RareRead(nn.Module):
    """Output 0 is input 3 when inputs 0-2 all sit at their top code, else input 0; output k > 0 is input k."""

    def forward(self, x):
        top = (x[:, :3] == 3).all(dim=1, keepdim=True)
        return torch.cat([torch.where(top, x[:, 3:4], x[:, :1]), x[:, 1:]], dim=1)


def test_probe_catches_a_read_only_at_the_top_corner():
    """A fan-in that omits an input read only when three others sit at their top code is refused before any table."""
    module = decompose(RareRead(), fan_in=[[0, 1, 2], [3], [4], [5]], fan_out=[[0, 1, 2], [3], [4], [5]])
    calls = []
    module.register_forward_hook(lambda *args: calls.append(args[1][0].shape[0]))
    with pytest.raises(SpecMismatchError, match=r"unit 0 \(output 0\) changed when input 3 changed"):
        precompute(module, input_domain=D2, example_input=torch.zeros(1, 6))
    assert 4**3 not in calls  # refused before the 64 rows of unit 0's table were enumerated


def test_probe_passes_the_read_at_the_top_corner_when_declared():
    """The same module with input 3 in unit 0's fan-in passes, and its table is the module's at every row."""
    module = decompose(RareRead(), fan_in=[[0, 1, 2, 3], [4], [5]], fan_out=[[0, 1, 2, 3], [4], [5]])
    result = precompute(module, input_domain=D2, example_input=torch.zeros(1, 6))
    assert [t.fan_in for t in result.tables] == [4, 1, 1]


def test_probe_catches_an_index_shift_at_one_value():
    """The issue's gather, whose positions move only when four inputs sit at one value, is caught by the probe."""

    class Shift(nn.Module):
        def forward(self, x):
            index = torch.arange(6).expand(x.shape[0], 6) + (x[:, :4] == 1.5).all(1, keepdim=True).long()
            return torch.gather(torch.cat([x, x[:, :1]], dim=1), 1, index)

    module = decompose(Shift(), fan_in=[[k] for k in range(6)])
    with pytest.raises(SpecMismatchError, match=r"changed when input \d changed"):
        check_decomposition(
            module, plan(module, input_domain=Domain.uniform(2, scale=0.5), example_input=torch.zeros(1, 6))
        )
