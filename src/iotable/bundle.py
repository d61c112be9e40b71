"""Bundles: a table network (or one layer's tables) saved once and loaded many times, without the model.

A bundle is a directory: ``manifest.json`` (the format name and version, the library version, the domains,
the interlayer graph, every layer's plan and per-table metadata, the network input shape, and the sha256,
dtype and shape of every array file) plus arrays as ``.npy`` files (format version 1.0, C order, no
pickled objects): table outputs, the input codes and packed addresses of partial tables, the graph's index
maps, and the weights of host modules. ``docs/bundle.md`` describes every field, so that any language that
reads JSON and ``.npy`` can read a bundle.

Saving validates everything before writing a byte, writes into a temporary sibling directory, syncs every
file, then renames it over the target: an interrupted save leaves the previous bundle (or none), never a
half-written one. Loading checks every path, header, size and checksum before use and memory-maps the
tables; every problem is a :class:`BundleError` naming the file. Nothing is unpickled, and no model code
runs: host modules (layers run with torch) are stored as their class name and weights, and the caller
hands the module back with ``load(path, host_modules={name: module})``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch
from torch import nn

from .domain import Domain, code_dtype
from .errors import IOTableError
from .graph import Edge, Graph, GraphError, Node, NodeKind, pad_index_map
from .network import TableNetwork
from .plan import Geometry, LayerPlan, Unit
from .precompute import LayerTables
from .spec import Layout, PaddingMode, Spec
from .table import IOTable

__all__ = ["FORMAT", "FORMAT_VERSION", "BundleError", "load", "save"]

#: The ``format`` field of every bundle manifest.
FORMAT = "iotable-bundle"
#: The bundle format version this library writes; it reads this version and older ones. Version 2 added
#: padding modes and asymmetric padding: a version-1 reader would pad a reflect-padded network with zeros.
FORMAT_VERSION = 2

MANIFEST = "manifest.json"
DIGIT_ORDER = "first input most significant"
_CHUNK = 1 << 20


class BundleError(IOTableError, ValueError):
    """A bundle cannot be written or read: a bad target path, a missing or corrupted file, a bad manifest."""


# -- save -------------------------------------------------------------------------------------------------


def save(obj: TableNetwork | LayerTables, path: str | os.PathLike[str]) -> Path:
    """Write a table network (or one layer's :class:`LayerTables`) to the bundle directory ``path``.

    Everything is checked and encoded before the first byte is written; the bundle is then written into a
    temporary sibling directory, synced, and renamed over ``path``. An existing bundle at ``path`` is
    replaced atomically; any other existing file or non-empty directory is refused. Host modules are
    stored as their class name and weights (``state_dict`` arrays), not their code: pass them back to
    :func:`load` (``host_modules=``).

    Args:
        obj: a :class:`~iotable.network.TableNetwork` from :func:`iotable.precompute` on a whole model, or
            the :class:`LayerTables` of one layer.
        path: the bundle directory to create or replace.

    Returns:
        The bundle's path.

    Raises:
        BundleError: ``path`` is a file or a foreign directory, or ``obj`` cannot be stored without pickle.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), iotable.nn.Quantize(2)).eval()
        >>> net = precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4))
        >>> path = save(net, folder / "net")
        >>> sorted(p.name for p in path.iterdir())
        ['graph', 'manifest.json', 'tables']
    """
    target = _target(path)
    manifest, arrays = _Encoder().bundle(obj)
    _write(target, manifest, arrays)
    return target


def _target(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        msg = f"save: expected a directory path (str or os.PathLike), received {type(path).__name__}"
        raise BundleError(msg)
    target = Path(path)
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            msg = f"save: {target} exists and is not a directory; a bundle is a directory, choose another path"
            raise BundleError(msg)
        if not (target / MANIFEST).is_file() and any(target.iterdir()):
            msg = (
                f"save: {target} is a non-empty directory without {MANIFEST}, not an iotable bundle; refusing to "
                "replace it: choose a new path or an existing bundle"
            )
            raise BundleError(msg)
    for parent in target.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                msg = f"save: {parent} is a file, so {target} cannot be created inside it"
                raise BundleError(msg)
            break
    return target


class _Encoder:
    """Turns a network or layer into the manifest (plain JSON data) and the arrays to write, in memory."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.domains: list[dict[str, Any]] = []
        self._domain_ids: dict[Domain, int] = {}
        self.host: list[dict[str, Any]] = []

    def bundle(self, obj: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from . import __version__

        if isinstance(obj, TableNetwork):
            content = "network"
            layers = [self.layer(layer, k) for k, layer in enumerate(obj.layers.values())]
            graph = self.graph(obj.graph)
            input_shape: list[int] | None = [int(s) for s in obj.input_shape]
        elif isinstance(obj, LayerTables):
            content, layers, graph, input_shape = "layer", [self.layer(obj, 0)], None, None
        else:
            msg = (
                f"save: expected a TableNetwork or LayerTables (from iotable.precompute), received {type(obj).__name__}"
            )
            raise BundleError(msg)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "library_version": __version__,
            "content": content,
            "address_digit_order": DIGIT_ORDER,
            "input_shape": input_shape,
            "domains": self.domains,
            "graph": graph,
            "layers": layers,
            "host": self.host,
            "files": {},  # filled with checksums as the files are written
        }
        return manifest, self.arrays

    # -- pieces -------------------------------------------------------------------------------------------

    def domain(self, domain: Any) -> Any:
        """A domain as its index in ``domains``; a tuple of domains as a list of indices; ``None`` as null."""
        if domain is None:
            return None
        if isinstance(domain, Domain):
            if domain not in self._domain_ids:
                params = domain.params
                record: dict[str, Any] = {"kind": "uniform" if params else "values", "size": len(domain)}
                record.update(params if params else {"values": domain.values.tolist()})
                self._domain_ids[domain] = len(self.domains)
                self.domains.append(record)
            return self._domain_ids[domain]
        return [self.domain(d) for d in domain]

    def array(self, rel: str, array: Any, where: str) -> str:
        if isinstance(array, torch.Tensor):
            if array.dtype == torch.bfloat16:
                msg = f"save: {where} is a bfloat16 tensor, which .npy cannot store; convert it with .float() first"
                raise BundleError(msg)
            array = array.detach().cpu().numpy()
        array = np.asarray(array)
        if array.dtype.kind not in "biuf":
            msg = f"save: {where} has dtype {array.dtype}; a bundle stores numeric arrays only (no pickled objects)"
            raise BundleError(msg)
        self.arrays[rel] = np.ascontiguousarray(array)
        return rel

    def value(self, value: Any, where: str) -> Any:
        """Graph metadata as JSON: arrays for tuples and lists, tagged objects for library types."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            if not math.isfinite(value):
                msg = f"save: {where} is {value!r}; JSON holds finite numbers only"
                raise BundleError(msg)
            return float(value)
        if isinstance(value, Layout):
            return {"$layout": value.value}
        if isinstance(value, PaddingMode):
            return value.value
        if isinstance(value, Domain):
            return {"$domain": self.domain(value)}
        if isinstance(value, Unit):
            return {"$unit": _unit_record(value)}
        if isinstance(value, (tuple, list)):
            return [self.value(v, f"{where}[{k}]") for k, v in enumerate(value)]
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if not isinstance(key, str) or key.startswith("$"):
                    msg = f"save: {where} has the key {key!r}; metadata keys must be strings not starting with '$'"
                    raise BundleError(msg)
                out[key] = self.value(item, f"{where}[{key!r}]")
            return out
        if isinstance(value, (np.ndarray, torch.Tensor)):
            return {"$array": self.array(f"graph/array{len(self.arrays)}.npy", value, where)}
        if isinstance(value, (nn.MaxPool1d, nn.MaxPool2d)):
            fields = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
            pool = {"rank": 1 if isinstance(value, nn.MaxPool1d) else 2}
            pool.update({k: self.value(getattr(value, k), f"{where}.{k}") for k in fields})
            return {"$maxpool": pool}
        msg = (
            f"save: {where} holds a {type(value).__name__}, which a bundle cannot store without pickle; "
            "graph metadata must be numbers, strings, lists, dicts, layouts, domains, units or arrays"
        )
        raise BundleError(msg)

    def host_module(self, node: Node) -> dict[str, str]:
        """Record a host node's module as its class name and weights; return the tag its meta holds."""
        module = node.meta.get("module")
        if not isinstance(module, nn.Module):
            msg = f"save: host node {node.name!r} has no torch module in meta['module'], received {_kind(module)}"
            raise BundleError(msg)
        if isinstance(module, _MissingHost):  # loaded without its module: keep what the bundle held
            cls, items = module.cls, module.state.items()
        else:
            cls, items = f"{type(module).__module__}.{type(module).__qualname__}", module.state_dict().items()
        state = []
        folder = f"host/node{len(self.host)}"
        for k, (key, tensor) in enumerate(items):
            where = f"host module {node.name!r} ({type(module).__name__}) state {key!r}"
            if not isinstance(tensor, (torch.Tensor, np.ndarray)):
                msg = f"save: {where} is a {type(tensor).__name__}, not a tensor; a bundle stores tensors only"
                raise BundleError(msg)
            state.append({"key": key, "array": self.array(f"{folder}/state{k}.npy", tensor, where)})
        self.host.append({"node": node.name, "class": cls, "state": state})
        return {"$host": node.name}

    def graph(self, graph: Graph) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = []
        for node in graph.nodes:
            where = f"graph node {node.name!r}"
            if node.kind is NodeKind.HOST:
                rest = {k: v for k, v in node.meta.items() if k != "module"}
                meta = {**self.value(rest, f"{where} meta"), "module": self.host_module(node)}
            elif node.kind is NodeKind.PAD and isinstance(node.meta.get("index_map"), np.ndarray):
                rest = {k: v for k, v in node.meta.items() if k != "index_map"}
                rel = self.array(f"graph/node{len(nodes)}.index_map.npy", node.meta["index_map"], f"{where} index_map")
                meta = {**self.value(rest, f"{where} meta"), "index_map": {"$array": rel}}
            else:
                meta = self.value(node.meta, f"{where} meta")
            nodes.append(
                {
                    "name": node.name,
                    "kind": node.kind.value,
                    "inputs": list(node.inputs),
                    "shape": [int(s) for s in node.shape],
                    "layout": None if node.layout is None else node.layout.value,
                    "domain": self.domain(node.domain),
                    "meta": meta,
                }
            )
        edges = []
        for j, edge in enumerate(graph.edges):
            where = f"graph edge {edge.producer!r} -> {edge.consumer!r}"
            index_map = None
            if edge.index_map is not None:
                index_map = self.array(f"graph/edge{j}.index_map.npy", edge.index_map, f"{where} index_map")
            edges.append(
                {
                    "producer": edge.producer,
                    "producer_port": int(edge.producer_port),
                    "consumer": edge.consumer,
                    "consumer_port": int(edge.consumer_port),
                    "shape": [int(s) for s in edge.shape],
                    "layout": None if edge.layout is None else edge.layout.value,
                    "domain": self.domain(edge.domain),
                    "index_map": index_map,
                    "buffer": self.value(edge.buffer, f"{where} buffer"),
                }
            )
        return {"nodes": nodes, "edges": edges}

    def layer(self, layer: LayerTables, k: int) -> dict[str, Any]:
        plan = layer.plan
        if len(layer.tables) != len(plan.units):
            msg = f"save: layer {plan.name!r} has {len(layer.tables)} table(s) for {len(plan.units)} unit(s)"
            raise BundleError(msg)
        g = plan.geometry
        spec = {f.name: self.value(getattr(plan.spec, f.name), f"spec.{f.name}") for f in dataclasses.fields(Spec)}
        build = {  # how the tables were made (method, cached units, ...): every other LayerTables field
            f.name: self.value(getattr(layer, f.name), f"layer {plan.name!r} {f.name}")
            for f in dataclasses.fields(LayerTables)
            if f.name not in ("plan", "tables")
        }
        record = {
            "name": plan.name,
            "build": build,
            "plan": {
                "layout": plan.layout.value,
                "geometry": {
                    "kernel": list(g.kernel),
                    "stride": list(g.stride),
                    "dilation": list(g.dilation),
                    "padding": [list(pair) for pair in g.padding],
                    "padding_mode": g.padding_mode.value,
                },
                "in_channels": plan.in_channels,
                "out_channels": plan.out_channels,
                "input_domains": self.domain(plan.input_domains),
                "output_domain": self.domain(plan.output_domain),
                "units": [_unit_record(u) for u in plan.units],
                "frame_in": list(plan.frame_in),
                "frame_out": list(plan.frame_out),
                "slots": [list(s) for s in plan.slots],
                "fill_codes": list(plan.fill_codes),
                "max_rows": plan.max_rows,
                "spec": spec,
            },
            "tables": [
                self.table(plan, unit, table, f"tables/layer{k}/unit{u}")
                for u, (unit, table) in enumerate(zip(plan.units, layer.tables))
            ],
        }
        return record

    def table(self, plan: LayerPlan, unit: Unit, table: IOTable, stem: str) -> dict[str, Any]:
        where = f"layer {plan.name!r} unit {unit.index}"
        channels, taps = _input_elements(plan, unit)
        record = {
            "layer": table.layer,
            "unit": table.unit,
            "in_channels": list(unit.in_channels),
            "out_channels": list(unit.out_channels),
            "fan_in": table.fan_in,
            "fan_out": table.fan_out,
            "input_domains": self.domain(table.input_domains),
            "output_domain": self.domain(table.output_domain),
            "rows": table.rows,
            "address_space": math.prod(table.radices),
            "dense": table.is_dense,
            "address_digit_order": DIGIT_ORDER,
            "input_order": _input_order(plan),
            "input_channels": channels,
            "input_taps": taps,
            "outputs": self.array(f"{stem}.outputs.npy", table.outputs, f"{where} outputs"),
            "inputs": None,
            "addresses": None,
            "dont_care": None,
        }
        if not table.is_dense:
            record["inputs"] = self.array(f"{stem}.inputs.npy", table.inputs, f"{where} inputs")
            record["addresses"] = self.array(f"{stem}.addresses.npy", table.addresses, f"{where} addresses")
        if table.dont_care is not None:
            record["dont_care"] = self.array(f"{stem}.dont_care.npy", table.dont_care, f"{where} dont_care")
        return record


