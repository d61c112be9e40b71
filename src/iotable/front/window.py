"""The sliding window of a plan: the declared receptive field as a :class:`Geometry`, checked against the
layer's own convolution, and the enumeration frame's size, slots and output."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn
from torch.nn.modules.conv import _ConvNd

from ..errors import SpecError
from ..nn import domain_of
from .layerplan import Geometry
from .layout import Layout, PaddingMode
from .metadata import Spec, normalize_padding
from .registry import Role, role_of

__all__ = ["own_window", "window_mismatch"]


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
        "padding": normalize_padding(conv),
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


def _frame_size(geometry: Geometry, layout: Layout, example_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The spatial size of the enumeration frame: the example's (the module may accept only that size; tiled
    slots keep it as cheap as a minimal frame), else the smallest that holds a window."""
    if geometry.rank == 0:
        return ()
    if example_shape is not None:
        return example_shape[:-1] if layout.channels_last else example_shape[1:]
    return _minimal_size(geometry)


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
