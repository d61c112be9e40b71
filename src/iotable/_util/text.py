"""Checks of names that come from a model or a file and end up in messages, files and generated code."""

from __future__ import annotations


def unprintable(name: str) -> str | None:
    """The first character of ``name`` that is not printable (a control character, a line or paragraph
    separator, ...), or ``None`` when every character is.

    Example:
        >>> unprintable("layer.0"), unprintable("a\\nb")
        (None, '\\n')
    """
    return next((ch for ch in name if not ch.isprintable()), None)
