"""Packed forward passes: units whose fan-ins overlap share a forward pass through a linear design over GF(q).

Units with disjoint fan-ins can share a forward pass trivially: each sample sets every unit's inputs to that
unit's next row. Units that read a common input cannot, since the input holds one value per sample. A linear
design lifts that limit. Take ``R = q**F`` samples, ``q`` a prime power (the number of codes of every input)
and ``F`` the fan-in, and read sample ``z``'s base-``q`` digits ``z_1..z_F`` as a vector over the finite field
GF(q), whose elements are the codes ``0..q-1``. Every input element ``e`` gets a coefficient vector ``g_e``;
in sample ``z`` it holds the code ``x_e = g_e . z``. A unit reading ``e_1..e_F`` then sees the codes ``M z``,
``M`` the matrix of rows ``g_e1..g_eF``: when ``M`` is invertible the ``R`` samples give each of its rows
exactly once, in the order ``z -> M z``, whichever other units share the inputs. So units share a pass as long
as each one's vectors stay linearly independent, which ``F`` random vectors are with probability
``prod(1 - q**-i)`` (0.86 for ``q = 8``), far more often than fan-ins are disjoint.

The module still computes every row itself, with every input it reads set to that row's codes; only the
inputs it does not read (which it must ignore, see the probe) hold codes of other units' rows.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

import numpy as np

__all__ = ["Field", "Pass", "finite_field", "pack"]

Vector = tuple[int, ...] | int

# Fields are built by searching for a modulus (milliseconds up to 64 elements); inputs with more codes take
# the disjoint colouring instead.
_MAX_ORDER = 64


@dataclass(frozen=True, eq=False)
class Field:
    """GF(q), q = p**k: element ``a`` is the polynomial over GF(p) whose coefficient of ``t**i`` is digit ``i``
    of ``a`` in base ``p``."""

    p: int
    k: int
    add: np.ndarray  # (q, q)
    mul: np.ndarray  # (q, q)
    inv: np.ndarray  # (q,) inverse of each non-zero element (0 for 0)
    neg: np.ndarray  # (q,)
    times: np.ndarray  # (q, k, k) multiplication by a as a matrix over GF(p), acting on base-p digits
    modulus: int = 0  # p == 2: the reduction of t**k, as the bits of a polynomial of degree < k

    @property
    def q(self) -> int:
        """Number of elements."""
        return self.p**self.k

    # Vectors are tuples of coefficients, or in characteristic 2 bit masks (coefficient j in bits k j .. k j +
    # k - 1), where elimination is a few integer XORs: vectors over GF(2**k) are independent exactly when their
    # multiples by 1, t, .., t**(k-1) are, over GF(2) (the two spans are one set).

    def random(self, rng: random.Random, n: int) -> Vector:
        """A uniformly random vector of length ``n``."""
        if self.p == 2:
            return rng.getrandbits(self.k * n)
        return tuple(rng.randrange(self.q) for _ in range(n))

    def unit(self, j: int, n: int) -> Vector:
        """The ``j``-th unit vector of length ``n``."""
        return 1 << (self.k * j) if self.p == 2 else tuple(int(j == f) for f in range(n))

    def vector(self, coefficients: tuple[int, ...]) -> Vector:
        """The vector of these coefficients (elements ``0..q-1``)."""
        if self.p == 2:
            return sum(int(c) << (self.k * j) for j, c in enumerate(coefficients))
        return tuple(int(c) for c in coefficients)

    def coefficients(self, vector: Vector, n: int) -> tuple[int, ...]:
        """The coefficients of ``vector`` (of length ``n``)."""
        if isinstance(vector, int):
            return tuple((vector >> (self.k * j)) & (self.q - 1) for j in range(n))
        return vector

    def independent(self, vectors: list[Vector]) -> bool:
        """Whether ``vectors`` are linearly independent (Gaussian elimination)."""
        if self.p == 2:
            masks = cast("list[int]", vectors)  # over GF(2^k) every vector is a bit mask
            if self.k == 1:
                return _independent_bits(masks)
            top, modulus, shift = self._top, self.modulus, self.k - 1
            expanded: list[int] = []
            for v in masks:
                for _ in range(self.k):  # v, t v, t**2 v, ...: each coefficient times t, reduced by the modulus
                    expanded.append(v)
                    v = ((v & ~top) << 1) ^ (((v & top) >> shift) * modulus)
            return _independent_bits(expanded)
        add, mul, inv, neg = self._tables
        rows = [list(v) for v in cast("list[tuple[int, ...]]", vectors)]  # other fields: coefficient tuples
        for rank in range(len(rows)):
            row = rows[rank]
            column = next((c for c, x in enumerate(row) if x), None)
            if column is None:
                return False
            scale = inv[row[column]]
            pivot = [mul[scale][x] for x in row]
            for other in rows[rank + 1 :]:
                factor = neg[other[column]]
                if factor:
                    other[:] = [add[x][mul[factor][y]] for x, y in zip(other, pivot)]
        return True

    @functools.cached_property
    def _top(self) -> int:
        """The top bit of every coefficient of a bit-mask vector (up to 64 coefficients)."""
        return sum(1 << (self.k * j + self.k - 1) for j in range(64))

    @functools.cached_property
    def _tables(self) -> tuple[list[list[int]], list[list[int]], list[int], list[int]]:
        # Python lists: elimination works on a few scalars at a time, where numpy indexing is slower.
        return self.add.tolist(), self.mul.tolist(), self.inv.tolist(), self.neg.tolist()


def _independent_bits(vectors: list[int]) -> bool:
    """Whether GF(2) vectors given as bit masks are independent (a basis kept by leading bit, largest first)."""
    basis: list[int] = []
    for x in vectors:
        for b in basis:
            x = min(x, x ^ b)  # clears b's leading bit from x when x has it
        if not x:
            return False
        basis.append(x)
        basis.sort(reverse=True)
    return True


def _prime_power(q: int) -> tuple[int, int] | None:
    """``(p, k)`` with ``q == p**k`` and p prime, or ``None``."""
    if q < 2:
        return None
    p = next(d for d in range(2, q + 1) if q % d == 0)
    k = 0
    while q % p == 0:
        q //= p
        k += 1
    return (p, k) if q == 1 else None


def _multiplication(p: int, k: int, modulus: np.ndarray) -> np.ndarray:
    """(q, q) products of polynomials of degree < k over GF(p), reduced by the monic ``t**k + modulus . t**i``."""
    q = p**k
    digits = (np.arange(q)[:, None] // p ** np.arange(k)[None, :]) % p  # (q, k)
    shifted = np.empty((k, q, k), dtype=np.int64)  # a * t**i, reduced
    current = digits.copy()
    for i in range(k):
        shifted[i] = current
        top = current[:, -1].copy()
        current = np.concatenate([np.zeros((q, 1), np.int64), current[:, :-1]], axis=1)
        current = (current - top[:, None] * modulus[None, :]) % p
    product = np.einsum("bi,iak->abk", digits, shifted) % p  # sum over i of b_i * (a * t**i)
    return product @ p ** np.arange(k)


@functools.cache
def finite_field(q: int) -> Field | None:
    """GF(q), or ``None`` when ``q`` is not a prime power or larger than the tables allow."""
    found = _prime_power(q)
    if found is None or q > _MAX_ORDER:
        return None
    p, k = found
    digits = (np.arange(q)[:, None] // p ** np.arange(k)[None, :]) % p
    add = ((digits[:, None, :] + digits[None, :, :]) % p) @ p ** np.arange(k)
    for candidate in range(q):  # the first irreducible modulus: no product of non-zero elements is zero
        modulus = (candidate // p ** np.arange(k)) % p
        mul = _multiplication(p, k, modulus)
        if (mul[1:, 1:] != 0).all():
            break
    inv = np.zeros(q, dtype=np.int64)
    nonzero, partner = np.nonzero(mul == 1)
    inv[nonzero] = partner
    neg = ((-digits) % p) @ p ** np.arange(k)
    # Column i of ``times[a]``: the digits of a * t**i, i.e. of a * p**i as an element.
    times = np.transpose(digits[mul[:, p ** np.arange(k)]], (0, 2, 1))
    reduction = int(((-modulus) % p) @ p ** np.arange(k)) if p == 2 else 0  # t**k = -modulus . t**i
    return Field(p=p, k=k, add=add, mul=mul, inv=inv, neg=neg, times=np.ascontiguousarray(times), modulus=reduction)


@dataclass(frozen=True)
class Pass:
    """One forward pass of a packed design: its members and every element's coefficient vector."""

    members: tuple[int, ...]  # indices into the fan-ins given to :func:`pack`
    forms: dict[int, tuple[int, ...]]  # element -> coefficient vector
    identity: tuple[bool, ...]  # per member: its rows come in sample order (``M`` is the identity)


