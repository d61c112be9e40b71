"""The runtime's fast kernels: equal to straightforward references on random networks, chunked or not.

Speed itself is measured in ``benchmarks/``; these tests pin down that the fast paths (feature-major table
kernels, narrow code dtypes, chunked evaluation, float addresses, arithmetic input encoding) change nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils import prune

import iotable
import iotable.runtime.runtime as runtime_module
import iotable.runtime.table as table_module
from iotable import Domain, NodeKind, TableNetwork, decompose, observe, precompute, verify
from iotable.errors import DomainError, MissingRowError
from iotable.front.spec import Layout
from iotable.graph.graph import Node
from iotable.nn import Quantize
from iotable.runtime.codes import Grid
from iotable.runtime.runtime import InputEncoder, Runtime

from .strategies import domains
from .test_network import S2, U2, PoolFlattenHead, Residual, conv_model, random_inputs, random_stats_

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

quantizers = st.fixed_dictionaries(
    {
        "bits": st.integers(1, 3),
        "signed": st.booleans(),
        "scale": st.sampled_from([0.25, 0.5, 1.0]),
    }
)


@st.composite
def sparse_layers(draw, n_in: int):
    """(fan_in, fan_out) of a sparse layer over ``n_in`` inputs: outputs shuffled among units of 1-3 outputs."""
    outputs = draw(st.permutations(range(draw(st.integers(1, 5)))))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(outputs) - 1)), max_size=len(outputs) - 1)))
    fan_out = [list(outputs[a:b]) for a, b in zip([0, *cuts], [*cuts, len(outputs)]) if a < b]
    unit = st.lists(st.integers(0, n_in - 1), min_size=1, max_size=3, unique=True)
    return draw(st.lists(unit, min_size=len(fan_out), max_size=len(fan_out))), fan_out


def masked_linear(n_in: int, fan_in: list[list[int]], fan_out: list[list[int]], seed: int) -> nn.Module:
    """A Linear whose outputs read only their unit's inputs, declared unit by unit."""
    torch.manual_seed(seed)
    layer = nn.Linear(n_in, sum(len(o) for o in fan_out))
    mask = torch.zeros(layer.out_features, n_in)
    for inputs, outputs in zip(fan_in, fan_out):
        for j in outputs:
            mask[j, inputs] = 1
    prune.custom_from_mask(layer, "weight", mask)
    return decompose(layer, fan_in=fan_in, fan_out=fan_out)


def reference_codes(net: TableNetwork, codes: np.ndarray) -> np.ndarray:
    """Output of an MLP network unit by unit through ``IOTable.lookup`` (raises on a missing row, as it does)."""
    env = {net.input_node.name: codes.reshape(len(codes), -1)}
    for node in net.graph:
        if node.kind is NodeKind.TABLE:
            x = env[net.graph.inputs(node.name)[0]]
            index_map = node.meta.index_map
            layer = net[node.meta.layer]
            out = np.zeros((len(codes), node.shape[0]), dtype=np.int64 if node.domain is not None else np.float64)
            for unit, table in zip(layer.plan.units, layer.tables):
                out[:, list(unit.out_channels)] = table.lookup(x[:, index_map[unit.index, : unit.fan_in]])
            env[node.name] = out
        elif node.kind is not NodeKind.INPUT:
            env[node.name] = env[net.graph.inputs(node.name)[0]]
    return env[net.output_node.name]


