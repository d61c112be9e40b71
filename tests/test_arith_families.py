"""The 2024–26 families, whole, as hardware: each model as its authors write it (small versions) becomes tables and
arithmetic with no host node, equal to the model on every sample, and its exported design (Verilog and VHDL)
equals the model under iverilog and GHDL: the class where the model decides one, else its scores' codes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind
from iotable.hdl import export, simulate
from tests import fieldzoo as zoo
from tests.optional import require_program
from tests.test_arith_front import Decide, dwn, samples, treelut
from tests.test_arith_split import dyadic_linear, kanele_wine
from tests.test_field_models import BITS, U2, U3, _hand_decorated, kanele, logicnets, polylut_add

U6 = Domain.uniform(6, scale=1 / 64)


def difflogic() -> nn.Sequential:
    model = nn.Sequential(zoo.LogicLayer(12, 16), zoo.LogicLayer(16, 8, seed=1), zoo.GroupSum(2), Decide()).eval()
    return _hand_decorated(model, {0: BITS, 1: BITS})


def polylut_add_upstream() -> nn.Sequential:
    from iotable.nn import Quantize

    torch.manual_seed(0)
    return nn.Sequential(
        Quantize(2, scale=1 / 3), zoo.QuantPolyAddLayer(8, 6, 2), nn.BatchNorm1d(6), Quantize(2, scale=0.5)
    ).eval()


# name, model, input domain, features
FAMILIES: list[tuple[str, Callable[[], nn.Module], Domain, int]] = [
    ("dwn", lambda: dwn(), U3, 4),
    ("dwn-paper-groupsum", lambda: dwn(classes=2, per_class=128, tau=1 / 0.3), U3, 4),
    ("difflogic", difflogic, BITS, 12),
    ("treelut", lambda: treelut(bias=(-0.25, 0.5)), U3, 5),
    ("kanele", lambda: kanele().eval(), U2, 6),
    ("kanele-wine", kanele_wine, U6, 13),
    ("polylut-add", lambda: polylut_add().eval(), U2, 8),
    ("polylut-add-upstream", polylut_add_upstream, Domain.uniform(2, scale=1 / 3), 8),
    ("logicnets", lambda: logicnets().eval(), U2, 10),
    ("quant-linear-64", dyadic_linear, Domain.uniform(2, scale=0.5), 64),
]


@pytest.mark.parametrize("family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_the_whole_model_is_hardware_equal_to_the_model(family: tuple, tmp_path: Path) -> None:
    name, build, domain, features = family
    model = build()
    net = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, features))
    assert not net.graph.nodes_of(NodeKind.HOST), name
    x = samples(domain, features, n=400)
    assert iotable.verify(model, net, x).agreement == 1.0, name
    expected = net.run(x[:120], return_codes=True)
    for language, simulator, program, package in (
        ("verilog", "iverilog", "iverilog", "iverilog"),
        ("vhdl", "ghdl", "ghdl", "ghdl"),
    ):
        require_program(program, package=package)
        design = export(net, tmp_path / language, language=language)
        got = simulate(design, x[:120], simulator=simulator)
        assert torch.equal(got.reshape(expected.shape).to(expected.dtype), expected), (name, language)
    if net.graph.nodes_of(NodeKind.ARGMAX):
        assert torch.equal(expected.reshape(-1), model(x[:120]).reshape(-1)), name  # the class itself


STREAMED = [f for f in FAMILIES if f[0] != "polylut-add-upstream"]  # its input fans out: streams refuse duplicates


@pytest.mark.parametrize("family", STREAMED, ids=[f[0] for f in STREAMED])
def test_the_streaming_design_equals_the_model(family: tuple, tmp_path: Path) -> None:
    """The streaming style too: a flat tensor is one word, so a GroupSum over a view of it is an adder per word."""
    require_program("iverilog", package="iverilog")
    name, build, domain, features = family
    model = build()
    net = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, features))
    x = samples(domain, features, n=80)
    design = export(net, tmp_path / "stream", style="streaming", pipeline=1)
    got = simulate(design, x)
    expected = net.run(x, return_codes=True)
    assert torch.equal(got.reshape(expected.shape).to(expected.dtype), expected), name
