"""Linear designs for packed forward passes: finite fields, and packs whose every unit sees each row once."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from iotable.tabulate.design import finite_field, pack
from iotable.tabulate.packed import _field_codes

from .strategies import packable_fan_ins

ORDERS = [2, 3, 4, 5, 7, 8, 9, 16, 25, 27, 32, 49, 64]


@pytest.mark.parametrize("q", ORDERS)
def test_finite_field_axioms(q):
    """Addition and multiplication tables form a field, and ``times`` multiplies base-p digits."""
    gf = finite_field(q)
    assert gf is not None and gf.q == q
    a = np.arange(q)
    assert (gf.add[0] == a).all() and (gf.mul[1] == a).all() and (gf.mul[0] == 0).all()
    assert (gf.add == gf.add.T).all() and (gf.mul == gf.mul.T).all()
    assert (gf.add[a, gf.neg] == 0).all() and (gf.mul[a[1:], gf.inv[1:]] == 1).all()
    x, y, z = np.random.default_rng(q).integers(0, q, (3, 3000))
    assert (gf.mul[x, gf.add[y, z]] == gf.add[gf.mul[x, y], gf.mul[x, z]]).all()
    assert (gf.mul[x, gf.mul[y, z]] == gf.mul[gf.mul[x, y], z]).all()
    assert (gf.add[x, gf.add[y, z]] == gf.add[gf.add[x, y], z]).all()
    digits = (a[:, None] // gf.p ** np.arange(gf.k)) % gf.p
    products = np.einsum("xij,yj->xyi", gf.times, digits) % gf.p
    assert (products @ gf.p ** np.arange(gf.k) == gf.mul).all()


@pytest.mark.parametrize("q", [1, 6, 10, 12, 128])
def test_no_field_for_other_orders(q):
    """Orders that are not prime powers (or too large for the tables) have no field: those layers use colours."""
    assert finite_field(q) is None


@pytest.mark.parametrize("q", [2, 3, 4, 8, 9])
def test_independence_matches_brute_force(q):
    """Field.independent agrees with counting the span of every small set of vectors."""
    gf = finite_field(q)
    vectors = list(itertools.product(range(q), repeat=2))
    for pair in itertools.combinations(vectors, 2):
        span = {
            tuple(int(gf.add[gf.mul[a, u], gf.mul[b, w]]) for u, w in zip(*pair))
            for a, b in itertools.product(range(q), repeat=2)
        }
        assert gf.independent([gf.vector(v) for v in pair]) == (len(span) == q * q)


@pytest.mark.parametrize("q", [4, 8, pytest.param(16, marks=pytest.mark.slow)])
def test_bit_mask_independence_of_three_vectors(q):
    """In characteristic 2, bit-mask vectors of three coefficients are independent exactly when they span q**3."""
    gf = finite_field(q)
    rng = np.random.default_rng(q)
    for _ in range(200):
        triple = rng.integers(0, q, (3, 3))
        triple[rng.integers(0, 3), :] = rng.integers(0, 2, 3)  # small coefficients: dependent sets now and then
        span = set()
        for a, b, c in itertools.product(range(q), repeat=3):
            terms = [gf.mul[a, triple[0]], gf.mul[b, triple[1]], gf.mul[c, triple[2]]]
            span.add(tuple(gf.add[gf.add[terms[0], terms[1]], terms[2]].tolist()))
        assert gf.independent([gf.vector(tuple(v)) for v in triple]) == (len(span) == q**3)


def assert_valid_packs(fan_ins, q, passes, sizes, capacity):
    gf = finite_field(q)
    placed = sorted(m for p in passes for m in p.members)
    assert placed == list(range(len(fan_ins)))
    for p in passes:
        total = sum(sizes[m] for m in p.members)
        assert total <= capacity or len(p.members) == 1
        assert p.identity[0]
        width = len(fan_ins[0])
        elements = sorted(p.forms)
        forms = np.asarray([p.forms[e] for e in elements], dtype=np.int64)
        where = {e: k for k, e in enumerate(elements)}
        # Every sample z gives each member's inputs the codes forms . z; over all q**F samples each member
        # must see every row exactly once, and the first member its rows in sample order.
        samples = np.arange(q**width, dtype=np.int64)
        codes = _field_codes(gf, forms, samples)
        for k, m in enumerate(p.members):
            rows = codes[:, [where[e] for e in fan_ins[m]]] @ q ** np.arange(width - 1, -1, -1)
            assert sorted(rows.tolist()) == samples.tolist()
            alone = all(sum(e in f for f in fan_ins) == 1 for e in fan_ins[m])
            assert p.identity[k] == (k == 0 or alone)
            if p.identity[k]:
                assert (rows == samples).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=packable_fan_ins())
def test_packs_give_every_unit_each_row_once(case):
    """Every unit lands in one pass, within capacity, and each sees each of its rows exactly once."""
    q, fan_ins, sizes, capacity = case
    passes = pack(fan_ins, finite_field(q), sizes=sizes, capacity=capacity)
    assert_valid_packs(fan_ins, q, passes, sizes, capacity)


def test_overlapping_fan_ins_share_far_fewer_passes_than_colours():
    """100 units of fan-in 5 over 100 inputs of 8 codes: one or two passes, where disjoint colours need 11+."""
    rng = np.random.default_rng(0)
    fan_ins = [tuple(sorted(rng.choice(100, 5, replace=False).tolist())) for _ in range(100)]
    readers = np.bincount([e for f in fan_ins for e in f]).max()
    passes = pack(fan_ins, finite_field(8), sizes=[1] * 100, capacity=10**9)
    assert readers >= 11 and len(passes) <= 2
    assert_valid_packs(fan_ins, 8, passes, [1] * 100, 10**9)
