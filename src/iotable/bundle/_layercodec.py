"""The layer part of a bundle: plans, specs and tables to JSON and back, every table checked against its plan."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, TypeVar

import numpy as np

from .._util.text import count_text
from ..domain import Domain, code_dtype
from ..errors import BundleError
from ..layerplan import LayerPlan
from ..layout import Layout, PaddingMode
from ..table import IOTable
from ..tabulate.layers import LayerTables
from ..units import Geometry, Spec, Unit
from ._format import DIGIT_ORDER
from ._graphcodec import _GraphDecoding, _GraphEncoding, _unit, _unit_record
from .jsonfields import _bool, _int, _ints, _list, _name, _obj, _pair, _shown, _str

_E = TypeVar("_E", bound=enum.Enum)


class _LayerEncoding(_GraphEncoding):
    """The writer's layer part (mixed into :class:`~iotable.bundle.manifest._Encoder`)."""

    def layer(self, layer: LayerTables, k: int) -> dict[str, Any]:
        plan = layer.plan
        if len(layer.tables) != len(plan.units):
            msg = f"save: layer {plan.name!r} has {len(layer.tables)} table(s) for {len(plan.units)} unit(s)"
            raise BundleError(msg)
        g = plan.geometry
        spec = {f.name: self.value(getattr(plan.spec, f.name), f"spec.{f.name}") for f in _stored_spec_fields()}
        build = {  # how the tables were made (method, cached units, ...): every other LayerTables field
            f.name: self.value(getattr(layer, f.name), f"layer {plan.name!r} {f.name}")
            for f in dataclasses.fields(LayerTables)
            if f.name not in ("plan", "tables") and not (f.name == "unused" and not layer.unused)
        }  # (no removed inputs: no "unused" entry, as bundles written before it held none)
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


class _LayerDecoding(_GraphDecoding):
    """The reader's layer part (mixed into :class:`~iotable.bundle.manifest._Decoder`)."""

    # -- layers -------------------------------------------------------------------------------------------

    def layer(self, record: dict[str, Any], where: str) -> LayerTables:
        _obj(record, where, keys={"name", "build", "plan", "tables"})
        name = _name(record["name"], f"{where}.name")
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
        _obj(record, where, keys=known if "unused" in record else known - {"unused"})  # older bundles: none
        cached = _ints(record["cached"], f"{where}.cached", minimum=0)
        if list(cached) != sorted(set(cached)) or (cached and cached[-1] >= units):
            msg = f"{where}.cached: expected ascending unit indices below {units}, received {_shown(list(cached))}"
            raise BundleError(msg)
        method = _str(record["method"], f"{where}.method", limit=100)
        unused = []
        for k, entry in enumerate(_list(record.get("unused", []), f"{where}.unused")):
            pair = _list(entry, f"{where}.unused[{k}]")
            if len(pair) != 2:
                msg = f"{where}.unused[{k}]: expected [unit, [input channels removed]], received {_shown(pair)}"
                raise BundleError(msg)
            unit = _int(pair[0], f"{where}.unused[{k}][0]", minimum=0)
            unused.append((unit, _ints(pair[1], f"{where}.unused[{k}][1]", minimum=0)))
        return {
            "cached": cached,
            "method": method,
            "near_ties": _int(record["near_ties"], f"{where}.near_ties", minimum=0),
            "unused": tuple(unused),
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
        _obj(record, where, keys={f.name for f in _stored_spec_fields()})
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
                f"{where}: unit {unit.index} of the plan has fan-in {unit.fan_in} and {count_text(unit.rows)} rows; "
                f"its domains give {len(domains)} and {count_text(space)}"
            )
            raise BundleError(msg)
        if space >= 2**62:
            msg = f"{where}: {count_text(space)} addresses do not fit a 64-bit integer"
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
    if len(written) != out_channels or sorted(written) != list(range(out_channels)):
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


def _stored_spec_fields() -> list[dataclasses.Field]:
    """The :class:`Spec` fields a bundle stores: all but ``infer``, a request that planning resolves (a plan's
    spec never carries it), so that bundles of every format hold the same record."""
    return [f for f in dataclasses.fields(Spec) if f.name != "infer"]
