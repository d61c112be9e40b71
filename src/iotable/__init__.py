"""iotable: trained, quantized PyTorch layers as lookup tables for LUT-based hardware.

The pipeline:

- **decorate** — :func:`decompose` attaches decomposition metadata (groups, sparse fan-in, receptive field,
  layout) to a module or class; common torch layers need none (:func:`spec_of`).
- **plan** — :func:`plan` resolves it against the input: units, fan-ins, domains, table sizes, validated
  before any work; :func:`estimate` gives a whole model's LUT estimate and pipeline registers from its plans,
  before any row is computed.
- **enumerate** — :func:`precompute` feeds every combination of input codes of every unit through the
  module as a black box and returns one :class:`IOTable` per unit; :func:`check_decomposition` probes that
  the metadata is right.
- **QONNX in** — :func:`precompute` also reads a QONNX file (a path or an ``onnx.ModelProto``; brevitas'
  ``export_qonnx``, FINN's ``MultiThreshold`` form, QCDQ), cuts it at its quantizers and computes every row
  exactly by QONNX's rules; :func:`verify` then compares with qonnx's own executor (extra ``iotable[onnx]``).
- **look up** — :meth:`IOTable.lookup` maps input codes to outputs, vectorized, by packed address.
- **graph** — on a whole model, :func:`precompute` returns a :class:`TableNetwork`: the tables and the
  interlayer :class:`Graph`, whose :class:`Node` records carry typed metadata per :class:`NodeKind`
  (``TableMeta`` with index maps, ``PadMeta``, ``WindowMeta`` with line buffers and strides, ...);
  the runtime and any generator walk it node by node.
- **run / verify** — :meth:`TableNetwork.run` evaluates the network from its tables alone; :func:`verify`
  compares it with the model bit for bit. :func:`observe` and :func:`restrict` keep only the rows real
  data reaches (don't-cares elsewhere); :func:`export_pla` writes them for logic minimisers.
- **save** — :func:`save` / :func:`load`: a checksummed bundle, loaded memory-mapped without the model;
  :func:`export_onnx` writes a network as plain ONNX that onnxruntime runs equal to :meth:`TableNetwork.run`.
- **look at** — networks, layers, graphs and reports show as short reprs in a terminal and as HTML tables
  in a notebook; :meth:`TableNetwork.draw` pictures the graph (with Graphviz).
- **hardware** — :mod:`iotable.hdl` writes a table network (or one table) as Verilog or VHDL with
  self-checking testbenches, and runs open simulators (iverilog, ghdl, verilator) and yosys on them;
  :mod:`iotable.synth` counts the LUTs a table costs (LogicNets' estimate, and ABC's mapping, checked against
  the table).
- **sweep** — :mod:`iotable.sweep` measures trained variants × implementation options (targets, pipelining,
  mapping effort, seeds) stage by stage, cheapest first, places and routes only what may be on the Pareto front
  (LUTs, Fmax, latency, accuracy), and resumes from its records after a crash.
- **the field's packages** — torchlogix's and difflogic's gate layers and torch-dwn's ``GroupSum`` run through
  their own forward; torch-dwn's ``LUTLayer``, whose forward runs on CUDA only, is read from its parameters
  (:func:`read_layers`).

Quantized values live in a :class:`Domain`; :class:`iotable.nn.Quantize` is the quantizer for training
scripts; :mod:`iotable.bits` is the hardware bit contract (field widths, MSB-first offsets, packing). Every
error iotable raises on purpose is an :class:`IOTableError` and belongs to one group that says what went wrong:
:class:`OptionError` (a bad argument or option), :class:`ModelError` (a model that cannot become tables as
written), :class:`InputError` (bad input data), :class:`FileError` (a file that cannot be written or trusted),
:class:`ToolError` (a missing or failing external tool), :class:`MismatchError` (a check found a difference).

Where the other names live: the top level holds the pipeline's verbs, the types a user meets, the error
groups and the public modules. Everything else is imported from its home module:

- the specific error classes (``SpecError``, ``BundleError``, ``HDLToolError``, ...): :mod:`iotable.errors`;
- the graph's records and tools (``TableMeta``, ``PadMeta``, ``WindowMeta``, ..., ``Edge``, ``ElementOrder``,
  the node-kind registry ``register`` / ``definition``, ``GraphInterpreter``): :mod:`iotable.graph`;
  ``Diagram``: ``iotable.graph.diagram``; the built-in node kinds: ``iotable.nodekinds``;
- the LUT netlist value a bundle stores (``LutNetlist``, ``LutResults``): ``iotable.lutnet``; LogicNets' LUT
  count: ``iotable.lutcount``;
- the layer and whole-model paths of :func:`precompute` (``precompute_layer``, ``precompute_model``,
  ``LayerTables``): ``iotable.network.precompute``; ``enumerate_tables`` and ``DEFAULT_MEMORY_BUDGET``:
  ``iotable.tabulate.enumerate``;
- ``Unit``, ``Geometry`` and ``DEFAULT_MAX_ROWS``: ``iotable.units``; ``PaddingMode``: ``iotable.layout`` (the
  layer vocabulary no front end owns; the old homes in ``iotable.front`` still import them); ``has_spec`` and
  ``ELEMENTWISE``: ``iotable.front.spec``; ``LeafTracer``: ``iotable.front.trace``; ``code_dtype``:
  ``iotable.domain``; ``LayerEstimate``: ``iotable.synth.estimate``;
- ``read_pla`` and ``write_pla``: :mod:`iotable.pla`.
"""

from __future__ import annotations

from . import bits, errors, hdl, kinds, nn, pla, sweep, synth
from . import onnxin as _onnxin  # noqa: F401  # registers the QONNX front end with precompute and verify
from ._version import __version__
from .bundle.bundle import load, save
from .domain import Domain
from .errors import (
    FileError,
    InputError,
    IOTableError,
    IOTableWarning,
    MismatchError,
    ModelError,
    OptionError,
    ToolError,
)
from .front.plan import LayerPlan, plan
from .front.spec import Layout, Spec, decompose, spec_of
from .graph.graph import Graph
from .graph.nodes import Node, NodeKind
from .network.network import TableNetwork
from .network.observe import Observation, observe, restrict
from .network.precompute import precompute
from .network.verify import VerifyReport, verify
from .onnxout import export_onnx
from .packages import read_layers
from .pla import export_pla
from .synth.estimate import CostEstimate, estimate
from .table import IOTable
from .tabulate.probe import check_decomposition

__all__ = [
    "CostEstimate",
    "Domain",
    "FileError",
    "Graph",
    "IOTable",
    "IOTableError",
    "IOTableWarning",
    "InputError",
    "LayerPlan",
    "Layout",
    "MismatchError",
    "ModelError",
    "Node",
    "NodeKind",
    "Observation",
    "OptionError",
    "Spec",
    "TableNetwork",
    "ToolError",
    "VerifyReport",
    "__version__",
    "bits",
    "check_decomposition",
    "decompose",
    "errors",
    "estimate",
    "export_onnx",
    "export_pla",
    "hdl",
    "kinds",
    "load",
    "nn",
    "observe",
    "pla",
    "plan",
    "precompute",
    "read_layers",
    "restrict",
    "save",
    "spec_of",
    "sweep",
    "synth",
    "verify",
]
