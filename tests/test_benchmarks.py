"""The benchmark suite's baselines compute exactly iotable's tables; the runner's quick mode writes its report.

Nothing here is timed: speed lives in ``benchmarks/`` and is measured by ``python -m benchmarks``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from benchmarks import baselines, run, workloads

import iotable
from iotable import Domain


@pytest.fixture(scope="module")
def tiny():
    """The tiny workload with dyadic weights, so every sum is exact whatever its order."""
    workload = workloads.build("tiny")
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for layer in workload.layers:
            linear = layer.mixing
            linear.weight_orig.copy_(torch.randint(-8, 9, linear.weight_orig.shape, generator=gen) / 8)
            linear.bias.copy_(torch.randint(-8, 9, linear.bias.shape, generator=gen) / 8)
    # The layers and the custom blocks copied the weights when built: build them again from the new ones.
    workload.layers = workloads.affine_layers(workload.model, workload.input_domain)
    workload.custom_blocks = workloads.build_custom_blocks(workload.model, workload.input_domain)
    return workload


@pytest.fixture(scope="module")
def reference(tiny):
    """iotable's tables of the tiny workload by its reference path (the black box runs the model itself)."""
    return run.iotable_codes(tiny.precompute(fast_path=False))


def test_combination_block_is_itertools_product_order():
    """Rows of the combination matrix follow iotable's row order (first input most significant), chunk by chunk."""
    domains = [Domain.uniform(2), Domain.uniform(1, signed=True), Domain.uniform(3, scale=0.25)]
    expected = torch.tensor(list(itertools.product(*(d.values.tolist() for d in domains))), dtype=torch.float32)
    assert torch.equal(baselines.combination_block(domains, 3), expected)
    assert torch.equal(baselines.python_combinations(domains, len(expected)), expected)
    block = baselines.combination_block(domains, 2)
    for chunk in range(4):
        baselines._fill_high_digits(block, domains, 1, chunk)
        assert torch.equal(block, expected[chunk * 16 : (chunk + 1) * 16])


def test_hand_vectorized_equals_iotable(tiny, reference):
    """The hand-vectorized baseline produces iotable's tables code for code, also when chunked."""
    for budget in (baselines.BUDGET, 64):  # 64 bytes: one row per chunk
        tables = baselines.hand_vectorized(tiny.layers, budget=budget)
        assert [t.shape for t in tables] == [r.shape for r in reference]
        for mine, ref in zip(tables, reference):
            np.testing.assert_array_equal(mine.numpy(), ref)


@pytest.mark.parametrize("pattern", [baselines.logicnets_pattern, baselines.polylut_pattern])
def test_peer_patterns_equal_iotable(tiny, reference, pattern):
    """The LogicNets and PolyLUT patterns, run in full, produce iotable's tables; capped runs say so."""
    partial = pattern(tiny.layers)
    assert partial.complete and partial.describe() == "measured in full"
    for done, ref in zip(partial.tables, reference):
        assert sorted(done) == list(range(ref.shape[0]))
        for unit, codes in done.items():
            np.testing.assert_array_equal(codes, ref[unit])
    capped = pattern(tiny.layers, seconds=0.0, row_cap=4)
    assert not capped.complete and capped.done_rows[0] == capped.done_units[0] * 4
    assert "extrapolated from" in capped.describe() and capped.estimate() > 0


def test_onehot_lookup_equals_net_run(tiny):
    """The one-hot lookup evaluates the tables as net.run does."""
    net = tiny.precompute(fast_path=False)
    codes = torch.randint(0, len(tiny.input_domain), (64, 6), generator=torch.Generator().manual_seed(3))
    tables = [torch.as_tensor(c) for c in run.iotable_codes(net)]
    looked, partial = baselines.onehot_lookup(tables, tiny.layers, codes)
    assert partial.complete
    assert torch.equal(looked, net.run(codes, codes=True, return_codes=True))


