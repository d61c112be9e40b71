"""brevitas models: quantizer domains read through the proxies, bit-exact table networks, clear refusals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import prune

brevitas = pytest.importorskip("brevitas", reason='brevitas is not installed (pip install "iotable[brevitas]")')

import brevitas.nn as qnn  # noqa: E402
import brevitas.quant as bq  # noqa: E402

import iotable  # noqa: E402
import iotable.brevitas as ib  # noqa: E402
from iotable import Domain, ModelError, NodeKind, decompose, precompute, verify  # noqa: E402
from iotable.brevitas import BrevitasNotInstalledError, UnsupportedQuantizerError, quantizer_domain  # noqa: E402


def calibrate_(model: nn.Module, shape: tuple[int, ...], *, steps: int = 10, seed: int = 0) -> nn.Module:
    """Run training-mode forwards on random data, so runtime-stats scales and batch norms leave their init."""
    gen = torch.Generator().manual_seed(seed)
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn((64, *shape), generator=gen) * 1.5 + 0.2)
    return model.eval()


def sparse(layer: nn.Module, fan_in: list[list[int]]) -> nn.Module:
    """Mask a brevitas QuantLinear's weight to ``fan_in`` (pruning keeps masked weights at 0) and declare it."""
    mask = torch.zeros_like(layer.weight)
    for k, inputs in enumerate(fan_in):
        mask[k, inputs] = 1
    prune.custom_from_mask(layer, "weight", mask)
    return decompose(layer, fan_in=fan_in)


def random_fan_in(n_in: int, n_out: int, k: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [sorted(rng.choice(n_in, k, replace=False).tolist()) for _ in range(n_out)]


def random_inputs(domain: Domain, shape: tuple[int, ...], n: int = 256, seed: int = 1) -> torch.Tensor:
    codes = torch.randint(0, len(domain), (n, *shape), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(domain.values, dtype=torch.float32)[codes]


def assert_bit_exact(model: nn.Module, net: iotable.TableNetwork, x: torch.Tensor) -> None:
    """net.run equals the brevitas model's forward bit for bit, and verify() agrees."""
    with torch.no_grad():
        expected = model.eval()(x)
    got = net.run(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)
    report = verify(model, net, x)
    assert report.ok and report.samples == len(x), str(report)


WEIGHT_QUANT = {"per-tensor": bq.Int8WeightPerTensorFloat, "per-channel": bq.Int8WeightPerChannelFloat}
INPUT = Domain.uniform(3, signed=True, scale=0.4)  # what the model reads; its first QuantIdentity re-quantizes


def activation(signed: bool, narrow: bool, bits: int = 2) -> nn.Module:
    if signed:
        return qnn.QuantHardTanh(bit_width=bits, narrow_range=narrow, min_val=-1.0, max_val=1.0)
    return qnn.QuantReLU(bit_width=bits, narrow_range=narrow)


def linear_model(weight: str, signed: bool, narrow: bool, bias: bool) -> nn.Sequential:
    """QuantIdentity -> sparse QuantLinear -> BN -> activation quantizer -> sparse QuantLinear -> QuantIdentity."""
    wq = WEIGHT_QUANT[weight]
    model = nn.Sequential(
        qnn.QuantIdentity(bit_width=2, narrow_range=narrow),
        sparse(qnn.QuantLinear(12, 8, bias=bias, weight_quant=wq, weight_bit_width=4), random_fan_in(12, 8, 3, 0)),
        nn.BatchNorm1d(8),
        activation(signed, narrow),
        sparse(qnn.QuantLinear(8, 4, bias=bias, weight_quant=wq, weight_bit_width=3), random_fan_in(8, 4, 4, 1)),
        qnn.QuantIdentity(bit_width=3, narrow_range=narrow),
    )
    return calibrate_(model, (12,))


def conv_model(rank: int, weight: str, signed: bool, narrow: bool, bias: bool) -> nn.Sequential:
    """QuantIdentity -> depthwise QuantConv (padding) -> BN -> activation -> pointwise QuantConv -> QuantIdentity."""
    wq = WEIGHT_QUANT[weight]
    conv = qnn.QuantConv1d if rank == 1 else qnn.QuantConv2d
    bn = nn.BatchNorm1d if rank == 1 else nn.BatchNorm2d
    kernel = 3 if rank == 1 else 2
    model = nn.Sequential(
        qnn.QuantIdentity(bit_width=2, narrow_range=narrow),
        conv(4, 4, kernel, padding=1, groups=4, bias=bias, weight_quant=wq, weight_bit_width=4),
        bn(4),
        activation(signed, narrow),
        conv(4, 3, 1, stride=2, bias=bias, weight_quant=wq, weight_bit_width=3),
        qnn.QuantIdentity(bit_width=3, narrow_range=narrow),
    )
    return calibrate_(model, (4, 7) if rank == 1 else (4, 5, 6))


MATRIX = [
    pytest.param(weight, signed, narrow, id=f"{weight}-{'signed' if signed else 'unsigned'}{'-narrow' * narrow}")
    for weight in WEIGHT_QUANT
    for signed in (False, True)
    for narrow in (False, True)
]


@pytest.mark.parametrize(("weight", "signed", "narrow"), MATRIX)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_linear_models_are_bit_exact(weight, signed, narrow, bias):
    """Sparse QuantLinear networks: every quantizer cuts a table layer, and the tables equal the model bit for bit."""
    model = linear_model(weight, signed, narrow, bias)
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 12))
    assert list(net.layers) == ["0", "1", "4"]
    assert [t.fan_in for t in net["1"].tables] == [3] * 8 and [t.fan_in for t in net["4"].tables] == [4] * 4
    assert net["1"].plan.output_domain == quantizer_domain(model[3])
    assert net.output_node.domain == quantizer_domain(model[5])
    assert_bit_exact(model, net, random_inputs(INPUT, (12,)))


