"""precompute's two typed paths: precompute_layer (always LayerTables) and precompute_model (always a TableNetwork)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from iotable import Domain, TableNetwork, decompose, precompute
from iotable.errors import NotDecomposedError, SpecError
from iotable.network.precompute import LayerTables, precompute_layer, precompute_model
from iotable.nn import Quantize

BIT = Domain.uniform(1)


def block() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), nn.ReLU(), Quantize(2, scale=0.5))


def test_layer_path_keeps_a_sequential_as_one_layer() -> None:
    """precompute_layer gives the tables of a plain Sequential as one layer; precompute cuts it as a model."""
    layer = precompute_layer(block(), input_domain=BIT)
    net = precompute(block(), input_domain=BIT, example_input=torch.zeros(1, 3))
    assert isinstance(layer, LayerTables) and isinstance(net, TableNetwork)
    assert list(layer.tables) == list(net.tables)


def test_model_path_cuts_a_decorated_block() -> None:
    """precompute_model cuts a decorated block into its table layers, with the tables precompute gives it."""
    net = precompute_model(decompose(block()), input_domain=BIT, example_input=torch.zeros(1, 3))
    layer = precompute(decompose(block()), input_domain=BIT)
    assert isinstance(net, TableNetwork) and isinstance(layer, LayerTables)
    assert list(net.tables) == list(layer.tables)


def test_layer_path_refuses_an_undescribed_model() -> None:
    """A module no decomposition describes, and whose input size nothing states, is refused by precompute_layer,
    naming example_input= (to infer its units) and decompose; with an example its units are inferred."""

    class Custom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(NotDecomposedError, match="example_input=.*decompose"):
        precompute_layer(Custom(), input_domain=BIT)
    layer = precompute_layer(Custom(), input_domain=BIT, example_input=torch.zeros(1, 3))
    assert [u.in_channels for u in layer.plan.units] == [(0,), (1,), (2,)]


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [("memory_budget", 0, "positive integer"), ("check", "yes", "True or False"), ("reuse", 1, "True or False")],
)
def test_both_paths_check_their_options(option: str, value: object, words: str) -> None:
    """Both paths refuse a bad option before any work, as precompute does."""
    for entry in (precompute_layer, precompute_model):
        with pytest.raises(SpecError, match=f"precompute: {option} must be.*{words}"):
            entry(block(), input_domain=BIT, example_input=torch.zeros(1, 3), **{option: value})
