"""Whole models of the 2024–26 families as their authors write them, brought in with no decomposition metadata (or
only an output domain, which the tables also show): the same tables as the hand-decorated models, layer for
layer and table for table, and ``verify`` 100%."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain
from iotable.nn import Quantize
from tests import fieldzoo as zoo

BITS = Domain([0.0, 1.0])
U2 = Domain.uniform(2, scale=1 / 3)
U3 = Domain.uniform(3, scale=1 / 7)
LEAVES = Domain([float(v) for v in range(-3, 4)])


class ClassSum(nn.Module):
    """TreeLUT's head: per class, the sum of its trees' scores plus a bias."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes
        self.register_buffer("bias", torch.linspace(-0.5, 0.5, classes))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.view(scores.shape[0], self.classes, -1).sum(-1) + self.bias


def dwn() -> nn.Sequential:
    return nn.Sequential(
        zoo.Thermometer(4, 3), zoo.LUTLayer(12, 16, n=4), zoo.LUTLayer(16, 8, n=4, seed=1), zoo.GroupSum(2, tau=2.0)
    )


def difflogic() -> nn.Sequential:
    return nn.Sequential(zoo.LogicLayer(12, 16), zoo.LogicLayer(16, 8, seed=1), zoo.GroupSum(2))


def treelut() -> nn.Sequential:
    return nn.Sequential(zoo.Comparators(5, 12), zoo.Trees(12, 6), ClassSum(2))


def kanele() -> nn.Sequential:
    return nn.Sequential(
        zoo.KANLayer(6, 4), Quantize(3, scale=0.25), zoo.KANLayer(4, 2, seed=1), Quantize(3, scale=0.25, signed=True)
    )


def polylut_add() -> nn.Sequential:
    return nn.Sequential(
        Quantize(2, scale=1 / 3),
        zoo.PolyAddLayer(8, 6, 2),
        Quantize(2, scale=0.5),
        zoo.PolyAddLayer(6, 3, 2, seed=5),
        Quantize(3, scale=0.5),
    )


def logicnets() -> nn.Sequential:
    return nn.Sequential(
        Quantize(2, scale=1 / 3),
        zoo.MaskedNeurons(10, 8, 3),
        Quantize(2, scale=0.5),
        zoo.MaskedNeurons(8, 4, 2, seed=1),
        Quantize(2, scale=0.5),
    )


# name, model, input domain, features, {layer index: the output domain no quantizer shows (its tables do)}, host
# (none: the class sums of DWN, DiffLogic and TreeLUT become sum nodes)
FAMILIES: list[tuple[str, Callable[[], nn.Sequential], Domain, int, dict[int, Domain], list[str]]] = [
    ("dwn", dwn, U3, 4, {0: BITS, 1: BITS, 2: BITS}, []),
    ("difflogic", difflogic, BITS, 12, {0: BITS, 1: BITS}, []),
    ("treelut", treelut, U3, 5, {0: BITS, 1: LEAVES}, []),
    ("kanele", kanele, U2, 6, {}, []),
    ("polylut-add", polylut_add, U2, 8, {}, []),
    ("logicnets", logicnets, U2, 10, {}, []),
]


def _precompute(model: nn.Module, domain: Domain, features: int, host: list[str]) -> iotable.TableNetwork:
    return iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, features), host=host)


def _hand_decorated(model: nn.Sequential, outputs: dict[int, Domain]) -> nn.Sequential:
    """What a user writes today: every layer's fan-ins (from its masks, index pairs or mapping) declared."""
    decorated = copy.deepcopy(model)
    for k, layer in enumerate(decorated):
        if hasattr(layer, "true_fan_ins"):
            iotable.decompose(layer, fan_in=layer.true_fan_ins(), output_domain=outputs.get(k))
    return decorated