@pytest.mark.parametrize(("weight", "signed", "narrow"), MATRIX)
@pytest.mark.parametrize("rank", [1, 2], ids=["conv1d", "conv2d"])
def test_conv_models_are_bit_exact(rank, weight, signed, narrow):
    """QuantConv1d/2d networks with padding, depthwise and strided pointwise convolutions equal the model."""
    model = conv_model(rank, weight, signed, narrow, bias=True)
    shape = (4, 7) if rank == 1 else (4, 5, 6)
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, *shape))
    kinds = [n.kind for n in net.graph]
    assert kinds.count(NodeKind.WINDOW) == 3 and kinds.count(NodeKind.PAD) == 1  # the input quantizer too
    assert [t.fan_in for t in net["1"].tables] == [3 if rank == 1 else 4] * 4
    assert_bit_exact(model, net, random_inputs(INPUT, shape, n=128))


def test_per_channel_weight_scales_are_per_channel():
    """The per-channel weight quantizer really has one scale per output channel (so the matrix tests both kinds)."""
    model = linear_model("per-channel", signed=False, narrow=False, bias=True)
    scale = model[1].quant_weight().scale
    assert scale.numel() == 8 and len(torch.unique(scale)) == 8
    assert model[4].quant_weight().scale.numel() == 4


def test_masked_weights_stay_zero_after_weight_quantization():
    """brevitas quantizes a pruned weight's zeros to exactly 0, so the declared sparse fan-in is the real one."""
    model = linear_model("per-channel", signed=True, narrow=True, bias=True)
    for layer in (model[1], model[4]):
        quantized = layer.quant_weight().value
        assert torch.all(quantized[layer.weight_mask == 0] == 0)
        assert torch.count_nonzero(quantized[layer.weight_mask == 1]) > 0


def test_input_quantizer_is_first_table_layer():
    """The first QuantIdentity re-quantizes the input domain in one-input tables, like iotable.nn.Quantize."""
    model = linear_model("per-tensor", signed=False, narrow=False, bias=True)
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 12))
    first = net["0"]
    assert len(first) == 12 and all(t.fan_in == 1 and t.rows == len(INPUT) for t in first.tables)
    assert first.plan.output_domain == quantizer_domain(model[0])
    # A network reading the quantizer's own domain gives the same outputs on inputs quantized beforehand.
    own = precompute(model, input_domain=quantizer_domain(model[0]), example_input=torch.zeros(1, 12))
    x = random_inputs(INPUT, (12,))
    with torch.no_grad():
        assert torch.equal(own.run(model[0](x)), net.run(x))


