"""The graph part of a bundle: domains, metadata values, host modules, nodes and edges to JSON and back
(each node's record as its kind encodes it, :mod:`iotable.graph.kind`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ..domain import Domain
from ..errors import BundleError
from ..graph.fields import element_radix_bits
from ..graph.graph import (
    Edge,
    Graph,
    GraphError,
    Meta,
    Node,
    NodeKind,
)
from ..graph.kind import definition, definitions, find
from ..graph.nodes import TableMeta
from ..layout import Layout, PaddingMode
from ..network.network import TableNetwork
from ..units import Unit
from ._format import HARDWARE_BITS, MAX_DOMAIN_VALUES
from ._metacodec import _MetaDecoder, _MetaEncoder
from .hosts import _attach, _MissingHost
from .jsonfields import (
    _bool,
    _bounded,
    _context,
    _field,
    _int,
    _ints,
    _kind,
    _list,
    _name,
    _obj,
    _printable,
    _shown,
    _str,
)


class _GraphEncoding:
    """The writer's graph part (mixed into :class:`~iotable.bundle.manifest._Encoder`)."""

    arrays: dict[str, np.ndarray]
    domains: list[dict[str, Any]]
    host: list[dict[str, Any]]
    _domain_ids: dict[Domain, int]

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
        msg = (
            f"save: {where} holds a {type(value).__name__}, which a bundle cannot store without pickle; "
            "graph metadata must be numbers, strings, lists, dicts, layouts, domains, units or arrays"
        )
        raise BundleError(msg)

    def host_module(self, node: Node) -> dict[str, str]:
        """Record a host node's module as its class name and weights; return the tag its meta holds."""
        module = getattr(node.meta, "module", None)
        if not isinstance(module, nn.Module):
            msg = f"save: host node {node.name!r} has no torch module in meta.module, received {_kind(module)}"
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
        nodes = [self.node(node, k) for k, node in enumerate(graph.nodes)]
        edges = [
            {
                "producer": edge.producer,
                "producer_port": int(edge.producer_port),
                "consumer": edge.consumer,
                "consumer_port": int(edge.consumer_port),
                "shape": [int(s) for s in edge.shape],
                "layout": None if edge.layout is None else edge.layout.value,
                "domain": self.domain(edge.domain),
            }
            for edge in graph.edges
        ]
        return {"nodes": nodes, "edges": edges}

    def node(self, node: Node, k: int) -> dict[str, Any]:
        """A node's record: its fields, and its kind's metadata record as its kind encodes it
        (:meth:`NodeKindDef.encode <iotable.graph.kind.NodeKindDef.encode>`: by default field by field,
        arrays as files, enums as their values)."""
        meta = definition(node.kind).encode(node.meta, _MetaEncoder(self, node, k))
        return {
            "name": node.name,
            "kind": node.kind.value,
            "shape": [int(s) for s in node.shape],
            "layout": None if node.layout is None else node.layout.value,
            "domain": self.domain(node.domain),
            "fx_node": node.fx_node,
            "meta": meta,
        }