def test_custom_module_matches_the_model(tiny, reference):
    """The custom-module variant is the same network: its black-box tables equal the model's here."""
    blocks = tiny.precompute_custom()
    assert all(isinstance(b, iotable.network.precompute.LayerTables) for b in blocks)
    codes = [c for b in blocks for c in run.iotable_codes(b)]
    truth = run.Truth(reference, reference)
    assert truth.wrong(codes) < 0.1 * sum(r.size for r in reference)  # float rounding may differ at boundaries


def test_arbitrate_lets_the_model_decide(tiny, reference):
    """Where two algorithms' tables differ, the differing codes are recomputed by the model itself."""
    layers = tiny.layers
    broken = [r.copy() for r in reference]
    broken[1][2, 5] = (broken[1][2, 5] + 2) % len(layers[1].output_domain)
    truth = run.arbitrate(layers, broken, reference)
    assert truth.known and truth.wrong(broken) == 1 and truth.wrong(reference) == 0 and truth.ties == 0
    assert run._exactness(1) == (False, "1 code(s) the model never gives")
    for batch in (1, 64):
        codes = baselines.module_codes(layers[0], 3, np.arange(16), batch=batch)
        np.testing.assert_array_equal(codes, reference[0][3])


def test_a_tie_accepts_either_code():
    """At a float-rounding tie both codes the model gives are right; any other code is wrong."""
    codes = [np.array([[1, 2, 3]])]
    alternative = [np.array([[1, 3, 3]])]  # the middle row is a tie between codes 2 and 3
    truth = run.Truth(codes, alternative)
    assert truth.ties == 1
    assert truth.wrong([np.array([[1, 3, 3]])]) == 0 and truth.wrong([np.array([[0, 1, 3]])]) == 2
    partial = baselines.Partial(tables=[{0: np.array([1, 3])}])
    assert truth.wrong_in(partial) == 0


def test_quick_run_writes_a_valid_report(tmp_path, capsys):
    """`--quick --only tiny runtime` runs every algorithm on the tiny workload and writes strict JSON."""
    path = tmp_path / "report.json"
    run.main(["--quick", "--only", "tiny", "runtime", "--runtime-workload", "tiny", "--json", str(path)])
    report = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    algorithms = {(r["section"], r["algorithm"]) for r in report["results"]}
    assert {
        ("generation", "iotable"),
        ("generation", "iotable (custom module)"),
        ("generation", "hand-vectorized"),
        ("generation", "LogicNets pattern"),
        ("generation", "PolyLUT pattern"),
        ("runtime", "iotable net.run"),
        ("runtime", "torch forward"),
        ("runtime", "one-hot lookup"),
    } <= algorithms
    for r in report["results"]:
        assert r["rows"] > 0 and r["seconds"] > 0
        if r["algorithm"] in ("hand-vectorized", "LogicNets pattern", "PolyLUT pattern"):
            assert r["exact"] is True, r  # checked against the model where it differs from iotable
    assert {t["status"] for t in report["targets"]} <= {"PASS", "FAIL", "SKIP"}
    assert report["meta"]["quick"] is True and report["meta"]["repeats"] == 1
    out = capsys.readouterr().out
    assert "[targets]" in out and "hand-vectorized" in out


def test_unknown_benchmark_is_an_error():
    """A name that is neither a workload nor a section is rejected with the accepted names."""
    with pytest.raises(ValueError, match="unknown benchmark.*jsc-m"):
        run.run(only=["jsc-xl"], echo=False)


def test_naive_gather_equals_net_run(tiny):
    """The naive per-layer gather reads the same tables as net.run and gives its outputs, MLP and CNNs alike."""
    net = tiny.precompute()
    naive = baselines.NaiveGather(tiny.model, run.iotable_codes(net), tiny.input_domain)
    codes = torch.randint(0, len(tiny.input_domain), (9, 6), generator=torch.Generator().manual_seed(4))
    assert torch.equal(naive(codes), net.run(codes, codes=True, return_codes=True))
    for name in run.CNN_MODELS:
        model, cnn, domain, shape = run.table_network(name)
        naive = baselines.NaiveGather(model, run.iotable_codes(cnn), domain)
        codes = torch.randint(0, len(domain), (3, *shape), generator=torch.Generator().manual_seed(5))
        x = torch.tensor(domain.values, dtype=torch.float32)[codes]
        with torch.inference_mode():
            assert torch.equal(naive(codes), cnn.run(codes, codes=True)) and torch.equal(cnn.run(x), model(x))


