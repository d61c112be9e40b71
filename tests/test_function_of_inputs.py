"""A model whose forward is not a function of its input (random numbers, an update of its own buffer, batch
statistics) is refused before any work, naming the module and the operation, with the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, ModelError
from iotable.nn import Quantize

DOMAIN = Domain.uniform(2, scale=0.5)


class Noisy(nn.Module):
    """Adds uniform noise in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + torch.rand_like(x)


class Running(nn.Module):
    """Updates a running mean of its inputs in its forward, and subtracts it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean


class Centred(nn.Module):
    """Subtracts the batch's mean: one sample's output depends on the others."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(0)) * self.scale


class Plain(nn.Module):
    """A function of its input: the same layer without the noise."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _precompute(layer: nn.Module) -> iotable.TableNetwork:
    model = nn.Sequential(Quantize(2, scale=0.5), layer, Quantize(2, scale=0.5)).eval()
    return iotable.precompute(model, input_domain=DOMAIN, example_input=torch.zeros(1, 4))


@pytest.mark.parametrize(
    ("layer", "words"),
    [
        (Noisy(), ["module '1'", "rand", "random numbers"]),
        (Running(), ["module '1'", "buffer '1.mean'", "in place"]),
        (Centred(), ["module '1'", "depends on the batch"]),
    ],
    ids=["random", "buffer", "batch"],
)
def test_a_forward_that_is_no_function_of_its_input_is_refused(layer: nn.Module, words: list[str]) -> None:
    """Random numbers, an in-place buffer update and batch statistics are each refused by module and operation."""
    before = {n: b.clone() for n, b in layer.named_buffers()}
    with pytest.raises(ModelError) as info:
        _precompute(layer)
    message = str(info.value)
    assert all(w in message for w in words), message
    assert "model.eval()" in message and "host=" in message
    assert all(torch.equal(before[n], b) for n, b in layer.named_buffers())  # refused before any work


def test_a_function_of_its_input_passes() -> None:
    """The same layer without the random or stateful operation is tabulated (the check can pass)."""
    net = _precompute(Plain())
    x = torch.tensor(DOMAIN.values)[torch.randint(0, 4, (64, 4), generator=torch.Generator().manual_seed(0))]
    assert torch.equal(net.run(x), x)


def test_dropout_in_eval_mode_passes_and_a_random_host_module_is_its_own() -> None:
    """Dropout evaluated in eval mode draws nothing; a random module listed in host= runs with torch unchecked."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Dropout(0.5), Quantize(2, scale=0.5), Noisy())
    net = iotable.precompute(model.train(), input_domain=DOMAIN, example_input=torch.zeros(1, 4), host=["3"])
    assert net.graph.nodes_of(iotable.NodeKind.HOST)