class _GraphDecoding:
    """The reader's graph part (mixed into :class:`~iotable.bundle.manifest._Decoder`)."""

    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray]
    used: set[str]
    where: str
    domains: list[Domain]

    # -- values -------------------------------------------------------------------------------------------

    def array(self, rel: Any, where: str) -> np.ndarray:
        if not isinstance(rel, str) or rel not in self.arrays:
            msg = f"{where}: names the file {_shown(rel)}, which the manifest's files list (with its checksum) lacks"
            raise BundleError(msg)
        if rel in self.used:
            msg = f"{where}: names the file {rel!r}, which another field already names; each array has one place"
            raise BundleError(msg)
        self.used.add(rel)
        return self.arrays[rel]

    def domain_records(self, records: list[Any]) -> list[Domain]:
        """Every domain, after its declared size is checked against its parameters, its use and the limit."""
        where = f"{self.where}: domains"
        sizes = [self.domain_size(_obj(r, f"{where}[{k}]"), f"{where}[{k}]") for k, r in enumerate(records)]
        if sum(sizes) > MAX_DOMAIN_VALUES:
            msg = (
                f"{where}: {len(sizes)} domain(s) of {sum(sizes)} values in all; a bundle holds at most "
                f"{MAX_DOMAIN_VALUES} (four 24-bit domains), and no table could use more"
            )
            raise BundleError(msg)
        used = _domain_references(self.manifest)
        unused = [k for k in range(len(records)) if k not in used]
        if unused:
            msg = (
                f"{where}[{unused[0]}]: no node, plan or table uses this domain; a bundle lists the domains it "
                "uses, each once"
            )
            raise BundleError(msg)
        domains = [self.domain_record(r, f"{where}[{k}]") for k, r in enumerate(records)]
        if len(set(domains)) != len(domains):
            first = next(k for k, d in enumerate(domains) if domains.index(d) != k)
            msg = f"{where}[{first}]: repeats domain {domains.index(domains[first])}; a bundle lists each domain once"
            raise BundleError(msg)
        return domains

    @staticmethod
    def domain_size(record: dict[str, Any], where: str) -> int:
        """The declared size, checked against the declared parameters before any value is computed."""
        kind = _field(record, "kind", where)
        if kind == "uniform":
            _obj(record, where, keys={"kind", "size", "bits", "signed", "narrow", "scale", "zero_point"})
            bits = _int(record["bits"], f"{where}.bits", minimum=1)
            if bits > 24:
                msg = f"{where}.bits: {bits}; a domain has at most 24 bits"
                raise BundleError(msg)
            signed, narrow = _bool(record["signed"], f"{where}.signed"), _bool(record["narrow"], f"{where}.narrow")
            low, high = Domain.integer_range(bits, signed=signed, narrow=narrow)
            count = high - low + 1
        elif kind == "values":
            _obj(record, where, keys={"kind", "size", "values"})
            count = len(_list(record["values"], f"{where}.values"))
        else:
            msg = f"{where}: kind is {_shown(kind)}; expected 'uniform' or 'values'"
            raise BundleError(msg)
        size = _int(record["size"], f"{where}.size", minimum=1)
        if size != count:
            msg = f"{where}: size {size} disagrees with the {count} value(s) its {kind} fields give"
            raise BundleError(msg)
        return size

    @staticmethod
    def domain_record(record: dict[str, Any], where: str) -> Domain:
        with _context(where):
            if record["kind"] == "uniform":
                for key in ("scale", "zero_point"):
                    value = record[key]
                    if isinstance(value, bool) or not isinstance(value, float):
                        msg = f"{where}.{key}: expected a float, received {_shown(value)}"
                        raise BundleError(msg)
                domain = Domain.uniform(
                    record["bits"],
                    signed=record["signed"],
                    narrow=record["narrow"],
                    scale=record["scale"],
                    zero_point=record["zero_point"],
                )
                if domain.params != {k: record[k] for k in domain.params}:
                    msg = f"{where}: scale and zero_point must be the float32 values iotable stores, received {record}"
                    raise BundleError(msg)
                return domain
            values = record["values"]
            if not all(isinstance(v, float) for v in values):
                msg = f"{where}.values: expected floats (ascending), received {_shown(values)}"
                raise BundleError(msg)
            domain = Domain.values(values)
            if domain.values.tolist() != values:
                msg = f"{where}.values: expected distinct values in ascending order, received {_shown(values)}"
                raise BundleError(msg)
            return domain

    def domain(self, ref: Any, where: str) -> Any:
        if ref is None:
            return None
        if isinstance(ref, list):
            if not ref:
                msg = f"{where}: expected a domain index or a non-empty list of them, received []"
                raise BundleError(msg)
            return tuple(self.domain(_int(r, f"{where}[{k}]"), f"{where}[{k}]") for k, r in enumerate(ref))
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
        layout = Layout.__members__.get(value) if isinstance(value, str) else None
        if layout is None:
            accepted = ", ".join(repr(m.value) for m in Layout)
            msg = f"{where}: unknown layout {_shown(value)}; expected one of {accepted} or null"
            raise BundleError(msg)
        return layout

    def value(self, value: Any, where: str, *, hosts: dict[str, nn.Module] | None = None) -> Any:
        """Inverse of :meth:`_Encoder.value`: JSON arrays become tuples, tagged objects library types."""
        if isinstance(value, list):
            return tuple(self.value(v, f"{where}[{k}]", hosts=hosts) for k, v in enumerate(value))
        if not isinstance(value, dict):
            return _bounded(value, where)
        tags = [k for k in value if k.startswith("$")]
        if not tags:
            return {k: self.value(v, f"{where}[{k!r}]", hosts=hosts) for k, v in value.items()}
        if len(value) != 1:
            msg = f"{where}: a tagged value holds exactly one '$' key, received keys {sorted(value)[:8]}"
            raise BundleError(msg)
        tag, body = tags[0], value[tags[0]]
        if tag == "$layout":
            if body is None:
                msg = f"{where}: a $layout names a layout, received null"
                raise BundleError(msg)
            return self.layout(body, where)
        if tag == "$domain":
            return self.domain(body, where)
        if tag == "$unit":
            return _unit(_obj(body, where), where)
        if tag == "$array":
            return self.array(body, where)
        if tag == "$host":
            if hosts is None or not isinstance(body, str) or body not in hosts:
                msg = f"{where}: names the host node {_shown(body)}, which the manifest's host list lacks"
                raise BundleError(msg)
            return hosts[body]
        msg = f"{where}: unknown tagged value {tag[:40]!r}"
        raise BundleError(msg)

    # -- hosts --------------------------------------------------------------------------------------------

    def hosts(self) -> dict[str, nn.Module]:
        """A stand-in per host node, holding the bundle's class name and weights (modules are attached last)."""
        where = f"{self.where}: host"
        records = _list(self.manifest["host"], where)
        names = [
            _str(_field(_obj(r, f"{where}[{k}]"), "node", where), f"{where}[{k}].node") for k, r in enumerate(records)
        ]
        if len(set(names)) != len(names):
            msg = f"{where}: a host node is listed twice in {names}"
            raise BundleError(msg)
        modules: dict[str, nn.Module] = {}
        for k, (name, record) in enumerate(zip(names, records)):
            here = f"{where}[{k}] ({name!r})"
            _obj(record, here, keys={"node", "class", "state"})
            cls = _str(record["class"], f"{here}.class", limit=512)
            state = {}
            for j, item in enumerate(_list(record["state"], f"{here}.state")):
                item = _obj(item, f"{here}.state[{j}]", keys={"key", "array"})
                key = _str(item["key"], f"{here}.state[{j}].key", limit=512)
                if key in state:
                    msg = f"{here}.state[{j}]: the key {key!r} is listed twice"
                    raise BundleError(msg)
                state[key] = self.array(item["array"], f"{here}.state[{j}]")
            modules[name] = _MissingHost(name, cls, state, names)
        return modules

    def attach(self, net: TableNetwork, supplied: Mapping[str, nn.Module] | None) -> TableNetwork:
        """The network with the caller's host modules in its graph, their weights set from the bundle."""
        supplied = dict(supplied or {})
        stand_ins = {n.name: n.meta.module for n in net.graph.host_nodes()}
        unknown = sorted(set(supplied) - set(stand_ins))
        if unknown:
            msg = f"load: host_modules names {unknown}, but the bundle's host nodes are {list(stand_ins)}"
            raise BundleError(msg)
        missing = [name for name in stand_ins if name not in supplied]
        attached = []
        for node in net.graph.host_nodes():
            stand_in = stand_ins[node.name]
            stand_in.missing = missing
            if node.name in supplied:
                module = _attach(node.name, supplied[node.name], stand_in.state)
                attached.append(dataclasses.replace(node, meta=dataclasses.replace(node.meta, module=module)))
        return dataclasses.replace(net, graph=net.graph.replace(*attached)) if attached else net

    # -- graph --------------------------------------------------------------------------------------------

    def graph(self, record: dict[str, Any], hosts: dict[str, nn.Module]) -> Graph:
        where = f"{self.where}: graph"
        _obj(record, where, keys={"nodes", "edges"})
        nodes = [
            self.node(item, f"{where}.nodes[{k}]", hosts)
            for k, item in enumerate(_list(record["nodes"], f"{where}.nodes"))
        ]
        edge_keys = {"producer", "producer_port", "consumer", "consumer_port", "shape", "layout", "domain"}
        edges = []
        for k, item in enumerate(_list(record["edges"], f"{where}.edges")):
            here = f"{where}.edges[{k}]"
            item = _obj(item, here, keys=edge_keys)
            edges.append(
                Edge(
                    _name(item["producer"], f"{here}.producer"),
                    _int(item["producer_port"], f"{here}.producer_port", minimum=0),
                    _name(item["consumer"], f"{here}.consumer"),
                    _int(item["consumer_port"], f"{here}.consumer_port", minimum=0),
                    _ints(item["shape"], f"{here}.shape", minimum=1),
                    self.layout(item["layout"], f"{here}.layout"),
                    self.domain(item["domain"], f"{here}.domain"),
                )
            )
        if self.manifest.get("format_version", HARDWARE_BITS) < HARDWARE_BITS:
            nodes = _hardware_unit_bits(nodes, edges, record["nodes"])
        for node in nodes:
            for field, text in _meta_names(node.meta):
                _printable(text, f"{where} node {node.name!r} meta.{field}")
        try:
            return Graph(nodes, edges).check()
        except GraphError as exc:
            msg = f"{where}: the graph fails its checks: {exc}"
            raise BundleError(msg) from None

    def node(self, item: Any, here: str, hosts: dict[str, nn.Module]) -> Node:
        item = _obj(item, here, keys={"name", "kind", "shape", "layout", "domain", "fx_node", "meta"})
        name = _name(item["name"], f"{here}.name")
        here = f"{here} ({name!r})"
        found = find(item["kind"]) if isinstance(item["kind"], str) else None
        if found is None:
            accepted = ", ".join(k.value for k in definitions())
            msg = (
                f"{here}.kind: {_shown(item['kind'])} is not a node kind; expected one of {accepted} (a kind "
                "defined outside iotable loads once the module that registers it is imported)"
            )
            raise BundleError(msg)
        kind = found.kind
        fx_node = item["fx_node"]
        if fx_node is not None:
            fx_node = _name(fx_node, f"{here}.fx_node")
        return Node(
            name,
            kind,
            _ints(item["shape"], f"{here}.shape", minimum=1),
            self.layout(item["layout"], f"{here}.layout"),
            self.domain(item["domain"], f"{here}.domain"),
            self.meta(kind, _obj(item["meta"], f"{here}.meta"), f"{here}.meta", hosts),
            fx_node,
        )

    def meta(self, kind: NodeKind, record: dict[str, Any], where: str, hosts: dict[str, nn.Module]) -> Meta:
        """A node kind's metadata record as its kind decodes it (types are Graph.check's to judge)."""
        return definition(kind).decode(record, where, _MetaDecoder(self, hosts))


