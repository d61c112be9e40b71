"""Build once, run many: a model's plan is reused while its structure holds, and the tables follow its weights."""

from __future__ import annotations

import gc
import weakref

import torch
from torch import nn

import iotable
from iotable import Domain, decompose, precompute, verify
from iotable.front import reuse
from iotable.nn import Quantize

from .conftest import dyadic_

D2 = Domain.uniform(2, signed=True, scale=0.5)


def mlp() -> nn.Sequential:
    model = nn.Sequential(
        decompose(nn.Linear(6, 4), fan_in=[[0, 1], [2, 3], [4, 5], [0, 5]]),
        nn.BatchNorm1d(4),
        nn.ReLU(),
        Quantize(2, scale=0.5),
        nn.Linear(4, 2),
        Quantize(2, signed=True, scale=0.5),
    )
    dyadic_(model)
    with torch.no_grad():  # a sparse first layer: zero the weights outside the declared fan-in
        mask = torch.zeros(4, 6)
        for k, inputs in enumerate([[0, 1], [2, 3], [4, 5], [0, 5]]):
            mask[k, inputs] = 1
        model[0].weight.mul_(mask)
    return model.eval()


def inputs(n: int = 64, width: int = 6) -> torch.Tensor:
    codes = torch.randint(0, len(D2), (n, width), generator=torch.Generator().manual_seed(0))
    return torch.tensor(D2.values, dtype=torch.float32)[codes]


def build(model: nn.Module, **options) -> iotable.TableNetwork:
    return precompute(model, input_domain=D2, example_input=torch.zeros(1, 6), **options)


def test_a_second_call_reuses_the_plan_and_reads_the_new_weights():
    """The graph is the same object on the second call, while the tables follow changed weights."""
    model = mlp()
    first = build(model)
    with torch.no_grad():
        model[1].bias.add_(0.75)  # shifts the first layer's codes
        model[4].weight.mul_(-1)
    second = build(model)
    assert second.graph is first.graph
    assert [t.outputs.tolist() for t in second.tables] != [t.outputs.tolist() for t in first.tables]
    assert verify(model, second, inputs()).ok
    assert second.tables == build(model, reuse=False).tables


def test_reuse_false_plans_anew():
    """``reuse=False`` traces and plans again (a new graph), with the same tables."""
    model = mlp()
    first = build(model)
    again = build(model, reuse=False)
    assert again.graph is not first.graph
    assert again.tables == first.tables


def test_new_metadata_is_planned_anew():
    """Decorating a layer with other units changes the structure: the new units are planned and tabulated."""
    model = mlp()
    first = build(model)
    decompose(model[0], fan_in=[[0, 1], [2, 3], [4, 5], [0, 1]])
    with torch.no_grad():
        model[0].weight[3] = torch.tensor([0.5, -0.25, 0, 0, 0, 0])
    second = build(model)
    assert second.graph is not first.graph
    assert second.layers["0"].plan.units[3].in_channels == (0, 1)
    assert verify(model, second, inputs()).ok


def test_a_replaced_module_or_hyper_parameter_is_planned_anew():
    """Swapping a submodule or changing a quantizer or a stride is seen; the network stays exact."""
    model = mlp()
    first = build(model)
    model[2] = nn.ReLU6()
    second = build(model)
    assert second.graph is not first.graph and verify(model, second, inputs()).ok
    model[5] = Quantize(3, signed=True, scale=0.25)
    third = build(model)
    assert third.graph is not second.graph and third.output_node.domain == model[5].domain
    assert verify(model, third, inputs()).ok

    conv_model = nn.Sequential(nn.Conv1d(1, 2, 2), Quantize(2, scale=0.5)).eval()
    dyadic_(conv_model)
    example = torch.zeros(1, 1, 8)
    a = precompute(conv_model, input_domain=D2, example_input=example)
    conv_model[0].stride = (2,)
    b = precompute(conv_model, input_domain=D2, example_input=example)
    assert b.graph is not a.graph
    assert b.layers["0"].plan.geometry.stride == (2,)


def test_other_call_arguments_are_planned_anew():
    """Another input domain, input size or host list gives another plan."""
    model = mlp()
    first = build(model)
    other_domain = precompute(model, input_domain=Domain.uniform(2, scale=0.5), example_input=torch.zeros(1, 6))
    assert other_domain.graph is not first.graph
    hosted = build(model, host=["4"])
    assert hosted.graph is not first.graph and len(hosted.layers) == 1


def test_the_remembered_plan_goes_with_the_model():
    """Nothing keeps a model alive: its remembered plan is dropped with it."""
    model = mlp()
    build(model)
    gc.collect()
    before, alive = len(reuse._SKELETONS), weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
    assert len(reuse._SKELETONS) == before - 1


class Block(nn.Module):
    """A user's own layer iotable can only run as a black box: a masked product and an inline quantizer."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randint(-8, 9, (3, 6), generator=gen) / 8)
        self.register_buffer("mask", torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.round(x @ (self.weight * self.mask).T / 0.5), 0, 3) * 0.5


def test_a_layer_reuses_its_plan_and_follows_its_weights():
    """A single decorated layer keeps its plan between calls, probes and tabulates its current weights."""
    block = decompose(Block(), fan_in=[[0, 1], [2, 3], [4, 5]], output_domain=Domain.uniform(2, scale=0.5))
    first = precompute(block, input_domain=D2, example_input=torch.zeros(1, 6))
    with torch.no_grad():
        block.weight.mul_(-1)
    second = precompute(block, input_domain=D2, example_input=torch.zeros(1, 6))
    assert second.plan is first.plan and second.method == "black box"
    assert second.tables != first.tables
    assert second.tables == precompute(block, input_domain=D2, example_input=torch.zeros(1, 6), reuse=False).tables
    decompose(block, fan_in=[[0, 1, 2], [2, 3], [4, 5]], output_domain=Domain.uniform(2, scale=0.5))
    third = precompute(block, input_domain=D2, example_input=torch.zeros(1, 6))  # new metadata: a new plan
    assert third.plan is not first.plan and third.plan.units[0].fan_in == 3
    with torch.no_grad():
        block.mask[0, 4] = 1  # now reads an undeclared input: the probe, run on every call, objects
        block.weight[0, 4] = 1.0
    try:
        precompute(block, input_domain=D2, example_input=torch.zeros(1, 6))
    except iotable.errors.SpecMismatchError:
        pass
    else:
        raise AssertionError("the probe did not run on a reused plan")
