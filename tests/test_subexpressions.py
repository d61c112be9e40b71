"""Constant-weighted sums with their recurring pairs of shifted codes shared (iotable.subexpressions): equal to the
plain sums on every input of small domains and on random inputs of dense layers, every shared sum in its exact
bits, fewer adders than one tree per output, deterministic, and a LUT estimate that follows the sharing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from iotable.lutcount import adder_tree_luts
from iotable.subexpressions import Shared, SharedSums, share, shared_sum_luts


def evaluate(form: SharedSums, x: np.ndarray, *, fits: bool = True) -> np.ndarray:
    """The outputs of ``form`` on the rows of codes ``x`` (``fits``: checking that every shared sum stays in its
    range, and so in its bits)."""
    operands = list(x.T.astype(np.int64))
    for s in form.shared:
        value = s.weights[0] * operands[s.terms[0]] + s.weights[1] * operands[s.terms[1]]
        assert not fits or (value.min() >= s.low and value.max() <= s.high), s
        operands.append(value)
    outputs = [
        c + sum((w * operands[t] for t, w in zip(row, weights)), np.zeros(len(x), np.int64))
        for row, weights, c in zip(form.terms, form.weights, form.constants)
    ]
    return np.stack(outputs, axis=1)


def dense(outputs: int, inputs: int, seed: int, low: int = -8, high: int = 8) -> list[list[tuple[int, int]]]:
    weights = np.random.default_rng(seed).integers(low, high, size=(outputs, inputs))
    return [[(i, int(w)) for i, w in enumerate(row)] for row in weights]


def plain(terms: list[list[tuple[int, int]]], constants: list[int], x: np.ndarray) -> np.ndarray:
    matrix = np.zeros((len(terms), x.shape[1]), np.int64)
    for k, row in enumerate(terms):
        for i, w in row:
            matrix[k, i] += w
    return x @ matrix.T + np.asarray(constants)


def adders(form: SharedSums) -> int:
    """Two-input adders: one per shared sum, and one fewer than its operands per output."""
    return len(form.shared) + sum(max(len(row) - 1, 0) for row in form.terms)


@pytest.mark.parametrize("seed", range(6))
def test_shared_sums_equal_the_plain_sums_on_every_input(seed: int) -> None:
    """Random weights from -8 to 7 (some repeated, some zero) over four codes of two bits: all 256 inputs give the
    plain sums."""
    terms = dense(5, 4, seed)
    terms[0] = terms[0] + [(1, 3)]  # an element twice in one sum
    constants = np.random.default_rng(seed).integers(-20, 20, size=5).tolist()
    form = share(terms, constants, [3] * 4)
    x = np.array(list(itertools.product(range(4), repeat=4)))
    assert np.array_equal(evaluate(form, x), plain(terms, constants, x))


@pytest.mark.parametrize(("outputs", "inputs"), [(8, 16), (16, 64)])
def test_a_dense_layer_shares_and_stays_exact(outputs: int, inputs: int) -> None:
    """A dense integer layer of 4-bit codes and weights: equal to the plain sums on 500 random inputs and the
    extremes, with fewer adders than one tree of every signed digit per output."""
    terms = dense(outputs, inputs, seed=outputs)
    form = share(terms, [0] * outputs, [15] * inputs)
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.integers(0, 16, size=(500, inputs)), np.zeros((1, inputs), int), np.full((1, inputs), 15)])
    assert np.array_equal(evaluate(form, x), plain(terms, [0] * outputs, x))
    unshared = share(terms, [0] * outputs, [15] * inputs)
    assert unshared == form  # deterministic
    digits = sum(
        len(row) for row in share([[t] for row in terms for t in row], [0] * outputs * inputs, [15] * inputs).terms
    )
    assert form.shared and adders(form) < digits - outputs
    assert all(w in {1, -1} or abs(w) & (abs(w) - 1) == 0 for row in form.weights for w in row)


def test_a_changed_shared_sum_is_caught() -> None:
    """Tamper: one shared sum's second weight negated no longer gives the plain sums (the check above can fail)."""
    terms = dense(5, 4, seed=0)
    form = share(terms, [0] * 5, [3] * 4)
    first = form.shared[0]
    wrong = Shared(first.terms, (first.weights[0], -first.weights[1]), first.low, first.high, first.depth)
    tampered = SharedSums((wrong, *form.shared[1:]), form.terms, form.weights, form.constants)
    x = np.array(list(itertools.product(range(4), repeat=4)))
    assert not np.array_equal(evaluate(tampered, x, fits=False), plain(terms, [0] * 5, x))


