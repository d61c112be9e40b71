"""The algorithms iotable is compared with, written from their descriptions for this layer type.

All of them tabulate the layers of a :class:`~benchmarks.workloads.Workload` (a unit-wise affine map,
batch norm, ReLU and a quantizer per layer, see :class:`~benchmarks.workloads.AffineLayer`) and return,
per layer, a ``(units, rows)`` array of output codes: row ``r`` of unit ``u`` is the code for the input
codes whose mixed-radix number is ``r``, first input most significant (iotable's row order).

- :func:`hand_vectorized` — the bar iotable must meet: one shared combination matrix per layer built by
  broadcast copies, the units' weights gathered at their fan-in, one ``(rows x fan_in) @ (fan_in x units)``
  matmul, then batch norm and the quantizer elementwise; chunked over rows under a memory budget.
- :func:`logicnets_pattern` — one neuron at a time: the combination matrix written element by element in a
  Python loop, padded with zeros to the full layer width, the whole layer run forward, one column kept.
- :func:`polylut_pattern` — the same Python-loop combination matrix (once per layer), but all neurons of a
  layer batched into one forward pass.
- :func:`onehot_lookup` — table inference as LogicNets does it: every input compared with every row of a
  neuron's table, the one-hot match selecting the output.

The two peer patterns are slow by construction; they run under a time cap and say how much they measured
(:class:`Partial`), and the runner extrapolates from that.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

import iotable
from iotable import Domain
from iotable.nn import Quantize
from iotable.table import place_values

from .workloads import AffineLayer, affine_layers

__all__ = [
    "BUDGET",
    "CHUNK_BYTES",
    "NaiveGather",
    "Partial",
    "combination_block",
    "hand_vectorized",
    "hand_vectorized_layer",
    "hand_vectorized_model",
    "logicnets_pattern",
    "module_codes",
    "onehot_lookup",
    "polylut_pattern",
    "python_combinations",
    "row_digits",
]

#: Memory the hand-vectorized baseline may hold at once, as iotable's default ``memory_budget``.
BUDGET = 256 * 2**20
#: Largest chunk of the hand-vectorized baseline: chunks that stay in cache are faster than one big pass.
CHUNK_BYTES = 16 * 2**20


def _radices(domains: Sequence[Domain]) -> list[int]:
    return [len(d) for d in domains]


def row_digits(domains: Sequence[Domain], rows: torch.Tensor) -> torch.Tensor:
    """The input codes ``(len(rows), fan_in)`` of table rows, the first input most significant."""
    radices = torch.as_tensor(_radices(domains))
    place = torch.ones_like(radices)
    for j in range(len(radices) - 2, -1, -1):
        place[j] = place[j + 1] * radices[j + 1]
    return (rows.to(torch.int64)[:, None] // place) % radices


def combination_block(domains: Sequence[Domain], low_digits: int) -> torch.Tensor:
    """Values of every combination of the last ``low_digits`` inputs: ``(rows, fan_in)``.

    Built from the last input backwards: with the combinations of inputs ``j+1..`` filled in the first
    ``size`` rows, input ``j``'s values go down its column in runs of ``size`` (one broadcast write) and
    the finished pattern is copied ``n_j - 1`` times below itself. Each element is written about once.
    The first ``fan_in - low_digits`` columns are left for the chunk's constant high digits, which
    :func:`_fill_high_digits` writes.
    """
    radices = _radices(domains)
    f = len(domains)
    rows = math.prod(radices[f - low_digits :])
    block = torch.empty(rows, f, dtype=torch.float32)
    size = 1
    for j in range(f - 1, f - low_digits - 1, -1):
        n = radices[j]
        view = block[: n * size].view(n, size, f)
        view[:, :, j] = torch.tensor(domains[j].values, dtype=torch.float32)[:, None]
        view[1:, :, j + 1 :] = view[0, :, j + 1 :]
        size *= n
    return block


def _fill_high_digits(block: torch.Tensor, domains: Sequence[Domain], high: int, chunk: int) -> None:
    """Write the constant values of the ``high`` leading inputs for chunk number ``chunk``."""
    radices = _radices(domains)
    for j in range(high - 1, -1, -1):
        chunk, digit = divmod(chunk, radices[j])
        block[:, j].fill_(float(domains[j].values[digit]))


def _low_digits(domains: Sequence[Domain], units: int, budget: int) -> int:
    """How many trailing inputs one chunk enumerates, so that a chunk's buffers fit in ``budget``."""
    radices = _radices(domains)
    f = len(radices)
    per_row = 4 * (f + units) + units  # combinations, matmul output, codes
    low = f
    while low > 1 and math.prod(radices[f - low :]) * per_row > budget:
        low -= 1
    return low


