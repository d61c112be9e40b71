"""Benchmark workloads: published LUT-network configurations, built the way users write them.

Every multilayer perceptron is a stack of LogicNets-style layers: an ``nn.Linear`` whose weight is masked to
a random fan-in per neuron (``torch.nn.utils.prune.custom_from_mask``) and declared with
``iotable.decompose(linear, fan_in=...)``, then ``nn.BatchNorm1d``, ``nn.ReLU`` and an
:class:`iotable.nn.Quantize`; the last layer ends in a signed quantizer instead. Batch-norm statistics are
calibrated on random inputs and the affine parameters randomised, as after training, so the tables are not
trivial. Everything comes from one seeded generator: a workload is the same model on every run.

Each MLP also has a *custom-module* variant: the same layers written as a user's own module with an
arbitrary forward (masked matmul, a batch-norm-like affine and an inline quantizer) that iotable can only
treat as a black box, decorated with ``iotable.decompose(fan_in=..., output_domain=...)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune

import iotable
from iotable import Domain
from iotable.nn import Quantize

__all__ = [
    "MLP_CONFIGS",
    "NEURONS",
    "WORKLOADS",
    "AffineLayer",
    "MLPConfig",
    "MLPNeurons",
    "MaskedLinearBlock",
    "PolyNeurons",
    "Workload",
    "affine_layers",
    "build",
    "build_neuron_blocks",
]


@dataclass(frozen=True)
class MLPConfig:
    """A LogicNets-style MLP: layer widths, and per layer the neurons' fan-in and input bits."""

    inputs: int
    widths: tuple[int, ...]
    fan_in: tuple[int, ...]
    bits: tuple[int, ...]
    output_bits: int
    binary_inputs: bool = False

    @property
    def total_rows(self) -> int:
        """Rows of all tables: each neuron has ``2 ** (fan_in * bits)`` rows."""
        return sum(w * 2 ** (f * b) for w, f, b in zip(self.widths, self.fan_in, self.bits))


#: The published configurations (LogicNets JSC-S/M/L and NID-L) and a tiny one for tests.
MLP_CONFIGS: dict[str, MLPConfig] = {
    "jsc-s": MLPConfig(16, (64, 32, 32, 32, 5), (3,) * 5, (2,) * 5, output_bits=2),
    "jsc-m": MLPConfig(16, (64, 32, 32, 32, 5), (4,) * 5, (3,) * 5, output_bits=3),
    "jsc-l": MLPConfig(16, (32, 64, 192, 192, 16, 5), (3, 4, 4, 4, 4, 5), (4, 3, 3, 3, 3, 3), output_bits=3),
    "nid-l": MLPConfig(
        593, (593, 100, 100, 100, 1), (7, 5, 5, 5, 5), (1, 3, 3, 3, 3), output_bits=3, binary_inputs=True
    ),
    "tiny": MLPConfig(6, (5, 3), (2, 2), (2, 2), output_bits=2),
}


def hidden_domain(bits: int) -> Domain:
    """Unsigned codes after a ReLU, values ``0 .. 2 - 2**(1-bits)`` (a power-of-two step)."""
    return Domain.uniform(bits, scale=2.0 ** (1 - bits))


def signed_domain(bits: int) -> Domain:
    """Signed codes, values ``-1 .. 1 - 2**(1-bits)`` (the input and output layers)."""
    return Domain.uniform(bits, signed=True, scale=2.0 ** (1 - bits))


def _quantizer(domain: Domain) -> Quantize:
    p = domain.params
    return Quantize(p["bits"], signed=p["signed"], scale=p["scale"])


def _random_fan_in(n_in: int, n_out: int, fan_in: int, gen: torch.Generator) -> list[list[int]]:
    return [sorted(torch.randperm(n_in, generator=gen)[:fan_in].tolist()) for _ in range(n_out)]


def _sparse_linear(n_in: int, fan_in: list[list[int]]) -> nn.Linear:
    """An ``nn.Linear`` masked to ``fan_in`` and declared so, as users write LogicNets layers."""
    linear = nn.Linear(n_in, len(fan_in))
    mask = torch.zeros(len(fan_in), n_in)
    for k, inputs in enumerate(fan_in):
        mask[k, inputs] = 1.0
    prune.custom_from_mask(linear, "weight", mask)
    return iotable.decompose(linear, fan_in=fan_in)


