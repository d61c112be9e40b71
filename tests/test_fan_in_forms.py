"""Fan-ins as the field stores them: index tensors, boolean masks, the names of buffers and parameters holding
either (read at every plan), units that read one input twice, the batch-axis check and class decoration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import iotable
from iotable import Domain, decompose, plan, precompute, verify
from iotable.errors import EnumerationError, ModelError, SpecError, SpecOptionError
from iotable.front.metadata import SPEC_ATTRIBUTE
from iotable.nn import Quantize
from tests.optional import require_program

from .oracle import assert_tables_match
from .test_network import assert_bit_exact, random_inputs

U2 = Domain.uniform(2, scale=0.5)

#: Node k reads the inputs of row k; rows 1 and 3 read one input twice (a learnt mapping may pick it twice).
MAPPING = [[0, 3, 5], [2, 2, 6], [1, 4, 7], [7, 0, 7], [5, 6, 1]]


class MappedNodes(nn.Module):
    """A DWN-style layer: node ``k`` gathers the inputs ``mapping[k]`` (held in a buffer, as the field's
    learnt mappings are) and outputs a quantized non-linear function of them, each read with its own weight."""

    def __init__(self, n_in: int, mapping: list[list[int]], seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.n_in = n_in
        self.register_buffer("mapping", torch.tensor(mapping, dtype=torch.int64))
        self.weight = nn.Parameter(torch.randn(len(mapping), len(mapping[0]), generator=gen))
        self.output_quant = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gathered = x[:, self.mapping]  # (N, nodes, k)
        mixed = (gathered * self.weight).sum(-1) + 2 * gathered[..., 0] * gathered[..., -1]
        return self.output_quant(torch.tanh(mixed))


class MaskedNodes(nn.Module):
    """A LogicNets-style sparse layer whose boolean ``mask`` (outputs, inputs) picks each output's inputs."""

    def __init__(self, mask: torch.Tensor, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(mask.shape[1], mask.shape[0])
        self.register_buffer("mask", mask.bool())
        self.output_quant = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_quant(torch.tanh(F.linear(x, self.fc.weight * self.mask, self.fc.bias)))


def distinct(rows: list[list[int]]) -> list[tuple[int, ...]]:
    """Each row's inputs without repeats, in the order they first appear."""
    return [tuple(dict.fromkeys(row)) for row in rows]


def whole(layer: nn.Module, n_in: int = 8) -> nn.Sequential:
    """``layer`` after an input quantizer: a model precompute traces."""
    return nn.Sequential(Quantize(2, scale=0.5), layer).eval()


def net_of(model: nn.Module, n_in: int = 8) -> iotable.TableNetwork:
    return precompute(model, input_domain=U2, example_input=torch.zeros(1, n_in))


# -- index tensors, masks, names ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["torch", "numpy", "list"])
def test_index_tensor_gives_the_units(form: str) -> None:
    """An integer index tensor (torch or numpy) gives the same units as the same index lists."""
    layer = MappedNodes(8, MAPPING)
    fan_in = {"torch": layer.mapping, "numpy": layer.mapping.numpy(), "list": MAPPING}[form]
    decompose(layer, fan_in=fan_in, output_domain="output_quant")
    p = plan(layer, input_domain=U2, example_input=torch.zeros(1, 8))
    assert [u.in_channels for u in p.units] == distinct(MAPPING)
    assert [u.out_channels for u in p.units] == [(k,) for k in range(len(MAPPING))]


@pytest.mark.parametrize("form", ["torch", "numpy"])
def test_boolean_mask_gives_the_units(form: str) -> None:
    """A boolean mask (units x inputs) gives each output the inputs its row marks, bit-exact end to end."""
    mask = torch.zeros(4, 8, dtype=torch.bool)
    for k, row in enumerate([[0, 1, 2], [3, 7], [4, 5, 6], [1, 6]]):
        mask[k, row] = True
    layer = MaskedNodes(mask)
    decompose(layer, fan_in=mask if form == "torch" else mask.numpy(), output_domain="output_quant")
    model = whole(layer)
    net = net_of(model)
    assert [u.in_channels for u in net["1"].plan.units] == [(0, 1, 2), (3, 7), (4, 5, 6), (1, 6)]
    assert verify(model, net, random_inputs(U2, (8,), n=256)).ok


def test_buffer_name_reads_an_index_tensor() -> None:
    """fan_in='mapping' names an integer buffer: an index tensor, read when the model is planned."""
    layer = decompose(MappedNodes(8, MAPPING), fan_in="mapping", output_domain="output_quant")
    model = whole(layer)
    net = net_of(model)
    assert [u.in_channels for u in net["1"].plan.units] == distinct(MAPPING)
    assert_bit_exact(model, net, random_inputs(U2, (8,), n=512))


def test_buffer_name_reads_a_boolean_mask() -> None:
    """fan_in='mask' naming a boolean buffer reads it as a mask."""
    mask = torch.tensor([[1, 0, 0, 1, 0, 0, 0, 1], [0, 1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 0]]).bool()
    layer = decompose(MaskedNodes(mask), fan_in="mask", output_domain="output_quant")
    p = plan(layer, input_domain=U2, example_input=torch.zeros(1, 8))
    assert [u.in_channels for u in p.units] == [(0, 3, 7), (1, 2), (4, 5, 6)]


class ParameterMapped(MappedNodes):
    """The mapping held as a (frozen) integer parameter under a submodule, as a trained mapping may be."""

    def __init__(self, n_in: int, mapping: list[list[int]]) -> None:
        super().__init__(n_in, mapping)
        self.links = nn.Module()
        self.links.index = nn.Parameter(torch.tensor(mapping), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gathered = x[:, self.links.index]
        return self.output_quant(torch.tanh((gathered * self.weight).sum(-1)))


def test_parameter_name_reads_an_index_tensor() -> None:
    """fan_in='links.index' names an integer parameter of a submodule."""
    layer = decompose(ParameterMapped(8, MAPPING), fan_in="links.index", output_domain="output_quant")
    model = whole(layer)
    net = net_of(model)
    assert [u.in_channels for u in net["1"].plan.units] == distinct(MAPPING)
    assert verify(model, net, random_inputs(U2, (8,), n=256)).ok


def test_float_parameter_mask_by_name() -> None:
    """A floating parameter named by fan_in= is a mask: its non-zero entries are the fan-ins."""
    layer = MaskedNodes(torch.eye(4, 8).bool() | torch.eye(4, 8).roll(2, dims=1).bool())
    layer.gate = nn.Parameter(layer.mask.float() * 0.5)
    decompose(layer, fan_in="gate", output_domain="output_quant")
    p = plan(layer, input_domain=U2, example_input=torch.zeros(1, 8))
    assert [u.in_channels for u in p.units] == [(0, 2), (1, 3), (2, 4), (3, 5)]


def test_mapping_changed_after_decompose_replans() -> None:
    """Training that moves a named mapping after decompose re-plans the model: units and tables follow it."""
    layer = decompose(MappedNodes(8, MAPPING), fan_in="mapping", output_domain="output_quant")
    model = whole(layer)
    first = net_of(model)
    moved = [[1, 2, 3], [4, 4, 0], [6, 7, 5], [2, 5, 2], [0, 1, 6]]
    with torch.no_grad():
        layer.mapping.copy_(torch.tensor(moved))  # in place, as an optimizer step or argmax update would
    second = net_of(model)
    assert [u.in_channels for u in first["1"].plan.units] == distinct(MAPPING)
    assert [u.in_channels for u in second["1"].plan.units] == distinct(moved)
    x = random_inputs(U2, (8,), n=512)
    assert_bit_exact(model, second, x)
    assert not torch.equal(first.run(x), second.run(x))  # the first network is the old model's, not stale reuse


# -- units that read one input twice --------------------------------------------------------------------------


def test_repeated_inputs_tables_over_distinct_inputs() -> None:
    """A node reading one input twice gets a table over its distinct inputs, equal to the module row for row."""
    layer = decompose(MappedNodes(8, MAPPING, seed=3), fan_in="mapping", output_domain="output_quant").eval()
    result = precompute(layer, input_domain=U2, example_input=torch.zeros(1, 8))
    assert [t.fan_in for t in result.tables] == [3, 2, 3, 2, 3]
    assert [t.rows for t in result.tables] == [64, 16, 64, 16, 64]
    assert_tables_match(result, layer, domain=U2, in_shape=(8,))


def test_repeated_inputs_verify_fully() -> None:
    """A model whose nodes read inputs twice, chained two layers deep, verifies 100%."""
    second = [[0, 0, 1], [2, 3, 4], [4, 1, 4]]
    model = nn.Sequential(
        Quantize(2, scale=0.5),
        decompose(MappedNodes(8, MAPPING, seed=1), fan_in="mapping", output_domain="output_quant"),
        decompose(MappedNodes(5, second, seed=2), fan_in="mapping", output_domain="output_quant"),
    ).eval()
    net = net_of(model)
    assert [u.in_channels for u in net["2"].plan.units] == distinct(second)
    report = verify(model, net, random_inputs(U2, (8,), n=1024))
    assert report.ok and report.agreement == 1.0


def test_repeated_inputs_hardware_equals_net_run(tmp_path: Path) -> None:
    """The Verilog of a network whose nodes read inputs twice simulates (iverilog) to the codes net.run gives."""
    require_program("iverilog", package="iverilog")
    from iotable.hdl import export, simulate

    model = whole(decompose(MappedNodes(8, MAPPING, seed=4), fan_in="mapping", output_domain="output_quant"))
    net = net_of(model)
    design = export(net, tmp_path, top="mapped", vectors=8)
    x = random_inputs(U2, (8,), n=64, seed=5)
    assert torch.equal(simulate(design, x, simulator="iverilog"), net.run(x, return_codes=True))


def test_repeated_inputs_round_trip_a_bundle(tmp_path: Path) -> None:
    """A network whose declared fan-ins repeat inputs saves and loads to the same outputs."""
    model = whole(decompose(MappedNodes(8, MAPPING, seed=6), fan_in=MAPPING, output_domain="output_quant"))
    net = net_of(model)
    iotable.save(net, tmp_path / "mapped")
    loaded = iotable.load(tmp_path / "mapped")
    assert [u.in_channels for u in loaded["1"].plan.units] == distinct(MAPPING)
    x = random_inputs(U2, (8,), n=128, seed=7)
    assert torch.equal(loaded.run(x), net.run(x))


def test_fan_out_may_not_repeat() -> None:
    """An output listed twice in one fan_out unit is refused: each output is written once."""
    with pytest.raises(SpecOptionError, match=r"fan_out\[0\] = \[0, 0\] repeats an output"):
        decompose(MappedNodes(8, MAPPING), fan_in=[[0], [1]], fan_out=[[0, 0], [1]])


# -- malformed tensors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fan_in", "words"),
    [
        (torch.tensor([[0.0, 1.0]]), ("integer index tensor", "float32", "mask.bool()")),
        (torch.zeros(2, 3, 2, dtype=torch.int64), ("integer index tensor", "shape (2, 3, 2)")),
        (np.zeros((0, 3), dtype=np.int64), ("at least one unit",)),
        (torch.tensor([[0, -1, 2]]), ("row 0 of the index tensor is [0, -1, 2]", "indices >= 0")),
    ],
)
def test_malformed_tensor_refused(fan_in: object, words: tuple[str, ...]) -> None:
    """A tensor of the wrong dtype, rank or range is refused with what was expected and what was received."""
    with pytest.raises(SpecError) as info:
        decompose(MappedNodes(8, MAPPING), fan_in=fan_in)
    for word in words:
        assert word in str(info.value)


def test_named_index_out_of_range_names_the_module() -> None:
    """A named index tensor reading past the module's inputs is refused naming the module and the range."""

    class Narrow(MappedNodes):
        in_features = 8
        out_features = 5

    layer = Narrow(8, MAPPING)
    layer.mapping[2, 1] = 9
    with pytest.raises(SpecError, match=r"Narrow: fan_in='mapping': row 2 of the index tensor is \[1, 9, 7\]"):
        decompose(layer, fan_in="mapping")


def test_named_index_past_the_input_is_refused_when_planned() -> None:
    """A named index tensor changed to read past the input is refused at plan time, naming the layer."""
    layer = decompose(MappedNodes(8, MAPPING), fan_in="mapping", output_domain="output_quant")
    with torch.no_grad():
        layer.mapping[4, 0] = 11
    with pytest.raises(SpecError, match=r"fan_in\[4\] = \[11, 6, 1\] reads input 11, but the input has 8"):
        plan(layer, input_domain=U2, example_input=torch.zeros(1, 8), name="nodes")


def test_named_tensor_of_a_wrong_dtype_names_the_layer() -> None:
    """A named mapping that became a flat tensor after decompose is refused at plan time, naming the layer."""
    layer = decompose(MappedNodes(8, MAPPING), fan_in="mapping", output_domain="output_quant")
    layer.mapping = layer.mapping.flatten()
    with pytest.raises(SpecError) as info:
        plan(layer, input_domain=U2, example_input=torch.zeros(1, 8), name="layers.0")
    message = str(info.value)
    assert message.startswith("layers.0: MappedNodes: fan_in='mapping' must be an integer index tensor")
    assert "int64 array of shape (15,)" in message


def test_boolean_mask_of_the_wrong_width_is_refused() -> None:
    """A boolean mask whose width is not the module's input count is refused."""
    with pytest.raises(SpecError, match=r"boolean mask of 6 columns, but the module has 4 inputs; expected 4 columns"):
        decompose(nn.Linear(4, 3), fan_in=torch.ones(3, 6, dtype=torch.bool))


# -- the batch axis -------------------------------------------------------------------------------------------


class SubNeurons(nn.Module):
    """PolyLUT-Add's sub-neurons as upstream writes them: two sparse degree-2 polynomials per neuron, each
    quantized, handed to the adder concatenated along the batch axis."""

    def __init__(self, n_in: int, n_out: int, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.fc1, self.fc2 = nn.Linear(2 * n_in, n_out), nn.Linear(2 * n_in, n_out)
        self.register_buffer("imask1", (torch.rand(n_out, n_in, generator=gen) < 0.4).float())
        self.register_buffer("imask2", (torch.rand(n_out, n_in, generator=gen) < 0.4).float())
        self.quant = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        poly = torch.cat((x, x * x), 1)  # degree 2 (no cross terms, enough here)
        w1 = self.fc1.weight * self.imask1.repeat(1, 2)
        w2 = self.fc2.weight * self.imask2.repeat(1, 2)
        x1 = self.quant(F.linear(poly, w1, self.fc1.bias))
        x2 = self.quant(F.linear(poly, w2, self.fc2.bias))
        return torch.cat((x1, x2), 0)


class Adder2(nn.Module):
    """PolyLUT-Add's adder: splits its batch in two halves and adds them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[0] // 2
        return x[:half] + x[half:]


def test_batch_concatenation_is_refused_by_plan() -> None:
    """A decorated module returning twice the rows it was given is refused naming it, with the fix."""
    sub = SubNeurons(6, 4)
    fan_in = (sub.imask1 + sub.imask2) > 0
    decompose(sub, fan_in=fan_in, output_domain=sub.quant.domain)
    with pytest.raises(EnumerationError) as info:
        plan(sub, input_domain=U2, example_input=torch.zeros(1, 6), name="layer1.neurons")
    message = str(info.value)
    assert message.startswith("layer1.neurons: returned 2 rows for 1 inputs")
    assert "a decorated module must map each sample to its own output" in message
    assert "torch.cat(..., dim=1)" in message


def test_polylut_add_as_written_is_refused_in_a_model() -> None:
    """PolyLUT-Add as written (sub-neurons, then the adder, a batch norm and a quantizer), both decorated, is
    refused naming the sub-neurons' layer before any table work, never a numpy broadcasting error."""
    sub = SubNeurons(6, 4)
    decompose(sub, fan_in=(sub.imask1 + sub.imask2) > 0, output_domain=sub.quant.domain)
    adder = decompose(Adder2(), fan_in=[[0], [1], [2], [3]])
    model = nn.Sequential(Quantize(2, scale=0.5), sub, adder, nn.BatchNorm1d(4), Quantize(2, scale=0.5)).eval()
    with pytest.raises(EnumerationError) as info:
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 6))
    message = str(info.value)
    assert message.startswith("1: returned 2 rows for 1 inputs: a decorated module must map each sample to its own")
    assert "broadcast" not in message


