"""Typed-field checks the graph's invariants share (:mod:`.checks` and every node kind's ``check``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bits import field_width
from ..domain import Domain
from ..errors import GraphError
from ..layout import Layout

if TYPE_CHECKING:
    from .nodes import Node

#: What an error about a bad record says to do.
REBUILD = "rebuild it with iotable.precompute (or save it again)"


def node_where(node: Node) -> str:
    return f"graph: {node.kind.value} node {node.name!r}"


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def int_field(value: Any, where: str, *, minimum: int) -> int:
    """``value`` as an int if it is an integer in ``[minimum, 2**62)`` (an int64 with room for sums of it)."""
    if not is_int(value) or not minimum <= value < 2**62:
        msg = f"{where}: expected an integer >= {minimum} and < 2**62, received {value!r}"
        raise GraphError(msg)
    return int(value)


def ints_field(value: Any, where: str, *, minimum: int, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, tuple) or (length is not None and len(value) != length):
        size = f"{length} " if length is not None else ""
        msg = f"{where}: expected a tuple of {size}integers >= {minimum}, received {value!r}"
        raise GraphError(msg)
    return tuple(int_field(v, where, minimum=minimum) for v in value)


def shape_field(value: Any, where: str, *, exact: bool = False) -> tuple[int, ...]:
    """A shape: sizes >= 1, at most 8 axes (``exact``: a tuple of Python ints, as nodes and edges hold)."""
    if exact and not (isinstance(value, tuple) and all(type(v) is int for v in value)):
        msg = f"{where}: expected a tuple of integers, received {value!r}"
        raise GraphError(msg)
    if not isinstance(value, tuple) or len(value) > 8:
        msg = f"{where}: expected a shape (a tuple of at most 8 sizes >= 1), received {value!r}"
        raise GraphError(msg)
    return ints_field(value, where, minimum=1)


def index_array(value: Any, where: str, shape: tuple[int, ...]) -> np.ndarray:
    """An integer array of exactly ``shape``, as ``int64``."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.shape != shape:
        got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
        msg = f"{where} must be an integer array of shape {shape}, received {got}"
        raise GraphError(msg)
    return value.astype(np.int64, copy=False)


def same_fields(node: Node, producer: Node, *fields: str) -> None:
    for name in fields:
        mine, theirs = getattr(node, name), getattr(producer, name)
        if mine != theirs:
            msg = (
                f"{node_where(node)}: {name} {mine!r} differs from {theirs!r} of {producer.name!r}, which it passes on"
            )
            raise GraphError(msg)


def codes_in(node: Node, producer: Node) -> None:
    if producer.domain is None:
        msg = (
            f"{node_where(node)}: reads raw values from {producer.name!r}; a {node.kind.value} node reads codes "
            "(end that layer in a quantizer)"
        )
        raise GraphError(msg)


def split_channels(shape: tuple[int, ...], layout: Layout) -> tuple[int, tuple[int, ...]]:
    """``(channels, spatial sizes)`` of a per-sample shape in ``layout``."""
    if layout.channels_last:
        return shape[-1], shape[:-1]
    return shape[0], shape[1:]


def element_domains(node: Node) -> tuple[Domain, ...]:
    """The domain of every element of a node's output, flattened in C order (window nodes: one vector); one
    domain where all elements share it."""
    if isinstance(node.domain, Domain):
        return (node.domain,)
    domains = node.domain
    assert isinstance(domains, tuple)  # callers checked that the node carries codes
    if node.kind.windowed or node.layout is None or node.layout.spatial_rank == 0:
        return domains  # one domain per element of the vector
    _, spatial = split_channels(node.shape, node.layout)
    if node.layout.channels_last:
        return tuple(domains) * math.prod(spatial)
    return tuple(d for d in domains for _ in range(math.prod(spatial)))


def element_radix_bits(node: Node) -> tuple[np.ndarray, np.ndarray]:
    """Values of the domain of every element of a node's output (one vector for a window), and the bits of the
    hardware field holding its code (:func:`iotable.bits.width`: a one-value domain's code is a 1-bit field)."""
    domains = node.domain if isinstance(node.domain, tuple) else (node.domain,)
    radix = np.asarray([len(d) for d in domains], dtype=np.int64)  # type: ignore[arg-type]
    bits = np.asarray([field_width(len(d)) for d in domains], dtype=np.int64)  # type: ignore[arg-type]
    size = node.shape[-1] if node.kind.windowed else math.prod(node.shape)
    if len(domains) == 1:
        return np.broadcast_to(radix, (size,)), np.broadcast_to(bits, (size,))
    if node.kind.windowed or node.layout is None or node.layout.spatial_rank == 0:
        return radix, bits
    _, spatial = split_channels(node.shape, node.layout)
    repeat = math.prod(spatial)
    if node.layout.channels_last:
        return np.tile(radix, repeat), np.tile(bits, repeat)
    return np.repeat(radix, repeat), np.repeat(bits, repeat)


def short_list(values: list[int]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...] ({len(values)})"
