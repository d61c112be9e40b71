"""Decomposition metadata: how a module's function splits into independent smallest units.

:func:`decompose` attaches a frozen :class:`Spec` to a module instance or class under one dunder attribute;
:func:`spec_of` reads it back, falling back to built-in rules for common torch layers. A spec is declarative
("3 groups", "kernel 3, stride 2"); :mod:`iotable.plan` resolves it against a module and an input shape.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.nn.modules.conv import _ConvNd

from .._util.order import ElementOrder, element_order
from ..domain import Domain
from ..errors import NotDecomposedError, OptionError, SpecError
from ..nn import Quantize, domain_of
from .registry import Role, kind_of, role_of

__all__ = ["ELEMENTWISE", "Layout", "PaddingMode", "Spec", "decompose", "has_spec", "mask_fan_in", "spec_of"]

_ATTR = "__iotable_spec__"

M = TypeVar("M", bound=Any)


class Layout(enum.Enum):
    """Axis order of a layer's input and output tensors (batch first).

    Example:
        >>> Layout.parse("nhwc"), Layout.NHWC.spatial_rank, Layout.NHWC.channels_last
        (<Layout.NHWC: 'NHWC'>, 2, True)
    """

    NC = "NC"
    NCW = "NCW"
    NWC = "NWC"
    NCHW = "NCHW"
    NHWC = "NHWC"

    @classmethod
    def parse(cls, value: str | Layout, *, what: str = "layout") -> Layout:
        """Convert a string such as ``"NCHW"`` (any case) to a :class:`Layout`; anything else is an error."""
        if isinstance(value, Layout):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown layout {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    @classmethod
    def channels_first(cls, rank: int) -> Layout:
        """The channels-first layout of a ``rank``-dimensional tensor (batch included), as torch layers use."""
        by_rank = {2: cls.NC, 3: cls.NCW, 4: cls.NCHW}
        if rank not in by_rank:
            msg = f"layout: expected an input of rank 2, 3 or 4 (N, C, spatial...), received rank {rank}"
            raise SpecError(msg)
        return by_rank[rank]

    @property
    def spatial_rank(self) -> int:
        """Number of spatial axes: 0, 1 or 2."""
        return len(self.value) - 2

    @property
    def channels_last(self) -> bool:
        """Whether channels are the last axis (``NWC``, ``NHWC``)."""
        return self.spatial_rank > 0 and self.value.endswith("C")

    @property
    def element_order(self) -> ElementOrder:
        """The order of a unit's input elements in this layout: kernel-major for channels-last layouts,
        channel-major otherwise (see :mod:`iotable._util.order`)."""
        return element_order(channels_last=self.channels_last)


class PaddingMode(enum.Enum):
    """What a sliding window reads beyond the input's edges: torch's ``padding_mode`` values.

    ``zeros`` reads real 0 (each channel's code of 0); the other modes copy input elements: ``reflect``
    mirrors the input about its edge element (which is not repeated), ``replicate`` repeats the edge
    element, ``circular`` wraps around to the other end.

    Example:
        >>> PaddingMode.parse("reflect").sources(4, 2, 1).tolist()  # positions -2..4 of an input of 4
        [2, 1, 0, 1, 2, 3, 2]
        >>> PaddingMode.ZEROS.sources(4, 2, 1).tolist()
        [-1, -1, 0, 1, 2, 3, -1]
    """

    ZEROS = "zeros"
    REFLECT = "reflect"
    REPLICATE = "replicate"
    CIRCULAR = "circular"

    @classmethod
    def parse(cls, value: str | PaddingMode, *, what: str = "padding_mode") -> PaddingMode:
        """Convert a string such as ``"reflect"`` (any case) to a :class:`PaddingMode`; anything else is an error."""
        if isinstance(value, PaddingMode):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown padding mode {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    def sources(self, size: int, before: int, after: int) -> np.ndarray:
        """The input position each of the ``before + size + after`` padded positions reads; ``-1``: real 0.

        Raises:
            SpecError: the padding is wider than the mode allows for ``size`` (torch's own limits: reflect
                needs less than ``size`` on each side, circular at most ``size``).
        """
        limit = {PaddingMode.REFLECT: size - 1, PaddingMode.CIRCULAR: size}.get(self)
        if size < 1 or (limit is not None and max(before, after) > limit):
            bound = f"at most {limit}" if limit is not None else "any padding"
            msg = (
                f"{self.value} padding of {before} before and {after} after an extent of {size}: {self.value} "
                f"padding allows {bound} on each side; use a smaller padding or a larger input"
            )
            raise SpecError(msg)
        position = np.arange(-before, size + after, dtype=np.int64)
        if self is PaddingMode.ZEROS:
            return np.where((position >= 0) & (position < size), position, -1)
        if self is PaddingMode.REFLECT:
            position = np.abs(position)  # one reflection: the limit above keeps it inside
            return np.where(position >= size, 2 * (size - 1) - position, position)
        if self is PaddingMode.REPLICATE:
            return np.clip(position, 0, size - 1)
        return position % size


@dataclass(frozen=True)
class Spec:
    """Decomposition metadata of one module (immutable; see :func:`decompose` for the fields' meaning).

    ``padding`` holds one ``(before, after)`` pair per spatial axis (or one pair for every axis);
    ``padding_mode`` ``None`` means zeros. ``per_output`` splits every unit into one unit per output channel
    that reads the same inputs (the built-in rule for ``nn.Linear`` and convolutions); ``elementwise`` makes
    every channel its own unit of kernel 1 (the rule for activations, batch norm and quantizers); ``depthwise``
    makes every channel its own unit over the kernel window (the rule for average pooling). ``fan_in_from``
    names the module's tensor of shape ``(outputs, inputs, ...)`` whose non-zero entries are the fan-ins (a
    pruning mask); :func:`spec_of` resolves it into ``fan_in``; ``output_domain_from`` names the submodule (a
    quantizer) whose domain is the output domain, resolved into ``output_domain``. ``source`` says where the
    spec came from.
    """

    groups: int | None = None
    fan_in: tuple[tuple[int, ...], ...] | None = None
    fan_out: tuple[tuple[int, ...], ...] | None = None
    kernel_size: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    dilation: tuple[int, ...] | None = None
    padding: tuple[tuple[int, int], ...] | None = None
    padding_mode: PaddingMode | None = None
    layout: Layout | None = None
    output_domain: Domain | None = None
    per_output: bool = False
    elementwise: bool = False
    depthwise: bool = False
    fan_in_from: str | None = None
    output_domain_from: str | None = None
    source: str = "decompose()"

    @property
    def spatial(self) -> bool:
        """Whether the spec describes a sliding-window (convolution-like) layer."""
        return self.kernel_size is not None or (self.layout is not None and self.layout.spatial_rank > 0)


#: Elementwise modules: each output element depends only on the input element at the same index, so they
#: fuse into the preceding layer's table (or form one-input tables on their own).
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.Hardtanh,
    nn.Sigmoid,
    nn.Tanh,
    nn.Identity,
    nn.Dropout,
    Quantize,
)


def _int_tuple(value: Any, *, name: str, minimum: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, int) else value
    try:
        result = tuple(int(v) for v in items)
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in items) and len(result) in (1, 2)
    except (TypeError, ValueError):
        ok = False
    if not ok or min(result) < minimum:
        msg = f"decompose: {name} must be an integer >= {minimum} or a tuple of 1 or 2 of them, received {value!r}"
        raise SpecError(msg)
    return result


def _padding_pairs(
    value: Any, *, kernel: tuple[int, ...] | None, dilation: tuple[int, ...] | None, stride: tuple[int, ...] | None
) -> tuple[tuple[int, int], ...] | None:
    """``decompose``'s ``padding=`` as one ``(before, after)`` pair per axis (or one pair for every axis)."""
    if value is None:
        return None
    if isinstance(value, str) and value == "valid":
        return ((0, 0),)
    if isinstance(value, str) and value == "same":
        return _same_padding(kernel=kernel, dilation=dilation, stride=stride)
    entries = (value,) if isinstance(value, int) or not isinstance(value, Sequence) else value
    pairs = [_pair(entry) for entry in entries] if not isinstance(value, str) else []
    if not pairs or len(pairs) > 2 or any(pair is None for pair in pairs):
        msg = (
            "decompose: padding must be 'same', 'valid', an integer >= 0, or a tuple of 1 or 2 entries (one per "
            "spatial axis), each an integer >= 0 (both sides) or a (before, after) pair of them, e.g. "
            f"padding=((0, 1),); received {value!r}"
        )
        raise SpecError(msg)
    return tuple(pair for pair in pairs if pair is not None)


def _same_padding(
    *, kernel: tuple[int, ...] | None, dilation: tuple[int, ...] | None, stride: tuple[int, ...] | None
) -> tuple[tuple[int, int], ...] | None:
    """``padding="same"`` as torch resolves it: ``d (k - 1)`` in all per axis, half before and the rest after
    (an even kernel's extra element goes at the end); ``None`` until the kernel is known."""
    if kernel is None:
        return None  # reported with the other window fields: padding needs kernel_size=
    if stride is not None and max(stride) > 1:
        msg = (
            f"decompose: padding='same' needs stride 1 (as torch does), received stride={stride}; "
            "give the padding as (before, after) pairs instead"
        )
        raise SpecError(msg)
    dilation = dilation or (1,)
    rank = max(len(kernel), len(dilation))
    kernel_r = kernel * rank if len(kernel) == 1 else kernel
    dilation_r = dilation * rank if len(dilation) == 1 else dilation
    totals = [d * (k - 1) for k, d in zip(kernel_r, dilation_r)]
    return tuple((t // 2, t - t // 2) for t in totals)


def _pair(entry: Any) -> tuple[int, int] | None:
    """One axis of ``padding=``: an integer (both sides) or a ``(before, after)`` pair, else ``None``."""
    pair = (entry, entry) if isinstance(entry, int) else tuple(entry) if isinstance(entry, Sequence) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair):
        return None
    return (pair[0], pair[1])


def _index_lists(value: Any, *, name: str) -> tuple[tuple[int, ...], ...] | None:
    if value is None:
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    try:
        units = tuple(tuple(v.__index__() for v in unit) for unit in value)
    except (TypeError, AttributeError):
        msg = f"decompose: {name} must be a list of integer lists (one per unit), received {value!r}"
        raise SpecError(msg) from None
    if not units:
        msg = f"decompose: {name} must list at least one unit, received an empty list"
        raise SpecError(msg)
    for k, unit in enumerate(units):
        if not unit:
            msg = f"decompose: {name}[{k}] is empty; every unit reads and writes at least one element"
            raise SpecError(msg)
        if min(unit) < 0:
            msg = f"decompose: {name}[{k}] = {list(unit)} holds a negative index; expected indices >= 0"
            raise SpecError(msg)
        if len(set(unit)) != len(unit):
            msg = f"decompose: {name}[{k}] = {list(unit)} repeats an index; expected distinct indices"
            raise SpecError(msg)
    return units


def _make_spec(
    *,
    groups: int | None,
    fan_in: Any,
    fan_out: Any,
    kernel_size: Any,
    stride: Any,
    dilation: Any,
    padding: Any,
    padding_mode: str | PaddingMode | None,
    layout: str | Layout | None,
    output_domain: Domain | str | None,
) -> Spec:
    """Validate ``decompose``'s arguments and normalize them into a :class:`Spec`."""
    fan_in_t, fan_out_t, fan_in_from = _unit_fields(groups, fan_in, fan_out)
    layout_e = None if layout is None else Layout.parse(layout, what="decompose")
    geometry = _window_fields(kernel_size, stride, dilation, padding, padding_mode, layout_e)
    output_domain, output_domain_from = _output_domain_field(output_domain)
    return Spec(
        groups=groups,
        fan_in=fan_in_t,
        fan_out=fan_out_t,
        layout=layout_e,
        output_domain=output_domain,
        fan_in_from=fan_in_from,
        output_domain_from=output_domain_from,
        **geometry,
    )


def _attribute_path(value: str) -> bool:
    """Whether ``value`` is a dotted path of identifiers (``"mask"``, ``"fc.weight_mask"``)."""
    return bool(value) and all(part.isidentifier() for part in value.split("."))


def _unit_fields(
    groups: Any, fan_in: Any, fan_out: Any
) -> tuple[tuple[tuple[int, ...], ...] | None, tuple[tuple[int, ...], ...] | None, str | None]:
    """``groups=``, ``fan_in=`` and ``fan_out=`` checked together: the fan-in and fan-out index lists, and
    the attribute a mask ``fan_in=`` names."""
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 1):
        msg = f"decompose: groups must be a positive integer, received {groups!r}"
        raise SpecError(msg)
    if groups is not None and fan_in is not None:
        msg = "decompose: give groups= or fan_in=, not both (groups=g is fan_in over g contiguous channel groups)"
        raise SpecError(msg)
    fan_in_from = None
    if isinstance(fan_in, str):
        if not _attribute_path(fan_in):
            msg = (
                f"decompose: fan_in={fan_in!r} must name a tensor attribute of the module, such as 'mask' or "
                "'fc.weight_mask' (a dotted path of identifiers)"
            )
            raise SpecError(msg)
        fan_in_from, fan_in = fan_in, None
        if fan_out is not None:
            msg = "decompose: fan_out= needs fan_in= as index lists; a mask gives each output its own unit"
            raise SpecError(msg)
    fan_in_t = _index_lists(fan_in, name="fan_in")
    fan_out_t = _index_lists(fan_out, name="fan_out")
    if fan_out_t is not None and fan_in_t is None:
        msg = "decompose: fan_out= needs fan_in= (it says which outputs each fan_in unit writes)"
        raise SpecError(msg)
    if fan_out_t is not None and fan_in_t is not None and len(fan_out_t) != len(fan_in_t):
        msg = f"decompose: fan_in lists {len(fan_in_t)} units but fan_out lists {len(fan_out_t)}; expected one each"
        raise SpecError(msg)
    return fan_in_t, fan_out_t, fan_in_from


def _window_fields(
    kernel_size: Any,
    stride: Any,
    dilation: Any,
    padding: Any,
    padding_mode: str | PaddingMode | None,
    layout: Layout | None,
) -> dict[str, Any]:
    """The receptive field (``kernel_size``, ``stride``, ``dilation``, ``padding``, ``padding_mode``),
    normalized; refused on a layout without spatial axes, and without ``kernel_size=``."""
    geometry: dict[str, Any] = {
        "kernel_size": _int_tuple(kernel_size, name="kernel_size", minimum=1),
        "stride": _int_tuple(stride, name="stride", minimum=1),
        "dilation": _int_tuple(dilation, name="dilation", minimum=1),
    }
    geometry["padding"] = _padding_pairs(
        padding, kernel=geometry["kernel_size"], dilation=geometry["dilation"], stride=geometry["stride"]
    )
    geometry["padding_mode"] = None if padding_mode is None else PaddingMode.parse(padding_mode, what="decompose")
    # padding="same" without kernel_size= resolves to nothing yet, but it was stated all the same.
    stated = [key for key, given in geometry.items() if given is not None or (key == "padding" and padding)]
    if layout is not None and layout.spatial_rank == 0 and stated:
        msg = (
            f"decompose: layout {layout.value!r} has no spatial axis, "
            "so kernel_size/stride/dilation/padding/padding_mode don't apply"
        )
        raise SpecError(msg)
    if geometry["kernel_size"] is None and stated:
        msg = "decompose: stride/dilation/padding describe a sliding window (padding_mode too); give kernel_size= too"
        raise SpecError(msg)
    return geometry


def _output_domain_field(output_domain: Any) -> tuple[Domain | None, str | None]:
    """``output_domain=``: a Domain, or the name of the module's output quantizer (read when planned)."""
    if isinstance(output_domain, str):
        if not _attribute_path(output_domain):
            msg = (
                f"decompose: output_domain={output_domain!r} must be an iotable.Domain or name the module's output "
                "quantizer, such as 'output_quant' (a dotted path of identifiers)"
            )
            raise SpecError(msg)
        return None, output_domain
    if output_domain is not None and not isinstance(output_domain, Domain):
        msg = (
            "decompose: output_domain must be an iotable.Domain or the name of the module's output quantizer, "
            f"received {type(output_domain).__name__}"
        )
        raise SpecError(msg)
    return output_domain, None


def _channel_counts(module: nn.Module) -> tuple[int | None, int | None]:
    """Input and output channel counts a module states through common attributes, if any."""
    first = _first_layer(module)
    for a_in, a_out in (("in_channels", "out_channels"), ("in_features", "out_features")):
        if hasattr(first, a_in) and hasattr(first, a_out):
            return int(getattr(first, a_in)), _output_channels(module, int(getattr(first, a_out)))
    return None, None


def _output_channels(module: nn.Module, first_out: int) -> int | None:
    if isinstance(module, nn.Sequential):
        return first_out if all(role_of(m) is Role.ELEMENTWISE for m in list(module)[1:]) else None
    return first_out


def _first_layer(module: nn.Module) -> nn.Module:
    while isinstance(module, nn.Sequential) and len(module) > 0:
        module = module[0]
    return module


def _check_against_module(spec: Spec, module: nn.Module) -> None:
    """Checks that need only the module's stated channel counts, run when the spec is attached."""
    c_in, c_out = _channel_counts(module)
    name = type(module).__name__
    spec = _resolve(spec, module)
    if spec.groups is not None:
        for what, count in (("input", c_in), ("output", c_out)):
            if count is not None and count % spec.groups:
                msg = (
                    f"decompose({name}): groups={spec.groups} does not divide the {count} {what} channels; "
                    f"expected a divisor of {count}"
                )
                raise SpecError(msg)
    for what, lists, count in (("fan_in", spec.fan_in, c_in), ("fan_out", spec.fan_out, c_out)):
        if lists is not None and count is not None:
            for k, unit in enumerate(lists):
                if max(unit) >= count:
                    msg = (
                        f"decompose({name}): {what}[{k}] = {list(unit)} indexes element {max(unit)}, "
                        f"but the module has {count}; expected indices 0..{count - 1}"
                    )
                    raise SpecError(msg)


def decompose(
    target: M | None = None,
    /,
    *,
    groups: int | None = None,
    fan_in: Sequence[Sequence[int]] | str | None = None,
    fan_out: Sequence[Sequence[int]] | None = None,
    kernel_size: int | Sequence[int] | None = None,
    stride: int | Sequence[int] | None = None,
    dilation: int | Sequence[int] | None = None,
    padding: int | str | Sequence[int | Sequence[int]] | None = None,
    padding_mode: str | PaddingMode | None = None,
    layout: str | Layout | None = None,
    output_domain: Domain | str | None = None,
) -> Any:
    """Attach decomposition metadata to a module instance (returned as is) or class (as a decorator).

    Works as ``decompose(module, ...)``, ``@decompose`` and ``@decompose(...)``. Without arguments the
    whole module is one unit (or, for a block whose first layer has a built-in rule, that rule).

    Units follow the metadata as given: ``groups=g`` makes ``g`` units, each writing all of its group's
    output channels, while the built-in rule of ``nn.Conv1d``/``nn.Conv2d`` makes one unit per output
    channel (same inputs, one output each). Both tabulate the same function.

    Args:
        target: an ``nn.Module`` instance or subclass; omit it to get a decorator.
        groups: ``g`` contiguous, equal groups along the channel axis; unit ``k`` reads the ``k``-th group
            of input channels and writes the ``k``-th group of output channels.
        fan_in: explicit input indices per unit (features for ``"NC"``, channels for spatial layouts), or the
            name of the module's mask tensor of shape ``(outputs, inputs, ...)`` (a dotted attribute path such
            as ``"mask"`` or ``"fc.mask.mask"``): unit ``k`` reads the inputs where row ``k`` is non-zero and
            writes output ``k``. The mask is read again whenever the module is planned.
        fan_out: output indices per unit; by default unit ``k`` writes output ``k``.
        kernel_size, stride, dilation: the receptive field of a sliding-window layer, so one table per
            unit serves every position.
        padding: what the window reads beyond the input's edges, per spatial axis: an integer (both sides),
            a ``(before, after)`` pair such as ``((0, 1),)`` (torch's ``padding="same"`` with an even
            kernel pads the extra element after), one entry per axis, or ``"same"`` / ``"valid"`` as torch
            resolves them.
        padding_mode: ``"zeros"`` (the default: real 0), ``"reflect"``, ``"replicate"`` or ``"circular"``,
            as torch's convolutions name them.
        layout: ``"NC"``, ``"NCW"``, ``"NWC"``, ``"NCHW"`` or ``"NHWC"``; by default channels-first
            from the input's rank.
        output_domain: the domain of the module's outputs when it quantizes them inside its forward (as
            LogicNets, PolyLUT and NeuraLUT neurons do), or the name of the submodule that does (a dotted path
            such as ``"output_quant"``, read whenever the module is planned). It closes the module's table
            layer in a whole model exactly as a quantizer does.

    Returns:
        ``target`` itself with metadata attached, or a decorator when ``target`` is omitted.

    Raises:
        SpecError: malformed metadata, or metadata that contradicts the module's channel counts.
        OptionError: an unknown layout string.

    Example:
        >>> conv = decompose(torch.nn.Conv1d(3, 3, kernel_size=3, groups=3), groups=3)
        >>> spec_of(conv).groups
        3
        >>> @decompose(fan_in=[[0, 1], [2, 3]])
        ... class Pairs(torch.nn.Module):
        ...     def forward(self, x):
        ...         return torch.stack([x[:, 0] * x[:, 1], x[:, 2] - x[:, 3]], dim=1)
        >>> spec_of(Pairs()).fan_in
        ((0, 1), (2, 3))
        >>> window = decompose(torch.nn.Identity(), kernel_size=2, padding="same", padding_mode="reflect")
        >>> spec_of(window).padding, spec_of(window).padding_mode
        (((0, 1),), <PaddingMode.REFLECT: 'reflect'>)
    """
    spec = _make_spec(
        groups=groups,
        fan_in=fan_in,
        fan_out=fan_out,
        kernel_size=kernel_size,
        stride=stride,
        dilation=dilation,
        padding=padding,
        padding_mode=padding_mode,
        layout=layout,
        output_domain=output_domain,
    )

    def attach(obj: M) -> M:
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            setattr(obj, _ATTR, spec)
            return obj
        if isinstance(obj, nn.Module):
            _check_against_module(spec, obj)
            obj.__dict__[_ATTR] = spec
            return obj
        msg = f"decompose: expected a torch.nn.Module instance or subclass, received {type(obj).__name__}"
        raise SpecError(msg)

    return attach if target is None else attach(target)


def _normalize_padding(conv: _ConvNd) -> tuple[tuple[int, int], ...]:
    """A convolution's padding as one ``(before, after)`` pair per spatial axis."""
    padding = conv.padding
    if padding == "valid":
        return ((0, 0),) * len(conv.kernel_size)
    if padding == "same":
        # torch pads (total // 2) before and the rest after: an even kernel's extra element goes at the end.
        totals = [d * (k - 1) for d, k in zip(conv.dilation, conv.kernel_size)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((int(p), int(p)) for p in padding)


def _attribute(module: nn.Module, path: str, what: str, expected: str) -> Any:
    """The object at a dotted attribute ``path`` of ``module``, or a :class:`SpecError` naming ``what``."""
    target: Any = module
    for part in path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            msg = (
                f"{type(module).__name__}: {what}={path!r} names no attribute ({type(target).__name__} has no "
                f"{part!r}); expected the path of {expected}"
            )
            raise SpecError(msg) from None
    return target


def _resolve(spec: Spec, module: nn.Module) -> Spec:
    """``spec`` with the fan-ins and output domain it names by path read from ``module`` as it is now (and the
    paths replaced by what they name, so the result describes the module on its own)."""
    updates: dict[str, Any] = {}
    read = []
    if spec.fan_in_from is not None:  # a mask: read it at every plan, it may change after decoration
        updates.update(fan_in=mask_fan_in(module, spec.fan_in_from), fan_in_from=None)
        read.append(f"fan-ins from {spec.fan_in_from!r}")
    if spec.output_domain_from is not None:
        quantizer = _attribute(module, spec.output_domain_from, "output_domain", "the module's output quantizer")
        domain = domain_of(quantizer) if isinstance(quantizer, nn.Module) else None
        if domain is None:
            msg = (
                f"{type(module).__name__}: output_domain={spec.output_domain_from!r} names a "
                f"{type(quantizer).__name__}, which is not a quantizer iotable reads (iotable.nn.Quantize, a torch.ao "
                "fake quantizer, a brevitas quantizer); name the module that quantizes the outputs, or pass its "
                "iotable.Domain"
            )
            raise SpecError(msg)
        updates.update(output_domain=domain, output_domain_from=None)
        read.append(f"output domain from {spec.output_domain_from!r}")
    if not updates:
        return spec
    return replace(spec, **updates, source=f"{spec.source}, {' and '.join(read)} of {type(module).__name__}")


def mask_fan_in(module: nn.Module, path: str, *, groups: int = 1) -> tuple[tuple[int, ...], ...]:
    """The fan-in of each output from a mask tensor ``(outputs, inputs per group, ...)``: its non-zero entries.

    ``path`` is a dotted attribute path from ``module`` to the tensor (``"weight_mask"``, ``"fc.mask.mask"``).
    Trailing axes (a convolution's kernel positions) count a channel in when any of its entries is non-zero;
    with ``groups``, output ``k`` of group ``g`` reads channels ``g * inputs per group + j``. An output whose
    row is all zero reads its group's first channel, on which its (constant) table then depends trivially.

    Example:
        >>> m = torch.nn.Module()
        >>> m.register_buffer("mask", torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
        >>> mask_fan_in(m, "mask")
        ((0, 2), (1,))
    """
    name = type(module).__name__
    target = _attribute(module, path, "fan_in", "a mask tensor of shape (outputs, inputs)")
    if not isinstance(target, torch.Tensor) or target.dim() < 2:
        got = f"shape {tuple(target.shape)}" if isinstance(target, torch.Tensor) else type(target).__name__
        msg = f"{name}: fan_in={path!r} must be a tensor of shape (outputs, inputs, ...), received {got}"
        raise SpecError(msg)
    mask = target.detach().cpu().reshape(target.shape[0], target.shape[1], -1).ne(0).any(dim=2).numpy()
    outputs, per_group = mask.shape
    if outputs % groups:
        msg = f"{name}: {outputs} mask rows (outputs) do not split into {groups} groups"
        raise SpecError(msg)
    first = (np.arange(outputs) // (outputs // groups)) * per_group  # first input channel of each output's group
    rows = [np.flatnonzero(row) for row in mask]
    return tuple(tuple(int(f + j) for j in (row if len(row) else [0])) for f, row in zip(first, rows))


def _pool_geometry(module: nn.Module, rank: int) -> tuple[tuple[int, ...], ...]:
    """Kernel, stride and padding of a torch pooling module, one entry per axis."""

    def per_axis(value: Any) -> tuple[int, ...]:
        return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),) * rank

    kernel = per_axis(module.kernel_size)
    stride = per_axis(module.stride) if module.stride is not None else kernel
    return kernel, stride, per_axis(module.padding)


def _builtin(module: nn.Module) -> Spec | None:
    """The built-in decomposition of an undecorated module: its kind's rule (:mod:`iotable.kinds`), the
    elementwise rule for other quantizers (brevitas, torch.ao), else ``None``."""
    kind = kind_of(module)
    if kind is not None and kind.rule is not None:
        spec: Spec = kind.rule(module)
        return spec
    if domain_of(module) is not None:  # quantizers of other libraries (brevitas, torch.ao)
        return Spec(elementwise=True, source=f"built-in elementwise rule for {type(module).__name__}")
    return None


def _declared(module: nn.Module) -> Spec | None:
    spec = module.__dict__.get(_ATTR)
    if spec is None:
        spec = getattr(type(module), _ATTR, None)
    return spec


def _inherit(spec: Spec, module: nn.Module) -> Spec:
    """Fill what a decorated layer or block leaves unsaid from the built-in rule of its first layer.

    The receptive field and layout come from that layer unless the spec gives ``kernel_size=`` or
    ``layout=``; the unit split too unless it gives ``groups=`` or ``fan_in=``. The probe checks the result.
    """
    base = _builtin(_first_layer(module))
    if base is None or base.elementwise:
        return spec
    updates: dict[str, Any] = {}
    if spec.kernel_size is None and spec.layout is None:
        updates.update(
            kernel_size=base.kernel_size,
            stride=base.stride,
            dilation=base.dilation,
            padding=base.padding,
            padding_mode=base.padding_mode,
            layout=base.layout,
        )
    if spec.groups is None and spec.fan_in is None and spec.fan_in_from is None:
        updates.update(groups=base.groups, fan_in=base.fan_in, per_output=base.per_output, depthwise=base.depthwise)
    if not updates:
        return spec
    return replace(spec, **updates, source=f"{spec.source} completed by the {base.source}")


def spec_of(module: nn.Module) -> Spec:
    """The decomposition metadata of ``module``: attached to it, to its class, or a built-in rule.

    Built-in rules cover ``nn.Linear`` (one unit per output, full fan-in), ``nn.Conv1d``/``nn.Conv2d``
    (one unit per output channel reading its group's channels over the kernel window), elementwise modules
    (:data:`ELEMENTWISE`) and an ``nn.Sequential`` of one such layer followed by elementwise modules
    (fused into one table per unit).

    Raises:
        NotDecomposedError: no metadata and no built-in rule.

    Example:
        >>> spec_of(torch.nn.Linear(4, 2)).per_output
        True
    """
    if not isinstance(module, nn.Module):
        msg = f"spec_of: expected a torch.nn.Module, received {type(module).__name__}"
        raise SpecError(msg)
    declared = _declared(module)
    if declared is not None:
        return _inherit(_resolve(declared, module), module)
    if isinstance(module, nn.Sequential) and len(module) > 0:
        head, tail = module[0], list(module)[1:]
        base = _builtin(head) if not isinstance(head, nn.Sequential) else None
        if base is not None and all(role_of(m) is Role.ELEMENTWISE for m in tail):
            return replace(base, source=f"{base.source}, fused with {len(tail)} elementwise module(s)")
        msg = (
            f"nn.Sequential({', '.join(type(m).__name__ for m in module)}) is not one table layer: expected one "
            "layer followed only by elementwise modules; decorate it with iotable.decompose(...) to make it one "
            "black box"
        )
        raise NotDecomposedError(msg)
    spec = _builtin(module)
    if spec is None:
        msg = (
            f"{type(module).__name__} has no decomposition metadata and no built-in rule; "
            "decorate it with iotable.decompose(...) (e.g. groups= or fan_in=)"
        )
        raise NotDecomposedError(msg)
    return spec


def has_spec(module: nn.Module) -> bool:
    """Whether :func:`spec_of` finds metadata (declared or built-in) for ``module``."""
    try:
        spec_of(module)
    except NotDecomposedError:
        return False
    return True
