"""Tracing the field's models: shape checks in a forward, and refusals that name the submodule."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from iotable import Domain, ModelError, decompose, precompute, verify
from iotable.front.trace import trace
from iotable.nn import Quantize

BITS = Domain([0.0, 1.0])
U2 = Domain.uniform(2, scale=0.5)


def all_bit_vectors(n: int) -> torch.Tensor:
    """Every vector of ``n`` bits, one per row, as float32."""
    rows = torch.arange(2**n).unsqueeze(1)
    return ((rows >> torch.arange(n)) & 1).to(torch.float32)


# A DiffLogic-style network: logic gate layers, each neuron one of 16 two-input gates, read by a GroupSum.


class LogicLayer(nn.Module):
    """Each output is one of the 16 gates of two inputs, chosen (in eval mode) by the argmax of its weights."""

    def __init__(self, in_dim: int, out_dim: int, *, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weights = nn.Parameter(torch.randn(out_dim, 16, generator=g))
        pairs = torch.stack([torch.randperm(in_dim, generator=g)[:2] for _ in range(out_dim)], dim=1)
        self.register_buffer("indices", pairs)  # (2, out_dim): the two inputs of each gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] == self.in_dim, (x.shape, self.in_dim)
        a, b = x[..., self.indices[0]], x[..., self.indices[1]]
        gate = nn.functional.one_hot(self.weights.argmax(-1), 16).to(x.dtype)  # eval: the chosen gate
        ab = a * b
        ops = torch.stack(
            [
                torch.zeros_like(a), ab, a - ab, a, b - ab, b, a + b - 2 * ab, a + b - ab,
                1 - (a + b - ab), 1 - (a + b - 2 * ab), 1 - b, 1 - b + ab, 1 - a, 1 - a + ab, 1 - ab, torch.ones_like(a),
            ],
            dim=-1,
        )  # fmt: skip
        return (ops * gate).sum(-1)

    def fan_in(self) -> list[list[int]]:
        return self.indices.t().tolist()


class GroupSum(nn.Module):
    """Class scores: the sum of each of ``k`` equal groups of the last axis, divided by ``tau``."""

    def __init__(self, k: int, tau: float = 1.0) -> None:
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] % self.k == 0, (x.shape, self.k)
        return x.reshape(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(-1) / self.tau


def difflogic(*, decorated: bool = True) -> nn.Sequential:
    layers = [LogicLayer(8, 12, seed=0), LogicLayer(12, 6, seed=1)]
    if decorated:
        for layer in layers:
            decompose(layer, fan_in=layer.fan_in(), output_domain=BITS)
    return nn.Sequential(OrderedDict([("logic", nn.Sequential(*layers)), ("head", GroupSum(3, tau=2.0))])).eval()


# A DWN-style network: LUT layers whose inputs come from a mapping, then a GroupSum.


class LUTLayer(nn.Module):
    """Each output looks up its ``n`` mapped input bits in its own table of ``2**n`` learned values."""

    def __init__(self, input_size: int, output_size: int, n: int, *, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.input_size, self.output_size, self.n = input_size, output_size, n
        self.luts = nn.Parameter(torch.randn(output_size, 2**n, generator=g))
        mapping = torch.stack([torch.randperm(input_size, generator=g)[:n] for _ in range(output_size)])
        self.register_buffer("mapping", mapping.flatten())
        self.register_buffer("powers", 2 ** torch.arange(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2 and x.size(1) == self.input_size
        bits = x[:, self.mapping].view(x.size(0), self.output_size, self.n)
        address = (bits.long() * self.powers).sum(-1)
        return (self.luts.gather(1, address.t()).t() > 0).to(x.dtype)

    def fan_in(self) -> list[list[int]]:
        return self.mapping.view(self.output_size, self.n).tolist()


def dwn() -> nn.Sequential:
    layers = [LUTLayer(10, 12, 3, seed=2), LUTLayer(12, 8, 2, seed=3)]
    for layer in layers:
        decompose(layer, fan_in=layer.fan_in(), output_domain=BITS)
    return nn.Sequential(*layers, GroupSum(4)).eval()


class Regroup(nn.Module):
    """Checks static shapes, then regroups the last axis: a reshape the table network follows."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2 and x.shape[-1] % self.k == 0, f"expected (N, k * m), got {tuple(x.shape)}"
        if len(x.shape) != 2 or x.size(1) < self.k:
            raise ValueError("too few features")
        for axis in range(x.dim()):  # a loop over the axes: range() of a static size
            assert axis == 0 or x.size(axis) > 0  # size(0), the batch size, is never read
        return x.reshape(*x.shape[:-1], self.k, x.shape[-1] // self.k).flatten(1)


def test_difflogic_traces_through_shape_asserts():
    """DiffLogic's GroupSum asserts on its input's shape: the model traces, and GroupSum becomes a popcount (a
    sum node), equal to the model."""
    model = difflogic()
    traced = trace(model, host=frozenset(), example_input=torch.zeros(1, 8))
    assert any(n.op == "call_method" and n.target == "sum" for n in traced.graph.nodes)
    net = precompute(model, input_domain=BITS, example_input=torch.zeros(1, 8))
    assert [n.kind.value for n in net.graph.nodes][-2:] == ["sum", "output"]
    x = torch.randint(0, 2, (256, 8)).float()
    assert verify(model, net, x).agreement == 1.0


def test_difflogic_with_groupsum_on_host_is_exact():
    """DiffLogic's gate layers as tables and its GroupSum on the host: verify agrees on every input."""
    model = difflogic()
    net = precompute(model, input_domain=BITS, example_input=torch.zeros(1, 8), host=["head"])
    assert [n.name for n in net.graph.nodes_of("table")] == ["logic.0", "logic.1"]
    report = verify(model, net, all_bit_vectors(8))
    assert report.ok and report.samples == 256


def test_undecorated_difflogic_takes_its_domains_from_its_tables():
    """Undecorated LogicLayers are layers of the user's own (their units inferred); with no quantizer after them,
    their output domain is the {0, 1} their tables hold, and the network agrees with the model on every input."""
    model = difflogic(decorated=False)
    net = precompute(model, input_domain=BITS, example_input=torch.zeros(1, 8))
    assert [net[name].plan.output_domain for name in ("logic.0", "logic.1")] == [BITS, BITS]
    assert verify(model, net, all_bit_vectors(8)).agreement == 1.0


def test_dwn_with_groupsum_on_host_is_exact():
    """DWN's LUT layers (asserts on dim() and size(1)) as tables, its GroupSum on the host: exact."""
    model = dwn()
    net = precompute(model, input_domain=BITS, example_input=torch.zeros(1, 10), host=["2"])
    assert len(list(net.graph.nodes_of("table"))) == 2
    assert verify(model, net, all_bit_vectors(10)).ok


def test_shape_checks_keep_the_batch_axis():
    """A module that checks static shapes and reshapes with x.shape traces, and the network serves any batch."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Linear(6, 6), Quantize(2, scale=0.5), Regroup(3)).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 6))
    x = torch.randint(0, 4, (64, 6)) * 0.5
    assert net.run(x).shape == (64, 6)
    assert verify(model, net, x).ok


class BatchBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            return x * 2
        return x


class ValueBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


class Body(nn.Module):
    """A model whose untraceable part sits two levels down, in ``blocks.1``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Quantize(2, scale=0.5), inner, Quantize(2, scale=0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


@pytest.mark.parametrize(
    ("inner", "words"),
    [(BatchBranch(), "depends on the batch"), (ValueBranch(), "tensor data")],
)
def test_untraceable_control_flow_names_the_submodule(inner, words):
    """Branching on the batch size or on tensor values is refused, naming the submodule and its class."""
    with pytest.raises(ModelError) as info:
        precompute(Body(inner).eval(), input_domain=U2, example_input=torch.zeros(1, 4))
    message = str(info.value)
    assert f"module 'blocks.1' ({type(inner).__name__})" in message and words in message
    assert ("decompose" in message or "batch" in message) and "host=" in message


def test_a_failing_layer_is_named():
    """A layer that fails on the example is named by its qualified name and class, not the model's."""
    model = Body(nn.Linear(5, 4)).eval()
    with pytest.raises(ModelError, match=r"module 'blocks\.1' \(Linear\): running the traced model"):
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 4))


