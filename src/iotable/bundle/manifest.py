"""A bundle's manifest: encoding a network or layer into it, and the one validator that decodes it.

``save`` encodes (:class:`_Encoder`), then decodes what it is about to write, in memory, with the validator
``load`` runs on what it read (:class:`_Decoder`), so that nothing is written that would not load back. The
decoder checks every field's presence and type, refuses fields the format does not have, rebuilds the
domains (their sizes checked from their records before any value is computed), plans, tables, host
stand-ins and graph, checks the graph (:meth:`Graph.check`) and the graph against the plans and tables,
requires the manifest to be exactly what the rebuilt objects encode to, and reproduces the golden vectors.
Every problem is a :class:`~iotable.errors.BundleError` naming the field.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from ..domain import Domain, code_dtype
from ..errors import BundleError, IOTableError
from ..front.plan import Geometry, LayerPlan, Unit
from ..front.spec import Layout, PaddingMode, Spec
from ..graph.checks import element_domains
from ..graph.graph import (
    Edge,
    Graph,
    GraphError,
    Meta,
    Node,
    NodeKind,
    TableMeta,
    WindowMeta,
    pad_index_map,
)
from ..graph.kind import definition, definitions, find
from ..network.network import TableNetwork
from ..runtime.runtime import Runtime, decode
from ..table import IOTable
from ..tabulate.layers import LayerTables
from ._metacodec import _MetaDecoder, _MetaEncoder
from .hosts import _attach, _MissingHost
from .jsonfields import _bool, _context, _field, _int, _ints, _kind, _list, _obj, _pair, _shown, _str

_E = TypeVar("_E", bound=enum.Enum)

#: The ``format`` field of every bundle manifest.
FORMAT = "iotable-bundle"
#: The bundle format version this library writes; it reads this version and older ones. Version 2 added
#: padding modes and asymmetric padding (a version-1 reader would pad a reflect-padded network with zeros);
#: version 3 the manifest's checksum (``manifest.sha256``) and golden vectors; version 4 the typed graph
#: metadata (producers only in the edges, index maps and buffer depths in the nodes, one record per kind);
#: version 5 the LUT mapping results of ``net.cost()`` (``luts``).
FORMAT_VERSION = 5
#: The first format version with a manifest checksum and golden vectors (older bundles load without them).
CHECKSUMMED = 3
#: The first format version that can hold LUT mapping results (older bundles load without them).
LUT_RESULTS = 5
DIGIT_ORDER = "first input most significant"

MAX_DOMAIN_VALUES = 2**26  # values of all domains together (four 24-bit domains)
GOLDEN_SAMPLES = 8  # golden inputs per network (fewer for large inputs)
_GOLDEN_ELEMENTS = 2**16  # input elements of all golden samples together, at most (one sample at least)

_FIELDS = {
    1: {"format", "format_version", "library_version", "content", "address_digit_order", "input_shape"}
    | {"domains", "graph", "layers", "host", "files"},
}
_FIELDS[2] = _FIELDS[1]
_FIELDS[3] = _FIELDS[2] | {"golden"}
_FIELDS[4] = _FIELDS[3]
_FIELDS[5] = _FIELDS[4] | {"luts"}
#: The fields of a record in ``luts`` (``netlist`` names the file of its BLIF text).
_LUT_FIELDS = {"table", "key", "k", "script", "abc_version", "method", "input_bits", "output_bits", "luts", "depth"}
_LUT_FIELDS |= {"seconds", "netlist"}
_INFORMATION = ("library_version", "files", "golden")  # fields the round trip does not re-encode


class _Encoder:
    """Turns a network or layer into the manifest (plain JSON data) and the arrays to write, in memory."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.domains: list[dict[str, Any]] = []
        self._domain_ids: dict[Domain, int] = {}
        self.host: list[dict[str, Any]] = []

    def bundle(self, obj: Any, *, golden: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The manifest (``files`` left empty) and the arrays; ``golden``: run the network for golden vectors."""
        from .._version import __version__

        record: dict[str, Any] | None = None
        luts: list[dict[str, Any]] = []
        if isinstance(obj, TableNetwork):
            content = "network"
            layers = [self.layer(layer, k) for k, layer in enumerate(obj.layers.values())]
            graph = self.graph(obj.graph)
            input_shape: list[int] | None = [int(s) for s in obj.input_shape]
            record = self.golden(obj) if golden else None
            luts = self.luts(obj)
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
            "golden": record,
            "luts": luts,
        }
        return manifest, self.arrays

    def luts(self, net: TableNetwork) -> list[dict[str, Any]]:
        """The LUT mapping results the network holds (``net.cost()``, a loaded bundle) for its own tables: one
        record per (function, k, script, ABC version), naming the first table with that function, its
        netlist's BLIF text a ``uint8`` file; ordered by that table, then k, script and version."""
        held = net.__dict__.get("_lut_results")  # not created by asking: a network that never mapped has none
        if not held:
            return []
        from ..synth._function import MAX_INPUT_BITS, bit_function  # lazy, as iotable.synth is

        first: dict[str, tuple[int, int]] = {}
        for index, layer in enumerate(net.layers.values()):
            for u, table in enumerate(layer.tables):
                if (
                    table.output_domain is not None
                    and sum(max(d.bits, 1) for d in table.input_domains) <= MAX_INPUT_BITS
                ):
                    first.setdefault(bit_function(table, what="save").key(), (index, u))
        found = [
            ((*first[r["key"]], r["k"], r["script"], r["abc_version"]), r)
            for r, _ in held.values()
            if r["key"] in first
        ]
        records = []
        for i, (order, r) in enumerate(sorted(found, key=lambda item: item[0])):
            text = np.frombuffer(r["blif"].encode("ascii"), dtype=np.uint8)
            records.append(
                {
                    "table": list(order[:2]),
                    **{f: r[f] for f in ("key", "k", "script", "abc_version", "method")},
                    **{f: int(r[f]) for f in ("input_bits", "output_bits", "luts", "depth")},
                    "seconds": float(r["seconds"]),
                    "netlist": self.array(f"luts/netlist{i}.npy", text, f"the LUT netlist of luts[{i}]"),
                }
            )
        return records

    def golden(self, net: TableNetwork) -> dict[str, Any]:
        """Golden vectors: generated inputs and what the network's table part makes of them (see :func:`_golden`)."""
        values, probes = _golden(net)
        return {
            "inputs": self.array("golden/inputs.npy", values, "golden inputs"),
            "probes": [
                {"node": name, "values": self.array(f"golden/probe{k}.npy", array, f"golden values of {name!r}")}
                for k, (name, array) in enumerate(probes.items())
            ],
        }

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
    return plan.layout.element_order.value


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


# -- checked access to manifest values --------------------------------------------------------------------


_SPEC_INTS = {"kernel_size": 1, "stride": 1, "dilation": 1}


def _member(cls: type[_E], value: Any) -> _E | None:
    """The member of an enumeration whose value is the string ``value``, or ``None``."""
    return next((m for m in cls if m.value == value), None) if isinstance(value, str) else None


def _padding_mode(value: Any, where: str) -> PaddingMode:
    mode = _member(PaddingMode, value)
    if mode is None:
        accepted = ", ".join(repr(m.value) for m in PaddingMode)
        msg = f"{where}: {_shown(value)} is not a padding mode; expected one of {accepted}"
        raise BundleError(msg)
    return mode


class _Decoder:
    """Rebuilds a network or layer from a parsed manifest and its (verified) arrays, checking every field.

    ``save`` runs it on the manifest it is about to write, ``load`` on the one it read: one validator.
    """

    def __init__(self, manifest: dict[str, Any], arrays: dict[str, np.ndarray], where: str) -> None:
        self.keys = set(manifest)  # as written: an older format's fields are checked before its upgrade
        manifest, arrays = _upgraded(manifest, arrays)  # older formats as the current one writes them
        self.manifest = manifest
        self.arrays = arrays
        self.where = where
        self.used: set[str] = set()
        self.domains: list[Domain] = []

    def bundle(self, host_modules: Mapping[str, nn.Module] | None) -> TableNetwork | LayerTables:
        m, where = self.manifest, self.where
        version = m.get("format_version", FORMAT_VERSION)
        fields = _FIELDS.get(version, _FIELDS[FORMAT_VERSION])
        _obj(dict.fromkeys(self.keys), where, keys=fields)
        _str(m["library_version"], f"{where}: library_version", limit=64)
        if m["address_digit_order"] != DIGIT_ORDER:
            msg = f"{where}: address_digit_order is {_shown(m['address_digit_order'])}; expected {DIGIT_ORDER!r}"
            raise BundleError(msg)
        content = m["content"]
        if content not in ("network", "layer"):
            msg = f"{where}: content is {_shown(content)}; expected 'network' or 'layer'"
            raise BundleError(msg)
        self.domains = self.domain_records(_list(m["domains"], f"{where}: domains"))
        layers = [
            self.layer(_obj(r, f"{where}: layers[{k}]"), f"{where}: layers[{k}]")
            for k, r in enumerate(_list(m["layers"], f"{where}: layers"))
        ]
        if content == "layer":
            obj: TableNetwork | LayerTables = self.layer_bundle(layers, host_modules)
        else:
            obj = self.network(layers)
            self.lut_results(obj, _list(m["luts"], f"{where}: luts"))
        self.round_trip(obj)
        if isinstance(obj, TableNetwork) and version >= CHECKSUMMED:
            self.golden(obj, m["golden"])
        unused = sorted(set(self.arrays) - self.used)
        if unused:
            msg = f"{where}: files lists {unused[0]!r}, which no field uses; a bundle lists the files it uses"
            raise BundleError(msg)
        if isinstance(obj, TableNetwork):
            attached = self.attach(obj, host_modules)
            attached._lut_results.update(obj._lut_results)  # a network with its host modules is a new one
            obj = attached
        return obj

    def layer_bundle(self, layers: list[LayerTables], host_modules: Any) -> LayerTables:
        m, where = self.manifest, self.where
        if len(layers) != 1:
            msg = f"{where}: a layer bundle holds exactly one layer, this one lists {len(layers)}"
            raise BundleError(msg)
        if m["luts"] != []:
            msg = f"{where}: luts must be [] in a layer bundle (mapping results are stored with networks)"
            raise BundleError(msg)
        for key in ("graph", "input_shape", "golden"):
            if m.get(key) is not None:
                msg = f"{where}: {key} must be null in a layer bundle, received {_kind(m[key])}"
                raise BundleError(msg)
        if m["host"] != []:
            msg = f"{where}: host must be [] in a layer bundle"
            raise BundleError(msg)
        if host_modules:
            msg = "load: host_modules= applies to network bundles; this bundle holds one layer"
            raise BundleError(msg)
        return layers[0]

    def network(self, layers: list[LayerTables]) -> TableNetwork:
        m, where = self.manifest, self.where
        by_name = {layer.name: layer for layer in layers}
        if len(by_name) != len(layers):
            msg = f"{where}: layers: a layer name is used twice in {[layer.name for layer in layers]}"
            raise BundleError(msg)
        hosts = self.hosts()
        graph = self.graph(_obj(m["graph"], f"{where}: graph"), hosts)
        input_shape = _ints(m["input_shape"], f"{where}: input_shape", minimum=1)
        if graph.nodes[0].shape != input_shape:
            msg = f"{where}: input_shape {input_shape} disagrees with the input node's shape {graph.nodes[0].shape}"
            raise BundleError(msg)
        graph = _check_network(graph, by_name, hosts, f"{where}: graph")
        return TableNetwork(graph=graph, layers=by_name, input_shape=input_shape)

    def lut_results(self, net: TableNetwork, records: list[Any]) -> None:
        """LUT mapping results (``luts``), each checked as a fresh ABC result is: the key is the content hash
        of the table it names, its netlist (read from its file) computes that table on every row and has the
        LUTs and depth the record says; then held by the network, where ``net.cost()`` finds them."""
        if not records:
            return
        from ..synth._map import _Cache  # lazy, as iotable.synth is

        tables = [list(layer.tables) for layer in net.layers.values()]
        for i, item in enumerate(records):
            where = f"{self.where}: luts[{i}]"
            record = _obj(item, where, keys=_LUT_FIELDS)
            table = _lut_table(record, tables, where)
            result, text = _lut_fields(record, where), self.array(record["netlist"], f"{where}.netlist")
            result["blif"] = _blif_text(text, f"{where}.netlist ({record['netlist']})")
            file = _Cache.name(result["key"], result["k"], result["script"], result["abc_version"])
            if file in net._lut_results:
                msg = f"{where}: a second result for the same table, k, script and ABC version; each is stored once"
                raise BundleError(msg)
            net._lut_results[file] = (result, _checked_netlist(result, table, f"{where}.netlist ({record['netlist']})"))

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
            return value
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
        stand_ins = {n.name: n.meta.module for n in net.graph.nodes_of(NodeKind.HOST)}
        unknown = sorted(set(supplied) - set(stand_ins))
        if unknown:
            msg = f"load: host_modules names {unknown}, but the bundle's host nodes are {list(stand_ins)}"
            raise BundleError(msg)
        missing = [name for name in stand_ins if name not in supplied]
        attached = []
        for node in net.graph.nodes_of(NodeKind.HOST):
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
                    _str(item["producer"], f"{here}.producer", limit=512),
                    _int(item["producer_port"], f"{here}.producer_port", minimum=0),
                    _str(item["consumer"], f"{here}.consumer", limit=512),
                    _int(item["consumer_port"], f"{here}.consumer_port", minimum=0),
                    _ints(item["shape"], f"{here}.shape", minimum=1),
                    self.layout(item["layout"], f"{here}.layout"),
                    self.domain(item["domain"], f"{here}.domain"),
                )
            )
        try:
            return Graph(nodes, edges).check()
        except GraphError as exc:
            msg = f"{where}: the graph fails its checks: {exc}"
            raise BundleError(msg) from None

    def node(self, item: Any, here: str, hosts: dict[str, nn.Module]) -> Node:
        item = _obj(item, here, keys={"name", "kind", "shape", "layout", "domain", "fx_node", "meta"})
        name = _str(item["name"], f"{here}.name", limit=512)
        here = f"{here} ({name!r})"
        found = find(item["kind"]) if isinstance(item["kind"], str) else None
        if found is None:
            accepted = ", ".join(k.value for k in definitions())
            msg = f"{here}.kind: {_shown(item['kind'])} is not a node kind; expected one of {accepted}"
            raise BundleError(msg)
        kind = found.kind
        fx_node = item["fx_node"]
        if fx_node is not None:
            fx_node = _str(fx_node, f"{here}.fx_node", limit=512)
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

    # -- layers -------------------------------------------------------------------------------------------

    def layer(self, record: dict[str, Any], where: str) -> LayerTables:
        _obj(record, where, keys={"name", "build", "plan", "tables"})
        name = _str(record["name"], f"{where}.name", limit=512)
        if not name:
            msg = f"{where}.name: a layer has a non-empty name"
            raise BundleError(msg)
        where = f"{where} ({name!r})"
        plan = self.plan(name, _obj(record["plan"], f"{where}.plan"), f"{where}.plan")
        tables = _list(record["tables"], f"{where}.tables")
        if len(tables) != len(plan.units):
            msg = f"{where}.tables: {len(tables)} table(s) for {len(plan.units)} unit(s); expected one per unit"
            raise BundleError(msg)
        build = self.build(_obj(record["build"], f"{where}.build"), len(plan.units), f"{where}.build")
        return LayerTables(
            plan=plan,
            tables=tuple(
                self.table(_obj(t, f"{where}.tables[{u}]"), plan, unit, f"{where}.tables[{u}]")
                for u, (t, unit) in enumerate(zip(tables, plan.units))
            ),
            **build,
        )

    @staticmethod
    def build(record: dict[str, Any], units: int, where: str) -> dict[str, Any]:
        """How the tables were made (information only), typed: the units cached, the method, the near ties."""
        known = {f.name for f in dataclasses.fields(LayerTables)} - {"plan", "tables"}
        _obj(record, where, keys=known)
        cached = _ints(record["cached"], f"{where}.cached", minimum=0)
        if list(cached) != sorted(set(cached)) or (cached and cached[-1] >= units):
            msg = f"{where}.cached: expected ascending unit indices below {units}, received {_shown(list(cached))}"
            raise BundleError(msg)
        method = _str(record["method"], f"{where}.method", limit=100)
        return {
            "cached": cached,
            "method": method,
            "near_ties": _int(record["near_ties"], f"{where}.near_ties", minimum=0),
        }

    def plan(self, name: str, record: dict[str, Any], where: str) -> LayerPlan:
        keys = {"layout", "geometry", "in_channels", "out_channels", "input_domains", "output_domain", "units"}
        _obj(record, where, keys=keys | {"frame_in", "frame_out", "slots", "fill_codes", "max_rows", "spec"})
        layout = self.layout(record["layout"], f"{where}.layout")
        if layout is None:
            msg = f"{where}.layout: expected a layout, received null"
            raise BundleError(msg)
        geometry = self.geometry(
            _obj(record["geometry"], f"{where}.geometry"), layout.spatial_rank, f"{where}.geometry"
        )
        spec = self.spec(_obj(record["spec"], f"{where}.spec"), f"{where}.spec")
        in_channels = _int(record["in_channels"], f"{where}.in_channels", minimum=1)
        out_channels = _int(record["out_channels"], f"{where}.out_channels", minimum=1)
        input_domains = self.domains_of(record["input_domains"], f"{where}.input_domains")
        if len(input_domains) != in_channels:
            msg = f"{where}.input_domains: {len(input_domains)} domain(s) for {in_channels} input channel(s)"
            raise BundleError(msg)
        output_domain = self.domain(record["output_domain"], f"{where}.output_domain")
        if isinstance(output_domain, tuple):
            msg = f"{where}.output_domain: expected one domain index or null, received a list"
            raise BundleError(msg)
        units = _plan_units(record["units"], geometry, in_channels, out_channels, f"{where}.units")
        frame_in, frame_out = _plan_frames(record, layout, geometry, in_channels, out_channels, where)
        size_out = frame_out[:-1] if layout.channels_last else frame_out[1:]
        slots = tuple(
            _ints(s, f"{where}.slots[{k}]", minimum=0) for k, s in enumerate(_list(record["slots"], f"{where}.slots"))
        )
        if not slots or any(len(s) != len(size_out) or any(p >= n for p, n in zip(s, size_out)) for s in slots):
            msg = f"{where}.slots: expected at least one output position of the frame {size_out}, received {slots[:4]}"
            raise BundleError(msg)
        fill_codes = _ints(record["fill_codes"], f"{where}.fill_codes", minimum=0)
        zeros = tuple(d.zero_code if d.zero_code is not None else 0 for d in input_domains)
        if fill_codes != zeros:
            msg = (
                f"{where}.fill_codes: expected each input channel's code of real 0 (or 0), {list(zeros)}, received "
                f"{_shown(list(fill_codes))}"
            )
            raise BundleError(msg)
        _check_spec(spec, layout, geometry, in_channels, out_channels, f"{where}.spec")
        return LayerPlan(
            name=name,
            spec=spec,
            layout=layout,
            geometry=geometry,
            in_channels=in_channels,
            out_channels=out_channels,
            units=units,
            input_domains=input_domains,
            output_domain=output_domain,
            frame_in=frame_in,
            frame_out=frame_out,
            slots=slots,
            fill_codes=fill_codes,
            max_rows=_int(record["max_rows"], f"{where}.max_rows", minimum=1),
        )

    @staticmethod
    def geometry(record: dict[str, Any], rank: int, where: str) -> Geometry:
        """A plan's window: kernel, stride, dilation, a (before, after) padding pair per axis, the padding mode."""
        _obj(record, where, keys={"kernel", "stride", "dilation", "padding", "padding_mode"})
        kernel, stride, dilation = (
            _ints(record[key], f"{where}.{key}", minimum=1) for key in ("kernel", "stride", "dilation")
        )
        padding = tuple(
            _pair(p, f"{where}.padding[{k}]") for k, p in enumerate(_list(record["padding"], f"{where}.padding"))
        )
        if any(len(v) != rank for v in (kernel, stride, dilation, padding)):
            msg = f"{where}: kernel, stride, dilation and padding must have one entry per spatial axis ({rank})"
            raise BundleError(msg)
        mode = _padding_mode(record["padding_mode"], f"{where}.padding_mode")
        return Geometry(kernel=kernel, stride=stride, dilation=dilation, padding=padding, padding_mode=mode)

    def spec(self, record: dict[str, Any], where: str) -> Spec:
        """The decomposition metadata, every field typed (its meaning is information once tables exist)."""
        _obj(record, where, keys={f.name for f in dataclasses.fields(Spec)})
        fields: dict[str, Any] = {}
        if record["groups"] is not None:
            fields["groups"] = _int(record["groups"], f"{where}.groups", minimum=1)
        for key in ("fan_in", "fan_out"):
            if record[key] is not None:
                lists = _list(record[key], f"{where}.{key}")
                fields[key] = tuple(_ints(v, f"{where}.{key}[{k}]", minimum=0) for k, v in enumerate(lists))
        for key, low in _SPEC_INTS.items():
            if record[key] is not None:
                fields[key] = _ints(record[key], f"{where}.{key}", minimum=low)
        if record["padding"] is not None:
            pairs = _list(record["padding"], f"{where}.padding")
            fields["padding"] = tuple(_pair(p, f"{where}.padding[{k}]") for k, p in enumerate(pairs))
        if record["padding_mode"] is not None:
            fields["padding_mode"] = _padding_mode(record["padding_mode"], f"{where}.padding_mode")
        for key in ("fan_in_from", "output_domain_from"):
            if record[key] is not None:
                fields[key] = _str(record[key], f"{where}.{key}", limit=512)
        layout = record["layout"]
        fields["layout"] = None if layout is None else self.value(_obj(layout, f"{where}.layout"), f"{where}.layout")
        if fields["layout"] is not None and not isinstance(fields["layout"], Layout):
            msg = f"{where}.layout: expected a {{'$layout': ...}} or null"
            raise BundleError(msg)
        domain = record["output_domain"]
        fields["output_domain"] = None if domain is None else self.value(_obj(domain, f"{where}.output_domain"), where)
        if fields["output_domain"] is not None and not isinstance(fields["output_domain"], Domain):
            msg = f"{where}.output_domain: expected a {{'$domain': index}} or null"
            raise BundleError(msg)
        for key in ("per_output", "elementwise", "depthwise"):
            fields[key] = _bool(record[key], f"{where}.{key}")
        fields["source"] = _str(record["source"], f"{where}.source", limit=512)
        return Spec(**fields)

    def table(self, record: dict[str, Any], plan: LayerPlan, unit: Unit, where: str) -> IOTable:
        keys = {"layer", "unit", "in_channels", "out_channels", "fan_in", "fan_out", "input_domains", "output_domain"}
        keys |= {"rows", "address_space", "dense", "address_digit_order", "input_order", "input_channels"}
        _obj(record, where, keys=keys | {"input_taps", "outputs", "inputs", "addresses", "dont_care"})
        domains = self.domains_of(record["input_domains"], f"{where}.input_domains")
        output_domain = self.domain(record["output_domain"], f"{where}.output_domain")
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
        if space >= 2**62:
            msg = f"{where}: {space} addresses do not fit a 64-bit integer"
            raise BundleError(msg)
        rows = _int(record["rows"], f"{where}.rows", minimum=0)
        dense = _bool(record["dense"], f"{where}.dense")
        if dense is not (rows == space):
            msg = f"{where}: dense is {dense!r} but the table holds {rows} of {space} rows"
            raise BundleError(msg)
        layer, unit_index = record["layer"], record["unit"]
        if layer not in (None, plan.name) or not (
            unit_index is None or (type(unit_index) is int and unit_index == unit.index)
        ):
            msg = (
                f"{where}: layer {_shown(layer)} and unit {_shown(unit_index)} must be the table's own ({plan.name!r} "
                f"and {unit.index}) or null"
            )
            raise BundleError(msg)
        fan_out = len(unit.out_channels)
        outputs = self.array(record["outputs"], f"{where}.outputs")
        here = f"{where}.outputs ({record['outputs']})"
        _expect(outputs, (rows, fan_out), where=here)
        if output_domain is None and outputs.dtype.kind != "f":
            msg = f"{here}: raw outputs must be floats, the file holds dtype {outputs.dtype}"
            raise BundleError(msg)
        if output_domain is not None:
            _expect(outputs, (rows, fan_out), dtype=output_domain.code_dtype, where=here)
            _codes_below(outputs, len(output_domain), here)
        dont_care = record["dont_care"]
        if dont_care is not None:
            dont_care = np.array(self.array(dont_care, f"{where}.dont_care"))
            _expect(dont_care, (fan_out,), dtype=outputs.dtype, where=f"{where}.dont_care")
            if output_domain is not None:
                _codes_below(dont_care, len(output_domain), f"{where}.dont_care")
        inputs = addresses = None
        if dense:
            if record["inputs"] is not None or record["addresses"] is not None:
                msg = f"{where}: a dense table has no inputs or addresses files (null), they follow from its rows"
                raise BundleError(msg)
        else:
            inputs = self.array(record["inputs"], f"{where}.inputs")
            addresses = self.array(record["addresses"], f"{where}.addresses")
            _expect(inputs, (rows, len(domains)), dtype=code_dtype(max(radices)), where=f"{where}.inputs")
            _expect(addresses, (rows,), dtype=np.dtype(np.int64), where=f"{where}.addresses")
            _check_addresses(inputs, addresses, radices, where)
        return _table(outputs, inputs, addresses, domains, output_domain, dont_care, layer, unit_index)

    # -- the whole manifest -------------------------------------------------------------------------------

    def round_trip(self, obj: TableNetwork | LayerTables) -> None:
        """The manifest must be exactly what the decoded objects encode to (every derived field, every name).

        A field that says something the objects do not hold (an input tap, an address space, a table's
        file name, a domain listed but unused, an unknown key) would mislead a reader of the bundle; the
        round trip finds it without a rule per field.
        """
        manifest, arrays = _Encoder().bundle(obj, golden=False)
        ours = {k: v for k, v in self.manifest.items() if k not in _INFORMATION and k != "format_version"}
        theirs = {k: v for k, v in manifest.items() if k not in _INFORMATION and k != "format_version"}
        if _canonical(ours) != _canonical(theirs):
            path, held, made = _difference(ours, theirs, "")
            msg = (
                f"{self.where}: {path.lstrip('.')} holds {_shown(held)}, but the objects it describes give "
                f"{_shown(made)}; the manifest disagrees with itself (edited or damaged)"
            )
            raise BundleError(msg)
        del arrays  # their names are in the manifests just compared

    def golden(self, net: TableNetwork, record: Any) -> int:
        """Run the network on its golden inputs; the table part must reproduce the golden values exactly."""
        where = f"{self.where}: golden"
        record = _obj(record, where, keys={"inputs", "probes"})
        inputs = np.array(self.array(record["inputs"], f"{where}.inputs"))  # a small, writable copy
        if inputs.dtype != np.float64 or inputs.shape[1:] != net.input_shape:
            msg = (
                f"{where}.inputs: expected float64 values of shape (samples, *{net.input_shape}), received "
                f"{inputs.dtype} {inputs.shape}"
            )
            raise BundleError(msg)
        names = _probe_nodes(net.graph)
        probes = _list(record["probes"], f"{where}.probes")
        found = [
            _str(
                _obj(p, f"{where}.probes[{k}]", keys={"node", "values"})["node"], f"{where}.probes[{k}].node", limit=512
            )
            for k, p in enumerate(probes)
        ]
        if found != names:
            msg = f"{where}.probes: names the nodes {found}; expected {names} (the output, and what host nodes read)"
            raise BundleError(msg)
        expected = {}
        for k, (name, probe) in enumerate(zip(names, probes)):
            values = np.asarray(self.array(probe["values"], f"{where}.probes[{k}].values"))
            if values.dtype != np.float32 or values.shape != (len(inputs), *net.graph[name].shape):
                msg = (
                    f"{where}.probes[{k}].values: expected float32 values of shape "
                    f"{(len(inputs), *net.graph[name].shape)}, received {values.dtype} {values.shape}"
                )
                raise BundleError(msg)
            expected[name] = values
        if not len(inputs):
            return 0
        try:
            got = _run_probes(net, inputs, names)
        except IOTableError as exc:
            msg = (
                f"{where}: the network fails on its golden inputs ({type(exc).__name__}: {exc}); the bundle was altered"
            )
            raise BundleError(msg) from None
        for name in names:
            same = (got[name] == expected[name]) | (np.isnan(got[name]) & np.isnan(expected[name]))
            if not same.all():
                sample = int(np.argwhere(~same)[0][0])
                msg = (
                    f"{where}: node {name!r} gives other values than when the bundle was saved (golden sample "
                    f"{sample}); the tables or the manifest were altered: save the bundle again from the model"
                )
                raise BundleError(msg)
        return len(inputs)


