"""A brevitas network on the scikit-learn digits, trained, turned into tables and verified bit for bit.

The model is written with brevitas layers only, as a QAT user writes it, and iotable reads it as it is:

- ``input_quant``: a ``QuantIdentity`` (unsigned, 2 bits, learned scale) quantizes the raw pixels. It is
  the first quantizer after the input, so it is a table layer of its own: 64 one-input tables, each mapping
  the 17 pixel values 0/16 .. 16/16 to a 2-bit code.
- ``fc1``, ``fc2``: sparse ``QuantLinear`` layers (4-bit weights, one scale per output channel) fused with
  a batch norm and a 2-bit ``QuantReLU``; every neuron reads 6 inputs x 2 bits = 12 bits, 4096 rows.
- ``fc_out``: a sparse ``QuantLinear`` to the 10 classes, a batch norm and a signed 4-bit ``QuantIdentity``,
  so the class scores are codes too, and tables like the rest.

The sparsity is real: a fixed mask (``torch.nn.utils.prune.custom_from_mask``) zeroes every weight outside a
neuron's fan-in, and brevitas quantizes those zeros to exactly 0; ``iotable.decompose(fan_in=...)`` declares
the same fan-in, and iotable's probe checks that each neuron reads nothing else. iotable takes every
quantizer's domain from its brevitas proxy (scale, zero point, bit width, signedness, narrow range) and
every table from the layers' own forward, so weight quantization and rounding are brevitas' own.

Run it with ``python examples/digits_brevitas.py`` (needs scikit-learn and brevitas:
``pip install -e ".[examples,brevitas]"``).
"""

from __future__ import annotations

from collections import OrderedDict

import _digits  # examples/_digits.py: the training loop and accuracy shared by the digits examples
import brevitas.nn as qnn
import torch
from brevitas.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import iotable

FAN_IN = 6  # inputs per neuron; with 2-bit inputs, tables of 2**12 rows
HIDDEN = (64, 32)  # neurons per hidden layer, between 64 pixels and 10 classes
EPOCHS = 12
#: The model's input: raw pixels 0..16 scaled to [0, 1], 17 values. The model quantizes them itself.
PIXELS = iotable.Domain.values([k / 16 for k in range(17)])


def load() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 8x8 digits as ``(x_train, y_train, x_test, y_test)``, pixels as values of :data:`PIXELS`."""
    digits = load_digits()  # ships inside scikit-learn: no download
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def sparse_linear(in_features: int, out_features: int, generator: torch.Generator) -> qnn.QuantLinear:
    """A QuantLinear whose output ``k`` reads ``FAN_IN`` random inputs: masked weights, declared fan-in."""
    linear = qnn.QuantLinear(in_features, out_features, weight_quant=Int8WeightPerChannelFloat, weight_bit_width=4)
    return _digits.sparsify(linear, FAN_IN, generator)


def build_model(seed: int = 0) -> nn.Sequential:
    """QuantIdentity on the pixels, then sparse QuantLinear -> BatchNorm1d -> 2-bit quantizer per layer."""
    generator = torch.Generator().manual_seed(seed)
    layers: dict[str, nn.Module] = {"input_quant": qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, bit_width=2)}
    n_in = 64
    for k, n_out in enumerate(HIDDEN, start=1):
        layers[f"fc{k}"] = sparse_linear(n_in, n_out, generator)
        layers[f"bn{k}"] = nn.BatchNorm1d(n_out)
        layers[f"act{k}"] = qnn.QuantReLU(bit_width=2)
        n_in = n_out
    layers["fc_out"] = sparse_linear(n_in, 10, generator)
    layers["bn_out"] = nn.BatchNorm1d(10)
    layers["quant_out"] = qnn.QuantIdentity(bit_width=4)  # signed 4-bit class scores
    return nn.Sequential(OrderedDict(layers))


def main() -> None:
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = load()
    model = build_model()
    _digits.train(model, x_train, y_train, epochs=EPOCHS)
    for name in ("input_quant", "act1", "act2", "quant_out"):
        print(f"{name}: {iotable.nn.domain_of(getattr(model, name))}")
    _digits.precompute_and_verify(model, x_train, x_test, y_test, input_domain=PIXELS)


if __name__ == "__main__":
    main()
