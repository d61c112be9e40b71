"""Shared by the digits examples: the scikit-learn digits data, quantized, a short training loop, and the check
that a design's class out of the simulator is the model's.

Not an example itself (the leading underscore says so); the ``digits_*.py`` examples import it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.utils import prune

import iotable

#: The inputs of both networks: pixels scaled to [0, 1] and rounded to 2 bits, i.e. {0, 1/3, 2/3, 1}.
#: The quantizer runs once, in preprocessing, so the model's input is already values of this domain, which
#: is what a table network reads (``input_domain=``).
INPUT_QUANT = iotable.nn.Quantize(2, scale=1 / 3)
INPUT_DOMAIN = INPUT_QUANT.domain


def load(*, image: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 8x8 digits as ``(x_train, y_train, x_test, y_test)``: a fixed, stratified 80/20 split.

    ``image=True`` shapes inputs ``(N, 1, 8, 8)``, otherwise ``(N, 64)``. Inputs are values of
    :data:`INPUT_DOMAIN`.
    """
    digits = load_digits()  # ships inside scikit-learn: no download
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)  # pixels are 0..16
    x = INPUT_QUANT(x)
    if image:
        x = x.reshape(-1, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float = 0.01) -> None:
    """Quantization-aware training with Adam and cross-entropy on the model's outputs, in mini-batches of 32."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss()
    # Batches this small are fastest on one thread: more threads only add synchronisation, which becomes
    # very slow when other processes share the cores (a parallel test run, say).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for epoch in range(epochs):
            model.train()
            total = 0.0
            for batch in torch.randperm(len(x)).split(32):
                optimizer.zero_grad()
                loss = loss_fn(model(x[batch]), y[batch])
                loss.backward()
                optimizer.step()
                total += loss.item() * len(batch)
            schedule.step()
            print(f"epoch {epoch + 1:2d}/{epochs}: training loss {total / len(x):.3f}")
    finally:
        torch.set_num_threads(threads)
    model.eval()


def accuracy(outputs: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of samples whose largest output is the label (ties go to the first, as ``argmax`` does); a model
    that outputs the class (one value per sample) is compared as it is."""
    classes = outputs if outputs.ndim == 1 else outputs.argmax(dim=1)
    return float((classes.long() == y).float().mean())


class Classify(nn.Module):
    """A trained model with the class decision at the end of its forward: ``argmax(-1)`` of its class scores.

    Training needs the scores (cross-entropy reads them), so the decision is a wrapper used after training: it
    shares the trained layers, and its table network ends in an ``argmax`` node whose output is the class.
    """

    def __init__(self, scores: nn.Module) -> None:
        super().__init__()
        self.scores = scores

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scores(x).argmax(-1)


def sparsify(linear: nn.Linear, fan_in: int, generator: torch.Generator) -> nn.Linear:
    """Make output ``k`` of ``linear`` read ``fan_in`` random inputs: masked weights and declared fan-in.

    The mask (``torch.nn.utils.prune.custom_from_mask``) keeps the other weights at zero during training and
    after; ``iotable.decompose(fan_in=...)`` tells iotable the same, and its probe checks it.
    """
    n_out, n_in = linear.weight.shape
    inputs = [sorted(torch.randperm(n_in, generator=generator)[:fan_in].tolist()) for _ in range(n_out)]
    mask = torch.zeros(n_out, n_in)
    for k, reads in enumerate(inputs):
        mask[k, reads] = 1.0
    prune.custom_from_mask(linear, "weight", mask)
    return iotable.decompose(linear, fan_in=inputs)


def precompute_and_verify(model: nn.Module, x_train, x_test, y_test, **options) -> iotable.TableNetwork:
    """Precompute the trained ``model``, print its summary, both accuracies and their bit-for-bit agreement.

    Exits with an error unless the table network agrees with the model on every test digit.
    """
    model_accuracy = accuracy(evaluate(model, x_test), y_test)
    start = time.perf_counter()
    net = iotable.precompute(model, example_input=x_train[:1], **options)
    seconds = time.perf_counter() - start
    print()
    print(net.summary())
    print(f"precompute took {seconds:.1f} s")
    net_accuracy = accuracy(net.run(x_test), y_test)
    report = iotable.verify(model, net, x_test)
    print()
    print(f"model accuracy on the {len(x_test)} test digits:         {model_accuracy:.1%}")
    print(f"table-network accuracy on the {len(x_test)} test digits: {net_accuracy:.1%}")
    print(f"agreement (model vs tables, bit for bit): {report.agreement:.1%} ({report})")
    if not report.ok:
        raise SystemExit("the table network differs from the model")
    return net


def evaluate(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's outputs on ``x`` in eval mode, without gradients."""
    model.eval()
    with torch.no_grad():
        return model(x)


def class_in_hardware(net: iotable.TableNetwork, classes: torch.Tensor, x: torch.Tensor, *, vhdl: bool = False) -> None:
    """Export ``net`` (whose output is the class) as Verilog, simulate it under iverilog on every sample of ``x``,
    and check that the class out of the hardware is ``classes``, the model's; with ``vhdl``, the VHDL under GHDL
    too. A simulator that is not installed is skipped with a line saying so.

    Prints the design's summary and one line per simulator; exits with an error on any difference.
    """
    from iotable.hdl import export, simulate  # the hardware layer, only where an example uses it

    runs = [("verilog", "iverilog"), *([("vhdl", "ghdl")] if vhdl else [])]
    with tempfile.TemporaryDirectory() as folder:
        for language, simulator in runs:
            if shutil.which(simulator) is None:
                print(f"{simulator} is not installed: the {language} design is not simulated (apt-get install it)")
                continue
            start = time.perf_counter()
            design = export(net, Path(folder) / language, language=language, inputs=x[:32])
            if design.host:
                raise SystemExit(f"the design leaves {design.host} to software; expected the class out of hardware")
            if language == "verilog":
                print()
                print(design.summary())
            codes = simulate(design, x, simulator=simulator)
            seconds = time.perf_counter() - start
            hardware = torch.as_tensor(net.graph[design.output_node].domain.decode(codes.numpy()))
            same = int((hardware == classes.double()).sum())
            if same != len(x):
                raise SystemExit(f"{simulator}: the hardware's class is not the model's on {len(x) - same} digits")
            print(
                f"class in hardware ({language}, {simulator}) equals the model's class on all {len(x)} test digits"
                f" (export and simulation {seconds:.1f} s)"
            )