def _calibrate_(model: nn.Module, x: torch.Tensor, gen: torch.Generator) -> nn.Module:
    """Running statistics from one pass over ``x``, then random affine parameters: a trained-looking model."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: one pass gives the batch's statistics
    model.train()
    with torch.no_grad():
        model(x)
        for m in norms:
            m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen))
            m.bias.copy_(0.5 + 0.5 * torch.randn(m.bias.shape, generator=gen))
    return model.eval()


def _random_values(domain: Domain, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    codes = torch.randint(0, len(domain), shape, generator=gen)
    return torch.tensor(domain.values, dtype=torch.float32)[codes]


def input_domain_of(config: MLPConfig) -> Domain:
    """The first layer's input domain: binary features for NID, signed features for JSC."""
    return Domain.uniform(1) if config.binary_inputs else signed_domain(config.bits[0])


def build_mlp(config: MLPConfig, *, seed: int = 0) -> nn.Sequential:
    """The model of ``config``: sparse Linear, BatchNorm1d, ReLU and Quantize per layer."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # nn.Linear's own initialisation
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    n_in = config.inputs
    last = len(config.widths) - 1
    for k, (width, fan_in) in enumerate(zip(config.widths, config.fan_in)):
        layers[f"fc{k}"] = _sparse_linear(n_in, _random_fan_in(n_in, width, fan_in, gen))
        layers[f"bn{k}"] = nn.BatchNorm1d(width)
        if k < last:
            layers[f"relu{k}"] = nn.ReLU()
            layers[f"q{k}"] = _quantizer(hidden_domain(config.bits[k + 1]))
        else:
            layers[f"q{k}"] = _quantizer(signed_domain(config.output_bits))
        n_in = width
    model = nn.Sequential(layers)
    return _calibrate_(model, _random_values(input_domain_of(config), (4096, config.inputs), gen), gen)


class MaskedLinearBlock(nn.Module):
    """A user's own sparse layer: masked matmul, batch-norm-like affine, ReLU and an inline quantizer.

    iotable cannot see inside ``forward`` (no ``nn.Linear``, no ``Quantize`` module), so the block is
    decorated per instance with ``iotable.decompose(block, fan_in=..., output_domain=...)`` and
    enumerated as a black box.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        mask: torch.Tensor,
        bias: torch.Tensor,
        gain: torch.Tensor,
        shift: torch.Tensor,
        output_domain: Domain,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())
        self.register_buffer("mask", mask.clone())
        self.register_buffer("gain", gain.clone())
        self.register_buffer("shift", shift.clone())
        p = output_domain.params
        qmin, qmax = Domain.integer_range(p["bits"], signed=p["signed"], narrow=False)
        self.signed, self.step, self.qmin, self.qmax = p["signed"], p["scale"], float(qmin), float(qmax)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ (self.weight * self.mask).T + self.bias
        y = y * self.gain + self.shift
        if not self.signed:
            y = torch.relu(y)
        return torch.clamp(torch.round(y / self.step), self.qmin, self.qmax) * self.step


def build_custom_blocks(model: nn.Sequential, input_domain: Domain) -> list[tuple[MaskedLinearBlock, Domain]]:
    """The custom-module variant of an MLP built by :func:`build_mlp`: one decorated block per layer.

    Returns each block with its input domain: ``input_domain`` for the first, the previous block's output
    domain after that.
    """
    blocks = []
    domain = input_domain
    for layer in affine_layers(model, input_domain):
        out_domain = layer.output_domain
        block = MaskedLinearBlock(
            layer.mixing.weight_orig.detach(),
            layer.mixing.weight_mask,
            layer.mixing.bias.detach(),
            *layer.batch_norm_affine(),
            out_domain,
        )
        blocks.append((iotable.decompose(block, fan_in=layer.fan_in, output_domain=out_domain), domain))
        domain = out_domain
    return blocks


