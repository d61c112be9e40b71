"""The registry of layer kinds: every built-in kind is in it, and a new kind goes in through it alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, Layout, ModelError, Spec, precompute, spec_of, verify
from iotable.errors import SpecError, SpecMismatchError
from iotable.kinds import LayerKind, Role, kind_of, register, registered, role_of, unregister
from iotable.nn import Quantize


@pytest.mark.parametrize(
    ("cls", "role"),
    [
        (nn.Linear, Role.MIXING),
        (nn.Conv1d, Role.MIXING),
        (nn.Conv2d, Role.MIXING),
        (nn.AvgPool1d, Role.MIXING),
        (nn.AvgPool2d, Role.MIXING),
        (nn.MaxPool1d, Role.POOL),
        (nn.MaxPool2d, Role.POOL),
        (nn.Flatten, Role.RESHAPE),
        *[(cls, Role.ELEMENTWISE) for cls in iotable.front.spec.ELEMENTWISE],
    ],
)
def test_every_built_in_layer_kind_is_registered(cls: type[nn.Module], role: Role) -> None:
    kinds = [k for k in registered() if cls in k.types]
    assert len(kinds) == 1 and kinds[0].role is role


def test_a_subclass_has_its_parents_kind_and_the_fast_paths_read_exact_classes() -> None:
    class MyLinear(nn.Linear):
        pass

    assert kind_of(MyLinear(2, 2)).name == "nn.Linear"
    assert kind_of(nn.Linear(2, 2)).fast_path == "linear"
    assert kind_of(nn.Conv2d(1, 1, 1)).fast_path == "conv"
    assert kind_of(nn.Sequential()) is None and role_of(nn.Sequential()) is None


def test_a_linear_subclass_with_its_own_forward_gets_the_units_its_structure_shows() -> None:
    """An nn.Linear subclass whose forward multiplies its weight by a mask (LogicNets' SparseLinear) is planned by
    the units it reads, not every input; a subclass that keeps nn.Linear's forward keeps the built-in rule."""

    class MaskedLinear(nn.Linear):
        def __init__(self) -> None:
            super().__init__(4, 2)
            self.register_buffer("mask", torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.weight * self.mask, self.bias)

    class MyLinear(nn.Linear):
        pass

    assert spec_of(MaskedLinear()).infer and not spec_of(MyLinear(4, 2)).infer
    plan = iotable.plan(MaskedLinear(), input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4))
    assert [u.in_channels for u in plan.units] == [(0, 1), (3,)]
    assert [u.in_channels for u in iotable.plan(MyLinear(4, 2), input_domain=Domain.uniform(1)).units] == [
        (0, 1, 2, 3),
        (0, 1, 2, 3),
    ]


class SumPool1d(nn.Module):
    """The sum of each channel over windows of 2 (stride 2): a mixing layer iotable has no rule for."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unfold(2, 2, 2).sum(-1)


class Square(nn.Module):
    """x * x, elementwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


def _windows(module: nn.Module) -> Spec:
    return Spec(depthwise=True, kernel_size=(2,), stride=(2,), layout=Layout.NCW, source="test rule for SumPool1d")


@pytest.fixture
def toy_kinds() -> Iterator[None]:
    register(LayerKind("test.SumPool1d", (SumPool1d,), Role.MIXING, _windows, needs_quantizer_after=True))
    register(LayerKind("test.Square", (Square,), Role.ELEMENTWISE, lambda m: Spec(elementwise=True, source="test")))
    yield
    unregister("test.SumPool1d")
    unregister("test.Square")


def _model() -> nn.Sequential:
    return nn.Sequential(Quantize(2), SumPool1d(), Square(), Quantize(6))


def test_a_toy_kind_added_through_the_registry_alone_is_bit_exact(toy_kinds: None) -> None:
    model = _model().eval()
    net = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3, 8))
    layer = net["1"]  # the SumPool1d (the input quantizer is a layer of its own)
    assert len(layer.tables) == 3 and {t.rows for t in layer.tables} == {16}  # 3 channels, 2 inputs of 4 codes
    x = torch.randint(0, 4, (256, 3, 8)).float()  # every value of Domain.uniform(2)
    assert verify(model, net, x).mismatches == 0
    assert torch.equal(net.run(x), model(x))


def test_without_its_kind_the_toy_layer_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match="SumPool1d"):
        precompute(_model().eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3, 8))


def test_an_average_kind_read_unquantized_is_refused(toy_kinds: None) -> None:
    model = nn.Sequential(Quantize(2), SumPool1d()).eval()
    with pytest.raises(ModelError, match="unquantized average"):
        precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3, 8))


def test_a_kind_whose_rule_understates_the_fan_in_is_caught_by_the_probe() -> None:
    def too_narrow(module: nn.Module) -> Spec:  # windows of 1 for a layer that sums windows of 2
        return Spec(depthwise=True, kernel_size=(1,), stride=(2,), layout=Layout.NCW, source="a wrong rule")

    register(LayerKind("test.WrongSumPool1d", (SumPool1d,), Role.MIXING, too_narrow))
    try:
        model = nn.Sequential(Quantize(2), SumPool1d(), Quantize(6))
        with pytest.raises(SpecMismatchError, match="changed when input channel 0 at position"):
            precompute(model.eval(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3, 8))
    finally:
        unregister("test.WrongSumPool1d")


def test_registry_errors_name_the_kind_and_the_fix() -> None:
    with pytest.raises(SpecError, match="'nn.Linear' is registered already; pass replace=True"):
        register(LayerKind("nn.Linear", (nn.Linear,), Role.MIXING))
    with pytest.raises(SpecError, match="Linear belongs to the kind 'nn.Linear' already"):
        register(LayerKind("test.Other", (nn.Linear,), Role.MIXING))
    with pytest.raises(SpecError, match="torch.nn.Module classes"):
        register(LayerKind("test.Bad", (int,), Role.MIXING))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="fast path 'fft'"):
        register(LayerKind("test.Bad", (Square,), Role.MIXING, fast_path="fft"))
    with pytest.raises(SpecError, match="expected a LayerKind"):
        register("nn.Linear")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="no layer kind is named 'test.Missing'"):
        unregister("test.Missing")
    assert kind_of(Square()) is None  # nothing half-registered


def test_replacing_a_kind_and_putting_it_back() -> None:
    original = kind_of(nn.Flatten())
    try:
        register(LayerKind("nn.Flatten", (nn.Flatten,), Role.RESHAPE, input_shape=lambda m: (4,)), replace=True)
        assert kind_of(nn.Flatten()).input_shape is not None
    finally:
        register(original, replace=True)
    assert kind_of(nn.Flatten()) is original