def _unit_record(unit: Unit) -> dict[str, Any]:
    return {
        "index": unit.index,
        "in_channels": list(unit.in_channels),
        "out_channels": list(unit.out_channels),
        "fan_in": unit.fan_in,
        "rows": unit.rows,
    }


def _input_order(plan: LayerPlan) -> str:
    if plan.geometry.rank == 0:
        return "features"
    return "kernel-major" if plan.layout.channels_last else "channel-major"


def _input_elements(plan: LayerPlan, unit: Unit) -> tuple[list[int], list[int]]:
    """The input channel and kernel position (row-major tap index) of each of a unit's inputs, in order."""
    channels = np.asarray(unit.in_channels, dtype=np.int64)
    taps = np.arange(plan.geometry.window, dtype=np.int64)
    if plan.layout.channels_last:
        pairs = np.stack(np.meshgrid(taps, channels, indexing="ij"), axis=-1)[..., ::-1]
    else:
        pairs = np.stack(np.meshgrid(channels, taps, indexing="ij"), axis=-1)
    pairs = pairs.reshape(-1, 2)
    return pairs[:, 0].tolist(), pairs[:, 1].tolist()


# -- writing ----------------------------------------------------------------------------------------------


class _HashingWriter:
    """A write-only file wrapper that feeds every byte to a sha256 on its way to disk."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self.size += len(view)
        return self.file.write(view)


def _fsync_dir(path: Path) -> None:
    """Make a directory's entries (new files, renames) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write(target: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".saving", dir=parent))
    try:
        folders = {staging}
        for rel, array in arrays.items():
            file = staging / rel
            file.parent.mkdir(parents=True, exist_ok=True)
            folders.add(file.parent)
            with open(file, "wb") as f:
                writer = _HashingWriter(f)
                np.lib.format.write_array(writer, array, version=(1, 0), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            manifest["files"][rel] = {
                "sha256": writer.digest.hexdigest(),
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "bytes": writer.size,
            }
        with open(staging / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            _fsync_dir(folder)
        if target.exists():
            # No portable atomic swap of directories: move the old bundle aside, the new one in, then drop
            # the old one. Between the two renames the target is absent, never half-written.
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            previous = aside / "bundle"
            try:
                os.replace(target, previous)
                try:
                    os.replace(staging, target)
                except BaseException:
                    os.replace(previous, target)  # put the previous bundle back
                    raise
            finally:
                _fsync_dir(parent)
                if target.exists():  # else the previous bundle survives only aside: keep it
                    shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(staging, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# -- load -------------------------------------------------------------------------------------------------


def load(
    path: str | os.PathLike[str], *, host_modules: Mapping[str, nn.Module] | None = None
) -> TableNetwork | LayerTables:
    """Read a bundle written by :func:`save`: a :class:`~iotable.network.TableNetwork` or :class:`LayerTables`.

    Every file the manifest names is checked before use (path inside the bundle, ``.npy`` header, dtype,
    shape, size, sha256), then the tables are memory-mapped read-only. No model code runs and nothing is
    unpickled; ``net.run(x)`` equals the saved network's bit for bit.

    A bundle stores a host module's class name and weights, not its code. Pass the module for each host
    node in ``host_modules``: its parameters and buffers are set from the bundle (the keys and shapes must
    match). Without it, the network loads, and running it raises :class:`BundleError` naming the node.

    Args:
        path: the bundle directory.
        host_modules: network bundles: a module per host node name (``net.graph.nodes_of("host")``).

    Returns:
        The network or layer that was saved.

    Raises:
        BundleError: a missing, damaged or inconsistent file or manifest field, or an unfit host module.

    Each :class:`BundleError` names the file or field: a missing manifest or array file, a truncated or
    corrupted array, a checksum mismatch, an unknown or newer format version, a shape or dtype that
    disagrees with the manifest, or a path that escapes the bundle.

    Example:
        >>> import pathlib, tempfile
        >>> conv = torch.nn.Conv1d(2, 2, kernel_size=2, groups=2, bias=False)
        >>> layer = precompute(conv, input_domain=Domain.uniform(1))
        >>> path = save(layer, pathlib.Path(tempfile.mkdtemp()) / "conv")
        >>> loaded = load(path)
        >>> loaded[1] == layer[1], loaded.plan.units == layer.plan.units
        (True, True)
    """
    return _open(path, host_modules=host_modules)[0]


def _open(
    path: str | os.PathLike[str], *, host_modules: Mapping[str, nn.Module] | None = None
) -> tuple[TableNetwork | LayerTables, dict[str, Any]]:
    """:func:`load`, also returning the manifest (for the command line)."""
    if not isinstance(path, (str, os.PathLike)):
        msg = f"load: expected a bundle directory path (str or os.PathLike), received {type(path).__name__}"
        raise BundleError(msg)
    if host_modules is not None and (
        not isinstance(host_modules, Mapping) or not all(isinstance(k, str) for k in host_modules)
    ):
        msg = (
            "load: host_modules must map host node names to modules, e.g. {'fc': model.fc}; received "
            f"{type(host_modules).__name__}"
        )
        raise BundleError(msg)
    root = Path(path)
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        msg = f"load: {root} {what}; expected a bundle directory written by iotable.save"
        raise BundleError(msg)
    manifest = _read_manifest(root)
    reader = _Decoder(root, manifest)
    obj = reader.bundle(host_modules)
    return obj, manifest


def _read_manifest(root: Path) -> dict[str, Any]:
    file = root / MANIFEST
    if not file.is_file():
        msg = (
            f"{file}: missing; {root} is not an iotable bundle (or its save did not finish). Save it again with "
            "iotable.save"
        )
        raise BundleError(msg)
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        msg = f"{file}: cannot be read ({exc})"
        raise BundleError(msg) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{file}: not valid JSON ({exc}); the manifest is corrupted"
        raise BundleError(msg) from None
    if not isinstance(manifest, dict):
        msg = f"{file}: expected a JSON object, received {type(manifest).__name__}"
        raise BundleError(msg)
    if manifest.get("format") != FORMAT:
        msg = f"{file}: format is {manifest.get('format')!r}, expected {FORMAT!r}; this is not an iotable bundle"
        raise BundleError(msg)
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        msg = f"{file}: unknown format_version {version!r}; expected an integer from 1 to {FORMAT_VERSION}"
        raise BundleError(msg)
    if version > FORMAT_VERSION:
        msg = (
            f"{file}: format_version {version} was written by a newer iotable "
            f"({manifest.get('library_version', 'unknown version')}); this iotable reads format_version "
            f"{FORMAT_VERSION} and older. Upgrade iotable to load it"
        )
        raise BundleError(msg)
    return manifest


# -- checked access to manifest values --------------------------------------------------------------------


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _int(value: Any, where: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        msg = f"{where}: expected an integer{bound}, received {value!r}"
        raise BundleError(msg)
    return value


def _ints(value: Any, where: str, *, minimum: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list):
        msg = f"{where}: expected a list of integers, received {_kind(value)}"
        raise BundleError(msg)
    return tuple(_int(v, f"{where}[{k}]", minimum=minimum) for k, v in enumerate(value))


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        msg = f"{where}: expected a string, received {_kind(value)}"
        raise BundleError(msg)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        msg = f"{where}: expected a list, received {_kind(value)}"
        raise BundleError(msg)
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{where}: expected an object, received {_kind(value)}"
        raise BundleError(msg)
    return value


def _field(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        msg = f"{where}: missing field {key!r}; the manifest is incomplete or was edited"
        raise BundleError(msg)
    return record[key]


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


class _MissingHost(nn.Module):
    """Stands in for a host module the caller did not pass to :func:`load`; running it is an error.

    It keeps the bundle's class name and weights, so that saving the loaded network again loses nothing.
    """

    def __init__(self, node: str, cls: str, state: dict[str, np.ndarray], missing: list[str]) -> None:
        super().__init__()
        self.node, self.cls, self.state, self.missing = node, cls, state, missing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modules = ", ".join(f"{name!r}: ..." for name in self.missing)
        msg = (
            f"host node {self.node!r} has no module: a bundle stores a host module's class ({self.cls}) and "
            f"weights, not its code. Pass the host modules when loading: iotable.load(path, host_modules="
            f"{{{modules}}}); their weights are then set from the bundle"
        )
        raise BundleError(msg)


class _Decoder:
    """Rebuilds a network or layer from a parsed manifest, verifying every file it reads."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self.version: int = manifest["format_version"]  # checked by _read_manifest
        self.where = str(root / MANIFEST)
        self.arrays: dict[str, np.ndarray] = {}
        self.domains: list[Domain] = []

    def bundle(self, host_modules: Mapping[str, nn.Module] | None) -> TableNetwork | LayerTables:
        m, where = self.manifest, self.where
        files = _obj(_field(m, "files", where), f"{where}: files")
        for rel, entry in files.items():
            self.arrays[rel] = _read_array(self.root, rel, _obj(entry, f"{where}: files[{rel!r}]"), where)
        self.domains = [
            self.domain_record(_obj(d, f"{where}: domains[{k}]"), f"{where}: domains[{k}]")
            for k, d in enumerate(_list(_field(m, "domains", where), f"{where}: domains"))
        ]
        content = _field(m, "content", where)
        layers = [
            self.layer(_obj(r, f"{where}: layers[{k}]"), f"{where}: layers[{k}]")
            for k, r in enumerate(_list(_field(m, "layers", where), f"{where}: layers"))
        ]
        if content == "layer":
            if len(layers) != 1:
                msg = f"{where}: a layer bundle holds exactly one layer, this one lists {len(layers)}"
                raise BundleError(msg)
            if host_modules:
                msg = "load: host_modules= applies to network bundles; this bundle holds one layer"
                raise BundleError(msg)
            return layers[0]
        if content != "network":
            msg = f"{where}: content is {content!r}; expected 'network' or 'layer'"
            raise BundleError(msg)
        by_name = {layer.name: layer for layer in layers}
        if len(by_name) != len(layers):
            msg = f"{where}: layers: a layer name is used twice in {[layer.name for layer in layers]}"
            raise BundleError(msg)
        hosts = self.hosts(host_modules)
        graph = self.graph(_obj(_field(m, "graph", where), f"{where}: graph"), by_name, hosts)
        input_shape = _ints(_field(m, "input_shape", where), f"{where}: input_shape", minimum=1)
        if not graph.nodes or graph.nodes[0].kind is not NodeKind.INPUT or graph.nodes[-1].kind is not NodeKind.OUTPUT:
            msg = f"{where}: graph: expected the input node first and the output node last"
            raise BundleError(msg)
        if graph.nodes[0].shape != input_shape:
            msg = f"{where}: input_shape {input_shape} disagrees with the input node's shape {graph.nodes[0].shape}"
            raise BundleError(msg)
        return TableNetwork(graph=graph, layers=by_name, input_shape=input_shape)

    # -- values -------------------------------------------------------------------------------------------

    def array(self, rel: Any, where: str) -> np.ndarray:
        if not isinstance(rel, str) or rel not in self.arrays:
            msg = f"{where}: names the file {rel!r}, which the manifest's files list (with its checksum) lacks"
            raise BundleError(msg)
        return self.arrays[rel]

    def domain_record(self, record: dict[str, Any], where: str) -> Domain:
        kind = _field(record, "kind", where)
        size = _int(_field(record, "size", where), f"{where}.size", minimum=1)
        with _context(where):
            if kind == "uniform":
                domain = Domain.uniform(
                    _int(_field(record, "bits", where), f"{where}.bits"),
                    signed=bool(_field(record, "signed", where)),
                    narrow=bool(_field(record, "narrow", where)),
                    scale=float(_field(record, "scale", where)),
                    zero_point=float(_field(record, "zero_point", where)),
                )
            elif kind == "values":
                values = _list(_field(record, "values", where), f"{where}.values")
                if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                    msg = f"{where}.values: expected numbers"
                    raise BundleError(msg)
                domain = Domain.values(values)
            else:
                msg = f"{where}: kind is {kind!r}; expected 'uniform' or 'values'"
                raise BundleError(msg)
        if len(domain) != size:
            msg = f"{where}: size {size} disagrees with the {len(domain)} values of {domain!r}"
            raise BundleError(msg)
        return domain

    def domain(self, ref: Any, where: str) -> Any:
        if ref is None:
            return None
        if isinstance(ref, list):
            return tuple(self.domain(r, f"{where}[{k}]") for k, r in enumerate(ref))
        index = _int(ref, where, minimum=0)
        if index >= len(self.domains):
            msg = f"{where}: domain index {index} is out of range; the manifest lists {len(self.domains)} domain(s)"
            raise BundleError(msg)
        return self.domains[index]

    def domains_of(self, ref: Any, where: str) -> tuple[Domain, ...]:
        domains = self.domain(_list(ref, where), where)
        if not domains or any(d is None for d in domains):
            msg = f"{where}: expected a non-empty list of domain indices"
            raise BundleError(msg)
        return domains

    def layout(self, value: Any, where: str) -> Layout | None:
        if value is None:
            return None
        with _context(where):
            return Layout.parse(_str(value, where), what=where)

    def value(self, value: Any, where: str, *, hosts: dict[str, nn.Module] | None = None) -> Any:
        """Inverse of :meth:`_Encoder.value`: JSON arrays become tuples, tagged objects library types."""
        if isinstance(value, list):
            return tuple(self.value(v, f"{where}[{k}]", hosts=hosts) for k, v in enumerate(value))
        if not isinstance(value, dict):
            return value
        tags = [k for k in value if k.startswith("$")]
        if not tags:
            return {k: self.value(v, f"{where}[{k!r}]", hosts=hosts) for k, v in value.items()}
        if len(value) != 1:
            msg = f"{where}: a tagged value holds exactly one '$' key, received keys {sorted(value)}"
            raise BundleError(msg)
        tag, body = tags[0], value[tags[0]]
        if tag == "$layout":
            return self.layout(body, where)
        if tag == "$domain":
            return self.domain(body, where)
        if tag == "$unit":
            return _unit(_obj(body, where), where)
        if tag == "$array":
            return self.array(body, where)
        if tag == "$maxpool":
            pool = {k: self.value(v, f"{where}.{k}") for k, v in _obj(body, where).items()}
            rank = pool.pop("rank", None)
            if rank not in (1, 2):
                msg = f"{where}: rank must be 1 or 2, received {rank!r}"
                raise BundleError(msg)
            with _context(where):
                return (nn.MaxPool1d if rank == 1 else nn.MaxPool2d)(**pool)
        if tag == "$host":
            if hosts is None or body not in hosts:
                msg = f"{where}: names the host node {body!r}, which the manifest's host list lacks"
                raise BundleError(msg)
            return hosts[body]
        msg = f"{where}: unknown tagged value {tag!r}"
        raise BundleError(msg)

    # -- hosts --------------------------------------------------------------------------------------------

    def hosts(self, supplied: Mapping[str, nn.Module] | None) -> dict[str, nn.Module]:
        where = f"{self.where}: host"
        records = _list(_field(self.manifest, "host", self.where), where)
        supplied = dict(supplied or {})
        names = [_str(_field(_obj(r, where), "node", where), f"{where}.node") for r in records]
        unknown = sorted(set(supplied) - set(names))
        if unknown:
            msg = f"load: host_modules names {unknown}, but the bundle's host nodes are {names}"
            raise BundleError(msg)
        modules: dict[str, nn.Module] = {}
        missing = [name for name in names if name not in supplied]
        for k, (name, record) in enumerate(zip(names, records)):
            here = f"{where}[{k}] ({name!r})"
            cls = _str(_field(record, "class", here), f"{here}.class")
            state = {}
            for j, item in enumerate(_list(_field(record, "state", here), f"{here}.state")):
                item = _obj(item, f"{here}.state[{j}]")
                key = _str(_field(item, "key", here), f"{here}.state[{j}].key")
                state[key] = self.array(_field(item, "array", here), f"{here}.state[{j}]")
            module = supplied.get(name)
            if module is None:
                modules[name] = _MissingHost(name, cls, state, missing)
            else:
                modules[name] = _attach(name, module, state)
        return modules

    # -- graph --------------------------------------------------------------------------------------------

    def graph(self, record: dict[str, Any], layers: dict[str, LayerTables], hosts: dict[str, nn.Module]) -> Graph:
        graph = Graph()
        where = f"{self.where}: graph"
        for k, item in enumerate(_list(_field(record, "nodes", where), f"{where}.nodes")):
            item = _obj(item, f"{where}.nodes[{k}]")
            here = f"{where}.nodes[{k}]"
            name = _str(_field(item, "name", here), f"{here}.name")
            here = f"{here} ({name!r})"
            with _context(here):
                kind = NodeKind(_field(item, "kind", here))
            meta = self.value(_obj(_field(item, "meta", here), f"{here}.meta"), f"{here}.meta", hosts=hosts)
            if kind is NodeKind.PAD and self.version < 2:
                meta = self.pad_meta_v1(meta, graph, item, here)
            node = Node(
                name,
                kind,
                tuple(_str(p, f"{here}.inputs") for p in _list(_field(item, "inputs", here), f"{here}.inputs")),
                _ints(_field(item, "shape", here), f"{here}.shape", minimum=0),
                self.layout(_field(item, "layout", here), f"{here}.layout"),
                self.domain(_field(item, "domain", here), f"{here}.domain"),
                meta,
            )
            self.check_node(node, layers, hosts, here)
            graph.add(node)
        for k, item in enumerate(_list(_field(record, "edges", where), f"{where}.edges")):
            item = _obj(item, f"{where}.edges[{k}]")
            here = f"{where}.edges[{k}]"
            index_map = _field(item, "index_map", here)
            if index_map is not None:
                index_map = self.array(index_map, f"{here}.index_map")
                if index_map.ndim != 2 or index_map.dtype.kind not in "iu":
                    msg = (
                        f"{here}.index_map: expected a 2-D integer array, received {index_map.dtype} {index_map.shape}"
                    )
                    raise BundleError(msg)
            buffer = self.value(_field(item, "buffer", here), f"{here}.buffer")
            graph.add_edge(
                Edge(
                    _str(_field(item, "producer", here), f"{here}.producer"),
                    _int(_field(item, "producer_port", here), f"{here}.producer_port", minimum=0),
                    _str(_field(item, "consumer", here), f"{here}.consumer"),
                    _int(_field(item, "consumer_port", here), f"{here}.consumer_port", minimum=0),
                    _ints(_field(item, "shape", here), f"{here}.shape", minimum=0),
                    self.layout(_field(item, "layout", here), f"{here}.layout"),
                    self.domain(_field(item, "domain", here), f"{here}.domain"),
                    index_map,
                    buffer,
                )
            )
        try:
            return graph.check()
        except GraphError as exc:
            msg = f"{where}: the graph fails its checks: {exc}"
            raise BundleError(msg) from None

    def pad_meta_v1(self, meta: dict[str, Any], graph: Graph, item: dict[str, Any], where: str) -> dict[str, Any]:
        """A format-1 pad node's meta in today's form: symmetric padding of real 0, and its index map."""
        raw = _field(_obj(_field(item, "meta", where), f"{where}.meta"), "padding", f"{where}.meta")
        padding = _ints(raw, f"{where}.meta['padding']", minimum=0)
        inputs = _list(_field(item, "inputs", where), f"{where}.inputs")
        if len(inputs) != 1 or not any(n.name == inputs[0] for n in graph.nodes):
            msg = f"{where}.inputs: a pad node reads one earlier node, received {inputs!r}"
            raise BundleError(msg)
        layout = self.layout(_field(item, "layout", where), f"{where}.layout")
        pairs = tuple((p, p) for p in padding)
        with _context(where):
            index_map = pad_index_map(
                graph[inputs[0]].shape, pairs, PaddingMode.ZEROS, channels_last=bool(layout and layout.channels_last)
            )
        return {**meta, "padding": pairs, "mode": PaddingMode.ZEROS.value, "index_map": index_map}

    @staticmethod
    def check_node(node: Node, layers: dict[str, LayerTables], hosts: dict[str, nn.Module], where: str) -> None:
        """What the runtime relies on beyond :meth:`Graph.check`."""
        if node.kind is NodeKind.TABLE:
            name = node.meta.get("layer")
            if name not in layers:
                msg = f"{where}: meta['layer'] is {name!r}, which is not one of the layers {list(layers)}"
                raise BundleError(msg)
            if tuple(node.meta.get("units", ())) != layers[name].plan.units:
                msg = f"{where}: meta['units'] disagrees with the units of layer {name!r}"
                raise BundleError(msg)
            node.meta["units"] = layers[name].plan.units
        elif node.kind is NodeKind.HOST and node.meta.get("module") is not hosts.get(node.name):
            msg = f"{where}: a host node's meta['module'] must be {{'$host': {node.name!r}}}, listed under 'host'"
            raise BundleError(msg)
        elif node.kind is NodeKind.POOL and not isinstance(node.meta.get("module"), (nn.MaxPool1d, nn.MaxPool2d)):
            msg = f"{where}: a pool node's meta['module'] must be a '$maxpool' record"
            raise BundleError(msg)

    # -- layers -------------------------------------------------------------------------------------------

    def layer(self, record: dict[str, Any], where: str) -> LayerTables:
        name = _str(_field(record, "name", where), f"{where}.name")
        where = f"{where} ({name!r})"
        plan = self.plan(name, _obj(_field(record, "plan", where), f"{where}.plan"), f"{where}.plan")
        tables = _list(_field(record, "tables", where), f"{where}.tables")
        if len(tables) != len(plan.units):
            msg = f"{where}.tables: {len(tables)} table(s) for {len(plan.units)} unit(s); expected one per unit"
            raise BundleError(msg)
        known = {f.name for f in dataclasses.fields(LayerTables)} - {"plan", "tables"}
        build = _obj(record.get("build", {}), f"{where}.build")
        with _context(f"{where}.build"):
            return LayerTables(
                plan=plan,
                tables=tuple(
                    self.table(_obj(t, f"{where}.tables[{u}]"), plan, unit, f"{where}.tables[{u}]")
                    for u, (t, unit) in enumerate(zip(tables, plan.units))
                ),
                **{k: self.value(v, f"{where}.build.{k}") for k, v in build.items() if k in known},
            )

    def plan(self, name: str, record: dict[str, Any], where: str) -> LayerPlan:
        f = lambda key: _field(record, key, where)  # noqa: E731
        layout = self.layout(f("layout"), f"{where}.layout")
        if layout is None:
            msg = f"{where}.layout: expected a layout, received null"
            raise BundleError(msg)
        geometry = self.geometry(_obj(f("geometry"), f"{where}.geometry"), f"{where}.geometry")
        units = tuple(
            _unit(_obj(u, f"{where}.units[{k}]"), f"{where}.units[{k}]")
            for k, u in enumerate(_list(f("units"), f"{where}.units"))
        )
        spec_record = _obj(f("spec"), f"{where}.spec")
        known = {field.name for field in dataclasses.fields(Spec)}  # a newer writer may add fields
        with _context(f"{where}.spec"):
            fields = {k: self.value(v, f"{where}.spec.{k}") for k, v in spec_record.items() if k in known}
            if fields.get("padding") is not None:  # format 1: one integer per axis, both sides
                fields["padding"] = tuple((p, p) if isinstance(p, int) else tuple(p) for p in fields["padding"])
            if fields.get("padding_mode") is not None:
                fields["padding_mode"] = PaddingMode.parse(fields["padding_mode"], what=f"{where}.spec.padding_mode")
            spec = Spec(**fields)
        in_channels = _int(f("in_channels"), f"{where}.in_channels", minimum=1)
        input_domains = self.domains_of(f("input_domains"), f"{where}.input_domains")
        if len(input_domains) != in_channels:
            msg = f"{where}.input_domains: {len(input_domains)} domain(s) for {in_channels} input channel(s)"
            raise BundleError(msg)
        for k, unit in enumerate(units):
            if unit.index != k or not unit.in_channels or max(unit.in_channels) >= in_channels:
                msg = f"{where}.units[{k}]: expected index {k} and input channels below {in_channels}"
                raise BundleError(msg)
        return LayerPlan(
            name=name,
            spec=spec,
            layout=layout,
            geometry=geometry,
            in_channels=in_channels,
            out_channels=_int(f("out_channels"), f"{where}.out_channels", minimum=1),
            units=units,
            input_domains=input_domains,
            output_domain=self.domain(f("output_domain"), f"{where}.output_domain"),
            frame_in=_ints(f("frame_in"), f"{where}.frame_in", minimum=0),
            frame_out=_ints(f("frame_out"), f"{where}.frame_out", minimum=0),
            slots=tuple(_ints(s, f"{where}.slots[{k}]") for k, s in enumerate(_list(f("slots"), f"{where}.slots"))),
            fill_codes=_ints(f("fill_codes"), f"{where}.fill_codes", minimum=0),
            max_rows=_int(f("max_rows"), f"{where}.max_rows", minimum=1),
        )

    def geometry(self, record: dict[str, Any], where: str) -> Geometry:
        """A plan's window; format 1 wrote one padding integer per axis (both sides, zeros)."""
        kernel, stride, dilation = (
            _ints(_field(record, key, where), f"{where}.{key}", minimum=1) for key in ("kernel", "stride", "dilation")
        )
        padding_record = _list(_field(record, "padding", where), f"{where}.padding")
        if self.version < 2:
            padding = tuple((p, p) for p in _ints(padding_record, f"{where}.padding", minimum=0))
            mode = PaddingMode.ZEROS
        else:
            pairs = [_ints(pair, f"{where}.padding[{k}]", minimum=0) for k, pair in enumerate(padding_record)]
            if any(len(pair) != 2 for pair in pairs):
                msg = f"{where}.padding: expected one [before, after] pair per spatial axis, received {padding_record}"
                raise BundleError(msg)
            padding = tuple((pair[0], pair[1]) for pair in pairs)
            with _context(f"{where}.padding_mode"):
                mode = PaddingMode.parse(_str(_field(record, "padding_mode", where), f"{where}.padding_mode"))
        if len({len(kernel), len(stride), len(dilation), len(padding)}) != 1:
            msg = f"{where}: kernel, stride, dilation and padding must have one entry per spatial axis"
            raise BundleError(msg)
        return Geometry(kernel=kernel, stride=stride, dilation=dilation, padding=padding, padding_mode=mode)

    def table(self, record: dict[str, Any], plan: LayerPlan, unit: Unit, where: str) -> IOTable:
        f = lambda key: _field(record, key, where)  # noqa: E731
        domains = self.domains_of(f("input_domains"), f"{where}.input_domains")
        output_domain = self.domain(f("output_domain"), f"{where}.output_domain")
        if domains != plan.unit_domains(unit) or output_domain != plan.output_domain:
            msg = f"{where}: input or output domains disagree with the plan of unit {unit.index}"
            raise BundleError(msg)
        radices = tuple(len(d) for d in domains)
        space = math.prod(radices)
        if unit.fan_in != len(domains) or unit.rows != space:
            msg = (
                f"{where}: unit {unit.index} of the plan has fan-in {unit.fan_in} and {unit.rows} rows; its "
                f"domains give {len(domains)} and {space}"
            )
            raise BundleError(msg)
        rows = _int(f("rows"), f"{where}.rows", minimum=0)
        dense = f("dense")
        if dense is not (rows == space):
            msg = f"{where}: dense is {dense!r} but the table holds {rows} of {space} rows"
            raise BundleError(msg)
        layer, unit_index = f("layer"), f("unit")
        if not (layer is None or isinstance(layer, str)) or not (unit_index is None or isinstance(unit_index, int)):
            msg = f"{where}: layer must be a string or null and unit an integer or null"
            raise BundleError(msg)
        fan_out = len(unit.out_channels)
        outputs = self.array(f("outputs"), f"{where}.outputs")
        here = f"{where}.outputs ({f('outputs')})"
        _expect(outputs, (rows, fan_out), where=here)
        if output_domain is None and outputs.dtype.kind != "f":
            msg = f"{here}: raw outputs must be floats, the file holds dtype {outputs.dtype}"
            raise BundleError(msg)
        if output_domain is not None:
            _expect(outputs, (rows, fan_out), dtype=output_domain.code_dtype, where=here)
            _codes_below(outputs, len(output_domain), here)
        dont_care = f("dont_care")
        if dont_care is not None:
            dont_care = np.array(self.array(dont_care, f"{where}.dont_care"))
            _expect(dont_care, (fan_out,), dtype=outputs.dtype, where=f"{where}.dont_care")
        inputs = addresses = None
        if not dense:
            inputs = self.array(f("inputs"), f"{where}.inputs")
            addresses = self.array(f("addresses"), f"{where}.addresses")
            _expect(inputs, (rows, len(domains)), dtype=code_dtype(max(radices)), where=f"{where}.inputs")
            _expect(addresses, (rows,), dtype=np.dtype(np.int64), where=f"{where}.addresses")
            _check_addresses(inputs, addresses, radices, where)
        return _table(outputs, inputs, addresses, domains, output_domain, dont_care, layer, unit_index)


def _unit(record: dict[str, Any], where: str) -> Unit:
    unit = Unit(
        index=_int(_field(record, "index", where), f"{where}.index", minimum=0),
        in_channels=_ints(_field(record, "in_channels", where), f"{where}.in_channels", minimum=0),
        out_channels=_ints(_field(record, "out_channels", where), f"{where}.out_channels", minimum=0),
        fan_in=_int(_field(record, "fan_in", where), f"{where}.fan_in", minimum=1),
        rows=_int(_field(record, "rows", where), f"{where}.rows", minimum=1),
    )
    if not unit.out_channels:
        msg = f"{where}.out_channels: a unit writes at least one output"
        raise BundleError(msg)
    return unit


def _expect(array: np.ndarray, shape: tuple[int, ...], *, where: str, dtype: np.dtype | None = None) -> None:
    if array.shape != shape:
        msg = f"{where}: expected shape {shape}, the file holds {array.shape}"
        raise BundleError(msg)
    if dtype is not None and array.dtype != dtype:
        msg = f"{where}: expected dtype {dtype}, the file holds {array.dtype}"
        raise BundleError(msg)


def _codes_below(codes: np.ndarray, limit: int, where: str) -> None:
    if codes.size and int(codes.max()) >= limit:
        msg = f"{where}: holds code {int(codes.max())}; expected codes 0..{limit - 1}"
        raise BundleError(msg)


def _check_addresses(inputs: np.ndarray, addresses: np.ndarray, radices: tuple[int, ...], where: str) -> None:
    """A partial table's input codes are in range and its addresses are theirs, strictly ascending."""
    if not inputs.size:
        return
    bad = inputs >= np.asarray(radices, dtype=np.int64)[None, :]
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        code = int(inputs[row, col])
        msg = f"{where}.inputs: row {row} holds code {code} in input {col}; expected 0..{radices[col] - 1}"
        raise BundleError(msg)
    weights = np.cumprod((*radices[1:], 1)[::-1])[::-1].astype(np.int64)
    if not np.array_equal(inputs.astype(np.int64) @ weights, addresses):
        msg = f"{where}.addresses: disagree with the packed addresses of the input codes ({DIGIT_ORDER})"
        raise BundleError(msg)
    if addresses.size > 1 and not (np.diff(addresses) > 0).all():
        msg = f"{where}.addresses: expected strictly ascending addresses"
        raise BundleError(msg)


def _table(
    outputs: np.ndarray,
    inputs: np.ndarray | None,
    addresses: np.ndarray | None,
    domains: tuple[Domain, ...],
    output_domain: Domain | None,
    dont_care: np.ndarray | None,
    layer: str | None,
    unit: int | None,
) -> IOTable:
    """An IOTable around verified, memory-mapped arrays (the public constructors would copy and rescan them)."""
    table = IOTable._trusted(outputs, input_domains=domains, output_domain=output_domain, layer=layer, unit=unit)
    if inputs is not None or dont_care is not None:  # what a dense table from _trusted leaves unset
        table._inputs, table._addresses, table._dont_care = inputs, addresses, dont_care
    return table


def _attach(name: str, module: Any, state: dict[str, np.ndarray]) -> nn.Module:
    """Set a caller's host module's weights from the bundle; the keys and shapes must match."""
    if not isinstance(module, nn.Module):
        msg = f"load: host_modules[{name!r}] must be a torch.nn.Module, received {type(module).__name__}"
        raise BundleError(msg)
    own = module.state_dict()
    missing, extra = sorted(set(state) - set(own)), sorted(set(own) - set(state))
    if missing or extra:
        msg = (
            f"load: host_modules[{name!r}] ({type(module).__name__}) does not fit host node {name!r}: the bundle "
            f"stores {sorted(state)}, the module has {sorted(own)}; pass a module of the saved architecture"
        )
        raise BundleError(msg)
    for key, array in state.items():
        if tuple(own[key].shape) != array.shape:
            msg = (
                f"load: host_modules[{name!r}] state {key!r} has shape {tuple(own[key].shape)}, the bundle "
                f"stores {array.shape}; pass a module of the saved architecture"
            )
            raise BundleError(msg)
    try:
        module.load_state_dict({k: torch.from_numpy(np.array(a)) for k, a in state.items()}, strict=True)
    except RuntimeError as exc:
        msg = f"load: host_modules[{name!r}]: the bundle's weights do not load into it: {exc}"
        raise BundleError(msg) from None
    return module


# -- array files ------------------------------------------------------------------------------------------


def _safe_path(root: Path, rel: str, where: str) -> Path:
    """``root / rel`` for a relative POSIX path that stays inside the bundle, symlinks resolved."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or "\\" in rel or ":" in rel or any(p in ("..", ".") for p in rel.split("/")):
        msg = (
            f"{where}: the file path {rel!r} escapes the bundle; expected a relative path inside it, "
            "with no '..' (a bundle never points outside its directory)"
        )
        raise BundleError(msg)
    path = root.joinpath(*pure.parts)
    if not path.resolve().is_relative_to(root.resolve()):
        msg = f"{where}: the file {rel!r} resolves to {path.resolve()}, outside the bundle (a symlink out of it)"
        raise BundleError(msg)
    return path


def _read_array(root: Path, rel: str, entry: dict[str, Any], where: str) -> np.ndarray:
    """Verify one array file against its manifest entry (header, size, sha256), then memory-map it."""
    path = _safe_path(root, rel, f"{where}: files")
    if not path.is_file():
        msg = f"{path}: missing from the bundle (listed in {MANIFEST}); the bundle is incomplete, save it again"
        raise BundleError(msg)
    here = f"{where}: files[{rel!r}]"
    dtype_str = _str(_field(entry, "dtype", here), f"{here}.dtype")
    shape = _ints(_field(entry, "shape", here), f"{here}.shape", minimum=0)
    digest = _str(_field(entry, "sha256", here), f"{here}.sha256")
    try:
        return _verified_array(path, dtype_str, shape, digest)
    except OSError as exc:
        msg = f"{path}: cannot be read ({exc})"
        raise BundleError(msg) from None


def _verified_array(path: Path, dtype_str: str, shape: tuple[int, ...], digest: str) -> np.ndarray:
    here = str(path)
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                msg = f"{here}: .npy format version {version} is not supported; expected 1.0"
                raise BundleError(msg)
            file_shape, fortran, dtype = read_header[version](f)
        except BundleError:
            raise
        except Exception as exc:  # numpy raises ValueError, EOFError, SyntaxError on a damaged header
            msg = f"{here}: not a valid .npy file ({type(exc).__name__}: {exc}); the file is corrupted"
            raise BundleError(msg) from None
        header_end = f.tell()
    if dtype.hasobject or dtype.kind not in "biuf":
        msg = f"{here}: holds dtype {dtype}; a bundle stores numeric arrays only (never pickled objects)"
        raise BundleError(msg)
    if fortran:
        msg = f"{here}: is in Fortran order; a bundle stores C-order arrays"
        raise BundleError(msg)
    if dtype.str != dtype_str or tuple(file_shape) != shape:
        msg = (
            f"{here}: holds dtype {dtype.str} and shape {tuple(file_shape)}, but {MANIFEST} says dtype "
            f"{dtype_str} and shape {shape}"
        )
        raise BundleError(msg)
    expected = header_end + dtype.itemsize * math.prod(shape)
    size = path.stat().st_size
    if size != expected:
        problem = "truncated" if size < expected else "longer than its header says"
        msg = f"{here}: {problem}: expected {expected} bytes for dtype {dtype.str} shape {shape}, found {size}"
        raise BundleError(msg)
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            hasher.update(block)
    if hasher.hexdigest() != digest:
        msg = (
            f"{here}: checksum mismatch (sha256 {hasher.hexdigest()}, {MANIFEST} says {digest}); the file is corrupted"
        )
        raise BundleError(msg)
    if not math.prod(shape):
        return np.load(path, allow_pickle=False)  # an empty file region cannot be memory-mapped
    return np.load(path, mmap_mode="r", allow_pickle=False)
