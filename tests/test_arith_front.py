"""Sums and argmax recognized as the field writes them, with no decoration: GroupSum (DWN, DiffLogic), class sums
with a bias (TreeLUT), ``argmax`` at the end of ``forward``; each a ``sum`` or ``argmax`` node only where the
integer hardware gives the model's own values, else a table of its inputs with a warning that says why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind
from iotable.errors import IOTableWarning, ModelError
from tests import fieldzoo as zoo
from tests.test_field_models import BITS, LEAVES, U3, ClassSum, _hand_decorated

torch.manual_seed(0)


class Decide(nn.Module):
    """The class decision at the end of a forward."""

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.argmax(-1)


def dwn(classes: int = 2, per_class: int = 4, tau: float = 2.0, decide: bool = True) -> nn.Sequential:
    layers = [
        zoo.Thermometer(4, 3),
        zoo.LUTLayer(12, 16, n=4),
        zoo.LUTLayer(16, classes * per_class, n=4, seed=1),
        zoo.GroupSum(classes, tau=tau),
    ]
    model = nn.Sequential(*layers, *([Decide()] if decide else [])).eval()
    return _hand_decorated(model, {0: BITS, 1: BITS, 2: BITS})


def treelut(bias: tuple[float, float] = (-0.5, 0.5), decide: bool = True) -> nn.Sequential:
    layers = [zoo.Comparators(5, 12), zoo.Trees(12, 6), ClassSum(2)]
    model = nn.Sequential(*layers, *([Decide()] if decide else [])).eval()
    with torch.no_grad():
        model[2].bias.copy_(torch.tensor(bias))
    return _hand_decorated(model, {0: BITS, 1: LEAVES})


def samples(domain: Domain, features: int, n: int = 2000, seed: int = 0) -> torch.Tensor:
    index = torch.randint(0, len(domain), (n, features), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(domain.values, dtype=torch.float32)[index]


def precompute(model: nn.Module, features: int) -> iotable.TableNetwork:
    return iotable.precompute(model, input_domain=U3, example_input=torch.zeros(1, features))


@pytest.mark.parametrize("decide", [False, True])
def test_groupsum_and_argmax_become_arithmetic(decide: bool) -> None:
    model = dwn(decide=decide)
    net = precompute(model, 4)
    kinds = [n.kind for n in net.graph.nodes]
    assert NodeKind.SUM in kinds and (NodeKind.ARGMAX in kinds) == decide and NodeKind.HOST not in kinds
    total = net.graph.nodes_of(NodeKind.SUM)[0]
    assert np.all(total.meta.weights == 1) and "exact" in total.meta.exact  # a popcount
    assert total.domain == Domain([v / 2 for v in range(5)])  # 0..4 bits set, over tau = 2
    x = samples(U3, 4)
    assert iotable.verify(model, net, x).agreement == 1.0
    if decide:
        assert torch.equal(net.run(x).long(), model(x))


def test_a_paper_sized_groupsum_is_a_popcount() -> None:
    """DWN's MNIST head sums 100+ bits per class: no table could hold it, an adder does."""
    model = dwn(classes=2, per_class=128, tau=1 / 0.3)
    net = precompute(model, 4)
    total = net.graph.nodes_of(NodeKind.SUM)[0]
    assert total.meta.index_map.shape == (2, 128) and len(total.domain) == 129
    x = samples(U3, 4)
    assert iotable.verify(model, net, x).agreement == 1.0


def test_a_non_power_of_two_temperature_keeps_the_models_values() -> None:
    """``/ 3``: the sums are exact, the division rounds; the sum's domain holds the model's float32 quotients, so the
    scores equal the model's bit for bit."""
    model = dwn(tau=3.0, decide=False)
    net = precompute(model, 4)
    values = net.graph.nodes_of(NodeKind.SUM)[0].domain.values
    assert np.array_equal(values, (np.arange(5, dtype=np.float32) / np.float32(3.0)).astype(np.float64))
    x = samples(U3, 4)
    assert torch.equal(net.run(x), model(x))


def test_class_sums_with_a_bias_are_a_weighted_sum() -> None:
    """TreeLUT's head (a module with a bias buffer) is traced into: the biases 0.75 apart put the sums on a grid of
    quarter units."""
    model = treelut(bias=(-0.25, 0.5))
    net = precompute(model, 5)
    total = net.graph.nodes_of(NodeKind.SUM)[0]
    assert np.all(total.meta.weights == 4) and total.meta.constant.tolist() == [0, 3]
    assert not [n for n in net.graph.nodes if n.kind is NodeKind.TABLE and n.meta.layer == "2"]
    x = samples(U3, 5)
    assert iotable.verify(model, net, x).agreement == 1.0


