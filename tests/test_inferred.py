"""Units inferred from a module's structure: the field's layers as their authors write them, with no decoration,
give the tables of the hand-decorated layer, table for table; inputs that never matter are removed exactly;
what the structure cannot show is refused or caught, never a silent wrong table."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain
from iotable.errors import NotDecomposedError, SpecError, SpecMismatchError
from iotable.front.infer import arithmetic_only
from iotable.network.precompute import precompute_layer
from iotable.nn import Quantize
from tests import fieldzoo as zoo

BITS = Domain([0.0, 1.0])
U2 = Domain.uniform(2, scale=1 / 3)


def _cases() -> list[tuple[str, nn.Module, Domain, int]]:
    return [
        ("thermometer", zoo.Thermometer(4, 3), U2, 4),
        ("dwn", zoo.LUTLayer(12, 8, n=4), BITS, 12),
        ("difflogic", zoo.LogicLayer(12, 16), BITS, 12),
        ("treelut comparators", zoo.Comparators(5, 12), U2, 5),
        ("treelut trees", zoo.Trees(12, 6), BITS, 12),
        ("kanele", zoo.KANLayer(6, 4), U2, 6),
        ("polylut-add", zoo.PolyAddLayer(8, 4, 2), U2, 8),
        ("logicnets", zoo.MaskedNeurons(10, 6, 3), U2, 10),
    ]


@pytest.mark.parametrize("case", range(8), ids=[c[0] for c in _cases()])
def test_no_decoration_gives_the_hand_decorated_tables(case: int) -> None:
    name, layer, domain, features = _cases()[case]
    layer.eval()
    example = torch.zeros(1, features)
    inferred = precompute_layer(layer, input_domain=domain, example_input=example)
    by_hand = iotable.decompose(copy.deepcopy(layer), fan_in=layer.true_fan_ins())
    declared = precompute_layer(by_hand, input_domain=domain, example_input=example)
    assert len(inferred) == len(declared)
    for unit, mine, theirs, fan_in in zip(inferred.plan.units, inferred, declared, layer.true_fan_ins()):
        # the structure's fan-in, less the inputs the learned function ignores (a DWN LUT whose entries
        # never look at one of its inputs): what the tables themselves show
        unused = theirs.unused_inputs()[: theirs.fan_in - 1]
        if len(np.unique(theirs.outputs)) > 1:  # a constant unit reads any one input
            assert unit.in_channels == tuple(c for j, c in enumerate(fan_in) if j not in unused), name
        assert mine == theirs.without_inputs(unused), name


class Sneaky(nn.Module):
    """Three outputs: one adds zero times an input (read, never mattering), one a product, one a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x[:, 0] + 0.0 * x[:, 1], x[:, 1] * x[:, 2] * self.gain, torch.floor(x[:, 2] / 8)], 1)


def test_inputs_that_never_change_a_table_are_removed_and_listed() -> None:
    result = precompute_layer(Sneaky(), input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3))
    assert result.unused == ((0, (1,)),)
    assert [u.in_channels for u in result.plan.units] == [(0,), (1, 2), (2,)]
    assert "1 unused inputs removed" in repr(result)
    codes = np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3)
    values = torch.tensor(Domain.uniform(2).decode(codes), dtype=torch.float32)
    expected = Sneaky()(values).detach().numpy()
    assert np.array_equal(result[0].lookup(codes[:, :1])[:, 0], expected[:, 0])


