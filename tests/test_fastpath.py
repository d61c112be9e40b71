"""The linear and convolution fast paths give exactly the tables of the black-box path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import nn
from torch.nn.utils import prune

import iotable.tabulate.affine as affine
import iotable.tabulate.fastpath as fastpath
from iotable import Domain, decompose, plan, precompute, verify
from iotable.errors import SpecMismatchError
from iotable.nn import Quantize

from .strategies import TAILS, fast_path_layers

U3 = Domain.uniform(3, scale=0.25)


def random_norm_(norm: nn.Module, gen: torch.Generator) -> nn.Module:
    """Running statistics and affine parameters as after training, negative gains included."""
    with torch.no_grad():
        norm.running_mean.copy_(torch.rand(norm.running_mean.shape, generator=gen) - 0.5)
        norm.running_var.copy_(0.5 + 1.5 * torch.rand(norm.running_var.shape, generator=gen))
        norm.weight.copy_(4 * torch.rand(norm.weight.shape, generator=gen) - 2)
        norm.bias.copy_(torch.rand(norm.bias.shape, generator=gen) - 0.5)
    return norm


def tail_modules(names, channels: int, gen: torch.Generator, *, rank: int = 0) -> list[nn.Module]:
    """The elementwise modules named in ``names`` (see ``strategies.TAILS``) for ``channels`` channels."""
    norm = nn.BatchNorm2d if rank == 2 else nn.BatchNorm1d
    make = {
        "bn": lambda: random_norm_(norm(channels), gen),
        "relu": nn.ReLU,
        "relu6": nn.ReLU6,
        "hardtanh": lambda: nn.Hardtanh(-0.75, 1.25),
        "identity": nn.Identity,
        "dropout": lambda: nn.Dropout(0.5),
        "sigmoid": nn.Sigmoid,
        "tanh": nn.Tanh,
        "leaky": lambda: nn.LeakyReLU(0.125),
    }
    return [make[n]() for n in names]


def sparse_block(fan_in, n_in, *, seed=0, tail=None, scale=1.0):
    torch.manual_seed(seed)
    lin = nn.Linear(n_in, len(fan_in))
    with torch.no_grad():
        lin.weight.mul_(scale)
    mask = torch.zeros(len(fan_in), n_in)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(lin, "weight", mask)
    bn = random_norm_(nn.BatchNorm1d(len(fan_in)), torch.Generator().manual_seed(seed))
    modules = tail if tail is not None else [bn, nn.ReLU(), Quantize(3, scale=0.25)]
    return decompose(nn.Sequential(lin, *modules), fan_in=fan_in).eval()


def both_ways(block, domain, **options):
    fast = precompute(block, input_domain=domain, **options)
    slow = precompute(block, input_domain=domain, fast_path=False, **options)
    return fast, slow


FAN_IN = [[0, 1, 2, 3], [2, 4, 6, 7], [1, 3, 5], [0, 7, 6, 5], [4]]


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_black_box_on_random_float_weights(seed):
    """Random float weights, negative batch-norm gains, mixed fan-ins: identical tables both ways."""
    fast, slow = both_ways(sparse_block(FAN_IN, 8, seed=seed), U3)
    assert fast.method == "linear fast path" and slow.method == "black box"
    assert fast.tables == slow.tables


@pytest.mark.parametrize("names", [tail for tail in TAILS if tail], ids="-".join)
@pytest.mark.parametrize("signed", [False, True])
def test_every_tail_gives_the_black_box_tables(names, signed):
    """Affine tails (batch norm and clamps, in any order) and other monotone tails, signed or not."""
    gen = torch.Generator().manual_seed(len(names) + 10 * signed)
    quantizer = Quantize(3, signed=signed, scale=0.25, zero_point=1 if signed else 0)
    block = sparse_block(FAN_IN, 8, seed=7, tail=[*tail_modules(names, 5, gen), quantizer], scale=3.0)
    fast, slow = both_ways(block, U3)
    assert fast.method == "linear fast path"
    assert fast.tables == slow.tables


def test_a_zero_batch_norm_gain_gives_constant_codes():
    """A channel whose batch-norm weight is 0 has one code for every row, as the module computes."""
    block = sparse_block([[0, 1], [1, 2]], 3, seed=2)
    with torch.no_grad():
        block[1].weight[0] = 0.0
    fast, slow = both_ways(block, U3)
    assert fast.tables == slow.tables
    assert len(np.unique(fast.tables[0].outputs)) == 1


def test_rows_on_a_rounding_boundary_go_through_the_module():
    """Pre-activations exactly on a half-step boundary are counted and computed by the module itself."""
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.fill_(0.5)  # inputs are integers: sums land on .5 boundaries of a unit-step quantizer
        lin.bias.zero_()
    block = decompose(nn.Sequential(lin, Quantize(3)), fan_in=[[0, 1]])
    fast, slow = both_ways(block, Domain.uniform(3))
    assert fast.near_ties > 0
    assert fast.tables == slow.tables


def test_signed_and_per_channel_input_domains():
    """Signed inputs and inputs with different domains per channel take the fast path and stay exact."""
    block = sparse_block([[0, 1], [1, 2], [2, 0]], 3, seed=5, tail=[nn.Hardtanh(), Quantize(2, signed=True, scale=0.5)])
    domains = [Domain.uniform(2, signed=True), Domain.values([-1.0, 0.25, 3.0]), Domain.uniform(1)]
    fast, slow = both_ways(block, domains)
    assert fast.method == "linear fast path"
    assert fast.tables == slow.tables


def test_wide_output_codes():
    """Outputs of more than 256 codes (uint16) come out of the fixed-point kernel too."""
    block = sparse_block([[0, 1, 2], [1, 2, 3]], 4, seed=3, tail=[Quantize(9, signed=True, scale=1 / 64)], scale=4.0)
    fast, slow = both_ways(block, U3)
    assert fast.tables[0].outputs.dtype == np.uint16
    assert fast.tables == slow.tables


@pytest.mark.parametrize(
    "conv",
    [
        lambda: nn.Conv1d(3, 3, 3, groups=3, padding=1),  # depthwise
        lambda: nn.Conv1d(2, 4, 2, stride=2, dilation=2),
        lambda: nn.Conv2d(3, 3, 3, groups=3, padding=1, stride=2),  # depthwise, strided
        lambda: nn.Conv2d(4, 6, 1, groups=2),  # grouped pointwise
        lambda: nn.Conv2d(2, 2, 2, bias=False),
    ],
    ids=["depthwise-1d", "dilated-1d", "depthwise-2d", "grouped-pointwise", "no-bias"],
)
def test_convolutions_take_the_conv_fast_path(conv):
    """Convolutions with batch norm and a quantizer: one table per output channel, equal to the black box."""
    torch.manual_seed(0)
    conv = conv()
    rank = conv.weight.dim() - 2
    gen = torch.Generator().manual_seed(1)
    tail = tail_modules(("bn", "relu"), conv.out_channels, gen, rank=rank)
    block = decompose(nn.Sequential(conv, *tail, Quantize(2, scale=0.5)).eval())  # one layer, not a model
    example = torch.zeros((1, conv.in_channels) + (6,) * rank)
    fast, slow = both_ways(block, Domain.uniform(2, signed=True), example_input=example)
    assert fast.method == "conv fast path" and slow.method == "black box"
    assert fast.tables == slow.tables


def test_convolution_ties_go_through_the_module():
    """A convolution whose sums land on half steps: the ties go through the module, as the black box."""
    conv = nn.Conv1d(1, 1, 2, bias=False)
    with torch.no_grad():
        conv.weight.fill_(0.5)
    block = decompose(nn.Sequential(conv, Quantize(3)))
    fast, slow = both_ways(block, Domain.uniform(3), example_input=torch.zeros(1, 1, 5))
    assert fast.method == "conv fast path" and fast.near_ties > 0
    assert fast.tables == slow.tables


def test_tables_larger_than_the_memory_budget_are_streamed():
    """Under a budget smaller than one table, the codes are built in row segments into files, unchanged."""
    block = sparse_block([[0, 1, 2, 3, 4, 5]], 6, seed=4)
    whole = precompute(block, input_domain=U3)
    streamed = precompute(block, input_domain=U3, memory_budget=64 * 1024)
    assert isinstance(streamed.tables[0].outputs, np.memmap)
    assert whole.tables == streamed.tables


def test_a_wrong_analytic_tail_is_caught_before_use(monkeypatch):
    """If the analytic model of the tail disagreed with the modules, the both-ends path would be used."""
    block = sparse_block(FAN_IN, 8, seed=1)
    real = affine._affine_tail

    def shifted(*args, **kwargs):
        tail = real(*args, **kwargs)
        return None if tail is None else affine._AffineTail(**{**vars(tail), "offset": tail.offset + 0.3})

    calls = []
    original_two_ends = fastpath._two_ends
    monkeypatch.setattr(affine, "_affine_tail", shifted)
    monkeypatch.setattr(fastpath, "_two_ends", lambda *a, **k: calls.append(1) or original_two_ends(*a, **k))
    fast = precompute(block, input_domain=U3)
    assert calls, "the shifted tail was not rejected"
    assert fast.tables == precompute(block, input_domain=U3, fast_path=False).tables


def test_whole_model_layers_use_the_fast_path():
    """In a whole model every sparse linear layer takes the fast path, and the network stays bit exact."""
    first, second = sparse_block(FAN_IN, 8, seed=1), sparse_block([[0, 1], [2, 3], [3, 4]], 5, seed=2)
    for block in (first, second):  # the metadata goes on the Linear, which the model holds directly
        decompose(block[0], fan_in=iotable_fan_in(block))
    model = nn.Sequential(*first, *second).eval()
    net = precompute(model, input_domain=U3, example_input=torch.zeros(1, 8))
    assert {layer.method for layer in net.layers.values()} == {"linear fast path"}
    x = torch.tensor(U3.values, dtype=torch.float32)[torch.randint(0, 8, (256, 8))]
    assert verify(model, net, x).ok


def iotable_fan_in(block):
    from iotable import spec_of

    return [list(unit) for unit in spec_of(block).fan_in]


@pytest.mark.parametrize(
    "block",
    [
        decompose(nn.Sequential(nn.Linear(3, 2), nn.ReLU()), fan_in=[[0, 1, 2]] * 2),  # raw outputs
        decompose(nn.Sequential(nn.Linear(3, 2), nn.GELU(), Quantize(2)), fan_in=[[0, 1, 2]] * 2),  # not monotone
        decompose(nn.Sequential(nn.Conv1d(2, 2, 1), nn.GELU(), Quantize(2))),  # not monotone
        decompose(nn.Sequential(nn.Linear(3, 2).double(), Quantize(2)), fan_in=[[0, 1, 2]] * 2),  # float64
    ],
    ids=["raw-outputs", "non-monotone-tail", "non-monotone-conv", "float64"],
)
def test_other_layers_take_the_black_box_path(block):
    """Layers the fast path cannot prove exact are enumerated as black boxes."""
    example = torch.zeros(1, 3) if isinstance(block[0], nn.Linear) else torch.zeros(1, 2, 4)
    try:
        result = precompute(block, input_domain=Domain.uniform(1), example_input=example, check=False)
    except Exception as exc:  # the float64 block cannot run on float32 codes with a float32 quantizer
        assert "forward failed" in str(exc)
        return
    assert result.method == "black box"


def test_forward_hooks_and_reduced_precision_turn_the_fast_path_off():
    """A forward hook, or float32 products allowed to run in lower precision, leave layers to the black box."""
    block = sparse_block(FAN_IN, 8, seed=1)
    handle = block[2].register_forward_hook(lambda m, i, o: o)
    try:
        assert precompute(block, input_domain=U3).method == "black box"
    finally:
        handle.remove()
    torch.set_float32_matmul_precision("medium")
    try:
        assert precompute(block, input_domain=U3).method == "black box"
    finally:
        torch.set_float32_matmul_precision("highest")
    assert precompute(block, input_domain=U3).method == "linear fast path"


def test_batch_norm_without_running_statistics_is_not_trusted():
    """Batch norm that normalizes with batch statistics even in eval is not a per-unit function."""
    block = sparse_block([[0, 1], [1, 2]], 3, seed=2)
    layer = plan(block, input_domain=U3)
    assert fastpath.recognize(block, layer) is not None
    block[1].running_mean = block[1].running_var = None
    assert fastpath.recognize(block, layer) is None


def test_undeclared_nonzero_weight_is_not_trusted():
    """With the probe off, a weight outside the declared fan-in makes the fast path step aside."""
    lin = nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, 0.5, 2.0]]))  # input 2, left out of the fan-in, moves the code
        lin.bias.zero_()
    block = decompose(nn.Sequential(lin, Quantize(2)), fan_in=[[0, 1]])
    result = precompute(block, input_domain=Domain.uniform(1), check=False)
    assert result.method == "black box"
    assert np.array_equal(
        result.tables[0].outputs,
        precompute(block, input_domain=Domain.uniform(1), check=False, fast_path=False).tables[0].outputs,
    )
    with pytest.raises(SpecMismatchError):  # and the probe, which the fast path would have skipped, objects
        precompute(block, input_domain=Domain.uniform(1))


def test_units_sharing_inputs_keep_their_own_outputs():
    """Units listed out of channel order (two units read the same input) still get their own columns."""
    block = sparse_block([[0], [1], [0]], 2, seed=3, tail=[Quantize(3, signed=True, scale=0.25)])
    fast, slow = both_ways(block, Domain.uniform(1))
    assert fast.method == "linear fast path"
    assert fast.tables == slow.tables


def build_layer(config) -> tuple[nn.Module, torch.Tensor | None]:
    """The module a :func:`strategies.fast_path_layers` configuration describes, and its example input."""
    gen = torch.Generator().manual_seed(config["seed"])
    if config["head"] == "linear":
        n_in, fan_in = config["n_in"], config["fan_in"]
        head = nn.Linear(n_in, len(fan_in))
        mask = torch.zeros(len(fan_in), n_in)
        for k, idx in enumerate(fan_in):
            mask[k, idx] = 1
        with torch.no_grad():
            head.weight.copy_(2 * torch.rand(head.weight.shape, generator=gen) - 1)
        prune.custom_from_mask(head, "weight", mask)
        rank, example, spec = 0, None, {"fan_in": fan_in}
    else:
        rank = 2 if config["head"] == "conv2d" else 1
        conv = nn.Conv2d if rank == 2 else nn.Conv1d
        groups = config["groups"]
        head = conv(
            groups * config["in_per_group"],
            groups * config["out_per_group"],
            config["kernel"],
            stride=config["stride"],
            padding=config["padding"],
            groups=groups,
        )
        with torch.no_grad():
            head.weight.copy_(2 * torch.rand(head.weight.shape, generator=gen) - 1)
        example, spec = torch.zeros((1, head.in_channels) + (5,) * rank), {}
    channels = head.weight.shape[0]
    quantizer = Quantize(
        config["bits"],
        signed=config["signed"],
        narrow=config["narrow"],
        scale=config["scale"],
        zero_point=config["zero_point"],
    )
    modules = [head, *tail_modules(config["tail"], channels, gen, rank=rank), quantizer]
    return decompose(nn.Sequential(*modules).eval(), **spec), example


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=fast_path_layers())
def test_random_layers_fast_path_equals_black_box(config):
    """Any small linear or convolutional layer with any tail: the fast path gives the black-box tables."""
    block, example = build_layer(config)
    fast, slow = both_ways(block, config["domain"], example_input=example)
    assert fast.method.endswith("fast path")
    assert fast.tables == slow.tables
