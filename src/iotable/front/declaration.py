"""The :func:`decompose` decorator: its arguments validated and normalized into a :class:`Spec
<iotable.front.metadata.Spec>`, checked against the module's stated channel counts, and attached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from ..domain import Domain
from ..errors import SpecError, SpecOptionError
from .layout import Layout, PaddingMode
from .metadata import SPEC_ATTRIBUTE, Spec, _resolve, channel_counts, fan_in_of_tensor

__all__ = ["AUTO", "decompose"]

#: ``decompose(fan_in=AUTO)``: the units inferred from the module's structure (:mod:`iotable.front.infer`).
AUTO = "auto"

M = TypeVar("M", bound=Any)


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
        raise SpecOptionError(msg)
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
    """Index lists (one per unit) from lists of lists, an integer index tensor or a boolean mask.

    A ``fan_in`` unit may list an input twice (its table is built over its distinct inputs); a ``fan_out``
    unit may not, since each output is written once."""
    if value is None:
        return None
    if isinstance(value, (torch.Tensor, np.ndarray)):
        units = fan_in_of_tensor(value, what=f"decompose: {name}")
    else:
        try:
            units = tuple(tuple(v.__index__() for v in unit) for unit in value)
        except (TypeError, AttributeError):
            msg = (
                f"decompose: {name} must be a list of integer lists (one per unit), an integer index tensor "
                f"(units, k), a boolean mask (units, inputs) or the name of a tensor attribute holding one; "
                f"received {value!r}"
            )
            raise SpecOptionError(msg) from None
    if not units:
        msg = f"decompose: {name} must list at least one unit, received an empty list"
        raise SpecOptionError(msg)
    for k, unit in enumerate(units):
        if not unit:
            msg = f"decompose: {name}[{k}] is empty; every unit reads and writes at least one element"
            raise SpecOptionError(msg)
        if min(unit) < 0:
            msg = f"decompose: {name}[{k}] = {list(unit)} holds a negative index; expected indices >= 0"
            raise SpecOptionError(msg)
        if name == "fan_out" and len(set(unit)) != len(unit):
            msg = f"decompose: {name}[{k}] = {list(unit)} repeats an output; expected distinct indices"
            raise SpecOptionError(msg)
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
    infer = fan_in_from == AUTO
    if infer and any(v is not None for v in geometry.values()):
        msg = (
            "decompose: fan_in='auto' infers the units of a flat layer; a window (kernel_size=, ...) needs fan_in lists"
        )
        raise SpecOptionError(msg)
    return Spec(
        groups=groups,
        fan_in=fan_in_t,
        fan_out=fan_out_t,
        layout=layout_e,
        output_domain=output_domain,
        fan_in_from=None if infer else fan_in_from,
        output_domain_from=output_domain_from,
        infer=infer,
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
        raise SpecOptionError(msg)
    if groups is not None and fan_in is not None:
        msg = "decompose: give groups= or fan_in=, not both (groups=g is fan_in over g contiguous channel groups)"
        raise SpecOptionError(msg)
    fan_in_from = None
    if isinstance(fan_in, str) and fan_in == AUTO:
        if fan_out is not None:
            msg = "decompose: fan_out= needs fan_in= as index lists; fan_in='auto' gives each output its own unit"
            raise SpecOptionError(msg)
        return None, None, AUTO
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
            raise SpecOptionError(msg)
    fan_in_t = _index_lists(fan_in, name="fan_in")
    fan_out_t = _index_lists(fan_out, name="fan_out")
    if fan_out_t is not None and fan_in_t is None:
        msg = "decompose: fan_out= needs fan_in= (it says which outputs each fan_in unit writes)"
        raise SpecOptionError(msg)
    if fan_out_t is not None and fan_in_t is not None and len(fan_out_t) != len(fan_in_t):
        msg = f"decompose: fan_in lists {len(fan_in_t)} units but fan_out lists {len(fan_out_t)}; expected one each"
        raise SpecOptionError(msg)
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
        raise SpecOptionError(msg)
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


def _check_against_module(spec: Spec, module: nn.Module) -> None:
    """Checks that need only the module's stated channel counts, run when the spec is attached."""
    c_in, c_out = channel_counts(module)
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
    fan_in: Sequence[Sequence[int]] | torch.Tensor | np.ndarray | str | None = None,
    fan_out: Sequence[Sequence[int]] | None = None,
    kernel_size: int | Sequence[int] | None = None,
    stride: int | Sequence[int] | None = None,
    dilation: int | Sequence[int] | None = None,
    padding: int | str | Sequence[int | Sequence[int]] | None = None,
    padding_mode: str | PaddingMode | None = None,
    layout: str | Layout | None = None,
    output_domain: Domain | str | None = None,
    all_instances: bool = False,
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
        fan_in: which inputs each unit reads (features for ``"NC"``, channels for spatial layouts), unit ``k``
            writing output ``k`` unless ``fan_out=`` says otherwise: index lists (one per unit); an integer
            index tensor ``(units, k)`` or a boolean mask ``(units, inputs)`` (torch or numpy); or the name of
            the module's tensor holding one (a buffer or parameter, by a dotted attribute path such as
            ``"mask"`` or ``"fc.mask.mask"``): an integer tensor is an index tensor, a boolean or floating one a
            mask of shape ``(outputs, inputs, ...)`` whose non-zero entries are the fan-ins. A named tensor is
            read again whenever the module is planned, so a mapping changed by training is never stale. A unit
            may read an input twice: its table is built over its distinct inputs. ``"auto"``: one unit per
            output, reading the inputs the module's structure shows it may depend on (what a flat module of
            your own gets with no decoration at all; use it to declare only ``output_domain=``).
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
        all_instances: required to decorate a class of torch, torchvision, torchao or brevitas (such as
            ``nn.Linear``): the metadata then applies to every instance of it in the process.

    Returns:
        ``target`` itself with metadata attached, or a decorator when ``target`` is omitted.

    Raises:
        SpecError: malformed metadata, or metadata that contradicts the module's channel counts.
        OptionError: an unknown layout string; a library class decorated without ``all_instances=True``.

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

    mask_width = fan_in.shape[1] if isinstance(fan_in, (torch.Tensor, np.ndarray)) and fan_in.dtype in _BOOL else None

    def attach(obj: M) -> M:
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            _check_class(obj, all_instances=all_instances)
            setattr(obj, SPEC_ATTRIBUTE, spec)
            return obj
        if isinstance(obj, nn.Module):
            _check_mask_width(mask_width, obj)
            _check_against_module(spec, obj)
            obj.__dict__[SPEC_ATTRIBUTE] = spec
            return obj
        msg = f"decompose: expected a torch.nn.Module instance or subclass, received {type(obj).__name__}"
        raise SpecOptionError(msg)

    return attach if target is None else attach(target)


