"""LogicNets' analytic LUT estimate, vectorized, and its generalisation to k-input LUTs: a pure function of
a table's address and code bits, which planning, summaries and the cost layer (:mod:`iotable.synth`) share.

LogicNets (Umuroglu et al., FPL 2020) estimates a table of X input bits and Y output bits at
``(Y/3) * (2**(X-4) - (-1)**X)`` LUT6: each output bit is a multiplexer tree whose 2**(X-6) leaves are LUT6
holding 64 rows each, joined by LUT6 used as 4:1 multiplexers (4 data and 2 select inputs). Counting that
tree level by level gives the formula exactly for X >= 6, and says what to do elsewhere:

- X <= k: one LUT per output bit (the formula would give 1 at X = 5 and 6, but 0 at X = 4 and fractions
  below); a table of no input bit is a constant and costs nothing.
- any k >= 3: 2**(X-k) leaves, then multiplexer levels of s select bits each, s the largest with
  ``2**s + s <= k`` (a LUT of k inputs holds a 2**s:1 multiplexer): ``sum(2**max(X-k-s*i, 0))`` over
  ``i = 0 .. ceil((X-k)/s)``. For k = 6 (s = 2) that is the LogicNets formula.

Arithmetic is not a table: an adder tree, a comparator tree and comparisons against constants cost what their
logic costs, which :func:`adder_tree_luts`, :func:`comparator_tree_luts` and :func:`threshold_luts` count as
an FPGA's synthesis maps them (LUTs beside a carry chain, one LUT per sum bit of a two-operand adder; see
``docs/hardware.md``, "The cost of arithmetic").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import SynthError

__all__ = ["adder_tree_luts", "check_k", "comparator_tree_luts", "lut_estimate", "signed_digits", "threshold_luts"]


def check_k(k: Any, *, what: str) -> int:
    """``k`` as an int from 3 to 12 (LUT inputs), else a :class:`SynthError`."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 3 <= k <= 12:
        msg = f"{what}: k (inputs per LUT) must be an integer from 3 to 12, received {k!r}; FPGAs use 4 or 6"
        raise SynthError(msg)
    return int(k)


