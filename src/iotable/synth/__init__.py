"""What tables cost in LUTs: LogicNets' estimate, and ABC's mapping of each table, checked row by row.

- :func:`lut_estimate` / :func:`table_lut_estimate` — LogicNets' analytic count,
  ``(Y/3) * (2**(X-4) - (-1)**X)`` LUT6 for X input and Y output bits (vectorized; other k generalised).
- :func:`map_table` — one table mapped onto k-input LUTs by ABC (``collapse; muxes; strash; if -K 6``),
  don't-cares spent, the LUT netlist read back and evaluated on every row of the table: a
  :class:`MappedTable` (LUTs, depth, netlist, ABC version and script).
- :func:`map_luts` — every table of a network or list, each distinct table once, in parallel (a process
  pool, an ``Executor`` or a ``dask.distributed.Client``), cached on disk as JSON: a :class:`LutReport`
  with per-layer totals (:class:`LayerCost`, the record :func:`iotable.estimate` gives too), and with
  ``dense=`` what the don't-cares of restricted tables saved.
- ``effort="floor"`` (:mod:`.floor`) — each table mapped under several input orders and scripts, every
  netlist checked, the smallest kept: a floor of ABC's count rather than one sample (``"fast"``, the default,
  maps once).
- :func:`cost` — :func:`map_luts` of a network, reusing the results it holds (``net.luts``); the report's
  ``network`` is the network holding every result, which :func:`iotable.save` stores.
- Arithmetic nodes (``sum``, ``argmax``, ``threshold``): :func:`arithmetic_estimate` counts their adder
  trees, comparator trees and comparisons (:mod:`iotable.lutcount`'s formulas; :func:`iotable.estimate` and
  the reports include it), and :func:`cost` maps each live output's logic with ABC (:data:`ARITH_SCRIPT`),
  checked against the node kind's kernel (:func:`check_arithmetic`): an :class:`ArithmeticCost` per node;
  :func:`map_function` maps one :class:`ArithFunction` alone.

This package is the cost layer, above the network: nothing of the core (front, tabulate, graph, runtime,
network, bundle) imports it. The LUT netlist value and its check (:mod:`iotable.lutnet`) and LogicNets'
count (:mod:`iotable.lutcount`) are core modules it shares with them.

ABC is a program, not a Python package: ``apt-get install berkeley-abc`` on Debian (yosys' ``yosys-abc``
works too); without one, :class:`~iotable.errors.ABCNotInstalledError` says so. Counts are estimates tied
to the pinned flow and ABC version each result records, not a vendor tool's placement. docs/hardware.md
("Cost") describes the flow, the check and the cache.
"""

from __future__ import annotations

from ..lutcount import lut_estimate
from .abcrun import DEFAULT_SCRIPT, abc_version
from .arith import ArithFunction, arithmetic_estimate
from .arithmap import ARITH_SCRIPT, check_arithmetic, map_function
from .estimate import table_lut_estimate
from .mapping import check_table, cost, map_luts, map_table
from .records import ArithmeticCost, LayerCost, LutReport, MappedTable

__all__ = [
    "ARITH_SCRIPT",
    "DEFAULT_SCRIPT",
    "ArithFunction",
    "ArithmeticCost",
    "LayerCost",
    "LutReport",
    "MappedTable",
    "abc_version",
    "arithmetic_estimate",
    "check_arithmetic",
    "check_table",
    "cost",
    "lut_estimate",
    "map_function",
    "map_luts",
    "map_table",
    "table_lut_estimate",
]
