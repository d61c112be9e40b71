"""Front ends that read a model from a file: :func:`iotable.precompute` and :func:`iotable.verify` hand them a
model they accept (a path, a parsed file object) instead of a torch module. A front end registers itself
when imported; the network imports none of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FileFrontEnd", "file_front_end", "register_file_front_end"]


@dataclass(frozen=True)
class FileFrontEnd:
    """A front end of models given as files: ``accepts(model)`` says whether it reads ``model``;
    ``precompute(model, **options)`` returns its table network, ``verify(model, net, inputs, codes=)`` its
    :class:`~iotable.network.verify.VerifyReport`."""

    name: str
    accepts: Callable[[Any], bool]
    precompute: Callable[..., Any]
    verify: Callable[..., Any]


_FRONT_ENDS: dict[str, FileFrontEnd] = {}


def register_file_front_end(front_end: FileFrontEnd) -> None:
    """Register ``front_end`` (again under the same name: replaced)."""
    _FRONT_ENDS[front_end.name] = front_end


def file_front_end(model: Any) -> FileFrontEnd | None:
    """The registered front end that reads ``model``, or ``None`` (a torch module, or nothing known)."""
    return next((f for f in _FRONT_ENDS.values() if f.accepts(model)), None)
