"""Plans: a module's decomposition resolved against its input shape and domain, validated before any work.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.conv import _ConvNd

from .._util import display as _display
from .._util.modules import eval_mode, module_dtype, run_module
from .._util.order import unit_elements
from ..domain import Domain
from ..errors import SpecError, TableTooLargeError
from ..nn import domain_of
from .registry import Role, role_of
from .spec import Layout, PaddingMode, Spec, _channel_counts, _normalize_padding, spec_of

__all__ = ["DEFAULT_MAX_ROWS", "Geometry", "LayerPlan", "Unit", "eval_mode", "plan"]

#: Default limit on the rows of one table (2**24).
DEFAULT_MAX_ROWS = 2**24


@dataclass(frozen=True)
class Geometry:
    """The sliding window of a spatial layer, one entry per spatial axis (all empty for ``"NC"``).

    ``padding`` holds a ``(before, after)`` pair per axis: torch's ``padding="same"`` with an even kernel
    pads one element more after than before. ``padding_mode`` says what padded positions hold.

    Example:
        >>> g = Geometry(kernel=(4,), stride=(1,), dilation=(1,), padding=((1, 2),))
        >>> g.before, g.after, g.output_size((6,))
        ((1,), (2,), (6,))
    """

    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    padding: tuple[tuple[int, int], ...] = ()
    padding_mode: PaddingMode = PaddingMode.ZEROS

    def __post_init__(self) -> None:
        if not all(isinstance(p, tuple) and len(p) == 2 for p in self.padding):
            msg = (
                f"Geometry: padding must hold one (before, after) pair per spatial axis, received {self.padding!r}; "
                "write an axis padded p on both sides as (p, p)"
            )
            raise SpecError(msg)
        if not isinstance(self.padding_mode, PaddingMode):
            object.__setattr__(self, "padding_mode", PaddingMode.parse(self.padding_mode, what="Geometry"))

    @property
    def rank(self) -> int:
        """Number of spatial axes."""
        return len(self.kernel)

    @property
    def window(self) -> int:
        """Number of kernel positions."""
        return math.prod(self.kernel)

    @property
    def span(self) -> tuple[int, ...]:
        """Input extent of one window per axis: ``(k - 1) * d + 1``."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    def offsets(self) -> np.ndarray:
        """Kernel positions times dilation, row-major, shape ``(window, rank)``."""
        grids = np.meshgrid(*[np.arange(k) * d for k, d in zip(self.kernel, self.dilation)], indexing="ij")
        return np.stack([g.reshape(-1) for g in grids], axis=1) if grids else np.zeros((1, 0), np.int64)

    @property
    def before(self) -> tuple[int, ...]:
        """Padding before the first element, per axis (where the first window starts)."""
        return tuple(b for b, _ in self.padding)

    @property
    def after(self) -> tuple[int, ...]:
        """Padding after the last element, per axis."""
        return tuple(a for _, a in self.padding)

    @property
    def padded(self) -> bool:
        """Whether any axis is padded."""
        return any(b or a for b, a in self.padding)

    def padded_size(self, size: tuple[int, ...]) -> tuple[int, ...]:
        """Extent per axis of an input of ``size`` once padded."""
        return tuple(n + b + a for n, (b, a) in zip(size, self.padding))

    def output_size(self, size: tuple[int, ...]) -> tuple[int, ...]:
        """Output extent per axis for an input of ``size``: ``(n + before + after - d (k - 1) - 1) // s + 1``."""
        return tuple(
            (n - d * (k - 1) - 1) // s + 1
            for n, k, s, d in zip(self.padded_size(size), self.kernel, self.stride, self.dilation)
        )

    def sources(self, size: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """Per axis, the input position each padded position reads (``-1``: real 0), by :attr:`padding_mode`.

        Raises:
            SpecError: a padding wider than the mode allows for ``size``.
        """
        return tuple(self.padding_mode.sources(n, b, a) for n, (b, a) in zip(size, self.padding))


@dataclass(frozen=True)
class Unit:
    """One smallest independent unit: the input channels it reads and the output channels it writes."""

    index: int
    in_channels: tuple[int, ...]
    out_channels: tuple[int, ...]
    fan_in: int
    rows: int

    @property
    def fan_out(self) -> int:
        """Number of outputs the unit writes (per position)."""
        return len(self.out_channels)


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
        return _unit_domains(self.input_domains, unit.in_channels, self.geometry.window, self.layout)

    @cached_property
    def shared_domain(self) -> Domain | None:
        """The one domain of all the layer's inputs, or ``None`` when they differ."""
        return _shared(self.input_domains)

    @property
    def total_rows(self) -> int:
        """Rows of all the layer's tables together."""
        return sum(u.rows for u in self.units)

    @cached_property
    def _strides(self) -> tuple[tuple[int, np.ndarray], tuple[int, np.ndarray]]:
        return _frame_strides(self.frame_in, self.layout), _frame_strides(self.frame_out, self.layout)

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
        """``(address bits, code bits)`` of each unit's table as ``iotable.hdl`` packs them, ``int64`` arrays
        ``(units,)``: every input code a field of ``max(1, bits)`` bits, every output code too; code bits
        ``None`` when the layer outputs raw values. Known from the plan alone: no row is computed."""
        shared = self.shared_domain
        fan_in = np.fromiter((u.fan_in for u in self.units), np.int64, len(self.units))
        if shared is not None:
            address = fan_in * max(shared.bits, 1)
        else:  # units reading the same channels have the same bits: one sum per distinct channel group
            groups: dict[tuple[int, ...], int] = {}
            for u in self.units:
                if u.in_channels not in groups:
                    groups[u.in_channels] = sum(max(d.bits, 1) for d in self.unit_domains(u))
            address = np.fromiter((groups[u.in_channels] for u in self.units), np.int64, len(self.units))
        if self.output_domain is None:
            return address, None
        fan_out = np.fromiter((u.fan_out for u in self.units), np.int64, len(self.units))
        return address, fan_out * max(self.output_domain.bits, 1)

    def lut_estimates(self, *, k: int = 6) -> np.ndarray | None:
        """LogicNets' LUT estimate of each unit's table (:func:`iotable.synth.lut_estimate` of its
        :attr:`table_bits`), from the plan alone, before any row is computed; ``None`` for raw outputs.

        Example:
            >>> layer = torch.nn.Sequential(torch.nn.Conv1d(3, 3, 3, groups=3), iotable.nn.Quantize(2))
            >>> p = plan(layer, input_domain=Domain.uniform(3))
            >>> [b.tolist() for b in p.table_bits], p.lut_estimates().tolist(), p.lut_estimate()
            ([[9, 9, 9], [2, 2, 2]], [22, 22, 22], 66)
        """
        from ..synth._estimate import lut_estimate  # lazy: iotable.synth loads when cost is asked for

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
                f"{u.index:>5} {_short(u.in_channels):<24} {_short(u.out_channels):<16} "
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


def _unit_domains(
    domains: tuple[Domain, ...], channels: tuple[int, ...], window: int, layout: Layout
) -> tuple[Domain, ...]:
    """The domain of each of a unit's inputs, in element order (see :mod:`iotable._util.order`)."""
    channel, _ = unit_elements(len(channels), window, channels_last=layout.channels_last)
    return tuple(domains[channels[c]] for c in channel.tolist())


def _shared(domains: tuple[Domain, ...]) -> Domain | None:
    """The domain every channel has, or ``None`` when channels differ."""
    first = domains[0]
    return first if all(d is first or d == first for d in domains) else None


def _short(values: tuple[int, ...], limit: int = 6) -> str:
    text = ",".join(str(v) for v in values[:limit])
    return text + (",..." if len(values) > limit else "")


def _frame_strides(shape: tuple[int, ...], layout: Layout) -> tuple[int, np.ndarray]:
    """Flat-index stride of the channel axis and of each spatial axis, for a per-sample shape in ``layout``."""
    strides = np.cumprod((*shape[1:], 1)[::-1])[::-1].astype(np.int64)
    if layout.channels_last:
        return int(strides[-1]), strides[:-1]
    return int(strides[0]), strides[1:]


def _per_sample_shape(example_input: Any) -> tuple[int, ...]:
    if isinstance(example_input, (torch.Tensor, np.ndarray)):
        if example_input.ndim < 2:
            msg = f"example_input: expected a batch (N, C, ...), received shape {tuple(example_input.shape)}"
            raise SpecError(msg)
        return tuple(int(s) for s in example_input.shape[1:])
    msg = f"example_input: expected a tensor or array with a batch axis, received {type(example_input).__name__}"
    raise SpecError(msg)


def _geometry(spec: Spec, rank: int, name: str) -> Geometry:
    if rank == 0:
        return Geometry()
    if spec.kernel_size is None and not spec.elementwise:
        msg = (
            f"{name}: a spatial layout needs the receptive field; pass kernel_size= (and stride=, dilation=, "
            "padding=) to decompose()"
        )
        raise SpecError(msg)

    def per_axis(value: tuple[Any, ...] | None, default: Any, what: str) -> tuple[Any, ...]:
        if value is None:
            return (default,) * rank
        if len(value) == 1:
            return value * rank
        if len(value) != rank:
            msg = f"{name}: {what}={value} has {len(value)} entries; expected 1 or {rank} for a {rank}-D layout"
            raise SpecError(msg)
        return value

    return Geometry(
        kernel=per_axis(spec.kernel_size if not spec.elementwise else None, 1, "kernel_size"),
        stride=per_axis(spec.stride, 1, "stride"),
        dilation=per_axis(spec.dilation, 1, "dilation"),
        padding=per_axis(spec.padding, (0, 0), "padding"),
        padding_mode=spec.padding_mode or PaddingMode.ZEROS,
    )


def own_window(module: nn.Module) -> _ConvNd | None:
    """The convolution whose window a layer's window is: the module itself, or the head of a block of one
    ``nn.Conv1d``/``nn.Conv2d`` followed only by elementwise modules and quantizers; else ``None``."""
    parts: list[nn.Module] = []
    stack = [module]
    while stack:
        m = stack.pop(0)
        if isinstance(m, nn.Sequential):
            stack[:0] = list(m)
        else:
            parts.append(m)
    head = parts[0] if parts else None
    if not isinstance(head, (nn.Conv1d, nn.Conv2d)):
        return None
    if not all(role_of(m) is Role.ELEMENTWISE or domain_of(m) is not None for m in parts[1:]):
        return None
    return head


def window_mismatch(conv: _ConvNd, layout: Layout, geometry: Geometry) -> str | None:
    """How a declared window differs from a convolution's own (``None`` when it is the same).

    A declared kernel, stride, dilation, padding or padding mode that is not the convolution's would not
    change its tables (the kernel's function) but would slide, pad and stride them wrongly in a network.
    """
    rank = len(conv.kernel_size)
    if layout.channels_last or layout.spatial_rank != rank:
        return f"layout {layout.value} where the {type(conv).__name__} reads {Layout.channels_first(rank + 2).value}"
    own = {
        "kernel_size": tuple(conv.kernel_size),
        "stride": tuple(conv.stride),
        "dilation": tuple(conv.dilation),
        "padding": _normalize_padding(conv),
        "padding_mode": PaddingMode.parse(str(conv.padding_mode)),
    }
    declared = {
        "kernel_size": geometry.kernel,
        "stride": geometry.stride,
        "dilation": geometry.dilation,
        "padding": geometry.padding,
        "padding_mode": geometry.padding_mode,
    }
    for key, value in own.items():
        if declared[key] != value:
            shown = (lambda v: repr(v.value)) if key == "padding_mode" else repr
            return f"{key}={shown(declared[key])} where the {type(conv).__name__} has {key}={shown(value)}"
    return None


def _input_groups(spec: Spec, c_in: int, name: str) -> list[tuple[int, ...]]:
    """Input channel tuple of each declared unit (before a per-output split)."""
    if spec.elementwise or spec.depthwise:
        return [(c,) for c in range(c_in)]
    if spec.groups is not None:
        if c_in % spec.groups:
            msg = (
                f"{name}: groups={spec.groups} does not divide the {c_in} input channels; expected a divisor of {c_in}"
            )
            raise SpecError(msg)
        size = c_in // spec.groups
        return [tuple(range(g * size, (g + 1) * size)) for g in range(spec.groups)]
    if spec.fan_in is not None:
        for k, unit in enumerate(spec.fan_in):
            if max(unit) >= c_in:
                msg = (
                    f"{name}: fan_in[{k}] = {list(unit)} reads input {max(unit)}, but the input has {c_in} "
                    f"channel(s); expected indices 0..{c_in - 1}"
                )
                raise SpecError(msg)
        return [tuple(unit) for unit in spec.fan_in]
    return [tuple(range(c_in))]


def _output_groups(spec: Spec, n_units: int, c_out: int, name: str) -> list[tuple[int, ...]]:
    if spec.elementwise or spec.depthwise:
        if c_out != n_units:
            kind = "an elementwise" if spec.elementwise else "a per-channel (depthwise)"
            msg = f"{name}: {kind} module must keep the channel count; {n_units} in, {c_out} out"
            raise SpecError(msg)
        return [(c,) for c in range(c_out)]
    if spec.groups is not None:
        if c_out % spec.groups:
            msg = (
                f"{name}: groups={spec.groups} does not divide the {c_out} output channels; "
                f"expected a divisor of {c_out}"
            )
            raise SpecError(msg)
        size = c_out // spec.groups
        return [tuple(range(g * size, (g + 1) * size)) for g in range(spec.groups)]
    if spec.fan_out is not None:
        groups = [tuple(unit) for unit in spec.fan_out]
    elif spec.fan_in is not None:
        if len(spec.fan_in) != c_out:
            msg = (
                f"{name}: fan_in lists {len(spec.fan_in)} unit(s) but the module has {c_out} output(s); unit k "
                "writes output k unless fan_out= says otherwise"
            )
            raise SpecError(msg)
        groups = [(k,) for k in range(c_out)]
    else:
        return [tuple(range(c_out))]
    for k, unit in enumerate(groups):
        if max(unit) >= c_out:
            msg = f"{name}: unit {k} writes output {max(unit)}, but the module has {c_out}; expected 0..{c_out - 1}"
            raise SpecError(msg)
    return groups


def _check_coverage(out_groups: list[tuple[int, ...]], c_out: int, name: str) -> None:
    counts = np.bincount(np.concatenate([np.asarray(g, np.int64) for g in out_groups]), minlength=c_out)
    if (counts != 1).any():
        c = int(np.flatnonzero(counts != 1)[0])
        msg = (
            f"{name}: output {c} is written by {int(counts[c])} unit(s); expected every output written by "
            "exactly one unit (check fan_out=)"
        )
        raise SpecError(msg)


def _slots(geometry: Geometry, size: tuple[int, ...], name: str) -> list[tuple[int, ...]]:
    """Output positions whose windows lie inside ``size`` and do not overlap, per axis then combined."""
    per_axis = []
    for n, k, s, d, p in zip(size, geometry.kernel, geometry.stride, geometry.dilation, geometry.before):
        span = (k - 1) * d + 1
        first = -(-p // s)
        step = -(-span // s)
        last_origin = n - span
        axis = [o for o in range(first, (last_origin + p) // s + 1, step)] if last_origin >= 0 else []
        if not axis:
            msg = f"{name}: the input extent {n} cannot hold one window of span {span} (kernel {k}, dilation {d})"
            raise SpecError(msg)
        per_axis.append(axis)
    grids = np.meshgrid(*[np.asarray(a) for a in per_axis], indexing="ij")
    return [tuple(int(v) for v in pos) for pos in np.stack([g.reshape(-1) for g in grids], axis=1)]


def _minimal_size(geometry: Geometry) -> tuple[int, ...]:
    """The smallest extent per axis that holds one window inside the input (and that the padding mode allows)."""
    copies = geometry.padding_mode is not PaddingMode.ZEROS
    return tuple(
        max(-(-b // s) * s - b + (k - 1) * d + 1, max(b, a) + 1 if copies else 0)
        for k, s, d, (b, a) in zip(geometry.kernel, geometry.stride, geometry.dilation, geometry.padding)
    )


def _last_module(module: nn.Module) -> nn.Module:
    while isinstance(module, nn.Sequential) and len(module) > 0:
        module = module[-1]
    return module


def _frame_shape(layout: Layout, channels: int, size: tuple[int, ...]) -> tuple[int, ...]:
    return (*size, channels) if layout.channels_last else (channels, *size)


def plan(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    name: str | None = None,
) -> LayerPlan:
    """Resolve ``module``'s decomposition against its input; validate everything before any table work.

    Table sizes are checked before the module runs at all. Then one forward pass on a small frame finds
    the output channels.

    Args:
        module: a decorated module, a layer with a built-in rule, or a fused block.
        input_domain: the domain of every input element, or one domain per input channel.
        example_input: a batch (tensor or array) giving the input shape when the module cannot state it
            (custom modules); spatial modules then enumerate on frames of that spatial size.
        max_rows: the largest table allowed; a larger one raises :class:`TableTooLargeError`.
        name: the layer's name in messages (default: its class name).

    Example:
        >>> p = plan(torch.nn.Conv1d(3, 3, 3, groups=3), input_domain=Domain.uniform(2))
        >>> [(u.fan_in, u.rows) for u in p.units]
        [(3, 64), (3, 64), (3, 64)]
    """
    return _plan(module, input_domain=input_domain, example_input=example_input, max_rows=max_rows, name=name)


def _plan(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    name: str | None = None,
    frame_out: tuple[int, ...] | None = None,
) -> LayerPlan:
    """:func:`plan`; ``frame_out``: the module's output shape (per sample) for ``example_input``'s shape,
    when the caller has just run the module on an input of that shape (a traced model): the plan then runs
    no forward pass of its own."""
    name = name or type(module).__name__
    _check_arguments(module, input_domain, max_rows, name)
    spec = spec_of(module)
    example_shape = None if example_input is None else _per_sample_shape(example_input)
    layout = _layout(spec, example_shape, name)
    geometry = _checked_geometry(module, spec, layout, name)
    c_in = _input_channels(module, layout, example_shape, name)
    domains = _channel_domains(input_domain, c_in, name)
    in_groups = _input_groups(spec, c_in, name)
    rows_of = _rows(in_groups, domains, geometry, layout, max_rows, name)  # sizes, before any forward pass

    # The enumeration frame, and the output the module gives for it.
    size = _frame_size(geometry, layout, example_shape)
    slots = _slots(geometry, size, name) if geometry.rank else [()]
    try:
        geometry.sources(size)
    except SpecError as exc:
        msg = f"{name}: {exc} (input extent {size}, padding {geometry.padding})"
        raise SpecError(msg) from None
    frame_in = _frame_shape(layout, c_in, size)
    fill_codes = tuple(d.zero_code if d.zero_code is not None else 0 for d in domains)
    if frame_out is None or example_shape != tuple(frame_in):
        frame_out = _run_frame(module, layout, domains, fill_codes, frame_in, name)
    frame_out = tuple(frame_out)
    c_out = _check_output(frame_out, frame_in, geometry, layout, size, name)

    # Output channels and units.
    out_groups = _output_groups(spec, len(in_groups), c_out, name)
    if len(out_groups) != len(in_groups):
        msg = f"{name}: {len(in_groups)} input group(s) but {len(out_groups)} output group(s); expected one each"
        raise SpecError(msg)
    _check_coverage(out_groups, c_out, name)
    units: list[Unit] = []
    for channels, outputs in zip(in_groups, out_groups):
        fan_in = len(channels) * geometry.window
        split = [(o,) for o in outputs] if spec.per_output else [outputs]
        for out_channels in split:
            units.append(Unit(len(units), channels, out_channels, fan_in, rows_of[channels]))

    output_domain = spec.output_domain if spec.output_domain is not None else domain_of(_last_module(module))
    return LayerPlan(
        name=name,
        spec=spec,
        layout=layout,
        geometry=geometry,
        in_channels=c_in,
        out_channels=c_out,
        units=tuple(units),
        input_domains=domains,
        output_domain=output_domain,
        frame_in=frame_in,
        frame_out=frame_out,
        slots=tuple(slots),
        fill_codes=fill_codes,
        max_rows=max_rows,
    )


def _check_arguments(module: Any, input_domain: Any, max_rows: Any, name: str) -> None:
    """Refuse a module that is not one, an input domain that is not a Domain (or one per channel), and a
    ``max_rows`` that is not a positive integer."""
    if not isinstance(module, nn.Module):
        msg = f"{name}: expected a torch.nn.Module, received {type(module).__name__}"
        raise SpecError(msg)
    if not isinstance(input_domain, Domain) and not (
        isinstance(input_domain, Sequence) and input_domain and all(isinstance(d, Domain) for d in input_domain)
    ):
        msg = (
            f"{name}: input_domain must be an iotable.Domain or a sequence of them (one per input channel), "
            f"received {type(input_domain).__name__}"
        )
        raise SpecError(msg)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        msg = f"{name}: max_rows must be a positive integer, received {max_rows!r}"
        raise SpecError(msg)


def _layout(spec: Spec, example_shape: tuple[int, ...] | None, name: str) -> Layout:
    """The declared layout, else channels-first of the example's rank, else of the kernel's, else ``NC``;
    checked against the example's rank."""
    if spec.layout is not None:
        layout = spec.layout
    elif example_shape is not None:
        layout = Layout.channels_first(len(example_shape) + 1)
    elif spec.kernel_size is not None:
        layout = Layout.channels_first(len(spec.kernel_size) + 2)
    else:
        layout = Layout.NC
    if example_shape is not None and len(example_shape) != layout.spatial_rank + 1:
        msg = (
            f"{name}: layout {layout.value} expects inputs of rank {layout.spatial_rank + 2}, "
            f"but example_input has shape (N, {', '.join(map(str, example_shape))})"
        )
        raise SpecError(msg)
    return layout


def _checked_geometry(module: nn.Module, spec: Spec, layout: Layout, name: str) -> Geometry:
    """The declared window, refused where it differs from the layer's own convolution."""
    geometry = _geometry(spec, layout.spatial_rank, name)
    conv = own_window(module) if geometry.rank else None
    mismatch = window_mismatch(conv, layout, geometry) if conv is not None else None
    if mismatch is not None:
        msg = (
            f"{name}: the layer's window is its {type(conv).__name__}'s own, but the metadata ({spec.source}) declares "
            f"{mismatch}; drop the window fields from decompose() (the convolution states them) or make them match"
        )
        raise SpecError(msg)
    return geometry


def _input_channels(module: nn.Module, layout: Layout, example_shape: tuple[int, ...] | None, name: str) -> int:
    """The number of input channels: from the example input, else as the module states it."""
    if example_shape is not None:
        return example_shape[-1] if layout.channels_last else example_shape[0]
    c_in = _channel_counts(module)[0]
    if c_in is None and isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
        c_in = module.num_features
    if c_in is None:
        msg = f"{name}: cannot tell the input shape of {type(module).__name__}; pass example_input= (a batch)"
        raise SpecError(msg)
    return c_in


def _channel_domains(input_domain: Domain | Sequence[Domain], c_in: int, name: str) -> tuple[Domain, ...]:
    """One domain per input channel."""
    if isinstance(input_domain, Domain):
        return (input_domain,) * c_in
    if len(input_domain) != c_in:
        msg = f"{name}: {len(input_domain)} input domain(s) for {c_in} input channel(s); expected one per channel"
        raise SpecError(msg)
    return tuple(input_domain)


def _rows(
    in_groups: list[tuple[int, ...]],
    domains: tuple[Domain, ...],
    geometry: Geometry,
    layout: Layout,
    max_rows: int,
    name: str,
) -> dict[tuple[int, ...], int]:
    """The rows of the table of each distinct channel group; :class:`TableTooLargeError` above ``max_rows``."""
    shared = _shared(domains)
    rows_of: dict[tuple[int, ...], int] = {}
    for k, channels in enumerate(in_groups):
        if channels in rows_of:
            continue
        fan_in = len(channels) * geometry.window
        if shared is not None:
            rows = len(shared) ** fan_in
        else:
            rows = math.prod(len(d) for d in _unit_domains(domains, channels, geometry.window, layout))
        rows_of[channels] = rows
        if rows > max_rows:
            unit_domains = _unit_domains(domains, channels, geometry.window, layout)
            bits = sorted({d.bits for d in unit_domains})
            msg = (
                f"{name}: unit {k} reads {fan_in} inputs ({len(channels)} channel(s) x {geometry.window} kernel "
                f"position(s)) of {'/'.join(map(str, bits))} bit(s) = {sum(d.bits for d in unit_domains)} bits, "
                f"a table of {rows} rows; the limit is {max_rows} (max_rows=). Decompose finer: groups=, a sparse "
                "fan_in=, or fewer input bits"
            )
            raise TableTooLargeError(msg)
    return rows_of


def _frame_size(geometry: Geometry, layout: Layout, example_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The spatial size of the enumeration frame: the example's (the module may accept only that size; tiled
    slots keep it as cheap as a minimal frame), else the smallest that holds a window."""
    if geometry.rank == 0:
        return ()
    if example_shape is not None:
        return example_shape[:-1] if layout.channels_last else example_shape[1:]
    return _minimal_size(geometry)


def _run_frame(
    module: nn.Module,
    layout: Layout,
    domains: tuple[Domain, ...],
    fill_codes: tuple[int, ...],
    frame_in: tuple[int, ...],
    name: str,
) -> tuple[int, ...]:
    """The module's output shape (per sample) for one frame of every channel's fill value."""
    fill = np.asarray([d.values[c] for d, c in zip(domains, fill_codes)])
    spatial = len(frame_in) - 1
    fill_frame = np.broadcast_to(fill if layout.channels_last else fill.reshape(-1, *([1] * spatial)), frame_in)
    dtype, device = module_dtype(module)
    probe = torch.tensor(fill_frame[None], dtype=dtype, device=device)
    return tuple(int(s) for s in run_module(module, probe, name).shape[1:])


def _check_output(
    frame_out: tuple[int, ...],
    frame_in: tuple[int, ...],
    geometry: Geometry,
    layout: Layout,
    size: tuple[int, ...],
    name: str,
) -> int:
    """The number of output channels, once the output's rank and spatial size match the declared window."""
    if len(frame_out) != len(frame_in):
        msg = (
            f"{name}: expected an output of rank {len(frame_in) + 1} in layout {layout.value}, received shape "
            f"(N, {', '.join(map(str, frame_out))}) for an input of shape (N, {', '.join(map(str, frame_in))})"
        )
        raise SpecError(msg)
    c_out = frame_out[-1] if layout.channels_last else frame_out[0]
    out_size = frame_out[:-1] if layout.channels_last else frame_out[1:]
    expected_size = geometry.output_size(size)
    if tuple(out_size) != expected_size:
        g = geometry
        msg = (
            f"{name}: the declared window (kernel {g.kernel}, stride {g.stride}, dilation {g.dilation}, padding "
            f"{g.padding} as (before, after) per axis) gives outputs of spatial size {expected_size} for input size "
            f"{size}, but the module's output has spatial size {tuple(out_size)}; check the receptive field given "
            "to decompose()"
        )
        raise SpecError(msg)
    return c_out