def pack(fan_ins: list[tuple[int, ...]], gf: Field, *, sizes: list[int], capacity: int, seed: int = 0) -> list[Pass]:
    """Group units into forward passes of a linear design over ``gf`` (first fit, in the given order).

    A unit joins the first pass where its elements' vectors are independent (its new elements then get
    random vectors completing a basis), or where re-drawing one of its elements' vectors makes them so
    without making another member's dependent; else it opens a pass. The first member of a pass, and every
    unit whose inputs no other unit reads, get unit vectors: their rows come in sample order.

    Args:
        fan_ins: each unit's input elements, all of the same length ``F``.
        gf: the field of the inputs' codes.
        sizes: what each unit adds to a pass (bytes of its tables, held until the pass ends).
        capacity: the most a pass may hold; a unit larger than this gets a pass of its own.
        seed: the random coefficient vectors' seed (any design gives the same tables).

    Returns:
        The passes; every unit is in exactly one, its elements' vectors linearly independent.
    """
    rng = random.Random(seed)
    readers = Counter(e for elements in fan_ins for e in elements)
    passes: list[_Open] = []
    for index, elements in enumerate(fan_ins):
        size = sizes[index]
        # The first pass that fits it (trying a re-draw where it does not), in order; else a new one.
        p = next((p for p in passes if p.fits(index, fan_ins, gf, rng, size=size, capacity=capacity)), None)
        if p is None:
            p = _Open()
            passes.append(p)
        alone = all(readers[e] == 1 for e in elements)  # unit vectors constrain no later unit
        p.admit(index, elements, gf, rng, alone=alone, size=size)
    width = len(fan_ins[0]) if fan_ins else 0
    return [p.finished(gf, width) for p in passes]