def test_a_bias_off_the_grid_stays_a_table_and_says_why() -> None:
    model = treelut(bias=(0.1, 0.6), decide=False)
    with pytest.warns(IOTableWarning, match=r"no common grid.*a table of its inputs"):
        net = precompute(model, 5)
    assert not net.graph.nodes_of(NodeKind.SUM)
    x = samples(U3, 5)
    assert iotable.verify(model, net, x).agreement == 1.0
    with pytest.warns(IOTableWarning), pytest.raises(ModelError, match=r"argmax .* compares codes.*raw values"):
        precompute(treelut(bias=(0.1, 0.6)), 5)  # its raw scores have no codes to compare


def test_a_changed_bias_is_followed() -> None:
    """The sum's constants come from the bias: a trained bias re-plans (no stale graph from the structure cache)."""
    model = treelut()
    before = precompute(model, 5).graph.nodes_of(NodeKind.SUM)[0]
    with torch.no_grad():
        model[2].bias.copy_(torch.tensor([0.5, -0.5]))
    net = precompute(model, 5)
    assert net.graph.nodes_of(NodeKind.SUM)[0].meta.constant.tolist() != before.meta.constant.tolist()
    assert iotable.verify(model, net, samples(U3, 5)).agreement == 1.0


def test_a_wrong_constant_is_caught_by_verify() -> None:
    """Tamper: a sum node whose constant is off by one differs from the model, and verify says so."""
    model = treelut()
    net = precompute(model, 5)
    node = net.graph.nodes_of(NodeKind.SUM)[0]
    bad = dataclasses.replace(node, meta=dataclasses.replace(node.meta, constant=node.meta.constant + np.array([1, 0])))
    tampered = dataclasses.replace(net, graph=net.graph.replace(bad))
    assert iotable.verify(model, tampered, samples(U3, 5)).agreement < 1.0


def test_an_argmax_of_raw_values_is_refused() -> None:
    """A float score (no quantizer, no exact sum) has no codes to compare: refused by name."""
    model = nn.Sequential(nn.Linear(4, 3), Decide()).eval()
    with pytest.raises(ModelError, match=r"argmax .*compares codes of one domain; '0' gives raw values"):
        iotable.precompute(model, input_domain=U3, example_input=torch.zeros(1, 4))


def test_an_argmax_after_an_exact_linear_head_decides_in_hardware() -> None:
    """A head with power-of-two weights and no quantizer: its sums are the model's values exactly (codes), so the
    argmax reads them; too wide for a table, it is partial sums, an adder and the decision."""
    from tests.test_arith_split import D2, dyadic_linear

    model = nn.Sequential(dyadic_linear()[0], Decide()).eval()
    net = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))
    assert [n.kind.value for n in net.graph.nodes][-3:] == ["sum", "argmax", "output"]
    x = samples(D2, 64)
    assert torch.equal(net.run(x).long(), model(x))


def test_a_sum_over_the_batch_axis_is_refused() -> None:
    class Pool(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(0)

    model = nn.Sequential(nn.Linear(4, 3), iotable.nn.Quantize(2), Pool()).eval()
    with pytest.raises(ModelError, match="batch axis"):
        iotable.precompute(model, input_domain=U3, example_input=torch.zeros(2, 4))


def test_a_network_with_arithmetic_saves_and_loads(tmp_path: Path) -> None:
    model = treelut()
    net = precompute(model, 5)
    loaded = iotable.load(iotable.save(net, tmp_path / "net"))
    x = samples(U3, 5)
    assert torch.equal(loaded.run(x), net.run(x))
    assert loaded.graph.nodes_of(NodeKind.SUM)[0].meta == net.graph.nodes_of(NodeKind.SUM)[0].meta


def test_polylut_adds_adder_on_the_batch_axis_is_an_add_of_codes() -> None:
    """Upstream hands the quantized sub-neurons to ``Adder2`` stacked along the batch axis and chunks them back:
    two sub-neuron table layers and an add of their codes (a join and a table of fan-in 2 per neuron, with the
    batch norm and quantizer after it)."""
    from tests.test_arith_families import polylut_add_upstream

    model = polylut_add_upstream()
    domain = Domain.uniform(2, scale=1 / 3)
    net = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, 8))
    names = [n.name for n in net.graph.nodes_of(NodeKind.TABLE)]
    assert {"1.first.0", "1.second.0", "add"} <= set(names)
    assert net.graph["add"].meta.fan_ins == (2,) * 6
    assert iotable.verify(model, net, samples(domain, 8)).agreement == 1.0


def test_a_sum_of_raw_values_says_what_to_quantize() -> None:
    class Total(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(-1)

    model = nn.Sequential(nn.Linear(4, 6), Total()).eval()
    with pytest.raises(ModelError, match=r"sums the raw \(unquantized\) outputs of '0'; put a Quantize before the sum"):
        iotable.precompute(model, input_domain=U3, example_input=torch.zeros(1, 4))
