"""Models as the field writes them: neuron modules that quantize inside forward, pruning masks, torch.ao fake
quantizers, average pooling and traced arithmetic come out bit-exact, or are refused by name before any work."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.ao.quantization import (
    FakeQuantize,
    FixedQParamsFakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    default_fixed_qparams_range_0to1_fake_quant,
    disable_observer,
)
from torch.nn.utils import prune

import iotable
from iotable import Domain, IOTableWarning, ModelError, decompose, precompute, verify
from iotable.errors import SpecError, UnsupportedFakeQuantizeError
from iotable.front import reuse
from iotable.nn import Quantize, domain_of
from iotable.tabulate.cache import layer_fingerprint

from .oracle import assert_tables_match
from .test_network import assert_bit_exact, random_inputs

U2 = Domain.uniform(2, scale=0.5)


def random_mask(outputs: int, inputs: int, fan_in: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(outputs, inputs)
    for k in range(outputs):
        mask[k, torch.randperm(inputs, generator=gen)[:fan_in]] = 1
    return mask


# -- neuron modules that quantize inside their own forward ------------------------------------------------


class MaskedNeuron(nn.Module):
    """A LogicNets-style neuron layer: masked linear, batch norm, and its output quantizer inside forward."""

    def __init__(self, inputs: int, outputs: int, *, fan_in: int, seed: int, bits: int = 2) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(inputs, outputs)
        self.bn = nn.BatchNorm1d(outputs)
        self.output_quant = Quantize(bits, scale=0.5)
        self.register_buffer("mask", random_mask(outputs, inputs, fan_in, seed))
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_quant(torch.relu(self.bn(nn.functional.linear(x, self.fc.weight * self.mask, self.fc.bias))))


@decompose(fan_in="mask", output_domain="output_quant")
class DecoratedNeuron(MaskedNeuron):
    """The same neuron, decorated once for its class: fan-ins from its mask, output domain from its quantizer."""


class Looped(nn.Module):
    """Neuron layers in a ModuleList applied in a loop, as LogicNets' models are written."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.input_quant = Quantize(2, scale=0.5)
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_quant(x)
        for layer in self.layers:
            x = layer(x)
        return x


def test_chained_neurons_with_internal_quantizers_are_bit_exact():
    """A Sequential of neuron modules declared with fan_in and output_domain is a table network, last codes too."""
    layers = [
        MaskedNeuron(10, 8, fan_in=3, seed=0),
        MaskedNeuron(8, 6, fan_in=3, seed=1),
        MaskedNeuron(6, 4, fan_in=2, seed=2),
    ]
    for layer in layers:
        fan_in = [tuple(row.nonzero().flatten().tolist()) for row in layer.mask]
        decompose(layer, fan_in=fan_in, output_domain=layer.output_quant.domain)
    model = nn.Sequential(Quantize(2, scale=0.5), *layers).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 10))
    # The input quantizer maps U2 onto itself: the network's input format, not a table layer.
    assert [n.name for n in net.graph.nodes_of("table")] == ["1", "2", "3"]
    assert net.output_node.domain == layers[-1].output_quant.domain
    x = random_inputs(U2, (10,), n=512)
    assert_bit_exact(model, net, x)
    codes = net.run(x, return_codes=True)
    np.testing.assert_array_equal(codes.numpy(), U2.encode(model(x).detach().numpy()))


def test_class_decorated_neurons_in_a_module_list_loop():
    """Neurons decorated for their class (fan_in='mask', output_domain='output_quant') chain in a loop."""
    model = Looped([DecoratedNeuron(12, 8, fan_in=3, seed=3), DecoratedNeuron(8, 5, fan_in=4, seed=4)]).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    plan = net["layers.0"].plan
    assert [u.in_channels for u in plan.units] == [tuple(r.nonzero().flatten().tolist()) for r in model.layers[0].mask]
    assert "fan-ins from 'mask'" in plan.spec.source
    assert_bit_exact(model, net, random_inputs(U2, (12,), n=512))


def test_neuron_tables_equal_the_module_exhaustively():
    """Every row of every unit of a decorated neuron module equals the module's own output (the oracle)."""
    neuron = DecoratedNeuron(6, 4, fan_in=3, seed=5).eval()
    result = precompute(neuron, input_domain=U2, example_input=torch.zeros(1, 6))
    assert result.plan.output_domain == neuron.output_quant.domain
    assert_tables_match(result, neuron, domain=U2, in_shape=(6,))