def test_sub_neurons_with_their_adder_are_one_unit_per_neuron() -> None:
    """Decorated together with their adder, the sub-neurons keep the batch axis and tabulate bit-exact."""
    sub = SubNeurons(6, 4, seed=2)
    neuron = nn.Sequential(sub, Adder2(), Quantize(2, scale=0.5))
    rows = ((sub.imask1 + sub.imask2) > 0).nonzero()
    fan_in = [tuple(rows[rows[:, 0] == k, 1].tolist()) or (0,) for k in range(4)]
    decompose(neuron, fan_in=fan_in)
    model = nn.Sequential(Quantize(2, scale=0.5), neuron).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 6))
    assert verify(model, net, random_inputs(U2, (6,), n=512)).ok


# -- class decoration ----------------------------------------------------------------------------------------


def test_decorating_a_torch_class_needs_all_instances() -> None:
    """decompose(nn.Linear, ...) is refused, saying it would change every Linear in the process."""
    with pytest.raises(SpecOptionError) as info:
        decompose(nn.Linear, groups=1)
    message = str(info.value)
    assert "torch.nn.modules.linear.Linear" in message and "every Linear (and subclass) instance" in message
    assert "all_instances=True" in message and "decompose(model.layer, ...)" in message
    assert SPEC_ATTRIBUTE not in nn.Linear.__dict__