def test_shared_sums_have_exactly_their_bits() -> None:
    """A shared sum of two distinct codes spans its range: ``a + 2b`` of 4-bit codes reaches 45, six bits;
    ``a - 2b`` goes from -30 to 15, six bits of two's complement; the outputs keep their constants."""
    form = share([[(0, 1), (1, 2)], [(0, 2), (1, 4)]], [0, 0], [15, 15])
    (s,) = form.shared
    assert (s.weights, s.low, s.high, s.width, s.signed) == ((1, 2), 0, 45, 6, False)
    form = share([[(0, 1), (1, -2)], [(0, 4), (1, -8)]], [3, -1], [15, 15])
    (s,) = form.shared
    assert (s.weights, s.low, s.high, s.width, s.signed) == ((1, -2), -30, 15, 6, True)
    assert form.constants == (3, -1) and form.weights == ((1,), (4,))
    x = np.array(list(itertools.product(range(16), repeat=2)))
    assert np.array_equal(evaluate(form, x)[:, 0], x[:, 0] - 2 * x[:, 1] + 3)


def test_a_popcount_shares_nothing() -> None:
    """Ones over distinct codes have no pair that recurs: one tree, as before."""
    form = share([[(i, 1) for i in range(10)]], [0], [1] * 10)
    assert form.shared == () and form.terms == (tuple(range(10)),)


def test_the_estimate_follows_the_sharing() -> None:
    """The LUT estimate of a 16->8 dense layer counts the shared sums once: below one tree per output; a
    popcount's is the plain tree's."""
    terms = dense(8, 16, seed=8)
    shared = shared_sum_luts(terms, [0] * 8, [4] * 16, [12] * 8)
    per_output = sum(adder_tree_luts([4] * 16, [w for _, w in row], output_bits=12) for row in terms)
    assert shared < per_output
    ones = [[(i, 1) for i in range(12)]]
    assert shared_sum_luts(ones, [0], [1] * 12, [4]) == adder_tree_luts([1] * 12, [1] * 12, output_bits=4)


def test_too_many_pairs_leave_the_sums_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_PAIRS pairs of digits nothing is counted: each output keeps its own digits, still exact."""
    import iotable.subexpressions as subexpressions

    terms = dense(8, 16, seed=8)
    monkeypatch.setattr(subexpressions, "MAX_PAIRS", 10)
    form = share(terms, [1] * 8, [15] * 16)
    assert form.shared == ()
    x = np.random.default_rng(0).integers(0, 16, size=(200, 16))
    assert np.array_equal(evaluate(form, x), plain(terms, [1] * 8, x))


def test_the_network_summary_estimates_a_dense_sum_as_shared() -> None:
    """An integer 16->8 linear layer on 4-bit codes becomes a sum node whose estimate in net.rows() is the shared
    structure's, below one adder tree per output."""
    import torch

    import iotable
    from iotable import Domain, NodeKind

    weights = np.random.default_rng(3).integers(-8, 8, size=(8, 16))
    linear = torch.nn.Linear(16, 8)
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(weights, dtype=torch.float32))
        linear.bias.zero_()
    net = iotable.precompute(
        torch.nn.Sequential(linear).eval(), input_domain=Domain(np.arange(16.0)), example_input=torch.zeros(1, 16)
    )
    (node,) = net.graph.nodes_of(NodeKind.SUM)
    (row,) = [r for r in net.rows() if r["name"] == node.name]
    meta, width = node.meta, int(len(node.domain) - 1).bit_length()
    terms = [[(int(i), int(w)) for i, w in zip(meta.index_map[k], meta.weights[k]) if i >= 0] for k in range(8)]
    constants = meta.constant.tolist()
    assert row["estimate"] == shared_sum_luts(terms, constants, [4] * 16, [width] * 8)
    plain_luts = sum(
        adder_tree_luts([4] * len(t), [w for _, w in t], constant=c, output_bits=width)
        for t, c in zip(terms, constants)
    )
    assert row["estimate"] < plain_luts
