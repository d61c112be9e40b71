"""A DiffLogic-style network of logic gates on the scikit-learn digits, whose hardware outputs the class.

Difflogic (Petersen et al., NeurIPS 2022) learns a network of two-input logic gates. Every neuron reads a
fixed random pair of bits; in training it is a soft mix of the 16 Boolean functions of two inputs, written on
reals in [0, 1] (``a * b`` for AND, ``a + b - a * b`` for OR, ...), weighted by the softmax of its 16 learned
logits, so gradient descent can choose; in eval mode it is the one gate its logits pick, and the network is
pure logic. The model here, as that family writes it:

- a thermometer encoder: each 2-bit pixel becomes 3 bits (bit ``t`` set where it exceeds threshold ``t``);
- two layers of gates, 192 -> 1200 -> 1000 bits;
- GroupSum, the family's head: per class, the number of set bits among its 100, over a temperature
  (``x.view(*x.shape[:-1], k, -1).sum(-1) / tau``), and in eval mode the class decision ``argmax(-1)``.

iotable turns the encoder and every gate into a small table, the GroupSum into a popcount of 100 bits per
class (an adder tree, exact) and the argmax into a comparator tree; nothing is left to software. The network
is checked against the model bit for bit, then exported as Verilog and simulated on every test digit: the
class out of the hardware is the model's class.

Run it with ``python examples/digits_difflogic.py`` (needs scikit-learn: ``pip install -e ".[examples]"``;
iverilog for the simulation, GHDL for the VHDL one: ``apt-get install iverilog ghdl``).
"""

from __future__ import annotations

import itertools

import _digits  # examples/_digits.py: data and training shared by the digits examples
import torch
from torch import nn

import iotable

LEVELS = (1 / 6, 1 / 2, 5 / 6)  # thermometer thresholds: between the 2-bit pixel values 0, 1/3, 2/3, 1
WIDTHS = (1200, 1000)  # gates per layer; the last layer's 1000 bits are 100 per class
CLASSES = 10
TAU = 10.0  # GroupSum's temperature: the scores are bit counts over 10, in [0, 10]
EPOCHS = 12
BITS = iotable.Domain([0.0, 1.0])  # what every gate outputs in eval mode


class Thermometer(nn.Module):
    """Feature ``f`` becomes ``len(thresholds)`` bits: bit ``t`` is 1 where the feature exceeds threshold ``t``."""

    def __init__(self, features: int, thresholds: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("thresholds", torch.tensor(thresholds).repeat(features, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.unsqueeze(-1) > self.thresholds).float().flatten(1)


#: The 16 Boolean functions of two inputs in truth-table order (0, AND, A AND NOT B, A, ..., NAND, 1), each as
#: the real polynomial ``c0 + c1 * a + c2 * b + c3 * a * b`` that equals it on bits: row ``g`` holds gate ``g``'s
#: ``(c0, c1, c2, c3)``. A mix of gates is then a mix of these rows: four terms per neuron instead of sixteen.
GATES = torch.tensor(
    [
        [0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, -1], [0, 1, 0, 0], [0, 0, 1, -1], [0, 0, 1, 0], [0, 1, 1, -2],
        [0, 1, 1, -1], [1, -1, -1, 1], [1, -1, -1, 2], [1, 0, -1, 0], [1, 0, -1, 1], [1, -1, 0, 0], [1, -1, 0, 1],
        [1, 0, 0, -1], [1, 0, 0, 0],
    ],
    dtype=torch.float32,
)  # fmt: skip


class LogicLayer(nn.Module):
    """``neurons`` two-input gates, each over a fixed random pair of inputs: a soft mix of the 16 gates (the
    softmax of its logits) in training, the gate its logits pick (a one-hot mix) in eval mode."""

    def __init__(self, inputs: int, neurons: int, generator: torch.Generator) -> None:
        super().__init__()
        # every input read at least once where there are enough neurons, then random pairs
        order = torch.cat([torch.randperm(inputs, generator=generator) for _ in range(2 * neurons // inputs + 1)])
        self.register_buffer("indices", order[: 2 * neurons].view(2, neurons))
        self.register_buffer("gates", GATES.clone())
        self.logits = nn.Parameter(torch.randn(neurons, 16, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., self.indices[0]], x[..., self.indices[1]]
        if self.training:
            mix = torch.softmax(self.logits, dim=-1)
        else:
            mix = nn.functional.one_hot(self.logits.argmax(-1), 16).to(x.dtype)
        c = mix @ self.gates  # (neurons, 4): each neuron's polynomial
        return c[:, 0] + c[:, 1] * a + c[:, 2] * b + c[:, 3] * (a * b)


class GroupSum(nn.Module):
    """Per class, the sum of its group of bits over a temperature ``tau``."""

    def __init__(self, k: int, tau: float) -> None:
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] % self.k == 0, (x.shape, self.k)
        return x.view(*x.shape[:-1], self.k, -1).sum(-1) / self.tau


class DigitsLogic(nn.Module):
    """(N, 64) 2-bit pixels -> 10 class scores in training, the class (N,) in eval mode."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.encode = Thermometer(64, LEVELS)
        widths = (64 * len(LEVELS), *WIDTHS)
        self.logic = nn.Sequential(*(LogicLayer(a, b, generator) for a, b in itertools.pairwise(widths)))
        self.head = GroupSum(CLASSES, TAU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.head(self.logic(self.encode(x)))
        return scores if self.training else scores.argmax(-1)  # training needs the scores, inference the class


def main() -> None:
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = _digits.load(image=False)
    model = DigitsLogic()
    _digits.train(model, x_train, y_train, epochs=EPOCHS, lr=0.05)
    # What the structure cannot show: the encoder and the gates output bits (in eval mode). Their inputs, the
    # pixel each encoder bit reads and the pair each gate reads, iotable finds itself (fan_in="auto").
    for layer in (model.encode, *model.logic):
        iotable.decompose(layer, fan_in="auto", output_domain=BITS)
    net = _digits.precompute_and_verify(model, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN)
    hosts = net.graph.nodes_of(iotable.NodeKind.HOST)
    if hosts:
        raise SystemExit(f"expected no host node, found {[n.name for n in hosts]}")
    _digits.class_in_hardware(net, _digits.evaluate(model, x_test), x_test, vhdl=True)


if __name__ == "__main__":
    main()
