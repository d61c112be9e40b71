"""Manifests of older formats rewritten as the current format reads them (formats 1 to 4)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import numpy as np

from ..errors import IOTableError
from ..graph.graph import (
    pad_index_map,
)
from ..layout import PaddingMode


def _pairs(value: Any) -> Any:
    """Format 1's symmetric padding (one int per axis) as (before, after) pairs."""
    ok = isinstance(value, list) and all(type(p) is int for p in value)
    return [[p, p] for p in value] if ok else value


def _upgrade_1(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A format-1 manifest as format 2 writes the same network: padding as (before, after) pairs in mode
    ``"zeros"``, pad nodes with their index maps (computed, as the arrays format 2 would list), the spec fields
    format 1 did not have at their defaults."""
    manifest = copy.deepcopy(manifest)
    arrays = dict(arrays)
    manifest["format_version"] = 2
    layers = manifest.get("layers")
    for layer in layers if isinstance(layers, list) else ():
        plan = layer.get("plan") if isinstance(layer, dict) else None
        if isinstance(plan, dict):
            _upgrade_1_plan(plan)
    graph = manifest.get("graph")
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    shapes: dict[Any, Any] = {}
    for k, node in enumerate(nodes if isinstance(nodes, list) else ()):
        if not isinstance(node, dict):
            continue
        if node.get("kind") == "pad":
            _upgrade_1_pad(node, k, shapes, arrays)
        if isinstance(node.get("name"), (str, int)) and isinstance(node.get("shape"), list):
            shapes[node["name"]] = node["shape"]
    return manifest, arrays


def _upgrade_1_plan(plan: dict[str, Any]) -> None:
    geometry, spec = plan.get("geometry"), plan.get("spec")
    if isinstance(geometry, dict) and "padding_mode" not in geometry:
        geometry["padding"] = _pairs(geometry.get("padding"))
        geometry["padding_mode"] = PaddingMode.ZEROS.value
    if isinstance(spec, dict) and "padding_mode" not in spec:
        if spec.get("padding") is not None:
            spec["padding"] = _pairs(spec["padding"])
        spec.update(padding_mode=None, depthwise=False, fan_in_from=None, output_domain_from=None)


def _upgrade_1_pad(node: dict[str, Any], k: int, shapes: dict[Any, Any], arrays: dict[str, Any]) -> None:
    """A format-1 pad node: zeros mode, pairs, and its index map computed from its producer's shape."""
    meta, inputs, layout = node.get("meta"), node.get("inputs"), node.get("layout")
    if not isinstance(meta, dict) or "mode" in meta or not isinstance(inputs, list):
        return
    meta["padding"] = _pairs(meta.get("padding"))
    meta["mode"] = PaddingMode.ZEROS.value
    source = shapes.get(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], str) else None
    with contextlib.suppress(IOTableError, TypeError, ValueError):
        rel = f"graph/node{k}.index_map.npy"
        padding = tuple(map(tuple, meta["padding"]))
        arrays[rel] = pad_index_map(tuple(source or ()), padding, "zeros", channels_last=layout in ("NWC", "NHWC"))
        meta["index_map"] = {"$array": rel}


def _upgrade_graph(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A format 2 or 3 graph as format 4 writes it: producers only in the edges (no node ``inputs``), each
    kind's metadata record with exactly its fields (a table's index map and a window's buffer depth move
    from the edge into the node; what other fields give is dropped) and ``fx_node`` beside the node's
    fields. Nodes without ``inputs`` (not format 3's layout) are left as they are."""
    manifest = copy.deepcopy(manifest)
    arrays = dict(arrays)
    graph = manifest.get("graph")
    nodes, edges = (graph.get("nodes"), graph.get("edges")) if isinstance(graph, dict) else (None, None)
    if not isinstance(nodes, list) or not isinstance(edges, list):
        return manifest, arrays
    carried: dict[str, dict[str, Any]] = {}  # consumer -> what its edge carried (index_map, buffer)
    for edge in edges:
        if isinstance(edge, dict) and "index_map" in edge and "buffer" in edge:
            extra = {"index_map": edge.pop("index_map"), "buffer": edge.pop("buffer")}
            if isinstance(edge.get("consumer"), str):
                carried[edge["consumer"]] = extra
    for k, node in enumerate(nodes):
        if not isinstance(node, dict) or "inputs" not in node or not isinstance(node.get("meta"), dict):
            continue
        del node["inputs"]
        meta = node["meta"]
        node["fx_node"] = meta.pop("fx_node", None)
        derived = (
            "input_shapes",
            "input_layout",
            "spatial",
            "positions",
            "layout" if node.get("kind") == "input" else "",
        )
        for key in derived:  # what other fields give: not stored twice
            meta.pop(key, None)
        upgrade = _UPGRADE_META.get(node.get("kind"))  # type: ignore[arg-type]
        if upgrade is not None:
            upgrade(meta, carried.get(node.get("name"), {}), arrays, k)  # type: ignore[arg-type]
    return manifest, arrays


def _upgrade_table(meta: dict[str, Any], carried: dict[str, Any], arrays: dict[str, Any], k: int) -> None:
    rel = carried.get("index_map")
    if isinstance(rel, str) and rel in arrays:
        arrays[f"graph/node{k}.index_map.npy"] = arrays.pop(rel)
        meta["index_map"] = {"$array": f"graph/node{k}.index_map.npy"}
    else:
        meta["index_map"] = rel  # not an array: left for the checks to refuse


def _upgrade_window(meta: dict[str, Any], carried: dict[str, Any], arrays: dict[str, Any], k: int) -> None:
    buffer = carried.get("buffer")
    meta["buffer_depth"] = buffer.get("depth") if isinstance(buffer, dict) else None


def _upgrade_join(meta: dict[str, Any], carried: dict[str, Any], arrays: dict[str, Any], k: int) -> None:
    meta["for_add"] = meta.pop("for", None) == "add"


def _upgrade_pool(meta: dict[str, Any], carried: dict[str, Any], arrays: dict[str, Any], k: int) -> None:
    """Format 3 kept the pooling module (``$maxpool``) beside its settings: the settings per axis, and its
    ``ceil_mode``."""
    module, rank = meta.pop("module", None), meta.pop("rank", None)
    record = module.get("$maxpool") if isinstance(module, dict) else None
    meta["ceil_mode"] = record.get("ceil_mode") if isinstance(record, dict) else None
    for key in ("kernel_size", "stride", "padding", "dilation"):
        value = meta.get(key)
        if type(value) is int and type(rank) is int:
            meta[key] = [value] * rank


_UPGRADE_META = {"table": _upgrade_table, "window": _upgrade_window, "join": _upgrade_join, "pool": _upgrade_pool}