class _QuantizedNeurons(nn.Module):
    """What the PolyLUT- and NeuraLUT-style layers share: each neuron's fan-in, a per-neuron affine (a folded
    batch norm) and the activation quantizer, applied inside ``forward``; subclasses give the neurons'
    pre-activations, for all neurons (``forward``) or for one (:meth:`neuron`, what their generators call)."""

    def __init__(self, fan_in: list[list[int]], output_domain: Domain) -> None:
        super().__init__()
        self.register_buffer("inputs", torch.tensor(fan_in, dtype=torch.int64))  # (neurons, fan-in)
        self.register_buffer("gain", torch.ones(len(fan_in)))
        self.register_buffer("shift", torch.zeros(len(fan_in)))
        p = output_domain.params
        qmin, qmax = Domain.integer_range(p["bits"], signed=p["signed"], narrow=False)
        self.signed, self.step, self.qmin, self.qmax = p["signed"], p["scale"], float(qmin), float(qmax)
        self.output_domain = output_domain

    def preactivation(self, g: torch.Tensor, units: Any) -> torch.Tensor:
        """Pre-activations ``(batch, n)`` of the ``n`` neurons ``units`` from their inputs ``g`` ``(batch, n, F)``."""
        raise NotImplementedError

    def activation(self, y: torch.Tensor, units: Any) -> torch.Tensor:
        y = y * self.gain[units] + self.shift[units]
        if not self.signed:
            y = torch.relu(y)
        return torch.clamp(torch.round(y / self.step), self.qmin, self.qmax) * self.step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        every = slice(None)
        return self.activation(self.preactivation(x[:, self.inputs], every), every)

    def neuron(self, unit: int, g: torch.Tensor) -> torch.Tensor:
        """Neuron ``unit``'s outputs for its own inputs ``g`` ``(rows, F)``: its sub-network alone."""
        units = slice(unit, unit + 1)
        return self.activation(self.preactivation(g[:, None, :], units), units)[:, 0]

    def calibrate_(self, x: torch.Tensor) -> None:
        """Spread each neuron's pre-activations over the quantizer's range (as training would), from ``x``."""
        with torch.no_grad():
            y = self.preactivation(x[:, self.inputs], slice(None))
            std, mean = torch.std_mean(y, dim=0)
            span = (self.qmax - self.qmin + 1) * self.step
            self.gain.copy_(span / 4 / (std + 1e-6))
            self.shift.copy_(-mean * self.gain + (span / 2 if not self.signed else 0.0))


class PolyNeurons(_QuantizedNeurons):
    """A layer of PolyLUT-style neurons, written from the paper's description (Andronic and Constantinides,
    "PolyLUT", FPT 2023): each neuron expands its fan-in inputs into every monomial of degree at most 2 (the
    constant, the inputs, every product of two of them, squares included), maps the monomials to one
    pre-activation with its own weights, and quantizes (a folded batch norm, the activation quantizer)."""

    def __init__(self, fan_in: list[list[int]], output_domain: Domain, gen: torch.Generator) -> None:
        super().__init__(fan_in, output_domain)
        f = len(fan_in[0])
        left, right = torch.triu_indices(f, f)
        self.register_buffer("left", left)
        self.register_buffer("right", right)
        monomials = 1 + f + len(left)
        self.weight = nn.Parameter(torch.randn(len(fan_in), monomials, generator=gen) / monomials**0.5)

    def preactivation(self, g: torch.Tensor, units: Any) -> torch.Tensor:
        features = torch.cat([torch.ones_like(g[..., :1]), g, g[..., self.left] * g[..., self.right]], dim=-1)
        return (features * self.weight[units]).sum(dim=-1)


class MLPNeurons(_QuantizedNeurons):
    """A layer of NeuraLUT-style neurons, written from the paper's description (Andronic and Constantinides,
    "NeuraLUT", FPL 2024): each neuron is a small MLP over its fan-in inputs (two hidden layers of ``hidden``
    ReLU units) whose output adds a linear skip connection from the inputs, then the quantizer (a folded
    batch norm, the activation quantizer); the whole sub-network is hidden in the neuron's table."""

    def __init__(
        self, fan_in: list[list[int]], output_domain: Domain, gen: torch.Generator, *, hidden: int = 16
    ) -> None:
        super().__init__(fan_in, output_domain)
        n, f = len(fan_in), len(fan_in[0])

        def param(*shape: int, fan: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=gen) / fan**0.5)

        self.w1, self.b1 = param(n, f, hidden, fan=f), param(n, hidden, fan=f)
        self.w2, self.b2 = param(n, hidden, hidden, fan=hidden), param(n, hidden, fan=hidden)
        self.w3, self.b3 = param(n, hidden, fan=hidden), param(n, fan=hidden)
        self.skip = param(n, f, fan=f)

    def preactivation(self, g: torch.Tensor, units: Any) -> torch.Tensor:
        h = torch.relu(torch.einsum("bnf,nfh->bnh", g, self.w1[units]) + self.b1[units])
        h = torch.relu(torch.einsum("bnh,nhk->bnk", h, self.w2[units]) + self.b2[units])
        return (h * self.w3[units]).sum(dim=-1) + self.b3[units] + (g * self.skip[units]).sum(dim=-1)


