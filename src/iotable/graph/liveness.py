"""Live logic: the elements, and the table units, whose outputs reach the network's output.

A table whose outputs nothing reads (a unit of a layer with random fan-in masks that no unit of the next
layer picked) still costs LUTs in an estimate and logic in an export, though synthesis would delete it.
:func:`liveness` walks the graph back from its output node, element by element: the output reads every
element of its producer, and every other node says, through its kind's
:meth:`~iotable.graph.kind.NodeKindDef.live_reads`, which elements of its producers its live output elements
read (a table unit reads the elements its index map names, at the positions where one of its outputs is
live; a window, a pad, a pool, a reshape, a join, a duplicate what their maps say; a kind that does not say
reads everything, so a new kind stays correct). A table unit is live where any of its output channels, at any
position, is.

Also here: the element maps the walk and the hardware share, :func:`window_gather` (which input element each
element of each window vector is) and :func:`pool_sources` (which input elements each max-pool output
covers), and :func:`check_keep_dead`, the one check of the ``keep_dead`` option of the estimate, the cost
and the export.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GraphError, OptionError
from .kind import definition
from .nodes import ElementOrder, PoolMeta, TableMeta, WindowMeta

if TYPE_CHECKING:
    from .graph import Graph
    from .nodes import Node

__all__ = [
    "Liveness",
    "channel_positions",
    "check_keep_dead",
    "liveness",
    "pool_sources",
    "unit_liveness",
    "window_gather",
]


def check_keep_dead(value: Any, *, what: str) -> bool:
    """``keep_dead`` checked: ``True`` (count and build every table) or ``False`` (live tables only)."""
    if not isinstance(value, bool):
        msg = (
            f"{what}: keep_dead must be True (keep the tables whose outputs reach no network output) or False "
            f"(the default: live tables only), received {value!r}"
        )
        raise OptionError(msg)
    return value


# -- element maps -------------------------------------------------------------------------------------------------


def window_gather(shape: tuple[int, ...], meta: WindowMeta, *, channels_last: bool) -> np.ndarray:
    """For a window over an input of per-sample ``shape``: the flat input index of every element of every
    window vector, shape ``(*positions, channels * taps)``, in the window's element order.

    Example:
        >>> meta = WindowMeta((2,), (1,), (1,), 1, ElementOrder.CHANNEL_MAJOR, 2)
        >>> window_gather((1, 3), meta, channels_last=False).tolist()
        [[0, 1], [1, 2]]
    """
    rank = len(meta.kernel)
    channels = shape[-1] if channels_last else shape[0]
    size = shape[:-1] if channels_last else shape[1:]
    positions = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, meta.kernel, meta.stride, meta.dilation)]
    grids = np.meshgrid(*[np.arange(p) for p in positions], indexing="ij")  # (*P) per axis
    taps = np.meshgrid(*[np.arange(k) for k in meta.kernel], indexing="ij")
    coords = []
    for axis in range(rank):
        p = grids[axis].reshape(*grids[axis].shape, 1)  # (*P, 1)
        t = taps[axis].reshape(-1)  # (T,), row-major over the kernel
        coords.append(p * meta.stride[axis] + t * meta.dilation[axis])  # (*P, T)
    c = np.arange(channels)
    if channels_last:
        index = np.ravel_multi_index((*[x[..., None] for x in coords], c), (*size, channels))  # (*P, T, C)
        vectors = index if meta.element_order is ElementOrder.KERNEL_MAJOR else np.swapaxes(index, -1, -2)
    else:
        index = np.ravel_multi_index((c[:, None], *[x[..., None, :] for x in coords]), (channels, *size))  # (*P, C, T)
        vectors = index if meta.element_order is ElementOrder.CHANNEL_MAJOR else np.swapaxes(index, -1, -2)
    return vectors.reshape(*positions, channels * math.prod(meta.kernel))


def pool_sources(in_shape: tuple[int, ...], out_shape: tuple[int, ...], meta: PoolMeta, channels_last: bool) -> list:
    """For every output element (C order), the flat input indices its window covers inside the input.

    Example:
        >>> meta = PoolMeta((2,), (2,), (0,), (1,))
        >>> pool_sources((1, 4), (1, 2), meta, False)
        [[0, 1], [2, 3]]
    """
    size = in_shape[:-1] if channels_last else in_shape[1:]
    out = out_shape[:-1] if channels_last else out_shape[1:]
    rank = len(size)
    axes = []
    for axis in range(rank):  # (out positions, kernel taps) of input coordinates, -1 outside
        o = np.arange(out[axis])[:, None] * meta.stride[axis] - meta.padding[axis]
        coord = o + np.arange(meta.kernel_size[axis])[None, :] * meta.dilation[axis]
        axes.append(np.where((coord >= 0) & (coord < size[axis]), coord, -1))
    sources = []
    for index in np.ndindex(*out_shape):
        c = index[-1] if channels_last else index[0]
        pos = index[:-1] if channels_last else index[1:]
        lines = [axes[a][pos[a]] for a in range(rank)]
        grid = np.meshgrid(*lines, indexing="ij")
        valid = np.all([g >= 0 for g in grid], axis=0)
        coords = [g[valid] for g in grid]
        full = (*coords, np.full(len(coords[0]), c)) if channels_last else (np.full(len(coords[0]), c), *coords)
        sources.append(np.ravel_multi_index(full, in_shape).tolist())
    return sources


def channel_positions(node: Node, values: np.ndarray) -> np.ndarray:
    """``values`` of ``node``'s shape as ``(positions, channels)`` (one position for a flat tensor)."""
    values = np.asarray(values).reshape(node.shape)
    channels = node.channels
    if node.layout is None or not node.layout.spatial_rank or node.layout.channels_last:
        return values.reshape(-1, channels)
    return values.reshape(channels, -1).T


