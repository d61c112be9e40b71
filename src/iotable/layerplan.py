"""Plans (the torch front end's planning record, kept with a layer's tables as history and read by the bundle):
a module's decomposition resolved against its input shape and domain, validated before any work.

A :class:`LayerPlan` fixes everything enumeration needs: the units (which input channels each reads over
which kernel window, which output channels it writes), their fan-ins and row counts, and an *enumeration
frame* — an input shape small enough to be cheap, with one or more *slots*: output positions whose windows
lie inside the frame and do not overlap, so that one forward pass fills several rows of every unit.

Element order inside a unit (the order of a table's input columns): for channels-first layouts the input
channel (ascending within the unit) and then the kernel positions row-major; for channels-last layouts the
kernel positions and then the channel. Non-spatial layers (``"NC"``) read single features. The convention
lives in :mod:`iotable._util.order` (``unit_elements``, ``element_order``); everything else calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ._util import display as _display
from ._util.order import unit_elements
from .bits import width, widths
from .domain import Domain
from .layout import Layout
from .lutcount import lut_estimate
from .units import Geometry, Spec, Unit

__all__ = ["LayerPlan", "abbreviated", "common_domain", "frame_strides", "unit_input_domains"]


@dataclass(frozen=True)
class LayerPlan:
    """A module's units, sizes and enumeration frame, resolved and validated (see :func:`plan`)."""

    name: str
    spec: Spec
    layout: Layout
    geometry: Geometry
    in_channels: int
    out_channels: int
    units: tuple[Unit, ...]
    input_domains: tuple[Domain, ...]
    output_domain: Domain | None
    frame_in: tuple[int, ...]
    frame_out: tuple[int, ...]
    slots: tuple[tuple[int, ...], ...]
    fill_codes: tuple[int, ...]
    max_rows: int

    @property
    def input_domain(self) -> Domain | None:
        """The domain shared by every input channel, or ``None`` when channels differ."""
        first = self.input_domains[0]
        return first if all(d == first for d in self.input_domains) else None

    def unit_domains(self, unit: Unit) -> tuple[Domain, ...]:
        """The domain of each of ``unit``'s inputs, in its input order."""
        shared = self.shared_domain
        if shared is not None:
            return (shared,) * unit.fan_in
        return unit_input_domains(self.input_domains, unit.in_channels, self.geometry.window, self.layout)

    @cached_property
    def shared_domain(self) -> Domain | None:
        """The one domain of all the layer's inputs, or ``None`` when they differ."""
        return common_domain(self.input_domains)

    @property
    def total_rows(self) -> int:
        """Rows of all the layer's tables together."""
        return sum(u.rows for u in self.units)

    @cached_property
    def _strides(self) -> tuple[tuple[int, np.ndarray], tuple[int, np.ndarray]]:
        return frame_strides(self.frame_in, self.layout), frame_strides(self.frame_out, self.layout)

    def input_index(self, unit: Unit) -> np.ndarray:
        """Flat indices into one frame sample of ``unit``'s inputs, per slot: shape ``(slots, fan_in)``."""
        return self.input_indices(np.asarray([unit.in_channels], dtype=np.int64))[0]

    def input_indices(self, channels: np.ndarray) -> np.ndarray:
        """:meth:`input_index` of units reading ``channels`` ``(units, channels each)``: ``(units, slots, fan_in)``."""
        ch_stride, pos_stride = self._strides[0]
        slots = np.asarray(self.slots, dtype=np.int64).reshape(len(self.slots), self.geometry.rank)
        origin = slots * np.asarray(self.geometry.stride, np.int64) - np.asarray(self.geometry.before, np.int64)
        positions = origin[:, None, :] + self.geometry.offsets()[None, :, :]  # (slots, window, rank)
        pos_flat = positions @ pos_stride if self.geometry.rank else np.zeros((len(self.slots), 1), np.int64)
        ch_flat = np.asarray(channels, dtype=np.int64) * ch_stride  # (units, channels)
        channel, position = unit_elements(ch_flat.shape[1], pos_flat.shape[1], channels_last=self.layout.channels_last)
        return ch_flat[:, None, channel] + pos_flat[None, :, position]  # (units, slots, fan_in) in element order

    def output_index(self, unit: Unit) -> np.ndarray:
        """Flat indices into one frame output of ``unit``'s outputs, per slot: shape ``(slots, fan_out)``."""
        return self.output_indices(np.asarray(unit.out_channels, dtype=np.int64))

    def output_indices(self, channels: np.ndarray) -> np.ndarray:
        """Flat indices into one frame output of output ``channels``, per slot: ``(slots, len(channels))``."""
        ch_stride, pos_stride = self._strides[1]
        slots = np.asarray(self.slots, dtype=np.int64).reshape(len(self.slots), self.geometry.rank)
        pos_flat = slots @ pos_stride if self.geometry.rank else np.zeros(len(self.slots), np.int64)
        return pos_flat[:, None] + np.asarray(channels, dtype=np.int64)[None, :] * ch_stride

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Data later stages derive from this plan alone, computed once and kept here (keyed by stage)."""
        return {}

    def __getstate__(self) -> dict[str, Any]:
        """The plan without its :attr:`memo`, which may hold functions that do not pickle: a plan sent to another
        process (an executor's worker) derives what it needs again there."""
        state = dict(self.__dict__)
        state.pop("memo", None)
        return state

    @cached_property
    def reads(self) -> np.ndarray:
        """Boolean ``(out_channels, in_channels)``: whether some unit writing the output reads the input."""
        outs = [o for u in self.units for o in u.out_channels for _ in u.in_channels]
        ins = [i for u in self.units for _ in u.out_channels for i in u.in_channels]
        reads = np.zeros((self.out_channels, self.in_channels), dtype=bool)
        reads[outs, ins] = True
        return reads

    def _unit_bits(self, unit: Unit) -> int:
        """Input bits of ``unit``'s table (its rows are at most ``2 ** bits``)."""
        return sum(d.bits for d in self.unit_domains(unit))

    @cached_property
    def table_bits(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(address bits, code bits)`` of each unit's table as hardware packs them (:mod:`iotable.bits`),
        ``int64`` arrays ``(units,)``: every input code a field of :func:`~iotable.bits.width` bits, every
        output code too; code bits ``None`` when the layer outputs raw values. Known from the plan alone: no
        row is computed."""
        shared = self.shared_domain
        fan_in = np.fromiter((u.fan_in for u in self.units), np.int64, len(self.units))
        if shared is not None:
            address = fan_in * width(shared)
        else:  # units reading the same channels have the same bits: one sum per distinct channel group
            groups: dict[tuple[int, ...], int] = {}
            for u in self.units:
                if u.in_channels not in groups:
                    groups[u.in_channels] = sum(widths(self.unit_domains(u)))
            address = np.fromiter((groups[u.in_channels] for u in self.units), np.int64, len(self.units))
        if self.output_domain is None:
            return address, None
        fan_out = np.fromiter((u.fan_out for u in self.units), np.int64, len(self.units))
        return address, fan_out * width(self.output_domain)

    def lut_estimates(self, *, k: int = 6) -> np.ndarray | None:
        """LogicNets' LUT estimate of each unit's table (:func:`iotable.synth.lut_estimate` of its
        :attr:`table_bits`), from the plan alone, before any row is computed; ``None`` for raw outputs.

        Example:
            >>> layer = torch.nn.Sequential(torch.nn.Conv1d(3, 3, 3, groups=3), iotable.nn.Quantize(2))
            >>> p = plan(layer, input_domain=Domain.uniform(3))
            >>> [b.tolist() for b in p.table_bits], p.lut_estimates().tolist(), p.lut_estimate()
            ([[9, 9, 9], [2, 2, 2]], [22, 22, 22], 66)
        """
        address, code = self.table_bits
        return None if code is None else lut_estimate(address, code, k=k)

    def lut_estimate(self, *, k: int = 6) -> int | None:
        """LogicNets' LUT estimate of all the layer's tables together (:meth:`lut_estimates` summed), known
        before any row is computed; ``None`` when the layer outputs raw values (no table of codes)."""
        estimates = self.lut_estimates(k=k)
        return None if estimates is None else int(estimates.sum())

    def __repr__(self) -> str:
        kernel = f", kernel {self.geometry.kernel}" if self.geometry.rank else ""
        return _display.bounded(
            f"LayerPlan({_display.name(self.name)}, {len(self.units)} units, fan-in "
            f"{_display.joined(u.fan_in for u in self.units)}, {_display.joined(map(self._unit_bits, self.units))} "
            f"bit, {self.total_rows:,} rows, layout {self.layout.value}{kernel})"
        )

    def summary(self) -> str:
        """A readable table of the units: index, input channels, output channels, fan-in, bits, rows, and
        LogicNets' LUT6 estimate of each table; then the layer's estimate and the register bits a pipeline
        register after the layer holds per output position (all known before any row is computed)."""
        shared = self.input_domain
        inputs = repr(shared) if shared is not None else "per-channel domains"
        estimates = self.lut_estimates()
        lines = [
            f"{self.name}: layout {self.layout.value}, {len(self.units)} unit(s), {self.total_rows} row(s), "
            f"input {inputs}, output {self.output_domain!r}",
            f"{'unit':>5} {'in channels':<24} {'out channels':<16} {'fan-in':>6} {'bits':>5} {'rows':>10}"
            + ("" if estimates is None else f" {'LUT6':>8}"),
        ]
        for u in self.units:
            estimate = "" if estimates is None else f" {int(estimates[u.index]):>8}"
            lines.append(
                f"{u.index:>5} {abbreviated(u.in_channels):<24} {abbreviated(u.out_channels):<16} "
                f"{u.fan_in:>6} {sum(d.bits for d in self.unit_domains(u)):>5} {u.rows:>10}{estimate}"
            )
        _, code = self.table_bits
        if estimates is None or code is None:
            lines.append("raw outputs: no table of codes, so no LUT estimate")
        else:
            lines.append(
                f"LogicNets estimate: {int(estimates.sum())} LUT6 for the layer's tables; a pipeline register after "
                f"the layer holds {int(code.sum())} bit(s) per output position"
            )
        return "\n".join(lines)


def unit_input_domains(
    domains: tuple[Domain, ...], channels: tuple[int, ...], window: int, layout: Layout
) -> tuple[Domain, ...]:
    """The domain of each of a unit's inputs, in element order (see :mod:`iotable._util.order`)."""
    channel, _ = unit_elements(len(channels), window, channels_last=layout.channels_last)
    return tuple(domains[channels[c]] for c in channel.tolist())


def common_domain(domains: tuple[Domain, ...]) -> Domain | None:
    """The domain every channel has, or ``None`` when channels differ."""
    first = domains[0]
    return first if all(d is first or d == first for d in domains) else None


def abbreviated(values: tuple[int, ...], limit: int = 6) -> str:
    """``values`` joined by commas, the first ``limit`` of them then ``,...`` (channel lists in summaries)."""
    text = ",".join(str(v) for v in values[:limit])
    return text + (",..." if len(values) > limit else "")


def frame_strides(shape: tuple[int, ...], layout: Layout) -> tuple[int, np.ndarray]:
    """Flat-index stride of the channel axis and of each spatial axis, for a per-sample shape in ``layout``."""
    strides = np.cumprod((*shape[1:], 1)[::-1])[::-1].astype(np.int64)
    if layout.channels_last:
        return int(strides[-1]), strides[:-1]
    return int(strides[0]), strides[1:]