def outcome(run) -> tuple[str, object]:
    """``("ok", output)`` or ``("missing", message)`` of a run."""
    try:
        return "ok", run()
    except MissingRowError as exc:
        return "missing", str(exc)


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Evaluate graphs in chunks of one sample."""
    monkeypatch.setattr(runtime_module, "_CHUNK_BUDGET", 1)


@FAST
@given(data=st.data())
def test_random_mlps_equal_reference_lookups(data):
    """Random MLPs (per-channel input domains, shuffled multi-output units, partial tables, raw outputs) give
    the reference lookups' codes, whole-batch and chunked, by dense and sparse address products, and the same
    missing-row error every way."""
    n_in = data.draw(st.integers(2, 5))
    per_channel = data.draw(st.booleans())
    input_domain = [data.draw(domains) for _ in range(n_in)] if per_channel else data.draw(domains)
    fan_in1, fan_out1 = data.draw(sparse_layers(n_in))
    hidden = sum(len(o) for o in fan_out1)
    fan_in2, fan_out2 = data.draw(sparse_layers(hidden))
    raw = data.draw(st.booleans())
    layers = [masked_linear(n_in, fan_in1, fan_out1, 0), Quantize(**data.draw(quantizers))]
    layers += [masked_linear(hidden, fan_in2, fan_out2, 1)] + ([] if raw else [Quantize(**data.draw(quantizers))])
    net = precompute(nn.Sequential(*layers).eval(), input_domain=input_domain, example_input=torch.zeros(1, n_in))
    radices = [len(d) for d in net.input_node.channel_domains()]
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    codes = torch.stack([torch.randint(0, r, (40,), generator=gen) for r in radices], dim=1)
    restrict = data.draw(st.sampled_from([None, "no default", "zero"]))
    if restrict is not None and not raw:
        seen = observe(net, codes[:10], codes=True)
        net = net.restrict(seen, default=None if restrict == "no default" else "zero")

    def run() -> torch.Tensor:
        return net.run(codes, codes=True, return_codes=not raw)

    kind, got = outcome(run)
    try:
        expected = reference_codes(net, codes.numpy())
    except MissingRowError:
        assert kind == "missing"
    else:
        assert kind == "ok"
        assert got.dtype == (torch.float32 if raw else torch.int64) and got.is_contiguous()
        np.testing.assert_array_equal(got.numpy(), expected.astype(got.numpy().dtype))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime_module, "_CHUNK_BUDGET", 1)
        chunked_kind, chunked = outcome(run)
    assert chunked_kind == kind
    assert torch.equal(chunked, got) if kind == "ok" else chunked == got
    for density in (0.0, 1.0):  # every layer's addresses by a dense, then by a sparse matrix product
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(table_module, "_SPARSE_DENSITY", density)
            other = Runtime(net.graph, net.layers)
        assert all(k._sparse == bool(density) for k in other._kernels.values() if hasattr(k, "_sparse"))
        other_kind, other_out = outcome(lambda: other.run(codes)[0])  # noqa: B023 (called at once)
        assert other_kind == kind
        assert torch.equal(other_out, got) if kind == "ok" else other_out == got


@pytest.mark.usefixtures("tiny_chunks")
@pytest.mark.parametrize(
    "build",
    [
        lambda: (conv_model(2, channels_last=True, stride=2, dilation=1, padding=1, groups=2), (7, 6, 4), S2),
        lambda: (conv_model(1, channels_last=False, stride=1, dilation=2, padding=1, groups=4), (4, 9), S2),
        lambda: (random_stats_(Residual()), (2, 5, 5), S2),
        lambda: (PoolFlattenHead(host_head=False).eval(), (1, 5, 5), U2),
    ],
    ids=["conv2d-channels-last", "conv1d-dilated", "residual-join", "pool-flatten-head"],
)
def test_chunked_spatial_networks_equal_the_model(build):
    """Pads, windows, joins, pools and a flatten into a feature-major head, one sample per chunk: bit exact."""
    model, shape, domain = build()
    net = precompute(model, input_domain=domain, example_input=torch.zeros(1, *shape))
    x = random_inputs(domain, shape, n=24)
    with torch.no_grad():
        expected = model(x)
    assert net.runtime._chunk(len(x)) == 1
    assert torch.equal(net.run(x), expected)
    assert iotable.verify(model, net, x).ok


def test_chunked_missing_row_is_reported_as_by_a_whole_batch():
    """With chunks, the reported don't-care hit is still the whole batch's first: layer by layer, then sample."""
    identity = nn.Linear(2, 2)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(2))
        identity.bias.zero_()
    model = nn.Sequential(
        decompose(identity, fan_in=[[0], [1]]), Quantize(2, scale=0.5), nn.Linear(2, 1), Quantize(2)
    ).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 2))
    small = net.restrict(observe(net, torch.tensor([[0, 0], [1, 1]]), codes=True))
    codes = torch.zeros(8, 2, dtype=torch.int64)
    codes[2] = torch.tensor([0, 1])  # passes layer 0, then reaches an unseen row of layer 2
    codes[5] = torch.tensor([3, 0])  # reaches an unseen row of layer 0
    with pytest.raises(MissingRowError) as whole:
        small.run(codes, codes=True)
    assert "0: unit 0, sample 5: input codes (3,)" in str(whole.value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime_module, "_CHUNK_BUDGET", 1)
        with pytest.raises(MissingRowError) as chunked:
            small.run(codes, codes=True)
    assert str(chunked.value) == str(whole.value)


@pytest.mark.parametrize("channels_last", [False, True], ids=["channels-first", "channels-last"])
def test_spatial_missing_row_is_the_first_lookup_a_sweep_meets(channels_last):
    """A restricted conv network names the first (sample, position, unit) that reaches a don't-care row, with
    that unit's input codes, whole-batch and chunked; the rows it kept still give the dense network's output."""
    model = conv_model(2, channels_last=channels_last, stride=1, dilation=1, padding=1, groups=2)
    shape = (7, 6, 4) if channels_last else (4, 7, 6)
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, *shape))
    x = random_inputs(S2, shape, n=24)
    small = net.restrict(observe(net, x[:4]))
    # Channels 0-1 (the units of group 0) repeat an observed sample except in sample 20, so the first
    # missing lookup of a sample-by-sample sweep (group 1, from sample 4) is not the lowest unit's first.
    group0 = (Ellipsis, slice(0, 2)) if channels_last else (slice(None), slice(0, 2))
    x[4:20][group0] = x[0:1][group0]
    x[21:][group0] = x[0:1][group0]
    assert torch.equal(small.run(x[:4]), net.run(x[:4]))
    first = next(node for node in net.graph if node.kind is NodeKind.TABLE)
    _, env = net.runtime.run(net.encode_input(x), capture=True)
    window = env[net.graph.inputs(first.name)[0]]
    vectors = window.reshape(len(x), -1, window.shape[-1]).numpy()  # (N, positions, vector)
    index_map = first.meta.index_map
    layer = small[first.meta.layer]
    missing = []
    for unit, table in zip(layer.plan.units, layer.tables):
        inputs = vectors[:, :, index_map[unit.index, : unit.fan_in]]
        addresses = table.address(inputs.reshape(-1, unit.fan_in)).reshape(len(x), -1)
        for sample, position in np.argwhere(~np.isin(addresses, table.addresses)):
            missing.append((int(sample), int(position), unit.index, tuple(int(c) for c in inputs[sample, position])))
    sample, position, unit, codes = min(missing)
    group1 = {u.index for u in layer.plan.units if min(u.in_channels) >= 2}
    assert sample < 20 and unit in group1 and any(m[2] not in group1 for m in missing)
    words = f"{first.name}: unit {unit} at position {position}, sample {sample}: input codes {codes} hit"
    with pytest.raises(MissingRowError) as whole:
        small.run(x)
    assert words in str(whole.value) and f"{len(missing)} lookup(s)" in str(whole.value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime_module, "_CHUNK_BUDGET", 1)
        with pytest.raises(MissingRowError) as chunked:
            small.run(x)
    assert str(chunked.value) == str(whole.value)


def test_float64_addresses_beyond_the_float32_bound(monkeypatch):
    """A layer with more rows than float32 adds exactly forms its addresses in float64, with the same result."""
    model = nn.Sequential(masked_linear(6, [[0, 1, 2], [3, 4, 5]], [[1], [0]], 0), Quantize(3, signed=True))
    net = precompute(model.eval(), input_domain=Domain.uniform(3), example_input=torch.zeros(1, 6))
    codes = torch.randint(0, 8, (50, 6), generator=torch.Generator().manual_seed(0))
    expected = net.run(codes, codes=True, return_codes=True)
    assert net.runtime._kernels["0"].matrix.dtype == torch.float32
    monkeypatch.setattr(table_module, "FLOAT32_EXACT", 2**9 - 1)  # below this layer's 2 * 2**9 rows
    wide = Runtime(net.graph, net.layers)
    assert wide._kernels["0"].matrix.dtype == torch.float64
    assert torch.equal(wide.run(codes)[0], expected)


def test_narrow_code_dtypes_and_exact_codes_in_and_out():
    """Tables store codes in the smallest dtype of their domain; runs still return int64 codes."""
    model = PoolFlattenHead(host_head=False).eval()
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 1, 5, 5))
    kernels = [net.runtime._kernels[n.name] for n in net.graph.nodes_of(NodeKind.TABLE)]
    assert [k.flat.dtype for k in kernels] == [torch.uint8, torch.uint8]
    out = net.run(random_inputs(U2, (1, 5, 5)), return_codes=True)
    assert out.dtype == torch.int64 and out.is_contiguous()
    _, env = net.runtime.run(net.encode_input(random_inputs(U2, (1, 5, 5))), capture=True)
    assert all(env[n.name].dtype == torch.int64 for n in net.graph if n.domain is not None)


# -- input encoding ---------------------------------------------------------------------------------------

grid_domains = st.one_of(
    st.builds(
        Domain.uniform,
        st.integers(1, 8),
        signed=st.booleans(),
        narrow=st.booleans(),
        scale=st.sampled_from([1.0, 0.5, 0.1, 1 / 3, 2.5, 1e-3, 7.0]),
        zero_point=st.sampled_from([0.0, 0.5, -3.0, 2.25, 1000.0]),
    ).filter(lambda d: len(d) > 1),
    st.sampled_from([Domain.values([-1, 1]), Domain.values([0, 0.1, 0.5]), Domain.values([2.0]), Domain.uniform(1)]),
)


def input_node(domain: Domain | tuple[Domain, ...], shape: tuple[int, ...], layout: Layout) -> Node:
    return Node("input", NodeKind.INPUT, shape, layout, domain)


def exact_codes(node: Node, x: torch.Tensor) -> np.ndarray | None:
    """Codes by ``Domain.encode`` channel by channel, or ``None`` where it raises."""
    axis = x.dim() - 1 if node.layout.channels_last else 1
    x = x.to(torch.float64).numpy()
    out = np.zeros(x.shape, dtype=np.int64)
    try:
        for c, d in enumerate(node.channel_domains()):
            index = (slice(None),) * axis + (c,)
            out[index] = d.encode(x[index])
    except DomainError:
        return None
    return out


@st.composite
def near_values(draw, domains: list[Domain], n: int):
    """Values per channel: domain values, some nudged by one fraction of the tolerance, maybe a non-number.

    One fraction per batch (a batch with any value far off falls to the exact path as a whole, which would
    hide how the arithmetic path decides values near the tolerance).
    """
    fraction = draw(st.sampled_from([0.0, 0.3, 0.999, 1.0, 1.001, 3.0]))
    columns = []
    for d in domains:
        codes = np.asarray(draw(st.lists(st.integers(0, len(d) - 1), min_size=n, max_size=n)))
        nudges = np.asarray(draw(st.lists(st.sampled_from([0.0, fraction, -fraction]), min_size=n, max_size=n)))
        columns.append(d.values[codes] + nudges * d._tolerance)
    values = np.stack(columns, axis=1)
    special = draw(st.sampled_from([None, None, np.nan, np.inf, -np.inf, 1e30]))
    if special is not None:
        values[draw(st.integers(0, n - 1)), 0] = special
    return values


@settings(max_examples=300, deadline=None)  # cheap examples; values near the tolerance need many
@given(data=st.data(), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_value_encoding_equals_domain_encode(data, dtype):
    """Arithmetic encoding gives Domain.encode's codes or, for a value off the domain, its error."""
    per_channel = data.draw(st.booleans())
    chosen = [data.draw(grid_domains) for _ in range(3)] if per_channel else [data.draw(grid_domains)] * 3
    node = input_node(tuple(chosen) if per_channel else chosen[0], (3,), Layout.NC)
    x = torch.as_tensor(data.draw(near_values(chosen, 16)), dtype=dtype)
    expected = exact_codes(node, x)
    encoder = InputEncoder(node)
    if expected is None:
        with pytest.raises(DomainError, match="input"):
            encoder(x, codes=False, input_shape=(3,))
    else:
        got = encoder(x, codes=False, input_shape=(3,))
        np.testing.assert_array_equal(got.to(torch.int64).numpy(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_value_encoding_takes_the_arithmetic_path(dtype):
    """Exact domain values of uniform per-channel domains (channels last) are decided without Domain.encode."""
    chosen = (Domain.uniform(2, signed=True), Domain.uniform(3, scale=1.0), Domain.uniform(1, zero_point=1))
    node = input_node(chosen, (4, 3), Layout.NWC)
    codes = torch.stack([torch.randint(0, len(d), (5, 4)) for d in chosen], dim=-1)
    x = torch.stack([torch.tensor(d.values)[codes[..., c]] for c, d in enumerate(chosen)], dim=-1).to(dtype)
    grid = Grid.of(chosen, torch.float64 if dtype == torch.int64 else dtype)
    assert grid is not None and grid.encode(x.to(torch.float64) if dtype == torch.int64 else x, 2) is not None
    got = InputEncoder(node)(x, codes=False, input_shape=(4, 3))
    assert got.dtype == torch.float32 and torch.equal(got.to(torch.int64), codes)


def test_value_encoding_of_an_uneven_domain_searches_its_values():
    """A domain off any grid has no arithmetic path; Domain.encode decides its values and errors."""
    domain = Domain.values([0.0, 0.1, 0.5])
    assert Grid.of((domain,), torch.float32) is None
    encoder = InputEncoder(input_node(domain, (2,), Layout.NC))
    got = encoder(torch.tensor([[0.5, 0.1]]), codes=False, input_shape=(2,))
    assert got.tolist() == [[2, 1]]
    with pytest.raises(DomainError, match=r"input values must belong to the input domain: value 0\.3"):
        encoder(torch.tensor([[0.3, 0.1]]), codes=False, input_shape=(2,))


# -- fused windows, small batches ------------------------------------------------------------------------------


def run_both_ways(net: TableNetwork, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The output codes of a run with fused windows (and, for a few samples, the small-batch kernels), and of a
    run of every node's own kernel (what a capturing run uses)."""
    quantized = net.output_node.domain is not None
    fused = net.run(codes, codes=True, return_codes=quantized)
    out, _ = net.runtime.run(net.encode_input(codes, codes=True), capture=True, values=not quantized)
    return fused, out


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("channels_last", [False, True], ids=["channels-first", "channels-last"])
@pytest.mark.parametrize(
    ("stride", "dilation", "padding", "groups"),
    [(1, 1, 0, 4), (2, 1, 1, 2), (1, 2, 1, 4), (2, 2, 0, 2)],
    ids=["depthwise", "stride2-pad1-groups", "dilation2-pad1-depthwise", "stride2-dilation2-groups"],
)
def test_fused_windows_equal_every_node_run_at_every_batch(rank, channels_last, stride, dilation, padding, groups):
    """Addresses as convolutions, products or gathered windows, for 1 to 70 samples: the unfused run's codes."""
    model = conv_model(
        rank, channels_last=channels_last, stride=stride, dilation=dilation, padding=padding, groups=groups
    )
    size = (9,) if rank == 1 else (7, 6)
    shape = (*size, 4) if channels_last else (4, *size)
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, *shape))
    for n in (1, 2, 3, 16, 17, 70):
        x = random_inputs(S2, shape, n=n, seed=n)
        fused, unfused = run_both_ways(net, net.encode_input(x))
        assert torch.equal(fused, unfused), n
        assert torch.equal(net.run(x), model(x).detach()), n


def test_units_of_several_outputs_in_fused_windows():
    """Spatial units that write two channels each (a grouped convolution declared by its groups) stay exact."""
    conv = decompose(nn.Conv2d(4, 4, 2, groups=2, padding=1), groups=2)  # 2 units of 2 outputs each
    model = random_stats_(nn.Sequential(Quantize(2, signed=True), conv, nn.BatchNorm2d(4), Quantize(2, scale=0.5)))
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 4, 5, 5))
    assert 2 in {t.fan_out for t in net.tables}
    for n in (1, 2, 16, 40):
        x = random_inputs(S2, (4, 5, 5), n=n, seed=n)
        fused, unfused = run_both_ways(net, net.encode_input(x))
        assert torch.equal(fused, unfused)
        assert torch.equal(net.run(x), model(x).detach())