def test_ties_round_half_to_even():
    """Inputs halfway between two codes round to the even one, in the model and in its tables."""
    quant = qnn.QuantIdentity(act_quant=bq.Int8ActPerTensorFloatMinMaxInit, bit_width=3, min_val=-4.0, max_val=4.0)
    model = nn.Sequential(quant).eval()  # scale 4 / 4 = 1: every half-integer input is a tie
    assert quantizer_domain(quant) == Domain.uniform(3, signed=True)
    ties = Domain.uniform(5, signed=True, scale=0.5)  # -8, -7.5, ..., 7.5
    net = precompute(model, input_domain=ties, example_input=torch.zeros(1, 1))
    x = torch.tensor(ties.values, dtype=torch.float32).reshape(-1, 1)
    reference = np.clip(np.round(ties.values), -4, 3)  # numpy rounds half to even
    np.testing.assert_array_equal(net.run(x).reshape(-1).numpy(), reference)
    with torch.no_grad():
        assert torch.equal(quant(x).reshape(-1), torch.tensor(reference, dtype=torch.float32))
    assert net.run(torch.tensor([[0.5], [1.5], [2.5], [-0.5], [-1.5]])).reshape(-1).tolist() == [0, 2, 2, 0, -2]


def test_output_quant_layer_is_mixing_and_quantizer():
    """A QuantLinear built with output_quant= ends its own table layer: no separate quantizer needed."""
    model = nn.Sequential(
        qnn.QuantIdentity(bit_width=2),
        sparse(
            qnn.QuantLinear(10, 6, output_quant=bq.Int8ActPerTensorFloat, output_bit_width=3, weight_bit_width=4),
            random_fan_in(10, 6, 3, 2),
        ),
        sparse(qnn.QuantLinear(6, 3, weight_bit_width=4), random_fan_in(6, 3, 2, 3)),
    )
    calibrate_(model, (10,))
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 10))
    assert list(net.layers) == ["0", "1", "2"]
    assert net["1"].plan.output_domain == quantizer_domain(model[1]) is not None
    assert net.output_node.domain is None  # the last layer outputs float values, tabulated as values
    assert_bit_exact(model, net, random_inputs(INPUT, (10,)))


def test_layer_input_quant_and_shifted_zero_point():
    """A layer's own input_quant= runs inside its table; an asymmetric quantizer with a zero point is exact too."""
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.ShiftedUint8ActPerTensorFloat, bit_width=2),
        sparse(
            qnn.QuantLinear(8, 4, input_quant=bq.Int8ActPerTensorFloat, input_bit_width=3, weight_bit_width=4),
            random_fan_in(8, 4, 3, 4),
        ),
        qnn.QuantIdentity(act_quant=bq.ShiftedUint8ActPerTensorFloat, bit_width=3),
    )
    calibrate_(model, (8,))
    shifted = quantizer_domain(model[0])
    assert shifted.params["zero_point"] != 0 and shifted.zero_code is not None
    assert quantizer_domain(model[2]).params["zero_point"] != 0
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 8))
    assert_bit_exact(model, net, random_inputs(INPUT, (8,)))


def test_binary_and_ternary_activations():
    """Binary ({-s, +s}) and ternary activation quantizers are table domains, and their networks are exact."""
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.SignedBinaryActPerTensorConst),
        sparse(qnn.QuantLinear(16, 8, weight_bit_width=3), random_fan_in(16, 8, 6, 5)),
        nn.BatchNorm1d(8),
        qnn.QuantIdentity(act_quant=bq.SignedTernaryActPerTensorConst),
        sparse(qnn.QuantLinear(8, 2, weight_bit_width=3), random_fan_in(8, 2, 5, 6)),
        qnn.QuantIdentity(bit_width=3),
    )
    calibrate_(model, (16,))
    assert quantizer_domain(model[0]) == Domain.values([-1.0, 1.0])
    assert quantizer_domain(model[3]) == Domain.uniform(2, signed=True, narrow=True)
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 16))
    assert [t.rows for t in net["1"].tables] == [2**6] * 8 and [t.rows for t in net["4"].tables] == [3**5] * 2
    assert_bit_exact(model, net, random_inputs(INPUT, (16,)))


