"""The errors iotable raises on purpose, grouped by what went wrong.

Every error derives from :class:`IOTableError` and from one group, which says what to look at (one class,
:class:`SpecOptionError`, is in two: a bad argument that has always been a :class:`SpecError`):

- :class:`OptionError` — a bad argument or option of a call (a keyword, a name, a path, a layer name);
- :class:`ModelError` — a model that cannot become tables as written (its decomposition, its quantizers,
  its size, its graph);
- :class:`InputError` — bad input data (codes, values, arrays, domains);
- :class:`FileError` — a file that cannot be written, or read and trusted (a bundle, a table cache, a PLA
  file);
- :class:`ToolError` — an external tool or optional package that is missing or failed (HDL simulators,
  yosys, ABC, Graphviz, brevitas);
- :class:`MismatchError` — a check that found a difference (a mapped netlist that does not compute its
  table).

The specific classes below the groups name the module or the case (``except SynthError`` catches every bad
synthesis option, ``except ToolError`` every missing or failing tool). Every error also derives from the
builtin exception a caller would expect (``ValueError`` for bad arguments, ``LookupError`` for a row a
partial table does not hold, ``RuntimeError`` for a failing tool, ``ImportError`` for a missing package), so
that ``except ValueError`` keeps working. Messages name the thing, what was expected, what was received, and
the fix when one is known.

Example:
    >>> from iotable.errors import InputError, IOTableError, MissingRowError
    >>> issubclass(MissingRowError, InputError) and issubclass(MissingRowError, LookupError)
    True
    >>> [group.__name__ for group in GROUPS]
    ['OptionError', 'ModelError', 'InputError', 'FileError', 'ToolError', 'MismatchError']
"""

from __future__ import annotations

__all__ = [
    "GROUPS",
    "ABCError",
    "ABCNotInstalledError",
    "BrevitasNotInstalledError",
    "BundleError",
    "CacheError",
    "CommandError",
    "DomainError",
    "EnumerationError",
    "FileError",
    "GraphError",
    "GraphvizNotInstalledError",
    "HDLError",
    "HDLToolError",
    "IOTableError",
    "IOTableWarning",
    "InputError",
    "LayerNotFoundError",
    "MatplotlibNotInstalledError",
    "MismatchError",
    "MissingRowError",
    "ModelError",
    "NetlistMismatchError",
    "NodeExecutionError",
    "NotDecomposedError",
    "ONNXFileError",
    "ONNXNotInstalledError",
    "ObserveError",
    "OptionError",
    "PLAError",
    "SimulatorNotInstalledError",
    "SpecError",
    "SpecMismatchError",
    "SpecOptionError",
    "SynthError",
    "TableError",
    "TableTooLargeError",
    "ToolError",
    "UnsupportedFakeQuantizeError",
    "UnsupportedQuantizerError",
]


class IOTableError(Exception):
    """Base class of every error iotable raises on purpose."""


class IOTableWarning(UserWarning):
    """Something iotable does differently from what the caller may expect, with no wrong result (e.g. a model
    left in training mode is evaluated in eval mode)."""


# -- the groups: what the caller did wrong ---------------------------------------------------------------------


class OptionError(IOTableError, ValueError):
    """A bad argument or option of a call: a string option that is not one of the accepted values (layout,
    ...), a bad keyword value, a name or path that cannot be used. The group of :class:`CommandError`,
    :class:`HDLError`, :class:`SynthError`, :class:`ObserveError` and :class:`LayerNotFoundError`."""


class ModelError(IOTableError, ValueError):
    """A model that cannot become tables as written (the message says what to change): its decomposition
    metadata, its quantizers, a table too large, a module that fails on enumerated inputs, a graph that breaks
    an invariant."""


class InputError(IOTableError, ValueError):
    """Bad input data: an input given to a table network, an IOTable's arrays or codes, a value or code outside
    its domain (shape, dtype, or codes out of range)."""


class FileError(IOTableError):
    """A file that cannot be written, or read and trusted: a bundle, a table cache, a PLA file."""


class ToolError(IOTableError):
    """An external tool or optional package is missing or failed: an HDL simulator or yosys, ABC, Graphviz,
    brevitas. The message names what to install, or carries the tool's own output."""


class MismatchError(IOTableError):
    """A check found a difference: what was built does not compute what it should (the message names the
    thing, the row and both values)."""


#: The error groups, in the order the documentation lists them; every other error class derives from one.
GROUPS: tuple[type[IOTableError], ...] = (OptionError, ModelError, InputError, FileError, ToolError, MismatchError)


# -- bad arguments and options ----------------------------------------------------------------------------------


class CommandError(OptionError):
    """A command-line argument names something unusable (an output path, a bundle of the wrong kind)."""


class HDLError(OptionError):
    """Verilog or VHDL cannot be emitted or run as asked: an illegal module name, a table without code
    outputs, a malformed file set (the message names the thing and the fix)."""


class SynthError(OptionError):
    """A table cannot be mapped onto LUTs as asked: raw outputs instead of codes, a bad ``k`` or script, an
    unusable cache directory or executor (the message names the thing and the fix)."""


class ObserveError(OptionError):
    """``observe`` / ``restrict`` received something they cannot use."""


