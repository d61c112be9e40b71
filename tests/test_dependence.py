"""The structural dependence pass (iotable.front.dependence): exact fan-ins of the field's layer forms, an
upper bound everywhere (checked against perturbation), and what it cannot follow said, never hidden."""

from __future__ import annotations

import io
import itertools
import pickle

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable.errors import SpecError
from iotable.front.dependence import dependence
from iotable.nn import Quantize
from tests import fieldzoo as zoo


def _fan_ins(module: nn.Module, example: torch.Tensor) -> list[tuple[int, ...]]:
    found = dependence(module, example)
    assert not found.crosses_samples and not found.unknown and not found.escapes
    return [found.fan_in(o) for o in range(found.matrix.shape[0])]


def _perturbation_reads(module: nn.Module, shape: tuple[int, ...], trials: int = 64) -> np.ndarray:
    """Which inputs change which outputs, seen by changing one input at a time on random points."""
    generator = torch.Generator().manual_seed(1)
    inputs = int(np.prod(shape))
    with torch.no_grad():
        outputs = module(torch.zeros(1, *shape)).numel()
        seen = np.zeros((outputs, inputs), dtype=bool)
        for _ in range(trials):
            base = torch.randint(0, 2, (1, *shape), generator=generator).float()
            reference = module(base).reshape(-1)
            for i in range(inputs):
                changed = base.clone().reshape(-1)
                changed[i] = 1 - changed[i]
                seen[:, i] |= (module(changed.reshape(1, *shape)).reshape(-1) != reference).numpy()
    return seen


class LutLayer(nn.Module):
    """DWN-style: each node reads k inputs chosen by a learnable mapping and looks its address up in a table."""

    def __init__(self, inputs: int, nodes: int, k: int = 3) -> None:
        super().__init__()
        self.mapping = nn.Parameter(torch.randn(nodes * k, inputs))
        self.luts = nn.Parameter(torch.randn(nodes, 2**k))
        self.k, self.nodes = k, nodes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bits = x[:, self.mapping.argmax(-1)].view(x.shape[0], self.nodes, self.k)
        assert bits.shape[-1] == self.k
        address = (bits > 0.5).long() @ (2 ** torch.arange(self.k))
        return (self.luts[torch.arange(self.nodes), address] > 0).float()