def test_a_changed_mask_is_read_again():
    """The plan follows the mask as it is now: a new mask gives new fan-ins on the next call."""
    model = Looped([DecoratedNeuron(8, 4, fan_in=2, seed=6)]).eval()
    first = precompute(model, input_domain=U2, example_input=torch.zeros(1, 8))
    with torch.no_grad():
        model.layers[0].mask.copy_(random_mask(4, 8, 3, seed=7))
    second = precompute(model, input_domain=U2, example_input=torch.zeros(1, 8))
    assert first["layers.0"].plan.units != second["layers.0"].plan.units
    assert second["layers.0"].plan.units[0].fan_in == 3
    assert_bit_exact(model, second, random_inputs(U2, (8,)))


def test_output_domain_naming_no_quantizer_is_refused():
    """output_domain= naming a module that is not a quantizer says what it names and what to pass."""
    neuron = MaskedNeuron(4, 2, fan_in=2, seed=0)
    with pytest.raises(SpecError, match=r"output_domain='fc' names a Linear, which is not a quantizer"):
        decompose(neuron, fan_in="mask", output_domain="fc")
    with pytest.raises(SpecError, match=r"output_domain='nothing' names no attribute"):
        decompose(MaskedNeuron(4, 2, fan_in=2, seed=0), output_domain="nothing")


# -- pruning masks are fan-ins ----------------------------------------------------------------------------


def test_pruned_linear_is_planned_from_its_mask():
    """A Linear pruned with torch.nn.utils.prune needs no decoration: each unit reads its mask row's inputs."""
    layer = nn.Linear(16, 6)
    prune.custom_from_mask(layer, "weight", random_mask(6, 16, 3, seed=1))
    model = nn.Sequential(Quantize(2, scale=0.5), layer, nn.BatchNorm1d(6), nn.ReLU(), Quantize(2, scale=0.5)).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 16))
    units = net["1"].plan.units
    assert [u.in_channels for u in units] == [tuple(r.nonzero().flatten().tolist()) for r in layer.weight_mask]
    assert {u.rows for u in units} == {4**3}
    assert_bit_exact(model, net, random_inputs(U2, (16,), n=512))
    with torch.no_grad():  # a new mask (as iterative pruning leaves it): a new plan
        layer.weight_mask.copy_(random_mask(6, 16, 2, seed=2))
    again = precompute(model, input_domain=U2, example_input=torch.zeros(1, 16))
    assert {u.fan_in for u in again["1"].plan.units} == {2}
    assert_bit_exact(model, again, random_inputs(U2, (16,)))


def test_pruned_convolution_reads_the_channels_its_mask_keeps():
    """A pruned grouped convolution: each output channel reads the channels of its group its mask keeps."""
    conv = nn.Conv1d(4, 6, 3, padding=1, groups=2)
    prune.random_unstructured(conv, "weight", amount=0.75)
    with torch.no_grad():
        conv.weight_mask[0].zero_()  # an output that reads nothing: a constant unit
    model = nn.Sequential(Quantize(2, scale=0.5), conv, Quantize(3, signed=True, scale=0.25)).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 4, 9))
    units = net["1"].plan.units
    assert units[0].in_channels == (0,)
    for unit in units:
        group = unit.out_channels[0] // 3
        assert all(2 * group <= c < 2 * group + 2 for c in unit.in_channels)
    assert_bit_exact(model, net, random_inputs(U2, (4, 9), n=256))


def test_a_mask_row_of_zeros_reads_one_input():
    """An output whose mask is all zero gets a constant table over its group's first input."""
    layer = nn.Linear(5, 2)
    mask = torch.tensor([[0.0] * 5, [0.0, 1.0, 1.0, 0.0, 0.0]])
    prune.custom_from_mask(layer, "weight", mask)
    result = precompute(decompose(nn.Sequential(layer, Quantize(2)).eval()), input_domain=Domain.uniform(1))
    assert [u.in_channels for u in result.plan.units] == [(0,), (1, 2)]
    assert len(set(result[0].outputs.ravel().tolist())) == 1


# -- torch.ao fake quantizers -----------------------------------------------------------------------------


def observed(fq: nn.Module, data: torch.Tensor) -> nn.Module:
    """A fake quantizer after training: it has seen data, then its observer is disabled."""
    fq(data)
    fq.apply(disable_observer)
    return fq


