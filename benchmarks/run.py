"""The benchmark runner: ``python -m benchmarks [--quick] [--json PATH] [--only NAME ...]``.

Three sections, each printed as a table and written to the JSON report:

- **generation** — table generation per workload: iotable on the whole model (and the custom-module
  black-box variant), the hand-vectorized baseline, and the LogicNets and PolyLUT/NeuraLUT patterns
  (time-capped, extrapolated). Every algorithm's tables are compared with iotable's, code for code; where
  iotable and the hand-vectorized baseline differ, the model itself computes the differing codes and decides.
- **runtime** — ``net.run`` on a batch against the model's own torch forward and a one-hot lookup.
- **memory** — peak memory of one precompute in a fresh process (NID-L, and the 2**24-row table).

A final *targets* section prints PASS or FAIL for each performance target with the measured figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

import iotable

from . import baselines, workloads
from .measure import Timing, configure_threads, load_average, measure, peak_reset_supported, release_free_memory

__all__ = ["Result", "main", "run"]

GENERATION = ("jsc-s", "jsc-m", "jsc-l", "nid-l", "cnn", "table-2^24")
SECTIONS = ("runtime", "cnn-runtime", "blackbox", "scale", "memory")
MEMORY_WORKLOADS = ("nid-l", "table-2^24")
#: Workloads measured only by the scale section (in fresh processes), never by the generation section.
SCALE_WORKLOADS = ("wide-1k", "wide-100k", "ties-2^24")
#: The generation workloads whose first call must be within 2x of the hand-vectorized baseline.
FIRST_CALL_TARGET = ("jsc-s", "jsc-m", "jsc-l", "nid-l")
#: Batches of the CNN runtime sweep (the target: every batch from 16 to 65,536).
CNN_BATCHES = (16, 64, 256, 1024, 4096, 16384, 65536)
#: The table networks of the runtime sweep and of the batch-1 comparison with a naive gather.
CNN_MODELS = ("digits-cnn", "cnn-32x32")
SMALL_BATCH_MODELS = ("jsc-m", *CNN_MODELS)
#: The black-box neuron modules (JSC-S shape): LogicNets-style (the custom module), PolyLUT- and NeuraLUT-style.
BLACKBOX_KINDS = ("logicnets", "polylut", "neuralut")
MIB = 2**20


@dataclass
class Result:
    """One measured (or extrapolated) line of a table."""

    section: str
    workload: str
    algorithm: str
    rows: int  # table rows generated (generation), samples evaluated (runtime)
    seconds: float
    runs: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    exact: bool | None = None  # agrees with the model (see bench_generation / bench_runtime); None: not checked
    note: str = ""
    vs_iotable: float | None = None  # seconds / iotable's seconds: > 1 means iotable is faster

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


# -- generation ---------------------------------------------------------------------------------------------


def iotable_codes(result: Any) -> list[np.ndarray]:
    """Per layer, ``(units, rows)`` output codes of what ``precompute`` returned (one output per unit)."""
    layers = list(result.layers.values()) if isinstance(result, iotable.TableNetwork) else [result]
    return [np.stack([t.outputs[:, 0] for t in layer.tables]) for layer in layers]


@dataclass
class Truth:
    """The true tables: ``codes``, and at float-rounding ties also ``alternative`` codes the model gives.

    Where an algorithm's code is neither, it is wrong. ``known`` is false when the truth could not be
    established (a differing layer that is not a Linear layer).
    """

    codes: list[np.ndarray]
    alternative: list[np.ndarray]
    known: bool = True

    @property
    def ties(self) -> int:
        """Codes at ties: the model itself gives either of two codes, depending on its batch."""
        return int(sum((c != a).sum() for c, a in zip(self.codes, self.alternative)))

    def wrong(self, tables: list[np.ndarray]) -> int | None:
        """Codes of ``tables`` the model never gives (``None`` when the truth is unknown)."""
        if not self.known:
            return None
        return int(
            sum(((t != c) & (t != a)).sum() for t, c, a in zip(map(np.asarray, tables), self.codes, self.alternative))
        )

    def wrong_in(self, partial: baselines.Partial) -> int:
        """Codes a capped pattern computed that the model never gives (on the rows it computed)."""
        wrong = 0
        for k, done in enumerate(partial.tables):
            for unit, codes in done.items():
                n = len(codes)
                wrong += int(((codes != self.codes[k][unit, :n]) & (codes != self.alternative[k][unit, :n])).sum())
        return wrong


#: At most this many codes per layer are re-evaluated alone to detect ties (each is one forward pass).
TIE_CHECKS = 2000


def arbitrate(layers: list[workloads.AffineLayer], mine: list[np.ndarray], other: list[np.ndarray]) -> Truth:
    """The true tables, where iotable's and the baseline's differ recomputed by the model itself.

    Every differing code is recomputed by the layer's own modules (:func:`baselines.module_codes`, rows in
    blocks); where an algorithm's code is one step from that result, the row is also run alone, and if
    the model then gives another code the row is a tie and both codes are right. Convolution layers are
    not arbitrated (the truth is then unknown where they differ).
    """
    codes = [m.copy() for m in mine]
    alternative = [m.copy() for m in mine]
    for layer, truth, alt, a, b in zip(layers, codes, alternative, mine, other):
        differ = a != b
        if not differ.any():
            continue
        if not isinstance(layer.mixing, torch.nn.Linear):
            return Truth(codes, alternative, known=False)
        checks = TIE_CHECKS
        for unit in np.flatnonzero(differ.any(axis=1)):
            rows = np.flatnonzero(differ[unit])
            truth[unit, rows] = alt[unit, rows] = baselines.module_codes(layer, int(unit), rows)
            step = (np.abs(a[unit, rows].astype(int) - truth[unit, rows]) == 1) | (
                np.abs(b[unit, rows].astype(int) - truth[unit, rows]) == 1
            )
            near = rows[step][:checks]
            checks -= len(near)
            if len(near):
                alt[unit, near] = baselines.module_codes(layer, int(unit), near, batch=1)
    return Truth(codes, alternative)


def _exactness(wrong: int | None, ties: int = 0) -> tuple[bool | None, str]:
    if wrong is None:
        return None, "differs from iotable; not arbitrated"
    note = "" if wrong == 0 else f"{wrong:,} code(s) the model never gives"
    if ties:
        note += ("; " if note else "") + f"{ties} tie(s) where the model's own code depends on its batch"
    return wrong == 0, note


def _paths(result: Any) -> str:
    """How iotable built each layer, when it says (``LayerTables.method``), e.g. ``"linear fast path x5"``."""
    layers = list(result.layers.values()) if isinstance(result, iotable.TableNetwork) else [result]
    methods = [getattr(layer, "method", None) for layer in layers]
    if None in methods:
        return ""
    counts = {m: methods.count(m) for m in dict.fromkeys(methods)}
    return ", ".join(f"{m} x{n}" for m, n in counts.items())


def bench_generation(workload: workloads.Workload, *, repeats: int, cap: float) -> list[Result]:
    """Table generation on ``workload`` by every algorithm that applies.

    ``exact`` says whether an algorithm's codes equal the true tables: iotable's, corrected by the model
    wherever iotable and the hand-vectorized baseline disagree (see :func:`arbitrate`). The custom-module
    variant computes in its own float arithmetic, so a few codes at quantization boundaries may differ.
    """
    name = workload.name
    rows = workload.total_rows

    # A first call traces and plans the model; later calls on the same model reuse that (build once, run
    # many) and only read the weights again. Each first call gets a fresh copy of the model.
    timing = measure(workload.precompute, repeats=repeats, setup=lambda: copy.deepcopy(workload.model))
    first_row = Result(
        "generation",
        name,
        "iotable (first call)",
        rows,
        timing.seconds,
        timing.runs,
        timing.peak_bytes,
        note="traces and plans a fresh copy of the model",
    )
    first_codes = iotable_codes(timing.result)
    timing.result = None

    workload.precompute()  # the plan the repeated calls reuse
    timing = measure(workload.precompute, repeats=repeats)
    mine = iotable_codes(timing.result)
    paths = _paths(timing.result)
    iotable_row = Result("generation", name, "iotable", rows, timing.seconds, timing.runs, timing.peak_bytes)
    timing.result = None

    # From the model, as iotable: read each layer, gather its neurons' weights, then the tables.
    timing = measure(lambda: baselines.hand_vectorized_model(workload.model, workload.input_domain), repeats=repeats)
    theirs = [t.numpy() for t in timing.result]
    timing.result = None
    hand_row = Result("generation", name, "hand-vectorized", rows, timing.seconds, timing.runs, timing.peak_bytes)

    # Where the two differ, the model decides; every other algorithm is checked against the result.
    truth = arbitrate(workload.layers, mine, theirs)
    iotable_row.exact, iotable_row.note = _exactness(truth.wrong(mine), truth.ties)
    iotable_row.note = "; ".join(n for n in (paths, "plan reused", iotable_row.note) if n)
    first_row.exact, _ = _exactness(truth.wrong(first_codes))
    hand_row.exact, hand_row.note = _exactness(truth.wrong(theirs), truth.ties)
    out: list[Result] = [iotable_row, first_row]

    if workload.custom_blocks:
        timing = measure(workload.precompute_custom, repeats=repeats)
        codes = [c for r in timing.result for c in iotable_codes(r)]
        differ = truth.wrong(codes) or 0
        note = "black box, one precompute per block"
        if differ:
            note += f"; {differ:,} code(s) differ from the model's (its own float arithmetic)"
        out.append(
            Result(
                "generation",
                name,
                "iotable (custom module)",
                rows,
                timing.seconds,
                timing.runs,
                timing.peak_bytes,
                exact=differ == 0,
                note=note,
            )
        )
    out.append(hand_row)

    if workload.peers:
        patterns = (("LogicNets pattern", baselines.logicnets_pattern), ("PolyLUT pattern", baselines.polylut_pattern))
        for algorithm, pattern in patterns:
            timing = measure(lambda pattern=pattern: pattern(workload.layers, seconds=cap), repeats=1)
            partial: baselines.Partial = timing.result
            wrong = truth.wrong_in(partial) if truth.known else None
            exact, note = _exactness(wrong)
            note = "; ".join(n for n in (partial.describe(), note) if n)
            out.append(
                Result(
                    "generation",
                    name,
                    algorithm,
                    rows,
                    partial.estimate(),
                    [sum(partial.seconds)],
                    timing.peak_bytes,
                    exact,
                    note,
                )
            )
    else:
        note = "n/a: the peer patterns tabulate sparse Linear layers"
        out.append(Result("generation", name, "LogicNets/PolyLUT patterns", rows, float("nan"), note=note))
    return out


# -- runtime ------------------------------------------------------------------------------------------------


def bench_runtime(name: str, *, batch: int, repeats: int, cap: float, seed: int = 1) -> list[Result]:
    """``net.run`` on ``batch`` samples against the model's torch forward and the one-hot lookup.

    ``exact``: ``net.run`` equals the model's forward bit for bit; the one-hot lookup equals ``net.run``.
    """
    workload = workloads.build(name)
    net = workload.precompute()
    model = workload.model.eval()
    domain = workload.input_domain
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, len(domain), (batch, *workload.example_input.shape[1:]), generator=gen)
    x = torch.tensor(domain.values, dtype=torch.float32)[codes]

    def forward() -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    expected = forward()
    out: list[Result] = []
    timing = measure(lambda: net.run(x), repeats=repeats)
    exact = torch.equal(timing.result, expected)
    differ = int((timing.result != expected).reshape(batch, -1).any(dim=1).sum())
    values_note = "values in, values out" + (f"; {differ} sample(s) differ from the model's forward" if differ else "")
    out.append(
        Result(
            "runtime",
            name,
            "iotable net.run",
            batch,
            timing.seconds,
            timing.runs,
            timing.peak_bytes,
            exact,
            values_note,
        )
    )
    timing = measure(lambda: net.run(codes, codes=True, return_codes=True), repeats=repeats)
    out_codes = timing.result
    out.append(
        Result(
            "runtime",
            name,
            "iotable net.run (codes)",
            batch,
            timing.seconds,
            timing.runs,
            timing.peak_bytes,
            note="codes in, codes out",
        )
    )
    timing = measure(forward, repeats=repeats)
    out.append(
        Result(
            "runtime",
            name,
            "torch forward",
            batch,
            timing.seconds,
            timing.runs,
            timing.peak_bytes,
            note="the model itself",
        )
    )

    tables = [torch.as_tensor(c) for c in iotable_codes(net)]
    timing = measure(lambda: baselines.onehot_lookup(tables, workload.layers, codes, seconds=cap), repeats=1)
    looked, partial = timing.result
    exact = bool(torch.equal(looked, out_codes)) if looked is not None else None
    note = partial.describe().replace("of rows", "of neuron evaluations")
    out.append(
        Result(
            "runtime",
            name,
            "one-hot lookup",
            batch,
            partial.estimate(),
            [sum(partial.seconds)],
            timing.peak_bytes,
            exact,
            note,
        )
    )
    return out


# -- runtime on CNNs, over batches; small batches against a naive gather -------------------------------------


def table_network(name: str) -> tuple[torch.nn.Module, Any, iotable.Domain, tuple[int, ...]]:
    """``(model, table network, input domain, per-sample input shape)`` of a runtime model (its head on the host)."""
    if name == "jsc-m":
        workload = workloads.build("jsc-m")
        return workload.model.eval(), workload.precompute(), workload.input_domain, (16,)
    if name == "digits-cnn":
        model, domain, shape = workloads.build_digits_cnn(), workloads.DIGITS_DOMAIN, (1, 8, 8)
    elif name == "cnn-32x32":
        model, domain, shape = workloads.build_cnn_classifier(), workloads.signed_domain(2), (3, 32, 32)
    else:
        raise KeyError(name)
    model.eval()
    net = iotable.precompute(
        model, input_domain=domain, example_input=torch.zeros(1, *shape), host=[model[-1]], progress=False
    )
    return model, net, domain, shape


def _interleaved(fns: list[Any], *, repeats: int) -> list[Timing]:
    """Medians of ``fns`` run in turns (each repeat runs every one once), the last results kept."""
    runs: list[list[float]] = [[] for _ in fns]
    results: list[Any] = [None] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            results[k] = None
            start = time.perf_counter()
            results[k] = fn()
            runs[k].append(time.perf_counter() - start)
    return [Timing(runs=r, peak_bytes=None, result=res) for r, res in zip(runs, results)]


def bench_cnn_runtime(*, batches: tuple[int, ...], repeats: int, seed: int = 1) -> list[Result]:
    """``net.run`` (values in, values out) against the model's torch forward on the CNNs, batch by batch,
    the two in turns; ``exact``: the outputs are equal bit for bit."""
    return [r for name in CNN_MODELS for r in _cnn_runtime(name, batches=batches, repeats=repeats, seed=seed)]


def _cnn_runtime(name: str, *, batches: tuple[int, ...], repeats: int, seed: int) -> list[Result]:
    model, net, domain, shape = table_network(name)
    gen = torch.Generator().manual_seed(seed)
    out: list[Result] = []
    for batch in batches:
        codes = torch.randint(0, len(domain), (batch, *shape), generator=gen)
        x = torch.tensor(domain.values, dtype=torch.float32)[codes]
        del codes
        runs = repeats if batch <= 4096 else max(3, repeats // 4)  # the largest batches: fewer, longer runs
        mine, theirs = _interleaved([partial(net.run, x), partial(_forward, model, x)], repeats=runs)
        exact = bool(torch.equal(mine.result, theirs.result))
        label = f"{name} @{batch}"
        out.append(Result("cnn-runtime", label, "iotable net.run", batch, mine.seconds, mine.runs, exact=exact))
        out.append(Result("cnn-runtime", label, "torch forward", batch, theirs.seconds, theirs.runs))
        del x, mine, theirs
        release_free_memory()
    return out


def _forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(x)


def bench_small_batch(*, repeats: int, seed: int = 2) -> list[Result]:
    """One sample: ``net.run`` (codes in, the output's codes or the head's values out) against a naive
    per-layer gather over the same tables (:class:`baselines.NaiveGather`); ``exact``: equal outputs."""
    return [r for name in SMALL_BATCH_MODELS for r in _small_batch(name, repeats=repeats, seed=seed)]


def _small_batch(name: str, *, repeats: int, seed: int) -> list[Result]:
    model, net, domain, shape = table_network(name)
    naive = baselines.NaiveGather(model, iotable_codes(net), domain)
    codes = torch.randint(0, len(domain), (1, *shape), generator=torch.Generator().manual_seed(seed))
    mine_fn = partial(net.run, codes, codes=True, return_codes=net.output_node.domain is not None)
    naive_fn = partial(naive, codes)
    for _ in range(20):  # both paths build their first-call data before the timing
        mine_fn(), naive_fn()
    mine, theirs = _interleaved([mine_fn, naive_fn], repeats=repeats)
    exact = bool(torch.equal(mine.result.to(torch.float32), theirs.result.to(torch.float32)))
    label = f"{name} @1"
    return [
        Result("small-batch", label, "iotable net.run", 1, mine.seconds, mine.runs, exact=exact, note="codes in"),
        Result("small-batch", label, "naive per-layer gather", 1, theirs.seconds, theirs.runs),
    ]


# -- the black box on neuron modules -------------------------------------------------------------------------


def _blackbox_blocks(kind: str) -> list[tuple[torch.nn.Module, iotable.Domain]]:
    config = workloads.MLP_CONFIGS["jsc-s"]
    if kind == "logicnets":
        model = workloads.build_mlp(config)
        return workloads.build_custom_blocks(model, workloads.input_domain_of(config))
    return workloads.build_neuron_blocks(kind, config)


def own_generation(blocks: list[tuple[Any, iotable.Domain]]) -> list[np.ndarray]:
    """PolyLUT's and NeuraLUT's own generation pattern: per neuron, every combination of its inputs through
    the neuron's own sub-network (:meth:`neuron`, bypassing the layer's forward) in one batch; ``(units, rows)``
    codes per layer."""
    tables = []
    for block, domain in blocks:
        fan_in = block.inputs.shape[1]
        combos = baselines.combination_block([domain] * fan_in, fan_in)
        codes = np.empty((block.inputs.shape[0], len(combos)), dtype=np.uint8)
        with torch.inference_mode():
            for unit in range(block.inputs.shape[0]):
                values = block.neuron(unit, combos)
                codes[unit] = (torch.round(values / block.step) - block.qmin).to(torch.uint8).numpy()
        tables.append(codes)
    return tables


def bench_blackbox(*, repeats: int) -> list[Result]:
    """iotable's black box (one ``precompute`` per decorated layer) on JSC-S-shaped networks of neuron modules,
    against the time of the forward passes it makes (timed inside the same runs) and, for the PolyLUT- and
    NeuraLUT-style modules, their own batched generation; ``exact``: the own generation's tables equal iotable's."""
    return [r for kind in BLACKBOX_KINDS for r in _blackbox(kind, repeats=repeats)]


class _ForwardTimer:
    """Times every call of ``cls.forward`` while active (the black box's forward passes)."""

    def __init__(self, cls: type) -> None:
        self.cls, self.forward = cls, cls.forward
        self.seconds, self.calls = 0.0, 0

    def __enter__(self) -> _ForwardTimer:
        timer, forward = self, self.forward

        def timed(module: Any, x: torch.Tensor) -> torch.Tensor:
            start = time.perf_counter()
            try:
                return forward(module, x)
            finally:
                timer.seconds += time.perf_counter() - start
                timer.calls += 1

        self.cls.forward = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.forward = self.forward


def _precompute_blocks(blocks: list[tuple[Any, iotable.Domain]], widths: list[int]) -> list[Any]:
    return [
        iotable.precompute(block, input_domain=domain, example_input=torch.zeros(1, widths[k]), progress=False)
        for k, (block, domain) in enumerate(blocks)
    ]


def _blackbox(kind: str, *, repeats: int) -> list[Result]:
    config = workloads.MLP_CONFIGS["jsc-s"]
    rows = config.total_rows
    blocks = _blackbox_blocks(kind)
    widths = [config.inputs, *config.widths]
    mine, forwards = [], []
    for _ in range(repeats):
        with _ForwardTimer(type(blocks[0][0])) as timer:
            start = time.perf_counter()
            result = _precompute_blocks(blocks, widths)
            mine.append(time.perf_counter() - start)
        forwards.append(timer.seconds)
    methods = ", ".join(sorted({layer.method for layer in result}))
    out = [
        Result("blackbox", kind, "iotable (black box)", rows, statistics.median(mine), mine, note=methods),
        Result(
            "blackbox",
            kind,
            "forward passes",
            rows,
            statistics.median(forwards),
            forwards,
            note=f"the {timer.calls} forward calls iotable makes (plan, probe, enumeration), timed inside its runs",
        ),
    ]
    if kind != "logicnets":
        timing = measure(partial(own_generation, blocks), repeats=repeats)
        exact = all(np.array_equal(t, c) for t, c in zip(timing.result, iotable_codes_of(result)))
        note = "per neuron, all input combinations through its sub-network in one batch"
        out.append(
            Result(
                "blackbox", kind, "own batched generation", rows, timing.seconds, timing.runs, exact=exact, note=note
            )
        )
    return out


def iotable_codes_of(results: list[Any]) -> list[np.ndarray]:
    """Per layer, ``(units, rows)`` codes of a list of ``LayerTables``."""
    return [c for r in results for c in iotable_codes(r)]


# -- scale: wide layers and near ties, in fresh processes -------------------------------------------------------


def bench_scale(*, threads: int, repeats: int) -> list[dict[str, Any]]:
    """The 1k- and 100k-unit sparse layers (256 MiB budget) and the 2^24-row table of near ties (4 MiB budget),
    each precomputed in fresh processes (:mod:`benchmarks.memory`): seconds, peak memory, table bytes."""
    budgets = {"wide-1k": 256, "wide-100k": 256, "ties-2^24": 4}
    return [bench_memory(name, threads=threads, repeats=repeats, budget=budgets[name]) for name in SCALE_WORKLOADS]


# -- memory -------------------------------------------------------------------------------------------------


def _memory_child(name: str, *, threads: int, budget: int = 256) -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "benchmarks.memory", name, "--threads", str(threads), "--budget", str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"workload": name, "error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout)


def bench_memory(name: str, *, threads: int, repeats: int = 3, budget: int = 256) -> dict[str, Any]:
    """Run :mod:`benchmarks.memory` for ``name`` in ``repeats`` fresh processes; medians of peak and time.

    The peak varies from process to process (allocator state, lazy initialisation), hence several.
    ``budget``: the ``memory_budget`` in MiB.
    """
    reports = [_memory_child(name, threads=threads, budget=budget) for _ in range(repeats)]
    failed = [r for r in reports if "error" in r]
    if failed:
        return failed[0]
    report = dict(reports[0])
    report["peaks"] = [r["peak_bytes"] for r in reports]
    report["peak_bytes"] = int(statistics.median(report["peaks"]))
    report["seconds"] = statistics.median(r["seconds"] for r in reports)
    return report


# -- targets ------------------------------------------------------------------------------------------------


@dataclass
class Target:
    """One performance target with the measured figure; ``status`` is PASS, FAIL or SKIP (not measured)."""

    target: str
    measured: str
    status: str


def _status(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "FAIL")


def targets(
    results: list[Result], memory: list[dict[str, Any]], scale: list[dict[str, Any]] | None = None
) -> list[Target]:
    """Compare the measured figures with the performance targets."""
    found = {(r.section, r.workload, r.algorithm): r for r in results}
    out: list[Target] = []

    for name in GENERATION:
        mine, base = found.get(("generation", name, "iotable")), found.get(("generation", name, "hand-vectorized"))
        first = found.get(("generation", name, "iotable (first call)"))
        if mine and base:
            ratio = base.seconds / mine.seconds
            cold = base.seconds / first.seconds if first else None
            goal = f"{name}: table generation >= 1x hand-vectorized (aim 2x)"
            ok = ratio >= 1
            if name in FIRST_CALL_TARGET:
                goal += ", first call within 2x of it (>= 0.5x)"
                ok = ok and cold is not None and cold >= 0.5
            out.append(
                Target(
                    goal,
                    f"{ratio:.3g}x ({_rate(mine.rate)} vs {_rate(base.rate)} rows/s"
                    + (f"; first call {cold:.3g}x)" if cold is not None else ")"),
                    _status(ok),
                )
            )

    custom = found.get(("generation", "nid-l", "iotable (custom module)"))
    out.append(
        Target(
            "custom module black-box path >= 10M rows/s (nid-l)",
            f"{_rate(custom.rate)} rows/s" if custom else "not run",
            _status(custom.rate >= 10e6 if custom else None),
        )
    )
    nid = found.get(("generation", "nid-l", "iotable"))
    out.append(
        Target(
            "nid-l precompute <= 2 s",
            f"{nid.seconds:.3g} s" if nid else "not run",
            _status(nid.seconds <= 2 if nid else None),
        )
    )

    big = found.get(("generation", "table-2^24", "iotable"))
    big_memory = next((m for m in memory if m.get("workload") == "table-2^24" and "peak_bytes" in m), None)
    if big or big_memory:
        seconds = big.seconds if big else big_memory["seconds"]
        peak = big_memory["peak_bytes"] if big_memory else None
        ok = seconds <= 5 and (peak is None or peak <= 256 * MIB)
        figure = f"{seconds:.3g} s" + (
            f", peak {peak / MIB:.0f} MiB (tables included)" if peak is not None else ", memory not run"
        )
        out.append(Target("2^24-row table <= 5 s within 256 MiB", figure, _status(ok)))
    else:
        out.append(Target("2^24-row table <= 5 s within 256 MiB", "not run", "SKIP"))

    run = next((r for r in results if r.section == "runtime" and r.algorithm == "iotable net.run"), None)
    torch_forward = next((r for r in results if r.section == "runtime" and r.algorithm == "torch forward"), None)
    onehot = next((r for r in results if r.section == "runtime" and r.algorithm == "one-hot lookup"), None)
    if run and torch_forward:
        ratio = torch_forward.seconds / run.seconds
        out.append(Target(f"{run.workload}: net.run >= 1x torch forward", f"{ratio:.3g}x", _status(ratio >= 1)))
    else:
        out.append(Target("net.run >= 1x torch forward", "not run", "SKIP"))
    if run and onehot:
        ratio = onehot.seconds / run.seconds
        out.append(Target(f"{run.workload}: net.run >= 1000x one-hot lookup", f"{ratio:.3g}x", _status(ratio >= 1000)))
    else:
        out.append(Target("net.run >= 1000x one-hot lookup", "not run", "SKIP"))

    out += _new_targets(results, found, scale or [])

    nid_memory = next((m for m in memory if m.get("workload") == "nid-l" and "peak_bytes" in m), None)
    if nid_memory:
        limit = nid_memory["table_bytes"] + 300 * MIB
        out.append(
            Target(
                "nid-l peak memory <= tables' bytes + 300 MiB",
                f"{nid_memory['peak_bytes'] / MIB:.0f} MiB (limit {limit / MIB:.0f} MiB)",
                _status(nid_memory["peak_bytes"] <= limit),
            )
        )
    else:
        out.append(Target("nid-l peak memory <= tables' bytes + 300 MiB", "not run", "SKIP"))
    return out


def _new_targets(results: list[Result], found: dict[Any, Result], scale: list[dict[str, Any]]) -> list[Target]:
    """The targets of the CNN runtime sweep, small batches, the black box and the scale section."""
    out: list[Target] = []
    for name in CNN_MODELS:
        pairs = [
            (r.rows, found[("cnn-runtime", r.workload, "torch forward")].seconds / r.seconds)
            for r in results
            if r.section == "cnn-runtime" and r.workload.startswith(f"{name} @") and r.algorithm == "iotable net.run"
        ]
        goal = f"{name}: net.run >= 1x torch forward at every batch from 16 to 65,536"
        if pairs:
            figure = ", ".join(f"{b}: {x:.2f}x" for b, x in pairs)
            complete = {b for b, _ in pairs} >= {16, 65536}
            out.append(Target(goal, figure, _status(min(x for _, x in pairs) >= 1 and complete)))
        else:
            out.append(Target(goal, "not run", "SKIP"))
    for name in SMALL_BATCH_MODELS:
        mine = found.get(("small-batch", f"{name} @1", "iotable net.run"))
        theirs = found.get(("small-batch", f"{name} @1", "naive per-layer gather"))
        goal = f"{name}: net.run >= 1x a naive per-layer gather at batch 1"
        if mine and theirs:
            ratio = theirs.seconds / mine.seconds
            figure = f"{ratio:.2f}x ({mine.seconds * 1e6:.0f} vs {theirs.seconds * 1e6:.0f} us)"
            out.append(Target(goal, figure, _status(ratio >= 1)))
        else:
            out.append(Target(goal, "not run", "SKIP"))
    for kind in BLACKBOX_KINDS:
        mine = found.get(("blackbox", kind, "iotable (black box)"))
        forwards = found.get(("blackbox", kind, "forward passes"))
        own = found.get(("blackbox", kind, "own batched generation"))
        goal = f"{kind}-style neurons: black box <= 1.3x the forward passes it makes"
        if mine and forwards:
            ratio = mine.seconds / forwards.seconds
            figure = f"{ratio:.2f}x ({mine.seconds * 1e3:.1f} vs {forwards.seconds * 1e3:.1f} ms)"
            out.append(Target(goal, figure, _status(ratio <= 1.3)))
        else:
            out.append(Target(goal, "not run", "SKIP"))
        if kind != "logicnets":
            goal = f"{kind}-style neurons: black box <= 1x their own batched generation"
            if mine and own:
                ratio = mine.seconds / own.seconds
                figure = f"{ratio:.2f}x ({mine.seconds * 1e3:.1f} vs {own.seconds * 1e3:.1f} ms)"
                out.append(Target(goal, figure, _status(ratio <= 1)))
            else:
                out.append(Target(goal, "not run", "SKIP"))
    reports = {r.get("workload"): r for r in scale if "peak_bytes" in r}
    small, wide = reports.get("wide-1k"), reports.get("wide-100k")
    goal = "100k-unit sparse layer: time per unit <= 1.5x the 1k-unit layer's"
    if small and wide:
        per = [r["seconds"] / (r["rows"] // 4096) for r in (small, wide)]
        figure = f"{per[1] / per[0]:.2f}x ({per[1] * 1e6:.1f} vs {per[0] * 1e6:.1f} us per unit)"
        out.append(Target(goal, figure, _status(per[1] <= 1.5 * per[0])))
    else:
        out.append(Target(goal, "not run", "SKIP"))
    for name, what in (("wide-100k", "100k-unit sparse layer"), ("ties-2^24", "2^24-row table of near ties")):
        report = reports.get(name)
        goal = f"{what}: peak memory <= tables' bytes + memory_budget"
        if report:
            limit = report["table_bytes"] + report["memory_budget"]
            figure = f"{report['peak_bytes'] / MIB:.1f} MiB (limit {limit / MIB:.1f} MiB)"
            out.append(Target(goal, figure, _status(report["peak_bytes"] <= limit)))
        else:
            out.append(Target(goal, "not run", "SKIP"))
    return out


# -- printing -----------------------------------------------------------------------------------------------


def _rate(rate: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.3g}{unit}"
    return f"{rate:.3g}"


def _seconds(s: float) -> str:
    return "n/a" if s != s else f"{s:.3g}"


def _fill_ratios(results: list[Result]) -> None:
    references = ("iotable", "iotable net.run", "iotable (black box)")
    reference = {(r.section, r.workload): r.seconds for r in results if r.algorithm in references}
    for r in results:
        base = reference.get((r.section, r.workload))
        if base and r.seconds == r.seconds:
            r.vs_iotable = r.seconds / base


def format_table(results: list[Result], *, unit: str) -> str:
    """A plain-text table of ``results``; ``vs iotable`` is seconds over iotable's (> 1: iotable faster)."""
    header = ("workload", "algorithm", unit, "seconds", f"{unit}/s", "vs iotable", "peak MiB", "exact", "note")
    lines = []
    for r in results:
        exact = "-" if r.exact is None else ("yes" if r.exact else "NO")
        peak = "-" if r.peak_bytes is None else f"{r.peak_bytes / MIB:.0f}"
        ratio = "-" if r.vs_iotable is None else f"{r.vs_iotable:.3g}"
        rate = "-" if r.seconds != r.seconds else _rate(r.rate)
        lines.append((r.workload, r.algorithm, f"{r.rows:,}", _seconds(r.seconds), rate, ratio, peak, exact, r.note))
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(len(header))]
    align = ["<", "<", ">", ">", ">", ">", ">", "<", "<"]
    out = []
    for row in [header, *lines]:
        out.append("  ".join(f"{v!s:{a}{w}}" for v, a, w in zip(row, align, widths)).rstrip())
        if row is header:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _load(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _commit() -> str | None:
    """The git commit of the iotable being measured (``+`` when its tree has changes), if it is a checkout."""
    where = Path(iotable.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=where, capture_output=True, text=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


# -- entry points -------------------------------------------------------------------------------------------


def run(
    *,
    only: list[str] | None = None,
    quick: bool = False,
    repeats: int | None = None,
    cap: float | None = None,
    threads: int = 1,
    batch: int = 4096,
    runtime_workload: str = "jsc-m",
    echo: bool = True,
) -> dict[str, Any]:
    """Run the selected sections and return the report (what ``--json`` writes).

    Args:
        only: workload and section names to run (default: every published workload, runtime and memory).
        quick: one repeat and a 2 s cap on the slow patterns (a smoke run, not a measurement).
        repeats: runs per measurement, the median is reported (default 5, quick 1).
        cap: seconds the LogicNets / PolyLUT patterns and the one-hot lookup may run per workload, before
            extrapolating (default 20, quick 2).
        threads: torch threads (``0``: torch's default); 1 keeps timings stable on a busy machine.
        batch: samples of the runtime benchmark.
        runtime_workload: the workload the runtime benchmark runs on.
        echo: print each table as it is done.
    """
    selected = list(only) if only else [*GENERATION, *SECTIONS]
    unknown = [s for s in selected if s not in workloads.WORKLOADS and s not in SECTIONS]
    if unknown:
        msg = (
            f"unknown benchmark(s) {unknown}; expected workloads {list(workloads.WORKLOADS)} "
            f"or sections {list(SECTIONS)}"
        )
        raise ValueError(msg)
    repeats = repeats or (1 if quick else 5)
    cap = cap if cap is not None else (2.0 if quick else 20.0)
    used_threads = configure_threads(threads)
    say = print if echo else (lambda *a, **k: None)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "iotable": iotable.__version__,
        "commit": _commit(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "threads": used_threads,
        "repeats": repeats,
        "cap_seconds": cap,
        "quick": quick,
        "load_average_before": load_average(),
        "peak_memory": "VmHWM per run" if peak_reset_supported() else "unavailable",
    }
    say(
        f"iotable {meta['iotable']} ({meta['commit']}), torch {meta['torch']}, {meta['machine']}, "
        f"{used_threads} thread(s), median of {repeats} run(s), load average {_load(meta['load_average_before'])}"
    )
    results: list[Result] = []
    generation = [s for s in selected if s in workloads.WORKLOADS and s not in SCALE_WORKLOADS]
    for name in generation:
        workload = workloads.build(name)
        say(f"\n[generation] {name}: {workload.description}", flush=True)
        part = bench_generation(workload, repeats=repeats, cap=cap)
        del workload
        _fill_ratios(part)
        results += part
        say(format_table(part, unit="rows"), flush=True)
    if "runtime" in selected:
        say(f"\n[runtime] {runtime_workload}, batch {batch}", flush=True)
        part = bench_runtime(runtime_workload, batch=batch, repeats=max(repeats, 3 if quick else 20), cap=cap)
        _fill_ratios(part)
        results += part
        say(format_table(part, unit="samples"), flush=True)
    if "cnn-runtime" in selected:
        batches = (16, 256) if quick else CNN_BATCHES
        say(f"\n[cnn-runtime] net.run (values in and out) against the model's forward, batches {batches}", flush=True)
        part = bench_cnn_runtime(batches=batches, repeats=max(repeats, 3 if quick else 10))
        _fill_ratios(part)
        results += part
        say(format_table(part, unit="samples"), flush=True)
        say("\n[small-batch] one sample: net.run against a naive per-layer gather over the same tables", flush=True)
        part = bench_small_batch(repeats=max(repeats, 20 if quick else 200))
        _fill_ratios(part)
        results += part
        say(format_table(part, unit="samples"), flush=True)
    if "blackbox" in selected:
        say("\n[blackbox] JSC-S-shaped networks of neuron modules through the black box", flush=True)
        part = bench_blackbox(repeats=max(repeats, 3))
        _fill_ratios(part)
        results += part
        say(format_table(part, unit="rows"), flush=True)
    scale: list[dict[str, Any]] = []
    if "scale" in selected:
        say("\n[scale] one precompute per fresh process: wide layers (256 MiB budget), near ties (4 MiB)", flush=True)
        scale = bench_scale(threads=threads, repeats=1 if quick else 3)
        for report in scale:
            if "error" in report:
                say(f"{report['workload']}: failed: {report['error']}")
                continue
            units = report["rows"] // 4096 if report["workload"].startswith("wide") else 1
            say(
                f"{report['workload']}: {report['seconds']:.3g} s ({report['seconds'] / units * 1e6:.1f} us per unit), "
                f"peak {report['peak_bytes'] / MIB:.1f} MiB (median of "
                f"{', '.join(f'{p / MIB:.1f}' for p in report['peaks'])}), tables {report['table_bytes'] / MIB:.1f} "
                f"MiB, memory_budget {report['memory_budget'] / MIB:.0f} MiB",
                flush=True,
            )
    memory: list[dict[str, Any]] = []
    if "memory" in selected:
        say("\n[memory] one precompute per fresh process (peak above the level after imports and build)", flush=True)
        for name in MEMORY_WORKLOADS:
            report = bench_memory(name, threads=threads, repeats=1 if quick else 3)
            memory.append(report)
            if "error" in report:
                say(f"{name}: failed: {report['error']}")
            else:
                peaks = ", ".join(f"{p / MIB:.0f}" for p in report["peaks"])
                say(
                    f"{name}: {report['seconds']:.3g} s, peak {report['peak_bytes'] / MIB:.0f} MiB "
                    f"(median of {peaks}), tables {report['table_bytes'] / MIB:.1f} MiB, "
                    f"memory_budget {report['memory_budget'] / MIB:.0f} MiB",
                    flush=True,
                )
    goals = targets(results, memory, scale)
    say("\n[targets]")
    for t in goals:
        say(f"{t.status:4}  {t.target}: {t.measured}")
    meta["load_average_after"] = load_average()
    return _finite(
        {
            "meta": meta,
            "results": [asdict(r) | {"rate": r.rate} for r in results],
            "memory": memory,
            "scale": scale,
            "targets": [asdict(t) for t in goals],
        }
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point (see ``python -m benchmarks --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark iotable's table generation, runtime and memory against baselines.",
    )
    parser.add_argument("--quick", action="store_true", help="one repeat, 2 s caps: a smoke run")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help=f"workloads ({', '.join(workloads.WORKLOADS)}) and sections ({', '.join(SECTIONS)}) to run",
    )
    parser.add_argument("--repeats", type=int, help="runs per measurement (default 5, quick 1)")
    parser.add_argument("--cap", type=float, help="seconds for each slow pattern before extrapolating (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, 0 for torch's default (default 1)")
    parser.add_argument("--batch", type=int, default=4096, help="runtime batch size (default 4096)")
    parser.add_argument("--runtime-workload", default="jsc-m", choices=sorted(workloads.WORKLOADS))
    args = parser.parse_args(argv)
    try:
        report = run(
            only=args.only,
            quick=args.quick,
            repeats=args.repeats,
            cap=args.cap,
            threads=args.threads,
            batch=args.batch,
            runtime_workload=args.runtime_workload,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
        print(f"\nwrote {args.json}")
    return report


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats replaced by ``None``, so that the report is strict JSON."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
