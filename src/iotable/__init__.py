"""iotable: trained, quantized PyTorch layers as lookup tables for LUT-based hardware.

The pipeline:

- **decorate** — :func:`decompose` attaches decomposition metadata (groups, sparse fan-in, receptive field,
  layout) to a module or class; common torch layers need none (:func:`spec_of`).
- **plan** — :func:`plan` resolves it against the input: units, fan-ins, domains, table sizes, validated
  before any work; :func:`estimate` gives a whole model's LUT estimate and pipeline registers from its plans,
  before any row is computed.
- **enumerate** — :func:`precompute` feeds every combination of input codes of every unit through the
  module as a black box and returns one :class:`IOTable` per unit (:func:`precompute_layer` and
  :func:`precompute_model` are its layer and whole-model paths, each with one return type).
- **look up** — :meth:`IOTable.lookup` maps input codes to outputs, vectorized, by packed address.
- **graph** — on a whole model, :func:`precompute` returns a :class:`TableNetwork`: the tables and the
  interlayer :class:`Graph`, whose nodes carry typed metadata per kind (:class:`TableMeta` with index
  maps, :class:`PadMeta`, :class:`WindowMeta` with line buffers and strides, ...);
  :class:`GraphInterpreter` walks it node by node (the runtime and any generator are such walks).
- **run / verify** — :meth:`TableNetwork.run` evaluates the network from its tables alone; :func:`verify`
  compares it with the model bit for bit. :func:`observe` and :func:`restrict` keep only the rows real
  data reaches (don't-cares elsewhere); :func:`export_pla` writes them for logic minimisers.
- **save** — :func:`save` / :func:`load`: a checksummed bundle, loaded memory-mapped without the model.
- **look at** — networks, layers, graphs and reports show as short reprs in a terminal and as HTML tables
  in a notebook; :meth:`TableNetwork.draw` pictures the graph (:class:`Diagram`, with Graphviz).
- **hardware** — :mod:`iotable.hdl` writes a table network (or one table) as Verilog or VHDL with
  self-checking testbenches, and runs open simulators (iverilog, ghdl, verilator) and yosys on them;
  :mod:`iotable.synth` counts the LUTs a table costs (LogicNets' estimate, and ABC's mapping, checked against
  the table).

Quantized values live in a :class:`Domain`; :class:`iotable.nn.Quantize` is the quantizer for training
scripts. Every error iotable raises on purpose is an :class:`IOTableError`.
"""

from __future__ import annotations

from . import kinds, nn
from ._version import __version__
from .bundle.bundle import load, save
from .domain import Domain, code_dtype
from .errors import (
    ABCError,
    ABCNotInstalledError,
    BrevitasNotInstalledError,
    BundleError,
    CacheError,
    DomainError,
    EnumerationError,
    HDLError,
    HDLToolError,
    IOTableError,
    IOTableWarning,
    MissingRowError,
    ModelError,
    NetlistMismatchError,
    NotDecomposedError,
    OptionError,
    PLAError,
    SimulatorNotInstalledError,
    SpecError,
    SpecMismatchError,
    SynthError,
    TableError,
    TableTooLargeError,
    UnsupportedFakeQuantizeError,
    UnsupportedQuantizerError,
)
from .front.plan import DEFAULT_MAX_ROWS, Geometry, LayerPlan, Unit, plan
from .front.spec import ELEMENTWISE, Layout, PaddingMode, Spec, decompose, has_spec, spec_of
from .front.trace import LeafTracer
from .graph.diagram import Diagram, GraphvizNotInstalledError
from .graph.graph import (
    DuplicateMeta,
    Edge,
    ElementOrder,
    Graph,
    GraphError,
    HostMeta,
    InputMeta,
    JoinMeta,
    Node,
    NodeKind,
    OutputMeta,
    PadMeta,
    PoolMeta,
    ReshapeMeta,
    TableMeta,
    WindowMeta,
)
from .graph.interpret import GraphInterpreter, NodeExecutionError
from .network.network import InputError, LayerNotFoundError, TableNetwork, VerifyReport, verify
from .network.observe import Observation, ObserveError, observe, restrict
from .network.precompute import LayerTables, precompute, precompute_layer, precompute_model
from .pla import export_pla, read_pla, write_pla
from .synth.estimate import CostEstimate, LayerEstimate, estimate
from .table import IOTable
from .tabulate.enumerate import DEFAULT_MEMORY_BUDGET, enumerate_tables
from .tabulate.probe import check_decomposition

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MEMORY_BUDGET",
    "ELEMENTWISE",
    "ABCError",
    "ABCNotInstalledError",
    "BrevitasNotInstalledError",
    "BundleError",
    "CacheError",
    "CostEstimate",
    "Diagram",
    "Domain",
    "DomainError",
    "DuplicateMeta",
    "Edge",
    "ElementOrder",
    "EnumerationError",
    "Geometry",
    "Graph",
    "GraphError",
    "GraphInterpreter",
    "GraphvizNotInstalledError",
    "HDLError",
    "HDLToolError",
    "HostMeta",
    "IOTable",
    "IOTableError",
    "IOTableWarning",
    "InputError",
    "InputMeta",
    "JoinMeta",
    "LayerEstimate",
    "LayerNotFoundError",
    "LayerPlan",
    "LayerTables",
    "Layout",
    "LeafTracer",
    "MissingRowError",
    "ModelError",
    "NetlistMismatchError",
    "Node",
    "NodeExecutionError",
    "NodeKind",
    "NotDecomposedError",
    "Observation",
    "ObserveError",
    "OptionError",
    "OutputMeta",
    "PLAError",
    "PadMeta",
    "PaddingMode",
    "PoolMeta",
    "ReshapeMeta",
    "SimulatorNotInstalledError",
    "Spec",
    "SpecError",
    "SpecMismatchError",
    "SynthError",
    "TableError",
    "TableMeta",
    "TableNetwork",
    "TableTooLargeError",
    "Unit",
    "UnsupportedFakeQuantizeError",
    "UnsupportedQuantizerError",
    "VerifyReport",
    "WindowMeta",
    "__version__",
    "check_decomposition",
    "code_dtype",
    "decompose",
    "enumerate_tables",
    "estimate",
    "export_pla",
    "has_spec",
    "kinds",
    "load",
    "nn",
    "observe",
    "plan",
    "precompute",
    "precompute_layer",
    "precompute_model",
    "read_pla",
    "restrict",
    "save",
    "spec_of",
    "verify",
    "write_pla",
]
