"""A JSC-sized network written the way LogicNets writes it, on the scikit-learn digits, as tables.

LogicNets, PolyLUT and NeuraLUT build networks from *neuron layers*: a module that holds its input
quantizer, a linear layer whose weights are multiplied by a fixed sparsity mask, a batch norm and its
output quantizer, and applies all of them inside its own ``forward``. The model keeps the layers in an
``nn.ModuleList`` and applies them in a loop. This example writes such a model (layers 64-32-32-32-10, the
widths of LogicNets' JSC-S, fan-in 3 x 2 bits: tables of 64 rows) with nothing iotable-specific but one
class decoration::

    @iotable.decompose(fan_in="fc.mask.mask", output_domain="output_quant")
    class SparseLinearNeq(nn.Module): ...

``fan_in=`` names the mask tensor (row ``k`` holds the inputs neuron ``k`` reads) and ``output_domain=`` the
quantizer that ends the neuron's ``forward``. iotable reads both whenever the model is planned, cuts the
model into one table layer per neuron layer, and verifies the table network against the model bit for bit.

Run it with ``python examples/logicnets_style.py`` (needs scikit-learn: ``pip install -e ".[examples]"``).
"""

from __future__ import annotations

import itertools

import _digits  # examples/_digits.py: data and training shared by the digits examples
import torch
import torch.nn.functional as F
from torch import nn

import iotable
from iotable.nn import Quantize

WIDTHS = (64, 32, 32, 32, 10)  # LogicNets' JSC-S hidden widths, between the 64 pixels and the 10 classes
FAN_IN = 3  # inputs per neuron: 3 x 2 bits = 6 address bits, 64 rows per table
EPOCHS = 30


class FixedSparsityMask(nn.Module):
    """A fixed random mask, as LogicNets' sparsity masks: row ``k`` marks the ``fan_in`` inputs of neuron ``k``."""

    def __init__(self, in_features: int, out_features: int, fan_in: int, generator: torch.Generator) -> None:
        super().__init__()
        mask = torch.zeros(out_features, in_features)
        for k in range(out_features):
            mask[k, torch.randperm(in_features, generator=generator)[:fan_in]] = 1.0
        self.register_buffer("mask", mask)

    def forward(self) -> torch.Tensor:
        return self.mask


class SparseLinear(nn.Linear):
    """A linear layer whose weights are multiplied by its mask at every call."""

    def __init__(self, in_features: int, out_features: int, mask: FixedSparsityMask) -> None:
        super().__init__(in_features, out_features)
        self.mask = mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.mask(), self.bias)


@iotable.decompose(fan_in="fc.mask.mask", output_domain="output_quant")
class SparseLinearNeq(nn.Module):
    """A neuron layer: input quantizer, masked linear layer, batch norm and output quantizer, in its forward."""

    def __init__(self, in_features: int, out_features: int, input_quant: nn.Module, output_quant: nn.Module, generator):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.input_quant = input_quant
        self.fc = SparseLinear(
            in_features, out_features, FixedSparsityMask(in_features, out_features, FAN_IN, generator)
        )
        self.bn = nn.BatchNorm1d(out_features)
        self.output_quant = output_quant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_quant(self.bn(self.fc(self.input_quant(x))))


class JetStyleModel(nn.Module):
    """Neuron layers in a ModuleList, applied in a loop; a layer's input quantizer is the previous one's output one."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        quantizer = _digits.INPUT_QUANT  # the pixels' 2-bit quantizer
        layers = []
        for k, (n_in, n_out) in enumerate(itertools.pairwise(WIDTHS)):
            last = k == len(WIDTHS) - 2
            # Hidden neurons: unsigned 2-bit codes (the clamp at 0 is the ReLU); the class scores: signed 4 bits.
            output_quant = Quantize(4, signed=True, scale=0.5) if last else Quantize(2, scale=0.5)
            layers.append(SparseLinearNeq(n_in, n_out, quantizer, output_quant, generator))
            quantizer = output_quant
        self.module_list = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.module_list:
            x = layer(x)
        return x


def main() -> None:
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = _digits.load(image=False)
    model = JetStyleModel()
    _digits.train(model, x_train, y_train, epochs=EPOCHS, lr=0.02)
    net = _digits.precompute_and_verify(model, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN)
    print()
    first = net["module_list.0"]
    print(f"{first.name}: {len(first)} tables, unit 0 reads pixels {list(first.plan.units[0].in_channels)}")
    print(f"  (row 0 of the mask: {model.module_list[0].fc.mask.mask[0].nonzero().flatten().tolist()})")
    print(f"  metadata: {first.plan.spec.source}")


if __name__ == "__main__":
    main()
