"""Checks of names that come from a model or a file and end up in messages, files and generated code."""

from __future__ import annotations

import math


def unprintable(name: str) -> str | None:
    """The first character of ``name`` that is not printable (a control character, a line or paragraph
    separator, ...), or ``None`` when every character is.

    Example:
        >>> unprintable("layer.0"), unprintable("a\\nb")
        (None, '\\n')
    """
    return next((ch for ch in name if not ch.isprintable()), None)


def unprintable_module(name: str, bad: str) -> str:
    """The refusal of the submodule ``name`` (a qualified name) whose name holds the unprintable character
    ``bad``: the name escaped, and the submodule to rename with a printable suggestion."""
    leaf = name.rsplit(".", 1)[-1]
    suggestion = "".join(ch if ch.isprintable() else "_" for ch in leaf)
    return (
        f"precompute: the module {name!r} has a name with the unprintable character {bad!r} (a control "
        f"character or line break), which a layer or node name may not hold; rename the submodule "
        f"{leaf!r} to printable characters (e.g. {suggestion!r}: its nn.Sequential key or add_module name)"
    )


#: Integers with more digits than this are written in a short form in messages.
_DIGITS = 15


def count_text(n: int) -> str:
    """An integer for a message, never longer than about 30 characters: as it is up to 15 digits, else as
    ``≈m.me<exponent>``, after ``2**k`` when it is a power of two (a table of 2**8192 rows would otherwise
    print 2,467 digits).

    Example:
        >>> count_text(4096), count_text(2**8192), count_text(3**5000)
        ('4096', '2**8192 (≈1.1e2466)', '≈4.0e2385')
    """
    n = int(n)
    if abs(n) < 10**_DIGITS:
        return str(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    shift = max(n.bit_length() - 64, 0)  # log10 of the top 64 bits, plus the bits shifted out
    exponent10 = math.log10(n >> shift) + shift * math.log10(2)
    whole = math.floor(exponent10)
    mantissa = 10 ** (exponent10 - whole)
    if f"{mantissa:.1f}" == "10.0":
        mantissa, whole = 1.0, whole + 1
    approx = f"≈{sign}{mantissa:.1f}e{whole}"
    if n & (n - 1) == 0:
        return f"{sign}2**{n.bit_length() - 1} ({approx})"
    return approx
