"""Node metadata records to JSON and back, field by field: what the bundle writer and reader hand a node
kind's :meth:`~iotable.graph.kind.NodeKindDef.encode` and :meth:`~iotable.graph.kind.NodeKindDef.decode`."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import BundleError
from .jsonfields import _kind, _obj, _shown


class _MetaEncoder:
    """Field values of one node's record as JSON (arrays as files of the bundle, enums as their values)."""

    def __init__(self, encoder: Any, node: Any, k: int) -> None:
        self.encoder, self.node, self.k = encoder, node, k

    def field(self, name: str, value: Any) -> Any:
        where = f"graph node {self.node.name!r}"
        if isinstance(value, np.ndarray):
            return {"$array": self.encoder.array(f"graph/node{self.k}.{name}.npy", value, f"{where} {name}")}
        if isinstance(value, enum.Enum):
            return value.value
        return self.encoder.value(value, f"{where} meta.{name}")

    def host_module(self) -> Any:
        return self.encoder.host_module(self.node)


class _MetaDecoder:
    """JSON fields of one node's record back to values (arrays read from the bundle, host tags to modules)."""

    def __init__(self, decoder: Any, hosts: dict[str, Any]) -> None:
        self.decoder, self.hosts = decoder, hosts

    def fields(self, record: Any, names: set[str], where: str, *, hosts: bool = False) -> dict[str, Any]:
        _obj(record, where, keys=names)
        modules = self.hosts if hosts else None  # only a host node's meta.module names one
        return {key: self.decoder.value(raw, f"{where}.{key}", hosts=modules) for key, raw in record.items()}

    def choice(self, cls: Any, value: Any, where: str, what: str) -> Any:
        member = _member(cls, value)
        if member is None:
            accepted = ", ".join(repr(m.value) for m in cls)
            msg = f"{where}: {_shown(value)} is not {what}; expected one of {accepted}"
            raise BundleError(msg)
        return member

    def index_array(self, value: Any, where: str, *, ndim: int | None = None) -> Any:
        if not isinstance(value, np.ndarray) or value.dtype != np.int64 or ndim not in (None, value.ndim):
            got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else _kind(value)
            msg = f"{where}: expected an int64 array (a {{'$array': file}}), received {got}"
            raise BundleError(msg)
        return value


def _member(cls: Any, value: Any) -> Any:
    """The member of an enumeration whose value is the string ``value``, or ``None``."""
    return next((m for m in cls if m.value == value), None) if isinstance(value, str) else None
