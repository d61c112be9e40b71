"""The :class:`Spec` record and how a module's metadata is read: attached by :func:`decompose
<iotable.front.declaration.decompose>` under one dunder attribute, resolved against the module as it is now
(masks, output quantizers), completed from the built-in rules of :mod:`iotable.kinds`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.conv import _ConvNd

from ..errors import NotDecomposedError, SpecError
from ..nn import Quantize, domain_of
from ..units import Spec
from .registry import Role, kind_of, role_of

__all__ = [
    "ELEMENTWISE",
    "SPEC_ATTRIBUTE",
    "Spec",
    "channel_counts",
    "declared_spec",
    "fan_in_of_tensor",
    "has_spec",
    "mask_fan_in",
    "normalize_padding",
    "pool_geometry",
    "spec_of",
]

#: The attribute of a module instance (in its ``__dict__``) or class holding its declared :class:`Spec`.
SPEC_ATTRIBUTE = "__iotable_spec__"


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


def channel_counts(module: nn.Module) -> tuple[int | None, int | None]:
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


def normalize_padding(conv: _ConvNd) -> tuple[tuple[int, int], ...]:
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
    if spec.fan_in_from is not None:  # read at every plan: training may change a mask or mapping after decoration
        updates.update(fan_in=_named_fan_in(module, spec.fan_in_from), fan_in_from=None)
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


def fan_in_of_tensor(value: Any, *, what: str, inputs: int | None = None) -> tuple[tuple[int, ...], ...]:
    """The fan-in of each unit from an integer index tensor ``(units, k)`` or a boolean mask ``(units, inputs)``.

    ``value`` is a torch tensor or numpy array. Row ``k`` of an index tensor lists the inputs unit ``k`` reads
    (an input may appear twice: the unit's table is built over its distinct inputs); row ``k`` of a mask marks
    them, and a row of no ``True`` reads input 0, on which its (constant) table then depends trivially.
    ``what`` names the argument in messages; ``inputs``, when known, bounds the indices and is a mask's width.

    Raises:
        SpecError: any other dtype or rank, no unit, a negative index or one past ``inputs``, a mask whose
            width is not ``inputs``.

    Example:
        >>> fan_in_of_tensor(torch.tensor([[0, 2, 0], [1, 1, 3]]), what="fan_in")
        ((0, 2, 0), (1, 1, 3))
        >>> fan_in_of_tensor(np.array([[True, False, True], [False, False, False]]), what="fan_in")
        ((0, 2), (0,))
    """
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biu" or array.ndim != 2 or not array.size:
        got = f"a {array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray) else type(value).__name__
        msg = (
            f"{what} must be an integer index tensor of shape (units, inputs per unit) or a boolean mask of shape "
            f"(units, inputs), with at least one unit; received {got} (a 0/1 mask of another dtype: pass "
            "mask.bool())"
        )
        raise SpecError(msg)
    if array.dtype.kind == "b":
        if inputs is not None and array.shape[1] != inputs:
            msg = (
                f"{what}: a boolean mask of shape {array.shape} has {array.shape[1]} columns; expected {inputs} "
                "(one per input)"
            )
            raise SpecError(msg)
        return tuple(tuple(int(j) for j in (np.flatnonzero(row) if row.any() else [0])) for row in array)
    low, high = int(array.min()), int(array.max())
    if low < 0 or (inputs is not None and high >= inputs):
        k = int(np.argwhere((array < 0) | (array >= (inputs if inputs is not None else high + 1)))[0][0])
        expected = f"0..{inputs - 1}" if inputs is not None else "indices >= 0"
        msg = f"{what}: row {k} of the index tensor is {array[k].tolist()}; expected {expected}"
        raise SpecError(msg)
    return tuple(tuple(int(v) for v in row) for row in array)


def _named_fan_in(module: nn.Module, path: str) -> tuple[tuple[int, ...], ...]:
    """The fan-ins held by the tensor at ``path`` of ``module``: an integer tensor is an index tensor, a boolean
    or floating one a mask (floating: its non-zero entries, over trailing kernel axes too; see
    :func:`mask_fan_in`)."""
    name = type(module).__name__
    target = _attribute(module, path, "fan_in", "a mask tensor (outputs, inputs) or an index tensor (units, k)")
    if not isinstance(target, torch.Tensor):
        msg = (
            f"{name}: fan_in={path!r} must be a tensor of shape (units, k) (integer indices) or (outputs, inputs, "
            f"...) (a mask), received {type(target).__name__}"
        )
        raise SpecError(msg)
    if target.is_floating_point() or (target.dtype == torch.bool and target.dim() > 2):
        return mask_fan_in(module, path)
    return fan_in_of_tensor(target, what=f"{name}: fan_in={path!r}", inputs=channel_counts(module)[0])


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


def pool_geometry(module: nn.Module, rank: int) -> tuple[tuple[int, ...], ...]:
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


def declared_spec(module: nn.Module) -> Spec | None:
    """The spec attached to ``module`` or to its class (:data:`SPEC_ATTRIBUTE`), as declared; ``None`` if none."""
    spec = module.__dict__.get(SPEC_ATTRIBUTE)
    if spec is None:
        spec = getattr(type(module), SPEC_ATTRIBUTE, None)
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
    declared = declared_spec(module)
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
