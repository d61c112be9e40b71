"""LogicNets, PolyLUT and NeuraLUT networks as their repositories write them (brevitas quantizers, neuron modules
with apply_input_quant / apply_output_quant flags, masks handed out by modules called with no arguments) come in
undecorated: ``verify`` 100%, and the exported Verilog simulates equal to ``net.run`` under iotable."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("brevitas", reason='brevitas is not installed (pip install "iotable[brevitas]")')

import iotable
from iotable import Domain
from iotable.errors import ModelError
from iotable.hdl import export, simulate
from iotable.nn import Quantize
from tests import upstreamzoo as uz

INPUTS = Domain([-1.0, -0.5, 0.0, 0.5])
FEATURES = 6


def _inputs(n: int, seed: int) -> torch.Tensor:
    codes = torch.randint(0, len(INPUTS), (n, FEATURES), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(INPUTS.values, dtype=torch.float32)[codes]


def _precompute(model: nn.Module) -> iotable.TableNetwork:
    return iotable.precompute(model, input_domain=INPUTS, example_input=torch.zeros(1, FEATURES))


def _check_family(model: nn.Module, tmp_path: Path) -> None:
    model = model.eval()
    net = _precompute(model)
    x = _inputs(2000, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))
    design = export(net, tmp_path, top="net", vectors=16)
    y = _inputs(300, 2)
    assert torch.equal(simulate(design, y, simulator="iverilog", timeout=120), net.run(y, return_codes=True))


def test_logicnets_as_upstream_writes_it(tmp_path: Path) -> None:
    """LogicNets' SparseLinearNeq layers, whose SparseLinear calls its mask module with no arguments, tabulate."""
    _check_family(uz.LogicNetsModel(), tmp_path)


def test_logicnets_jet_substructure_model_as_upstream_writes_it(tmp_path: Path) -> None:
    """LogicNets' jet-substructure model as its repository writes it (the input quantizer after a batch norm and a
    scalar bias, the mask a frozen parameter that SparseLinear's own forward multiplies in, the truth-table switch
    off, and a learned scalar bias and scale after the last output quantizer), 24 inputs wide, comes in
    undecorated: each neuron reads its mask's row, verify 100%, the Verilog simulates equal."""
    model = uz.JetSubstructureNeqModel(widths=(24, 16, 5)).eval()
    inputs = Domain([-1.0, -0.5, 0.0, 0.5])
    net = iotable.precompute(model, input_domain=inputs, example_input=torch.zeros(1, 24))
    for k, layer in enumerate(model.module_list):
        rows = [set(torch.nonzero(row).flatten().tolist()) for row in layer.fc.mask()]
        assert all(set(u.in_channels) <= rows[u.index] for u in net[f"module_list.{k}.fc"].plan.units)
    codes = torch.randint(0, 4, (2300, 24), generator=torch.Generator().manual_seed(1))
    x = torch.tensor(inputs.values, dtype=torch.float32)[codes]
    assert iotable.verify(model, net, x[:2000]).agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))
    design = export(net, tmp_path, top="net", vectors=16)
    assert torch.equal(
        simulate(design, x[2000:], simulator="iverilog", timeout=120), net.run(x[2000:], return_codes=True)
    )


def _imask_rows(layer: nn.Module) -> list[set[int]]:
    """The inputs each neuron of an upstream PolyLUT or NeuraLUT layer reads, from its own index tensor."""
    imask = layer.imask() if isinstance(layer.imask, nn.Module) else layer.imask
    return [set(row) for row in imask.tolist()]


