"""Checked access to the values of a parsed JSON manifest: each helper returns the value typed, or raises a
:class:`~iotable.errors.BundleError` naming the field, what was expected and what it holds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .._util.text import unprintable
from ..errors import BundleError, IOTableError


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


#: Every integer a manifest holds (a count, an index, a size, a bit width) lies in ``(-INT_LIMIT, INT_LIMIT)``:
#: a numpy ``int64`` with room for the sums and products made of it, never a C overflow.
INT_LIMIT = 2**62


def _int(value: Any, where: str, *, minimum: int | None = None) -> int:
    low = -INT_LIMIT if minimum is None else minimum
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < INT_LIMIT:
        bound = f" >= {minimum} and < 2**62" if minimum is not None else " in [-2**62, 2**62)"
        msg = f"{where}: expected an integer{bound}, received {_shown(value)}"
        raise BundleError(msg)
    return value


def _bounded(value: Any, where: str) -> Any:
    """``value`` if it is no integer, or an integer in ``(-2**62, 2**62)``; else a :class:`BundleError`."""
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value < INT_LIMIT:
        msg = f"{where}: expected an integer in [-2**62, 2**62), received {_shown(value)}; the manifest was edited"
        raise BundleError(msg)
    return value


def _ints(value: Any, where: str, *, minimum: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list):
        msg = f"{where}: expected a list of integers, received {_kind(value)}"
        raise BundleError(msg)
    return tuple(_int(v, f"{where}[{k}]", minimum=minimum) for k, v in enumerate(value))


def _str(value: Any, where: str, *, limit: int = 4096) -> str:
    if not isinstance(value, str) or len(value) > limit:
        msg = f"{where}: expected a string of at most {limit} characters, received {_kind(value)}"
        raise BundleError(msg)
    return value


def _name(value: Any, where: str) -> str:
    """A node, layer or module name: a string of printable characters (names reach generated files, comments
    and messages, where a line break or control character could change what they say)."""
    return _printable(_str(value, where, limit=512), where)


def _printable(name: str, where: str) -> str:
    """``name`` if every character of it is printable; else a :class:`BundleError` showing it escaped."""
    bad = unprintable(name)
    if bad is not None:
        msg = (
            f"{where}: the name {name!r} holds the unprintable character {bad!r} (a control character or line "
            "break), which a name may not hold; rename the submodule in the model to printable characters and "
            "save it again"
        )
        raise BundleError(msg)
    return name


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        msg = f"{where}: expected true or false, received {_shown(value)}"
        raise BundleError(msg)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        msg = f"{where}: expected a list, received {_kind(value)}"
        raise BundleError(msg)
    return value


def _obj(value: Any, where: str, *, keys: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{where}: expected an object, received {_kind(value)}"
        raise BundleError(msg)
    if keys is not None and set(value) != keys:
        missing, extra = sorted(keys - set(value)), sorted(set(value) - keys)
        msg = f"{where}: expected the fields {sorted(keys)}; missing {missing}, unknown {extra}"
        raise BundleError(msg)
    return value


def _field(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        msg = f"{where}: missing field {key!r}; the manifest is incomplete or was edited"
        raise BundleError(msg)
    return record[key]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@contextlib.contextmanager
def _context(where: str) -> Iterator[None]:
    """Report a library error raised while rebuilding an object from the manifest as a bundle error there."""
    try:
        yield
    except BundleError:
        raise
    except IOTableError as exc:
        msg = f"{where}: {exc}"
        raise BundleError(msg) from None
    except (TypeError, ValueError) as exc:
        msg = f"{where}: malformed ({exc})"
        raise BundleError(msg) from None


def _pair(value: Any, where: str) -> tuple[int, int]:
    pair = _ints(value, where, minimum=0)
    if len(pair) != 2:
        msg = f"{where}: expected a [before, after] pair, received {_shown(value)}"
        raise BundleError(msg)
    return pair[0], pair[1]