def test_user_subclass_of_brevitas_layer():
    """A user's subclass of a brevitas layer is a brevitas quantizer too (leaf, domain, bit-exact table)."""

    class Act(qnn.QuantReLU):
        """A project's own activation."""

    model = nn.Sequential(
        qnn.QuantIdentity(bit_width=2), sparse(qnn.QuantLinear(6, 3), random_fan_in(6, 3, 2, 7)), Act(bit_width=2)
    )
    calibrate_(model, (6,))
    assert iotable.nn.domain_of(model[2]) == quantizer_domain(model[2]) is not None
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 6))
    assert_bit_exact(model, net, random_inputs(INPUT, (6,)))


def test_quantizer_alone_is_a_layer():
    """A brevitas quantizer precomputed on its own is one elementwise layer of one-input tables."""
    quant = calibrate_(qnn.QuantReLU(bit_width=3), (4,))
    result = precompute(quant, input_domain=INPUT, example_input=torch.zeros(1, 4))
    assert isinstance(result, iotable.network.precompute.LayerTables) and len(result) == 4
    assert result.plan.output_domain == quantizer_domain(quant)
    with torch.no_grad():
        expected = quant(torch.tensor(INPUT.values, dtype=torch.float32))
    for table in result.tables:
        assert table.fan_in == 1
        np.testing.assert_array_equal(quantizer_domain(quant).decode(table.outputs.reshape(-1)), expected.numpy())


# -- quantizer domains, exhaustively ------------------------------------------------------------------------------


def _quantizers() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    """Brevitas quantizers of every supported kind, calibrated, with the input shape their forward wants."""
    flat: tuple[int, ...] = ()
    cases: dict[str, tuple[nn.Module, tuple[int, ...]]] = {}
    for bits in (1, 2, 3, 4):
        for narrow in (False, True):
            if not (bits == 1 and narrow):  # a 1-bit narrow range holds one integer: brevitas' scale is infinite
                cases[f"identity-{bits}bit{'-narrow' * narrow}"] = (
                    qnn.QuantIdentity(bit_width=bits, narrow_range=narrow),
                    flat,
                )
                cases[f"relu-{bits}bit{'-narrow' * narrow}"] = (
                    qnn.QuantReLU(bit_width=bits, narrow_range=narrow),
                    flat,
                )
    cases["hardtanh"] = (qnn.QuantHardTanh(bit_width=3, min_val=-0.7, max_val=0.7), flat)
    cases["hardtanh-narrow"] = (qnn.QuantHardTanh(bit_width=3, narrow_range=True, min_val=-1.3, max_val=1.3), flat)
    cases["relu-max-init"] = (qnn.QuantReLU(act_quant=bq.Uint8ActPerTensorFloatMaxInit, bit_width=2, max_val=1.5), flat)
    cases["shifted-zero-point"] = (qnn.QuantIdentity(act_quant=bq.ShiftedUint8ActPerTensorFloat, bit_width=3), flat)
    cases["fixed-point"] = (qnn.QuantReLU(act_quant=bq.Uint8ActPerTensorFixedPoint, bit_width=3), flat)
    cases["binary"] = (qnn.QuantIdentity(act_quant=bq.SignedBinaryActPerTensorConst), flat)
    cases["ternary"] = (qnn.QuantIdentity(act_quant=bq.SignedTernaryActPerTensorConst), flat)
    cases["sigmoid"] = (qnn.QuantSigmoid(bit_width=3), flat)
    cases["tanh"] = (qnn.QuantTanh(bit_width=3), flat)
    cases["batch-quant-1d"] = (qnn.QuantIdentity(act_quant=bq.Int8ActPerTensorFloatBatchQuant1d, bit_width=3), (4, 5))
    cases["linear-output-quant"] = (
        qnn.QuantLinear(4, 3, output_quant=bq.Int8ActPerTensorFloat, output_bit_width=3, weight_bit_width=4),
        (4,),
    )
    for k, (module, shape) in enumerate(cases.values()):
        calibrate_(module, shape or (32,), seed=k)
    return cases