def _lut_table(record: dict[str, Any], tables: list[list[IOTable]], where: str) -> IOTable:
    """The table a mapping record names (``[layer index, unit]``)."""
    pair = _ints(record["table"], f"{where}.table", minimum=0)
    if len(pair) != 2 or pair[0] >= len(tables) or pair[1] >= len(tables[pair[0]]):
        msg = f"{where}.table: {_shown(record['table'])} names no table; expected [layer index, unit] of this network"
        raise BundleError(msg)
    return tables[pair[0]][pair[1]]


def _lut_fields(record: dict[str, Any], where: str) -> dict[str, Any]:
    """A mapping record's values, typed, as the cache of :func:`iotable.synth.map_luts` holds them."""
    from ..synth._map import _FORMAT

    result: dict[str, Any] = {"format": _FORMAT}
    key = _str(record["key"], f"{where}.key", limit=64)
    if len(key) != 64 or set(key) - set("0123456789abcdef"):
        msg = f"{where}.key: expected a sha256 in 64 lowercase hexadecimal digits, received {_shown(key)}"
        raise BundleError(msg)
    result["key"] = key
    result["k"] = _int(record["k"], f"{where}.k", minimum=3)
    if result["k"] > 12:
        msg = f"{where}.k: expected LUTs of 3 to 12 inputs, received {result['k']}"
        raise BundleError(msg)
    result["script"] = _str(record["script"], f"{where}.script")
    result["abc_version"] = _str(record["abc_version"], f"{where}.abc_version", limit=512)
    if record["method"] not in ("abc", "direct"):
        msg = f"{where}.method: expected 'abc' or 'direct', received {_shown(record['method'])}"
        raise BundleError(msg)
    result["method"] = record["method"]
    for name in ("input_bits", "output_bits", "luts", "depth"):
        result[name] = _int(record[name], f"{where}.{name}", minimum=0)
    if (result["method"] == "direct") != (result["input_bits"] <= result["k"]):
        msg = (
            f"{where}.method: {result['method']!r} for a table of {result['input_bits']} address bits and k = "
            f"{result['k']}; tables of at most k bits are written directly ('direct'), larger ones mapped by ABC"
        )
        raise BundleError(msg)
    seconds = record["seconds"]
    if not isinstance(seconds, float) or not 0 <= seconds < math.inf:
        msg = f"{where}.seconds: expected a non-negative number of seconds (a JSON float), received {_shown(seconds)}"
        raise BundleError(msg)
    result["seconds"] = seconds
    return result