#: The neuron modules of the black-box benchmarks, by the peer whose neurons they follow.
NEURONS: dict[str, type[_QuantizedNeurons]] = {"polylut": PolyNeurons, "neuralut": MLPNeurons}


def build_neuron_blocks(kind: str, config: MLPConfig, *, seed: int = 0) -> list[tuple[_QuantizedNeurons, Domain]]:
    """A network of ``config``'s shape made of :data:`NEURONS` ``kind`` layers, each decorated with its fan-in
    and output domain for iotable's black box; returns each block with its input domain."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    domain = input_domain_of(config)
    x = _random_values(domain, (1024, config.inputs), gen)
    blocks = []
    n_in = config.inputs
    last = len(config.widths) - 1
    for k, (width, fan_in) in enumerate(zip(config.widths, config.fan_in)):
        out_domain = hidden_domain(config.bits[k + 1]) if k < last else signed_domain(config.output_bits)
        block = NEURONS[kind](_random_fan_in(n_in, width, fan_in, gen), out_domain, gen)
        block.calibrate_(x)
        block.eval()
        blocks.append((iotable.decompose(block, fan_in=block.inputs.tolist(), output_domain=out_domain), domain))
        with torch.no_grad():
            x = block(x)
        domain, n_in = out_domain, width
    return blocks


def build_cnn(*, seed: int = 0) -> nn.Sequential:
    """Depthwise-separable convolutions on a 32x32x3 input: 3x3 depthwise (2**18 rows per unit) and 1x1."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    two = hidden_domain(2)

    def block(conv: nn.Conv2d) -> list[nn.Module]:
        return [conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU(), _quantizer(two)]

    model = nn.Sequential(
        *block(nn.Conv2d(3, 3, 3, padding=1, groups=3)),  # depthwise: 3 units of 9 x 2 bits
        *block(nn.Conv2d(3, 16, 1)),  # pointwise: 16 units of 3 x 2 bits
        *block(nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)),  # depthwise: 16 units of 9 x 2 bits
        *block(nn.Conv2d(16, 32, 1, groups=4)),  # grouped pointwise: 32 units of 4 x 2 bits
    )
    return _calibrate_(model, _random_values(signed_domain(2), (64, 3, 32, 32), gen), gen)


#: The input domain of the digits CNN (as the digits examples quantize their images).
DIGITS_DOMAIN = Domain.uniform(2, scale=1 / 3)


def build_digits_cnn(*, seed: int = 0) -> nn.Sequential:
    """The digits example's CNN (examples/digits_cnn.py), with calibrated random weights: (N, 1, 8, 8) 2-bit
    images; a 3x3 stride-2 conv to 8 channels, a depthwise 3x3, a pointwise to 16, each with batch norm, ReLU
    and a 2-bit quantizer; a float ``Linear(256, 10)`` head (a host node)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    two = Domain.uniform(2, scale=0.5)

    def block(conv: nn.Conv2d) -> list[nn.Module]:
        return [conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU(), _quantizer(two)]

    model = nn.Sequential(
        *block(nn.Conv2d(1, 8, 3, stride=2, padding=1)),  # 8x8 -> 4x4: 8 units of 9 x 2 bits
        *block(nn.Conv2d(8, 8, 3, padding=1, groups=8)),  # depthwise: 8 units of 9 x 2 bits
        *block(nn.Conv2d(8, 16, 1)),  # pointwise: 16 units of 8 x 2 bits
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )
    return _calibrate_(model, _random_values(DIGITS_DOMAIN, (512, 1, 8, 8), gen), gen)


def build_cnn_classifier(*, seed: int = 0) -> nn.Sequential:
    """A 32x32 image classifier of depthwise-separable table layers: (N, 3, 32, 32) 2-bit inputs; depthwise
    3x3 stride 2 (3 channels), pointwise 3->8, depthwise 3x3 stride 2 (8 channels), pointwise 8->16, each with
    batch norm, ReLU and a 2-bit quantizer; a 2x2 max-pool, then a float ``Linear(256, 10)`` head (host)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    two = hidden_domain(2)

    def block(conv: nn.Conv2d) -> list[nn.Module]:
        return [conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU(), _quantizer(two)]

    model = nn.Sequential(
        *block(nn.Conv2d(3, 3, 3, stride=2, padding=1, groups=3)),  # 32x32 -> 16x16, 9 x 2 bits per unit
        *block(nn.Conv2d(3, 8, 1)),  # 3 x 2 bits
        *block(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)),  # 16x16 -> 8x8, 9 x 2 bits
        *block(nn.Conv2d(8, 16, 1)),  # 8 x 2 bits
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )
    return _calibrate_(model, _random_values(signed_domain(2), (256, 3, 32, 32), gen), gen)