def unit_liveness(node: Node, live: np.ndarray) -> np.ndarray:
    """Per unit of table node ``node``: whether any of its output channels is live at any position."""
    meta = node.meta
    assert isinstance(meta, TableMeta)  # a checked graph's table node
    channels = np.asarray(channel_positions(node, live).any(axis=0))
    return np.array([bool(channels[list(unit.out_channels)].any()) for unit in meta.units], dtype=bool)


# -- the walk -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Liveness:
    """What :func:`liveness` found: the live output elements of every node and the live units of every table node.

    Attributes:
        elements: per node name, a boolean array of the node's shape: the output elements something live reads
            (all of them for the output node's producer; none for a node whose outputs reach nothing).
        units: per table node name, a boolean array with one entry per unit: the units that are live.
    """

    elements: Mapping[str, np.ndarray] = field(repr=False)
    units: Mapping[str, np.ndarray]

    def dead(self, node: str | None = None) -> int:
        """Dead units (tables) of table node ``node``, or of every table node together.

        Raises:
            GraphError: ``node`` is no table node of the graph.
        """
        if node is None:
            return sum(int((~live).sum()) for live in self.units.values())
        if node not in self.units:
            msg = f"liveness: {node!r} is not a table node of the graph; table nodes are {sorted(self.units)}"
            raise GraphError(msg)
        return int((~self.units[node]).sum())

    @property
    def live(self) -> int:
        """Live units (tables) of every table node together."""
        return sum(int(live.sum()) for live in self.units.values())

    def layers(self, graph: Graph) -> dict[str, np.ndarray]:
        """Per table layer (``TableMeta.layer``), its live units: live where any node that applies the layer
        has that unit live."""
        found: dict[str, np.ndarray] = {}
        for name, live in self.units.items():
            layer = graph[name].meta.layer
            found[layer] = live | found[layer] if layer in found else live.copy()
        return found


def liveness(graph: Graph) -> Liveness:
    """The live elements of every node of ``graph`` and the live units of its table nodes, walked back from
    the output node (see the module's text). ``graph`` is a checked graph.

    Raises:
        GraphError: a kind's :meth:`~iotable.graph.kind.NodeKindDef.live_reads` gave a mask of another shape
            than its producer's.
    """
    live: dict[str, np.ndarray] = {}
    for node in reversed(graph.nodes):
        mask = np.ones(node.shape, dtype=bool) if node.kind.is_output else live.get(node.name)
        if mask is None:
            mask = np.zeros(node.shape, dtype=bool)
        live[node.name] = mask
        producers = graph.producers(node.name)
        if not producers or not mask.any():
            continue
        reads = definition(node.kind).live_reads(node, producers, mask)
        if len(reads) != len(producers):
            msg = (
                f"liveness: node {node.name!r}: {type(definition(node.kind)).__name__}.live_reads gave {len(reads)} "
                f"mask(s) for its {len(producers)} producer(s); return one per input port (None: every element)"
            )
            raise GraphError(msg)
        for producer, read in zip(producers, reads):
            read = np.ones(producer.shape, dtype=bool) if read is None else np.asarray(read, dtype=bool)
            if read.shape != producer.shape:
                msg = (
                    f"liveness: node {node.name!r}: live_reads gave a mask of shape {read.shape} for producer "
                    f"{producer.name!r} of shape {producer.shape}; expected the producer's shape"
                )
                raise GraphError(msg)
            held = live.get(producer.name)
            live[producer.name] = read if held is None else held | read
    units = {n.name: unit_liveness(n, live[n.name]) for n in graph.nodes if isinstance(n.meta, TableMeta)}
    return Liveness(live, units)