class Recurrent(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.quant, self.layer = Quantize(2, scale=0.5), layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.layer(self.quant(x))
        return out


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant, self.attn = Quantize(2, scale=0.5), nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        return self.attn(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize(
    ("model", "path", "cls", "why"),
    [
        (Recurrent(nn.LSTM(4, 4, batch_first=True)), "layer", "LSTM", "recurrent"),
        (Recurrent(nn.GRU(4, 4, batch_first=True)), "layer", "GRU", "recurrent"),
        (Recurrent(nn.RNN(4, 4, batch_first=True)), "layer", "RNN", "recurrent"),
        (Attention(), "attn", "MultiheadAttention", "attention"),
        (nn.Sequential(Quantize(2), nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)), "1", "Transformer", "att"),
        (nn.Sequential(nn.Embedding(4, 4), Quantize(2)), "0", "Embedding", "embedding"),
        (nn.Sequential(Quantize(2), nn.Embedding(4, 4)), "1", "Embedding", "LongTensor"),
        (nn.Sequential(Quantize(2), nn.EmbeddingBag(4, 4)), "1", "EmbeddingBag", "LongTensor"),
    ],
)
def test_sequence_layers_are_refused_with_the_reason(model, path, cls, why):
    """Recurrent, attention and embedding layers are refused by name, saying they are not supported and why."""
    with pytest.raises(ModelError) as info:
        precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 3, 4))
    message = str(info.value)
    assert f"module {path!r} ({cls}" in message and "not supported" in message and why in message
    assert "getitem" not in message and "FloatTensor" not in message