def _meta_names(meta: Any) -> list[tuple[str, str]]:
    """``(field, name)`` for each model name a node's metadata repeats: a table's layer, a node's modules."""
    layer, modules = getattr(meta, "layer", None), getattr(meta, "modules", None)
    names = [("layer", layer)] if isinstance(layer, str) else []
    if isinstance(modules, tuple):
        names += [("modules", m) for m in modules if isinstance(m, str)]
    return names


def _unit_record(unit: Unit) -> dict[str, Any]:
    return {
        "index": unit.index,
        "in_channels": list(unit.in_channels),
        "out_channels": list(unit.out_channels),
        "fan_in": unit.fan_in,
        "rows": unit.rows,
    }


def _unit(record: dict[str, Any], where: str) -> Unit:
    _obj(record, where, keys={"index", "in_channels", "out_channels", "fan_in", "rows"})
    unit = Unit(
        index=_int(record["index"], f"{where}.index", minimum=0),
        in_channels=_ints(record["in_channels"], f"{where}.in_channels", minimum=0),
        out_channels=_ints(record["out_channels"], f"{where}.out_channels", minimum=0),
        fan_in=_int(record["fan_in"], f"{where}.fan_in", minimum=1),
        rows=_int(record["rows"], f"{where}.rows", minimum=1),
    )
    if not unit.out_channels:
        msg = f"{where}.out_channels: a unit writes at least one output"
        raise BundleError(msg)
    if len(set(unit.in_channels)) != len(unit.in_channels) or len(set(unit.out_channels)) != len(unit.out_channels):
        msg = f"{where}: a unit lists each of its input and output channels once"
        raise BundleError(msg)
    return unit