# Re-draws of one shared element's vector tried before a unit gives up on a pass, and units in a row that
# may give up before a pass stops trying (it is nearly full: re-draws cost time and rarely work there).
_REDRAWS = 32
_GIVE_UP = 8


@dataclass
class _Open:
    """A pass being filled."""

    forms: dict[int, Vector] = field(default_factory=dict)
    members: list[int] = field(default_factory=list)
    identity: list[bool] = field(default_factory=list)  # per member: rows in sample order
    fixed: set[int] = field(default_factory=set)  # elements of those members, whose vectors must stay
    readers: dict[int, list[int]] = field(default_factory=dict)  # element -> members reading it
    used: int = 0
    failures: int = 0  # units in a row for which no re-draw worked

    def fits(
        self, index: int, fan_ins: list[tuple[int, ...]], gf: Field, rng: random.Random, *, size: int, capacity: int
    ) -> bool:
        """Whether unit ``index`` can join: room for ``size`` more, and its known vectors independent (or made
        so by one re-draw)."""
        if self.used + size > capacity:
            return False
        known = [self.forms[e] for e in fan_ins[index] if e in self.forms]
        return gf.independent(known) or self.redraw(index, fan_ins, gf, rng)

    def admit(
        self, index: int, elements: tuple[int, ...], gf: Field, rng: random.Random, *, alone: bool, size: int
    ) -> None:
        """Add unit ``index``: unit vectors when it is the first member or reads what no other unit reads
        (its rows then come in sample order), else random vectors for its new elements."""
        width = len(elements)
        free = [e for e in elements if e not in self.forms]
        identity = not self.members or alone
        if identity:
            for j, e in enumerate(elements):
                self.forms[e] = gf.unit(j, width)
            self.fixed.update(elements)
        elif free:
            # Random vectors for the unit's new elements: generic, so later units rarely depend on them.
            while True:
                trial = {e: gf.random(rng, width) for e in free}
                if gf.independent([self.forms[e] if e in self.forms else trial[e] for e in elements]):
                    self.forms.update(trial)
                    break
        self.members.append(index)
        self.identity.append(identity)
        for e in elements:
            self.readers.setdefault(e, []).append(index)
        self.used += size

    def finished(self, gf: Field, width: int) -> Pass:
        """The pass as :func:`pack` returns it, each element's vector as its coefficients."""
        return Pass(
            members=tuple(self.members),
            forms={e: gf.coefficients(v, width) for e, v in self.forms.items()},
            identity=tuple(self.identity),
        )

    def redraw(self, index: int, fan_ins: list[tuple[int, ...]], gf: Field, rng: random.Random) -> bool:
        """Give one of unit ``index``'s elements a new vector that keeps every member reading it independent
        and makes the unit's own known vectors independent; ``False`` when none was found."""
        elements = fan_ins[index]
        known = [e for e in elements if e in self.forms]
        if self.failures >= _GIVE_UP:
            return False
        for _ in range(_REDRAWS):
            e = known[rng.randrange(len(known))]
            if e in self.fixed:
                continue  # identity members' rows stay in sample order
            vector = gf.random(rng, len(elements))
            trial = {**{x: self.forms[x] for x in known}, e: vector}
            if not gf.independent([trial[x] for x in known]):
                continue
            if all(gf.independent([vector if x == e else self.forms[x] for x in fan_ins[m]]) for m in self.readers[e]):
                self.forms[e] = vector
                self.failures = 0
                return True
        self.failures += 1
        return False