QUANTIZERS = _quantizers()


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_domain_holds_exactly_the_outputs(name):
    """Every output of the quantizer, on a dense ramp and random inputs, is a domain value bit for bit, and every
    domain value occurs."""
    module, shape = QUANTIZERS[name]
    domain = quantizer_domain(module)
    assert isinstance(domain, Domain)
    gen = torch.Generator().manual_seed(0)
    span = 2 * float(np.max(np.abs(domain.values))) + 4
    x = torch.cat([torch.linspace(-span, span, 200_003), torch.randn(20_000, generator=gen) * span])
    if shape:
        size = int(np.prod(shape))
        x = x[: len(x) // size * size].reshape(-1, *shape)
    with torch.no_grad():
        y = module.eval()(x)
    codes = domain.encode(y)
    assert torch.equal(torch.tensor(domain.decode(codes), dtype=torch.float32), y)  # exact, not within a tolerance
    assert set(np.unique(codes).tolist()) == set(range(len(domain)))


@pytest.mark.parametrize("name", [n for n in QUANTIZERS if not n.startswith("binary")])
def test_domain_reads_the_proxies(name):
    """A uniform domain's parameters are the proxy's scale(), zero_point(), bit_width(), is_signed, is_narrow_range."""
    module, _ = QUANTIZERS[name]
    proxy = module.output_quant if isinstance(module, qnn.QuantLinear) else module.act_quant
    params = quantizer_domain(module).params
    assert params == {
        "bits": int(proxy.bit_width()),
        "signed": bool(proxy.is_signed),
        "narrow": bool(proxy.is_narrow_range),
        "scale": float(proxy.scale().detach()),
        "zero_point": float(proxy.zero_point().detach()),
    }


def test_domain_of_reads_brevitas_quantizers():
    """iotable.nn.domain_of returns the brevitas domain, of a module or of its proxy, and None for non-quantizers."""
    module, _ = QUANTIZERS["relu-2bit"]
    assert iotable.nn.domain_of(module) == quantizer_domain(module) == quantizer_domain(module.act_quant)
    assert iotable.nn.domain_of(qnn.QuantLinear(3, 2)) is None
    assert iotable.nn.domain_of(qnn.QuantReLU(act_quant=None)) is None
    assert quantizer_domain(nn.ReLU()) is None


def test_float64_quantizer_keeps_its_own_values():
    """A quantizer run in float64 gets the float64 values it outputs, not float32 ones."""
    quant = calibrate_(qnn.QuantIdentity(bit_width=3), (16,)).double()
    domain = quantizer_domain(quant)
    x = torch.linspace(-50, 50, 100_001, dtype=torch.float64)
    with torch.no_grad():
        y = quant(x)
    assert y.dtype == torch.float64 and len(domain) == 8
    np.testing.assert_array_equal(np.unique(y.numpy()), domain.values)


def test_reading_a_domain_keeps_training_flags():
    """Reading a domain runs the quantizer in eval mode and restores its training flags."""
    quant = qnn.QuantReLU(bit_width=2).train()
    quantizer_domain(quant)
    assert all(m.training for m in quant.modules())


def test_iotable_does_not_import_brevitas():
    """Importing iotable and tabulating a torch model leaves brevitas unimported (the extra is optional)."""
    code = (
        "import sys, torch, iotable\n"
        "q = iotable.nn.Quantize(2)\n"
        "iotable.precompute(torch.nn.Sequential(q, torch.nn.Linear(2, 1), iotable.nn.Quantize(2)),"
        " input_domain=q.domain, example_input=torch.zeros(1, 2))\n"
        "assert 'brevitas' not in sys.modules, 'brevitas was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# -- what cannot be tabulated --------------------------------------------------------------------------------------


def per_channel_identity(channels: int) -> nn.Module:
    return qnn.QuantIdentity(
        bit_width=3,
        scaling_per_output_channel=True,
        per_channel_broadcastable_shape=(1, channels),
        scaling_stats_permute_dims=(1, 0),
    )


def test_per_channel_activation_scale_is_refused():
    """A per-channel activation scale gives no single domain: the error names the module and per-tensor scaling."""
    model = nn.Sequential(qnn.QuantIdentity(bit_width=2), qnn.QuantLinear(4, 3), per_channel_identity(3))
    with pytest.raises(UnsupportedQuantizerError, match=r"^2 \(QuantIdentity\): .*3 scales.*per-tensor") as info:
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4))
    assert "scaling_per_output_channel=False" in str(info.value)
    assert isinstance(info.value, ModelError)
    with pytest.raises(UnsupportedQuantizerError, match="QuantIdentity: its activation quantizer has 3 scales"):
        quantizer_domain(per_channel_identity(3))


