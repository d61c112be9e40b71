"""Observed inputs and partial tables: keep the rows real data reaches, leave the rest don't-care.

:func:`observe` runs a table network on data and counts, per unit, how often each packed input address
occurs (vectorized: one ``np.unique`` per layer and batch, never a per-sample string). :func:`restrict`
turns a network into one of partial tables holding only the rows seen at least ``min_count`` times; a
lookup that falls on a missing (don't-care) row raises, or returns a declared default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ObserveError
from ..graph.graph import Graph, TableMeta
from ..runtime.runtime import TableKernel
from ..table import IOTable
from ..tabulate.layers import LayerTables

__all__ = ["Observation", "ObserveError", "observe", "restrict"]


def _check_net(net: Any, what: str) -> None:
    # The network module builds on this one (TableNetwork.restrict): a network is recognised by the parts
    # observe reads (a graph, its layers' tables, an input shape), not by an import of its class.
    parts = (getattr(net, "graph", None), getattr(net, "layers", None), getattr(net, "input_shape", None))
    if not (isinstance(parts[0], Graph) and isinstance(parts[1], dict) and isinstance(parts[2], tuple)):
        msg = f"{what}: expected a TableNetwork (from iotable.precompute on a model), received {type(net).__name__}"
        raise ObserveError(msg)


@dataclass
class Observation:
    """Per table layer, the packed addresses that occurred (sorted, per unit) and how often.

    ``counts[layer][unit]`` is ``(addresses, counts)``; ``samples`` is the number of samples observed.
    """

    counts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    samples: int = 0

    def rows_seen(self, layer: str, *, min_count: int = 1) -> int:
        """Rows of ``layer`` (all units) seen at least ``min_count`` times."""
        return sum(int((c >= min_count).sum()) for _, c in self.counts[layer])

    def _add(self, layer: str, per_unit: list[tuple[np.ndarray, np.ndarray]]) -> None:
        if layer not in self.counts:
            self.counts[layer] = per_unit
            return
        merged = []
        for (a1, c1), (a2, c2) in zip(self.counts[layer], per_unit):
            addresses, inverse = np.unique(np.concatenate([a1, a2]), return_inverse=True)
            merged.append((addresses, np.bincount(inverse, weights=np.concatenate([c1, c2])).astype(np.int64)))
        self.counts[layer] = merged


def observe(
    net: Any, data: Any, *, codes: bool = False, batch_size: int = 4096, into: Observation | None = None
) -> Observation:
    """Count, per unit of every table layer, which input addresses ``data`` reaches and how often.

    Args:
        net: a :class:`~iotable.network.TableNetwork` (dense tables).
        data: a batch of inputs (values of the input domain, or codes with ``codes=True``).
        codes: ``data`` holds codes.
        batch_size: samples evaluated at once.
        into: an earlier observation to add these counts to (returned updated).

    Returns:
        The :class:`Observation`.
    """
    _check_net(net, "observe")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        msg = f"observe: batch_size must be a positive integer, received {batch_size!r}"
        raise ObserveError(msg)
    if into is not None and not isinstance(into, Observation):
        msg = f"observe: into= must be an Observation, received {type(into).__name__}"
        raise ObserveError(msg)
    observation = into if into is not None else Observation()
    x = net.encode_input(data, codes=codes, what="observe")
    kernels = {
        node.name: (node.meta.layer, net.runtime.kernel(node.name))
        for node in net.graph.table_nodes()
        if isinstance(node.meta, TableMeta)
    }
    for start in range(0, x.shape[0], batch_size):
        _, env = net.runtime.run(x[start : start + batch_size], capture=True)
        for node_name, (layer, kernel) in kernels.items():
            vectors, _ = kernel.vectors(env[net.graph.inputs(node_name)[0]])
            flat = (kernel.addresses(vectors) + kernel.offsets).reshape(-1).numpy()
            addresses, counts = np.unique(flat, return_counts=True)
            observation._add(layer, _split(addresses, counts.astype(np.int64), kernel))
    observation.samples += int(x.shape[0])
    return observation


def _split(addresses: np.ndarray, counts: np.ndarray, kernel: TableKernel) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-unit (local addresses, counts) from addresses into a layer's flat table array."""
    offsets = kernel.offsets.numpy()
    bounds = np.searchsorted(addresses, np.append(offsets, np.iinfo(np.int64).max))
    return [
        (addresses[bounds[u] : bounds[u + 1]] - offsets[u], counts[bounds[u] : bounds[u + 1]])
        for u in range(len(offsets))
    ]


def restrict(net: Any, observation: Observation, *, min_count: int = 1, default: Any = None) -> Any:
    """A network of partial tables: per unit, only the rows observed at least ``min_count`` times.

    Args:
        net: the dense :class:`~iotable.network.TableNetwork` that was observed.
        observation: from :func:`observe`.
        min_count: rows seen fewer times become don't-cares.
        default: what a lookup of a don't-care row returns: ``None`` (raise
            :class:`~iotable.errors.MissingRowError`), an output code / value, or ``"zero"`` (the code of real 0 of
            each table's output domain).

    Returns:
        A new :class:`~iotable.network.TableNetwork` sharing the graph; its summary shows rows kept.
    """
    _check_net(net, "restrict")
    if not isinstance(observation, Observation):
        msg = f"restrict: expected an Observation (from iotable.observe), received {type(observation).__name__}"
        raise ObserveError(msg)
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        msg = f"restrict: min_count must be a positive integer, received {min_count!r}"
        raise ObserveError(msg)
    missing = [name for name in net.layers if name not in observation.counts]
    if missing:
        msg = f"restrict: the observation has no counts for layer(s) {missing}; observe this network first"
        raise ObserveError(msg)
    layers = {}
    for name, layer in net.layers.items():
        tables = []
        for table, (addresses, counts) in zip(layer.tables, observation.counts[name]):
            if not table.is_dense:
                msg = f"restrict: layer {name!r} unit {table.unit} is already partial; restrict the dense network"
                raise ObserveError(msg)
            kept = addresses[counts >= min_count]
            tables.append(
                IOTable(
                    table.unpack(kept),
                    table.outputs[kept],
                    input_domains=table.input_domains,
                    output_domain=table.output_domain,
                    dont_care=_default(default, table),
                    layer=table.layer,
                    unit=table.unit,
                )
            )
        layers[name] = LayerTables(plan=layer.plan, tables=tuple(tables))
    return type(net)(graph=net.graph, layers=layers, input_shape=net.input_shape)


def _default(default: Any, table: IOTable) -> Any:
    if isinstance(default, str):
        if default != "zero":
            msg = f"restrict: default must be None, a value, or 'zero'; received {default!r}"
            raise ObserveError(msg)
        domain = table.output_domain
        if domain is None:
            return 0.0
        return domain.zero_code if domain.zero_code is not None else 0
    return default
