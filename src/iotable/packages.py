"""Layers of the field's own packages whose forward cannot run on a CPU, read from their parameters.

torch-dwn's ``LUTLayer`` (1.1.x) computes its forward only in its CUDA extension (on a CPU tensor it raises). Its
function is fully stated by its parameters, and the package's kernel defines how they are read: node ``j`` reads
the inputs ``mapping[j, 0..n-1]`` (with a learnable mapping, ``mapping.weights.argmax(0)`` picked through the
layer's own index table), each input gives one address bit, ``input > 0``, bit ``l`` from ``mapping[j, l]``
(least significant first), and the node's output is ``luts[j, address]``, then ``> 0`` as 0.0 / 1.0 when the
layer's straight-through flag ``ste`` is set (its default) or the raw entry otherwise. :func:`read_layers` gives a
copy of a model in which each such layer is replaced by :class:`LUTNodes` holding exactly that reading, so
:func:`iotable.precompute` tabulates it through the black box like any layer; precompute says so in an
:class:`~iotable.IOTableWarning`, and :func:`iotable.verify` refuses to run the package's forward on a CPU and
names the comparison that can run.

difflogic's ``LogicLayer`` built for CUDA (``implementation="cuda"``, its default) computes its forward in
the package's CUDA extension too: it is read as :class:`GateNodes`, gate ``weights.argmax(-1)`` (difflogic's
numbering) of the inputs ``indices[0]``, ``indices[1]``, as the package evaluates it in eval mode.

The rest of these packages runs on a CPU and needs no reading: torch-dwn's ``GroupSum`` (its thermometer
encoders binarize the data before the model), torchlogix's ``LogicDense`` and ``GroupSum``, and difflogic's
``LogicLayer`` with its Python implementation (``implementation="python"``) and ``GroupSum`` are traced and
enumerated through their own forward. Nothing here imports the packages: a layer is recognised by its class's
module and name.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .errors import IOTableWarning, ModelError

__all__ = ["GateNodes", "LUTNodes", "PackageLayer", "cpu_unrunnable", "read_layers"]

#: The widest LUT node read (address bits): a larger node's table alone would hold more than 2**20 entries.
MAX_NODE_BITS = 20


class LUTNodes(nn.Module):
    """A layer of LUT nodes: node ``j`` reads the inputs ``mapping[j]`` as address bits (``input > 0``, the
    first index least significant) and outputs ``table[j, address]``.

    Args:
        mapping: ``(nodes, n)`` integer indices into the last axis of the input.
        table: ``(nodes, 2**n)`` outputs, float32.

    Example:
        >>> layer = LUTNodes(torch.tensor([[0, 1]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]]))  # XOR
        >>> layer(torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])).tolist()
        [[0.0], [1.0], [0.0]]
    """

    mapping: torch.Tensor
    table: torch.Tensor
    weights: torch.Tensor
    nodes: torch.Tensor

    def __init__(self, mapping: torch.Tensor, table: torch.Tensor) -> None:
        super().__init__()
        if mapping.ndim != 2 or table.ndim != 2 or table.shape != (mapping.shape[0], 2 ** mapping.shape[1]):
            msg = (
                f"LUTNodes: expected mapping (nodes, n) and table (nodes, 2**n), received mapping "
                f"{tuple(mapping.shape)} and table {tuple(table.shape)}"
            )
            raise ModelError(msg)
        self.register_buffer("mapping", mapping.detach().to(torch.int64).clone())
        self.register_buffer("table", table.detach().to(torch.float32).clone())
        self.register_buffer("weights", 2 ** torch.arange(mapping.shape[1], dtype=torch.int64))
        self.register_buffer("nodes", torch.arange(mapping.shape[0], dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        address = ((x[..., self.mapping] > 0).to(torch.int64) * self.weights).sum(-1)
        return self.table[self.nodes, address]

    def extra_repr(self) -> str:
        nodes, n = self.mapping.shape
        return f"nodes={nodes}, n={n}"


#: Each of the 16 two-input gates of difflogic, as the coefficients of ``1, a, b, a*b`` in its real-valued form
#: (the package's table: gate 1 is ``a*b``, 6 is ``a + b - 2ab``, 15 is ``1``); on inputs 0 and 1, its truth table.
GATE_COEFFICIENTS = (
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 1, 0, -1), (0, 1, 0, 0), (0, 0, 1, -1), (0, 0, 1, 0), (0, 1, 1, -2), (0, 1, 1, -1),
    (1, -1, -1, 1), (1, -1, -1, 2), (1, 0, -1, 0), (1, 0, -1, 1), (1, -1, 0, 0), (1, -1, 0, 1), (1, 0, 0, -1),
    (1, 0, 0, 0),
)  # fmt: skip


class GateNodes(nn.Module):
    """A layer of two-input gates: node ``j`` computes gate ``gates[j]`` (difflogic's numbering, 0-15) of the
    inputs ``a[j]`` and ``b[j]``, as the real-valued form difflogic evaluates (exact on inputs 0 and 1).

    Args:
        a: ``(nodes,)`` indices of each gate's first input.
        b: ``(nodes,)`` indices of each gate's second input.
        gates: ``(nodes,)`` gate numbers.

    Example:
        >>> layer = GateNodes(torch.tensor([0, 0]), torch.tensor([1, 1]), torch.tensor([1, 6]))  # AND, XOR
        >>> layer(torch.tensor([[1.0, 1.0], [1.0, 0.0]])).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """

    a: torch.Tensor
    b: torch.Tensor
    coefficients: torch.Tensor

    def __init__(self, a: torch.Tensor, b: torch.Tensor, gates: torch.Tensor) -> None:
        super().__init__()
        if not (a.shape == b.shape == gates.shape and a.ndim == 1):
            msg = (
                f"GateNodes: expected a, b and gates of one shape (nodes,), received {tuple(a.shape)}, "
                f"{tuple(b.shape)} and {tuple(gates.shape)}"
            )
            raise ModelError(msg)
        table = torch.tensor(GATE_COEFFICIENTS, dtype=torch.float32)
        self.register_buffer("a", a.detach().to(torch.int64).clone())
        self.register_buffer("b", b.detach().to(torch.int64).clone())
        self.register_buffer("coefficients", table[gates.detach().to(torch.int64)].T.contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., self.a], x[..., self.b]
        c = self.coefficients
        return c[0] + c[1] * a + c[2] * b + c[3] * (a * b)

    def extra_repr(self) -> str:
        return f"nodes={self.a.shape[0]}"


@dataclass(frozen=True)
class PackageLayer:
    """A package's layer class that :func:`read_layers` reads from its parameters.

    Attributes:
        package: the distribution's name as users install it (``"torch-dwn"``).
        module: the class's module (``"torch_dwn.lut_layer"``).
        name: the class's name (``"LUTLayer"``).
        tested: the package versions the reading was checked against.
        read: a function of the module and its name in the model giving the equivalent module.
        reads: what the reading takes from the module, for messages.
        unrunnable: whether a module of the class computes its forward on CUDA only (default: always).
        cpu_path: what the package offers to run such a module on a CPU, for messages.
    """

    package: str
    module: str
    name: str
    tested: str
    read: Callable[[nn.Module, str], nn.Module]
    reads: str
    unrunnable: Callable[[nn.Module], bool] = lambda module: True
    cpu_path: str = "the package has no CPU path"

    def covers(self, module: nn.Module) -> bool:
        """Whether ``module`` is of this class (or a subclass of it)."""
        return any(c.__module__ == self.module and c.__qualname__ == self.name for c in type(module).__mro__)


def _int_matrix(value: object, shape: tuple[int, ...], bound: int, what: str, where: str) -> torch.Tensor:
    """``value`` as an int64 ``shape`` tensor of indices below ``bound``, or a ModelError naming ``what``."""
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype.is_complex:
        got = type(value).__name__ if not isinstance(value, torch.Tensor) else f"a {value.dtype} tensor"
        msg = f"{where}: expected {what} to be an integer tensor of shape {shape}, received {got}"
        raise ModelError(msg)
    if tuple(value.shape) != shape:
        msg = f"{where}: expected {what} of shape {shape}, received {tuple(value.shape)}"
        raise ModelError(msg)
    value = value.detach().cpu().to(torch.int64)
    bad = (value < 0) | (value >= bound)
    if bool(bad.any()):
        at = tuple(int(i) for i in bad.nonzero()[0])
        msg = (
            f"{where}: {what}{list(at)} is {int(value[at])}; expected an index in 0..{bound - 1}: the layer reads "
            f"{bound} input(s)"
        )
        raise ModelError(msg)
    return value


def _dwn_mapping(module: nn.Module, nodes: int, n: int, inputs: int, where: str) -> torch.Tensor:
    """The ``(nodes, n)`` input indices of a torch-dwn LUTLayer: its fixed ``mapping``, or its learnable
    mapping's choice (``weights.argmax(0)``) picked through the layer's index table, as the package's forward
    composes them."""
    mapping = getattr(module, "mapping", None)
    if isinstance(mapping, nn.Module):  # torch_dwn.mapping.LearnableMapping
        weights = getattr(mapping, "weights", None)
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (inputs, nodes * n):
            got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            msg = (
                f"{where}: expected its learnable mapping's weights of shape ({inputs}, {nodes * n}) (input_size, "
                f"output_size * n), received {got}"
            )
            raise ModelError(msg)
        chosen = weights.detach().cpu().argmax(dim=0)  # the package's own choice, first maximum on ties
        picks = _int_matrix(
            getattr(module, "_LUTLayer__dummy_mapping", None), (nodes, n), nodes * n, "its index table", where
        )
        return chosen[picks]
    return _int_matrix(mapping, (nodes, n), inputs, "mapping", where)


def _read_dwn(module: nn.Module, where: str) -> LUTNodes:
    """torch-dwn's LUTLayer as :class:`LUTNodes`, read as its CUDA kernel and straight-through step compute."""
    sizes = {k: getattr(module, k, None) for k in ("input_size", "output_size", "n")}
    if not all(isinstance(v, int) and v > 0 for v in sizes.values()):
        msg = f"{where}: expected torch-dwn's positive integer input_size, output_size and n, received {sizes}"
        raise ModelError(msg)
    inputs, nodes, n = (int(v) for v in sizes.values() if isinstance(v, int))
    if n > MAX_NODE_BITS:
        msg = f"{where}: its nodes read n={n} inputs; expected at most {MAX_NODE_BITS} (2**n entries per node)"
        raise ModelError(msg)
    luts = getattr(module, "luts", None)
    if not isinstance(luts, torch.Tensor) or tuple(luts.shape) != (nodes, 2**n):
        got = tuple(luts.shape) if isinstance(luts, torch.Tensor) else type(luts).__name__
        msg = f"{where}: expected luts of shape ({nodes}, {2**n}) (output_size, 2**n), received {got}"
        raise ModelError(msg)
    entries = luts.detach().cpu().to(torch.float32)  # the kernel reads float32 entries
    if not bool(torch.isfinite(entries).all()):
        msg = f"{where}: its luts hold a value that is not finite; expected finite entries (retrain or clamp them)"
        raise ModelError(msg)
    mapping = _dwn_mapping(module, nodes, n, inputs, where)
    ste = getattr(module, "ste", True)
    return LUTNodes(mapping, (entries > 0).to(torch.float32) if ste else entries)


def _read_difflogic(module: nn.Module, where: str) -> GateNodes:
    """difflogic's LogicLayer as :class:`GateNodes`: in eval mode, gate ``weights.argmax(-1)`` of the inputs
    ``indices``, as both its implementations compute it."""
    sizes = {k: getattr(module, k, None) for k in ("in_dim", "out_dim")}
    if not all(isinstance(v, int) and v > 0 for v in sizes.values()):
        msg = f"{where}: expected difflogic's positive integer in_dim and out_dim, received {sizes}"
        raise ModelError(msg)
    inputs, nodes = (int(v) for v in sizes.values() if isinstance(v, int))
    weights = getattr(module, "weights", None)
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (nodes, 16):
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        msg = f"{where}: expected weights of shape ({nodes}, 16) (out_dim, one per gate), received {got}"
        raise ModelError(msg)
    indices = getattr(module, "indices", None)
    if not isinstance(indices, (tuple, list)) or len(indices) != 2:
        msg = f"{where}: expected indices to be the pair (a, b) of index tensors, received {type(indices).__name__}"
        raise ModelError(msg)
    a, b = (_int_matrix(t, (nodes,), inputs, f"indices[{k}]", where) for k, t in enumerate(indices))
    return GateNodes(a, b, weights.detach().cpu().argmax(-1))


#: The package layers read from their parameters, in the order they are tried.
PACKAGE_LAYERS: tuple[PackageLayer, ...] = (
    PackageLayer(
        package="torch-dwn",
        module="torch_dwn.lut_layer",
        name="LUTLayer",
        tested="1.1.1",
        read=_read_dwn,
        reads="mapping (or its learnable mapping's weights), luts and ste",
    ),
    PackageLayer(
        package="difflogic",
        module="difflogic.difflogic",
        name="LogicLayer",
        tested="0.1.0",
        read=_read_difflogic,
        reads="indices and the gate weights.argmax(-1)",
        unrunnable=lambda module: getattr(module, "implementation", None) == "cuda",
        cpu_path="setting the layer's implementation = 'python' (the package's own CPU path) runs it on a CPU",
    ),
)


def _package_layer(module: nn.Module) -> PackageLayer | None:
    return next((p for p in PACKAGE_LAYERS if p.covers(module) and p.unrunnable(module)), None)


def cpu_unrunnable(model: nn.Module) -> list[tuple[str, PackageLayer]]:
    """The submodules of ``model`` (``(name, kind)``, ``""`` for the model itself) whose forward runs on CUDA
    only, outermost first; none inside another."""
    found: list[tuple[str, PackageLayer]] = []
    for name, module in model.named_modules():
        kind = _package_layer(module)
        if kind is not None and not any(name.startswith(f"{outer}.") or outer == "" for outer, _ in found):
            found.append((name, kind))
    return found


def read_layers(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in which every layer whose forward runs on CUDA only (torch-dwn's ``LUTLayer``,
    difflogic's ``LogicLayer`` built for CUDA) is replaced by its reading (:class:`LUTNodes`,
    :class:`GateNodes`): what :func:`iotable.precompute` tabulates, and what
    :func:`iotable.verify` can compare with on a CPU (a model that is one such layer gives an ``nn.Sequential`` of
    its reading). ``model`` itself when it holds no such layer.

    Raises:
        ModelError: a layer's parameters do not have the package's shapes, or an index is out of range.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Identity())
        >>> read_layers(net) is net
        True
    """
    found = cpu_unrunnable(model)
    if not found:
        return model
    readings = {name: kind.read(model.get_submodule(name), f"layer {name or type(model).__name__!r}")
                for name, kind in found}  # fmt: skip
    if "" in readings:  # the model is one such layer: its reading, in a Sequential so that it traces as a layer
        return nn.Sequential(readings[""])
    copied = copy.deepcopy(model)
    for name, reading in readings.items():
        parent, _, child = name.rpartition(".")
        setattr(copied.get_submodule(parent), child, reading)
    return copied


def read_for(model: nn.Module, what: str, *, stacklevel: int = 3) -> nn.Module:
    """:func:`read_layers` for ``what`` (``"precompute"``), with an :class:`~iotable.IOTableWarning` naming
    each layer read from its parameters instead of run."""
    found = cpu_unrunnable(model)
    if not found:
        return model
    read = read_layers(model)
    names = ", ".join(f"{name or type(model).__name__!r} ({kind.package}'s {kind.name})" for name, kind in found)
    kinds = {kind.package: kind for _, kind in found}.values()
    reads = "; ".join(f"{k.package} {k.tested}: {k.reads}" for k in kinds)
    msg = (
        f"{what}: layer(s) {names} compute their forward on CUDA only, so their tables are read from their "
        f"parameters ({reads}) by the package's own rule instead of running them; iotable.verify compares with "
        "iotable.read_layers(model) on a CPU, and with the package's forward only where that runs (CUDA)"
    )
    warnings.warn(msg, IOTableWarning, stacklevel=stacklevel)
    return read


def check_runnable(model: nn.Module, inputs: object, what: str) -> None:
    """Refuse, before running ``model`` on ``inputs`` away from CUDA, a layer whose forward runs on CUDA only."""
    found = cpu_unrunnable(model)
    if not found or (isinstance(inputs, torch.Tensor) and inputs.is_cuda):
        return
    name, kind = found[0]
    msg = (
        f"{what}: layer {name or type(model).__name__!r} is {kind.package}'s {kind.name}, whose forward runs on "
        f"CUDA only ({kind.package} {kind.tested}: {kind.cpu_path}), and the inputs are not on CUDA; compare with "
        f"what precompute tabulated, iotable.read_layers(model) (its {kind.reads} read by the package's rule), "
        "or run the model on a CUDA machine and compare its outputs with net.run"
    )
    raise ModelError(msg)