@pytest.mark.parametrize("kind", [FakeQuantize, FusedMovingAvgObsFakeQuantize])
@pytest.mark.parametrize(("qmin", "qmax", "dtype"), [(0, 3, torch.quint8), (-4, 3, torch.qint8), (0, 5, torch.quint8)])
def test_fake_quantize_is_a_quantizer(kind, qmin, qmax, dtype):
    """A frozen per-tensor FakeQuantize cuts the model like Quantize, and the network is bit-exact."""
    gen = torch.Generator().manual_seed(qmax)

    def frozen(low: int, high: int, kind_dtype: torch.dtype, spread: float) -> nn.Module:
        quantizer = kind(observer=MovingAverageMinMaxObserver, quant_min=low, quant_max=high, dtype=kind_dtype)
        return observed(quantizer, torch.randn(256, generator=gen) * spread)

    inner, outer, last = frozen(-2, 1, torch.qint8, 1.0), frozen(qmin, qmax, dtype, 2.0), frozen(qmin, qmax, dtype, 1.0)
    model = nn.Sequential(inner, nn.Linear(6, 5), nn.ReLU(), outer, nn.Linear(5, 3), last).eval()
    domain = domain_of(outer)
    assert len(domain) == qmax - qmin + 1
    assert torch.equal(
        outer(torch.tensor(domain.values, dtype=torch.float32)), torch.tensor(domain.values, dtype=torch.float32)
    )
    net = precompute(model, input_domain=domain_of(inner), example_input=torch.zeros(1, 6))
    assert len(net.layers) == 2 and net.output_node.domain is not None  # ``inner`` is the input format
    assert_bit_exact(model, net, random_inputs(domain_of(inner), (6,), n=512))


def test_fixed_parameter_fake_quantize_needs_no_disabling():
    """A FixedQParamsFakeQuantize has fixed parameters, so its enabled observer changes nothing."""
    fq = default_fixed_qparams_range_0to1_fake_quant()
    domain = domain_of(fq)
    assert len(domain) == 256 and domain.values[1] == pytest.approx(1 / 256)
    assert isinstance(fq, FixedQParamsFakeQuantize)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=3),
            "observer is still enabled",
        ),
        (
            lambda: observed(
                FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=3), torch.randn(8)
            ).apply(torch.ao.quantization.disable_fake_quant),
            "fake quantization is disabled",
        ),
        (
            lambda: observed(
                FakeQuantize(
                    observer=MovingAveragePerChannelMinMaxObserver,
                    quant_min=0,
                    quant_max=3,
                    ch_axis=1,
                    qscheme=torch.per_channel_affine,
                ),
                torch.randn(8, 4),
            ),
            "per-tensor fake quantizers",
        ),
    ],
    ids=["observing", "disabled", "per-channel"],
)
def test_unusable_fake_quantizers_are_refused_by_name(make, words):
    """A fake quantizer still observing, disabled or per channel is named with its model path and the fix."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Linear(4, 4), make()).eval()
    with pytest.raises(UnsupportedFakeQuantizeError, match=words) as info:
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 4))
    assert str(info.value).startswith("2: this ")
    assert "data-dependent" not in str(info.value)


# -- average pooling ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "shape"),
    [
        (nn.AvgPool1d(2), (3, 8)),
        (nn.AvgPool1d(3, stride=2, padding=1), (2, 9)),
        (nn.AvgPool2d(2), (2, 6, 6)),
        (nn.AvgPool2d(3, stride=2, padding=1), (2, 7, 7)),
        (nn.AvgPool2d((2, 3), stride=(1, 2), divisor_override=4), (1, 5, 7)),
    ],
    ids=["1d", "1d-strided-padded", "2d", "2d-strided-padded", "2d-divisor"],
)
def test_average_pool_between_quantizers_is_a_table_per_window(pool, shape):
    """An average pool of quantized codes followed by a quantizer: one unit per channel over its window."""
    model = nn.Sequential(Quantize(2, scale=0.5), pool, Quantize(3, scale=0.25)).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, *shape))
    plan = net["1"].plan
    assert len(plan.units) == shape[0] and all(u.in_channels == u.out_channels for u in plan.units)
    assert plan.units[0].fan_in == plan.geometry.window
    assert_bit_exact(model, net, random_inputs(U2, shape, n=256))


def test_average_pool_tables_equal_the_module_exhaustively():
    """Every row of an average-pool layer's tables equals the module at an inner position (the oracle)."""
    block = decompose(nn.Sequential(nn.AvgPool2d(2, stride=1), Quantize(3, scale=0.25)).eval())
    result = precompute(block, input_domain=U2, example_input=torch.zeros(1, 2, 4, 4))
    assert_tables_match(result, block, domain=U2, in_shape=(2, 4, 4), layout="NCHW", positions=((1, 1),))