def _bits_array(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind not in "iu" or (array.size and array.min() < 0):
        msg = f"lut_estimate: {name} must be non-negative integers (a number or an array), received {value!r}"
        raise SynthError(msg)
    return array.astype(np.int64)


def lut_estimate(input_bits: Any, output_bits: Any, *, k: int = 6) -> Any:
    """LogicNets' estimate of the k-input LUTs a table of ``input_bits`` and ``output_bits`` costs.

    For k = 6 and ``input_bits >= 6`` this is ``(Y/3) * (2**(X-4) - (-1)**X)``; smaller tables cost one
    LUT per output bit, and other ``k`` use the same multiplexer-tree count (see the module docstring).
    Vectorized: arrays broadcast, and the result is an int64 array (a Python int for two numbers).

    Example:
        >>> lut_estimate(12, 2), lut_estimate(16, 2), lut_estimate(4, 3)
        (170, 2730, 3)
        >>> lut_estimate([6, 7, 8, 9], 1).tolist()
        [1, 3, 5, 11]
        >>> lut_estimate(8, 1, k=4)
        31
    """
    k = check_k(k, what="lut_estimate")
    x, y = np.broadcast_arrays(_bits_array(input_bits, "input_bits"), _bits_array(output_bits, "output_bits"))
    if x.size and int(x.max()) - k > 61:
        msg = (
            f"lut_estimate: {int(x.max())} input bits give more LUTs than a 64-bit integer holds; "
            f"expected at most {k + 61}"
        )
        raise SynthError(msg)
    select = max(s for s in range(1, k) if 2**s + s <= k)  # select bits of the widest mux one LUT holds
    rest = np.maximum(x - k, 0)
    per_bit = np.zeros(x.shape, dtype=np.int64)
    levels = int(-(-rest.max() // select)) if rest.size else 0
    for i in range(levels + 1):  # a loop over tree levels (at most ~60), vectorized over the tables
        per_bit += np.where(i <= -(-rest // select), np.int64(1) << np.maximum(rest - select * i, 0), 0)
    per_bit = np.where(x == 0, 0, per_bit)
    result = per_bit * y
    if np.ndim(input_bits) == 0 and np.ndim(output_bits) == 0:
        return int(result)
    return result


# -- arithmetic ---------------------------------------------------------------------------------------------------


def _check_counts(values: Sequence[Any], name: str, what: str, *, minimum: int) -> list[int]:
    """``values`` as Python ints of at least ``minimum`` each, else a :class:`SynthError` naming ``name``."""
    found = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            msg = f"{what}: {name} must be integers >= {minimum}, received {list(values)!r}"
            raise SynthError(msg)
        found.append(int(value))
    return found


def signed_digits(weight: int) -> list[tuple[int, int]]:
    """The nonzero digits of ``weight`` in canonical signed-digit form, ``(position, +1 or -1)``: the fewest
    shifted copies of a term whose sum and difference make ``weight`` times it (``7 = 8 - 1``: two).

    Example:
        >>> signed_digits(7), signed_digits(-2), signed_digits(5)
        ([(0, -1), (3, 1)], [(1, -1)], [(0, 1), (2, 1)])
    """
    digits, position = [], 0
    while weight:
        if weight & 1:
            digit = 2 - (weight & 3)  # +1 where the next bit is 0, -1 where it is 1 (a run of ones)
            digits.append((position, digit))
            weight -= digit
        weight >>= 1
        position += 1
    return digits


def _span(low: int, high: int) -> int:
    """Bits of a two's complement field holding every integer from ``low`` to ``high`` (unsigned where
    ``low >= 0``)."""
    if low >= 0:
        return max(high, 0).bit_length()
    return 1 + max(high.bit_length(), (-low - 1).bit_length())


def adder_tree_luts(
    term_bits: Sequence[int], weights: Sequence[int], *, constant: int = 0, output_bits: int, k: int = 6
) -> int:
    """LUTs of an adder tree: ``constant + sum(weights[j] * x[j])``, ``x[j]`` an unsigned code of
    ``term_bits[j]`` bits, the result's ``output_bits`` low bits (the code; the sum is known to fit them).

    The count is what a synthesis tool maps onto LUTs beside a carry chain (Xilinx's adders): one LUT per sum
    bit of each two-operand adder, the carry out of its top bit free. A weight of ``+-2**s`` is a shift (wires)
    and, negative, a subtraction (the same LUTs); any other weight is shift-and-add, one shifted copy of the
    term per nonzero digit of its canonical signed-digit form (``3 = 4 - 1``, ``7 = 8 - 1``). A nonzero
    constant is one more operand. The operands are added pairwise, the two narrowest first (as a Huffman tree:
    the tree of exactly the widths needed), each partial sum as wide as its range of values needs and never
    wider than ``output_bits`` (the sum is computed modulo ``2**output_bits``, which is exact because the
    result fits). An adder whose operands share no bit position (one's bits all below the other's) is wires.
    Logic of few input bits is a table to synthesis: where :func:`lut_estimate` of all the input bits and
    ``output_bits`` is fewer (at most k input bits: one LUT per output bit), that is the count.

    Example:
        >>> adder_tree_luts([1] * 8, [1] * 8, output_bits=4)  # a popcount of 8 bits: 4 + 2 * 2 + 3
        11
        >>> adder_tree_luts([4, 4], [1, 4], output_bits=7)  # x + 4y: bits 2 to 5 (bits 0, 1 are x's)
        4
        >>> adder_tree_luts([4], [-1], constant=15, output_bits=4)  # 15 - x
        4
    """
    what = "adder_tree_luts"
    check_k(k, what=what)
    bits_list = _check_counts(term_bits, "term_bits", what, minimum=1)
    (width,) = _check_counts([output_bits], "output_bits", what, minimum=1)
    weight_list = _check_counts(weights, "weights", what, minimum=-(2**62))
    if len(weight_list) != len(bits_list):
        msg = f"{what}: {len(weight_list)} weights for {len(bits_list)} terms; give one weight per term"
        raise SynthError(msg)
    # An operand: (its span's top bit, its lowest bit that can be 1, its lowest value, its highest value).
    operands: list[tuple[int, int, int, int]] = []
    for bits, weight in zip(bits_list, weight_list):
        top = (1 << bits) - 1
        for position, digit in signed_digits(weight):
            low, high = sorted((0, digit * top << position))
            operands.append((min(width, _span(low, high)), position, low, high))
    constant %= 1 << width
    if constant:
        operands.append((constant.bit_length(), (constant & -constant).bit_length() - 1, constant, constant))
    heapq.heapify(operands)
    luts = 0
    while len(operands) > 1:
        a_top, a_low, a_min, a_max = heapq.heappop(operands)
        b_top, b_low, b_min, b_max = heapq.heappop(operands)
        low, high = a_min + b_min, a_max + b_max
        top = min(width, _span(low, high))
        floor = max(a_low, b_low)
        unsigned = a_min >= 0 and b_min >= 0
        if unsigned and min(a_top, b_top) <= floor:
            pass  # no bit position in common: the sum is the operands' bits side by side
        elif unsigned:
            luts += max(0, min(width, max(a_top, b_top)) - floor)  # the top carry is the chain's carry out
        else:
            luts += max(0, top - floor)
        heapq.heappush(operands, (top, min(a_low, b_low), low, high))
    return _or_table(luts, sum(bits_list), width, k)


def _or_table(luts: int, input_bits: int, output_bits: int, k: int) -> int:
    """``luts``, or the function's count as a table of ``input_bits`` (:func:`lut_estimate`) where that is
    fewer: synthesis maps logic of few inputs (at most k: one LUT per output bit) as the table it is."""
    if input_bits > 2 * k + 8:  # a table that wide is never the smaller
        return int(luts)
    return int(min(luts, lut_estimate(input_bits, output_bits, k=k)))


def _compare_luts(bits: int, k: int) -> int:
    """LUTs of one comparison of two ``bits``-bit codes on a carry chain: each LUT compares a few bit pairs
    (2 at k = 6, one output for propagate and one for generate)."""
    return -(-bits // max(1, (k - 2) // 2))


def comparator_tree_luts(candidates: int, bits: int, *, k: int = 6) -> int:
    """LUTs of an argmax of ``candidates`` codes of ``bits`` bits: a tournament of comparators, ties to the
    first.

    Each match compares the two winners so far (:func:`_compare_luts`: ``ceil(bits / 2)`` LUT6 on a carry
    chain) and passes the winner's code on through a 2:1 multiplexer (one LUT per bit; not after the final
    match, whose code nothing reads) and its index (one LUT per index bit it had; the comparison itself is the
    new top index bit). An odd candidate waits for the next round. Where fewer, the count of the function as a
    table (see :func:`adder_tree_luts`).

    Example:
        >>> comparator_tree_luts(2, 8)  # one comparison: its result is the index
        4
        >>> comparator_tree_luts(2, 2)  # 4 input bits: one LUT
        1
        >>> comparator_tree_luts(10, 8)
        107
    """
    what = "comparator_tree_luts"
    k = check_k(k, what=what)
    n, b = _check_counts([candidates, bits], "candidates and bits", what, minimum=1)
    players = [0] * n  # index bits each winner so far carries
    luts = 0
    while len(players) > 1:
        final = len(players) == 2
        next_round = []
        for left, right in zip(players[0::2], players[1::2]):
            luts += _compare_luts(b, k) + (0 if final else b) + max(left, right)
            next_round.append(max(left, right) + 1)
        if len(players) % 2:
            next_round.append(players[-1])
        players = next_round
    return _or_table(luts, n * b, max(1, (n - 1).bit_length()), k)


def threshold_luts(bits: int, thresholds: int, *, output_bits: int, k: int = 6) -> int:
    """LUTs of a step function of a ``bits``-bit code: ``thresholds`` comparisons against constants, their
    results (a thermometer code) encoded as an ``output_bits``-bit code; or, where fewer, the function as a
    table of ``bits`` address bits (:func:`lut_estimate`), which synthesis finds for small codes.

    A comparison of a code against a constant is a chain of LUTs each reading ``k - 1`` new bits and the
    chain so far: ``ceil((bits - 1) / (k - 1))`` (one LUT up to k bits; a 1-bit code is its own comparison).
    Each output bit reads the thermometer bits: one LUT up to ``k`` of them, a chain beyond; one threshold
    needs no encoder (its comparison is the bit).

    Example:
        >>> threshold_luts(12, 3, output_bits=2)  # 3 comparisons of 3 LUTs, 2 encoder LUTs
        11
        >>> threshold_luts(4, 3, output_bits=2)  # a 4-bit code: the table is smaller
        2
    """
    what = "threshold_luts"
    k = check_k(k, what=what)
    b, t, w = _check_counts([bits, thresholds, output_bits], "bits, thresholds and output_bits", what, minimum=0)
    if b == 0 or t == 0:
        return 0
    compare = 0 if b == 1 else math.ceil((b - 1) / (k - 1))
    encode = 0 if t == 1 else w * max(1, math.ceil((t - 1) / (k - 1)))
    return _or_table(t * compare + encode, b, w, k)
