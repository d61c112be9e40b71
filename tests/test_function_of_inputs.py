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


class Counting(nn.Module):
    """Counts its calls in a Python int and adds one once it has been called more than ``after`` times."""

    def __init__(self, after: int = 8) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))
        self.n, self.after = 0, after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        return x * self.scale + float(self.n > self.after)


class LazyCounting(nn.Module):
    """Starts a call counter at its first call (the attribute does not exist before)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = getattr(self, "calls", 0) + 1
        return x * self.scale


class Settled(nn.Module):
    """Holds plain attributes its forward reads, and sets one to the same value at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))
        self.offsets, self.name, self.ratio = {"a": (0.0, float("nan"))}, "settled", float("nan")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.width = int(x.shape[1])  # set at every call, to the same value
        return x * self.scale + self.offsets["a"][0]


@pytest.mark.parametrize("layer", [Counting(), LazyCounting()], ids=["counter", "lazy-counter"])
def test_a_forward_that_changes_a_plain_attribute_is_refused_and_it_is_put_back(layer: nn.Module) -> None:
    """A Python call counter (held before, or started at the first call) is refused by module and attribute, and
    the module's attributes are as they were before precompute."""
    before = dict(vars(layer))
    with pytest.raises(ModelError) as info:
        _precompute(layer)
    message = str(info.value)
    name = "'n'" if isinstance(layer, Counting) else "'calls'"
    assert f"module '1' ({type(layer).__name__}) changes its attribute {name} in its forward" in message, message
    assert "host=" in message
    assert vars(layer).keys() == before.keys() and getattr(layer, "n", None) == before.get("n")


def test_a_forward_with_steady_plain_attributes_passes() -> None:
    """Plain attributes read but not changed (NaN included), or set to the same value each call, pass, and a
    counter in a module listed in host= is the host's own."""
    net = _precompute(Settled())
    x = torch.tensor(DOMAIN.values)[torch.randint(0, 4, (16, 4), generator=torch.Generator().manual_seed(0))]
    assert torch.equal(net.run(x), x)
    model = nn.Sequential(Quantize(2, scale=0.5), Counting(after=10**6), Quantize(2, scale=0.5)).eval()
    iotable.precompute(model, input_domain=DOMAIN, example_input=torch.zeros(1, 4), host=["1"])


class Remembering(nn.Module):
    """Keeps its last input in a plain attribute that held None before."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4))
        self.previous = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.previous = x
        return x * self.scale


def test_an_attribute_that_becomes_a_tensor_is_shown_as_one() -> None:
    """The refusal says what the attribute became (a Tensor), not that it is still None."""
    with pytest.raises(ModelError, match=r"'previous' in its forward \(None before the calls, a Tensor after them\)"):
        _precompute(Remembering())