class LayerNotFoundError(OptionError, KeyError):
    """``net[name]`` names no table layer of the network."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


# -- models that cannot become tables ---------------------------------------------------------------------------


class SpecError(ModelError):
    """Decomposition metadata is malformed or does not fit the module it describes."""


class SpecOptionError(SpecError, OptionError):
    """A bad argument of :func:`~iotable.decompose`, :func:`~iotable.plan` or :func:`~iotable.precompute` (a
    ``groups=`` or ``max_rows=`` out of range, a flag that is not a bool, fan-in lists of the wrong shape): an
    :class:`OptionError` by what went wrong, and a :class:`SpecError` as these arguments always raised, so
    both ``except`` clauses catch it. The one class in two groups."""


class SpecMismatchError(SpecError):
    """The probe found a unit whose outputs depend on an input outside its declared fan-in."""


class NotDecomposedError(SpecError, TypeError):
    """A module has no decomposition metadata and no built-in rule covers it."""


class TableTooLargeError(ModelError):
    """A unit's table would have more rows than the configured limit."""


class EnumerationError(ModelError, RuntimeError):
    """Running the module on enumerated inputs failed or returned something unexpected."""


class UnsupportedFakeQuantizeError(ModelError):
    """A torch.ao fake quantizer whose outputs are not one fixed set of values: still observing, disabled, or
    per channel (the message names it and the call that fixes it)."""


class UnsupportedQuantizerError(ModelError):
    """A brevitas quantizer whose outputs are not one fixed, finite set of values iotable can tabulate."""


class GraphError(ModelError):
    """The interlayer graph breaks an invariant (see :meth:`Graph.check <iotable.graph.Graph.check>`)."""


class NodeExecutionError(ModelError, RuntimeError):
    """A node of the interlayer graph failed while a :class:`~iotable.graph.GraphInterpreter` executed it;
    the message names the node, and the original error is chained."""


# -- bad input data ---------------------------------------------------------------------------------------------


class DomainError(InputError):
    """A quantized domain is malformed, or a value or code does not belong to it."""


class TableError(InputError):
    """An IOTable was built from inconsistent arrays, or looked up with malformed codes."""


class MissingRowError(InputError, LookupError):
    """A lookup hit a row that a partial table does not hold and no don't-care value was declared."""


# -- files ------------------------------------------------------------------------------------------------------


class BundleError(FileError, ValueError):
    """A bundle cannot be written or read: a bad target path, a missing or corrupted file, a bad manifest."""


class CacheError(FileError, OSError):
    """A table file cannot be written or the cache directory cannot be used (``cache_dir``, a full disk, ...).

    ``errno``, ``strerror`` and ``filename`` are the system's, when a disk operation failed.
    """

    def __str__(self) -> str:  # the message, not OSError's "[Errno n] ..." form
        return str(self.args[0]) if self.args else ""


class PLAError(FileError, ValueError):
    """A table cannot be written as PLA, or a PLA file does not match what it should hold."""


class ONNXFileError(FileError, ValueError):
    """An ONNX file (or ``onnx.ModelProto``) that cannot be read and trusted as a QONNX model: truncated, too
    large, a tensor of an absurd size, data stored outside the file, a missing initializer."""


# -- external tools ---------------------------------------------------------------------------------------------


class BrevitasNotInstalledError(ToolError, ImportError):
    """brevitas is not installed (or too old); the message names the extra to install."""


class GraphvizNotInstalledError(ToolError, ImportError):
    """Graphviz is missing (the ``graphviz`` Python package or the ``dot`` program); the message says which."""


class ONNXNotInstalledError(ToolError, ImportError):
    """A package of the ``onnx`` extra (``onnx``; ``qonnx`` and ``onnxruntime`` for checking a QONNX model) is not
    installed; the message names the extra to install (``iotable[onnx]``)."""


class MatplotlibNotInstalledError(ToolError, ImportError):
    """matplotlib is not installed, and a sweep's plot needs it; the message names the extra (``iotable[sweep]``)."""


class HDLToolError(ToolError, RuntimeError):
    """An HDL tool (iverilog, ghdl, verilator, yosys) refused the design or did not finish in time; the
    message carries the tool's own output."""


class SimulatorNotInstalledError(HDLToolError):
    """An HDL tool a call needs (iverilog, ghdl, verilator, yosys) is not on ``PATH``; the message names the
    Debian package that provides it."""


class ABCError(ToolError, RuntimeError):
    """ABC, the logic synthesis tool that maps tables onto LUTs, failed or did not finish in time; the
    message carries its own output."""


class ABCNotInstalledError(ABCError):
    """No ABC program (``berkeley-abc``, ``yosys-abc`` or ``abc``) is on ``PATH``; the message names the
    Debian package ``berkeley-abc``."""


# -- checks that found a difference -----------------------------------------------------------------------------


class NetlistMismatchError(MismatchError, RuntimeError):
    """A mapped LUT netlist does not compute its table: evaluated on every row of the table (its care rows
    for a partial table), some output differs. The message names the table, the row and both outputs. Also
    raised by ``implement(..., verify=N)`` when a synthesized or routed netlist differs from the design's
    reference vectors (the message names the netlist and the first mismatch)."""