def _blif_text(array: np.ndarray, where: str) -> str:
    """A netlist file's BLIF text: ``uint8`` ASCII bytes, one axis."""
    if array.dtype != np.uint8 or array.ndim != 1:
        msg = (
            f"{where}: expected the netlist's BLIF text as uint8 bytes (one axis), received {array.dtype} {array.shape}"
        )
        raise BundleError(msg)
    try:
        return array.tobytes().decode("ascii")
    except UnicodeDecodeError:
        msg = f"{where}: the netlist's BLIF text is not ASCII; the file was altered: map again and save"
        raise BundleError(msg) from None


def _checked_netlist(result: dict[str, Any], table: IOTable, where: str) -> Any:
    """The record's netlist, parsed and evaluated on every row of ``table``: it must compute the table (with
    LUTs of at most k inputs) and have the LUTs, depth and bits the record says, and the key must be the
    table's content hash."""
    from ..synth._function import bit_function
    from ..synth._netlist import LutNetlist, check_netlist

    fix = "the bundle was altered or damaged: run net.cost() again and save"
    try:
        fn = bit_function(table, what=where)
        if fn.key() != result["key"]:
            msg = f"{where}: the record's key is not the content hash of {table!r}, the table it names; {fix}"
            raise BundleError(msg)
        netlist = LutNetlist.from_blif(result["blif"], what=where)
        check_netlist(netlist, fn, name=f"{where}, for {table!r}", k=result["k"])
    except BundleError:
        raise
    except IOTableError as exc:  # SynthError (not a netlist), NetlistMismatchError (a wrong one)
        msg = f"{exc}; {fix}"
        raise BundleError(msg) from None
    found = (netlist.luts, netlist.depth, fn.input_bits, fn.output_bits)
    said = tuple(result[f] for f in ("luts", "depth", "input_bits", "output_bits"))
    if found != said:
        msg = (
            f"{where}: the record says (luts, depth, input bits, output bits) {said}, the netlist and table give "
            f"{found}; {fix}"
        )
        raise BundleError(msg)
    return netlist


