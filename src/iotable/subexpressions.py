"""Sums of constant-weighted codes that share their partial sums (common subexpressions), and their LUT estimate.

The outputs of an integer dense layer, of a layer's partial sums or of a neuron's per-edge sums are sums
``constant[k] + sum_j w[k, j] * x[j]`` of the same codes with small constant weights. Written as one adder tree
per output, every output pays for every shifted copy of every code; but the outputs have much in common: once
each weight is in canonical signed-digit form (``7 = 8 - 1``: each term is a few shifted copies ``+-x << s``),
the same pair of copies, at the same distance and signs, recurs in many outputs (``x3 + (x5 << 1)`` in one,
``(x3 << 2) + (x5 << 3)`` in another). :func:`share` adds each recurring pair once, as a **shared sum**, and lets
every output read it (shifted, maybe negated) in place of the pair, greedily: the pair found in the most outputs
first, then again on what is left (shared sums may pair with codes or with each other), until no pair occurs
twice. This is Hartley's common-subexpression elimination for constant multiplication, as the distributed
arithmetic of da4ml does it across a whole matrix.

A shared sum is kept as its value, in exactly the bits its range needs (two's complement where it can be
negative: ``a - 2b`` of 4-bit codes, from -30 to 15, in 6 bits), so no offset constant is ever added. The
result is deterministic: ties are broken by the pair's operands, distance and signs, never by hashing order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from .lutcount import adder_tree_luts, signed_digits

__all__ = ["MAX_PAIRS", "Shared", "SharedSums", "share", "shared_sum_luts", "signed_bits"]

#: The most pairs of signed digits (within each sum, over all sums) :func:`share` counts; beyond, the sums are
#: left as they are (a popcount of thousands of bits has no pair to share, and counting them would take long).
MAX_PAIRS = 2**21

# A pair of digits: (first operand, second operand, the second's shift above the first's, product of signs).
_Pattern = tuple[int, int, int, int]


def signed_bits(low: int, high: int) -> int:
    """Bits of a field holding every integer from ``low`` to ``high``: unsigned where ``low >= 0``, else two's
    complement (at least 1)."""
    if low >= 0:
        return max(high.bit_length(), 1)
    return 1 + max(high.bit_length(), (-low - 1).bit_length())


@dataclass(frozen=True)
class Shared:
    """A sum of two operands that outputs share: ``weights[0] * op[terms[0]] + weights[1] * op[terms[1]]``
    (operands ``0 .. n-1`` the codes, ``n + j`` the ``j``-th shared sum; each weight a power of two or its
    negative), a value from ``low`` to ``high``: in hardware a field of :attr:`width` bits, two's complement
    where ``low`` is negative."""

    terms: tuple[int, int]
    weights: tuple[int, int]
    low: int
    high: int
    depth: int  # adders on its longest path from the codes

    @property
    def width(self) -> int:
        return signed_bits(self.low, self.high)

    @property
    def signed(self) -> bool:
        return self.low < 0


@dataclass(frozen=True)
class SharedSums:
    """Sums as shared sums and, per output, the operands it adds: output ``k`` is ``constants[k] + sum_j
    weights[k][j] * op[terms[k][j]]``, each weight a power of two or its negative."""

    shared: tuple[Shared, ...]
    terms: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[int, ...], ...]
    constants: tuple[int, ...]


def _pattern(first: tuple[int, int, int], second: tuple[int, int, int]) -> tuple[_Pattern, int, int]:
    """The pair of two digits ``(operand, shift, sign)``: its pattern, the lower digit's shift and sign."""
    if (first[1], first[0]) > (second[1], second[0]):
        first, second = second, first
    return (first[0], second[0], second[1] - first[1], first[2] * second[2]), first[1], first[2]


class _Search:
    """The digits of every output and the number of times each pair of digits occurs (overlaps counted)."""

    def __init__(self, terms: Sequence[Sequence[tuple[int, int]]], tops: Sequence[int]) -> None:
        self.low = [0] * len(tops)
        self.high = [int(t) for t in tops]
        self.depth = [0] * len(tops)
        self.digits: list[dict[tuple[int, int], int]] = []  # per output: (operand, shift) -> sign
        for row in terms:
            merged: dict[int, int] = {}
            for element, weight in row:
                merged[int(element)] = merged.get(int(element), 0) + int(weight)
            self.digits.append({(e, s): g for e, w in sorted(merged.items()) for s, g in signed_digits(w)})
        self.counts: dict[_Pattern, int] = {}
        for digits in self.digits:
            for a, b in combinations(sorted(digits), 2):
                key = _pattern((*a, digits[a]), (*b, digits[b]))[0]
                self.counts[key] = self.counts.get(key, 0) + 1
        self.heap = [(-c, p) for p, c in self.counts.items() if c > 1]
        heapq.heapify(self.heap)

    def _update(self, k: int, digit: tuple[int, int], sign: int, step: int) -> None:
        """Count (``step`` 1) or uncount (-1) the pairs ``digit`` of output ``k`` makes with the others."""
        digits = self.digits[k]
        for other, other_sign in digits.items():
            if other == digit:
                continue
            key = _pattern((*digit, sign), (*other, other_sign))[0]
            count = self.counts.get(key, 0) + step
            self.counts[key] = count
            if step > 0 and count > 1:
                heapq.heappush(self.heap, (-count, key))

    def occurrences(self, pattern: _Pattern) -> list[tuple[int, int, int]]:
        """Where ``pattern`` occurs, ``(output, shift, sign)``, no digit used twice (the lowest shifts first)."""
        a, b, delta, relation = pattern
        found = []
        for k, digits in enumerate(self.digits):
            used: set[tuple[int, int]] = set()
            for operand, shift in sorted(d for d in digits if d[0] == a):
                partner = (b, shift + delta)
                if (operand, shift) in used or partner in used or partner == (operand, shift):
                    continue
                sign = digits[(operand, shift)]
                if digits.get(partner) == sign * relation:
                    used.update({(operand, shift), partner})
                    found.append((k, shift, sign))
        return found

    def replace(self, pattern: _Pattern, found: list[tuple[int, int, int]]) -> None:
        """A new operand for ``pattern`` (its range and depth), in place of each of its occurrences."""
        a, b, delta, relation = pattern
        scaled = sorted((relation * (self.low[b] << delta), relation * (self.high[b] << delta)))
        operand = len(self.low)
        self.low.append(self.low[a] + scaled[0])
        self.high.append(self.high[a] + scaled[1])
        self.depth.append(max(self.depth[a], self.depth[b]) + 1)
        for k, shift, sign in found:
            for digit, digit_sign in (((a, shift), sign), ((b, shift + delta), sign * relation)):
                self._update(k, digit, digit_sign, -1)
                del self.digits[k][digit]
            self.digits[k][(operand, shift)] = sign
            self._update(k, (operand, shift), sign, 1)


