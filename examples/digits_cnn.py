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

Run it with ``python examples/digits_cnn.py`` (needs scikit-learn: ``pip install -e ".[examples]"``).
"""

from __future__ import annotations

from collections import OrderedDict

import _digits  # examples/_digits.py: data and training shared by the digits examples
import torch
from torch import nn

import iotable

EPOCHS = 10


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


if __name__ == "__main__":
    main()