@pytest.mark.parametrize(
    ("model", "error", "words"),
    [
        (
            lambda: nn.Sequential(Quantize(2), nn.AvgPool1d(2), nn.Flatten(), nn.Linear(8, 2)),
            ModelError,
            "flatten reads an unquantized tensor",
        ),
        (lambda: nn.Sequential(Quantize(2), nn.AvgPool1d(2)), ModelError, "put a quantizer after 1"),
        (
            lambda: nn.Sequential(Quantize(2), nn.Conv1d(2, 2, 1), nn.AvgPool1d(2), Quantize(2)),
            ModelError,
            "average pooling reads the unquantized output of 1; put a quantizer after 1",
        ),
        (
            lambda: nn.Sequential(Quantize(2), nn.AvgPool1d(3, padding=1, count_include_pad=False), Quantize(2)),
            SpecError,
            "count_include_pad=False.*use count_include_pad=True or padding=0",
        ),
    ],
    ids=["then-flatten", "at-the-output", "after-a-layer", "count-include-pad"],
)
def test_average_pools_that_no_table_holds_are_refused(model, error, words):
    """An average no quantizer follows, or one whose edge windows differ, says where to put a quantizer."""
    with pytest.raises(error, match=words):
        precompute(model().eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 2, 8))


# -- arithmetic with the model's parameters in traced glue --------------------------------------------------


class ScaledOutput(nn.Module):
    """LogicNets' post-transform: a learned per-channel scale and bias on a layer's output, then a quantizer."""

    def __init__(self, rank: int = 0) -> None:
        super().__init__()
        torch.manual_seed(rank)
        self.input_quant = Quantize(2, scale=0.5)
        self.layer = nn.Linear(6, 4) if rank == 0 else nn.Conv1d(3, 4, 3)
        shape = (4,) if rank == 0 else (4, 1)
        self.scale = nn.Parameter(torch.randn(shape))
        self.bias = nn.Parameter(torch.randn(()))
        self.output_quant = Quantize(3, signed=True, scale=0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer(self.input_quant(x)) * self.scale + self.bias
        y = self.output_quant(0.5 - y / 2.0)
        return y * self.scale  # a fan-in-1 table after the quantizer, with raw outputs


@pytest.mark.parametrize(("rank", "shape"), [(0, (6,)), (1, (3, 7))], ids=["linear", "conv"])
def test_arithmetic_with_parameters_fuses_into_tables(rank, shape):
    """x * scale + bias, 0.5 - x, x / 2 on quantized layers fuse into their tables and stay bit-exact."""
    model = ScaledOutput(rank).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, *shape))
    assert list(net.layers) == ["layer", "mul_1"]  # input_quant maps U2 onto itself: the input format
    assert_bit_exact(model, net, random_inputs(U2, shape, n=256))
    with torch.no_grad():  # the glue reads the parameters as they are now
        model.scale.mul_(-1.5)
    assert_bit_exact(
        model, precompute(model, input_domain=U2, example_input=torch.zeros(1, *shape)), random_inputs(U2, shape)
    )


class PerPosition(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q0, self.conv, self.q1 = Quantize(2), nn.Conv1d(2, 2, 1), Quantize(2)
        self.offset = nn.Parameter(torch.zeros(2, 8))

    def forward(self, x):
        return self.q1(self.conv(self.q0(x)) + self.offset)


def test_arithmetic_that_varies_by_position_is_refused_by_name():
    """A parameter that differs across positions is no elementwise table: the message names it and its owner."""
    with pytest.raises(
        ModelError, match=r"add by the tensor 'offset' \(of the model, a PerPosition\) has shape \(2, 8\)"
    ):
        precompute(PerPosition().eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 2, 8))


class Custom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 3))

    def forward(self, x):
        return x @ self.w if x.sum() > 0 else x[:, :3]


