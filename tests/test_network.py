"""Whole models: table networks equal the model bit for bit; the graph records windows, buffers and strides."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import prune

import iotable
from iotable import Domain, InputError, Layout, ModelError, NodeKind, TableNetwork, decompose, precompute, verify
from iotable.errors import GraphError, TableTooLargeError
from iotable.front.spec import PaddingMode
from iotable.graph.graph import Edge, ElementOrder, Graph, JoinMeta, Node
from iotable.nn import Quantize

U2 = Domain.uniform(2, scale=0.5)
S2 = Domain.uniform(2, signed=True)


def random_stats_(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give batch norms non-trivial running statistics, as after training."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
    return model.eval()


def sparse_linear(n_in: int, fan_in: list[list[int]]) -> nn.Linear:
    """A Linear whose weight is masked to ``fan_in`` and declared so."""
    layer = nn.Linear(n_in, len(fan_in))
    mask = torch.zeros(len(fan_in), n_in)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(layer, "weight", mask)
    return decompose(layer, fan_in=fan_in)


def random_inputs(domain: Domain, shape: tuple[int, ...], n: int = 64, seed: int = 1) -> torch.Tensor:
    codes = torch.randint(0, len(domain), (n, *shape), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(domain.values, dtype=torch.float32)[codes]


def assert_bit_exact(model: nn.Module, net: TableNetwork, x: torch.Tensor) -> None:
    """net.run equals the model's forward bit for bit, and verify() agrees."""
    with torch.no_grad():
        expected = model.eval()(x)
    got = net.run(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)
    report = verify(model, net, x)
    assert report.ok and report.samples == len(x) and report.mismatches == 0, str(report)


def mlp() -> nn.Sequential:
    rng = np.random.default_rng(0)
    fan1 = [sorted(rng.choice(12, 3, replace=False).tolist()) for _ in range(8)]
    fan2 = [sorted(rng.choice(8, 4, replace=False).tolist()) for _ in range(4)]
    return random_stats_(
        nn.Sequential(
            sparse_linear(12, fan1),
            nn.BatchNorm1d(8),
            nn.ReLU(),
            Quantize(2, scale=0.5),
            sparse_linear(8, fan2),
            nn.BatchNorm1d(4),
            Quantize(3, signed=True, scale=0.25),
        )
    )


def test_sparse_mlp_is_bit_exact():
    """A LogicNets-style MLP with sparse fan-in: tables, graph and runtime equal the model."""
    model = mlp()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    assert [n.kind for n in net.graph] == [NodeKind.INPUT, NodeKind.TABLE, NodeKind.TABLE, NodeKind.OUTPUT]
    assert list(net.layers) == ["0", "4"] and len(net.tables) == 12
    assert net["0"].tables[0].rows == 4**3
    index_map = net.graph["0"].meta.index_map
    np.testing.assert_array_equal(index_map[:, :3], [list(u.in_channels) for u in net["0"].plan.units])
    assert_bit_exact(model, net, random_inputs(U2, (12,), n=256))
    codes = net.run(random_inputs(U2, (12,)), return_codes=True)
    assert codes.dtype == torch.int64 and int(codes.max()) < 8