@pytest.mark.parametrize(
    ("channels", "bits", "dtype"),
    [(16, 2, torch.int32), (10, 3, torch.int32), (12, 3, torch.int64)],
    ids=["32-bits-int32", "30-bits-int32", "36-bits-int64"],
)
def test_shared_lookups_pack_codes_up_to_every_bit(channels, bits, dtype):
    """Output channels reading the same inputs share one lookup of packed codes: 32 bits in an int32 (the top
    code in its sign bit), more in an int64; the codes are the model's at every batch."""
    conv = nn.Conv2d(3, channels, 1)
    model = random_stats_(nn.Sequential(Quantize(2, signed=True), conv, nn.BatchNorm2d(channels), Quantize(bits)))
    with torch.no_grad():  # the last channel spans every code, so its top bit is set in some rows
        conv.weight[-1], conv.bias[-1] = 4.0, 0.0
        bn = model[2]
        bn.weight[-1], bn.bias[-1], bn.running_mean[-1], bn.running_var[-1] = 1.0, 0.0, 0.0, 1.0
    net = precompute(model, input_domain=S2, example_input=torch.zeros(1, 3, 4, 4))
    for n in (1, 16, 17, 100):
        x = random_inputs(S2, (3, 4, 4), n=n, seed=n)
        fused, unfused = run_both_ways(net, net.encode_input(x))
        assert torch.equal(fused, unfused), n
        assert torch.equal(net.run(x), model(x).detach()), n
    shared = [k._shared for k in net.runtime._kernels.values() if getattr(k, "_shared", None) is not None]
    assert [s["table"].dtype for s in shared] == [dtype]
    top = (shared[0]["table"].to(torch.int64) >> (bits * (channels - 1))) & ((1 << bits) - 1)
    assert int(top.max()) == 2**bits - 1