class NumpyLookup(nn.Module):
    """A dependence the structure cannot see: the input leaves torch through numpy."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.table.numpy()[x.numpy().astype(int)]).float()


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * self.gain if x[0, 2] > 0 else x[:, 1:2]


@pytest.mark.parametrize("module", [NumpyLookup(), Branches()], ids=["numpy", "branch"])
def test_what_the_structure_cannot_bound_is_refused_by_name(module: nn.Module) -> None:
    with pytest.raises(SpecError, match="cannot be bounded") as caught:
        precompute_layer(module, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 3), name="net.odd")
    assert "net.odd" in str(caught.value) and "iotable.decompose" in str(caught.value)


def test_a_declared_fan_in_still_wins_and_is_still_checked() -> None:
    layer = zoo.MaskedNeurons(10, 6, 3)
    wrong = [tuple(f[:-1]) for f in layer.true_fan_ins()]  # each neuron's last input left out
    iotable.decompose(layer, fan_in=wrong)
    with pytest.raises(SpecMismatchError):
        precompute_layer(layer, input_domain=U2, example_input=torch.zeros(1, 10))


def test_the_adder_alone_is_refused_with_the_batch_axis_message() -> None:
    with pytest.raises((SpecError, iotable.errors.EnumerationError), match="returned 2 rows for 1 inputs|rows for 2"):
        precompute_layer(zoo.Adder2(), input_domain=U2, example_input=torch.zeros(1, 4), name="neuron.adder")


class Spatial(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, 1:] * x[:, :, :-1] * self.gain


def test_a_spatial_module_without_metadata_must_declare_its_window() -> None:
    with pytest.raises(NotDecomposedError, match="kernel_size"):
        precompute_layer(Spatial(), input_domain=U2, example_input=torch.zeros(1, 2, 5))


def test_a_bound_that_misses_an_input_is_caught_by_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check behind inference can fail: a structural pass that forgot one input of every unit (as one that
    could not see a dependence would) is caught against the module before any table is trusted."""
    from iotable.front import infer

    real = infer.units_of

    def forgetful(found):  # type: ignore[no-untyped-def]
        fan_in, fan_out = real(found)
        return tuple(f[:-1] or f for f in fan_in), fan_out

    monkeypatch.setattr(infer, "units_of", forgetful)
    layer = zoo.MaskedNeurons(10, 6, 3)
    with pytest.raises(SpecMismatchError, match="inferred from the module's structure"):
        precompute_layer(layer, input_domain=U2, example_input=torch.zeros(1, 10), check=False)


class SparseLinear(nn.Module):
    """A linear map through ``torch.sparse.mm`` with a constant sparse weight buffer (COO or CSR)."""

    def __init__(self, layout: torch.layout) -> None:
        super().__init__()
        weight = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, -1.0]])
        self.register_buffer("w_sparse", weight.to_sparse() if layout == torch.sparse_coo else weight.to_sparse_csr())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.w_sparse, x.t()).t()


class Between(nn.Module):
    """``layer`` between two 2-bit quantizers."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.q0, self.layer, self.q1 = Quantize(2), layer, Quantize(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q1(self.layer(self.q0(x)))


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("declared", [False, True], ids=["inferred", "declared"])
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["coo", "csr"])
def test_a_sparse_weight_in_the_forward_precomputes_exactly(layout: torch.layout, declared: bool) -> None:
    """A layer whose forward is torch.sparse.mm with a sparse weight gets the weight's units and the model's values."""
    layer = SparseLinear(layout)
    if declared:
        iotable.decompose(layer, fan_in=[[0, 2], [1, 3]])
    model = Between(layer).eval()
    net = iotable.precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4))
    assert [u.in_channels for u in net["layer"].plan.units] == [(0, 2), (1, 3)]
    every = torch.cartesian_prod(*[torch.arange(4.0)] * 4)  # all 256 inputs
    with torch.no_grad():
        expected = model(every).numpy()
    np.testing.assert_array_equal(net.run(every).numpy(), expected)


class SparseFromInput(nn.Module):
    """A forward that makes its input sparse: what each output reads cannot be followed through it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(x.to_sparse(), self.weight)


def test_a_sparse_value_made_from_the_input_is_refused_by_name() -> None:
    """Units cannot be inferred through a sparse tensor computed from the input: a SpecError names the op and fix."""
    with pytest.raises(SpecError, match=r"net.sparse: its forward makes a sparse tensor from its input") as caught:
        precompute_layer(SparseFromInput(), input_domain=U2, example_input=torch.zeros(1, 3), name="net.sparse")
    assert "aten." in str(caught.value) and "iotable.decompose(net.sparse, fan_in=...)" in str(caught.value)


class _Tally(nn.Module):
    """Counts the samples it sees in a plain attribute and notes the last batch size in a new one."""

    def __init__(self, reduces: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.7, -0.4, 0.3]))
        self.seen, self.reduces, self.labels = 0, reduces, ["a", "b"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = self.seen + x.shape[0]
        self.last = x.shape[0]
        self.labels.append("c")
        return (x * self.w).sum(1) if self.reduces else x * self.w


@pytest.mark.parametrize("reduces", [False, True], ids=["kept-whole", "arithmetic"])
def test_the_arithmetic_trace_leaves_no_proxy_in_a_module(reduces: bool) -> None:
    """Tracing a forward on torch.fx proxies to tell an arithmetic-only module puts its plain attributes back
    and removes those it made, whether the module is kept whole or traced into."""
    tally = _Tally(reduces)
    assert arithmetic_only(tally) is reduces
    assert type(tally.seen) is int and tally.seen == 0 and tally.labels == ["a", "b"], vars(tally)
    assert "last" not in vars(tally)