class Keyed(nn.Module):
    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.quant, self.out = Quantize(2, scale=0.5), Quantize(2, scale=0.5)
        self.layers = nn.ModuleDict({key: nn.Linear(4, 4)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.layers[self.key](self.quant(x)))


@pytest.mark.parametrize("key", ["a\nb", "tab\there", 'quote"d', "back\\slash"])
def test_odd_module_keys_are_refused(key):
    """A ModuleDict key torch.fx cannot write as code is refused by name, escaped, with the fix (no SyntaxError)."""
    with pytest.raises(ModelError) as info:
        precompute(Keyed(key).eval(), input_domain=U2, example_input=torch.zeros(1, 4))
    message = str(info.value)
    assert repr(key) in message and "rename the submodule" in message
    assert "ModuleDict" in message or not key.isprintable()  # an unprintable name: refused wherever it is
    assert "\n" not in message


def test_odd_sequential_keys_are_refused():
    """The same for a key of a plain Sequential, which is read without torch.fx's code."""
    inner = nn.Sequential(OrderedDict([("a\nb", nn.Linear(4, 4))]))
    model = nn.Sequential(Quantize(2, scale=0.5), inner, Quantize(2, scale=0.5)).eval()
    with pytest.raises(ModelError, match=r"the module '1\.a\\nb' has a name with the unprintable character"):
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 4))


def test_host_sequence_layer_is_still_run_by_torch():
    """An attention layer listed in host= is not refused: the host runs it with torch, as before."""
    encoder = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)
    model = nn.Sequential(Quantize(2, scale=0.5), encoder).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 3, 4), host=["1"])
    assert [n.name for n in net.graph.nodes_of("host")] == ["1"]
    traced = trace(model, host=frozenset({"1"}), example_input=torch.zeros(1, 3, 4))
    assert [n.target for n in traced.graph.nodes if n.op == "call_module"] == ["0", "1"]


class Block(nn.Module):
    """An undecorated block whose reshape reads its Linear's unquantized output (it holds a quantizer, so it is
    traced into rather than kept whole as a layer of the user's own)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.quant = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.quant(self.fc(x).view(-1, 2, 2))


class Sine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.quant(x))


def test_segment_refusals_name_the_module_of_the_node():
    """A refusal at a function call names the submodule it was traced in, or the model's own forward."""
    model = nn.Sequential(OrderedDict([("quant", Quantize(2, scale=0.5)), ("block", Block())])).eval()
    with pytest.raises(ModelError, match=r"view \(in module 'block', a Block\): a reshape of an unquantized"):
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 4))
    with pytest.raises(ModelError, match=r"sin \(in the forward of Sine, the model\): the function sin"):
        precompute(Sine().eval(), input_domain=U2, example_input=torch.zeros(1, 4))


def test_a_layer_failing_before_a_shape_check_is_named():
    """When the example fails in a layer before a shape check, the refusal names that layer, not the check."""
    model = nn.Sequential(Quantize(2, scale=0.5), nn.Linear(5, 6), Quantize(2, scale=0.5), Regroup(3)).eval()
    with pytest.raises(ModelError, match=r"module '1' \(Linear\) failed on it: RuntimeError"):
        precompute(model, input_domain=U2, example_input=torch.zeros(1, 4))
