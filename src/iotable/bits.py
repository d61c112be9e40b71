"""The hardware bit contract: how codes become bits, in one place.

Every quantized element is a code ``0..n-1`` of its domain; in hardware it is an unsigned field of
:func:`width` bits: ``ceil(log2 n)``, and 1 for a one-value domain (a wire always has a bit). Fields are packed
**most significant first**: in a packed word of fields ``w0, w1, ...``, field 0 holds the highest bits. A
table's address is its inputs' fields packed this way (input 0 most significant, as :meth:`IOTable.lookup
<iotable.IOTable.lookup>` packs addresses), its output word its output codes packed the same way (output 0
most significant). Planning, the PLA writer, the HDL generators and the cost estimates all read these
functions; nothing else restates them.

Example:
    >>> from iotable import Domain
    >>> widths([Domain.uniform(2), Domain([0.0]), Domain.uniform(3)])  # 4 values, one value, 8 values
    (2, 1, 3)
    >>> offsets((2, 1, 3))
    (4, 3, 0)
    >>> pack(np.array([[3, 0, 5]]), (2, 1, 3)).tolist()
    [53]
    >>> unpack(np.array([53]), (2, 1, 3)).tolist()
    [[3, 0, 5]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .domain import Domain

__all__ = ["digits", "field_width", "offsets", "pack", "table_bits", "unpack", "width", "widths"]


def field_width(size: int) -> int:
    """Bits of the field holding a code of a domain of ``size`` values: ``max(1, ceil(log2 size))``.

    Example:
        >>> [field_width(n) for n in (1, 2, 3, 4, 5, 256)]
        [1, 1, 2, 2, 3, 8]
    """
    return max((int(size) - 1).bit_length(), 1)


def width(domain: Domain) -> int:
    """Bits of the hardware field holding a code of ``domain`` (:func:`field_width` of its size)."""
    return field_width(len(domain))


def widths(domains: Iterable[Domain]) -> tuple[int, ...]:
    """:func:`width` of each domain, in order."""
    return tuple(width(d) for d in domains)


def offsets(field_widths: Sequence[int]) -> tuple[int, ...]:
    """The lowest bit of each field in a word packing ``field_widths`` most significant first."""
    ends = np.cumsum(np.asarray(field_widths, dtype=np.int64)[::-1])[::-1]
    return tuple(int(end - w) for end, w in zip(ends, field_widths))


def pack(codes: Any, field_widths: Sequence[int]) -> np.ndarray:
    """Pack each row of ``codes`` ``(N, fields)`` into one word, field 0 most significant (``int64``, so at
    most 63 bits in all).

    Raises:
        ValueError: the fields take more than 63 bits.
    """
    field_widths = tuple(int(w) for w in field_widths)
    if sum(field_widths) > 63:
        msg = f"pack: fields of {sum(field_widths)} bits do not fit an int64 word (63 bits at most)"
        raise ValueError(msg)
    codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(field_widths))
    shifts = np.asarray(offsets(field_widths), dtype=np.int64)
    return (codes << shifts).sum(axis=1) if field_widths else np.zeros(len(codes), np.int64)


def unpack(words: Any, field_widths: Sequence[int]) -> np.ndarray:
    """The fields of each word, ``(N, fields)`` ``int64``: the inverse of :func:`pack`."""
    words = np.asarray(words, dtype=np.int64).reshape(-1, 1)
    shifts = np.asarray(offsets(field_widths), dtype=np.int64)
    masks = (np.int64(1) << np.asarray(field_widths, dtype=np.int64)) - 1
    return (words >> shifts) & masks


def digits(codes: Any, field_widths: Sequence[int]) -> np.ndarray:
    """The binary digits of each row of ``codes`` ``(N, fields)``, every field most significant bit first and
    field 0 first: ``uint8`` ``(N, sum(field_widths))``, bit ``i`` of the row is character ``i`` of its packed
    word written in binary. No limit on the total width (a PLA row or an HDL literal may be wide).

    Example:
        >>> digits(np.array([[3, 0, 5]]), (2, 1, 3)).tolist()
        [[1, 1, 0, 1, 0, 1]]
    """
    codes = np.asarray(codes)
    field_widths = tuple(int(w) for w in field_widths)
    if not field_widths:
        return np.zeros((len(codes), 0), np.uint8)
    # each code as a big-endian word of the smallest size that holds the widest field, unpacked to bits in one
    # call: about ten times faster than a shift per bit (large tables' HDL and vectors are made of these)
    size = next((b for b in (1, 2, 4) if 8 * b >= max(field_widths)), 8)
    words = np.ascontiguousarray(codes[:, : len(field_widths)].astype(np.dtype(f">u{size}")))
    bits = np.unpackbits(words.view(np.uint8).reshape(len(codes), len(field_widths), size), axis=2)
    if max(field_widths) > 64:  # a code has 64 bits at most: a wider field's leading digits are 0
        bits = np.concatenate([np.zeros((*bits.shape[:2], max(field_widths) - 64), np.uint8), bits], axis=2)
    return np.concatenate([bits[:, j, bits.shape[2] - w :] for j, w in enumerate(field_widths)], axis=1)


def table_bits(input_domains: Sequence[Domain], output_domain: Domain | None, fan_out: int) -> tuple[int, int | None]:
    """``(address bits, output bits)`` of a table as hardware packs it: its inputs' fields, and ``fan_out``
    output fields of ``output_domain`` (``None`` when the table holds raw values, which hardware cannot hold).

    Example:
        >>> table_bits([Domain.uniform(2)] * 3, Domain([0.0, 0.5, 1.0]), 2)
        (6, 4)
    """
    address = sum(widths(input_domains))
    return address, None if output_domain is None else fan_out * width(output_domain)