@pytest.mark.parametrize("kind", sorted(workloads.NEURONS))
def test_own_generation_equals_iotable(kind):
    """PolyLUT's and NeuraLUT's own generation (each neuron's sub-network alone) gives iotable's black-box tables."""
    blocks = workloads.build_neuron_blocks(kind, workloads.MLP_CONFIGS["tiny"])
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():  # steps of 1/8 (and dyadic affine maps): every sum exact, whatever its order
        for block, _ in blocks:
            for p in block.parameters():
                p.copy_(torch.randint(-8, 9, p.shape, generator=gen) / 8)
            block.gain.copy_(torch.randint(1, 9, block.gain.shape, generator=gen) / 4)
            block.shift.copy_(torch.randint(-4, 5, block.shift.shape, generator=gen) / 8)
    widths = [6, *workloads.MLP_CONFIGS["tiny"].widths]
    mine = run.iotable_codes_of(run._precompute_blocks(blocks, widths))
    theirs = run.own_generation(blocks)
    assert len(mine) == len(theirs) == 2
    for a, b in zip(mine, theirs):
        np.testing.assert_array_equal(a, b)
    assert len({c for t in mine for c in np.unique(t)}) > 2  # the tables are not trivial


def test_new_targets_read_their_rows():
    """The CNN sweep, small-batch, black-box and scale targets pass or fail on the figures they are given."""
    rows = []
    for batch, mine in ((16, 1.0), (65536, 1.2)):
        rows += [
            run.Result("cnn-runtime", f"digits-cnn @{batch}", "iotable net.run", batch, mine),
            run.Result("cnn-runtime", f"digits-cnn @{batch}", "torch forward", batch, 1.5),
        ]
    rows += [
        run.Result("small-batch", "jsc-m @1", "iotable net.run", 1, 1.0),
        run.Result("small-batch", "jsc-m @1", "naive per-layer gather", 1, 2.0),
        run.Result("blackbox", "polylut", "iotable (black box)", 10, 1.2),
        run.Result("blackbox", "polylut", "forward passes", 10, 1.0),
        run.Result("blackbox", "polylut", "own batched generation", 10, 1.1),
    ]
    scale = [
        {
            "workload": "wide-1k",
            "seconds": 1.0,
            "rows": 1000 * 4096,
            "peak_bytes": 1,
            "table_bytes": 1,
            "memory_budget": 1,
        },
        {
            "workload": "wide-100k",
            "seconds": 140.0,
            "rows": 10**5 * 4096,
            "peak_bytes": 3,
            "table_bytes": 1,
            "memory_budget": 1,
        },
    ]
    status = {t.target: t.status for t in run.targets(rows, [], scale)}
    assert status["digits-cnn: net.run >= 1x torch forward at every batch from 16 to 65,536"] == "PASS"
    assert status["cnn-32x32: net.run >= 1x torch forward at every batch from 16 to 65,536"] == "SKIP"
    assert status["jsc-m: net.run >= 1x a naive per-layer gather at batch 1"] == "PASS"
    assert status["polylut-style neurons: black box <= 1.3x the forward passes it makes"] == "PASS"
    assert status["polylut-style neurons: black box <= 1x their own batched generation"] == "FAIL"
    assert status["100k-unit sparse layer: time per unit <= 1.5x the 1k-unit layer's"] == "PASS"
    assert status["100k-unit sparse layer: peak memory <= tables' bytes + memory_budget"] == "FAIL"