def test_an_undecorated_custom_module_is_named_by_its_class():
    """A layer of the user's own whose units cannot be inferred (its forward decides on its input) is refused
    by its path and class, not a torch.fx node such as '1.w', with the fix."""
    model = nn.Sequential(Quantize(2), Custom(), Quantize(2)).eval()
    with pytest.raises(SpecError, match=r"^1 \(Custom\): its forward reads back a value.*iotable\.decompose"):
        precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))


# -- one key for the cache and plan reuse ------------------------------------------------------------------


def tailed(tail: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), tail, Quantize(2, signed=True, scale=0.25)).eval()


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (lambda: nn.LeakyReLU(0.01), lambda m: setattr(m[1], "negative_slope", 0.9)),
        (lambda: nn.Hardtanh(-1.0, 1.0), lambda m: setattr(m[1], "max_val", 0.3)),
        (lambda: nn.Hardtanh(-1.0, 1.0), lambda m: setattr(m[1], "min_val", -0.1)),
        (lambda: nn.Identity(), lambda m: decompose(m[0], fan_in=[[0, 1, 2], [0, 1, 2]])),
        (lambda: nn.Identity(), lambda m: m[2].__init__(3, signed=True, scale=0.25)),
    ],
    ids=["leaky-slope", "hardtanh-max", "hardtanh-min", "metadata", "quantizer-domain"],
)
def test_a_setting_change_changes_both_keys(tmp_path, make, change):
    """A module setting the rows depend on changes the cache key and the plan-reuse key alike: no stale tables."""
    model = tailed(make())
    example = torch.zeros(1, 3)
    first = precompute(model, input_domain=Domain.uniform(2), example_input=example, cache_dir=tmp_path)
    key = reuse.structure_key(model, x=1)
    fingerprint = layer_fingerprint(model, first["0"].plan).hexdigest()
    change(model)
    assert reuse.structure_key(model, x=1) != key
    assert layer_fingerprint(model, first["0"].plan).hexdigest() != fingerprint
    second = precompute(model, input_domain=Domain.uniform(2), example_input=example, cache_dir=tmp_path)
    assert second["0"].cached == ()
    assert_bit_exact(model, second, random_inputs(Domain.uniform(2), (3,)))


def test_an_unchanged_model_reloads_from_the_cache(tmp_path):
    """With nothing changed, the same key finds every table in the cache."""
    model = tailed(nn.LeakyReLU(0.2))
    precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3), cache_dir=tmp_path)
    again = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3), cache_dir=tmp_path)
    assert again["0"].method == "cache"


def test_the_cache_key_reads_traced_parameters(tmp_path):
    """Arithmetic glue's parameter is part of the cache key: changing it recomputes the layer."""
    model = ScaledOutput(0).eval()
    precompute(model, input_domain=U2, example_input=torch.zeros(1, 6), cache_dir=tmp_path)
    with torch.no_grad():
        model.bias.add_(0.75)
    again = precompute(model, input_domain=U2, example_input=torch.zeros(1, 6), cache_dir=tmp_path)
    # the layer reading the bias is tabulated again; glue traced from the model's own forward is keyed by the
    # model's tensors, so the layer after it may be too (keyed conservatively: never served stale)
    assert again["layer"].cached == ()
    assert_bit_exact(model, again, random_inputs(U2, (6,)))


# -- float types, training mode, messages ------------------------------------------------------------------


def test_float64_models_are_refused_with_the_fix():
    """A float64 model is refused by precompute and verify, naming a float64 tensor and model.float()."""
    model = nn.Sequential(Quantize(2), nn.Linear(4, 3), Quantize(2)).eval()
    net = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
    model.double()
    for call in (
        lambda: precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4)),
        lambda: verify(model, net, torch.zeros(2, 4)),
    ):
        with pytest.raises(ModelError, match=r"computes in torch\.float64 \(parameter '1\.weight'\).*model\.float\(\)"):
            call()


