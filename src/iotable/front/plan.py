"""Planning: a module's decomposition resolved against its input shape and domain into a
:class:`~iotable.front.layerplan.LayerPlan`, validated before any work.

Table sizes are checked before the module runs at all; then one forward pass on a small frame finds the
output channels (see :mod:`iotable.front.window` for the window and the frame).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.modules import eval_mode, module_dtype, run_module
from .._util.text import count_text
from ..domain import Domain
from ..errors import EnumerationError, NotDecomposedError, SpecError, SpecOptionError, TableTooLargeError
from ..layerplan import LayerPlan, common_domain, unit_input_domains
from ..layout import Layout
from ..nn import domain_of
from ..units import DEFAULT_MAX_ROWS, Geometry, Unit
from .infer import inferable, inferred_spec
from .metadata import Spec, channel_counts, declared_spec, spec_of
from .window import _check_output, _checked_geometry, _frame_shape, _frame_size, _slots

__all__ = [
    "DEFAULT_MAX_ROWS",
    "Geometry",
    "LayerPlan",
    "Unit",
    "check_batch",
    "eval_mode",
    "infer_spec",
    "plan",
    "plan_layer",
]


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
    return plan_layer(module, input_domain=input_domain, example_input=example_input, max_rows=max_rows, name=name)


def plan_layer(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    name: str | None = None,
    frame_out: tuple[int, ...] | None = None,
) -> LayerPlan:
    """:func:`plan`, for a caller that knows the module's output: ``frame_out`` is its shape (per sample) for
    ``example_input``'s shape, when the caller has just run the module on an input of that shape (a traced
    model); the plan then runs no forward pass of its own."""
    name = name or type(module).__name__
    _check_arguments(module, input_domain, max_rows, name)
    example_shape = None if example_input is None else _per_sample_shape(example_input)
    spec = _spec(module, name, input_domain, example_shape)
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
    if (
        frame_out is None
        or example_shape != tuple(frame_in)
        or any(declared_spec(m) is not None for m in module.modules())
    ):
        # A decorated module is a black box: its batch axis is checked here, before any table work.
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


def _spec(
    module: nn.Module, name: str, input_domain: Domain | Sequence[Domain], example_shape: tuple[int, ...] | None
) -> Spec:
    """:func:`spec_of`, with the layer's name on an error in the tensor a ``fan_in=`` name reads (a mapping or
    mask that training may have changed since ``decompose``); a flat module without metadata gets the units
    its structure shows (:func:`~iotable.front.infer.inferred_spec`)."""
    declared = declared_spec(module)
    try:
        spec = spec_of(module)
        if spec.infer:  # decompose(fan_in="auto"): the structure's units, the declared output domain
            inferred = infer_spec(module, name, input_domain, example_shape)
            return replace(inferred, output_domain=spec.output_domain, source=f"{inferred.source}; {spec.source}")
        return spec
    except NotDecomposedError:
        if not inferable(module):
            raise
        return infer_spec(module, name, input_domain, example_shape)
    except SpecError as exc:
        if declared is None or declared.fan_in_from is None or name == type(module).__name__:
            raise
        msg = f"{name}: {exc}"
        raise type(exc)(msg) from None


def infer_spec(
    module: nn.Module, name: str, input_domain: Domain | Sequence[Domain], example_shape: tuple[int, ...] | None
) -> Spec:
    """The units of a flat module that declares none, from its structure (:func:`~iotable.front.infer.
    inferred_spec`), run on two samples of random values of ``input_domain``; refusals name ``name``."""
    if example_shape is None:
        features = channel_counts(module)[0]
        if features is None:
            msg = (
                f"{name}: {type(module).__name__} has no decomposition metadata; pass example_input= (a batch) so "
                f"that iotable can infer its units from its structure, or decorate it with iotable.decompose(...)"
            )
            raise NotDecomposedError(msg)
        example_shape = (features,)
    if len(example_shape) != 1:
        msg = (
            f"{name}: {type(module).__name__} has no decomposition metadata, and units are inferred only for flat "
            f"inputs (N, features), not {(None, *example_shape)}; declare its window with "
            "iotable.decompose(..., kernel_size=..., stride=...)"
        )
        raise NotDecomposedError(msg)
    domains = _channel_domains(input_domain, example_shape[0], name)
    generator = np.random.default_rng(0)
    values = np.stack([[d.values[generator.integers(len(d))] for d in domains] for _ in range(2)])
    dtype, device = module_dtype(module)
    with eval_mode(module):
        return inferred_spec(module, torch.tensor(values, dtype=dtype, device=device), name)


def _check_arguments(module: Any, input_domain: Any, max_rows: Any, name: str) -> None:
    """Refuse a module that is not one, an input domain that is not a Domain (or one per channel), and a
    ``max_rows`` that is not a positive integer."""
    if not isinstance(module, nn.Module):
        msg = f"{name}: expected a torch.nn.Module, received {type(module).__name__}"
        raise SpecOptionError(msg)
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
        raise SpecOptionError(msg)


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


def _input_channels(module: nn.Module, layout: Layout, example_shape: tuple[int, ...] | None, name: str) -> int:
    """The number of input channels: from the example input, else as the module states it."""
    c_in: int | None
    if example_shape is not None:
        c_in = example_shape[-1] if layout.channels_last else example_shape[0]
    else:
        c_in = channel_counts(module)[0]
    if c_in is None and isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
        c_in = module.num_features
    if c_in is None:
        msg = f"{name}: cannot tell the input shape of {type(module).__name__}; pass example_input= (a batch)"
        raise SpecError(msg)
    if c_in < 1:
        given = f"an example input of shape {example_shape}" if example_shape is not None else "its weights"
        msg = (
            f"{name}: a table layer reads at least one input channel, but {type(module).__name__} has {c_in} "
            f"(from {given}); a layer of no inputs is a constant: fold it into the next layer's bias, or give the "
            "layer its real input"
        )
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
    shared = common_domain(domains)
    rows_of: dict[tuple[int, ...], int] = {}
    for k, channels in enumerate(in_groups):
        if channels in rows_of:
            continue
        fan_in = len(channels) * geometry.window
        if shared is not None:
            rows = len(shared) ** fan_in
        else:
            rows = math.prod(len(d) for d in unit_input_domains(domains, channels, geometry.window, layout))
        rows_of[channels] = rows
        if rows > max_rows:
            unit_domains = unit_input_domains(domains, channels, geometry.window, layout)
            bits = sorted({d.bits for d in unit_domains})
            msg = (
                f"{name}: unit {k} reads {fan_in} inputs ({len(channels)} channel(s) x {geometry.window} kernel "
                f"position(s)) of {'/'.join(map(str, bits))} bit(s) = {sum(d.bits for d in unit_domains)} bits, "
                f"a table of {count_text(rows)} rows; the limit is {count_text(max_rows)} (max_rows=). Decompose "
                "finer: groups=, a sparse fan_in=, or fewer input bits"
            )
            raise TableTooLargeError(msg)
    return rows_of


def _run_frame(
    module: nn.Module,
    layout: Layout,
    domains: tuple[Domain, ...],
    fill_codes: tuple[int, ...],
    frame_in: tuple[int, ...],
    name: str,
) -> tuple[int, ...]:
    """The module's output shape (per sample) for one frame of every channel's fill value; a module that does not
    give the sample its own output row (one that stacks sub-results along the batch axis) is refused."""
    fill = np.asarray([d.values[c] for d, c in zip(domains, fill_codes)])
    spatial = len(frame_in) - 1
    fill_frame = np.broadcast_to(fill if layout.channels_last else fill.reshape(-1, *([1] * spatial)), frame_in)
    dtype, device = module_dtype(module)
    probe = torch.tensor(fill_frame[None], dtype=dtype, device=device)
    out = run_module(module, probe, name)
    check_batch(out, 1, name)  # a module reducing along the batch axis is caught by the probe's larger batches
    return tuple(int(s) for s in out.shape[1:])


def check_batch(out: torch.Tensor, batch: int, name: str) -> None:
    """Refuse an output whose first axis does not hold one row per sample of a batch of ``batch`` inputs.

    Tables map each sample's inputs to that sample's outputs; a module that concatenates its sub-results
    along the batch axis (``torch.cat((x1, x2), 0)``) and leaves the adding to the next module computes no
    such function on its own.

    Example:
        >>> check_batch(torch.zeros(4, 3), 2, "adder")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        iotable.errors.EnumerationError: adder: returned 4 rows for 2 inputs: ...
    """
    rows = int(out.shape[0]) if out.dim() else 0
    if rows != batch:
        msg = (
            f"{name}: returned {rows} rows for {batch} inputs: a decorated module must map each sample to its own "
            "output (axis 0 is the batch). Combine sub-results along a feature axis (torch.cat(..., dim=1), "
            "torch.stack(..., dim=1)), or decorate the module that gives one row per sample again (the sub-units "
            "together with the module that adds them) as one unit"
        )
        raise EnumerationError(msg)


def _per_sample_shape(example_input: Any) -> tuple[int, ...]:
    if isinstance(example_input, (torch.Tensor, np.ndarray)):
        if example_input.ndim < 2:
            msg = f"example_input: expected a batch (N, C, ...), received shape {tuple(example_input.shape)}"
            raise SpecError(msg)
        return tuple(int(s) for s in example_input.shape[1:])
    msg = f"example_input: expected a tensor or array with a batch axis, received {type(example_input).__name__}"
    raise SpecError(msg)


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
        # A unit may read one input twice (a learnt mapping may pick it twice): its table is over the distinct
        # inputs, in the order of their first appearance, and the module's own forward reads the repeat.
        return [tuple(dict.fromkeys(unit)) for unit in spec.fan_in]
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


def _last_module(module: nn.Module) -> nn.Module:
    while isinstance(module, nn.Sequential) and len(module) > 0:
        module = module[-1]
    return module


# The name other packages imported before it had a public one.