def build_single_table(*, seed: int = 0) -> nn.Sequential:
    """One unit of 2**24 rows: ``Linear(12, 1)`` over 2-bit inputs, batch norm and a 4-bit quantizer."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    block = nn.Sequential(nn.Linear(12, 1), nn.BatchNorm1d(1), nn.ReLU(), _quantizer(hidden_domain(4)))
    _calibrate_(block, _random_values(signed_domain(2), (4096, 12), gen), gen)
    return iotable.decompose(block)  # one black-box block; its Linear makes it one unit per output


@dataclass(frozen=True)
class AffineLayer:
    """One table layer as the hand-written baselines see it: a unit-wise affine map, batch norm, quantizer.

    Unit ``u`` computes ``weight[u] @ x[inputs[u]] + bias[u]`` over its ``fan_in`` inputs, then batch norm
    (eval), an optional ReLU and the quantizer. All units of a layer read inputs of the same domains, so
    one combination matrix serves them all.
    """

    name: str
    mixing: nn.Module  # the Linear or Conv2d: the layer that mixes inputs
    inputs: torch.Tensor  # (units, fan_in) indices into the layer's input vector (channels for convs)
    weight: torch.Tensor  # (units, fan_in) float32, in the table's input order
    bias: torch.Tensor  # (units,)
    norm: nn.modules.batchnorm._BatchNorm | None
    relu: bool
    quantizer: Quantize
    input_domains: tuple[Domain, ...]  # per unit input, in the table's input order
    block: nn.Sequential  # the model's own modules of this layer (not copies), for the peer patterns

    @property
    def units(self) -> int:
        return int(self.weight.shape[0])

    @property
    def fan_in(self) -> list[list[int]]:
        return self.inputs.tolist()

    @property
    def rows(self) -> int:
        """Rows of one unit's table."""
        rows = 1
        for d in self.input_domains:
            rows *= len(d)
        return rows

    @property
    def output_domain(self) -> Domain:
        return self.quantizer.domain

    def batch_norm_affine(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(gain, shift)`` of the eval batch norm, ``y * gain + shift`` (identity without one)."""
        if self.norm is None:
            return torch.ones(self.units), torch.zeros(self.units)
        m = self.norm
        gain = (m.weight / torch.sqrt(m.running_var + m.eps)).detach()
        return gain, (m.bias - m.running_mean * gain).detach()


def affine_layers(model: nn.Module, input_domain: Domain) -> list[AffineLayer]:
    """Read a model of ``(Linear | Conv2d) [-> BatchNorm] [-> ReLU] -> Quantize`` layers as :class:`AffineLayer`.

    Linear layers take their fan-in from the ``iotable.decompose`` metadata (all inputs when undecorated);
    convolutions read their group's channels over the kernel window, channel-major, as iotable orders them.
    ``input_domain`` is the first layer's input domain; every later layer reads the previous quantizer's.
    """
    modules = [m for m in model.modules() if not isinstance(m, nn.Sequential)]
    layers: list[AffineLayer] = []
    domain = input_domain
    k = 0
    while k < len(modules):
        layer = modules[k]
        if not isinstance(layer, (nn.Linear, nn.Conv2d)):
            msg = f"affine_layers: expected a Linear or Conv2d at module {k}, found {type(layer).__name__}"
            raise TypeError(msg)
        k += 1
        norm = modules[k] if k < len(modules) and isinstance(modules[k], nn.modules.batchnorm._BatchNorm) else None
        own = [layer]
        if norm is not None:
            own.append(norm)
            k += 1
        relu = k < len(modules) and isinstance(modules[k], nn.ReLU)
        if relu:
            own.append(modules[k])
            k += 1
        quantizer = modules[k]
        if not isinstance(quantizer, Quantize):
            msg = f"affine_layers: expected a Quantize at module {k}, found {type(quantizer).__name__}"
            raise TypeError(msg)
        k += 1
        # A pruned layer's ``weight`` is refreshed by a forward hook; read the parameters it is made of.
        weight = getattr(layer, "weight_orig", layer.weight).detach() * getattr(layer, "weight_mask", 1.0)
        if isinstance(layer, nn.Linear):
            spec = iotable.spec_of(layer)
            fan_in = spec.fan_in or [list(range(layer.in_features))] * layer.out_features
            inputs = torch.as_tensor(fan_in, dtype=torch.int64)
            gathered = torch.gather(weight, 1, inputs)
        else:
            per_group = layer.in_channels // layer.groups
            group = torch.arange(layer.out_channels) // (layer.out_channels // layer.groups)
            inputs = group[:, None] * per_group + torch.arange(per_group)[None, :]
            gathered = weight.reshape(layer.out_channels, -1)  # (out, channels x kernel positions)
        bias = layer.bias.detach() if layer.bias is not None else torch.zeros(weight.shape[0])
        # A conv unit reads channels x kernel positions, all of one domain here, so only the width counts.
        domains = (domain,) * gathered.shape[1]
        layers.append(
            AffineLayer(
                name=f"layer{len(layers)}",
                mixing=layer,
                inputs=inputs,
                weight=gathered.contiguous(),
                bias=bias,
                norm=norm,
                relu=relu,
                quantizer=quantizer,
                input_domains=domains,
                block=nn.Sequential(*own, quantizer),
            )
        )
        domain = quantizer.domain
    return layers


@dataclass
class Workload:
    """A model to tabulate, with what ``iotable.precompute`` and the baselines need."""

    name: str
    description: str
    model: nn.Module
    input_domain: Domain
    example_input: torch.Tensor
    layers: list[AffineLayer]
    total_rows: int
    custom_blocks: list[tuple[nn.Module, Domain]] = field(default_factory=list)
    peers: bool = True  # the LogicNets and PolyLUT patterns apply (sparse Linear layers)

    def precompute(self, model: nn.Module | None = None, **options: Any) -> Any:
        """``iotable.precompute`` on the whole model (the timed call), ``memory_budget`` 256 MiB by default.

        ``model``: another copy of the workload's model (by default the workload's own).
        """
        options.setdefault("memory_budget", 256 * 2**20)
        return iotable.precompute(
            self.model if model is None else model,
            input_domain=self.input_domain,
            example_input=self.example_input,
            progress=False,
            **options,
        )

    def precompute_custom(self) -> list[Any]:
        """``iotable.precompute`` on each custom block (the black-box path), in layer order."""
        return [
            iotable.precompute(
                block, input_domain=domain, example_input=torch.zeros(1, block.weight.shape[1]), progress=False
            )
            for block, domain in self.custom_blocks
        ]


def _mlp_workload(name: str) -> Workload:
    config = MLP_CONFIGS[name]
    model = build_mlp(config)
    domain = input_domain_of(config)
    layers = affine_layers(model, domain)
    widths = "-".join(map(str, config.widths))
    per_layer = ", ".join(f"{f}x{b}" for f, b in zip(config.fan_in, config.bits))
    return Workload(
        name=name,
        description=f"{config.inputs} inputs, layers {widths}, fan-in x bits {per_layer}",
        model=model,
        input_domain=domain,
        example_input=torch.zeros(1, config.inputs),
        layers=layers,
        total_rows=config.total_rows,
        custom_blocks=build_custom_blocks(model, domain),
    )


def _cnn_workload() -> Workload:
    model = build_cnn()
    domain = signed_domain(2)
    layers = affine_layers(model, domain)
    return Workload(
        name="cnn",
        description="32x32x3 input; depthwise 3x3 (3 ch), pointwise 3->16, depthwise 3x3 stride 2 (16 ch), "
        "grouped pointwise 16->32; 2-bit codes",
        model=model,
        input_domain=domain,
        example_input=torch.zeros(1, 3, 32, 32),
        layers=layers,
        total_rows=sum(layer.units * layer.rows for layer in layers),
        peers=False,
    )


def _single_table_workload() -> Workload:
    model = build_single_table()
    domain = signed_domain(2)
    layers = affine_layers(model, domain)
    return Workload(
        name="table-2^24",
        description="one unit: Linear(12, 1) + BatchNorm1d + ReLU + 4-bit Quantize over 2-bit inputs, "
        "memory_budget 256 MiB",
        model=model,
        input_domain=domain,
        example_input=torch.zeros(1, 12),
        layers=layers,
        total_rows=2**24,
    )  # the peer patterns apply: one Linear unit over all 12 inputs


#: Inputs of the wide sparse layers (the previous layer's width).
WIDE_INPUTS = 256


def build_wide_layer(units: int, *, seed: int = 0) -> nn.Sequential:
    """One LogicNets-style sparse layer of ``units`` neurons, fan-in 6 x 2 bits over 256 inputs (4,096 rows each):
    a pruned ``Linear``, batch norm, ReLU and a 2-bit quantizer, calibrated on 256 random inputs."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    # Each neuron's 6 inputs: the first 6 of a random permutation, drawn for all neurons at once.
    fan_in = torch.argsort(torch.rand(units, WIDE_INPUTS, generator=gen), dim=1)[:, :6].sort(dim=1).values
    model = nn.Sequential(
        _sparse_linear(WIDE_INPUTS, fan_in.tolist()),
        nn.BatchNorm1d(units),
        nn.ReLU(),
        _quantizer(hidden_domain(2)),
    )
    return _calibrate_(model, _random_values(signed_domain(2), (256, WIDE_INPUTS), gen), gen)


