"""Tables stay LUTs: the ``case`` of an exported table carries the attributes that keep it out of block RAM, and
yosys' default ``synth_xilinx`` of a pipelined 12-bit table maps it to LUTs (without the attribute: a RAMB18)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable.hdl import export
from iotable.nn import Quantize

from .optional import require_program


class RandomTable(nn.Module):
    """One 12-input-bit unit with a random 3-bit function: the kind of table synthesis turns into a ROM."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("entries", torch.randint(0, 8, (4096,), generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        address = (x.round().long() * 4 ** torch.arange(5, -1, -1)).sum(-1)
        return self.entries[address].float().unsqueeze(-1)


def _twelve_bit_design(directory: Path) -> tuple[iotable.hdl.Design, str]:
    layer = iotable.decompose(RandomTable(), fan_in="auto", output_domain=iotable.Domain.uniform(3))
    net = iotable.precompute(
        nn.Sequential(layer), input_domain=iotable.Domain.uniform(2), example_input=torch.zeros(1, 6)
    )
    assert [t.input_bits for t in next(iter(net.layers.values()))] == [12]
    design = export(net, directory, top="rom", pipeline=1, vectors=8)
    sources = "\n".join((design.directory / f).read_text() for f in design.sources)
    return design, sources


def _cells(verilog: str, directory: Path) -> dict[str, int]:
    path = directory / "all.v"
    path.write_text(verilog)
    script = f"read_verilog {path}; synth_xilinx -flatten -top rom; stat"
    result = subprocess.run(
        ["yosys", "-q", "-p", script, "-l", str(directory / "log")], capture_output=True, timeout=600
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    log = (directory / "log").read_text()
    return {cell: int(n) for cell, n in re.findall(r"^\s+(RAMB\w+|LUT\d)\s+(\d+)$", log, flags=re.MULTILINE)}


@pytest.mark.slow  # a 4,096-row table through synth_xilinx: about 20 s each
def test_a_pipelined_table_stays_in_luts_under_default_synthesis(tmp_path: Path) -> None:
    require_program("yosys", package="yosys")
    _, verilog = _twelve_bit_design(tmp_path / "hw")
    assert '(* rom_style = "logic", syn_romstyle = "logic" *) case (address)' in verilog
    cells = _cells(verilog, tmp_path)
    assert not any(cell.startswith("RAMB") for cell in cells), cells
    assert sum(n for cell, n in cells.items() if cell.startswith("LUT")) > 10


@pytest.mark.slow
def test_without_the_attribute_the_same_table_becomes_block_ram(tmp_path: Path) -> None:
    """The check above can fail: the same design with the attribute removed maps to block RAM."""
    require_program("yosys", package="yosys")
    _, verilog = _twelve_bit_design(tmp_path / "hw")
    cells = _cells(verilog.replace('(* rom_style = "logic", syn_romstyle = "logic" *) ', ""), tmp_path)
    assert any(cell.startswith("RAMB") for cell in cells), cells


def test_vhdl_tables_carry_the_rom_style_attributes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 1), Quantize(2)).eval()
    net = iotable.precompute(model, input_domain=iotable.Domain.uniform(1), example_input=torch.zeros(1, 3))
    design = export(net, tmp_path / "hw", top="rom", language="vhdl", vectors=4, inline_bits=0)
    table = (design.directory / design.sources[0]).read_text()
    assert 'attribute rom_style of codes : signal is "logic";' in table
    assert 'attribute syn_romstyle of codes : signal is "logic";' in table
