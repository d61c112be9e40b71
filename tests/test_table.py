"""IOTable: construction from arrays, tensors and pairs; dense and partial; vectorized lookup."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from iotable import Domain, IOTable
from iotable.errors import MissingRowError, TableError

D2 = Domain.uniform(2)


def xor_pairs():
    return [((a, b), (a ^ b,)) for a, b in itertools.product(range(2), repeat=2)]


def test_dense_rows_in_product_order_and_address_digits():
    """Dense rows follow itertools.product; the first input is the most significant address digit."""
    domains = [Domain.uniform(1), Domain.values([0, 1, 2])]
    t = IOTable.dense(np.arange(6, dtype=np.float32), input_domains=domains)
    assert t.inputs.tolist() == [list(p) for p in itertools.product(range(2), range(3))]
    assert t.address_weights.tolist() == [3, 1]
    assert t.address([[1, 2], [0, 1]]).tolist() == [5, 1]
    assert t.lookup([[1, 2]]).tolist() == [[5.0]]


def test_from_arrays_shuffled_rows_become_dense():
    """Rows given in any order are sorted by address; a full set of rows is dense."""
    inputs = np.array(list(itertools.product(range(4), repeat=2)))
    outputs = inputs.sum(axis=1, keepdims=True).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(inputs))
    t = IOTable(torch.tensor(inputs[perm]), torch.tensor(outputs[perm]), input_domains=D2)
    assert t.is_dense and t.rows == 16
    np.testing.assert_array_equal(t.inputs, inputs)
    np.testing.assert_array_equal(t.outputs, outputs)


def test_pairs_round_trip_through_iteration():
    """A table built from (input_tuple, output_tuple) pairs iterates back to the same pairs."""
    t = IOTable.from_pairs(xor_pairs(), input_domains=Domain.uniform(1))
    assert list(t) == xor_pairs()
    assert IOTable.from_pairs(list(t), input_domains=t.input_domains) == t


def test_partial_table_lookup_and_dont_care():
    """A partial table answers rows it holds; a missing row raises unless a don't-care is declared."""
    pairs = [((0, 1), (3.0,)), ((2, 2), (4.0,)), ((3, 0), (5.0,))]
    t = IOTable.from_pairs(pairs, input_domains=D2)
    assert not t.is_dense and t.rows == 3
    assert t.lookup([[3, 0], [0, 1]]).tolist() == [[5.0], [3.0]]
    with pytest.raises(
        MissingRowError, match=r"input \(1, 1\) \(row 1 of the query\) is not in this partial table of 3 row\(s\)"
    ):
        t.lookup([[0, 1], [1, 1]])
    assert t.lookup([[1, 1], [2, 2]], default=-1).tolist() == [[-1.0], [4.0]]
    t2 = IOTable.from_pairs(pairs, input_domains=D2, dont_care=0)
    assert t2.lookup([[1, 1]]).tolist() == [[0.0]]


def test_outputs_as_codes_or_values_with_output_domain():
    """With an output domain, integer outputs are codes and float outputs are encoded values."""
    out_domain = Domain.uniform(2, scale=0.5)
    inputs = [[0], [1]]
    from_codes = IOTable(inputs, [[0], [3]], input_domains=Domain.uniform(1), output_domain=out_domain)
    from_values = IOTable(inputs, [[0.0], [1.5]], input_domains=Domain.uniform(1), output_domain=out_domain)
    assert from_codes == from_values
    assert from_values.outputs.dtype == np.uint8
    assert from_values.output_values().tolist() == [[0.0], [1.5]]


def test_lookup_many_rows_is_vectorized_and_matches_rows():
    """Looking up every row at once returns the outputs in row order."""
    rng = np.random.default_rng(1)
    t = IOTable.dense(rng.normal(size=(4**5, 2)).astype(np.float32), input_domains=[D2] * 5)
    np.testing.assert_array_equal(t.lookup(t.inputs), t.outputs)
    query = rng.integers(0, 4, size=(1000, 5))
    np.testing.assert_array_equal(t.lookup(query), t.outputs[query @ t.address_weights])


@pytest.mark.parametrize(
    ("codes", "words"),
    [
        ([[0, 4]], r"row 0 holds code 4 in input 1; expected 0\.\.3"),
        ([[0, -1]], "holds code -1"),
        ([[0, 1, 2]], r"expected integer codes of shape \(M, 2\)"),
        ([[0.5, 1.0]], "expected integer codes"),
    ],
)
def test_lookup_rejects_malformed_codes(codes, words):
    """Codes of the wrong shape, dtype or range are errors naming what was expected."""
    t = IOTable.dense(np.zeros(16), input_domains=[D2, D2])
    with pytest.raises(TableError, match=words):
        t.lookup(codes)


