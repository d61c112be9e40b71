"""A table's function on bits (:class:`iotable.lutnet.BitFunction`) handed to ABC: don't-cares spent, as BLIF.

The function, its bits and its care set are :mod:`iotable.lutnet`'s; this module completes it for the mapper.

Don't-cares are spent before ABC sees the function (ABC's mapping flow takes a completely specified
function): :func:`fill_dont_cares` assigns them so that the function's multiplexer tree (its BDD, in the
address order) shrinks. Top-down, level by level, a block whose two halves agree wherever both care is made
independent of that level's bit (both halves get the merged half): a subtree no data reaches disappears
into its sibling, and so do siblings that differ only on rows nobody uses. What is left is filled with 0.
Everything is whole-array numpy over all rows, a loop over the (at most 24) address bits only.
"""

from __future__ import annotations

import numpy as np

from ..bits import digits
from ..lutnet import BitFunction

__all__ = ["blif_text", "direct_blif", "fill_dont_cares"]


def fill_dont_cares(values: np.ndarray, care: np.ndarray) -> np.ndarray:
    """``values`` (output bits x bit addresses) with every don't-care assigned to shrink the mux tree.

    Top-down over the address bits (the most significant first): at level t the addresses form blocks of
    2**(n-t); a block whose halves agree wherever both care becomes the merged half twice (that bit no
    longer matters in it), care the union. Each output bit is filled on its own. Care rows keep their values.

    Example:
        >>> v = np.array([[1, 0, 0, 0]], np.uint8)  # address 0 -> 1, address 3 -> 0, 1 and 2 don't care
        >>> fill_dont_cares(v, np.array([True, False, False, True])).tolist()
        [[1, 0, 1, 0]]
    """
    values = values.copy()
    if values.shape[1] == 1:
        return values
    cared = np.broadcast_to(care, values.shape).copy()
    n = int(values.shape[1]).bit_length() - 1
    for level in range(n):
        half = 1 << (n - level - 1)
        v = values.reshape(values.shape[0], -1, 2, half)
        c = cared.reshape(values.shape[0], -1, 2, half)
        lo, hi, clo, chi = v[:, :, 0], v[:, :, 1], c[:, :, 0], c[:, :, 1]
        agree = ~((lo != hi) & clo & chi).any(axis=-1)  # (output bits, blocks)
        if not agree.any():
            continue
        merged = np.where(clo, lo, hi)
        union = clo | chi
        for side in (0, 1):  # both halves of every agreeing block become the merged half
            v[:, :, side][agree] = merged[agree]
            c[:, :, side][agree] = union[agree]
    return values


def blif_text(fn: BitFunction, values: np.ndarray, *, inputs: list[str] | None = None) -> bytes:
    """A BLIF model of the completely specified ``values`` (output bits x bit addresses): one ``.names`` per
    output bit over every address bit, listing the smaller of its on-set and off-set as minterms. ``inputs``
    names the address bits of ``values``, most significant first (default ``fn``'s, in its order)."""
    names_in, names_out = inputs if inputs is not None else fn.input_names(), fn.output_names()
    n = fn.input_bits
    parts = [
        b"# iotable table function, address bits most significant first\n.model table\n",
        (".inputs " + " ".join(names_in) + "\n.outputs " + " ".join(names_out) + "\n").encode(),
    ]
    minterm_bits = None
    for o, name in enumerate(names_out):
        ones = values[o].astype(bool)
        count = int(ones.sum())
        head = (".names " + " ".join(names_in) + f" {name}\n").encode()
        if count == 0:
            parts.append(f".names {name}\n".encode())
            continue
        if count == fn.space:
            parts.append(f".names {name}\n1\n".encode())
            continue
        if minterm_bits is None:  # every address in binary, one row of '0'/'1' bytes each
            addresses = np.arange(fn.space, dtype=np.int64)[:, None]
            minterm_bits = digits(addresses, [n]) + np.uint8(ord("0"))
        on = count <= fn.space // 2
        rows = minterm_bits[ones if on else ~ones]
        tail = np.frombuffer(b" 1\n" if on else b" 0\n", dtype=np.uint8)
        body = np.concatenate([rows, np.broadcast_to(tail, (len(rows), 3))], axis=1)
        parts += [head, body.tobytes()]
    parts.append(b".end\n")
    return b"".join(parts)


def direct_blif(fn: BitFunction, values: np.ndarray) -> str:
    """The LUT netlist of a function of at most k address bits, without a mapper: per output bit a constant,
    a wire, or one LUT over the address bits it depends on (its support), its on-set as the cover.

    The same count ABC gives such a table, in a fraction of its start-up time.
    """
    names_in, names_out = fn.input_names(), fn.output_names()
    n = fn.input_bits
    lines = ["# iotable: one LUT per output bit", ".model table", ".inputs " + " ".join(names_in)]
    lines.append(".outputs " + " ".join(names_out))
    cube = values.reshape(values.shape[0], *([2] * n))  # axis 1 + i is address bit i (most significant first)
    for o, name in enumerate(names_out):
        f = cube[o]
        support = [i for i in range(n) if not np.array_equal(np.take(f, 0, axis=i), np.take(f, 1, axis=i))]
        if not support:
            lines.append(f".names {name}" + ("\n1" if f.flat[0] else ""))
            continue
        reduced = f[tuple(slice(None) if i in support else 0 for i in range(n))].reshape(-1)
        if len(support) == 1 and reduced.tolist() == [0, 1]:
            lines.append(f".names {names_in[support[0]]} {name}\n1 1")
            continue
        ones = np.flatnonzero(reduced)
        rows = digits(ones[:, None].astype(np.int64), [len(support)]) + np.uint8(ord("0"))
        tail = np.broadcast_to(np.frombuffer(b" 1\n", dtype=np.uint8), (len(rows), 3))
        cover = np.concatenate([rows, tail], axis=1).tobytes().decode().rstrip("\n")
        lines.append(".names " + " ".join(names_in[i] for i in support) + f" {name}\n{cover}")
    lines.append(".end")
    return "\n".join(lines) + "\n"
