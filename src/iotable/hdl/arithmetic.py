"""The arithmetic blocks a node kind builds (sums, argmax, thresholds): how a deep sum is split into levels of
adder trees, and the blocks appended to a netlist, with the bench's names for their outputs.

A sum of many terms (a popcount of a hundred bits) is split into levels of at most :data:`TREE_TERMS` terms per
adder tree, so that a register can follow each level: level ``l`` adds groups of the operands of level ``l - 1``
(level 0's are the codes the node reads) into **partial sums**. A partial sum is kept as a value from 0 up,
``S - low`` for a group sum ``S`` of smallest value ``low`` (what the group's negative terms can take away),
in exactly the bits its largest value needs (at most the output's: the sum is wanted modulo the output's
range, in which it lies); the lows are added back, with the node's constant, at the last level. Every element
is an unsigned field, as everywhere in a netlist.

Within a level, the pairs of shifted operands that recur across its sums (and within one) are added once and
shared (:func:`~iotable.subexpressions.share`): an integer dense layer's outputs, whose weights have many
signed digits in common, cost far fewer adders than one tree per output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..subexpressions import share
from .netlist import Adder, Argmax, Netlist, Thresholds

__all__ = ["TREE_TERMS", "SumLevel", "add_adder", "add_argmax", "add_thresholds", "sum_levels"]

#: The most terms one adder tree of a pipelined sum adds (four levels of two-input adders): a deeper sum is
#: split into levels with a register after each (:func:`sum_levels`).
TREE_TERMS = 16


@dataclass(frozen=True)
class SumLevel:
    """One level of a sum: adder trees over the operands of the level before (the node's codes for the first);
    their outputs follow the operands it passes on unchanged (``keep``) in the next level's operands."""

    terms: list[list[int]]  # for each adder tree, the operands it adds
    weights: list[list[int]]
    constants: list[int]
    widths: list[int]
    keep: list[int]  # operands passed on, in order, before the adder trees' outputs


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _level(
    pending: list[list[tuple[int, int]]], added: list[int], top: list[int], widths: list[int], group: int
) -> tuple[SumLevel, list[list[tuple[int, int]]], list[int]]:
    """One level of partial sums over ``pending`` (each sum's terms, operands of largest values ``top``); the
    lows the partial sums leave out are added to ``added``. Returns the level, the terms of the next one and
    the largest values of its operands."""
    level = SumLevel([], [], [], [], [])
    parts: list[list[tuple[str, int]]] = []
    for k, sum_terms in enumerate(pending):
        part = []
        for chunk in _chunks(sum_terms, group):
            if len(chunk) == 1 and chunk[0][1] == 1:  # a lone operand: passed on
                level.keep.append(chunk[0][0])
                part.append(("keep", len(level.keep) - 1))
                continue
            low = sum(min(0, w * top[i]) for i, w in chunk)
            high = sum(max(0, w * top[i]) for i, w in chunk)
            level.terms.append([i for i, _ in chunk])
            level.weights.append([w for _, w in chunk])
            level.constants.append(-low)
            level.widths.append(min(int(widths[k]), max((high - low).bit_length(), 1)))
            added[k] += low
            part.append(("sum", len(level.terms) - 1))
        parts.append(part)
    kept = len(level.keep)
    following = [[(j if what == "keep" else kept + j, 1) for what, j in part] for part in parts]
    return level, following, [top[i] for i in level.keep] + [(1 << w) - 1 for w in level.widths]


def sum_levels(
    terms: list[list[tuple[int, int]]], constants: list[int], x_widths: np.ndarray, widths: list[int], group: int
) -> list[SumLevel]:
    """The levels of the sums ``constants[k] + sum(w * x[i] for i, w in terms[k])``, each output of
    ``widths[k]`` bits, the ``x`` elements of ``x_widths`` bits: one level when every sum has at most ``group``
    terms (or ``group`` is 0), else levels of trees of at most ``group`` terms, the last giving the outputs.

    Example:
        >>> levels = sum_levels([[(i, 1) for i in range(40)]], [0], np.ones(40, int), [6], 16)
        >>> [(level.widths, level.keep) for level in levels]
        [([5, 5, 4], []), ([6], [])]
    """
    top = [(1 << int(w)) - 1 for w in x_widths]  # the largest value of each operand
    pending, added = [list(t) for t in terms], [int(c) for c in constants]
    levels: list[SumLevel] = []
    while group and any(len(t) > group for t in pending):
        level, pending, top = _level(pending, added, top, widths, group)
        levels.append(level)
    last = SumLevel([[i for i, _ in t] for t in pending], [[w for _, w in t] for t in pending], added, list(widths), [])
    return [*levels, last]


def _local(x_ids: np.ndarray, rows: list[list[int]]) -> tuple[np.ndarray, list[list[int]]]:
    """The elements the rows read (each once, in order of first use) and the rows as indices into them."""
    used = list(dict.fromkeys(i for row in rows for i in row)) or [0]  # a port of at least one element
    where = {i: j for j, i in enumerate(used)}
    return np.asarray(x_ids, np.int64)[used], [[where[i] for i in row] for row in rows]


def _block_output(netlist: Netlist, name: str, widths: list[int], stage: int, origins: list[str]) -> np.ndarray:
    ids = netlist.signal(name, np.asarray(widths, np.int64), stage=stage)
    for element, origin in zip(ids.tolist(), origins):
        netlist.origin[int(element)] = origin
    return ids


def add_adder(
    netlist: Netlist, node: str, index: int, operands: np.ndarray, level: SumLevel, *, stage: int,
    at: tuple[int, int], origins: list[str],
) -> np.ndarray:  # fmt: skip
    """An :class:`~.netlist.Adder` of ``level``'s trees over ``operands`` (element ids), the ``at[0]``-th of
    ``at[1]`` levels of the ``index``-th arithmetic block; its output's ids (``origins``: the bench's names of
    the last level's outputs)."""
    x_ids, terms = _local(operands, level.terms)
    if at[0] < at[1] - 1:
        origins = [f"node '{node}' partial sum {k} of level {at[0] + 1}" for k in range(len(terms))]
    name = f"arith{index}" if at[1] == 1 else f"arith{index}_l{at[0]}"
    ids = _block_output(netlist, f"{name}_y", level.widths, stage, origins)
    x_widths = netlist.width[x_ids]
    form = share([list(zip(t, w)) for t, w in zip(terms, level.weights)], level.constants,
                 [(1 << int(b)) - 1 for b in x_widths])  # fmt: skip
    netlist.blocks.append(
        Adder(f"{netlist.top}_{name}", node, x_ids, x_widths, [list(t) for t in form.terms],
              [list(w) for w in form.weights], list(form.constants), np.asarray(level.widths, np.int64),
              len(netlist.signals) - 1, at[0], at[1], form.shared)
    )  # fmt: skip
    return ids


def add_argmax(
    netlist: Netlist, node: str, index: int, operands: np.ndarray, groups: list[list[int]], widths: list[int], *,
    stage: int, origins: list[str],
) -> np.ndarray:  # fmt: skip
    """An :class:`~.netlist.Argmax` of ``groups`` (indices into ``operands``, element ids); its output's ids."""
    x_ids, local = _local(operands, groups)
    ids = _block_output(netlist, f"arith{index}_y", widths, stage, origins)
    netlist.blocks.append(
        Argmax(f"{netlist.top}_arith{index}", node, x_ids, netlist.width[x_ids], local,
               np.asarray(widths, np.int64), len(netlist.signals) - 1)
    )  # fmt: skip
    return ids


def add_thresholds(
    netlist: Netlist, node: str, index: int, operands: np.ndarray,
    rows: list[tuple[int, tuple[int, ...], tuple[int, ...], int]], widths: list[int], *, stage: int,
    origins: list[str],
) -> np.ndarray:  # fmt: skip
    """A :class:`~.netlist.Thresholds` block of ``rows`` (elements as indices into ``operands``); its output's
    ids."""
    x_ids, local = _local(operands, [[row[0]] for row in rows])
    rows = [(r[0], *row[1:]) for r, row in zip(local, rows)]
    ids = _block_output(netlist, f"arith{index}_y", widths, stage, origins)
    netlist.blocks.append(
        Thresholds(f"{netlist.top}_arith{index}", node, x_ids, netlist.width[x_ids], rows,
                   np.asarray(widths, np.int64), len(netlist.signals) - 1)
    )  # fmt: skip
    return ids
