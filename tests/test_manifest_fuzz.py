"""Byte flips at many offsets of a small bundle's manifest: refused, or identical outputs and graph (a sample of
offsets; ``python -m tests.manifest_fuzz`` sweeps every byte)."""

from __future__ import annotations

import re

import pytest

import iotable

from .manifest_fuzz import HUGE, Sweep, build

OFFSETS = 300  # evenly spread over the manifest, so that every part of it is hit


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    folder = tmp_path_factory.mktemp("fuzz")
    net, path, x = build(folder)
    return Sweep(net, path, x, folder / "work")


def offsets(sweep: Sweep) -> list[int]:
    size = len(sweep.manifest)
    return sorted({k * size // OFFSETS + k % 7 for k in range(OFFSETS)})


def test_every_altered_manifest_fails_its_checksum(sweep: Sweep) -> None:
    """A flipped byte anywhere in the manifest is refused by load and by iotable check (the checksum as saved)."""
    verdicts = {}
    for offset in offsets(sweep):
        for flip in (0x01, 0x20):
            verdicts[offset, flip] = sweep.trial(offset, flip, stamped=False, check=flip == 0x01)
    sweep.restore()
    assert set(verdicts.values()) == {"refused"}, {k: v for k, v in verdicts.items() if v != "refused"}


def test_behind_a_new_checksum_every_altered_manifest_is_refused_or_changes_nothing_the_network_does(
    sweep: Sweep,
) -> None:
    """With the checksum written anew, each flip is refused, or loads and runs with the original's outputs and graph
    (only fields that say where the bundle came from may differ), and never ends in an internal error."""
    verdicts = {offset: sweep.trial(offset, 0x01, stamped=True) for offset in offsets(sweep)}
    sweep.restore()
    bad = {k: v for k, v in verdicts.items() if v not in ("refused", "same") and not v.startswith("information")}
    assert not bad, bad
    assert list(verdicts.values()).count("refused") > 0.8 * len(verdicts)


def test_the_sweep_sees_what_it_looks_for(sweep: Sweep) -> None:
    """The sweep's verdicts: no flip is the same network, a renamed traced node is an information change, and a
    scale that is no float32 value is refused."""
    assert sweep.trial(0, 0, stamped=True) == "same"
    fx_node = sweep.manifest.index(b'"fx_node": "x"') + len(b'"fx_node": "')
    assert sweep.trial(fx_node, 0x01, stamped=True) == "information change: graph.nodes[].fx_node"  # x -> y
    scale = sweep.manifest.index(b'"scale": 0.25') + len(b'"scale": 0.')
    assert sweep.trial(scale, 0x03, stamped=True) == "refused"  # 0.25 -> 0.15
    sweep.restore()


def test_an_integer_past_int64_in_any_manifest_field_is_refused(sweep: Sweep) -> None:
    """Each kind of integer field of the manifest holding 10**20, 2**63 or -2**63-1 (in turn; all three in the
    fields a fuzzer found crashing) is refused with a bundle error, never a C overflow."""
    trials, seen = [], set()
    for path in sweep.integers():
        field = tuple("[]" if isinstance(p, int) else p for p in path)
        if field not in seen:
            seen.add(field)
            crashed = field[-2:] in {("plan", "out_channels"), ("meta", "unit_bits")} or field[-3:-1] == (
                "$unit",
                "in_channels",
            )
            trials += [(path, value) for value in HUGE] if crashed else [(path, HUGE[len(seen) % len(HUGE)])]
    verdicts = {(path, value): sweep.replaced(path, value) for path, value in trials}
    sweep.restore()
    assert len(seen) > 40
    assert set(verdicts.values()) == {"refused"}, {k: v for k, v in verdicts.items() if v != "refused"}


def test_a_huge_integer_is_refused_naming_the_field_and_the_range(sweep: Sweep) -> None:
    """A plan's out_channels or a table node's unit_bits of 10**20: the bundle error names the field and the range."""
    out_channels = next(p for p in sweep.integers() if p[-2:] == ("plan", "out_channels"))
    unit_bits = next(p for p in sweep.integers() if p[-2:-1] == ("unit_bits",))
    for path, words in ((out_channels, ".out_channels: expected an integer >= 1 and < 2**62"), (unit_bits, "2**62")):
        sweep.replaced(path, 10**20)
        with pytest.raises(iotable.errors.BundleError, match=re.escape(words)) as caught:
            iotable.load(sweep.work)
        assert "100000000000000000000" in str(caught.value)
    sweep.restore()
