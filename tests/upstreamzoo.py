"""Whole LogicNets, PolyLUT and NeuraLUT networks in the form their repositories give them (small versions, our
own code): brevitas quantizers in sight, batch norm as a pre-transform of the output quantizer, a neuron module
that runs ``input_quant -> (mask, fc) -> output_quant`` under ``apply_input_quant`` / ``apply_output_quant``
flags, and masks held by modules called with no arguments (``self.mask()``, ``self.imask()``). Nothing is
decorated: these are the models a user hands to ``iotable.precompute`` as they come out of training."""

from __future__ import annotations

import itertools

import torch
from torch import nn
from torch.nn import functional as F  # the name the field's code uses


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _chosen(inputs: int, outputs: int, fan_in: int, generator: torch.Generator) -> torch.Tensor:
    """For each output, ``fan_in`` distinct inputs drawn at random: ``(outputs, fan_in)`` indices."""
    return torch.stack([torch.randperm(inputs, generator=generator)[:fan_in] for _ in range(outputs)])


class QuantActivation(nn.Module):
    """A brevitas quantizer with transforms before it (batch norm) and after it, as the three repositories wrap
    their activations."""

    def __init__(self, quantizer: nn.Module, pre: list[nn.Module] | None = None) -> None:
        super().__init__()
        self.brevitas_module = quantizer
        self.pre_transforms = nn.ModuleList(pre or [])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for transform in self.pre_transforms:
            x = transform(x)
        return self.brevitas_module(x)


def hardtanh(bits: int, features: int | None = None, max_val: float = 1.0) -> QuantActivation:
    """A signed brevitas quantizer, with a batch norm before it when ``features`` is given."""
    import brevitas.nn as qnn

    pre = [nn.BatchNorm1d(features)] if features else []
    return QuantActivation(qnn.QuantHardTanh(bit_width=bits, max_val=max_val, min_val=-max_val), pre)


def relu(bits: int, features: int, max_val: float = 1.5) -> QuantActivation:
    """An unsigned brevitas quantizer after a batch norm."""
    import brevitas.nn as qnn

    return QuantActivation(qnn.QuantReLU(bit_width=bits, max_val=max_val), [nn.BatchNorm1d(features)])


def _settle_batch_norms(model: nn.Module, seed: int) -> None:
    """Give every batch norm running statistics and an affine map away from their initial values, and every
    linear map seeded weights (the same network on every run)."""
    generator = _generator(seed)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight.data.copy_(torch.randn(m.weight.shape, generator=generator) * 0.7)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=generator) * 0.2)
        if isinstance(m, nn.BatchNorm1d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=generator) * 0.3)
            m.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=generator) * 0.2)


# -- LogicNets -----------------------------------------------------------------------------------------------------


class RandomFixedSparsityMask(nn.Module):
    """LogicNets' mask: a fixed 0/1 matrix with ``fan_in`` ones per row, handed out by ``forward()``."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        self.mask = torch.zeros(outputs, inputs)  # a plain attribute, as upstream keeps it
        for row, chosen in zip(self.mask, _chosen(inputs, outputs, fan_in, _generator(seed))):
            row[chosen] = 1

    def forward(self) -> torch.Tensor:
        return self.mask


class SparseLinear(nn.Linear):
    """A Linear whose weight is multiplied by its mask module's output on every call."""

    def __init__(self, inputs: int, outputs: int, mask: nn.Module) -> None:
        super().__init__(inputs, outputs)
        self.mask = mask

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # torch's own argument name
        return F.linear(input, self.weight * self.mask(), self.bias)


class SparseLinearNeq(nn.Module):
    """LogicNets' neuron layer: ``input_quant`` (when ``apply_input_quant``), the masked Linear, ``output_quant``."""

    def __init__(
        self,
        inputs: int,
        outputs: int,
        input_quant: nn.Module,
        output_quant: nn.Module,
        mask: nn.Module,
        apply_input_quant: bool = True,
        apply_output_quant: bool = True,
    ) -> None:
        super().__init__()
        self.input_quant = input_quant
        self.fc = SparseLinear(inputs, outputs, mask)
        self.output_quant = output_quant
        self.apply_input_quant = apply_input_quant
        self.apply_output_quant = apply_output_quant
        self.is_lut_inference = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.apply_input_quant:
            x = self.input_quant(x)
        x = self.fc(x)
        if self.apply_output_quant:
            x = self.output_quant(x)
        return x