@pytest.mark.parametrize("host_head", [False, True], ids=["table-head", "host-head"])
def test_pools_and_heads_at_every_batch(host_head):
    """A max-pool on codes and a float head reading a table's values: the model's outputs for 1 to 100 samples."""
    model = random_stats_(PoolFlattenHead(host_head=host_head))
    hosts = [model.fc] if host_head else []
    net = precompute(model, input_domain=U2, example_input=torch.zeros(1, 1, 6, 6), host=hosts)
    for n in (1, 2, 5, 16, 100):
        x = random_inputs(U2, (1, 6, 6), n=n, seed=n)
        with torch.no_grad():
            assert torch.equal(net.run(x), model(x)), n
        assert verify(model, net, x).ok


@given(layer=sparse_layers(6), n=st.integers(1, 40))
@FAST
def test_small_batches_of_mlps_equal_the_reference(layer, n):
    """The small-batch kernels of non-spatial tables (numpy products and lookups) give the reference's codes."""
    fan_in, fan_out = layer
    model = nn.Sequential(Quantize(2), masked_linear(6, fan_in, fan_out, seed=n), Quantize(2, signed=True))
    net = precompute(model, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 6))
    codes = torch.randint(0, 4, (n, 6), generator=torch.Generator().manual_seed(n))
    expected = reference_codes(net, codes.numpy())
    assert np.array_equal(net.run(codes, codes=True, return_codes=True).numpy(), expected)
