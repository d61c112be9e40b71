"""iotable.sweep: stages cheapest first, place and route only near the Pareto front, resumable, tamper-proof."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import stat
import sys
import threading
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmarks import workloads

import iotable
from iotable.cli import main
from iotable.errors import CacheError, MatplotlibNotInstalledError, OptionError
from iotable.sweep import Pipelining, Variant, front, stages, sweep
from tests.optional import require, require_program

# three small LogicNets-style MLPs: "small" has the fewest LUTs, "wide" the most, "deep" a third table layer
CONFIGS = {
    "small": workloads.MLPConfig(6, (4, 3), (2, 2), (2, 2), output_bits=2),
    "wide": workloads.MLPConfig(6, (8, 3), (3, 3), (2, 2), output_bits=2),
    "deep": workloads.MLPConfig(6, (4, 4, 3), (2, 2, 2), (2, 2, 2), output_bits=2),
}
STAGES = ("estimate_stage", "tables_stage", "verify_stage", "latency_stage", "abc_stage", "implement_stage")


def _scorer(accuracy: float) -> Any:
    """A scorer that gives every network of a variant the same accuracy."""
    return lambda net: accuracy


def _variants(accuracy: dict[str, float] | None = None) -> list[Variant]:
    """The three small variants, each with 32 inputs to verify on (and, with ``accuracy``, a scorer)."""
    result = []
    for seed, (name, config) in enumerate(CONFIGS.items()):
        domain = workloads.input_domain_of(config)
        gen = torch.Generator().manual_seed(seed)
        inputs = torch.tensor(domain.values)[torch.randint(0, len(domain.values), (32, config.inputs), generator=gen)]
        scorer = None if accuracy is None else _scorer(accuracy[name])
        model = workloads.build_mlp(config, seed=seed).eval()
        result.append(Variant(name, model, precompute={"input_domain": domain}, inputs=inputs, scorer=scorer))
    return result


def _fake_implement(net: Any, candidate: Any, **_: Any) -> dict[str, Any]:
    """Place and route stood in for by numbers that follow the design: LUTs from the tables, Fmax from the
    pipelining and the seed (deterministic), the latency the netlist has."""
    luts = sum(t.rows for t in net.tables) // 8
    fmax = 100.0 * (1 + candidate.pipelining.pipeline) + candidate.seed
    latency = stages.latency_stage(net, candidate.pipelining)["latency"]
    return {"luts": luts, "lut_inputs": 4, "flip_flops": 0, "fmax_mhz": fmax, "latency": latency, "placed": True,
            "tools": []}  # fmt: skip


#: The tools' versions the stand-in for place and route answers with (a test changes them to upgrade the tools).
FAKE_TOOLS = {"version": "0.1"}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every stage counted as it runs, place and route stood in for by :func:`_fake_implement` (and the place
    and route tools' versions by :data:`FAKE_TOOLS`)."""
    require_program("berkeley-abc", package="berkeley-abc")
    monkeypatch.setitem(FAKE_TOOLS, "version", "0.1")
    monkeypatch.setattr(stages, "tool_versions", lambda target, **_: (("yosys", FAKE_TOOLS["version"]),))
    calls: Counter[str] = Counter()
    for name in STAGES:
        original = _fake_implement if name == "implement_stage" else getattr(stages, name)

        def wrapper(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(stages, name, wrapper)
    return calls


def _run(folder: Path, **options: Any) -> iotable.sweep.SweepResult:
    """The acceptance sweep's shape: 3 variants x 2 pipelining settings x 2 seeds."""
    variants = options.pop("variants", None) or _variants()
    options.setdefault("progress", False)
    return sweep(variants, targets="ice40-hx1k", pipelines=(1, "none"), seeds=(1, 2), folder=folder, **options)


# -- the front and the pruning ------------------------------------------------------------------------------------


def test_pareto_front_keeps_what_nothing_dominates_and_near_widens_it() -> None:
    """front() keeps the non-dominated points, treats None as worst, and near= adds points close to the front."""
    points = [(10, 2), (12, 1), (12, 2), (30, 1), (10, None)]
    assert front(points, ("min", "min")) == [0, 1]
    assert front(points, ("min", "min"), near=0.25) == [0, 1, 2]
    assert front([(1, 0.9), (2, 0.95), (2, 0.9)], ("min", "max")) == [0, 1]
    assert front([(1, 1), (1, 1)], ("min", "min")) == [0, 1]  # equal points both stay


def test_sweep_places_and_routes_only_the_front_of_the_cheap_stages(tmp_path: Path, counted: Counter[str]) -> None:
    """3 variants x 2 pipelinings x 2 seeds: the variant dominated on the cheap numbers is never placed, the
    result's front is over what was placed, and every stage ran once per item it needed."""
    result = _run(tmp_path / "s")
    assert len(result.points) == 12
    placed = {p.variant for p in result.placed}
    assert "wide" not in placed and placed  # more LUTs than "small" at the same latency: dominated
    assert counted["implement_stage"] == len(result.placed) < 12
    assert counted["estimate_stage"] == counted["tables_stage"] == counted["verify_stage"] == 3
    assert counted["latency_stage"] == 6 + len(result.placed)  # the stand-in asks for the latency too
    assert all(p.stage == "verify" and p.luts is None for p in result.points if p.variant == "wide")
    assert all(p.samples == 32 and p.mismatches == 0 for p in result.points)
    assert result.front and set(result.front) <= set(result.placed)
    best = [p.objectives() for p in result.placed]
    assert [p for p in result.placed if p.front] == [
        result.placed[i] for i in front(best, ("min", "max", "min", "max"))
    ]


def test_near_carries_more_candidates_to_place_and_route(
    tmp_path: Path, counted: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """With a wide margin every variant is near the front and is placed: the pruning above is the front's doing;
    progress=True shows a bar per stage."""
    result = _run(tmp_path / "s", near=5.0, progress=True)
    assert len(result.placed) == 12 == counted["implement_stage"]
    err = capsys.readouterr().err
    assert all(f"sweep: {stage}" in err for stage in ("estimate", "tables", "verify", "latency", "abc", "implement"))


def test_accuracy_keeps_a_larger_but_better_variant(tmp_path: Path, counted: Counter[str]) -> None:
    """A scorer's accuracy is an objective: the variant with more LUTs but the best accuracy is placed too."""
    result = _run(tmp_path / "s", variants=_variants({"small": 0.7, "wide": 0.9, "deep": 0.6}))
    assert {p.variant for p in result.placed} == {"small", "wide"}
    assert {p.accuracy for p in result.points if p.variant == "wide"} == {0.9}
    rows = {v.name: sum(t.rows for t in iotable.precompute(v.model, **v.precompute).tables) for v in _variants()}
    assert all(p.luts == rows[p.variant] // 8 for p in result.placed)  # each point holds its own measurement


def test_the_executor_reaches_abc(tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """executor= is passed to iotable.synth.cost, which maps on it."""
    seen = []
    original = stages.cost
    monkeypatch.setattr(stages, "cost", lambda net, **kw: seen.append(kw["executor"]) or original(net, **kw))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        _run(tmp_path / "s", executor=pool)
    assert seen and all(e is pool for e in seen)


def test_a_bad_executor_is_refused_before_any_stage(tmp_path: Path, counted: Counter[str]) -> None:
    """An executor of none of the accepted kinds is refused by sweep() itself: no stage runs, no folder is made."""
    with pytest.raises(OptionError, match=r"sweep: executor must be None.*received object.*docs/cluster.md"):
        _run(tmp_path / "s", executor=object())
    assert sum(counted.values()) == 0 and not (tmp_path / "s").exists()


# -- latency with registers inside the tables ---------------------------------------------------------------------

PIPELINED = {"pipeline": 1, "pipeline_luts": 1}


def _export_latency(variant: Variant, folder: Path) -> int:
    """The latency of the design export writes for ``variant`` with :data:`PIPELINED` and k=4."""
    net = iotable.precompute(variant.model, **variant.precompute)
    return iotable.hdl.export(net, folder, vectors=1, tables="mapped", k=4, **PIPELINED).latency


def test_the_latency_stage_counts_the_registers_inside_the_tables(tmp_path: Path) -> None:
    """With pipeline_luts the latency stage gives the exported design's latency, above the layer registers alone."""
    require_program("berkeley-abc", package="berkeley-abc")
    variant = _variants()[1]  # "wide": tables of 6 address bits, two levels of LUT4
    net = iotable.precompute(variant.model, **variant.precompute)
    inside = stages.latency_stage(net, Pipelining.parse(PIPELINED), k=4, cache_dir=tmp_path / "abc")["latency"]
    assert inside == _export_latency(variant, tmp_path / "d") > stages.latency_stage(net, Pipelining(1))["latency"]


def test_points_not_placed_carry_the_latency_of_their_pipelined_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every point of a pipeline_luts setting, placed or pruned, has its design's latency; the plain setting of the
    same pipeline= keeps its own record; a new ABC measures the pipelined latencies again, not the plain ones."""
    require_program("berkeley-abc", package="berkeley-abc")
    fake = types.SimpleNamespace(luts=1, lut_inputs=4, flip_flops=1, fmax_mhz=100.0, placed=True, tools=())
    monkeypatch.setattr(stages, "implement", lambda design, **_: fake)
    monkeypatch.setattr(stages, "tool_versions", lambda target, **_: (("yosys", "0.1"),))
    options: dict[str, Any] = {"targets": "ice40-hx1k", "pipelines": (1, PIPELINED), "k": 4, "progress": False}
    result = sweep(_variants(), folder=tmp_path / "s", **options)
    expected = {v.name: _export_latency(v, tmp_path / v.name) for v in _variants()}
    pipelined = [p for p in result.points if p.pipeline_luts]
    assert [p.latency for p in pipelined] == [expected[p.variant] for p in pipelined]
    assert any(p.stage != "implement" and p.latency > 2 for p in pipelined)  # pruned, yet its true latency
    assert {p.latency for p in result.points if not p.pipeline_luts} == {2, 3}
    monkeypatch.setattr("iotable.synth.abcrun._version", lambda program, mtime: "UC Berkeley, ABC 99.0 (test)")
    again = sweep(_variants(), folder=tmp_path / "s", **options)
    assert again.runs["latency"] == again.reused["latency"] == 3 and again.points == result.points


# -- the tools' versions ------------------------------------------------------------------------------------------


def test_a_new_abc_maps_again(tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """ABC's records are keyed on its version: another version line (an upgrade) runs the ABC stage again, and
    place and route, which does not use it here, is reused."""
    first = _run(tmp_path / "s")
    assert _run(tmp_path / "s").runs["abc"] == 0  # the same ABC: every record reused
    monkeypatch.setattr("iotable.synth.abcrun._version", lambda program, mtime: "UC Berkeley, ABC 99.0 (test)")
    again = _run(tmp_path / "s")
    assert again.runs["abc"] == first.runs["abc"] > 0 and again.reused["abc"] == 0
    assert again.runs["implement"] == 0 and again.points == first.points


def test_new_place_and_route_tools_place_again(tmp_path: Path, counted: Counter[str]) -> None:
    """Place and route's records are keyed on the tools' versions: an upgraded yosys places every candidate
    again, and ABC's records are reused."""
    first = _run(tmp_path / "s")
    assert _run(tmp_path / "s").runs["implement"] == 0  # the same tools: every record reused
    FAKE_TOOLS["version"] = "0.2"
    again = _run(tmp_path / "s")
    assert again.runs["implement"] == len(first.placed) > 0 and again.reused["implement"] == 0
    assert again.runs["abc"] == 0 and again.points == first.points


# -- resuming and records -----------------------------------------------------------------------------------------


def test_a_rerun_after_a_crash_redoes_no_finished_work(
    tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that dies in its second place and route is rerun: no finished stage runs again, only the missing
    place and route, and the result equals an uninterrupted sweep's."""
    fake = stages.implement_stage
    runs = Counter[str]()

    def crash_second(*args: Any, **kwargs: Any) -> Any:
        runs["implement"] += 1
        if runs["implement"] == 2:
            raise KeyboardInterrupt
        return fake(*args, **kwargs)

    monkeypatch.setattr(stages, "implement_stage", crash_second)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "s")
    before = Counter(counted)
    monkeypatch.setattr(stages, "implement_stage", fake)
    result = _run(tmp_path / "s")
    redone = {name: counted[name] - before[name] for name in STAGES}
    assert redone["implement_stage"] == len(result.placed) - 1  # all but the one finished before the crash
    assert all(redone[name] == 0 for name in STAGES if name not in ("implement_stage", "latency_stage"))
    assert result.reused["implement"] == 1 and result.runs["abc"] == result.runs["tables"] == 0
    again = _run(tmp_path / "s")
    assert sum(again.runs.values()) == 0 and again.points == result.points
    assert again.points == _run(tmp_path / "fresh").points


def _records(folder: Path, stage: str) -> list[Path]:
    return sorted((folder / "records").glob(f"{stage}-*.json"))


def _edit(path: Path, change: Any) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(fingerprint="0" * 64),
        lambda r: r["options"].update(k=4),
        lambda r: r.update(stage="estimate"),
        lambda r: r.update(result=[]),
    ],
    ids=["fingerprint", "options", "stage", "result"],
)
def test_an_edited_record_is_not_reused(tmp_path: Path, counted: Counter[str], change: Any) -> None:
    """An ABC record edited (another fingerprint, options, stage, or a broken result) is measured again."""
    _run(tmp_path / "s")
    [first, *_] = _records(tmp_path / "s", "abc")
    _edit(first, lambda r: r["result"].update(luts=1))  # a forged count with a matching key would be believed ...
    _edit(first, change)  # ... but not once the record names another variant or options
    result = _run(tmp_path / "s")
    assert result.runs["abc"] == 1 and result.reused["abc"] == len(_records(tmp_path / "s", "abc")) - 1
    assert 1 not in {p.abc_luts for p in result.points}


def test_an_unedited_record_is_reused(tmp_path: Path, counted: Counter[str]) -> None:
    """The tamper test's other side: the same forged count, the key left alone, is read back (the check above is
    what refuses it)."""
    _run(tmp_path / "s")
    [first, *_] = _records(tmp_path / "s", "abc")
    _edit(first, lambda r: r["result"].update(luts=1))
    assert _run(tmp_path / "s").runs["abc"] == 0


def test_a_record_others_may_write_stops_the_sweep(tmp_path: Path, counted: Counter[str]) -> None:
    """A record writable by other users is not trusted: a CacheError names it and the fix."""
    _run(tmp_path / "s")
    [first, *_] = _records(tmp_path / "s", "estimate")
    os.chmod(first, first.stat().st_mode | stat.S_IWOTH)
    with pytest.raises(CacheError, match=r"not to be trusted.*writable by other users.*remove it"):
        _run(tmp_path / "s")


def test_kept_tables_that_changed_are_refused(tmp_path: Path, counted: Counter[str]) -> None:
    """The tables a record names are checked against the manifest digest it holds before they are loaded."""
    _run(tmp_path / "s")
    [manifest, *_] = sorted((tmp_path / "s" / "tables").glob("*/manifest.json"))
    manifest.write_text(manifest.read_text().replace('"', '"', 1) + " ")
    [abc, *_] = _records(tmp_path / "s", "abc")
    abc.unlink()  # the next run needs the tables again
    with pytest.raises(CacheError, match="not the ones its record names"):
        _run(tmp_path / "s")


def test_the_fingerprint_follows_the_content() -> None:
    """Equal models give one fingerprint; a changed weight or precompute argument gives another."""
    a, b = _variants()[0], _variants()[0]
    assert a.fingerprint() == b.fingerprint()
    with torch.no_grad():
        b.model.fc0.weight.add_(1.0)
    assert a.fingerprint() != b.fingerprint()
    c = Variant("small", a.model, precompute={**a.precompute, "max_rows": 1 << 12})
    assert c.fingerprint() != a.fingerprint()


# -- options, outputs, command line -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"targets": "fpga-9000"}, "target"),
        ({"pipelines": -1}, "pipeline must be a count"),
        ({"pipelines": {"pipeline": 1, "luts": 2}}, "pipeline and pipeline_luts"),
        ({"efforts": "hard"}, "efforts= must be one or more of"),
        ({"seeds": (1, "2")}, "seeds= must be"),
        ({"near": -0.1}, "near must be a fraction"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"folder": 3}, "folder must be a folder path"),
        ({"executor": "dask"}, "executor must be None .* received str"),
    ],
)
def test_bad_options_are_refused_before_any_work(tmp_path: Path, options: dict[str, Any], words: str) -> None:
    """Every option is checked first: an OptionError names it, and the folder stays empty."""
    with pytest.raises(OptionError, match=words):
        sweep(_variants()[:1], **{"folder": tmp_path / "s", **options})
    assert not (tmp_path / "s").exists()


