"""The sweep itself: every stage over the variants and candidates that reach it, cheapest first.

The stages that do not depend on the implementation options run once per variant (estimate, tables,
verification) or per pipelining setting (latency); ABC runs per variant and mapping effort, place and route per
candidate. Between them two fronts prune (:mod:`.pareto`): ABC runs only for the variants of candidates on or near
the front of (estimated LUTs, latency, accuracy), place and route only for candidates on or near the front of
(ABC's LUTs, latency, accuracy). Every stage's result is a record in the sweep's folder (:mod:`.store`) as soon
as it is done, and a rerun reads it instead of running the stage again.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._util.executor import check_executor
from .._util.progress import progress_bar
from .._util.trust import Untrusted, digest_file
from ..errors import CacheError, OptionError
from ..lutcount import check_k
from ..network.network import TableNetwork
from . import stages
from .options import EFFORTS, Candidate, Pipelining, check_pipelinings, check_seeds, check_strings
from .pareto import front
from .result import SweepPoint, SweepResult
from .store import RecordStore
from .variant import Variant

__all__ = ["sweep"]

_CHEAP = ("min", "min", "max")  # LUTs, latency, accuracy


def sweep(
    variants: Iterable[Variant] | Mapping[str, Any],
    *,
    targets: str | Iterable[str] = "ice40-hx8k",
    pipelines: Any = 1,
    efforts: str | Iterable[str] = "fast",
    seeds: int | Iterable[int] = 1,
    folder: str | Path | None = None,
    near: float = 0.05,
    k: int = 6,
    executor: Any = None,
    frequency: float | None = None,
    timeout: float = 3600.0,
    progress: bool | None = None,
) -> SweepResult:
    """Sweep trained variants × implementation options; place and route only what may be on the Pareto front.

    Stages, cheapest first: LogicNets' estimate → tables (:func:`iotable.precompute`) → verification
    (:func:`iotable.verify` on each variant's ``inputs``, and its ``scorer``'s accuracy) → ABC
    (:func:`iotable.synth.cost`) → place and route (:func:`iotable.hdl.export`, :func:`iotable.hdl.implement`).
    ABC runs only for candidates on or near the front of (estimated LUTs, latency, accuracy), place and route
    only for those on or near the front of (ABC's LUTs, latency, accuracy), each front among the candidates of
    one target, pipelining setting and seed (registers buy an Fmax that no cheap stage measures); the result's
    front is over the placed candidates' LUTs, Fmax, latency and accuracy. With ``folder``, each stage's result
    is written there as a JSON record as soon as it is done: a rerun (after a crash, or with more options) reuses
    every record whose variant fingerprint and options (the tools' versions among them) match, and runs only what
    is missing.

    Args:
        variants: :class:`Variant` objects, or a mapping of names to variants' models or bundle paths (a model
            then needs its arguments: give Variants).
        targets: :func:`iotable.hdl.implement` targets (``"ice40-hx8k"``, ``"ecp5-85k"``, ...).
        pipelines: pipelining settings: ``pipeline=`` as :func:`iotable.hdl.export` takes it (``1``, ``2``,
            ``"none"``) or ``{"pipeline": 1, "pipeline_luts": 2}`` (registers inside the tables too; the tables
            are then exported mapped, and mapped by ABC already for the latency, which counts those registers).
        efforts: ABC's mapping effort, ``"fast"`` and/or ``"floor"`` (:func:`iotable.synth.cost`).
        seeds: nextpnr's placement seeds; each seed is a candidate of its own.
        folder: where the records (and each variant's tables, and the ABC and implement caches) are kept;
            ``None``: a temporary folder, removed at the end (nothing to resume).
        near: also carry candidates within this fraction of a front on to the next stage (:mod:`.pareto`;
            default 5%, which keeps what the estimate cannot tell from the front; 0: the fronts alone).
        k: LUT inputs for ABC.
        executor: where ABC maps (:func:`iotable.synth.cost`'s ``executor``: ``None``, a
            ``concurrent.futures.Executor`` or a ``dask.distributed.Client``; anything else is refused first).
        frequency, timeout: :func:`iotable.hdl.implement`'s clock goal and time limit per run.
        progress: a bar per stage; ``None``: in a terminal or a notebook.

    Returns:
        A :class:`SweepResult`: every candidate's :class:`SweepPoint`, the front, ``to_csv``, ``to_markdown`` and
        ``plot``.

    Raises:
        OptionError: a bad variant or option (before any work). CacheError: a folder or record that is not to
            be trusted. The stages' own errors (ABC or the FPGA tools missing, ...) pass through.

    Example (needs ABC, yosys and nextpnr-ice40)::

        result = iotable.sweep.sweep(
            [Variant("a", model_a, precompute={"input_domain": domain}), Variant("b", model_b, precompute=...)],
            targets="ice40-hx8k", pipelines=(1, 2), seeds=(1, 2), folder="sweep-jsc",
        )
        print(result.to_markdown()); result.plot()
    """
    plan = _Plan.of(variants, targets, pipelines, efforts, seeds, near=near, k=k)
    for name, value in (("frequency", frequency), ("timeout", timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            unit = "MHz" if name == "frequency" else "seconds"
            msg = f"sweep: {name} must be a positive number of {unit}, received {value!r}"
            raise OptionError(msg)
    check_executor(executor, what="sweep", error=OptionError)
    options = {"frequency": frequency, "timeout": timeout}
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="iotable-sweep-") as tmp:
            return _Sweep(plan, RecordStore(tmp), executor=executor, options=options, progress=progress).run()
    return _Sweep(plan, RecordStore(folder), executor=executor, options=options, progress=progress).run()


@dataclass(frozen=True)
class _Plan:
    """The checked variants and options, and every candidate."""

    variants: tuple[Variant, ...]
    targets: tuple[str, ...]
    pipelinings: tuple[Pipelining, ...]
    efforts: tuple[str, ...]
    seeds: tuple[int, ...]
    near: float
    k: int

    @classmethod
    def of(cls, variants: Any, targets: Any, pipelines: Any, efforts: Any, seeds: Any, *, near: Any, k: Any) -> _Plan:
        """Every option checked before any work."""
        from ..hdl.implement import parse_target

        if isinstance(variants, Mapping):
            variants = [v if isinstance(v, Variant) else Variant(str(n), v) for n, v in variants.items()]
        chosen = tuple(variants) if isinstance(variants, Iterable) else ()
        if not chosen or not all(isinstance(v, Variant) for v in chosen):
            msg = f"sweep: expected one or more iotable.sweep.Variant, received {variants!r:.80}"
            raise OptionError(msg)
        for v in chosen:
            v.check()
        names = [v.name for v in chosen]
        if len(set(names)) != len(names):
            msg = f"sweep: variant names must be distinct, received {names}; name each variant once"
            raise OptionError(msg)
        target_names = check_strings(targets, name="targets")
        for target in target_names:
            parse_target(target, package=None, what="sweep")
        if isinstance(near, bool) or not isinstance(near, (int, float)) or not 0 <= near < 10:
            msg = f"sweep: near must be a fraction from 0 (the front alone) to below 10, received {near!r}"
            raise OptionError(msg)
        efforts = check_strings(efforts, name="efforts", allowed=EFFORTS)
        return cls(chosen, target_names, check_pipelinings(pipelines), efforts, check_seeds(seeds), float(near),
                   check_k(k, what="sweep"))  # fmt: skip

    def candidates(self) -> list[Candidate]:
        """Every combination, variant by variant."""
        return [
            Candidate(v.name, t, p, e, s)
            for v in self.variants
            for t in self.targets
            for p in self.pipelinings
            for e in self.efforts
            for s in self.seeds
        ]


@dataclass
class _Sweep:
    """One run of a sweep: the stages, their records, and the tables loaded on demand."""

    plan: _Plan
    store: RecordStore
    executor: Any
    options: dict[str, Any]
    progress: bool | None
    results: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    nets: dict[str, TableNetwork] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    reused: dict[str, int] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    tools: dict[str, list[list[str]]] = field(default_factory=dict)

    def run(self) -> SweepResult:
        """Every stage in order, the two fronts between them; the result with the final front marked."""
        variants = {v.name: v for v in self.plan.variants}
        self.fingerprints.update((v.name, v.fingerprint()) for v in self.plan.variants)
        self._stage("estimate", [(v,) for v in variants], lambda n: ({"k": 6}, lambda: self._estimate(variants[n])))
        self._stage("tables", [(v,) for v in variants], lambda n: ({}, lambda: self._tables(variants[n])))
        self._stage("verify", [(v,) for v in variants], lambda n: self._verify_job(variants[n]))
        self._stage("latency", [(v, str(p)) for v in variants for p in self.plan.pipelinings], self._latency_job)
        candidates = [c for c in self.plan.candidates() if self._correct(c)]
        cheap = self._front(candidates, lambda c: self.results["estimate", c.variant]["luts"])
        abc = list(dict.fromkeys((c.variant, c.effort) for c in cheap))
        self._stage("abc", abc, self._abc_job)
        placed = self._front(cheap, lambda c: self.results["abc", c.variant, c.effort]["luts"])
        self._stage("implement", [(c,) for c in placed], self._implement_job)  # type: ignore[misc]
        points = [self._point(c, c in cheap, c in placed) for c in self.plan.candidates()]
        return SweepResult.of(points, folder=self.store.folder, runs=self.runs, reused=self.reused)

    # -- the stages -------------------------------------------------------------------------------------------

    def _stage(self, stage: str, items: list[tuple[Any, ...]], job: Callable[..., Any]) -> None:
        """Each item's record, or the stage run for it and its record written; a bar over the items."""
        self.runs.setdefault(stage, 0)
        self.reused.setdefault(stage, 0)
        with progress_bar(total=len(items), desc=f"sweep: {stage}", enabled=self.progress, unit="step",
                          auto_min=1) as bar:  # fmt: skip
            for item in items:
                options, work = job(*item)
                variant = item[0].variant if isinstance(item[0], Candidate) else item[0]
                fingerprint = self.fingerprints[variant]
                key = (stage, *(_name(part) for part in item))
                result = self.store.load(stage, fingerprint, options) if options is not None else None
                if result is None:
                    result = work()
                    if options is not None:  # None: a result that no record may stand for (an unkeyed scorer)
                        self.store.save(stage, fingerprint, options, result, variant=variant)
                    self.runs[stage] += 1
                else:
                    self.reused[stage] += 1
                self.results[key] = result
                bar.update(1)

    def _estimate(self, variant: Variant) -> dict[str, Any]:
        return stages.estimate_stage(variant, self._net(variant.name) if variant.is_bundle else None)

    def _tables(self, variant: Variant) -> dict[str, Any]:
        folder = self._tables_folder(variant.name)
        net, result = stages.tables_stage(variant, folder)
        self.nets[variant.name] = net
        return {**result, "manifest": self._manifest(variant.name)}

    def _verify_job(self, variant: Variant) -> tuple[Any, Callable[[], dict[str, Any]]]:
        scorer = variant.scorer_digest()
        options = {"inputs": variant.inputs_digest(), "scorer": scorer}
        unkeyed = variant.scorer is not None and scorer is None  # measured again on every run
        return (None if unkeyed else options), lambda: stages.verify_stage(variant, self._net(variant.name))

    def _latency_job(self, name: str, setting: str) -> tuple[Any, Callable[[], dict[str, Any]]]:
        """Registers inside the tables (``pipeline_luts``) follow their LUT depth: ABC's mapping, its k and version."""
        pipelining = next(p for p in self.plan.pipelinings if str(p) == setting)
        options: dict[str, Any] = {"pipeline": pipelining.pipeline, "pipeline_luts": pipelining.pipeline_luts}
        if pipelining.pipeline_luts:
            options.update(k=self.plan.k, abc_version=stages.abc_version())
        return options, lambda: stages.latency_stage(
            self._net(name), pipelining, k=self.plan.k, executor=self.executor, cache_dir=self.store.folder / "abc"
        )

    def _abc_job(self, name: str, effort: str) -> tuple[Any, Callable[[], dict[str, Any]]]:
        options = {"effort": effort, "k": self.plan.k, "abc_version": stages.abc_version()}
        return options, lambda: stages.abc_stage(
            self._net(name), effort=effort, k=self.plan.k, executor=self.executor, cache_dir=self.store.folder / "abc"
        )

    def _implement_job(self, c: Candidate) -> tuple[Any, Callable[[], dict[str, Any]]]:
        options = {**_candidate_options(c, self.plan.k), "frequency": self.options["frequency"]}
        if c.target not in self.tools:  # asked once a run: yosys, nextpnr (a new one measures again)
            self.tools[c.target] = [list(t) for t in stages.tool_versions(c.target, timeout=self.options["timeout"])]
        options["tools"] = self.tools[c.target]
        if c.pipelining.pipeline_luts:  # the tables are exported mapped by ABC
            options["abc_version"] = stages.abc_version()
        return options, lambda: stages.implement_stage(
            self._net(c.variant), c, k=self.plan.k, executor=self.executor, cache_dir=self.store.folder,
            options=self.options,
        )  # fmt: skip

    # -- tables on demand ---------------------------------------------------------------------------------------

    def _tables_folder(self, name: str) -> Path:
        return self.store.folder / "tables" / self.fingerprints[name][:40]

    def _manifest(self, name: str) -> str:
        try:
            return digest_file(self._tables_folder(name) / "manifest.json")
        except (Untrusted, OSError) as exc:
            msg = (
                f"sweep: the tables of variant {name!r} kept in the sweep's folder cannot be trusted ({exc}); remove "
                f"{self._tables_folder(name)} and its record to build them again"
            )
            raise CacheError(msg) from None

    def _net(self, name: str) -> TableNetwork:
        """The variant's tables: built this run, else the bundle its tables record names, checked first."""
        if name in self.nets:
            return self.nets[name]
        variant = next(v for v in self.plan.variants if v.name == name)
        record = self.results.get(("tables", name))
        if record is None:  # a bundle variant's estimate, before its tables stage
            self.nets[name] = stages.load_tables(variant.model)
        elif record.get("manifest") != self._manifest(name):
            msg = (
                f"sweep: the tables of variant {name!r} in {self._tables_folder(name)} are not the ones its record "
                f"names; remove the record {self.store.path('tables', self.fingerprints[name], {})} to build them again"
            )
            raise CacheError(msg)
        else:
            self.nets[name] = stages.load_tables(self._tables_folder(name))
        return self.nets[name]

    # -- fronts and points --------------------------------------------------------------------------------------

    def _correct(self, c: Candidate) -> bool:
        """Whether the variant's tables agreed with its model (or were not checked)."""
        return not self.results["verify", c.variant].get("mismatches")

    def _front(self, candidates: list[Candidate], luts: Callable[[Candidate], int]) -> list[Candidate]:
        """The candidates on or near the front of (LUTs, latency, accuracy) among those of the same target,
        pipelining and seed: registers trade latency for an Fmax no cheap stage knows, so each setting keeps its
        own front (and a variant dominated under every setting reaches no later stage)."""
        groups: dict[tuple[Any, ...], list[Candidate]] = {}
        for c in candidates:
            groups.setdefault((c.target, c.pipelining, c.seed), []).append(c)
        kept: set[Candidate] = set()
        for group in groups.values():
            points = [
                (luts(c), self.results["latency", c.variant, str(c.pipelining)]["latency"],
                 self.results["verify", c.variant]["accuracy"])
                for c in group
            ]  # fmt: skip
            kept.update(group[i] for i in front(points, _CHEAP, near=self.plan.near))
        return [c for c in candidates if c in kept]

    def _point(self, c: Candidate, cheap: bool, placed: bool) -> SweepPoint:
        verified = self.results["verify", c.variant]
        abc = self.results.get(("abc", c.variant, c.effort)) if cheap else None
        impl = self.results.get(("implement", _name(c))) if placed else None
        stage = "implement" if impl else "abc" if abc else "verify"
        return SweepPoint(
            variant=c.variant, fingerprint=self.fingerprints[c.variant], target=c.target,
            pipeline=c.pipelining.pipeline, pipeline_luts=c.pipelining.pipeline_luts, effort=c.effort, seed=c.seed,
            k=self.plan.k, estimate_luts=self.results["estimate", c.variant]["luts"],
            abc_luts=abc["luts"] if abc else None,
            latency=impl["latency"] if impl else self.results["latency", c.variant, str(c.pipelining)]["latency"],
            samples=verified["samples"], mismatches=verified["mismatches"], accuracy=verified["accuracy"],
            luts=impl["luts"] if impl else None, fmax_mhz=impl["fmax_mhz"] if impl else None,
            flip_flops=impl["flip_flops"] if impl else None, stage=stage,
            frequency=self.options["frequency"],
        )  # fmt: skip


def _candidate_options(c: Candidate, k: int) -> dict[str, Any]:
    """What a candidate's design and implementation depend on, beside the variant."""
    return {
        "target": c.target, "pipeline": c.pipelining.pipeline, "pipeline_luts": c.pipelining.pipeline_luts,
        "effort": c.effort, "seed": c.seed, "k": k,
    }  # fmt: skip


def _name(part: Any) -> str:
    """A stage item's part as a key: a candidate by its options, anything else as text."""
    if isinstance(part, Candidate):
        return hashlib.sha256(repr([part.variant, sorted(_candidate_options(part, 0).items())]).encode()).hexdigest()
    return str(part)
