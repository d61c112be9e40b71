"""The exhaustive reference: brute-force a unit's rows through the real module, independently of iotable.

For a unit that reads input channels ``in_channels`` over a window and writes ``out_channels``, the oracle
builds, for every code tuple of ``itertools.product``, an input whose other elements hold random background
values, places the tuple at the unit's inputs for the output position ``position``, runs the module, and
reads the unit's outputs there. The geometry arithmetic is written out here on its own, not taken from
iotable, so the test checks iotable's plan rather than repeating it.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

import iotable


def window_positions(position, kernel, stride, dilation, padding):
    """Input coordinates of a window, kernel positions row-major.

    ``padding`` per axis: an integer (both sides) or a ``(before, after)`` pair; a window starts ``before``
    elements ahead of ``position * stride``.
    """
    before = [pad if isinstance(pad, int) else pad[0] for pad in padding]
    starts = [p * s - b for p, s, b in zip(position, stride, before)]
    ranges = [range(k) for k in kernel]
    return [tuple(st + i * d for st, i, d in zip(starts, idx, dilation)) for idx in itertools.product(*ranges)]


def reference_rows(
    module: torch.nn.Module,
    *,
    domain: iotable.Domain,
    in_shape: tuple[int, ...],
    in_channels,
    out_channels,
    layout: str = "NC",
    kernel=(),
    stride=(),
    dilation=(),
    padding=(),
    position=(),
    seed: int = 0,
    output_domain: iotable.Domain | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """All rows of one unit: ``(inputs (N, fan_in) codes, outputs (N, fan_out))`` from the real module."""
    channels_last = layout in ("NWC", "NHWC")
    window = window_positions(position, kernel, stride, dilation, padding) if kernel else [()]
    if channels_last:
        elements = [(*pos, c) for pos in window for c in in_channels]
        out_elements = [(*position, c) for c in out_channels]
    else:
        elements = [(c, *pos) for c in in_channels for pos in window]
        out_elements = [(c, *position) for c in out_channels]
    channel_axis = len(in_shape) - 1 if channels_last else 0
    per_channel = list(domain) if isinstance(domain, (list, tuple)) else [domain] * in_shape[channel_axis]
    element_domains = [per_channel[e[channel_axis]] for e in elements]
    combos = np.array(list(itertools.product(*[range(len(d)) for d in element_domains])), dtype=np.int64)
    rng = np.random.default_rng(seed)
    background = np.zeros(in_shape)
    for c, d in enumerate(per_channel):
        index = (Ellipsis, c) if channels_last else (c,)
        background[index] = d.values[rng.integers(0, len(d), size=background[index].shape)]
    x = np.broadcast_to(background, (len(combos), *in_shape)).copy()
    for j, element in enumerate(elements):
        if all(0 <= v < size for v, size in zip(element, in_shape)):
            x[(slice(None), *element)] = element_domains[j].values[combos[:, j]]
        else:
            raise AssertionError(f"oracle: element {element} falls outside the input {in_shape}; pick another position")
    was_training = module.training
    module.eval()
    with torch.no_grad():
        dtype = next((p.dtype for p in module.parameters()), torch.float32)
        out = module(torch.tensor(x, dtype=dtype)).numpy()
    module.train(was_training)
    outputs = np.stack([out[(slice(None), *e)] for e in out_elements], axis=1)
    if output_domain is not None:
        outputs = output_domain.encode(outputs)
    return combos, outputs


def assert_tables_match(result, module, *, domain, in_shape, layout="NC", positions=((),), seed=0):
    """Every row of every unit table equals the oracle at each of ``positions``."""
    plan = result.plan
    g = plan.geometry
    for unit, table in zip(plan.units, result.tables):
        assert table.fan_in == unit.fan_in
        assert table.rows == np.prod([len(d) for d in plan.unit_domains(unit)])
        for k, position in enumerate(positions):
            inputs, outputs = reference_rows(
                module,
                domain=domain,
                in_shape=in_shape,
                in_channels=unit.in_channels,
                out_channels=unit.out_channels,
                layout=layout,
                kernel=g.kernel,
                stride=g.stride,
                dilation=g.dilation,
                padding=g.padding,
                position=position,
                seed=seed + k,
                output_domain=plan.output_domain,
            )
            np.testing.assert_array_equal(table.inputs, inputs)
            np.testing.assert_array_equal(table.outputs, outputs, err_msg=f"unit {unit.index} at {position}")
            np.testing.assert_array_equal(table.lookup(inputs), outputs)