def test_bad_variants_are_refused(tmp_path: Path) -> None:
    """Duplicate names, a module without precompute arguments and a path that is no bundle are refused."""
    v = _variants()[0]
    with pytest.raises(OptionError, match="distinct"):
        sweep([v, v])
    with pytest.raises(OptionError, match="input_domain"):
        sweep([Variant("m", v.model)])
    with pytest.raises(OptionError, match="bundle directory"):
        sweep([Variant("b", str(tmp_path))])
    with pytest.raises(OptionError, match="pipeline"):
        Pipelining.parse("fast")


def test_the_table_as_csv_markdown_and_a_png(tmp_path: Path, counted: Counter[str]) -> None:
    """to_csv has a row per candidate with its options and fingerprint; to_markdown marks the front; plot writes
    a PNG."""
    require("matplotlib", install="pip install -e '.[sweep]'")
    result = _run(tmp_path / "s")
    lines = result.to_csv(tmp_path / "t.csv").splitlines()
    assert (tmp_path / "t.csv").read_text().splitlines() == lines and len(lines) == 13
    assert lines[0].startswith("variant,fingerprint,target,pipeline,pipeline_luts,effort,seed")
    assert result.to_markdown().count("\n| * |") == len(result.front)
    result.plot(tmp_path / "front.png")
    assert (tmp_path / "front.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib

    matplotlib.use("Agg")  # what a notebook gets is a pyplot figure: drawn here without a display
    ax = result.plot(x="latency", y="luts")
    front_line = ax.get_lines()[0]
    assert ax.get_xlabel() == "latency (cycles)" and len(front_line.get_xdata()) == len(result.front)
    with pytest.raises(OptionError, match="not a number of the points"):
        result.plot(x="variant")
    point = result.front[0]
    variant = next(v for v in _variants() if v.name == point.variant)
    design = point.design(variant, tmp_path / "again", vectors=1)  # the point's design, from its record
    assert design.latency == point.latency and point.implement_options()["target"] == "ice40-hx1k"
    with torch.no_grad():
        variant.model.fc0.bias.add_(0.5)  # other weights: not the variant the point measured
    with pytest.raises(OptionError, match="expected the variant it was measured on"):
        point.design(variant, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_the_command_line_sweeps_bundles_and_writes_the_plot(
    tmp_path: Path, counted: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """iotable sweep over two bundles prints the table, writes the CSV and the PNG, and resumes from --folder."""
    require("matplotlib", install="pip install -e '.[sweep]'")
    bundles = []
    for v in _variants()[:2]:
        bundles.append(str(iotable.save(iotable.precompute(v.model, **v.precompute), tmp_path / v.name)))
    args = ["sweep", *bundles, "--target", "ice40-hx1k", "--pipeline", "1", "--pipeline", "none", "--seed", "3",
            "--folder", str(tmp_path / "s"), "--csv", str(tmp_path / "t.csv"), "--plot", str(tmp_path / "p.png")]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| small | ice40-hx1k |" in out and "wrote the Pareto plot" in out
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert main(args) == 0
    assert "implement 0/" in capsys.readouterr().out


def test_the_command_line_refuses_a_bad_pipeline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--pipeline takes K, none or K:L: anything else is a usage error."""
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(tmp_path), "--pipeline", "x:1"])
    assert exit_.value.code == 2 and "expected K, none or K:L" in capsys.readouterr().err


# -- the acceptance size, with the real tools -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_jsc_s_sized_sweep_places_and_routes_only_the_front_on_ice40(tmp_path: Path) -> None:
    """3 JSC-S-sized variants x 2 pipelinings x 2 seeds on an iCE40 HX8K with nextpnr-ice40: dominated candidates
    are never placed, and a rerun places nothing."""
    require_program("berkeley-abc", package="berkeley-abc")
    require_program("yosys", package="yosys")
    require_program("nextpnr-ice40", package="nextpnr-ice40")
    base = workloads.MLP_CONFIGS["jsc-s"]
    configs = {"jsc-s": base, "jsc-s-wide": workloads.MLPConfig(16, (64, 32, 32, 32, 5), (3, 4, 4, 3, 3), (2,) * 5,
               output_bits=2), "jsc-s-seed1": base}  # fmt: skip
    variants = []
    for seed, (name, config) in enumerate(configs.items()):
        domain = workloads.input_domain_of(config)
        inputs = torch.tensor(domain.values)[
            torch.randint(0, len(domain.values), (64, 16), generator=torch.Generator())
        ]
        model = workloads.build_mlp(config, seed=seed).eval()
        variants.append(Variant(name, model, precompute={"input_domain": domain}, inputs=inputs))
    placed = Counter[str]()
    original = stages.implement_stage

    def counting(net: Any, candidate: Any, **kwargs: Any) -> Any:
        placed[candidate.variant] += 1
        return original(net, candidate, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages, "implement_stage", counting)
        result = sweep(variants, targets="ice40-hx8k", pipelines=(1, 2), seeds=(1, 2), folder=tmp_path / "s",
                       timeout=1800, progress=False)  # fmt: skip
        assert sum(placed.values()) == len(result.placed) < 12
        assert placed["jsc-s-wide"] == 0  # wider fan-in: more LUTs at the same latency
        assert result.front and all(p.fmax_mhz and p.luts > 300 for p in result.front)
        again = sweep(variants, targets="ice40-hx8k", pipelines=(1, 2), seeds=(1, 2), folder=tmp_path / "s",
                      progress=False)  # fmt: skip
    assert sum(placed.values()) == len(result.placed) and again.points == result.points


def test_the_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, plot() raises MatplotlibNotInstalledError naming iotable[sweep], and writes nothing."""
    result = _run(tmp_path / "s")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it now fails
    with pytest.raises(MatplotlibNotInstalledError, match=r"iotable\[sweep\]"):
        result.plot(tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_a_scorer_that_cannot_be_keyed_is_asked_again(tmp_path: Path, counted: Counter[str]) -> None:
    """A scorer holding a value no key can read (a lock) is never trusted from a record: a rerun scores again;
    a plain scorer's record is reused."""
    lock = threading.Lock()
    plain, locked = _variants({"small": 0.5, "wide": 0.5, "deep": 0.5})[:2]
    locked = dataclasses.replace(locked, scorer=lambda net: 0.5 if lock else 0.0)
    sweep([plain, locked], targets="ice40-hx1k", folder=tmp_path / "s", progress=False)
    again = sweep([plain, locked], targets="ice40-hx1k", folder=tmp_path / "s", progress=False)
    assert again.runs["verify"] == 1 and again.reused["verify"] == 1


def test_one_candidate_through_the_real_tools(tmp_path: Path) -> None:
    """The place-and-route stage itself: one small variant exported and placed on an iCE40 HX1K by yosys and
    nextpnr-ice40; its LUTs, Fmax and latency land in the point, and the rerun reads them back."""
    require_program("berkeley-abc", package="berkeley-abc")
    require_program("yosys", package="yosys")
    require_program("nextpnr-ice40", package="nextpnr-ice40")
    variant = _variants()[0]
    result = sweep([variant], targets="ice40-hx1k", folder=tmp_path / "s", progress=False)
    [point] = result.points
    assert point.stage == "implement" and point.front and point.luts and point.latency == 2
    assert point.fmax_mhz is not None and point.fmax_mhz > 50
    again = sweep([variant], targets="ice40-hx1k", folder=tmp_path / "s", progress=False)
    assert again.points == result.points and again.runs["implement"] == 0
    [record] = [json.loads(path.read_text()) for path in _records(tmp_path / "s", "implement")]
    assert record["options"]["tools"] == record["result"]["tools"]  # keyed on the versions implement ran


def test_tables_that_disagree_with_their_model_reach_no_front(
    tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variant whose verification finds mismatches goes no further than verification."""
    original = stages.verify

    def verify(model: Any, net: Any, inputs: Any) -> Any:
        report = original(model, net, inputs)
        return dataclasses.replace(report, mismatches=1) if model is small.model else report

    small = _variants()[0]
    monkeypatch.setattr(stages, "verify", verify)
    result = _run(tmp_path / "s", variants=[small, *_variants()[1:]])
    assert all(p.stage == "verify" and p.mismatches == 1 for p in result.points if p.variant == "small")
    assert result.placed and "small" not in {p.variant for p in result.placed}


def test_pipelined_tables_are_exported_mapped_with_their_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A {"pipeline": 1, "pipeline_luts": 1} setting exports the tables as LUT netlists with registers inside, and
    the point's latency is the exported design's (more than the layer registers alone)."""
    require_program("berkeley-abc", package="berkeley-abc")
    designs = []

    def implement(design: Any, **options: Any) -> Any:
        designs.append(design)
        return types.SimpleNamespace(luts=1, lut_inputs=4, flip_flops=1, fmax_mhz=100.0, placed=True, tools=())

    monkeypatch.setattr(stages, "implement", implement)
    variant = _variants()[1]  # "wide": tables of 6 address bits, two levels of LUT4
    result = sweep([variant], targets="ice40-hx1k", pipelines=(1, {"pipeline": 1, "pipeline_luts": 1}),
                   folder=tmp_path / "s", near=5.0, progress=False, k=4)  # fmt: skip
    plain, pipelined = result.points
    assert plain.latency == 2 < pipelined.latency == designs[1].latency
    assert pipelined.export_options() == {"pipeline": 1, "pipeline_luts": 1, "tables": "mapped", "k": 4}


def test_the_command_line_help_names_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    """``iotable sweep --help`` lists the targets, pipelining, seeds, folder and plot options; ``iotable --help``
    lists the command."""
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    assert all(word in text for word in ("--target", "K[:L]", "--seed", "--folder", "FILE.png", "Pareto front"))
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "    sweep " in capsys.readouterr().out