def _check_tables_exhaustively(model: nn.Module, net: iotable.TableNetwork) -> None:
    """Every row of every table of each neuron layer equals that layer's own forward on those input codes (the other
    inputs at random codes), the layer run on its quantized inputs as the model runs it after the first."""
    generator = torch.Generator().manual_seed(3)
    for k, layer in enumerate(model.module_list):
        tables = net[f"module_list.{k}"]
        plan = tables.plan
        neuron = copy.deepcopy(layer)
        neuron.apply_input_quant = False  # fed codes of its input domain directly
        domains = [plan.unit_domains(unit) for unit in plan.units]
        for unit, table, unit_domains in zip(plan.units, tables, domains):
            values = torch.tensor(unit_domains[0].values, dtype=torch.float32)
            x = values[torch.randint(0, len(values), (table.rows, plan.in_channels), generator=generator)]
            x[:, list(unit.in_channels)] = torch.tensor(
                np.stack([d.decode(table.inputs[:, j]) for j, d in enumerate(unit_domains)], 1), dtype=torch.float32
            )
            with torch.no_grad():
                expected = neuron(x)[:, list(unit.out_channels)].numpy()
            assert np.array_equal(table.output_values(), expected), (k, unit.index)


@pytest.mark.parametrize("family", [uz.PolyLUTModel, uz.NeuraLUTModel], ids=["polylut", "neuralut"])
def test_polylut_and_neuralut_as_upstream_write_them(family: type[nn.Module], tmp_path: Path) -> None:
    """PolyLUT's and NeuraLUT's neuron layers (gathers by an index tensor or a mask module, powers and products,
    repeats and per-neuron linear maps between their quantizers) tabulate undecorated: one table layer per neuron
    layer, each neuron a unit reading its own index row, every table row equal to the layer's forward."""
    model = family().eval()
    net = _precompute(model)
    assert [name for name in net.layers if name.startswith("module_list.")][-2:] == ["module_list.0", "module_list.1"]
    for k, layer in enumerate(model.module_list):
        tables = net[f"module_list.{k}"]
        unused = dict(tables.unused)  # inputs a neuron's table showed it never reads (a weight that cancels them)
        assert [set(u.in_channels) | set(unused.get(u.index, ())) for u in tables.plan.units] == _imask_rows(layer)
        assert all(u.fan_in <= 2 for u in tables.plan.units)
    _check_tables_exhaustively(model, net)
    _check_family(model, tmp_path)


def test_a_changed_mask_or_table_of_a_region_fails_verify() -> None:
    """Tamper: a PolyLUT neuron layer's index tensor changed after precompute, or one of its tables changed,
    makes the tables differ from the model, and verify says so."""
    model = uz.PolyLUTModel().eval()
    net = _precompute(model)
    x = _inputs(2000, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    layer = net["module_list.1"]  # the last layer: a changed row reaches the output
    table = layer.tables[0]
    outputs = (table.outputs + 1) % len(table.output_domain)  # every row's code moved by one
    bad = iotable.IOTable.dense(outputs, input_domains=table.input_domains, output_domain=table.output_domain)
    tampered = dataclasses.replace(net, layers={**net.layers, "module_list.1": dataclasses.replace(
        layer, tables=(bad, *layer.tables[1:]))})  # fmt: skip
    every = torch.cartesian_prod(*[torch.tensor(INPUTS.values, dtype=torch.float32)] * FEATURES)
    assert iotable.verify(model, tampered, every).agreement < 1.0
    with torch.no_grad():
        model.module_list[0].imask[0] = torch.tensor([1, 4])  # neuron 0 now reads other inputs
    assert iotable.verify(model, net, x).agreement < 1.0


def test_a_mask_changed_in_place_is_followed_by_the_next_precompute() -> None:
    """The index tensor a region reads is part of the reused plan's check: changed in place after a precompute, the
    next precompute's units follow it and verify 100%."""
    model = uz.PolyLUTModel().eval()
    _precompute(model)
    with torch.no_grad():
        model.module_list[0].imask[0] = torch.tensor([1, 4])
    net = _precompute(model)
    assert set(net["module_list.0"].plan.units[0].in_channels) <= {1, 4}
    assert iotable.verify(model, net, _inputs(2000, 1)).agreement == 1.0


class _Gathers(nn.Module):
    """A neuron module of one's own with its quantizers: products of gathered pairs, and what else it reads."""

    def __init__(self, tail: str) -> None:
        super().__init__()
        self.quant_a, self.quant_b, self.quant_out = (Quantize(2, scale=0.5) for _ in range(3))
        self.pairs = torch.tensor([[0, 1], [2, 3], [1, 4]])  # a plain attribute, as PolyLUT keeps its imask
        self.tail = tail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.quant_a(x)
        gathered = a[:, self.pairs]
        if self.tail == "second input":  # the products plus values gathered from another quantized tensor
            return self.quant_out(gathered.prod(-1) + self.quant_b(x)[:, self.pairs[:, 0]])
        out = self.quant_out(gathered.prod(-1))
        return out * 1.0 if self.tail == "none" else out + gathered.sum(-1)  # an inner value read after it


def test_a_region_of_ones_own_neuron_module_is_exact() -> None:
    """The same gathers and products in a neuron module of one's own (iotable's Quantize) are one table layer."""
    model = nn.Sequential(_Gathers("none")).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2, scale=0.5), example_input=torch.zeros(1, 5))
    assert [u.in_channels for u in net["0"].plan.units] == [(0, 1), (2, 3), (1, 4)]
    codes = torch.cartesian_prod(*[torch.arange(4)] * 5)
    assert iotable.verify(model, net, codes * 0.5).agreement == 1.0