def test_decorating_a_torch_class_with_the_flag() -> None:
    """With all_instances=True the metadata goes on the class, for every instance."""

    try:
        decompose(nn.Hardswish, all_instances=True)
        assert iotable.spec_of(nn.Hardswish()).source == "decompose()"
    finally:
        delattr(nn.Hardswish, SPEC_ATTRIBUTE)


def test_decorating_a_class_of_ones_own() -> None:
    """A class of one's own takes @decompose(...) with no flag, as a decorator."""

    @decompose(fan_in="mapping", output_domain="output_quant")
    class Nodes(MappedNodes):
        pass

    p = plan(Nodes(8, MAPPING), input_domain=U2, example_input=torch.zeros(1, 8))
    assert [u.in_channels for u in p.units] == distinct(MAPPING)


class BatchMean(nn.Module):
    """A module that averages over the batch: one row whatever the batch size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(0, keepdim=True) + x[:1] * 0


def test_batch_reduction_is_refused_by_the_probe() -> None:
    """A decorated module reducing along the batch axis passes a one-sample frame but is refused before any work:
    its first sample's output alone differs from its output in a batch."""
    model = nn.Sequential(Quantize(2, scale=0.5), decompose(BatchMean(), fan_in=[[0], [1], [2]])).eval()
    with pytest.raises(ModelError, match=r"module '1' \(BatchMean\) gives the first sample another output alone"):
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 3))
