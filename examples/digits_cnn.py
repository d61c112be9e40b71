"""A small quantized CNN on the scikit-learn digits, trained, turned into tables and verified.

The convolutions become tables, one per output channel, each serving every position of its window:

- ``conv1``: 3x3, stride 2, padding 1, 1 -> 8 channels; a unit reads 9 inputs x 2 bits = 18 bits.
- ``depthwise``: 3x3, padding 1, 8 groups of one channel; again 9 inputs x 2 bits per unit.
- ``pointwise``: 1x1, 8 -> 16 channels; a unit reads 8 inputs x 2 bits = 16 bits.

Each is fused with its batch norm, ReLU and 2-bit quantizer. Padding feeds the code of real 0 (the graph
holds it as a pad node before each window), and the summary lists each window's line buffer and stride.

The classifier head ``fc`` reads all 16 x 4 x 4 = 256 features: as one table it would have 2**512 rows,
so it stays a float ``nn.Linear`` that torch runs on the host (``host=["fc"]``; the summary flags it) and
the network's outputs are its float class scores. ``digits_mlp.py`` shows the other way: a sparse,
quantized last layer that is tables like the rest.

Then the head goes into hardware with the class decision. After training, ``fc``'s weights and bias are rounded
to sixteenths (fixed point) and its scores quantized to 8 bits in quarter units, and ``argmax(-1)`` ends the
forward. Its inputs are 2-bit features in halves, so every product and every partial sum is a multiple of 1/32
far below 2**24 of them: the float32 sums are exact in any order, and iotable turns ``fc`` into sums of
weighted codes (a ``sum`` node: tables of partial sums over a few inputs each, or the weights folded into adder
trees that share their partial products, whichever the LUT estimates find cheaper), the quantizer as a table
per class over its sum (or comparisons against constants, a ``threshold`` node, where those are cheaper) and a
comparator tree (``argmax``): no host node. The design is exported in the unrolled style, every unit at every
position: the streaming style passes pixels one position per word and refuses a node reading a whole frame, as
``fc``'s sum does (it would need a frame buffer).
It is simulated under iverilog on every test digit and compared with the model.

Run it with ``python examples/digits_cnn.py`` (needs scikit-learn: ``pip install -e ".[examples]"``).
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import _digits  # examples/_digits.py: data and training shared by the digits examples
import torch
from torch import nn

import iotable

EPOCHS = 10
GRID = 1 / 16  # the quantized head's weights and bias: multiples of 1/16
SCORES = iotable.nn.Quantize(8, scale=0.25, signed=True)  # its class scores: quarter units in [-32, 31.75]


def quantized(name: str, layer: nn.Module, channels: int) -> dict[str, nn.Module]:
    """``layer`` -> BatchNorm2d -> ReLU -> 2-bit quantizer: one table layer, named after ``layer``."""
    return {
        name: layer,
        f"{name}_bn": nn.BatchNorm2d(channels),
        f"{name}_relu": nn.ReLU(),
        f"{name}_quant": iotable.nn.Quantize(2, scale=0.5),
    }


class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) 2-bit images -> 10 class scores."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                quantized("conv1", nn.Conv2d(1, 8, 3, stride=2, padding=1), 8)  # 8x8 -> 4x4
                | quantized("depthwise", nn.Conv2d(8, 8, 3, padding=1, groups=8), 8)
                | quantized("pointwise", nn.Conv2d(8, 16, 1), 16)
            )
        )
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.features(x)))


def main() -> None:
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = _digits.load(image=True)
    model = DigitsCNN()
    _digits.train(model, x_train, y_train, epochs=EPOCHS)
    _digits.precompute_and_verify(model, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN, host=["fc"])
    class_decision(model, x_train, x_test, y_test)


def quantized_head(model: DigitsCNN) -> nn.Module:
    """The trained model with ``fc`` on a fixed-point grid, its scores quantized and ``argmax`` at the end."""
    fc = copy.deepcopy(model.fc)
    with torch.no_grad():
        for p in (fc.weight, fc.bias):
            p.copy_(torch.round(p / GRID) * GRID)
    head = nn.Sequential(OrderedDict(fc=fc, scores=copy.deepcopy(SCORES)))
    return _digits.Classify(nn.Sequential(OrderedDict(features=model.features, flatten=model.flatten, head=head)))


def class_decision(model: DigitsCNN, x_train, x_test, y_test) -> None:
    """The quantized head as exact arithmetic, a table network whose output is the class, in hardware."""
    print()
    print("== The class decision in hardware: fc on a grid of 1/16, 8-bit scores, argmax")
    float_accuracy = _digits.accuracy(_digits.evaluate(model, x_test), y_test)
    classifier = quantized_head(model)
    quantized_accuracy = _digits.accuracy(_digits.evaluate(classifier, x_test), y_test)
    print(
        f"quantized-head accuracy on the {len(x_test)} test digits: {quantized_accuracy:.1%} "
        f"(float head {float_accuracy:.1%})"
    )
    net = _digits.precompute_and_verify(classifier, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN)
    _digits.class_in_hardware(net, _digits.evaluate(classifier, x_test), x_test)


if __name__ == "__main__":
    main()