@pytest.mark.parametrize(
    ("inputs", "outputs", "kwargs", "words"),
    [
        ([[0, 0], [0, 0]], [[1], [2]], {}, r"input row \(0, 0\) appears more than once"),
        ([[0, 5]], [[1]], {}, "input column 1 holds code 5"),
        ([[0, 1]], [[1], [2]], {}, r"outputs must have shape \(1, fan_out\)"),
        ([0, 1], [[1], [2]], {}, r"inputs must be integer codes of shape \(N, fan_in\)"),
        ([[0, 1]], [[1]], {"input_domains": [D2]}, r"1 input domain\(s\) for 2 input column\(s\)"),
        ([[0, 1]], [[7]], {"output_domain": D2}, r"outputs must be codes 0\.\.3"),
    ],
)
def test_construction_rejects_inconsistent_arrays(inputs, outputs, kwargs, words):
    """Inconsistent arrays are rejected with what was expected."""
    kwargs = {"input_domains": D2, **kwargs}
    with pytest.raises(TableError, match=words):
        IOTable(inputs, outputs, **kwargs)


def test_repr_names_unit_layer_and_shape():
    """The repr says which unit of which layer, rows, kind, and shape."""
    t = IOTable.dense(np.zeros(4), input_domains=[Domain.uniform(1)] * 2, layer="conv1", unit=2)
    assert repr(t) == "IOTable(unit 2 of 'conv1', 4 rows dense, 2 inputs x 1 bit(s) -> 1 output(s) as values)"


def test_unpack_takes_only_addresses_in_the_address_space():
    """unpack inverts address for every address and refuses negative, fractional and too large ones."""
    t = IOTable.dense([[0.0]] * 12, input_domains=[Domain.uniform(2), Domain.values([0, 1, 2])])
    every = np.arange(12)
    np.testing.assert_array_equal(t.address(t.unpack(every)), every)
    for bad, words in [(-1, "address -1 is outside 0..11"), (12, "address 12 is outside"), (1.5, "dtype float64")]:
        with pytest.raises(TableError, match=words):
            t.unpack(bad)


def test_partial_table_without_rows_answers_with_its_dont_care():
    """A partial table of no rows looks up its don't-care (or the default), or says the row is missing."""
    empty = IOTable(np.zeros((0, 2), int), np.zeros((0, 1)), input_domains=Domain.uniform(1), dont_care=7.0)
    assert empty.rows == 0 and empty.lookup([[0, 1], [1, 1]]).tolist() == [[7.0], [7.0]]
    bare = IOTable(np.zeros((0, 2), int), np.zeros((0, 1)), input_domains=Domain.uniform(1))
    assert bare.lookup([0, 1], default=2.0).tolist() == [2.0]
    with pytest.raises(MissingRowError, match=r"input \(0, 1\) .* partial table of 0 row\(s\)"):
        bare.lookup([0, 1])


def test_unused_inputs_are_found_and_removed_exactly() -> None:
    domains = [Domain.uniform(1), Domain.uniform(2), Domain.uniform(1)]
    grid = np.arange(2 * 4)[:, None].repeat(2, axis=1).reshape(2, 4, 2)  # the last input never matters
    table = IOTable.dense(grid.reshape(-1, 1) % 5, input_domains=domains)
    assert table.unused_inputs() == (2,)
    smaller = table.without_inputs([2])
    assert smaller.fan_in == 2
    codes = table.inputs
    assert np.array_equal(smaller.lookup(codes[:, :2]), table.lookup(codes))


def test_an_input_that_matters_in_one_row_is_kept() -> None:
    """The check can fail: change one row and the input counts again; removing it is refused."""
    outputs = np.zeros((8, 1), dtype=np.int64)
    outputs[5] = 1  # inputs (1, 0, 1)
    table = IOTable.dense(outputs, input_domains=[Domain.uniform(1)] * 3)
    assert table.unused_inputs() == ()
    with pytest.raises(TableError, match="change the outputs"):
        table.without_inputs([2])


def test_a_partial_table_claims_no_unused_input() -> None:
    table = IOTable([[0, 0], [1, 0]], [[1], [1]], input_domains=[Domain.uniform(1)] * 2)
    assert table.unused_inputs() == ()
