"""The errors iotable raises on purpose.

Every error derives from :class:`IOTableError`, and also from the builtin exception a caller would expect
(``ValueError`` for bad arguments, ``LookupError`` for a row a partial table does not hold), so that
``except ValueError`` keeps working. Messages name the thing, what was expected, what was received, and the
fix when one is known.
"""

from __future__ import annotations

__all__ = [
    "ABCError",
    "ABCNotInstalledError",
    "BrevitasNotInstalledError",
    "BundleError",
    "CacheError",
    "CommandError",
    "DomainError",
    "EnumerationError",
    "GraphError",
    "GraphvizNotInstalledError",
    "HDLError",
    "HDLToolError",
    "IOTableError",
    "IOTableWarning",
    "InputError",
    "LayerNotFoundError",
    "MissingRowError",
    "ModelError",
    "NetlistMismatchError",
    "NodeExecutionError",
    "NotDecomposedError",
    "ObserveError",
    "OptionError",
    "PLAError",
    "SimulatorNotInstalledError",
    "SpecError",
    "SpecMismatchError",
    "SynthError",
    "TableError",
    "TableTooLargeError",
    "UnsupportedFakeQuantizeError",
    "UnsupportedQuantizerError",
]


class IOTableError(Exception):
    """Base class of every error iotable raises on purpose."""


class OptionError(IOTableError, ValueError):
    """A string option (layout, ...) is not one of the accepted values."""


class DomainError(IOTableError, ValueError):
    """A quantized domain is malformed, or a value or code does not belong to it."""


class SpecError(IOTableError, ValueError):
    """Decomposition metadata is malformed or does not fit the module it describes."""


class SpecMismatchError(SpecError):
    """The probe found a unit whose outputs depend on an input outside its declared fan-in."""


class NotDecomposedError(SpecError, TypeError):
    """A module has no decomposition metadata and no built-in rule covers it."""


class TableTooLargeError(IOTableError, ValueError):
    """A unit's table would have more rows than the configured limit."""


class EnumerationError(IOTableError, RuntimeError):
    """Running the module on enumerated inputs failed or returned something unexpected."""


class TableError(IOTableError, ValueError):
    """An IOTable was built from inconsistent arrays, or looked up with malformed codes."""


class MissingRowError(IOTableError, LookupError):
    """A lookup hit a row that a partial table does not hold and no don't-care value was declared."""


class UnsupportedFakeQuantizeError(IOTableError, ValueError):
    """A torch.ao fake quantizer whose outputs are not one fixed set of values: still observing, disabled, or
    per channel (the message names it and the call that fixes it)."""


class ModelError(IOTableError, ValueError):
    """A whole model cannot be turned into a table network as it stands (the message says what to change)."""


class UnsupportedQuantizerError(ModelError):
    """A brevitas quantizer whose outputs are not one fixed, finite set of values iotable can tabulate."""


class BrevitasNotInstalledError(IOTableError, ImportError):
    """brevitas is not installed (or too old); the message names the extra to install."""


class CacheError(IOTableError, OSError):
    """A table file cannot be written or the cache directory cannot be used (``cache_dir``, a full disk, ...).

    ``errno``, ``strerror`` and ``filename`` are the system's, when a disk operation failed.
    """

    def __str__(self) -> str:  # the message, not OSError's "[Errno n] ..." form
        return str(self.args[0]) if self.args else ""


class PLAError(IOTableError, ValueError):
    """A table cannot be written as PLA, or a PLA file does not match what it should hold."""


class IOTableWarning(UserWarning):
    """Something iotable does differently from what the caller may expect, with no wrong result (e.g. a model
    left in training mode is evaluated in eval mode)."""


class BundleError(IOTableError, ValueError):
    """A bundle cannot be written or read: a bad target path, a missing or corrupted file, a bad manifest."""


class HDLError(IOTableError, ValueError):
    """Verilog or VHDL cannot be emitted or run as asked: an illegal module name, a table without code
    outputs, a malformed file set (the message names the thing and the fix)."""


class HDLToolError(IOTableError, RuntimeError):
    """An HDL tool (iverilog, ghdl, verilator, yosys) refused the design or did not finish in time; the
    message carries the tool's own output."""


class SimulatorNotInstalledError(HDLToolError):
    """An HDL tool a call needs (iverilog, ghdl, verilator, yosys) is not on ``PATH``; the message names the
    Debian package that provides it."""


class NodeExecutionError(IOTableError, RuntimeError):
    """A node of the interlayer graph failed while a :class:`~iotable.interpret.GraphInterpreter` executed it;
    the message names the node, and the original error is chained."""


class GraphError(IOTableError, ValueError):
    """The interlayer graph breaks an invariant (see :meth:`Graph.check <iotable.graph.Graph.check>`)."""


class InputError(IOTableError, ValueError):
    """An input given to a table network is malformed (shape, dtype, or codes out of range)."""


class CommandError(IOTableError, ValueError):
    """A command-line argument names something unusable (an output path, a bundle of the wrong kind)."""


class GraphvizNotInstalledError(IOTableError, ImportError):
    """Graphviz is missing (the ``graphviz`` Python package or the ``dot`` program); the message says which."""


class ObserveError(IOTableError, ValueError):
    """``observe`` / ``restrict`` received something they cannot use."""


class LayerNotFoundError(IOTableError, KeyError):
    """``net[name]`` names no table layer of the network."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class SynthError(IOTableError, ValueError):
    """A table cannot be mapped onto LUTs as asked: raw outputs instead of codes, a bad ``k`` or script, an
    unusable cache directory or executor (the message names the thing and the fix)."""


class ABCError(IOTableError, RuntimeError):
    """ABC, the logic synthesis tool that maps tables onto LUTs, failed or did not finish in time; the
    message carries its own output."""


class ABCNotInstalledError(ABCError):
    """No ABC program (``berkeley-abc``, ``yosys-abc`` or ``abc``) is on ``PATH``; the message names the
    Debian package ``berkeley-abc``."""


class NetlistMismatchError(IOTableError, RuntimeError):
    """A mapped LUT netlist does not compute its table: evaluated on every row of the table (its care rows
    for a partial table), some output differs. The message names the table, the row and both outputs."""