def _plan_units(records: Any, geometry: Geometry, in_channels: int, out_channels: int, where: str) -> tuple[Unit, ...]:
    """A plan's units: in index order, reading channels below ``in_channels`` at every kernel position, writing
    each output channel once."""
    units = tuple(_unit(_obj(u, f"{where}[{k}]"), f"{where}[{k}]") for k, u in enumerate(_list(records, where)))
    if not units:
        msg = f"{where}: a layer has at least one unit"
        raise BundleError(msg)
    written: list[int] = []
    for k, unit in enumerate(units):
        if unit.index != k or not unit.in_channels or max(unit.in_channels) >= in_channels:
            msg = f"{where}[{k}]: expected index {k} and input channels below {in_channels}"
            raise BundleError(msg)
        if unit.fan_in != len(unit.in_channels) * geometry.window:
            msg = (
                f"{where}[{k}]: fan_in {unit.fan_in}, but it reads {len(unit.in_channels)} channel(s) at "
                f"{geometry.window} kernel position(s)"
            )
            raise BundleError(msg)
        written += unit.out_channels
    if sorted(written) != list(range(out_channels)):
        msg = f"{where}: the units must write each of the {out_channels} output channel(s) exactly once"
        raise BundleError(msg)
    return units


def _plan_frames(
    record: dict[str, Any], layout: Layout, geometry: Geometry, in_channels: int, out_channels: int, where: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A plan's input and output frames: of its layout and channels, the output what the window makes."""
    frame_in = _ints(record["frame_in"], f"{where}.frame_in", minimum=1)
    frame_out = _ints(record["frame_out"], f"{where}.frame_out", minimum=1)
    for key, frame, channels in (("frame_in", frame_in, in_channels), ("frame_out", frame_out, out_channels)):
        if len(frame) != layout.spatial_rank + 1 or (frame[-1] if layout.channels_last else frame[0]) != channels:
            msg = f"{where}.{key}: {frame} is not a {layout.value} frame of {channels} channel(s)"
            raise BundleError(msg)
    size_in = frame_in[:-1] if layout.channels_last else frame_in[1:]
    size_out = frame_out[:-1] if layout.channels_last else frame_out[1:]
    if geometry.output_size(size_in) != size_out:
        msg = (
            f"{where}.frame_out: {frame_out}, but the window (kernel {geometry.kernel}, stride {geometry.stride}, "
            f"dilation {geometry.dilation}, padding {geometry.padding}) over frame_in {frame_in} gives "
            f"{geometry.output_size(size_in)} positions"
        )
        raise BundleError(msg)
    return frame_in, frame_out


def _check_spec(
    spec: Spec, layout: Layout, geometry: Geometry, in_channels: int, out_channels: int, where: str
) -> None:
    """What the decomposition metadata says of the window, layout and groups agrees with the plan it made."""
    for key, value in (("kernel_size", geometry.kernel), ("stride", geometry.stride), ("dilation", geometry.dilation)):
        declared = getattr(spec, key)
        if declared is not None and len(declared) == 1:  # one size for every axis
            declared = declared * len(value)
        if declared is not None and declared != value:
            msg = f"{where}.{key}: {list(declared)}, but the plan's window has {list(value)}"
            raise BundleError(msg)
    if spec.layout is not None and spec.layout is not layout:
        msg = f"{where}.layout: {spec.layout.value}, but the plan's layout is {layout.value}"
        raise BundleError(msg)
    if spec.groups is not None and (in_channels % spec.groups or out_channels % spec.groups):
        msg = (
            f"{where}.groups: {spec.groups} does not divide the {in_channels} input and {out_channels} output channels"
        )
        raise BundleError(msg)


def _upgraded(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A manifest of an older format as the current format writes the same network (``format_version`` is
    left as written, except that format 1 reads as the format 2 it stands for): what does not have the shape
    an older format wrote is left as it is, for the checks to refuse."""
    if manifest.get("format_version") == 1:
        manifest, arrays = _upgrade_1(manifest, arrays)
    if manifest.get("format_version") in (2, 3):
        manifest, arrays = _upgrade_graph(manifest, arrays)
    version = manifest.get("format_version")
    if isinstance(version, int) and version < LUT_RESULTS and "luts" not in manifest:
        manifest = {**manifest, "luts": []}  # no mapping results (the fields as written are checked apart)
    return manifest, arrays


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


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    """The first place where two JSON values differ: its path, and the value each holds there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}", a.get(key, "(missing)"), b.get(key, "(missing)")
            if _canonical(a[key]) != _canonical(b[key]):
                return _difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for k, (x, y) in enumerate(zip(a, b)):
            if _canonical(x) != _canonical(y):
                return _difference(x, y, f"{path}[{k}]")
    return path, a, b


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


# -- the network as a whole -------------------------------------------------------------------------------


def _check_network(graph: Graph, layers: dict[str, LayerTables], hosts: dict[str, nn.Module], where: str) -> Graph:
    """What the runtime relies on beyond :meth:`Graph.check`: the graph and the tables describe one network.

    Each layer has one table node, in layer order, with its plan's units, layout, output domain and window;
    the codes the graph feeds each unit's inputs are of the domains its table was built for; each host
    record has its host node. Returns the graph with each table node holding its plan's units (one copy).
    """
    tables = graph.nodes_of(NodeKind.TABLE)
    order = [n.meta.layer for n in tables]
    if order != list(layers):
        msg = f"{where}: the table nodes use the layers {order}; expected each of {list(layers)} once, in that order"
        raise BundleError(msg)
    shared = []
    for node in tables:
        plan = layers[node.meta.layer].plan
        _check_table_node(graph, node, plan, f"{where}: table node {node.name!r}")
        shared.append(dataclasses.replace(node, meta=dataclasses.replace(node.meta, units=plan.units)))
    named = [n.name for n in graph.nodes_of(NodeKind.HOST)]
    if named != list(hosts):
        msg = f"{where}: the host nodes are {named}, but the host list names {list(hosts)}, in that order"
        raise BundleError(msg)
    for node in graph.nodes_of(NodeKind.HOST):
        if node.meta.module is not hosts[node.name]:
            msg = f"{where}: host node {node.name!r}'s meta.module must be {{'$host': {node.name!r}}}"
            raise BundleError(msg)
    return graph.replace(*shared)


def _check_table_node(graph: Graph, node: Node, plan: LayerPlan, here: str) -> None:
    """A table node has its plan's units, layout, output domain, window and padding, and is fed the codes of
    the domains its tables were built for."""
    meta = node.meta
    assert isinstance(meta, TableMeta)  # the graph passed its checks
    if meta.units != plan.units:
        msg = f"{here}: meta.units disagrees with the units of layer {plan.name!r}"
        raise BundleError(msg)
    if node.layout != plan.layout or node.domain != plan.output_domain or node.channels != plan.out_channels:
        msg = f"{here}: its layout, output domain or channels disagree with the plan of layer {plan.name!r}"
        raise BundleError(msg)
    producer = graph.producers(node.name)[0]
    if (producer.kind is NodeKind.WINDOW) != (plan.geometry.rank > 0):
        msg = (
            f"{here}: reads a {producer.kind.value} node, but the plan of layer {plan.name!r} has rank "
            f"{plan.geometry.rank}"
        )
        raise BundleError(msg)
    if isinstance(producer.meta, WindowMeta):
        _check_window_plan(graph, producer, plan, here)
    elif node.shape != plan.frame_out:
        msg = f"{here}: shape {node.shape} differs from its plan's output {plan.frame_out}"
        raise BundleError(msg)
    domains = element_domains(producer)
    index_map = meta.index_map
    for unit in plan.units:  # units reading the same channels share their domains: checked once per channel set
        reads = index_map[unit.index, : unit.fan_in]
        fed = tuple(domains[i] for i in reads) if len(domains) > 1 else domains * unit.fan_in
        if fed != plan.unit_domains(unit):
            msg = (
                f"{here}: unit {unit.index} is fed codes of {fed} but its table was built for {plan.unit_domains(unit)}"
            )
            raise BundleError(msg)


def _check_window_plan(graph: Graph, window: Node, plan: LayerPlan, here: str) -> None:
    """The window a table reads and the pad before it are its plan's kernel, stride, dilation and padding."""
    g, meta = plan.geometry, window.meta
    assert isinstance(meta, WindowMeta)
    if (meta.kernel, meta.stride, meta.dilation) != (g.kernel, g.stride, g.dilation):
        msg = f"{here}: the window {window.name!r} disagrees with the kernel, stride or dilation of its plan"
        raise BundleError(msg)
    source = graph.producers(window.name)[0]
    if source.kind is NodeKind.PAD:
        padding, mode = source.meta.padding, source.meta.mode
    else:
        padding, mode = tuple((0, 0) for _ in g.padding), g.padding_mode
    if padding != g.padding or mode is not g.padding_mode:
        msg = (
            f"{here}: the padding before its window is {padding} in mode {mode.value!r}; its plan pads "
            f"{g.padding} in mode {g.padding_mode.value!r}"
        )
        raise BundleError(msg)


# -- golden vectors ---------------------------------------------------------------------------------------


class _Zeros(nn.Module):
    """Stands in for a host module while golden vectors are computed: zeros of the host node's shape."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((x.shape[0], *self.shape), dtype=torch.float32)


def _probe_nodes(graph: Graph) -> list[str]:
    """Where golden values are taken: what each host node reads, and the output unless a host node makes it.

    Host modules run the caller's code on floats (their last bits may differ across machines); what the
    tables make is exact everywhere.
    """
    hosted: set[str] = set()
    for node in graph.nodes:
        if node.kind is NodeKind.HOST or any(p in hosted for p in graph.inputs(node.name)):
            hosted.add(node.name)
    probes = [
        graph.inputs(n.name)[0]
        for n in graph.nodes
        if n.kind is NodeKind.HOST and graph.inputs(n.name)[0] not in hosted
    ]
    if graph.nodes[-1].name not in hosted:
        probes.append(graph.nodes[-1].name)
    return list(dict.fromkeys(probes))


def _run_probes(net: TableNetwork, values: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """Float32 values of the ``names`` nodes for input ``values``, from the tables alone.

    Host modules are replaced by zeros, and a row a partial table lacks (with no don't-care of its own)
    reads as code 0, or 0.0 for raw outputs: every generated input runs, and what it gives depends on the
    bundle only.
    """
    hosts = any(n.kind is NodeKind.HOST for n in net.graph.nodes)
    layers, filled = {}, False
    for name, layer in net.layers.items():
        tables = []
        for table in layer.tables:
            if not table.is_dense and table.dont_care is None:
                table = copy.copy(table)
                table._dont_care = np.zeros(table.fan_out, dtype=table.outputs.dtype)
                filled = True
            tables.append(table)
        layers[name] = dataclasses.replace(layer, tables=tuple(tables))
    if hosts or filled:
        zeros = [
            dataclasses.replace(n, meta=dataclasses.replace(n.meta, module=_Zeros(n.shape)))
            for n in net.graph.nodes_of(NodeKind.HOST)
        ]
        runtime = Runtime(net.graph.replace(*zeros), layers)
    else:
        runtime = net.runtime  # compiled once, for the golden run and every run after it
    codes = runtime.encode(torch.from_numpy(values), codes=False, input_shape=net.input_shape)
    _, env = runtime.run(codes, capture=True)
    return {name: decode(env[name], net.graph[name]).to(torch.float32).numpy() for name in names}


def _golden(net: TableNetwork) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Generated inputs of the network's input domain and the values the network's table part makes of them.

    Sample 0 holds every input's first code, sample 1 its last, the rest random codes (a fixed seed); at most
    :data:`GOLDEN_SAMPLES` samples, fewer for large inputs.
    """
    node = net.input_node
    shape = net.input_shape
    per_sample = max(1, math.prod(shape))
    count = max(1, min(GOLDEN_SAMPLES, _GOLDEN_ELEMENTS // per_sample))
    domains = element_domains(node)
    sizes = np.asarray([len(d) for d in domains], dtype=np.int64)
    radix = np.broadcast_to(sizes, (per_sample,)) if len(domains) == 1 else sizes
    codes = (np.random.default_rng(0).random((count, per_sample)) * radix).astype(np.int64)
    codes[0] = 0
    if count > 1:
        codes[1] = radix - 1
    values = np.empty(codes.shape, dtype=np.float64)
    for d in dict.fromkeys(domains):
        columns = np.asarray([k for k, e in enumerate(domains) if e == d]) if len(domains) > 1 else slice(None)
        values[:, columns] = d.values[codes[:, columns]]
    values = values.reshape(count, *shape)
    return values, _run_probes(net, values, _probe_nodes(net.graph))