class GateLayer(nn.Module):
    """DiffLogic-style: each neuron a 2-input gate over a fixed random pair, its function a one-hot mix."""

    def __init__(self, inputs: int, neurons: int) -> None:
        super().__init__()
        self.register_buffer(
            "indices", torch.randint(0, inputs, (2, neurons), generator=torch.Generator().manual_seed(3))
        )
        self.weights = nn.Parameter(torch.randn(neurons, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., self.indices[0]], x[..., self.indices[1]]
        mix = nn.functional.one_hot(self.weights.argmax(-1), 4).float()
        gates = torch.stack([a * b, a + b - a * b, a + b - 2 * a * b, 1 - a * b], dim=-1)
        return (gates * mix).sum(-1)


class GroupSum(nn.Module):
    def __init__(self, k: int, tau: float) -> None:
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] % self.k == 0
        return x.view(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(-1) / self.tau


class MaskedLinear(nn.Module):
    """LogicNets-style: a dense weight times a fixed sparse mask."""

    def __init__(self, inputs: int, outputs: int, fan_in: int) -> None:
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        mask = torch.zeros(outputs, inputs)
        generator = torch.Generator().manual_seed(5)
        for row in mask:
            row[torch.randperm(inputs, generator=generator)[:fan_in]] = 1
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(nn.functional.linear(x, self.linear.weight * self.mask, self.linear.bias))


def test_a_learned_mapping_gives_each_node_its_distinct_inputs() -> None:
    torch.manual_seed(0)
    layer = LutLayer(8, 5)
    chosen = layer.mapping.argmax(-1).view(5, 3).tolist()
    assert _fan_ins(layer, torch.rand(2, 8)) == [tuple(sorted(set(row))) for row in chosen]


def test_fixed_index_pairs_and_one_hot_functions() -> None:
    torch.manual_seed(0)
    layer = GateLayer(6, 4)
    fan_ins = _fan_ins(layer, torch.rand(2, 6))
    pairs = layer.indices.T.tolist()
    assert fan_ins == [tuple(sorted(set(p))) for p in pairs]


def test_group_sum_with_its_shape_assert() -> None:
    assert _fan_ins(GroupSum(2, 0.5), torch.rand(2, 6)) == [(0, 1, 2), (3, 4, 5)]


def test_zero_weights_and_masks_are_dropped() -> None:
    layer = MaskedLinear(10, 4, 3)
    fan_ins = _fan_ins(layer, torch.rand(2, 10))
    assert fan_ins == [tuple(np.flatnonzero(row.numpy())) for row in layer.mask]
    linear = nn.Linear(4, 2)
    with torch.no_grad():
        linear.weight[1, 2] = 0
    assert _fan_ins(linear, torch.rand(2, 4)) == [(0, 1, 2, 3), (0, 1, 3)]


def test_convolution_windows_and_groups() -> None:
    conv = nn.Conv1d(2, 2, 3, padding=1, groups=2)
    fan_ins = _fan_ins(conv, torch.rand(2, 2, 4))
    assert fan_ins[:4] == [(0, 1), (0, 1, 2), (1, 2, 3), (2, 3)]
    assert fan_ins[4:] == [(4, 5), (4, 5, 6), (5, 6, 7), (6, 7)]


class Slots(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.shape[0], 3)
        out[:, 0] = x[:, 2]
        out[:, 1] = x[:, 0] * x[:, 1]
        out[:, 2] = x.amax(-1)
        return out


def test_writes_through_views_are_followed() -> None:
    assert _fan_ins(Slots(), torch.rand(2, 4)) == [(2,), (0, 1), (0, 1, 2, 3)]


def test_an_embedding_reads_its_index() -> None:
    assert _fan_ins(nn.Embedding(4, 2), torch.randint(0, 4, (2, 3))) == [(0,), (0,), (1,), (1,), (2,), (2,)]


@pytest.mark.parametrize(
    "make", [lambda: LutLayer(6, 4), lambda: GateLayer(6, 5), lambda: MaskedLinear(6, 3, 2), Slots]
)
def test_the_dependence_bounds_what_perturbation_sees(make: object) -> None:
    torch.manual_seed(2)
    module = make()  # type: ignore[operator]
    found = dependence(module, torch.rand(2, 6 if not isinstance(module, Slots) else 4))
    seen = _perturbation_reads(module, (found.matrix.shape[1],))
    assert not (seen & ~found.matrix).any()


def test_a_tampered_bound_is_caught_by_perturbation() -> None:
    """The check above can fail: drop one dependence and perturbation finds it."""
    module = MaskedLinear(6, 3, 2)
    found = dependence(module, torch.rand(2, 6))
    tampered = found.matrix.copy()
    tampered[0, np.flatnonzero(tampered[0])[0]] = False
    assert (_perturbation_reads(module, (6,)) & ~tampered).any()


class BatchCat(nn.Module):
    """PolyLUT-Add as upstream writes it: sub-neuron outputs stacked along the batch axis."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x[:, :2], x[:, 2:]), 0)


class Mixer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.flip(0)


@pytest.mark.parametrize("module", [BatchCat(), Mixer()])
def test_modules_that_mix_samples_are_flagged(module: nn.Module) -> None:
    assert dependence(module, torch.rand(2, 4)).crosses_samples


class Branch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 1:2] if x[:, 0].sum() > 0 else x[:, 2:3]


def test_control_flow_on_the_input_is_reported() -> None:
    assert dependence(Branch(), torch.rand(2, 4)).escapes


class Opaque(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(x).real


def test_an_operation_without_a_rule_depends_on_everything_and_is_named() -> None:
    found = dependence(Opaque(), torch.rand(2, 4))
    assert found.unknown and found.matrix.all()


def test_inferred_units_are_one_per_output() -> None:
    from iotable.front.infer import inferred_spec

    spec = inferred_spec(GroupSum(2, 1.0), torch.rand(2, 8), "head")
    assert spec.fan_in == ((0, 1, 2, 3), (4, 5, 6, 7)) and spec.fan_out == ((0,), (1,))


@pytest.mark.parametrize(
    ("module", "message"),
    [(BatchCat(), "returned 4 rows for 2 inputs: a module must map each sample"), (Branch(), "reads back a value")],
)
def test_an_unbounded_module_is_refused_by_name(module: nn.Module, message: str) -> None:
    from iotable.errors import SpecError
    from iotable.front.infer import inferred_spec

    with pytest.raises(SpecError, match=message) as caught:
        inferred_spec(module, torch.rand(2, 4), "model.adder")
    assert "model.adder" in str(caught.value) and "iotable.decompose" in str(caught.value)


def test_batch_norm_with_running_statistics_is_per_element() -> None:
    block = nn.Sequential(MaskedLinear(6, 3, 2), nn.BatchNorm1d(3)).eval()
    assert _fan_ins(block, torch.rand(2, 6)) == [tuple(np.flatnonzero(r.numpy())) for r in block[0].mask]
    assert dependence(block.train(), torch.rand(2, 6)).crosses_samples  # batch statistics mix the samples


def _zoo_cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    bits = torch.randint(0, 2, (2, 12)).float()
    return [
        ("thermometer", zoo.Thermometer(4, 3), torch.rand(2, 4)),
        ("dwn", zoo.LUTLayer(12, 8, n=4), bits),
        ("difflogic", zoo.LogicLayer(12, 16), bits),
        ("treelut comparators", zoo.Comparators(5, 12), torch.rand(2, 5)),
        ("treelut trees", zoo.Trees(12, 6), bits),
        ("kanele", zoo.KANLayer(6, 4), torch.rand(2, 6)),
        ("polylut", zoo.PolyNeurons(10, 6, 3), torch.rand(2, 10)),
        ("logicnets", zoo.MaskedNeurons(10, 6, 3), torch.rand(2, 10)),
    ]


@pytest.mark.parametrize("case", range(8))
def test_field_layers_written_as_their_authors_do_give_their_true_fan_ins(case: int) -> None:
    name, layer, example = _zoo_cases()[case]
    found = _fan_ins(layer.eval(), example)
    if isinstance(layer, zoo.LogicLayer):  # the one-hot mix drops the inputs the picked gate ignores
        assert all(set(f) <= set(t) for f, t in zip(found, layer.true_fan_ins())), name
    else:
        assert found == layer.true_fan_ins(), name


def test_polylut_add_as_written() -> None:
    """The adder alone takes two samples' rows per sample; the layer as a whole keeps the batch axis (the
    concatenation along it and the split undo each other), each neuron reading both sub-neurons' inputs."""
    assert dependence(zoo.Adder2(), torch.rand(2, 4)).crosses_samples
    layer = zoo.PolyAddLayer(8, 4, 2)
    assert _fan_ins(layer, torch.rand(2, 8)) == layer.true_fan_ins()


