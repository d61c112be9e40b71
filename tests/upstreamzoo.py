"""Whole LogicNets, PolyLUT, NeuraLUT, DWN and DiffLogic networks in the form their repositories give them (small
versions, our own code): brevitas quantizers in sight, batch norm as a pre-transform of the output quantizer, a
neuron module that runs ``input_quant -> (mask, fc) -> output_quant`` under ``apply_input_quant`` /
``apply_output_quant`` flags, masks held by modules called with no arguments (``self.mask()``, ``self.imask()``),
torch-dwn's LUT layers (an index buffer and a table of learned entries per node) and difflogic's gate layers
(index buffers and 16 gate weights per neuron), each read by a ``GroupSum``. Nothing is decorated: these are the
models a user hands to ``iotable.precompute`` as they come out of training."""

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


# -- LogicNets, the rest of its activation wrapper --------------------------------------------------------------------


class ScalarBiasScale(nn.Module):
    """LogicNets' learned scalar bias then scale (either may be off: its parameter is then ``None``), used as a
    pre-transform of the input quantizer and a post-transform of the last layer's output quantizer."""

    def __init__(self, scale: bool = True, scale_init: float = 1.0, bias: bool = True, bias_init: float = 0.0) -> None:
        super().__init__()
        self.register_parameter("weight", nn.Parameter(torch.full((1,), scale_init)) if scale else None)
        self.register_parameter("bias", nn.Parameter(torch.full((1,), bias_init)) if bias else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias is not None:
            x = x + self.bias
        if self.weight is not None:
            x = x * self.weight
        return x


class QuantBrevitasActivation(nn.Module):
    """LogicNets' quantizer wrapper: ``pre_transforms``, the brevitas quantizer, then ``post_transforms``."""

    def __init__(self, brevitas_module: nn.Module, pre_transforms: list[nn.Module] | None = None,
                 post_transforms: list[nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.brevitas_module = brevitas_module
        self.pre_transforms = nn.ModuleList(pre_transforms or [])
        self.post_transforms = nn.ModuleList(post_transforms or [])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(len(self.pre_transforms)):
            x = self.pre_transforms[i](x)
        x = self.brevitas_module(x)
        for i in range(len(self.post_transforms)):
            x = self.post_transforms[i](x)
        return x


class RandomFixedSparsityMask2D(nn.Module):
    """LogicNets' mask as its repository keeps it: a parameter that training leaves alone, handed out by ``forward()``."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        self.mask = nn.Parameter(torch.zeros(outputs, inputs), requires_grad=False)
        for row, chosen in zip(self.mask.data, _chosen(inputs, outputs, fan_in, _generator(seed))):
            row[chosen] = 1

    def forward(self) -> torch.Tensor:
        return self.mask


class LUTInferenceNeq(SparseLinearNeq):
    """:class:`SparseLinearNeq` with LogicNets' switch to its own truth tables (``is_lut_inference``), off after
    training, and its keyword dictionary for the sparse linear map."""

    def __init__(self, inputs: int, outputs: int, input_quant: nn.Module, output_quant: nn.Module,
                 sparse_linear_kws: dict, apply_input_quant: bool = True) -> None:  # fmt: skip
        super().__init__(inputs, outputs, input_quant, output_quant, sparse_linear_kws["mask"], apply_input_quant)
        self.neuron_truth_tables = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_lut_inference:
            raise NotImplementedError("truth tables are what iotable builds")
        return super().forward(x)


class JetSubstructureNeqModel(nn.Module):
    """LogicNets' jet-substructure model, small: a batch norm and a scalar bias before the input quantizer, ReLU
    quantizers between layers, and a hard-tanh output quantizer followed by a learned scalar bias and scale."""

    def __init__(self, widths: tuple[int, ...] = (8, 6, 3), fan_in: int = 3, bits: int = 2, seed: int = 0) -> None:
        super().__init__()
        import brevitas.nn as qnn

        layers: list[nn.Module] = []
        for i, (inputs, outputs) in enumerate(itertools.pairwise(widths)):
            bn = nn.BatchNorm1d(outputs)
            mask = RandomFixedSparsityMask2D(inputs, outputs, fan_in, seed + i)
            if i == 0:
                pre = [nn.BatchNorm1d(inputs), ScalarBiasScale(scale=False, bias_init=-0.25)]
                input_quant = QuantBrevitasActivation(qnn.QuantHardTanh(bit_width=bits, max_val=1.0, min_val=-1.0), pre)
            else:
                input_quant = layers[-1].output_quant
            if i == len(widths) - 2:
                quant = qnn.QuantHardTanh(bit_width=bits, max_val=1.33, min_val=-1.33)
                output_quant = QuantBrevitasActivation(quant, [bn], [ScalarBiasScale(bias_init=0.33)])
            else:
                output_quant = QuantBrevitasActivation(qnn.QuantReLU(bit_width=bits, max_val=1.61), [bn])
            layers.append(LUTInferenceNeq(inputs, outputs, input_quant, output_quant, {"mask": mask}, i == 0))
        self.module_list = nn.ModuleList(layers)
        _settle_batch_norms(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.module_list:
            x = layer(x)
        return x


# -- torch-dwn (DWN) ---------------------------------------------------------------------------------------------------


class DWNLUTLayer(nn.Module):
    """torch-dwn's ``LUTLayer`` with a random mapping: node ``j`` reads inputs ``mapping[j*n:(j+1)*n]`` (an index
    buffer; two of them may be the same input) as the address bits of its row of ``luts``; training estimates
    the gradient through the lookup, evaluation outputs whether the entry is positive, as 0.0 or 1.0."""

    def __init__(self, input_size: int, output_size: int, n: int = 6, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        self.input_size, self.output_size, self.n = input_size, output_size, n
        self.register_buffer("mapping", torch.randint(0, input_size, (output_size * n,), generator=generator))
        self.luts = nn.Parameter(torch.rand(output_size, 2**n, generator=generator) * 2 - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bits = x[:, self.mapping].view(x.shape[0], self.output_size, self.n)
        address = (bits * 2 ** torch.arange(self.n)).sum(-1).long()
        entries = self.luts[torch.arange(self.output_size), address]
        if self.training:  # straight-through: the sign forward, the entry's gradient backward
            return (entries > 0).float() + entries - entries.detach()
        return (entries > 0).float()


# -- difflogic / torchlogix ------------------------------------------------------------------------------------------


class PackBitsTensor:
    """difflogic's packed-bit batch, which its layers test their input against (never a model input here)."""


def bin_op(a: torch.Tensor, b: torch.Tensor, i: int) -> torch.Tensor:
    """The ``i``-th of the 16 two-input Boolean functions, on reals in [0, 1] (products for AND)."""
    ops = [
        lambda: torch.zeros_like(a), lambda: a * b, lambda: a - a * b, lambda: a, lambda: b - a * b, lambda: b,
        lambda: a + b - 2 * a * b, lambda: a + b - a * b, lambda: 1 - (a + b - a * b), lambda: 1 - (a + b - 2 * a * b),
        lambda: 1 - b, lambda: 1 - b + a * b, lambda: 1 - a, lambda: 1 - a + a * b, lambda: 1 - a * b,
        lambda: torch.ones_like(a),
    ]  # fmt: skip
    return ops[i]()


def bin_op_s(a: torch.Tensor, b: torch.Tensor, i_s: torch.Tensor) -> torch.Tensor:
    """The mix of the 16 functions with weights ``i_s`` (..., 16): one-hot at evaluation."""
    r = torch.zeros_like(a)
    for i in range(16):
        r = r + i_s[..., i] * bin_op(a, b, i)
    return r


class LogicLayer(nn.Module):
    """difflogic's ``LogicLayer`` (torchlogix's ``LogicDense``): output ``j`` is a mix of the 16 gates of inputs
    ``a[j]`` and ``b[j]`` (index buffers), by the softmax of ``weights[j]`` in training and its argmax at
    evaluation."""

    def __init__(self, in_dim: int, out_dim: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weights = nn.Parameter(torch.randn(out_dim, 16, generator=generator))
        pairs = torch.stack([torch.randperm(in_dim, generator=generator)[:2] for _ in range(out_dim)])
        self.register_buffer("a", pairs[:, 0].clone())
        self.register_buffer("b", pairs[:, 1].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, PackBitsTensor):
            raise NotImplementedError("packed bits run on CUDA only")
        assert x.shape[-1] == self.in_dim, (x[0].shape[-1], self.in_dim)
        a, b = x[..., self.a], x[..., self.b]
        if self.training:
            return bin_op_s(a, b, nn.functional.softmax(self.weights, dim=-1))
        weights = nn.functional.one_hot(self.weights.argmax(-1), 16).to(torch.float32)
        return bin_op_s(a, b, weights)


class GroupSum(nn.Module):
    """difflogic's and torch-dwn's head: the sum of each of ``k`` groups of the last axis, divided by ``tau``."""

    def __init__(self, k: int, tau: float = 1.0) -> None:
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, PackBitsTensor):
            raise NotImplementedError("packed bits run on CUDA only")
        assert x.shape[-1] % self.k == 0, (x.shape, self.k)
        return x.reshape(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(-1) / self.tau


def dwn_model(features: int = 24, seed: int = 0) -> nn.Sequential:
    """A DWN as torch-dwn's examples build one (thermometer bits in): two LUT-6 layers, then ``GroupSum``."""
    return nn.Sequential(DWNLUTLayer(features, 40, n=6, seed=seed), DWNLUTLayer(40, 20, n=6, seed=seed + 1),
                         GroupSum(4, tau=1 / 0.3))  # fmt: skip


def difflogic_model(features: int = 24, seed: int = 0) -> nn.Sequential:
    """A DiffLogic network as difflogic's examples build one: two gate layers, then ``GroupSum``."""
    return nn.Sequential(LogicLayer(features, 48, seed=seed), LogicLayer(48, 40, seed=seed + 1), GroupSum(4, tau=2.0))