class ChannelsLast(nn.Module):
    """A convolution over channels-last tensors."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.movedim(self.conv(torch.movedim(x, -1, 1)), 1, -1)


def conv_model(rank: int, *, channels_last: bool, stride: int, dilation: int, padding: int, groups: int):
    """q -> conv -> bn -> q -> depthwise conv -> q, with the given geometry in the first conv."""
    conv = nn.Conv1d if rank == 1 else nn.Conv2d
    bn = nn.BatchNorm1d if rank == 1 else nn.BatchNorm2d
    kernel = 3 if rank == 1 else 2  # 2 channels x 2x2 x 2 bits = 16 address bits for grouped 2-D units
    first = conv(4, 4, kernel, stride=stride, dilation=dilation, padding=padding, groups=groups)
    second = conv(4, 4, 2, groups=4)
    if channels_last:
        layout = "NWC" if rank == 1 else "NHWC"
        first = decompose(
            ChannelsLast(first),
            layout=layout,
            groups=groups,
            kernel_size=kernel,
            stride=stride,
            dilation=dilation,
            padding=padding,
        )
        second = decompose(ChannelsLast(second), layout=layout, groups=4, kernel_size=2)
        return random_stats_(nn.Sequential(first, Quantize(2, signed=True, scale=0.5), second, Quantize(2, scale=0.5)))
    return random_stats_(
        nn.Sequential(first, bn(4), nn.ReLU(), Quantize(2, signed=True, scale=0.5), second, Quantize(2, scale=0.5))
    )


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("channels_last", [False, True], ids=["channels-first", "channels-last"])
@pytest.mark.parametrize(
    ("stride", "dilation", "padding", "groups"),
    [(1, 1, 0, 4), (2, 1, 1, 2), (1, 2, 1, 4), (2, 2, 0, 2)],
    ids=["depthwise", "stride2-pad1-groups", "dilation2-pad1-depthwise", "stride2-dilation2-groups"],
)
def test_convolutions_are_bit_exact(rank, channels_last, stride, dilation, padding, groups):
    """Conv1d and Conv2d with stride, dilation, padding on a signed domain, groups and depthwise, both layouts."""
    model = conv_model(
        rank, channels_last=channels_last, stride=stride, dilation=dilation, padding=padding, groups=groups
    )
    size = (9,) if rank == 1 else (7, 6)
    shape = (*size, 4) if channels_last else (4, *size)
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, *shape))
    kinds = [n.kind for n in net.graph]
    assert kinds.count(NodeKind.WINDOW) == 2 and kinds.count(NodeKind.PAD) == (1 if padding else 0)
    assert_bit_exact(model, net, random_inputs(S2, shape, n=48))


def test_padding_feeds_code_of_real_zero():
    """A pad node fills each channel with the code of real 0 of its domain, not code 0."""
    domain = Domain.uniform(3, signed=True)  # real 0 is code 4
    model = random_stats_(nn.Sequential(nn.Conv1d(2, 2, 3, padding=1, groups=2), Quantize(2, scale=0.5)))
    net = precompute(model, input_domain=domain, example_input=torch.zeros(1, 2, 5))
    pad = net.graph.nodes_of("pad")[0]
    assert pad.meta.pad_codes == (4, 4) and pad.meta.padding == ((1, 1),) and pad.meta.mode is PaddingMode.ZEROS
    index_map = pad.meta.index_map  # channel 1 copies input elements 5..9 between its two pad codes
    assert (index_map[:, [0, -1]] == -1).all() and index_map[1, 1:-1].tolist() == [5, 6, 7, 8, 9]
    assert_bit_exact(model, net, random_inputs(domain, (2, 5)))


def test_pointwise_conv_one_by_one_kernel():
    """1x1 kernels give a window of one position per output and tables of the channel fan-in."""
    model = random_stats_(nn.Sequential(nn.Conv2d(3, 5, 1), nn.BatchNorm2d(5), Quantize(2, signed=True, scale=0.5)))
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 3, 4, 4))
    window = net.graph.nodes_of("window")[0]
    assert window.meta.kernel == (1, 1) and window.shape == (4, 4, 3)
    assert [t.fan_in for t in net.tables] == [3] * 5
    assert_bit_exact(model, net, random_inputs(U2, (3, 4, 4)))


class Residual(nn.Module):
    """q0 -> conv -> q1 -> conv -> q2, then q3(q2 + q1): a skip connection joined by an add."""

    def __init__(self) -> None:
        super().__init__()
        self.q0 = Quantize(2, signed=True)
        self.conv1 = nn.Conv2d(2, 2, 3, padding=1, groups=2)
        self.q1 = Quantize(2, signed=True, scale=0.5)
        self.conv2 = nn.Conv2d(2, 2, 1)
        self.bn2 = nn.BatchNorm2d(2)
        self.q2 = Quantize(2, signed=True, scale=0.25)
        self.q3 = Quantize(3, signed=True, scale=0.25)

    def forward(self, x):
        a = self.q1(self.conv1(self.q0(x)))
        b = self.q2(self.bn2(self.conv2(a)))
        return self.q3(b + a)


def test_residual_add_is_a_join_and_a_table():
    """A residual add followed by a quantizer is a join of both operands and a fan-in-2 table per channel."""
    model = random_stats_(Residual())
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 5, 5))
    kinds = [n.kind for n in net.graph]
    assert NodeKind.DUPLICATE in kinds and NodeKind.JOIN in kinds
    join = net.graph.nodes_of("join")[0]
    assert join.shape == (4, 5, 5) and len(net.graph.inputs(join.name)) == 2 and join.meta.for_add
    assert all(t.fan_in == 2 for t in net["add"].tables)
    dup = net.graph.nodes_of("duplicate")[0]
    assert sorted(e.producer_port for e in net.graph.edges_from(dup.name)) == [0, 1]
    assert_bit_exact(model, net, random_inputs(S2, (2, 5, 5)))


class PoolFlattenHead(nn.Module):
    """conv -> q -> max-pool -> flatten -> sparse final layer -> q (or a float head on the host)."""

    def __init__(self, *, host_head: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 2, padding=1)
        self.q1 = Quantize(2, scale=0.5)
        self.pool = nn.MaxPool2d(2)
        rng = np.random.default_rng(3)
        fan = [sorted(rng.choice(27, 4, replace=False).tolist()) for _ in range(5)]
        self.fc = nn.Linear(27, 5) if host_head else sparse_linear(27, fan)
        self.q2 = nn.Identity() if host_head else Quantize(3, signed=True, scale=0.25)

    def forward(self, x):
        y = self.pool(self.q1(self.conv(x)))
        return self.q2(self.fc(torch.flatten(y, 1)))


def test_max_pool_flatten_into_final_layer():
    """Max-pool over codes, flatten, and a sparse final layer are bit exact."""
    model = PoolFlattenHead(host_head=False).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 1, 5, 5))
    kinds = [n.kind.value for n in net.graph]
    assert kinds == ["input", "pad", "window", "table", "pool", "reshape", "table", "output"]
    assert net.graph.nodes_of("reshape")[0].shape == (27,)
    assert_bit_exact(model, net, random_inputs(U2, (1, 5, 5), n=128))


def test_host_head_runs_with_torch_and_is_flagged():
    """A layer marked host= runs with torch on decoded values; the summary flags it."""
    model = PoolFlattenHead(host_head=True).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 1, 5, 5), host=["fc"])
    host = net.graph.nodes_of("host")
    # What follows a host node (here the head's nn.Identity) runs on the host too.
    assert [h.name for h in host] == ["fc", "q2"] and host[0].domain is None
    assert "host nodes (run with torch, not tabulated): fc, q2" in net.summary()
    assert_bit_exact(model, net, random_inputs(U2, (1, 5, 5)))


def test_unmarked_layer_too_large_names_host_option():
    """A layer too large to tabulate is an error that names host= as the way out."""
    model = nn.Sequential(Quantize(1), nn.Linear(40, 2), Quantize(1))
    with pytest.raises(TableTooLargeError, match=r"unit 0 reads 40 inputs.*pass host=\['1'\]"):
        precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 40))


def test_a_huge_table_size_is_printed_short():
    """A table of 2**8192 rows is named as 2**8192 with its order of magnitude, not as its 2,467 digits."""
    model = nn.Sequential(Quantize(2), nn.Linear(4096, 1), Quantize(1))
    with pytest.raises(TableTooLargeError, match=r"unit 0 reads 4096 inputs") as caught:
        precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 4096))
    message = str(caught.value)
    assert "a table of 2**8192 (≈1.1e2466) rows" in message
    assert len(message) < 1000 and re.search(r"[0-9]{16}", message) is None


def test_runtime_never_calls_a_layer_forward():
    """net.run evaluates from tables alone: no forward of any tabulated module runs."""
    model = mlp()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    calls = []
    for m in model.modules():
        m.register_forward_hook(lambda *args: calls.append(1))
    net.run(random_inputs(U2, (12,)))
    assert calls == []


@pytest.mark.parametrize(
    ("kernel", "dilation", "padding", "stride", "size", "channels"),
    [
        ((3, 3), (1, 1), (1, 1), (1, 1), (8, 8), 2),
        ((3, 3), (2, 2), (0, 0), (2, 2), (9, 11), 3),
        ((2, 3), (1, 2), (1, 0), (2, 1), (6, 7), 4),
        ((1, 1), (1, 1), (0, 0), (1, 1), (5, 5), 3),
    ],
)
def test_window_buffer_depth_and_stride_2d(kernel, dilation, padding, stride, size, channels):
    """Window edges hold ((k_h-1)*d_h*W + (k_w-1)*d_w + 1) * C elements, W the padded width, and the stride."""
    conv = nn.Conv2d(channels, channels, kernel, stride=stride, dilation=dilation, padding=padding, groups=channels)
    model = nn.Sequential(conv, Quantize(1)).eval()
    net = precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, channels, *size))
    window = net.graph.nodes_of("window")[0]
    (edge,) = net.graph.edges_into(window.name)
    width = size[1] + 2 * padding[1]
    expected = ((kernel[0] - 1) * dilation[0] * width + (kernel[1] - 1) * dilation[1] + 1) * channels
    assert window.meta.buffer_depth == expected and edge.shape[-1] == width
    assert window.meta.stride == stride and window.meta.element_order is ElementOrder.CHANNEL_MAJOR
    out = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, d, p in zip(size, kernel, stride, dilation, padding)]
    assert window.shape == (*out, channels * kernel[0] * kernel[1])


@pytest.mark.parametrize(("kernel", "dilation", "stride", "channels"), [(3, 1, 1, 2), (3, 2, 2, 4), (5, 3, 1, 1)])
def test_window_buffer_depth_1d(kernel, dilation, stride, channels):
    """1-D windows buffer ((k-1)*d + 1) * C elements."""
    conv = nn.Conv1d(channels, channels, kernel, stride=stride, dilation=dilation, groups=channels)
    model = nn.Sequential(conv, Quantize(1)).eval()
    net = precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, channels, 20))
    window = net.graph.nodes_of("window")[0]
    assert window.meta.buffer_depth == ((kernel - 1) * dilation + 1) * channels
    assert window.meta.stride == (stride,)


def test_channels_last_window_is_kernel_major():
    """Channels-last windows list kernel positions first, then channels, as the unit input order says."""
    model = conv_model(2, channels_last=True, stride=1, dilation=1, padding=0, groups=4)
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 5, 5, 4))
    window = net.graph.nodes_of("window")[0]
    assert window.meta.element_order is ElementOrder.KERNEL_MAJOR
    index_map = net.graph.nodes_of("table")[0].meta.index_map
    # Unit 0 reads channel 0 at the 4 kernel positions: window elements 0, 4, 8, 12 (kernel-major, C = 4).
    assert index_map[0].tolist() == [4 * k for k in range(4)]


def test_summary_and_dot_export():
    """The summary lists kind, name, shape, units, fan-in, bits, rows, buffer, stride and the dead tables; DOT names
    every node."""
    model = conv_model(2, channels_last=False, stride=2, dilation=1, padding=1, groups=2)
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 4, 6, 6))
    text = net.summary()
    header = text.splitlines()[0].split()
    assert header == [
        "kind",
        "name",
        "shape",
        "units",
        "fan_in",
        "bits",
        "rows",
        "buffer",
        "stride",
        "dead",
        "estimate",
        "registers",
    ]
    assert "(2, 2)" in text and "dead: 0 tables" in text and f"{sum(t.rows for t in net.tables)} rows" in text
    dot = net.graph.to_dot()
    assert dot.startswith("digraph iotable {") and all(f'"{n.name}"' in dot for n in net.graph)


def small_graph() -> Graph:
    net = precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12))
    return net.graph


def test_check_rejects_wrong_shape_on_an_edge():
    """check() names the edge whose shape disagrees with its producer."""
    graph = small_graph()
    graph = Graph(graph.nodes, (dataclasses.replace(graph.edges[0], shape=(13,)), *graph.edges[1:]))
    with pytest.raises(
        GraphError, match=r"edge 'input' -> '0' \(port 0\) carries shape \(13,\), but 'input' produces \(12,\)"
    ):
        graph.check()


def test_check_rejects_an_undriven_unit_input():
    """check() names the table, unit and input that no element drives."""
    graph = small_graph()
    index_map = np.array(graph["4"].meta.index_map)
    index_map[2, 1] = -1
    graph = graph.replace(
        dataclasses.replace(graph["4"], meta=dataclasses.replace(graph["4"].meta, index_map=index_map))
    )
    with pytest.raises(GraphError, match=r"table '4' unit 2 input 1 is not driven"):
        graph.check()


def test_check_rejects_a_cycle():
    """check() rejects a node that reads a later node (a cycle or a broken order)."""
    nodes = [
        Node("in", NodeKind.INPUT, (2,), Layout.NC, U2),
        Node("a", NodeKind.JOIN, (2,), Layout.NC, U2, JoinMeta()),
        Node("b", NodeKind.RESHAPE, (2,), Layout.NC, U2),
        Node("out", NodeKind.OUTPUT, (2,), Layout.NC, U2),
    ]
    edges = [Edge(p, 0, c, port, (2,), Layout.NC, U2) for p, c, port in (("b", "a", 0), ("a", "b", 0), ("a", "out", 0))]
    with pytest.raises(GraphError, match="'a' reads 'b', which comes at or after it: the graph has a cycle or is not"):
        Graph(nodes, edges).check()


def test_check_rejects_duplicate_names_and_missing_edges():
    """check() rejects reused names and ports no edge drives."""
    graph = Graph([Node("a", NodeKind.INPUT, (2,), None, U2), Node("a", NodeKind.OUTPUT, (2,), None, U2)])
    with pytest.raises(GraphError, match="used twice"):
        graph.check()
    graph = Graph([Node("a", NodeKind.INPUT, (2,), Layout.NC, U2), Node("b", NodeKind.OUTPUT, (2,), Layout.NC, U2)])
    with pytest.raises(GraphError, match=r"output node 'b': edges drive its input port\(s\) \[\]; a output node reads"):
        graph.check()


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = Quantize(1)

    def forward(self, x):
        if x.sum() > 0:
            return self.q(x)
        return self.q(-x)


def test_untraceable_model_says_why_and_what_to_do():
    """Data-dependent control flow is reported with the fix: decorate the block as one unit."""
    with pytest.raises(ModelError, match=r"cannot trace DataDependent with torch.fx.*decorate the block"):
        precompute(DataDependent(), input_domain=Domain.uniform(1), example_input=torch.zeros(1, 3))


def test_two_layers_between_quantizers_is_an_error():
    """Two mixing layers with no quantizer between them are reported with the fixes."""
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2), Quantize(1))
    with pytest.raises(ModelError, match=r"0 and 1 sit between the same pair of quantizers.*QuantIdentity\) after 0"):
        precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 3))


@pytest.mark.parametrize(
    ("x", "kwargs", "error", "words"),
    [
        (torch.zeros(2, 11), {}, InputError, r"expected a batch of shape \(N, 12\), received \(2, 11\)"),
        ([[0.0] * 12], {}, InputError, "expected a tensor or array"),
        (torch.full((2, 12), 0.25), {}, iotable.errors.DomainError, "value 0.25 at index"),
        (torch.full((2, 12), float("nan")), {}, iotable.errors.DomainError, "nan"),
        (torch.full((2, 12), 4), {"codes": True}, InputError, r"code 4 at index \(0, 0\) is outside 0\.\.3"),
        (torch.zeros(2, 12), {"codes": True}, InputError, "codes must be an integer tensor"),
    ],
)
def test_run_rejects_bad_inputs(x, kwargs, error, words):
    """Wrong shapes, values outside the domain, NaN, codes out of range and wrong dtypes are clear errors."""
    net = precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12))
    with pytest.raises(error, match=words):
        net.run(x, **kwargs)


def test_run_accepts_codes_and_arrays():
    """Inputs may be codes or numpy arrays of values; both give the same output."""
    model = mlp()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    x = random_inputs(U2, (12,))
    codes = torch.as_tensor(U2.encode(x).astype(np.int64))
    assert torch.equal(net.run(codes, codes=True), net.run(x.numpy()))


def test_run_takes_sparse_and_bfloat16_batches_as_their_values():
    """A sparse or bfloat16 batch runs as the dense float32 batch of the same values."""
    net = precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12))
    x = random_inputs(U2, (12,))
    expected = net.run(x)
    assert torch.equal(net.run(x.to_sparse()), expected) and torch.equal(net.run(x.to(torch.bfloat16)), expected)
    codes = net.encode_input(x)
    assert torch.equal(net.run(codes.to_sparse(), codes=True), expected)


def test_run_takes_a_batch_that_requires_grad_as_its_values():
    """A batch that requires a gradient (a training loop's tensor) runs as its values, few samples or many."""
    model = mlp()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    x = random_inputs(U2, (12,))
    for batch in (x[:2], x):
        tracked = batch.clone().requires_grad_(True)
        assert torch.equal(net.run(tracked), net.run(batch))
        assert verify(model, net, tracked).ok


def test_verify_reports_the_first_mismatch():
    """When a table is wrong, verify names the node, unit, output element and the unit's input codes."""
    model = mlp()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 12))
    with torch.no_grad():
        model[4].bias.add_(10.0)  # the model changes after precompute: its second layer now disagrees
    report = verify(model, net, random_inputs(U2, (12,)))
    assert not report.ok and report.mismatches > 0
    assert report.first["node"] == "4" and report.first["unit"] is not None
    assert len(report.first["input_codes"]) == net["4"].plan.units[report.first["unit"]].fan_in


