"""Byte flips at many offsets of a small bundle's manifest: refused, or identical outputs and graph (a sample of
offsets; ``python -m tests.manifest_fuzz`` sweeps every byte)."""

from __future__ import annotations

import pytest

from .manifest_fuzz import Sweep, build

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