def test_return_quant_tensor_is_refused():
    """A layer returning a QuantTensor is refused by name, with the fix return_quant_tensor=False."""
    model = nn.Sequential(qnn.QuantIdentity(bit_width=2, return_quant_tensor=True), qnn.QuantLinear(4, 3))
    with pytest.raises(ModelError, match=r"^0: QuantIdentity\(return_quant_tensor=True\).*return_quant_tensor=False"):
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4))


def test_bias_quant_needing_input_scale_is_refused():
    """A bias quantizer that needs a QuantTensor input's scale is refused by name, with the fix bias_quant=None."""
    model = nn.Sequential(qnn.QuantIdentity(bit_width=2), qnn.QuantLinear(4, 3, bias_quant=bq.Int32Bias))
    with pytest.raises(ModelError, match=r"^1: QuantLinear's bias quantizer needs the scale.*bias_quant=None"):
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4))


def test_unbounded_float_between_layers_is_refused():
    """Two QuantLinears with no quantizer between them are refused, naming both and asking for a quantizer."""
    model = nn.Sequential(qnn.QuantIdentity(bit_width=2), qnn.QuantLinear(4, 3), qnn.QuantLinear(3, 2))
    with pytest.raises(
        ModelError, match=r"^2: 1 and 2 sit between the same pair of quantizers.*QuantIdentity\) after 1"
    ):
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4))


def test_minifloat_quantizer_is_refused():
    """A minifloat (FP8) activation quantizer is refused with the integer quantizers to use instead."""
    model = nn.Sequential(qnn.QuantIdentity(act_quant=bq.Fp8e4m3ActPerTensorFloat), qnn.QuantLinear(4, 3))
    with pytest.raises(UnsupportedQuantizerError, match=r"^0 \(QuantIdentity\): .*minifloat.*Int or Uint"):
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4))


def test_dynamic_quantizer_is_refused():
    """A quantizer whose scale comes from each input has no domain: refused, asking for a learned or constant scale."""
    quantizers = pytest.importorskip("brevitas_examples.common.generative.quantizers")
    quant = qnn.QuantIdentity(act_quant=quantizers.Int8DynamicActPerTensorFloat, bit_width=3)
    with pytest.raises(UnsupportedQuantizerError, match="dynamic quantization.*learned or constant scale"):
        quantizer_domain(quant)


def test_strided_same_padding_is_refused():
    """brevitas' uneven padding='same' with stride > 1 is refused by name, asking for an explicit padding."""
    model = nn.Sequential(qnn.QuantIdentity(bit_width=2), qnn.QuantConv1d(2, 2, 3, stride=2, padding="same"))
    with pytest.raises(ModelError, match=r"^1: QuantConv1d\(padding='same'\) with stride > 1.*explicit padding="):
        precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 2, 8))


def test_host_brevitas_module_is_not_checked():
    """A brevitas module the host runs may be anything tables could not be (here a per-channel quantizer)."""
    model = nn.Sequential(
        qnn.QuantIdentity(bit_width=2), sparse(qnn.QuantLinear(4, 3), [[0, 1], [1, 2], [2, 3]]), per_channel_identity(3)
    )
    calibrate_(model, (4,))
    net = precompute(model, input_domain=INPUT, example_input=torch.zeros(1, 4), host=["1", "2"])
    assert [n.name for n in net.graph.nodes_of(NodeKind.HOST)] == ["1", "2"]
    x = random_inputs(INPUT, (4,))
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))


def test_missing_brevitas_names_the_extra(monkeypatch):
    """Without brevitas, reading a quantizer raises an error that names the extra to install."""
    quant = qnn.QuantIdentity(bit_width=2)
    monkeypatch.setitem(sys.modules, "brevitas", None)  # makes `import brevitas` raise ImportError
    with pytest.raises(BrevitasNotInstalledError, match=r'pip install "iotable\[brevitas\]"') as info:
        quantizer_domain(quant)
    assert isinstance(info.value, ImportError)


def test_old_brevitas_names_the_extra(monkeypatch):
    """A brevitas older than MIN_VERSION is refused with the version found and the install command."""
    monkeypatch.setattr(brevitas, "__version__", "0.10.2")
    with pytest.raises(BrevitasNotInstalledError, match=r"brevitas >= 0\.13, found 0\.10\.2.*iotable\[brevitas\]"):
        quantizer_domain(qnn.QuantIdentity(bit_width=2))
    assert ib.MIN_VERSION == (0, 13)
