"""iotable.estimate: a whole model's LUT estimate and pipeline registers from its plans, before any row."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable import estimate
from iotable.errors import SynthError
from iotable.hdl import export
from iotable.nn import Quantize
from iotable.synth import table_lut_estimate
from tests.test_hdl_export import D2, small_mlp


def conv_model() -> nn.Sequential:
    """A 1-D conv net with a float head: a strided conv, a depthwise, a pointwise, a host Linear."""
    torch.manual_seed(2)
    return nn.Sequential(
        OrderedDict(
            c1=nn.Conv1d(2, 3, 3, stride=2), q1=Quantize(2, signed=True),
            dw=nn.Conv1d(3, 3, 3, padding=1, groups=3), q2=Quantize(1),
            pw=nn.Conv1d(3, 2, 1), q3=Quantize(3),
            flat=nn.Flatten(), head=nn.Linear(12, 4),
        )
    ).eval()  # fmt: skip


@pytest.mark.parametrize("build", ["mlp", "conv"])
def test_estimate_equals_the_formula_on_the_tables_built_later(build: str, tmp_path: Path) -> None:
    """Per layer, the estimate is LogicNets' formula summed over the tables precompute then builds, the rows are
    theirs, and the registers are what export(pipeline=1) puts after each layer."""
    if build == "mlp":
        model, options = small_mlp(), {"input_domain": D2, "example_input": torch.zeros(1, 12)}
    else:
        model = conv_model()
        options = {"input_domain": D2, "example_input": torch.zeros(1, 2, 13), "host": ["head"]}
    cost = estimate(model, **options, keep_dead=True)
    net = iotable.precompute(model, **options)
    assert [e.layer for e in cost.layers] == list(net.layers)
    for e in cost.layers:
        tables = net[e.layer].tables
        assert e.luts == sum(table_lut_estimate(t) for t in tables)
        assert (e.units, e.rows) == (len(tables), sum(t.rows for t in tables))
    design = export(net, tmp_path / "all", vectors=2, table_benches=False, keep_dead=True)
    assert [e.registers for e in cost.layers] == [r.registers for r in design.layers]
    assert cost.luts == sum(e.luts for e in cost.layers) and cost.rows == sum(t.rows for t in net.tables)
    assert "LUT6 estimate" in cost.summary() and f"{cost.luts} LUT6" in str(cost)
    # by default, the live tables alone (those whose outputs reach the output), as the default export builds
    live = estimate(model, **options)
    units = net.liveness.layers(net.graph)
    for e in live.layers:
        tables = [t for t, keep in zip(net[e.layer].tables, units[e.layer]) if keep]
        assert e.luts == sum(table_lut_estimate(t) for t in tables)
        assert (e.units, e.rows, e.dead) == (len(tables), sum(t.rows for t in tables), int((~units[e.layer]).sum()))
    design = export(net, tmp_path / "live", vectors=2, table_benches=False)
    assert [e.registers for e in live.layers] == [r.registers for r in design.layers]


def test_no_row_is_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables of 2^22 rows are estimated from the plans alone: enumeration made to fail is never reached."""
    import iotable.network.network

    def refuse(*args, **kwargs):
        raise AssertionError("estimate computed rows")

    monkeypatch.setattr(iotable.network.network, "tabulate_layers", refuse)
    model = nn.Sequential(nn.Linear(11, 4), Quantize(3)).eval()  # 11 inputs x 2 bits: 2^22 rows per unit
    cost = estimate(model, input_domain=D2, example_input=torch.zeros(1, 11))
    (layer,) = cost.layers
    assert (layer.units, layer.input_bits, layer.output_bits) == (4, (22,), 3)
    assert layer.luts == 4 * iotable.synth.lut_estimate(22, 3) and layer.registers == 12


def test_other_lut_sizes_and_a_bad_k() -> None:
    """k=4 counts LUT4s; a k outside 3..12 is a SynthError before any work."""
    model = small_mlp()
    six = estimate(model, input_domain=D2, example_input=torch.zeros(1, 12))
    four = estimate(model, input_domain=D2, example_input=torch.zeros(1, 12), k=4)
    assert four.k == 4 and four.luts > six.luts and "LUT4 estimate" in four.summary()
    with pytest.raises(SynthError, match="k \\(inputs per LUT\\) must be an integer from 3 to 12"):
        estimate(model, input_domain=D2, example_input=torch.zeros(1, 12), k=1)


def test_refusals_are_precomputes() -> None:
    """A model precompute refuses (tables above max_rows) is refused the same way, naming the layer."""
    model = nn.Sequential(OrderedDict(big=nn.Linear(12, 2), q=Quantize(2))).eval()
    with pytest.raises(iotable.errors.TableTooLargeError, match="big"):
        estimate(model, input_domain=D2, example_input=torch.zeros(1, 12), max_rows=1000)
