"""The hardware bit contract (iotable.bits): field widths, MSB-first packing, and the places that read it agreeing,
one-value domains included."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import iotable
from iotable import Domain, NodeKind, bits
from iotable.errors import BundleError
from iotable.hdl import layout_of
from iotable.nn import Quantize
from tests.optional import require_program


@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.data())
def test_pack_and_unpack_are_inverse(widths: list[int], data: st.DataObject) -> None:
    """Codes packed into words and unpacked again are the codes; a word's binary digits are its fields' digits."""
    rows = data.draw(st.integers(1, 5))
    codes = np.array([[data.draw(st.integers(0, 2**w - 1)) for w in widths] for _ in range(rows)], dtype=np.int64)
    words = bits.pack(codes, widths)
    assert np.array_equal(bits.unpack(words, widths), codes)
    as_text = ["".join(map(str, row)) for row in bits.digits(codes, widths)]
    assert as_text == [format(int(w), f"0{sum(widths)}b") for w in words]


def test_the_first_field_is_the_most_significant() -> None:
    """Offsets count from the last field; field 0 holds the highest bits."""
    assert bits.offsets((3, 1, 2)) == (3, 2, 0)
    assert bits.pack(np.array([[1, 0, 0]]), (3, 1, 2)).tolist() == [8]


def test_a_one_value_domain_is_a_one_bit_field() -> None:
    """A domain of one value needs no bit to tell its codes apart, but its hardware field is one bit wide."""
    assert Domain([0.0]).bits == 0 and bits.width(Domain([0.0])) == 1
    assert [bits.field_width(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 1, 2, 2, 3, 3, 4]


def test_pack_refuses_more_than_an_int64_holds() -> None:
    """Fields of more than 63 bits cannot be one int64 word."""
    with pytest.raises(ValueError, match="63 bits"):
        bits.pack(np.zeros((1, 2), np.int64), (32, 32))


@pytest.fixture(scope="module")
def one_value_net() -> iotable.TableNetwork:
    """A linear layer whose first input has a one-value domain."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), Quantize(2)).eval()
    domains = (Domain([0.0]), Domain.uniform(2), Domain.uniform(1))
    return iotable.precompute(model, input_domain=domains, example_input=torch.zeros(1, 3))


def test_every_stage_counts_the_same_address_bits(one_value_net: iotable.TableNetwork) -> None:
    """The graph's unit bits, the plan's table bits and the hardware's address port agree: 1 + 2 + 1 bits."""
    node = next(n for n in one_value_net.graph.nodes if n.kind is NodeKind.TABLE)
    layer = one_value_net[node.meta.layer]
    assert node.meta.unit_bits == (4, 4)
    assert layer.plan.table_bits[0].tolist() == [4, 4]
    assert [sum(layout_of(t, what="test").input_widths) for t in layer.tables] == [4, 4]


def _as_format_5(path: Path, unit_bits: list[int]) -> None:
    """Rewrite a bundle as format 5 wrote it, with the table's bits as given, and stamp its checksum."""
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    manifest["format_version"] = 5
    for node in manifest["graph"]["nodes"]:
        if node["kind"] == "table":
            node["meta"]["unit_bits"] = unit_bits
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    digest = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    (path / "manifest.sha256").write_text(f"{digest}  manifest.json\n", encoding="ascii")


def test_a_format_5_bundle_loads_with_the_hardware_count(one_value_net: iotable.TableNetwork, tmp_path: Path) -> None:
    """Format 5 counted a one-value input as 0 bits (3 per unit here): it loads as 4, and runs the same."""
    path = tmp_path / "net.bundle"
    iotable.save(one_value_net, path)
    _as_format_5(path, [3, 3])
    loaded = iotable.load(path)
    node = next(n for n in loaded.graph.nodes if n.kind is NodeKind.TABLE)
    assert node.meta.unit_bits == (4, 4)
    x = torch.tensor([[0.0, 1.0, 1.0], [0.0, 3.0, 0.0]])
    assert torch.equal(loaded.run(x), one_value_net.run(x))


def test_a_format_5_bundle_with_other_bits_is_refused(one_value_net: iotable.TableNetwork, tmp_path: Path) -> None:
    """Bits that are neither the old count nor the hardware count are not upgraded: the checks refuse them."""
    path = tmp_path / "net.bundle"
    iotable.save(one_value_net, path)
    copy = Path(shutil.copytree(path, tmp_path / "copy.bundle"))
    _as_format_5(copy, [2, 3])
    with pytest.raises(BundleError, match="unit 0 has 8 rows and 2 bits"):
        iotable.load(copy)


@pytest.mark.parametrize(("language", "simulator"), [("verilog", "iverilog"), ("vhdl", "ghdl")])
def test_the_hardware_of_a_one_value_input_equals_net_run(
    one_value_net: iotable.TableNetwork, tmp_path: Path, language: str, simulator: str
) -> None:
    """The exported design reads the one-value input as a 1-bit field and computes what net.run computes."""
    require_program(simulator, package=simulator)
    design = iotable.hdl.export(one_value_net, tmp_path / language, language=language)
    assert [p.width for p in (design.inputs,)] == [4]
    grid = torch.tensor([[0.0, b, c] for b in range(4) for c in range(2)])
    assert torch.equal(
        iotable.hdl.simulate(design, grid, simulator=simulator), one_value_net.run(grid, return_codes=True)
    )
