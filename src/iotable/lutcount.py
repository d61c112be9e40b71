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

__all__ = ["check_k", "lut_estimate"]


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
