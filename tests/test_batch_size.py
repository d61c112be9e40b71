"""A model whose output depends on the batch size is refused when its tables are built (a few rows run again
alone and in a larger batch), and verify says that the difference comes from the batch, not from a table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, IOTable, ModelError
from iotable.nn import Quantize
from iotable.tabulate.recheck import check_rows

DOMAIN = Domain.uniform(2, scale=0.5)


class BatchSized(nn.Module):
    """Scales its input and adds one when its batch holds ``at`` samples or more."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.7, -0.4, 0.3]))
        self.at = at

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w + float(x.shape[0] >= self.at)


def _model(at: int) -> nn.Module:
    return nn.Sequential(Quantize(2, scale=0.5), BatchSized(at), Quantize(2, scale=0.5)).eval()


def _inputs(n: int) -> torch.Tensor:
    codes = torch.randint(0, 4, (n, 3), generator=torch.Generator().manual_seed(0))
    return torch.tensor(DOMAIN.values, dtype=torch.float32)[codes]


def test_a_model_whose_output_depends_on_the_batch_size_is_refused_by_layer() -> None:
    """Adding one from a batch of 8 on (past the purity check's batches) is refused naming the layer and fix."""
    with pytest.raises(ModelError) as info:
        iotable.precompute(_model(8), input_domain=DOMAIN, example_input=torch.zeros(1, 3))
    message = str(info.value)
    assert message.startswith("1: its output depends on the batch size"), message
    assert "in a batch of" in message and "host=" in message


def test_a_model_independent_of_the_batch_size_passes_and_a_host_module_is_its_own() -> None:
    """The same module whose threshold no batch reaches is tabulated exactly; listed in host=, the batch-size
    dependent one runs with torch and is not refused."""
    model = _model(10**6)
    net = iotable.precompute(model, input_domain=DOMAIN, example_input=torch.zeros(1, 3))
    x = _inputs(64)
    assert torch.equal(net.run(x), model(x))
    hosted = iotable.precompute(_model(8), input_domain=DOMAIN, example_input=torch.zeros(1, 3), host=["1"])
    assert hosted.graph.nodes_of(iotable.NodeKind.HOST)


def test_rows_that_differ_from_the_module_alone_are_refused() -> None:
    """The row check compares with the tables: the right tables pass, tables with every output moved fail."""
    conv = nn.Conv1d(2, 2, kernel_size=2, groups=2, bias=False)
    layer = iotable.precompute(conv, input_domain=Domain.uniform(1))
    check_rows(conv, layer.plan, list(layer.tables))
    moved = [
        IOTable.dense(t.outputs + 1.0, input_domains=list(t.input_domains), output_domain=t.output_domain)
        for t in layer.tables
    ]
    with pytest.raises(ModelError, match="depends on the batch size: unit"):
        check_rows(conv, layer.plan, moved)


def test_verify_says_a_mismatch_comes_from_the_batch() -> None:
    """Tables of the batch-independent model checked against the batch-size dependent one: the report says the
    model's output depends on the batch; against a model with other weights, it names a table."""
    net = iotable.precompute(_model(10**6), input_domain=DOMAIN, example_input=torch.zeros(1, 3))
    x = _inputs(64)
    report = iotable.verify(_model(8), net, x)
    assert not report.ok and report.first is not None
    assert "depends on its batch" in report.first["note"], report
    other = _model(10**6)
    with torch.no_grad():
        other[1].w.mul_(-1)
    report = iotable.verify(other, net, x)
    assert report.first is not None and report.first["unit"] is not None, report