def _domain_references(manifest: dict[str, Any]) -> set[int]:
    """Indices of the domains something refers to (nodes, edges, plans, tables, tagged meta)."""
    found: set[int] = set()
    stack: list[Any] = [v for k, v in manifest.items() if k not in ("domains", "files")]
    keys = ("domain", "input_domains", "output_domain", "$domain")
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in keys:
                    refs = item if isinstance(item, list) else [item]
                    found.update(r for r in refs if isinstance(r, int) and not isinstance(r, bool))
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def _hardware_unit_bits(nodes: list[Node], edges: list[Edge], records: list[Any]) -> list[Node]:
    """The table nodes of a bundle older than format 6 with their address bits as hardware packs them.

    Those formats counted an input of a one-value domain as 0 bits; the hardware field is 1 bit wide. Where a
    table's stored bits are exactly the old count, they become the hardware count, in the node and in the
    manifest's record (which the round trip compares); anything else is left for the checks to refuse.
    """
    by_name = {node.name: node for node in nodes}
    producer = {e.consumer: by_name.get(e.producer) for e in edges if e.consumer_port == 0}
    upgraded = []
    for node, record in zip(nodes, records):
        meta, source = node.meta, producer.get(node.name)
        if not isinstance(meta, TableMeta) or source is None or source.domain is None:
            upgraded.append(node)
            continue
        try:
            radix, widths = element_radix_bits(source)
            index = np.asarray(meta.index_map, dtype=np.int64)
            reads = np.where(index >= 0, index, 0)
            old = np.where(index >= 0, np.ceil(np.log2(radix[reads])), 0).astype(np.int64).sum(axis=1)
            new = np.where(index >= 0, widths[reads], 0).sum(axis=1)
        except (IndexError, TypeError, ValueError, AttributeError):
            upgraded.append(node)  # malformed: the checks say what is wrong
            continue
        if tuple(meta.unit_bits) != tuple(old.tolist()):
            upgraded.append(node)
            continue
        bits = tuple(int(b) for b in new)
        record["meta"]["unit_bits"] = list(bits)
        upgraded.append(dataclasses.replace(node, meta=dataclasses.replace(meta, unit_bits=bits)))
    return upgraded