class Branches(nn.Module):
    """Two quantized branches concatenated along channels, then a pointwise conv over both."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(2, 2, 3, padding=1, groups=2)
        self.qa = Quantize(2, scale=0.5)
        self.b = nn.Conv1d(2, 1, 1)
        self.qb = Quantize(1)
        self.mix = nn.Conv1d(3, 2, 1)
        self.q = Quantize(2, signed=True, scale=0.5)

    def forward(self, x):
        y = torch.cat([self.qa(self.a(x)), self.qb(self.b(x))], dim=1)
        return self.q(self.mix(y))


def test_concat_join_with_per_channel_domains():
    """A concat of differently quantized branches is a join whose channels keep their own domains."""
    model = random_stats_(Branches())
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 6))
    join = net.graph.nodes_of("join")[0]
    assert join.meta.op == "concat" and join.domain == (U2, U2, Domain.uniform(1))
    assert [t.rows for t in net["mix"].tables] == [4 * 4 * 2] * 2
    assert_bit_exact(model, net, random_inputs(S2, (2, 6)))


class Functional(nn.Module):
    """A layer, then an activation written as a function call, then a quantizer."""

    def __init__(self, activation) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.q = Quantize(2, scale=0.5)
        self.activation = activation

    def forward(self, x):
        return self.q(self.activation(self.fc(x)))


def test_elementwise_functions_fuse_like_modules():
    """torch.relu / F.relu / Tensor.tanh calls fuse into the preceding layer's table like their modules."""
    for activation in (torch.relu, nn.functional.relu, lambda t: t.tanh()):
        model = Functional(activation).eval()
        net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 2))
        assert list(net.layers) == ["fc"]
        assert_bit_exact(model, net, random_inputs(U2, (2,)))


def test_unsupported_function_between_tables():
    """A torch function with no table meaning between layers names the module to use instead."""
    with pytest.raises(
        ModelError, match=r"the function sin is not supported between tables .* or list the layer in host="
    ):
        precompute(Functional(torch.sin), input_domain=Domain.uniform(1), example_input=torch.zeros(1, 2))