@pytest.mark.parametrize(
    ("tail", "words"),
    [
        ("second input", ("reads '_0_quant_b' besides values computed from '_0_quant_a'", "torch.cat")),
        ("inner value", ("reads 'getitem', a value '0' (_Gathers) computes before its quantizer", "host=")),
    ],
)
def test_what_a_region_cannot_hold_is_refused_by_name(tail: str, words: tuple[str, ...]) -> None:
    """A region reading two tensors, or a value inside a region read after its quantizer, is refused naming the
    module, the node and the fix, never a wrong table."""
    model = nn.Sequential(_Gathers(tail)).eval()
    with pytest.raises(ModelError) as info:
        iotable.precompute(model, input_domain=Domain.uniform(2, scale=0.5), example_input=torch.zeros(1, 5))
    message = str(info.value)
    assert all(w in message for w in words), message
    assert "decompose" in message


class _LinearThenGathers(nn.Module):
    """A Linear on the quantized input, then products of gathered pairs of its unquantized outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.quant_in, self.quant_out = Quantize(2, scale=0.5), Quantize(2, scale=0.5)
        self.fc = nn.Linear(5, 4)
        self.pairs = torch.tensor([[0, 1], [2, 3]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.quant_out(self.fc(self.quant_in(x))[:, self.pairs].prod(-1))


def test_a_region_takes_in_the_open_layer_before_it() -> None:
    """A region that begins on a layer's unquantized output runs that layer first, in one table per output."""
    torch.manual_seed(0)
    model = nn.Sequential(_LinearThenGathers()).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2, scale=0.5), example_input=torch.zeros(1, 5))
    assert [u.in_channels for u in net["0"].plan.units] == [(0, 1, 2, 3, 4)] * 2
    codes = torch.cartesian_prod(*[torch.arange(4)] * 5)
    assert iotable.verify(model, net, codes * 0.5).agreement == 1.0


def test_region_tables_are_cached_and_a_changed_mask_recomputes_them(tmp_path: Path) -> None:
    """The table cache keys a region by the code its calls run and the tensors they read: a second model reads
    every table from the cache, and a mask changed in place recomputes that layer's tables, which verify 100%."""
    first = uz.PolyLUTModel().eval()
    options = {"input_domain": INPUTS, "example_input": torch.zeros(1, FEATURES), "cache_dir": tmp_path}
    iotable.precompute(first, **options)
    second = uz.PolyLUTModel().eval()
    net = iotable.precompute(second, **options)
    assert {layer.method for layer in net.layers.values()} == {"cache"}
    with torch.no_grad():
        second.module_list[0].imask[0] = torch.tensor([1, 4])
    net = iotable.precompute(second, **options)
    assert net["module_list.0"].method != "cache" and net["module_list.1"].method == "cache"
    assert iotable.verify(second, net, _inputs(2000, 1)).agreement == 1.0
