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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import SynthError

__all__ = ["adder_estimate", "argmax_estimate", "check_k", "lut_estimate", "threshold_estimate"]


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


def _term_widths(bits: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, int]:
    """The width of each weighted term (its code's bits, plus the weight's, plus a sign bit where negative) and
    the two-operand adds its weight costs as shifts and adds (a weight of +-2**j is a shift)."""
    magnitude = np.abs(weights)
    shift_adds = np.array([bin(int(w)).count("1") - 1 if w else 0 for w in magnitude.tolist()], dtype=np.int64)
    widths = bits + np.where(magnitude > 0, np.floor(np.log2(np.maximum(magnitude, 1))).astype(np.int64), 0)
    widths = widths + (weights < 0)
    return widths, int((shift_adds * widths).sum())


def adder_estimate(term_bits: Any, weights: Any = None) -> int:
    """LUTs of an adder tree summing codes of ``term_bits`` bits times integer ``weights`` (default all ones):
    one LUT per result bit of every two-operand add (a LUT and its carry-chain bit), the terms paired level by
    level, each add one bit wider than its wider operand; a weight that is not a power of two costs the
    shift-and-add of its set bits. A popcount of ``n`` bits costs about ``2 n`` LUTs.

    Example:
        >>> adder_estimate([1] * 4), adder_estimate([1] * 100)
        (7, 293)
        >>> adder_estimate([4, 4], [3, -1])
        11
    """
    bits = np.asarray(term_bits, dtype=np.int64).reshape(-1)
    weights = np.ones_like(bits) if weights is None else np.asarray(weights, dtype=np.int64).reshape(-1)
    keep = weights != 0
    widths, total = _term_widths(bits[keep], weights[keep])
    level = sorted(widths.tolist())
    while len(level) > 1:  # a loop over tree levels (log2 of the terms), not over rows
        pairs = [max(a, b) + 1 for a, b in zip(level[0::2], level[1::2])]
        total += sum(pairs)
        level = sorted(pairs + level[len(pairs) * 2 :])
    return total


def threshold_estimate(input_bits: int, steps: int, output_bits: int, *, k: int = 6) -> int:
    """LUTs of a monotone step function of a code of ``input_bits`` bits with ``steps`` thresholds into
    ``output_bits`` bits: a comparator per threshold (a constant compare, ``ceil(input_bits / (k - 1))`` LUTs
    with the carry chain) and the count of those passed as a table of ``steps`` bits (:func:`lut_estimate`).

    Example:
        >>> threshold_estimate(12, 7, 3), threshold_estimate(4, 1, 1)
        (30, 2)
    """
    k = check_k(k, what="threshold_estimate")
    compare = -(-int(input_bits) // (k - 1))
    return int(steps) * compare + int(lut_estimate(int(steps), int(output_bits), k=k))


def argmax_estimate(count: int, bits: int) -> int:
    """LUTs of an argmax of ``count`` codes of ``bits`` bits (ties to the first): a tree of ``count - 1``
    compare-and-select cells, each a ``bits``-bit comparator (one LUT per bit with the carry chain) and
    multiplexers for the winning code and index (one LUT per bit of each).

    Example:
        >>> argmax_estimate(10, 8)
        180
    """
    index_bits = max(1, int(count - 1).bit_length())
    return max(0, int(count) - 1) * (2 * int(bits) + index_bits)