def test_training_mode_warns_and_names_the_modules():
    """A model left in training mode gets a warning naming its batch norm and dropout; in eval mode, none."""
    model = nn.Sequential(Quantize(2), nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Dropout(0.5), Quantize(2))
    with pytest.warns(
        IOTableWarning, match=r"training mode.*'2' \(BatchNorm1d.*'3' \(Dropout.*model\.eval\(\)"
    ) as record:
        net = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
    assert record[0].filename == __file__  # points at the caller's line
    with pytest.warns(IOTableWarning, match="^verify: the model is in training mode"):
        verify(model, net, torch.zeros(2, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        precompute(model.eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
        verify(model, net, torch.zeros(2, 4))


class ReadsTraining(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x


def test_training_mode_names_custom_modules_that_read_it():
    """A custom module whose forward reads self.training is named too."""
    model = nn.Sequential(Quantize(2), decompose(ReadsTraining(), fan_in=[[0]], output_domain=Domain.uniform(2)))
    with pytest.warns(IOTableWarning, match=r"'1' \(ReadsTraining: its forward reads self\.training\)"):
        precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 1))


def test_verify_and_observe_errors_name_their_caller():
    """A bad batch given to verify or observe is reported as theirs, not as net.run's."""
    model = nn.Sequential(Quantize(2), nn.Linear(4, 3), Quantize(2)).eval()
    net = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
    with pytest.raises(iotable.errors.DomainError, match="^verify: input values must belong"):
        verify(model, net, torch.full((2, 4), 0.3))
    with pytest.raises(iotable.InputError, match=r"^observe: expected a batch of shape \(N, 4\)"):
        iotable.observe(net, torch.zeros(2, 5))


class TwoInputs(nn.Module):
    def forward(self, a, b):
        return a + b


def test_a_tuple_example_input_says_one_tensor():
    """A tuple example_input (a model of two inputs) is told that a table network takes one input tensor."""
    with pytest.raises(ModelError, match="tuple of 2 item.*takes one input tensor"):
        precompute(TwoInputs(), input_domain=Domain.uniform(2), example_input=(torch.zeros(1, 4), torch.zeros(1, 4)))


class BatchDependent(nn.Module):
    """Raw outputs that round differently for different batch sizes, as some BLAS kernels do."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) + 1e-6 * (x.shape[0] % 7)


def test_the_probe_compares_like_with_like():
    """A correct layer whose float outputs depend on the batch size passes the probe (rows of one call compared)."""
    layer = decompose(BatchDependent(), fan_in=[[0, 1], [2, 3]])
    with torch.no_grad():
        layer.fc.weight.copy_(torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 4.0]]))
    result = precompute(layer, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4))
    assert [t.fan_in for t in result.tables] == [2, 2]
    leaky = decompose(BatchDependent(), fan_in=[[0], [2, 3]])
    leaky.fc.weight.data = layer.fc.weight.data.clone()
    with pytest.raises(iotable.errors.SpecMismatchError, match="unit 0"):
        precompute(leaky, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4))


class ChannelsLastScaled(nn.Module):
    """A channels-last convolution followed by a per-channel scale: no channels-first reading fits it."""

    def __init__(self) -> None:
        super().__init__()
        self.q0, self.q1 = Quantize(2), Quantize(2)
        self.conv = decompose(nn.Conv1d(3, 3, 1), layout="NWC", kernel_size=1)
        self.scale = nn.Parameter(torch.ones(3, 1))  # one value per axis-1 entry: W here

    def forward(self, x):
        return self.q1(self.conv(self.q0(x)) * self.scale)


def test_per_channel_arithmetic_in_a_channels_last_layer_is_refused():
    """A per-channel tensor read channels-first cannot serve a channels-last layer: refused, not mis-tabulated."""
    with pytest.raises(ModelError, match=r"mul: x mul scale with a per-channel tensor in a NWC layer"):
        precompute(ChannelsLastScaled().eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3, 3))


def test_the_probe_allows_float_rounding_of_raw_outputs():
    """A raw-output masked Linear whose kernel rounds a row differently when a zero-weight input changes (MKL
    does on small matrices) passes the probe; a real leak of a small weight is still found."""
    torch.manual_seed(1)
    layer = nn.Linear(5, 4)
    mask = torch.zeros(4, 5)
    mask[:, [0, 2, 3]] = 1
    prune.custom_from_mask(layer, "weight", mask)
    domain = Domain.uniform(1, scale=0.25)
    decompose(layer, fan_in=[[0, 2, 3]], fan_out=[[0, 1, 2, 3]])
    result = precompute(layer, input_domain=domain, fast_path=False)
    assert result.plan.units[0].in_channels == (0, 2, 3)
    with torch.no_grad():
        layer.weight_orig[2, 4] = 1e-3  # a leak of a thousandth of the other weights
        layer.weight_mask[2, 4] = 1
    with pytest.raises(iotable.errors.SpecMismatchError, match=r"unit 0 \(output 2\) changed when input 4 changed"):
        precompute(layer, input_domain=domain, fast_path=False)
