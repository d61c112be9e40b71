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

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
from torch import nn

from ..bits import widths
from ..domain import Domain
from ..errors import BundleError, IOTableError
from ..lutnet import (
    MAX_INPUT_BITS,
    RECORD_FORMAT,
    LutNetlist,
    LutResult,
    LutResults,
    bit_function,
    check_netlist,
    result_name,
)
from ..network.network import TableNetwork
from ..table import IOTable
from ..tabulate.layers import LayerTables
from ._format import DIGIT_ORDER
from ._format import GOLDEN_SAMPLES as GOLDEN_SAMPLES  # re-exported: part of the format's description
from ._format import MAX_DOMAIN_VALUES as MAX_DOMAIN_VALUES
from ._golden import _check_network, _golden, _probe_nodes, _run_probes
from ._layercodec import _LayerDecoding, _LayerEncoding
from .jsonfields import _int, _ints, _kind, _list, _obj, _shown, _str
from .upgrade import _upgrade_1, _upgrade_graph

_E = TypeVar("_E", bound=enum.Enum)

#: The ``format`` field of every bundle manifest.
FORMAT = "iotable-bundle"
#: The bundle format version this library writes; it reads this version and older ones. Version 2 added
#: padding modes and asymmetric padding (a version-1 reader would pad a reflect-padded network with zeros);
#: version 3 the manifest's checksum (``manifest.sha256``) and golden vectors; version 4 the typed graph
#: metadata (producers only in the edges, index maps and buffer depths in the nodes, one record per kind);
#: version 5 the LUT mapping results a network holds (``net.luts``, from :func:`iotable.synth.cost`); version 6
#: a table node's ``unit_bits`` as hardware packs them (:mod:`iotable.bits`: an input of a one-value domain is a
#: 1-bit field, where older versions counted 0 bits for it).
FORMAT_VERSION = 6
#: The first format version with a manifest checksum and golden vectors (older bundles load without them).
CHECKSUMMED = 3
#: The first format version that can hold LUT mapping results (older bundles load without them).
LUT_RESULTS = 5


_FIELDS = {
    1: {"format", "format_version", "library_version", "content", "address_digit_order", "input_shape"}
    | {"domains", "graph", "layers", "host", "files"},
}
_FIELDS[2] = _FIELDS[1]
_FIELDS[3] = _FIELDS[2] | {"golden"}
_FIELDS[4] = _FIELDS[3]
_FIELDS[5] = _FIELDS[4] | {"luts"}
_FIELDS[6] = _FIELDS[5]
#: The fields of a record in ``luts`` (``netlist`` names the file of its BLIF text).
_LUT_FIELDS = {"table", "key", "k", "script", "abc_version", "method", "input_bits", "output_bits", "luts", "depth"}
_LUT_FIELDS |= {"seconds", "netlist"}
_INFORMATION = ("library_version", "files", "golden")  # fields the round trip does not re-encode


class _Encoder(_LayerEncoding):
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
        """The LUT mapping results the network holds (``net.luts``: from :func:`iotable.synth.cost`, a loaded
        bundle) for its own tables: one record per (function, k, script, ABC version), naming the first table
        with that function, its netlist's BLIF text a ``uint8`` file; ordered by that table, then k, script
        and version."""
        if not net.luts:
            return []
        first: dict[str, tuple[int, int]] = {}
        for index, layer in enumerate(net.layers.values()):
            for u, table in enumerate(layer.tables):
                if table.output_domain is not None and sum(widths(table.input_domains)) <= MAX_INPUT_BITS:
                    first.setdefault(bit_function(table, what="save").key(), (index, u))
        found = [((*first[r.key], r.k, r.script, r.abc_version), r) for r in net.luts.values() if r.key in first]
        records = []
        for i, (order, r) in enumerate(sorted(found, key=lambda item: item[0])):
            text = np.frombuffer(r.netlist.blif.encode("ascii"), dtype=np.uint8)
            records.append(
                {
                    "table": list(order[:2]),
                    **{f: getattr(r, f) for f in ("key", "k", "script", "abc_version", "method")},
                    **{f: int(getattr(r, f)) for f in ("input_bits", "output_bits", "luts", "depth")},
                    "seconds": float(r.seconds),
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


class _Decoder(_LayerDecoding):
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
            obj = dataclasses.replace(obj, luts=self.lut_results(obj, _list(m["luts"], f"{where}: luts")))
        self.round_trip(obj)
        if isinstance(obj, TableNetwork) and version >= CHECKSUMMED:
            self.golden(obj, m["golden"])
        unused = sorted(set(self.arrays) - self.used)
        if unused:
            msg = f"{where}: files lists {unused[0]!r}, which no field uses; a bundle lists the files it uses"
            raise BundleError(msg)
        if isinstance(obj, TableNetwork):
            obj = self.attach(obj, host_modules)  # a new network with its host modules, holding the same luts
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

    def lut_results(self, net: TableNetwork, records: list[Any]) -> LutResults:
        """LUT mapping results (``luts``), each checked as a fresh ABC result is: the key is the content hash
        of the table it names, its netlist (read from its file) computes that table on every row and has the
        LUTs and depth the record says; the network loaded holds them (``net.luts``), where
        :func:`iotable.synth.cost` finds them."""
        found: dict[str, LutResult] = {}
        tables = [list(layer.tables) for layer in net.layers.values()]
        for i, item in enumerate(records):
            where = f"{self.where}: luts[{i}]"
            record = _obj(item, where, keys=_LUT_FIELDS)
            table = _lut_table(record, tables, where)
            result, text = _lut_fields(record, where), self.array(record["netlist"], f"{where}.netlist")
            result["blif"] = _blif_text(text, f"{where}.netlist ({record['netlist']})")
            file = result_name(result["key"], result["k"], result["script"], result["abc_version"])
            if file in found:
                msg = f"{where}: a second result for the same table, k, script and ABC version; each is stored once"
                raise BundleError(msg)
            netlist = _checked_netlist(result, table, f"{where}.netlist ({record['netlist']})")
            found[file] = LutResult.from_record(result, netlist)
        return LutResults(found.values())

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
    result: dict[str, Any] = {"format": RECORD_FORMAT}
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


def _checked_netlist(result: dict[str, Any], table: IOTable, where: str) -> LutNetlist:
    """The record's netlist, parsed and evaluated on every row of ``table``: it must compute the table (with
    LUTs of at most k inputs) and have the LUTs, depth and bits the record says, and the key must be the
    table's content hash."""
    fix = "the bundle was altered or damaged: map again (iotable.synth.cost, or iotable cost BUNDLE --save) and save"
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