def _wide_workload(units: int) -> Workload:
    model = build_wide_layer(units)
    domain = signed_domain(2)
    return Workload(
        name=f"wide-{units // 1000}k",
        description=f"one sparse layer of {units:,} units, fan-in 6 x 2 bits over {WIDE_INPUTS} inputs",
        model=model,
        input_domain=domain,
        example_input=torch.zeros(1, WIDE_INPUTS),
        layers=[],  # read only by the generation section, which does not run these
        total_rows=units * 4096,
        peers=False,
    )


def build_tie_table(*, seed: int = 0) -> nn.Sequential:
    """One unit of 2**24 rows whose sums are exact and land on rounding boundaries: ``Linear(12, 1)`` with
    weights in steps of 1/8 and no bias over 2-bit signed inputs (steps of 1/2), then a signed 4-bit
    quantizer of step 1/8, so about a quarter of the rows (4.3M) are near ties the modules decide."""
    gen = torch.Generator().manual_seed(seed)
    linear = nn.Linear(12, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.randint(-8, 9, (1, 12), generator=gen) / 8)
        linear.bias.zero_()
    return iotable.decompose(nn.Sequential(linear, Quantize(4, signed=True, scale=0.125)))


def _tie_table_workload() -> Workload:
    return Workload(
        name="ties-2^24",
        description="one unit of 2^24 rows, weights in steps of 1/8: 4.3M rows on rounding boundaries",
        model=build_tie_table(),
        input_domain=signed_domain(2),
        example_input=torch.zeros(1, 12),
        layers=[],
        total_rows=2**24,
        peers=False,
    )


#: Workload builders by name, in the order the runner measures them.
WORKLOADS: dict[str, Callable[[], Workload]] = {
    "jsc-s": lambda: _mlp_workload("jsc-s"),
    "jsc-m": lambda: _mlp_workload("jsc-m"),
    "jsc-l": lambda: _mlp_workload("jsc-l"),
    "nid-l": lambda: _mlp_workload("nid-l"),
    "cnn": _cnn_workload,
    "table-2^24": _single_table_workload,
    "tiny": lambda: _mlp_workload("tiny"),
    "wide-1k": lambda: _wide_workload(1000),
    "wide-100k": lambda: _wide_workload(100_000),
    "ties-2^24": _tie_table_workload,
}


def build(name: str) -> Workload:
    """Build the workload ``name`` (see :data:`WORKLOADS`)."""
    if name not in WORKLOADS:
        msg = f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}"
        raise KeyError(msg)
    return WORKLOADS[name]()
