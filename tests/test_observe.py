"""Observed inputs, partial (restricted) tables with don't-cares, and PLA export."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import prune

from iotable import Domain, IOTable, IOTableError, decompose, export_pla, observe, precompute, verify
from iotable.errors import MissingRowError, PLAError
from iotable.nn import Quantize
from iotable.pla import pla_text, read_pla, write_pla

U2 = Domain.uniform(2, scale=0.5)


def sparse_model() -> nn.Sequential:
    torch.manual_seed(0)
    layers = []
    for n_in, fan in ((8, [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 0]]), (4, [[0, 1], [1, 2], [2, 3]])):
        lin = nn.Linear(n_in, len(fan))
        mask = torch.zeros(len(fan), n_in)
        for k, idx in enumerate(fan):
            mask[k, idx] = 1
        prune.custom_from_mask(lin, "weight", mask)
        layers += [decompose(lin, fan_in=fan), nn.ReLU(), Quantize(2, scale=0.5)]
    return nn.Sequential(*layers).eval()


def skewed_inputs(n: int, seed: int) -> torch.Tensor:
    """Inputs that use only codes 0 and 1 of the 2-bit domain, so many rows are never reached."""
    codes = torch.randint(0, 2, (n, 8), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(U2.values, dtype=torch.float32)[codes]


def test_observe_counts_every_lookup():
    """Counts add up to samples x units x positions, and only addresses reached are listed."""
    net = precompute(sparse_model(), input_domain=U2)
    data = skewed_inputs(200, 0)
    obs = observe(net, data, batch_size=64)
    assert obs.samples == 200
    for name, layer in net.layers.items():
        for table, (addresses, counts) in zip(layer.tables, obs.counts[name]):
            assert counts.sum() == 200 and (np.diff(addresses) > 0).all()
            assert addresses.max() < table.rows
    # The first layer's inputs only take codes 0 and 1: each 3-input unit sees at most 2**3 of 64 rows.
    assert all(len(a) <= 8 for a, _ in obs.counts["0"])
    expected = np.unique(net["0"].tables[0].address(U2.encode(data[:, [0, 1, 2]])), return_counts=True)
    np.testing.assert_array_equal(obs.counts["0"][0][0], expected[0])
    np.testing.assert_array_equal(obs.counts["0"][0][1], expected[1])


def test_observe_accumulates_across_calls():
    """Observing two halves into one observation equals observing the whole."""
    net = precompute(sparse_model(), input_domain=U2)
    data = skewed_inputs(100, 1)
    whole = observe(net, data)
    halves = observe(net, data[50:], into=observe(net, data[:50]))
    for name in whole.counts:
        for (a1, c1), (a2, c2) in zip(whole.counts[name], halves.counts[name]):
            np.testing.assert_array_equal(a1, a2)
            np.testing.assert_array_equal(c1, c2)


def test_restricted_network_agrees_on_observed_data_and_reports_dont_cares():
    """Restricted tables keep observed rows: exact on the observed data; an unseen input is reported."""
    model = sparse_model()
    net = precompute(model, input_domain=U2)
    train = skewed_inputs(300, 2)
    small = net.restrict(observe(net, train), min_count=1)
    assert all(not t.is_dense for t in small.tables)
    assert verify(model, small, train).ok
    assert "rows kept / rows in all, per layer:" in small.summary()
    unseen = torch.full((1, 8), 1.5)  # code 3 never occurred
    with pytest.raises(MissingRowError, match=r"0: unit 0, sample 0: input codes \(3, 3, 3\) hit a don't-care row"):
        small.run(unseen)
    mapped = net.restrict(observe(net, train), default="zero")
    assert mapped.run(unseen).shape == (1, 3)


def test_min_count_drops_rare_rows():
    """A higher min_count keeps fewer rows."""
    net = precompute(sparse_model(), input_domain=U2)
    obs = observe(net, skewed_inputs(40, 3))
    rows = [sum(t.rows for t in net.restrict(obs, min_count=k).tables) for k in (1, 3, 10)]
    assert rows[0] > rows[1] > rows[2]
    assert obs.rows_seen("0", min_count=3) == sum(t.rows for t in net.restrict(obs, min_count=3)["0"].tables)
    with pytest.raises(IOTableError, match="min_count must be a positive integer"):
        net.restrict(obs, min_count=0)


def table_2x2() -> IOTable:
    inputs = np.array(list(itertools.product(range(4), range(3))))
    outputs = (inputs[:, :1] + inputs[:, 1:]) % 4
    return IOTable(inputs, outputs, input_domains=[U2, Domain.values([0, 1, 2])], output_domain=U2)


@pytest.mark.parametrize("dont_cares", ["explicit", "implicit"])
def test_pla_round_trip_dense_and_partial(tmp_path, dont_cares):
    """Writing a table to PLA and reading it back gives the same care set and values."""
    dense = table_2x2()
    keep = [0, 3, 5, 11]
    partial = IOTable(dense.inputs[keep], dense.outputs[keep], input_domains=dense.input_domains, output_domain=U2)
    for table in (dense, partial):
        path = write_pla(table, tmp_path / "t.pla", dont_cares=dont_cares)
        back = read_pla(path, input_domains=table.input_domains, output_domain=U2)
        assert back == table
    text = pla_text(partial, dont_cares=dont_cares).decode()
    assert ".i 4\n.o 2\n" in text and ".type fr" in text and text.endswith(".e\n")
    assert ("0001 --" in text) == (dont_cares == "explicit")  # row (0, 1) is a don't-care


def test_pla_bit_order_is_most_significant_first(tmp_path):
    """Input codes and outputs are written in binary, most significant bit first, in input order."""
    text = pla_text(table_2x2()).decode().splitlines()
    assert ".ilb x0_1 x0_0 x1_1 x1_0" in text and ".ob y0_1 y0_0" in text
    assert "1110 01" in text  # inputs (3, 2): 11 then 10; output (3 + 2) % 4 = 1


def test_export_pla_writes_one_file_per_table(tmp_path):
    """A restricted network exports one PLA per table, readable back into the same partial tables."""
    net = precompute(sparse_model(), input_domain=U2)
    small = net.restrict(observe(net, skewed_inputs(50, 4)))
    paths = export_pla(small, tmp_path / "pla")
    assert len(paths) == len(small.tables) and paths[0].name == "0.u0.pla"
    for path, table in zip(paths, small.tables):
        back = read_pla(path, input_domains=table.input_domains, output_domain=table.output_domain)
        assert np.array_equal(back.addresses, table.addresses) and np.array_equal(back.outputs, table.outputs)


def test_pla_rejects_raw_outputs_before_writing(tmp_path):
    """Tables of raw values cannot be PLA; nothing is written."""
    raw = IOTable.dense(np.zeros(4, np.float32), input_domains=[Domain.uniform(1)] * 2)
    with pytest.raises(PLAError, match="holds raw values"):
        export_pla([table_2x2(), raw], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_read_pla_with_one_domain_for_every_input(tmp_path):
    """One Domain for all inputs reads back the table whose inputs all share it (their number comes from .i)."""
    inputs = np.array(list(itertools.product(range(4), repeat=3)))
    table = IOTable(inputs, inputs.sum(axis=1, keepdims=True) % 4, input_domains=U2, output_domain=U2)
    back = read_pla(write_pla(table, tmp_path / "t.pla"), input_domains=U2, output_domain=U2)
    assert back == table and back.fan_in == 3
