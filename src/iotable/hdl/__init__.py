"""Hardware: IOTables and whole table networks as Verilog and VHDL, proved equal by open simulators.

- :func:`export` — a table network as a design: table modules, layer modules wired by the graph's index
  maps (tiny tables inline in them, :mod:`.inline`), pipeline registers and a valid/ready top module, with a
  network bench from ``net.run`` (and, on request, a bench per table); returns a :class:`Design` (files,
  :class:`Port` packing, latency, :class:`~iotable.synth.LayerCost` per layer).
  :func:`simulate` runs a design on a batch and returns its output codes; :func:`check` synthesizes it;
  :func:`implement` synthesizes it for an FPGA (iCE40, ECP5, Xilinx) and places and routes it (iCE40, ECP5):
  LUTs, flip-flops and Fmax after routing, an :class:`Implementation`. :func:`verilator_model` builds a
  design once with Verilator into a cached program, a :class:`VerilatorModel` that runs whole test splits.

- :func:`table_verilog` / :func:`table_vhdl` — one table as one combinational module (entity): a ``case``
  over the input codes packed into ``address`` (first input most significant), the output codes packed into
  ``codes`` (first output most significant); don't-cares as ``x`` / ``'-'`` or code 0.
- :func:`mapped_verilog` / :func:`mapped_vhdl` — the same table, same ports, as its LUT netlist from
  :func:`iotable.synth.map_table` (each LUT an INIT mask selected by its inputs); ``export(..., tables="mapped")``
  writes every table so. :func:`primitive_verilog` — the same netlist as device LUT cells (ECP5 ``LUT4``, iCE40
  ``SB_LUT4``, Xilinx ``LUT1``-``LUT6``) that synthesis keeps as they are (``export(..., primitives=...)``).
- :func:`table_bench` — an exhaustive, self-checking testbench of such a module and its vectors file.
- :func:`simulate_files` — run a bench with iverilog, ghdl or verilator; :func:`check_files` — synthesize
  with yosys and assert no latch, nothing undriven, no combinational loop; :func:`write_files` — write
  generated files atomically.

Inside: :mod:`.netlist` is the hardware IR of a design (elements, signals, table modules, layer, pool and
arithmetic blocks, the valid pipeline or the streaming stages and handshakes); :mod:`.build` makes it from a
graph, every node built by its kind's hardware method for the style (:mod:`iotable.nodekinds`) with the
style's builder (:mod:`.unrolled`, :mod:`.streaming`, sharing :mod:`.builder`; :mod:`.arithmetic`: the levels
of adder trees and the arithmetic blocks); :mod:`.verilog` and :mod:`.vhdl` print it, and one table, its LUT
netlist and the benches (with :mod:`.verilog_tables`, :mod:`.vhdl_tables`, :mod:`.verilog_blocks`,
:mod:`.vhdl_blocks`; :mod:`.inline`: tiny tables as expressions in their layer modules; :mod:`.emit`: what
they share; :mod:`.sources`: the files and the one choice of a printer by :class:`~.language.Language`),
every identifier and comment through :mod:`.names`;
:mod:`.table`, :mod:`.mapped`, :mod:`.bench` and :mod:`.netbench` say what to write, in no language;
:mod:`.writer` is :func:`export` and its kin, :mod:`.design` what
it returns. :mod:`.verilog_simtables` writes a table as a memory read from a hex file, for simulation only
(what :func:`simulate` runs instead of a ``case``); :mod:`.verilator` builds and caches Verilator's program,
:mod:`.verilator_cache` checks its cache entries before every run.

The contract and the tools are described in docs/hardware.md. The tools are programs, not Python packages:
``apt-get install iverilog ghdl verilator yosys`` on Debian; a missing one raises
:class:`~iotable.errors.SimulatorNotInstalledError` naming its package.
"""

from __future__ import annotations

from .design import Design, Port
from .implement import Implementation, implement
from .primitives import primitive_verilog
from .sources import mapped_verilog, mapped_vhdl, table_bench, table_verilog, table_vhdl
from .table import TableLayout, layout_of
from .tools import CheckResult, SimulationResult, check_files, simulate_files, write_files
from .verilator import VerilatorModel, verilator_model
from .writer import check, export, simulate

__all__ = [
    "CheckResult",
    "Design",
    "Implementation",
    "Port",
    "SimulationResult",
    "TableLayout",
    "VerilatorModel",
    "check",
    "check_files",
    "export",
    "implement",
    "layout_of",
    "mapped_verilog",
    "mapped_vhdl",
    "primitive_verilog",
    "simulate",
    "simulate_files",
    "table_bench",
    "table_verilog",
    "table_vhdl",
    "verilator_model",
    "write_files",
]