def _plain(terms: Sequence[Sequence[tuple[int, int]]], constants: Sequence[int]) -> SharedSums:
    """The sums as they are, each weight's signed digits its own term."""
    rows = [[(int(e), g << s) for e, w in row for s, g in signed_digits(int(w))] for row in terms]
    return SharedSums(
        (), tuple(tuple(e for e, _ in r) for r in rows), tuple(tuple(w for _, w in r) for r in rows),
        tuple(int(c) for c in constants),
    )  # fmt: skip


def share(terms: Sequence[Sequence[tuple[int, int]]], constants: Sequence[int], tops: Sequence[int]) -> SharedSums:
    """The sums ``constants[k] + sum(w * x[i] for i, w in terms[k])`` (``x[i]`` from 0 to ``tops[i]``) with the
    pairs of shifted codes that recur across them added once (see the module docstring).

    Example:
        >>> s = share([[(0, 3), (1, 5)], [(0, 6), (1, 10)]], [0, 0], [15, 15])  # 3a + 5b and twice that
        >>> [(t.terms, t.weights) for t in s.shared], s.terms, s.weights
        ([((0, 0), (1, -4)), ((1, 1), (1, 4)), ((2, 3), (1, -1))], ((4,), (4,)), ((-1,), (-2,)))
    """
    counts = [sum(len(signed_digits(int(w))) for _, w in row) for row in terms]
    if sum(c * (c - 1) // 2 for c in counts) > MAX_PAIRS:  # too many pairs to count: the plain sums
        return _plain(terms, constants)
    search = _Search(terms, tops)
    dead: set[_Pattern] = set()
    pairs: list[_Pattern] = []
    while search.heap:  # the pair found most often (then the lowest operands) first
        negative, pattern = heapq.heappop(search.heap)
        count = search.counts.get(pattern, 0)
        if pattern in dead or count < 2:
            continue  # a pair whose occurrences overlap, or one that no longer recurs
        if -negative != count:  # counted down since: back in at its count
            heapq.heappush(search.heap, (-count, pattern))
            continue
        found = search.occurrences(pattern)
        if len(found) < 2:
            dead.add(pattern)
            continue
        pairs.append(pattern)
        search.replace(pattern, found)
    n = len(tops)
    shared = [
        Shared((a, b), (1, relation << delta), search.low[n + j], search.high[n + j], search.depth[n + j])
        for j, (a, b, delta, relation) in enumerate(pairs)
    ]
    out_terms, out_weights = [], []
    for digits in search.digits:
        order = sorted(digits, key=lambda d: (d[1], d[0]))
        out_terms.append(tuple(o for o, _ in order))
        out_weights.append(tuple(digits[d] << d[1] for d in order))
    return SharedSums(tuple(shared), tuple(out_terms), tuple(out_weights), tuple(int(c) for c in constants))


def shared_sum_luts(
    terms: Sequence[Sequence[tuple[int, int]]], constants: Sequence[int], term_bits: Sequence[int],
    output_bits: Sequence[int], *, k: int = 6,
) -> int:  # fmt: skip
    """LUTs of the sums ``constants[o] + sum(w * x[i] for i, w in terms[o])`` built as :func:`share` builds them:
    each shared sum once, then each output's adder tree over what it reads (both counted by
    :func:`~iotable.lutcount.adder_tree_luts`); ``x[i]`` an unsigned code of ``term_bits[i]`` bits, output
    ``o`` of ``output_bits[o]`` bits.

    Example:
        >>> shared_sum_luts([[(0, 3), (1, 5)], [(0, 6), (1, 10)]], [0, 0], [4, 4], [8, 9])
        17
    """
    form = share(terms, constants, [(1 << int(b)) - 1 for b in term_bits])
    if not form.shared:  # nothing shared: each output's tree of its own weights, as before
        return sum(
            adder_tree_luts(
                [int(term_bits[i]) for i, _ in row], [w for _, w in row], constant=int(c), output_bits=int(b), k=k
            )
            for row, c, b in zip(terms, constants, output_bits)
            if row
        )
    bits = [int(b) for b in term_bits] + [s.width for s in form.shared]
    luts = sum(
        adder_tree_luts([bits[t] for t in s.terms], list(s.weights), output_bits=s.width, k=k) for s in form.shared
    )
    for row, weights, constant, width in zip(form.terms, form.weights, form.constants, output_bits):
        if row:
            luts += adder_tree_luts([bits[t] for t in row], list(weights), constant=constant, output_bits=width, k=k)
    return luts
