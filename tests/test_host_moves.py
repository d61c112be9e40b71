"""host= never moves a table layer's modules onto the host silently: such a request is refused before work."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from iotable import Domain, ModelError, NodeKind, precompute, verify
from iotable.nn import Quantize

U2 = Domain.uniform(2, scale=0.5)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Quantize(2, scale=0.5), nn.Linear(4, 3), nn.ReLU(), Quantize(2, scale=0.5)).eval()


def test_final_quantizer_alone_on_host_is_refused_naming_the_layer():
    """host=[final quantizer] is refused: the message names the layer and modules that would move, and the fix."""
    with pytest.raises(ModelError) as caught:
        precompute(_model(), input_domain=U2, example_input=torch.zeros(1, 4), host=["3"])
    message = str(caught.value)
    assert "host=: '3' is listed to run with torch" in message
    assert "the table layer '1' (modules ['1', '2'])" in message
    assert "host=['1', '2', '3']" in message and "put a quantizer before '3'" in message


def test_the_refusal_comes_before_any_table(monkeypatch):
    """The refusal comes while cutting the model, before any layer is planned or tabulated."""
    import iotable.network.builder as builder

    def no_planning(*args, **kwargs):
        raise AssertionError("a layer was planned")

    monkeypatch.setattr(builder, "plan_layer", no_planning)
    with pytest.raises(ModelError, match="host=: '3' is listed"):
        precompute(_model(), input_domain=U2, example_input=torch.zeros(1, 4), host=["3"])


def test_naming_the_layer_too_puts_it_on_the_host():
    """With the layer's modules listed too (the fix the message names), they run on the host, as asked."""
    model = _model()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 4), host=["1", "2", "3"])
    assert [n.name for n in net.graph.nodes_of(NodeKind.HOST)] == ["1", "2", "3"]
    x = torch.tensor(U2.values, dtype=torch.float32)[
        torch.randint(0, 4, (32, 4), generator=torch.Generator().manual_seed(0))
    ]
    assert verify(model, net, x).ok


def test_a_host_module_reading_codes_is_accepted():
    """A host module after a quantizer reads codes: it runs alone on the host, and no table layer moves."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Linear(4, 3), Quantize(2, scale=0.5), nn.Linear(3, 2)).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 4), host=["3"])
    assert [n.name for n in net.graph.nodes_of(NodeKind.HOST)] == ["3"]
    assert "1" in net.layers
