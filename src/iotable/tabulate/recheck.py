"""A last look at a layer's finished tables: a few rows run again through the module, one at a time.

The enumerator runs the module on batches of many rows, the fast path computes rows from the layer's
weights, and a cache hands back rows computed earlier. A module whose output depends on the batch size
(``x * w + float(x.shape[0] >= 8)``) passes the purity check, which compares batches of a few samples, yet
gives tables that hold its output for one batch size while the model runs at others. So after a layer's
tables are built, :func:`check_rows` runs :data:`ROWS_CHECKED` of their rows again, each alone in a batch
of one and all together in a batch of :data:`BATCH_CHECKED`, through the same module call the enumerator
uses, and compares them with the tables. A dependence that starts past that batch size and past the
enumeration's own is not seen.

The cost is bounded: :data:`ROWS_CHECKED` forward passes of one frame sample and one of at most
:data:`BATCH_CHECKED` samples (fewer when the memory budget says so) per layer, whatever its size.
The rows are drawn with a fixed seed, so a model is checked the same way every time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .._util.modules import eval_mode, module_dtype, run_module
from ..errors import DomainError, ModelError
from ..front.layerplan import LayerPlan, Unit
from ..table import IOTable
from .enumerate import DEFAULT_MEMORY_BUDGET
from .forward import FrameValues, _chunk_samples, _numpy_dtype
from .passes import _Class, _classes

__all__ = ["BATCH_CHECKED", "ROWS_CHECKED", "check_rows"]

#: Rows of each layer run again alone after its tables are built.
ROWS_CHECKED = 8
#: The most samples of the batch the same rows are also run in together.
BATCH_CHECKED = 64

# Raw float outputs may move by float rounding when a kernel chosen for another batch size sums them in
# another order; codes are compared exactly.
_RTOL, _ATOL = 1e-4, 1e-5


def check_rows(module: nn.Module, layer: LayerPlan, tables: Sequence[IOTable], *, rows: int = ROWS_CHECKED) -> None:
    """Run ``rows`` rows of ``tables`` (``layer``'s, in unit order) again through ``module``, each alone in a
    batch of one and all together in a batch of up to :data:`BATCH_CHECKED` samples, and raise
    :class:`ModelError` naming the layer when one differs from its table.

    Each row is placed in the enumeration frame as the enumerator places it (at the first window position,
    every other input at its fill code); ``rows + 1`` forward passes, of one sample and of a few dozen.
    """
    if not tables or not layer.units:
        return
    dtype, device = module_dtype(module)
    frame = FrameValues.build(layer, dtype=dtype, device=device)
    picked = _picked(layer, tables, rows)
    x = np.repeat(frame.fill_values(_numpy_dtype(dtype))[None, :], len(picked), axis=0)
    for sample, (_, cls, _, codes) in enumerate(picked):
        x[sample, cls.input_index[0]] = [d.values[c] for d, c in zip(cls.domains, codes)]
    inputs = torch.from_numpy(x).reshape(len(x), *frame.shape).to(device=device, dtype=dtype)
    batch = max(len(x), min(BATCH_CHECKED, _chunk_samples(layer, DEFAULT_MEMORY_BUDGET, dtype)))
    tiled = inputs.repeat(-(-batch // len(x)), *([1] * len(frame.shape)))[:batch]
    with eval_mode(module):
        alone = [_outputs(module, inputs[s : s + 1], layer)[0] for s in range(len(x))]
        together = _outputs(module, tiled, layer)[: len(x)]
    for (unit, cls, column, codes), one, many in zip(picked, alone, together):
        held = tables[unit.index].outputs[int(_row(tables[unit.index], codes))]
        for got, how in ((one, "alone (a batch of one)"), (many, f"in a batch of {batch}")):
            found = got[cls.output_index[0, column : column + unit.fan_out]]
            if not _agrees(found, held, layer):
                _refuse(layer, unit.index, codes, found, held, how)


def _picked(layer: LayerPlan, tables: Sequence[IOTable], rows: int) -> list[tuple[Unit, _Class, int, np.ndarray]]:
    """``rows`` rows drawn with a fixed seed: each unit, its class, its first output column in the class's
    outputs, and the row's input codes."""
    where = {}
    for cls in _classes(layer):
        column = 0
        for unit in cls.units:
            where[unit.index] = (cls, column)
            column += unit.fan_out
    rng = np.random.default_rng(0)
    picked = []
    for position in rng.integers(0, len(tables), size=rows):
        unit, table = layer.units[int(position)], tables[int(position)]
        codes = table.unpack(np.asarray([int(rng.integers(0, table.rows))]))[0]
        picked.append((unit, *where[unit.index], codes))
    return picked


def _row(table: IOTable, codes: np.ndarray) -> int:
    return int(table.address(codes[None, :])[0])


def _outputs(module: nn.Module, x: torch.Tensor, layer: LayerPlan) -> np.ndarray:
    """The module's outputs ``(batch, output elements)``, by the enumerator's call (in eval mode already)."""
    out = run_module(module, x, layer.name, switched=True)
    return out.detach().reshape(len(x), -1).cpu().numpy()


def _agrees(alone: np.ndarray, held: np.ndarray, layer: LayerPlan) -> bool:
    """Whether the module's outputs for a row alone are the table's: the same codes, or raw outputs within
    float rounding (NaN where the table holds NaN)."""
    if layer.output_domain is not None:
        try:
            return bool(np.array_equal(layer.output_domain.encode(alone), held))
        except DomainError:
            return False
    alone, held = alone.astype(np.float64), held.astype(np.float64)
    return bool(np.allclose(alone, held, rtol=_RTOL, atol=_ATOL, equal_nan=True))


def _refuse(layer: LayerPlan, unit: int, codes: np.ndarray, found: np.ndarray, held: np.ndarray, how: str) -> None:
    if layer.output_domain is not None:  # shown as values, as the module gave them
        held = layer.output_domain.values[held.astype(np.int64)]
    msg = (
        f"{layer.name}: its output depends on the batch size: unit {unit} at input codes "
        f"{tuple(int(c) for c in codes)} gives {found.tolist()} run {how}, but its table holds "
        f"{held.tolist()}, computed in the enumeration's batches; a table computes one output per input. Make the "
        "forward independent of the batch (no x.shape[0] or batch statistics in its arithmetic), or list the "
        "module in host= to run it with torch"
    )
    raise ModelError(msg)
