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