class _ShiftedGather(nn.Module):
    """Six positions gathered from eight, all shifted by one when the first four inputs all equal 1.5."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("positions", torch.arange(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, self.positions + (x[:, :4] == 1.5).all(1, keepdim=True))


def test_input_dependent_gather_reads_the_whole_indexed_row() -> None:
    """A gather whose positions depend on the input reads every element of its sample's row, not the example's."""
    fan_ins = _fan_ins(_ShiftedGather(), torch.zeros(2, 8))
    assert all(set(f) == set(range(8)) for f in fan_ins), fan_ins


def test_input_dependent_index_along_the_batch_axis_crosses_samples() -> None:
    """Indices computed from the input that pick rows of the batch make every output read every sample."""

    class PickRow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[(x[:, 0] > 0).long()]

    assert dependence(PickRow(), torch.tensor([[1.0, 2.0], [0.0, 3.0]])).crosses_samples


def test_input_dependent_gather_gives_exact_tables() -> None:
    """The tables of a data-dependent gather between quantizers equal the model on all 65,536 inputs."""
    import itertools

    import iotable
    from iotable import Domain
    from iotable.nn import Quantize

    domain = Domain.uniform(2, scale=0.5)
    model = nn.Sequential(Quantize(2, scale=0.5), _ShiftedGather(), Quantize(2, scale=0.5)).eval()
    net = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, 8))
    codes = torch.tensor(list(itertools.product(range(4), repeat=8)))
    x = torch.tensor(domain.values, dtype=torch.float32)[codes]
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))


class _ZeroTimes(nn.Module):
    """Multiplies ``f(x)`` by zero weights, elementwise (``form="mul"``) or as a matrix (``form="mm"``), then
    replaces NaN; ``f`` is a reciprocal (infinite at x = 0.5) or a finite function."""

    def __init__(self, form: str, finite: bool) -> None:
        super().__init__()
        self.form, self.finite = form, finite
        self.w = nn.Parameter(torch.tensor([[0.7, 0.0], [-0.4, 0.0], [0.0, 0.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2 + 1 if self.finite else 1 / (x - 0.5)
        if self.form == "mul":
            out = (y * self.w[:, 0]).sum(1, keepdim=True)
        else:
            out = y @ self.w[:, :1]
        return torch.nan_to_num(out, nan=1.0)


@pytest.mark.parametrize("form", ["mul", "mm"])
def test_a_zero_weight_keeps_a_dependence_through_a_value_that_may_be_infinite(form: str) -> None:
    """inf * 0 is NaN: a zero weight on 1 / (x - 0.5) keeps that input, where one on a finite value drops it."""
    assert _fan_ins(_ZeroTimes(form, finite=False), torch.rand(2, 3)) == [(0, 1, 2)]
    assert _fan_ins(_ZeroTimes(form, finite=True), torch.rand(2, 3)) == [(0, 1)]
    cleared = nn.Sequential(_Reciprocal(), _Masked())  # nan_to_num makes the value finite again: dropped
    assert _fan_ins(cleared, torch.rand(2, 3)) == [(0, 1)]


class _Reciprocal(nn.Module):
    """1 / (x - 0.5) with infinities and NaN replaced."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(1 / (x - 0.5), posinf=9.0, neginf=-9.0)


