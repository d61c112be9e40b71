"""A LogicNets-style sparse MLP on the scikit-learn digits, trained, turned into tables and verified.

Every neuron reads only a few inputs (its fan-in), chosen at random when the model is built, and its
output is quantized to a few bits; so each neuron, with its batch norm and activation, is a small lookup
table: 6 inputs x 2 bits = 12 input bits, 4096 rows. The network is 64 pixels -> 128 -> 64 -> 10 classes.

The sparsity is real, not just declared: a fixed mask (``torch.nn.utils.prune.custom_from_mask``) zeroes
every weight outside a neuron's fan-in, during training and after. ``iotable.decompose(fan_in=...)`` tells
iotable the same fan-in, and iotable's probe checks that the layer reads nothing else.

The class decision goes into hardware too: ``_digits.Classify`` wraps the trained model with ``argmax(-1)`` of
its quantized class scores at the end of ``forward``; its table network ends in an ``argmax`` node (a
comparator tree over the ten 4-bit score codes, ties to the first as ``torch.argmax``), so the exported
design outputs the class. It is simulated under iverilog on every test digit and compared with the model.

Run it with ``python examples/digits_mlp.py`` (needs scikit-learn: ``pip install -e ".[examples]"``).
"""

from __future__ import annotations

from collections import OrderedDict

import _digits  # examples/_digits.py: data and training shared by the digits examples
import torch
from torch import nn

import iotable

FAN_IN = 6  # inputs per neuron; with 2-bit inputs, tables of 2**12 rows
HIDDEN = (128, 64)  # neurons per hidden layer, between 64 pixels and 10 classes
EPOCHS = 10


def sparse_linear(in_features: int, out_features: int, generator: torch.Generator) -> nn.Linear:
    """A Linear whose output ``k`` reads ``FAN_IN`` random inputs: masked weights, declared fan-in."""
    return _digits.sparsify(nn.Linear(in_features, out_features), FAN_IN, generator)


def build_model(seed: int = 0) -> nn.Sequential:
    """Sparse Linear -> BatchNorm1d -> ReLU -> 2-bit Quantize per hidden layer; a signed 4-bit output layer."""
    generator = torch.Generator().manual_seed(seed)
    layers: dict[str, nn.Module] = {}
    n_in = 64
    for k, n_out in enumerate(HIDDEN, start=1):
        layers[f"fc{k}"] = sparse_linear(n_in, n_out, generator)
        layers[f"bn{k}"] = nn.BatchNorm1d(n_out)
        layers[f"relu{k}"] = nn.ReLU()
        layers[f"quant{k}"] = iotable.nn.Quantize(2, scale=0.5)
        n_in = n_out
    # The class scores are quantized too (signed, 4 bits), so the last layer is tables like the others and
    # the table network's output is exactly the model's: argmax of either gives the same class.
    layers["fc_out"] = sparse_linear(n_in, 10, generator)
    layers["bn_out"] = nn.BatchNorm1d(10)
    layers["quant_out"] = iotable.nn.Quantize(4, signed=True, scale=0.5)
    return nn.Sequential(OrderedDict(layers))


def main() -> None:
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = _digits.load(image=False)
    model = build_model()
    _digits.train(model, x_train, y_train, epochs=EPOCHS)
    net = _digits.precompute_and_verify(model, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN)
    restricted_tables(model, net, x_train, x_test, y_test)
    class_decision(model, x_train, x_test, y_test)


def restricted_tables(model: nn.Module, net, x_train, x_test, y_test) -> None:
    """Keep only the rows the training data reaches; the rest become don't-cares for logic minimisers.

    On the observed data the restricted network still equals the model bit for bit. Held-out digits can
    reach rows that were never observed; here those lookups return the code of real 0 (``default="zero"``).
    """
    observed = iotable.observe(net, x_train)
    restricted = net.restrict(observed, min_count=1, default="zero")
    kept, total = sum(t.rows for t in restricted.tables), sum(t.rows for t in net.tables)
    print()
    print(f"observed {observed.samples} training digits: rows kept / total = {kept} / {total} ({kept / total:.1%})")
    for name, layer in restricted.layers.items():
        print(f"  {name}: {sum(t.rows for t in layer.tables)} / {layer.plan.total_rows} rows kept")
    on_train = iotable.verify(model, restricted, x_train)
    print(f"restricted network vs model on the observed training digits: {on_train.agreement:.1%} agree")
    held_out = _digits.accuracy(restricted.run(x_test), y_test)
    print(f"restricted network accuracy on the {len(x_test)} held-out test digits: {held_out:.1%}")
    if not on_train.ok:
        raise SystemExit("the restricted network differs from the model on the data it observed")


def class_decision(model: nn.Module, x_train, x_test, y_test) -> None:
    """The trained model with ``argmax`` at the end, as a table network whose output is the class, in hardware."""
    print()
    print("== The class decision in hardware: argmax of the quantized class scores")
    classifier = _digits.Classify(model)
    net = _digits.precompute_and_verify(classifier, x_train, x_test, y_test, input_domain=_digits.INPUT_DOMAIN)
    _digits.class_in_hardware(net, _digits.evaluate(classifier, x_test), x_test)


if __name__ == "__main__":
    main()
