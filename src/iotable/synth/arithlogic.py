"""Arithmetic as logic, written in Python for ABC to map: ripple-carry adders, comparators and multiplexers made
of gates of at most three inputs, as a BLIF model (:class:`Circuit`).

Every gate is a truth table over its inputs. Constants are folded as the circuit is built (a full adder with a
constant 0 input is a half adder, with two it is a wire), inputs a gate does not depend on are dropped, and equal
gates are made once, so that the logic holds exactly the bits that vary: a zero-extended operand costs nothing
above its top bit, a term shifted left nothing below it. What is left is handed to ABC (:mod:`.arithmap`), whose
mapping flow restructures it; the logic here only has to be correct and free of constants.

Vectors of bits are lists, least significant bit first; a bit is a signal's name or the constant ``0`` or ``1``.
Sums are computed modulo ``2**width``, the output code's width: exact, because the result is known to fit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from ..lutcount import signed_digits

__all__ = ["Bit", "Circuit"]

#: One bit: a signal's name, or the constant 0 or 1.
Bit = str | int


def _table(fn: Callable[..., int], arity: int) -> tuple[int, ...]:
    """The truth table of ``fn`` over ``arity`` inputs, the first input the most significant bit of the row."""
    return tuple(int(fn(*((row >> (arity - 1 - i)) & 1 for i in range(arity)))) & 1 for row in range(1 << arity))


_XOR3 = _table(lambda a, b, c: a ^ b ^ c, 3)
_MAJ3 = _table(lambda a, b, c: (a & b) | (a & c) | (b & c), 3)
_GE_STEP = _table(lambda a, b, c: (a & (1 - b)) | (a & c) | ((1 - b) & c), 3)  # carry of a + ~b + c
_MUX = _table(lambda s, a, b: b if s else a, 3)
_NOT = _table(lambda a: 1 - a, 1)


class Circuit:
    """A combinational circuit under construction: gates of at most three inputs over named input bits."""

    def __init__(self, inputs: Sequence[str]) -> None:
        self.inputs = list(inputs)
        self.lines: list[str] = []
        self._made: dict[tuple[tuple[str, ...], tuple[int, ...]], str] = {}

    # -- gates ------------------------------------------------------------------------------------------------

    def gate(self, table: tuple[int, ...], *args: Bit) -> Bit:
        """The bit ``table`` gives for ``args`` (the first the most significant), constants folded, unused and
        repeated inputs dropped; a gate equal to one made before is that gate."""
        names: list[str] = []
        for arg in args:  # fold constants and repeated signals, keeping the rows they select
            if isinstance(arg, int):
                table = _fix(table, len(names), arg)
            elif arg in names:
                table = _same(table, names.index(arg), len(names))
            else:
                names.append(arg)
        for i in reversed(range(len(names))):  # drop inputs the function does not depend on
            if _fix(table, i, 0) == _fix(table, i, 1):
                table = _fix(table, i, 0)
                del names[i]
        if not names:
            return table[0]
        if len(names) == 1 and table == (0, 1):
            return names[0]
        key = (tuple(names), table)
        if key not in self._made:
            out = f"g{len(self._made)}"
            rows = [f"{row:0{len(names)}b} 1" for row, value in enumerate(table) if value]
            self.lines.append(".names " + " ".join(names) + f" {out}\n" + "\n".join(rows))
            self._made[key] = out
        return self._made[key]

    def invert(self, bits: Sequence[Bit], width: int) -> list[Bit]:
        """``~v`` over ``width`` bits (``v`` zero-extended)."""
        return [self.gate(_NOT, bits[i]) if i < len(bits) else 1 for i in range(width)]

    # -- arithmetic -------------------------------------------------------------------------------------------

    def add(self, a: Sequence[Bit], b: Sequence[Bit], width: int, carry: Bit = 0) -> list[Bit]:
        """``a + b + carry`` modulo ``2**width``: a ripple-carry adder of full adders."""
        out = []
        for i in range(width):
            x, y = a[i] if i < len(a) else 0, b[i] if i < len(b) else 0
            out.append(self.gate(_XOR3, x, y, carry))
            carry = self.gate(_MAJ3, x, y, carry)
        return out

    def at_least(self, a: Sequence[Bit], b: Sequence[Bit]) -> Bit:
        """``a >= b`` for unsigned ``a`` and ``b`` (constants or signals): the carry out of ``a + ~b + 1``."""
        carry: Bit = 1
        for i in range(max(len(a), len(b))):
            carry = self.gate(_GE_STEP, a[i] if i < len(a) else 0, b[i] if i < len(b) else 0, carry)
        return carry

    def weighted_sum(self, terms: Sequence[tuple[Sequence[Bit], int]], constant: int, width: int) -> list[Bit]:
        """``constant + sum(weight * v)`` modulo ``2**width`` for unsigned vectors ``v``: each term as shifted
        copies of ``v`` (its weight's signed digits; a negative one as ``~v + 1``), the copies added pairwise,
        the two narrowest first."""
        operands: list[tuple[int, int, list[Bit]]] = []
        for bits, weight in terms:
            for position, digit in signed_digits(weight):
                shifted: list[Bit] = [*([0] * position), *bits]
                if digit < 0:
                    shifted = self.invert(shifted[:width], width)
                    constant += 1  # ~(v << p) + 1 is -(v << p); the +1 joins the constant
                operands.append((_top(shifted[:width]), len(operands), shifted[:width]))
        constant %= 1 << width
        if constant or not operands:
            bits_of: list[Bit] = [(constant >> i) & 1 for i in range(width)]
            operands.append((_top(bits_of), len(operands), bits_of))
        heapq.heapify(operands)
        count = len(operands)
        while len(operands) > 1:
            _, _, a = heapq.heappop(operands)
            _, _, b = heapq.heappop(operands)
            total = self.add(a, b, width)
            heapq.heappush(operands, (_top(total), count, total))
            count += 1
        (_, _, result) = operands[0]
        return (list(result) + [0] * width)[:width]

    def argmax(self, candidates: Sequence[Sequence[Bit]], width: int) -> list[Bit]:
        """The index (``width`` bits) of the largest of ``candidates`` (unsigned), the first of equal ones: a
        tournament of comparators, each passing its winner's value and index on through multiplexers."""
        players: list[tuple[list[Bit], list[Bit]]] = [
            (list(c), [(i >> j) & 1 for j in range(width)]) for i, c in enumerate(candidates)
        ]
        while len(players) > 1:
            next_round: list[tuple[list[Bit], list[Bit]]] = []
            for (left, left_index), (right, right_index) in zip(players[0::2], players[1::2]):
                right_wins = self.gate(_NOT, self.at_least(left, right))  # the left, lower indices, wins ties
                value = [self.gate(_MUX, right_wins, x, y) for x, y in zip(left, right)]
                index = [self.gate(_MUX, right_wins, x, y) for x, y in zip(left_index, right_index)]
                next_round.append((value, index))
            if len(players) % 2:
                next_round.append(players[-1])
            players = next_round
        return players[0][1]

    def steps(
        self, code: Sequence[Bit], thresholds: Sequence[int], start: int, direction: int, width: int
    ) -> list[Bit]:
        """``start + direction * (the number of thresholds at most code)`` modulo ``2**width``: a comparison
        against each constant, the results counted."""
        compared = [self.at_least(code, [(t >> i) & 1 for i in range(max(t, 0).bit_length())]) for t in thresholds]
        compared = [1 if t <= 0 else bit for t, bit in zip(thresholds, compared)]
        return self.weighted_sum([([bit], direction) for bit in compared], start, width)

    # -- BLIF -------------------------------------------------------------------------------------------------

    def blif(self, outputs: Sequence[tuple[str, Bit]]) -> str:
        """The circuit as a BLIF model with ``outputs`` (each a name and the bit it carries)."""
        lines = ["# iotable arithmetic logic", ".model arith", ".inputs " + " ".join(self.inputs)]
        lines.append(".outputs " + " ".join(name for name, _ in outputs))
        lines += self.lines
        for name, bit in outputs:
            if isinstance(bit, int):
                lines.append(f".names {name}" + ("\n1" if bit else ""))
            else:
                lines.append(f".names {bit} {name}\n1 1")
        lines.append(".end")
        return "\n".join(lines) + "\n"


def _top(bits: Sequence[Bit]) -> int:
    """One more than the highest bit that is not the constant 0 (0 for a vector of zeros)."""
    return max((i + 1 for i, bit in enumerate(bits) if bit != 0), default=0)


def _fix(table: tuple[int, ...], i: int, value: int) -> tuple[int, ...]:
    """``table`` with input ``i`` (of its inputs, the first most significant) fixed to ``value``: one fewer input."""
    arity = (len(table) - 1).bit_length()
    shift = arity - 1 - i
    return tuple(v for row, v in enumerate(table) if (row >> shift) & 1 == value)


def _same(table: tuple[int, ...], i: int, j: int) -> tuple[int, ...]:
    """``table`` with input ``j`` tied to input ``i`` (``i < j``): the rows where both agree, input ``j``
    removed."""
    arity = (len(table) - 1).bit_length()
    si, sj = arity - 1 - i, arity - 1 - j
    return tuple(v for row, v in enumerate(table) if (row >> si) & 1 == (row >> sj) & 1)