class _Masked(nn.Module):
    """A masked (LogicNets-style) sum of three inputs, the last masked out."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tensor([1.0, 1.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.mask).sum(1, keepdim=True)


class _Hidden(nn.Module):
    """Output 0 is gated on x0..x2 and on x4 == 0.5, which it reads only through inf * 0 then nan_to_num."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.7, -0.4, 0.3]))
        self.z = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.nan_to_num((1 / (x[:, 4:5] - 0.5)) * self.z, nan=1.0)
        gate = (x[:, 0:1] == 0.5).float() * (x[:, 1:2] == 1.0).float() * (x[:, 2:3] == 0.5).float()
        return torch.cat([(x[:, :3] * self.w).sum(1, keepdim=True) + hidden * gate, x[:, 3:4] * 0.5], 1)


def test_an_input_read_only_through_nan_is_tabulated_exactly() -> None:
    """A hidden output that reads x4 only through (1 / (x4 - 0.5)) * 0 then nan_to_num: the tables are exact."""
    domain = iotable.Domain.uniform(2, scale=0.5)
    model = nn.Sequential(Quantize(2, scale=0.5), _Hidden(), Quantize(2, scale=0.5)).eval()
    codes = torch.tensor(list(itertools.product(range(4), repeat=5)))
    x = torch.tensor(domain.values, dtype=torch.float32)[codes]
    net = iotable.precompute(model, input_domain=domain, example_input=x[:1])
    assert torch.equal(net.run(x), model(x))


class _Copied(nn.Module):
    """Reads its fifth input through a copy of ``x`` made by ``how`` (pickle, torch.save, or a clone)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.w = nn.Parameter(torch.tensor([0.7, -0.4, 0.3]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "pickle":
            t = pickle.loads(pickle.dumps(x))
        elif self.how == "save":
            buffer = io.BytesIO()
            torch.save(x, buffer)
            buffer.seek(0)
            t = torch.load(buffer)
        else:
            t = x.clone()
        gate = (x[:, 0:1] == 0.5).float() * (x[:, 1:2] == 1.0).float()
        return torch.cat([(x[:, :3] * self.w).sum(1, keepdim=True) + (t[:, 4:5] == 0.5).float() * gate, x[:, 3:4]], 1)


@pytest.mark.parametrize("how", ["pickle", "save"])
def test_a_serialized_copy_of_the_input_is_refused_by_module(how: str) -> None:
    """A forward that copies its input through pickle or torch.save is refused, naming the module and
    decompose(fan_in=...); the same forward with a clone is followed and tabulated exactly."""
    domain = iotable.Domain.uniform(2, scale=0.5)
    codes = torch.tensor(list(itertools.product(range(4), repeat=5)))
    x = torch.tensor(domain.values, dtype=torch.float32)[codes]
    model = nn.Sequential(Quantize(2, scale=0.5), _Copied(how), Quantize(2, scale=0.5)).eval()
    with pytest.raises(SpecError) as info:
        iotable.precompute(model, input_domain=domain, example_input=x[:1])
    message = str(info.value)
    assert "_Copied" in message and "pickle and torch.save" in message and "fan_in=" in message, message
    cloned = nn.Sequential(Quantize(2, scale=0.5), _Copied("clone"), Quantize(2, scale=0.5)).eval()
    net = iotable.precompute(cloned, input_domain=domain, example_input=x[:1])
    assert torch.equal(net.run(x), cloned(x))