def _quantize_(y: torch.Tensor, layer: AffineLayer) -> torch.Tensor:
    """Codes of the layer's quantizer, computed in place with the quantizer's own operations."""
    q = layer.quantizer
    y.div_(q.scale).add_(q.zero_point).clamp_(q.qmin, q.qmax).round_()
    if q.qmin:
        y.sub_(q.qmin)
    return y


def hand_vectorized_layer(layer: AffineLayer, *, budget: int = BUDGET) -> torch.Tensor:
    """One layer's tables, ``(units, rows)`` uint8 codes: shared combinations, one matmul per chunk.

    Chunks hold at most ``min(budget, CHUNK_BYTES)`` of working memory; the codes themselves are the output.
    The output domain must have at most 256 codes (uint8), as in every workload here.
    """
    domains = layer.input_domains
    low = _low_digits(domains, layer.units, min(budget, CHUNK_BYTES))
    high = len(domains) - low
    block = combination_block(domains, low)
    weight_t = layer.weight.t()  # (fan_in, units), a view: addmm reads it transposed, as nn.Linear does
    bias = layer.bias
    norm = layer.norm
    # Rows x units, as the layer computes its batch: unit u's table is column u (returned as a transposed view).
    out = torch.empty(layer.rows, layer.units, dtype=torch.uint8)
    chunk_rows = block.shape[0]
    with torch.inference_mode():
        for chunk in range(layer.rows // chunk_rows):
            _fill_high_digits(block, domains, high, chunk)
            # addmm with the bias, as nn.Linear computes it: the codes match the model's (up to float ties).
            y = torch.addmm(bias, block, weight_t)
            if norm is not None:
                y = F.batch_norm(y, norm.running_mean, norm.running_var, norm.weight, norm.bias, False, 0.0, norm.eps)
            if layer.relu:
                y.relu_()
            out[chunk * chunk_rows : (chunk + 1) * chunk_rows] = _quantize_(y, layer)
    return out.t()


def hand_vectorized(layers: Sequence[AffineLayer], *, budget: int = BUDGET) -> list[torch.Tensor]:
    """Every layer's tables with :func:`hand_vectorized_layer`."""
    return [hand_vectorized_layer(layer, budget=budget) for layer in layers]


def hand_vectorized_model(model: torch.nn.Module, input_domain: Domain, *, budget: int = BUDGET) -> list[torch.Tensor]:
    """The hand-vectorized baseline from the model: read each layer and gather its neurons' weights at their
    fan-in (:func:`~benchmarks.workloads.affine_layers`), then :func:`hand_vectorized`."""
    return hand_vectorized(affine_layers(model, input_domain), budget=budget)


# -- the peer patterns ------------------------------------------------------------------------------------


@dataclass
class Partial:
    """What a time-capped pattern computed: per layer, the neurons and rows it did and the time it took.

    ``tables[k]`` maps a neuron of layer ``k`` to its codes (only its first rows when the neuron's table
    was larger than the pattern's row cap). :meth:`estimate` extrapolates to the whole workload.
    """

    units: list[int] = field(default_factory=list)  # neurons per layer
    rows: list[int] = field(default_factory=list)  # rows per neuron, per layer
    done_units: list[int] = field(default_factory=list)
    done_rows: list[int] = field(default_factory=list)  # rows computed, per layer
    seconds: list[float] = field(default_factory=list)
    tables: list[dict[int, np.ndarray]] = field(default_factory=list)

    def record(self, layer: AffineLayer, tables: dict[int, np.ndarray], *, rows: int, seconds: float) -> None:
        """Add one layer's outcome: the tables done (``rows`` rows each) out of all of its neurons."""
        self.units.append(layer.units)
        self.rows.append(layer.rows)
        self.done_units.append(len(tables))
        self.done_rows.append(len(tables) * rows)
        self.seconds.append(seconds)
        self.tables.append(tables)

    @property
    def complete(self) -> bool:
        """Whether every row of every table was computed (no extrapolation)."""
        return all(d == u * r for d, u, r in zip(self.done_rows, self.units, self.rows))

    def estimate(self) -> float:
        """Seconds for the whole workload: each layer's measured rate applied to all of its rows."""
        total = 0.0
        for units, rows, done, seconds in zip(self.units, self.rows, self.done_rows, self.seconds):
            total += seconds * (units * rows) / done
        return total

    def describe(self) -> str:
        """How much was measured, e.g. ``"extrapolated from 12 of 165 neurons (0.4% of rows)"``."""
        if self.complete:
            return "measured in full"
        neurons = sum(self.done_units)
        share = sum(self.done_rows) / sum(u * r for u, r in zip(self.units, self.rows))
        return f"extrapolated from {neurons} of {sum(self.units)} neurons ({share:.2%} of rows)"


def python_combinations(domains: Sequence[Domain], rows: int) -> torch.Tensor:
    """The first ``rows`` input combinations, written element by element in a Python loop."""
    radices = _radices(domains)
    values = [d.values.tolist() for d in domains]
    matrix = torch.zeros(rows, len(domains))
    for r in range(rows):
        rest = r
        for j in range(len(domains) - 1, -1, -1):
            rest, digit = divmod(rest, radices[j])
            matrix[r, j] = values[j][digit]
    return matrix


def _in_features(layer: AffineLayer) -> int:
    linear = layer.mixing
    if not isinstance(linear, torch.nn.Linear):
        msg = f"the peer patterns tabulate sparse Linear layers; {layer.name} is a {type(linear).__name__}"
        raise TypeError(msg)
    return linear.in_features


def _encode(values: torch.Tensor, layer: AffineLayer) -> np.ndarray:
    return layer.output_domain.encode(values.numpy())


def module_codes(layer: AffineLayer, unit: int, rows: np.ndarray, *, batch: int = 64) -> np.ndarray:
    """Codes of ``rows`` of one unit's table computed by the layer's own modules.

    Each row's input combination sits at the unit's fan-in of an otherwise zero input of the full layer
    width, and the layer (Linear, batch norm, ReLU, quantizer) runs forward on batches of ``batch`` rows
    (the last one padded with repeats). The batch size matters at float-rounding ties: BLAS sums a lone
    row (a matrix-vector product) in another order than a block of rows, so the model itself can give
    either of two neighbouring codes there; ``batch=1`` evaluates every row alone.
    """
    n_in = _in_features(layer)
    digits = row_digits(layer.input_domains, torch.as_tensor(rows))
    values = torch.stack(
        [torch.tensor(d.values, dtype=torch.float32)[digits[:, j]] for j, d in enumerate(layer.input_domains)], dim=1
    )
    padded = torch.zeros(-(-len(rows) // batch) * batch, n_in)
    padded[: len(rows), layer.inputs[unit]] = values
    padded[len(rows) :, layer.inputs[unit]] = values[-1]
    block = layer.block.eval()
    with torch.inference_mode():
        out = torch.cat([block(part)[:, unit] for part in padded.split(batch)])
    return _encode(out[: len(rows)], layer)


def logicnets_pattern(layers: Sequence[AffineLayer], *, seconds: float = math.inf, row_cap: int = 2**16) -> Partial:
    """One neuron at a time, padded to the full layer width, whole-layer forward, one column kept.

    Each layer gets an equal share of ``seconds`` and runs at least one neuron; a neuron with more than
    ``row_cap`` rows computes only its first ``row_cap`` rows.
    """
    result = Partial()
    share = seconds / len(layers)
    for layer in layers:
        n_in = _in_features(layer)
        rows = min(layer.rows, row_cap)
        tables: dict[int, np.ndarray] = {}
        start = time.perf_counter()
        for u in range(layer.units):
            combos = python_combinations(layer.input_domains, rows)
            padded = torch.zeros(rows, n_in)
            padded[:, layer.inputs[u]] = combos
            with torch.inference_mode():
                out = layer.block.eval()(padded)[:, u]
            tables[u] = _encode(out, layer)
            if time.perf_counter() - start > share:
                break
        result.record(layer, tables, rows=rows, seconds=time.perf_counter() - start)
    return result


def polylut_pattern(
    layers: Sequence[AffineLayer], *, seconds: float = math.inf, row_cap: int = 2**16, budget: int = BUDGET
) -> Partial:
    """Python-loop combinations once per layer, then all of the layer's neurons in batched forward passes.

    Neuron ``u``'s copy of the combinations sits at its fan-in in a zero input of the full layer width; the
    neurons are batched (as many as ``budget`` allows per pass) and each keeps its own output column.
    Layers share ``seconds`` equally; a layer stops after the pass that exceeds its share.
    """
    result = Partial()
    share = seconds / len(layers)
    for layer in layers:
        n_in = _in_features(layer)
        rows = min(layer.rows, row_cap)
        tables: dict[int, np.ndarray] = {}
        start = time.perf_counter()
        combos = python_combinations(layer.input_domains, rows)
        per_neuron = rows * (n_in + layer.units) * 4
        batch = max(1, budget // per_neuron)
        for u0 in range(0, layer.units, batch):
            neurons = torch.arange(u0, min(u0 + batch, layer.units))
            padded = torch.zeros(len(neurons), rows, n_in)
            index = layer.inputs[neurons][:, None, :].expand(-1, rows, -1)
            padded.scatter_(2, index, combos.expand(len(neurons), -1, -1))
            with torch.inference_mode():
                out = layer.block.eval()(padded.view(-1, n_in)).view(len(neurons), rows, -1)
            own = out[torch.arange(len(neurons)), :, neurons]  # (neurons, rows): each neuron's own column
            for k, u in enumerate(neurons.tolist()):
                tables[u] = _encode(own[k], layer)
            if time.perf_counter() - start > share:
                break
        result.record(layer, tables, rows=rows, seconds=time.perf_counter() - start)
    return result


class NaiveGather:
    """Table inference as a plain per-layer gather, written for these models (the bar for small batches).

    Per table layer: each unit's input codes gathered (for a convolution, padded with the code of real 0 and
    unfolded into window vectors first), their packed addresses as a sum of codes times place values plus the
    unit's offset in the layer's flat tables, and one lookup; max-pools run on codes (which ascend with
    values), flattens reshape, and a float head runs on the decoded values.
    """

    def __init__(self, model: torch.nn.Module, tables: Sequence[np.ndarray], input_domain: Domain) -> None:
        modules = [m for m in model.modules() if not isinstance(m, torch.nn.Sequential)]
        tables = list(tables)
        self.steps: list = []
        domain = input_domain
        k = 0
        while k < len(modules):
            m = modules[k]
            quantized = next((j for j in range(k, len(modules)) if isinstance(modules[j], Quantize)), None)
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and quantized is not None and tables:
                self.steps.append(self._table(m, np.asarray(tables.pop(0)), domain))
                domain = modules[quantized].domain
                k = quantized + 1
            elif isinstance(m, torch.nn.MaxPool2d):
                self.steps.append(lambda x, m=m: F.max_pool2d(x.float(), m.kernel_size, m.stride).long())
                k += 1
            elif isinstance(m, torch.nn.Flatten):
                self.steps.append(lambda x: x.reshape(x.shape[0], -1))
                k += 1
            elif isinstance(m, torch.nn.Linear):  # the float head, on values
                values = torch.tensor(domain.values, dtype=torch.float32)
                self.steps.append(lambda x, m=m, values=values: m(values[x]))
                k += 1
            else:
                raise TypeError(f"NaiveGather: unexpected {type(m).__name__} at module {k}")

    @staticmethod
    def _table(layer: torch.nn.Module, table: np.ndarray, domain: Domain):
        units, rows = table.shape
        flat = torch.as_tensor(table.reshape(-1).astype(np.int64))
        offsets = torch.arange(units) * rows
        if isinstance(layer, torch.nn.Linear):
            spec = iotable.spec_of(layer)
            inputs = torch.as_tensor(spec.fan_in or [list(range(layer.in_features))] * layer.out_features)
            place = torch.as_tensor(place_values([len(domain)] * inputs.shape[1]))

            def linear(x: torch.Tensor) -> torch.Tensor:
                return flat[(x[:, inputs] * place).sum(-1) + offsets]

            return linear
        kernel, window = layer.kernel_size, layer.kernel_size[0] * layer.kernel_size[1]
        per_in, per_out = layer.in_channels // layer.groups, layer.out_channels // layer.groups
        first = (torch.arange(units) // per_out) * per_in  # each unit's group's first input channel
        channels = first[:, None] + torch.arange(per_in)[None, :]
        elements = (channels[:, :, None] * window + torch.arange(window)).reshape(units, -1)  # channel-major
        place = torch.as_tensor(place_values([len(domain)] * elements.shape[1]))[None, :, None]
        pad = [p for p in reversed(layer.padding) for _ in range(2)]
        fill = float(domain.zero_code or 0)

        def conv(x: torch.Tensor) -> torch.Tensor:
            padded = F.pad(x.float(), pad, value=fill)
            vectors = F.unfold(padded, kernel, dilation=layer.dilation, stride=layer.stride).long()
            out = flat[(vectors[:, elements] * place).sum(2) + offsets[:, None]]  # (N, units, positions)
            size = [
                (n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, p, d, k, s in zip(x.shape[2:], layer.padding, layer.dilation, kernel, layer.stride)
            ]
            return out.reshape(x.shape[0], units, *size)

        return conv

    def __call__(self, codes: torch.Tensor) -> torch.Tensor:
        x = codes
        with torch.inference_mode():
            for step in self.steps:
                x = step(x)
        return x


def onehot_lookup(
    tables: Sequence[torch.Tensor],
    layers: Sequence[AffineLayer],
    input_codes: torch.Tensor,
    *,
    seconds: float = math.inf,
) -> tuple[torch.Tensor | None, Partial]:
    """Evaluate a network from its tables by one-hot matching every input against every table row.

    ``tables[k]`` is layer ``k``'s ``(units, rows)`` codes (as :func:`hand_vectorized` returns them);
    ``input_codes`` is ``(batch, inputs)``. Each neuron compares its gathered input codes with the input
    columns of all its rows, and the one row that matches selects the output. Layers share ``seconds``;
    when a layer runs out, the remaining neurons read code 0 and the output is ``None`` (not computed).

    Returns:
        the output codes ``(batch, outputs)`` (``None`` when the cap cut the run short) and what was timed.
    """
    result = Partial()
    share = seconds / len(layers)
    x = input_codes
    complete = True
    for layer, table in zip(layers, tables):
        row_inputs = row_digits(layer.input_domains, torch.arange(table.shape[1]))  # (rows, fan_in)
        out = torch.zeros(x.shape[0], layer.units, dtype=torch.int64)
        start = time.perf_counter()
        done = 0
        for u in range(layer.units):
            gathered = x[:, layer.inputs[u]]  # (batch, fan_in)
            match = (gathered[:, None, :] == row_inputs[None, :, :]).all(dim=2)  # (batch, rows), one-hot
            out[:, u] = (match.to(torch.int64) * table[u].to(torch.int64)[None, :]).sum(dim=1)
            done += 1
            if time.perf_counter() - start > share and done < layer.units:
                complete = False
                break
        result.units.append(layer.units)
        result.rows.append(x.shape[0])  # "rows" here: samples evaluated per neuron
        result.done_units.append(done)
        result.done_rows.append(done * x.shape[0])
        result.seconds.append(time.perf_counter() - start)
        x = out
    return (x if complete else None), result