class LogicNetsModel(nn.Module):
    """A LogicNets network: layers of :class:`SparseLinearNeq` in a ModuleList; each layer's output quantizer is the
    next layer's input quantizer (not applied twice)."""

    def __init__(self, widths: tuple[int, ...] = (6, 4, 3), fan_in: int = 2, bits: int = 2, seed: int = 0) -> None:
        super().__init__()
        layers = []
        quant = hardtanh(bits, widths[0])
        for k, (inputs, outputs) in enumerate(itertools.pairwise(widths)):
            last = k == len(widths) - 2
            out_quant = hardtanh(bits, outputs) if last else relu(bits, outputs)
            mask = RandomFixedSparsityMask(inputs, outputs, fan_in, seed + k)
            layers.append(SparseLinearNeq(inputs, outputs, quant, out_quant, mask, apply_input_quant=k == 0))
            quant = out_quant
        self.module_list = nn.ModuleList(layers)
        _settle_batch_norms(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.module_list:
            x = layer(x)
        return x


# -- PolyLUT -------------------------------------------------------------------------------------------------------


def _exponents(fan_in: int, degree: int) -> torch.Tensor:
    """Every monomial of degree at most ``degree`` in ``fan_in`` variables, as rows of exponents."""
    rows = [e for e in itertools.product(range(degree + 1), repeat=fan_in) if sum(e) <= degree]
    return torch.tensor(rows, dtype=torch.float32)


class PolySparseLinear(nn.Linear):
    """PolyLUT's per-neuron linear map of its monomials: ``(x * weight).sum(-1) + bias``."""

    def __init__(self, monomials: int, outputs: int) -> None:
        super().__init__(monomials, outputs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return (input * self.weight).sum(dim=-1) + self.bias


class PolyLUTNeq(nn.Module):
    """PolyLUT's neuron layer: each neuron's inputs gathered by an index tensor, raised to every monomial's
    exponents, multiplied out, then a linear map of the monomials."""

    def __init__(self, inputs: int, outputs: int, input_quant: nn.Module, output_quant: nn.Module, *, fan_in: int,
                 degree: int, seed: int, apply_input_quant: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.input_quant = input_quant
        self.output_quant = output_quant
        self.imask = _chosen(inputs, outputs, fan_in, _generator(seed))
        self.mask = _exponents(fan_in, degree)
        self.fc = PolySparseLinear(len(self.mask), outputs)
        self.apply_input_quant = apply_input_quant
        self.apply_output_quant = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.apply_input_quant:
            x = self.input_quant(x)
        x = x[:, self.imask]  # (batch, outputs, fan_in)
        x = x.unsqueeze(dim=-2).pow(self.mask).prod(dim=-1)  # (batch, outputs, monomials)
        x = self.fc(x)
        if self.apply_output_quant:
            x = self.output_quant(x)
        return x


class PolyLUTModel(nn.Module):
    """A PolyLUT network (degree 2) of :class:`PolyLUTNeq` layers."""

    def __init__(self, widths: tuple[int, ...] = (6, 4, 3), fan_in: int = 2, bits: int = 2, seed: int = 0) -> None:
        super().__init__()
        layers = []
        quant = hardtanh(bits, widths[0])
        for k, (inputs, outputs) in enumerate(itertools.pairwise(widths)):
            out_quant = hardtanh(bits, outputs) if k == len(widths) - 2 else relu(bits, outputs)
            layers.append(PolyLUTNeq(inputs, outputs, quant, out_quant, fan_in=fan_in, degree=2, seed=seed + k,
                                     apply_input_quant=k == 0))  # fmt: skip
            quant = out_quant
        self.module_list = nn.ModuleList(layers)
        _settle_batch_norms(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.module_list:
            x = layer(x)
        return x


# -- NeuraLUT ------------------------------------------------------------------------------------------------------


class InputMask(nn.Module):
    """NeuraLUT's input mask: the inputs each neuron reads, handed out by ``forward()``."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        self.register_buffer("indices", _chosen(inputs, outputs, fan_in, _generator(seed)))

    def forward(self) -> torch.Tensor:
        return self.indices


class NeuraLUTNeq(nn.Module):
    """NeuraLUT's neuron layer: each neuron a small MLP (width ``width``, a residual path) of its gathered inputs,
    every neuron's MLP run at once with per-neuron weights."""

    def __init__(self, inputs: int, outputs: int, input_quant: nn.Module, output_quant: nn.Module, *, fan_in: int,
                 width: int, seed: int, apply_input_quant: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.input_quant = input_quant
        self.output_quant = output_quant
        self.imask = InputMask(inputs, outputs, fan_in, seed)
        self.width = width
        self.fc1 = PolySparseLinear(fan_in, outputs * width)
        self.fc2 = PolySparseLinear(width, outputs)
        self.res = PolySparseLinear(fan_in, outputs)
        self.relu = nn.ReLU()
        self.apply_input_quant = apply_input_quant
        self.apply_output_quant = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.apply_input_quant:
            x = self.input_quant(x)
        x = x[:, self.imask()]  # (batch, outputs, fan_in)
        residual = self.res(x)
        hidden = x.repeat(1, 1, self.width).reshape(x.size(0), x.size(1) * self.width, x.size(2))
        hidden = self.relu(self.fc1(hidden)).reshape(x.size(0), x.size(1), self.width)
        x = self.fc2(hidden) + residual
        if self.apply_output_quant:
            x = self.output_quant(x)
        return x


class NeuraLUTModel(nn.Module):
    """A NeuraLUT network of :class:`NeuraLUTNeq` layers."""

    def __init__(self, widths: tuple[int, ...] = (6, 4, 3), fan_in: int = 2, bits: int = 2, seed: int = 0) -> None:
        super().__init__()
        layers = []
        quant = hardtanh(bits, widths[0])
        for k, (inputs, outputs) in enumerate(itertools.pairwise(widths)):
            out_quant = hardtanh(bits, outputs) if k == len(widths) - 2 else relu(bits, outputs)
            layers.append(NeuraLUTNeq(inputs, outputs, quant, out_quant, fan_in=fan_in, width=4, seed=seed + k,
                                      apply_input_quant=k == 0))  # fmt: skip
            quant = out_quant
        self.module_list = nn.ModuleList(layers)
        _settle_batch_norms(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.module_list:
            x = layer(x)
        return x