_BOOL = (torch.bool, np.dtype(bool))


def _check_mask_width(width: int | None, module: nn.Module) -> None:
    """Refuse a boolean ``fan_in=`` mask whose width is not the module's stated input count."""
    inputs = channel_counts(module)[0]
    if width is not None and inputs is not None and width != inputs:
        msg = (
            f"decompose({type(module).__name__}): fan_in= is a boolean mask of {width} columns, but the module has "
            f"{inputs} inputs; expected {inputs} columns (one per input)"
        )
        raise SpecError(msg)


#: Top-level packages whose classes every model in the process shares: decorating one of them changes all
#: their instances, so it takes ``all_instances=True``.
_SHARED_PACKAGES = frozenset({"torch", "torchvision", "torchao", "brevitas"})


def _check_class(cls: type, *, all_instances: bool) -> None:
    """Refuse to decorate a library's class (``nn.Linear``) without ``all_instances=True``: the metadata would
    apply to every instance in the process, in every model, including those of its subclasses."""
    package = cls.__module__.partition(".")[0]
    if all_instances or package not in _SHARED_PACKAGES:
        return
    msg = (
        f"decompose({cls.__module__}.{cls.__qualname__}, ...) would attach the metadata to the class itself, so "
        f"every {cls.__qualname__} (and subclass) instance in this process, in every model, would be planned with "
        "it; decorate the instance instead (decompose(model.layer, ...)), or pass all_instances=True if every "
        "instance is meant"
    )
    raise SpecOptionError(msg)