@pytest.mark.parametrize("family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_a_family_comes_in_without_decoration(family: tuple) -> None:
    name, build, domain, features, outputs, host = family
    torch.manual_seed(0)
    model = build().eval()
    for k, out in outputs.items():
        iotable.decompose(model[k], fan_in="auto", output_domain=out)  # only what the structure cannot show
    net = _precompute(model, domain, features, host)
    x = torch.tensor(domain.values, dtype=torch.float32)[torch.randint(0, len(domain), (2000, features))]
    report = iotable.verify(model, net, x)
    assert report.agreement == 1.0, (name, report)
    assert not net.graph.nodes_of(iotable.NodeKind.HOST), name  # the whole model is tables and arithmetic

    declared = _precompute(_hand_decorated(model, outputs), domain, features, host)
    assert list(net.layers) == list(declared.layers)
    for layer_name, inferred in net.layers.items():
        theirs = declared.layers[layer_name]
        assert len(inferred) == len(theirs), (name, layer_name)
        for unit, mine, table in zip(inferred.plan.units, inferred, theirs):
            unused = table.unused_inputs()[: table.fan_in - 1]
            # the inferred table equals the declared one, less the inputs the learned function ignores
            assert mine == table.without_inputs(unused), (name, layer_name, unit.index)
    assert torch.equal(net.run(x), declared.run(x))


def test_no_decoration_at_all_where_a_quantizer_closes_every_layer() -> None:
    """KANELÉ, PolyLUT-Add and LogicNets-style models need nothing: their quantizers show every output domain."""
    for build, domain, features in ((kanele, U2, 6), (polylut_add, U2, 8), (logicnets, U2, 10)):
        model = build().eval()
        net = _precompute(model, domain, features, [])
        mixing = [layer for layer in net.layers.values() if layer.plan.units[0].fan_in > 1]
        assert mixing and all(layer.plan.spec.source.startswith("inferred") for layer in mixing)
        x = torch.tensor(domain.values, dtype=torch.float32)[torch.randint(0, len(domain), (500, features))]
        assert iotable.verify(model, net, x).agreement == 1.0


@pytest.mark.parametrize("family", [f for f in FAMILIES if f[4]], ids=[f[0] for f in FAMILIES if f[4]])
def test_no_output_domain_needed_where_the_tables_show_it(family: tuple) -> None:
    """DWN, DiffLogic and TreeLUT with no decoration at all: each layer's output domain is the values its tables
    hold, the domain a user declares by hand ({0, 1}, the leaf scores), so the outputs are those of the model
    declared by hand."""
    _, build, domain, features, outputs, host = family
    model = build().eval()
    net = _precompute(model, domain, features, host)
    declared = _precompute(_hand_decorated(model, outputs), domain, features, host)
    assert {n: layer.plan.output_domain for n, layer in net.layers.items()} == {str(k): d for k, d in outputs.items()}
    x = torch.tensor(domain.values, dtype=torch.float32)[torch.randint(0, len(domain), (500, features))]
    assert torch.equal(net.run(x), declared.run(x))
    assert iotable.verify(model, net, x).agreement == 1.0


def test_a_mapping_changed_by_training_is_followed() -> None:
    """The units follow the mapping as it is when precompute runs (nothing was copied out of it)."""
    model = dwn().eval()
    for k in range(3):
        iotable.decompose(model[k], fan_in="auto", output_domain=BITS)
    before = _precompute(model, U3, 4, ["3"])
    with torch.no_grad():
        model[1].mapping.copy_(torch.randn_like(model[1].mapping))
    after = _precompute(model, U3, 4, ["3"])
    fan_ins = [u.in_channels for u in after.layers["1"].plan.units]
    assert fan_ins != [u.in_channels for u in before.layers["1"].plan.units]
    x = torch.tensor(U3.values, dtype=torch.float32)[torch.randint(0, 8, (500, 4))]
    assert iotable.verify(model, after, x).agreement == 1.0
    assert np.all([set(f) <= set(t) for f, t in zip(fan_ins, model[1].true_fan_ins())])


def test_an_inferred_network_saves_loads_and_exports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from iotable.hdl import export, simulate

    from .optional import require_program

    model = polylut_add().eval()
    net = _precompute(model, U2, 8, [])
    loaded = iotable.load(iotable.save(net, tmp_path / "net"))
    x = torch.tensor(U2.values, dtype=torch.float32)[torch.randint(0, 4, (300, 8))]
    assert torch.equal(loaded.run(x), net.run(x))
    require_program("iverilog", package="iverilog")
    design = export(loaded, tmp_path / "hdl", vectors=64)
    assert torch.equal(simulate(design, x[:40]), design.reference(x[:40]))
