"""Decomposition metadata inferred from a module's structure, for a flat (``"NC"``) module that declares none.

:func:`inferred_spec` runs :func:`~iotable.front.dependence.dependence` on an example batch and turns what
each output may depend on into units: one unit per output, reading the inputs it may depend on. A module whose
dependence cannot be bounded is refused with its name and what to declare: one that mixes samples, or one
whose forward takes a decision in Python on a value computed from its input. The units are an upper bound:
the table check after enumeration removes the inputs that never change a table.
"""

from __future__ import annotations

import operator
import weakref

import torch
import torch.fx as fx
from torch import nn

from .._util.modules import plain_attributes, restore_attributes
from ..errors import IOTableError, SpecError
from ..nn import domain_of
from ..packages import GateNodes, LUTNodes
from .dependence import Dependence, dependence
from .glue import _ARITHMETIC, _ARITHMETIC_METHODS
from .layout import Layout
from .metadata import Spec, declared_spec
from .region import Region
from .registry import Role, kind_of, role_of

__all__ = [
    "INFERRED",
    "arithmetic_only",
    "inferable",
    "inferred_leaf",
    "inferred_spec",
    "outputs_from_tables",
    "units_of",
]

#: The ``source`` of an inferred :class:`Spec` starts with this.
INFERRED = "inferred from the module's structure"


def inferable(module: nn.Module) -> bool:
    """Whether iotable infers the units of ``module`` when it declares none: a module of the user's own (not a
    container, a quantizer or a registered layer kind, nor a class of torch, brevitas, torchao or iotable,
    whose layers have built-in rules or are refused by name), or a region of such a module's calls between two
    quantizers (:class:`~iotable.front.region.Region`)."""
    if isinstance(module, Region):
        return True
    if isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
        return False
    if isinstance(module, (LUTNodes, GateNodes)):  # a package's layer read from its parameters, as the layer was
        return True
    if type(module).__module__.split(".")[0] in ("torch", "brevitas", "torchao", "iotable"):
        return False
    try:
        return kind_of(module) is None and domain_of(module) is None  # not a known kind, not a quantizer
    except IOTableError:
        return False  # a quantizer iotable refuses as it is: planning says why, by name


def inferred_leaf(module: nn.Module) -> bool:
    """Whether a traced model keeps ``module`` whole as one layer whose units are inferred: a module of the
    user's own (:func:`inferable`) that holds parameters or buffers itself (a layer), or that holds some below
    it and no quantizer (a block of sub-layers with nothing quantized between them, such as PolyLUT-Add's
    sub-neurons and their adder)."""
    if not inferable(module) or arithmetic_only(module):
        return False
    own = [*module._parameters.values(), *module._buffers.values()]
    if any(t is not None for t in own):
        return True
    below = next(iter(module.parameters()), None) is not None or next(iter(module.buffers()), None) is not None
    return below and not any(_quantizes(m) for m in module.modules())


def outputs_from_tables(module: nn.Module) -> bool:
    """Whether a mixing layer that no quantizer follows takes its output domain from its own tables: a module of
    the user's own (inferred, a region, or declared with no output domain), such as a DWN LUT layer or a DiffLogic
    gate layer, whose exhaustive tables hold every value it can give. torch's and brevitas' layers (and the kinds
    registered for them), declared or not, are not: their floats want a quantizer after them (the refusal says
    where)."""
    if role_of(module) is Role.MIXING:
        return False
    declared = declared_spec(module)
    if declared is not None:
        return declared.output_domain is None and declared.output_domain_from is None
    return isinstance(module, Region) or inferred_leaf(module)


#: What the forward of an arithmetic module may call besides arithmetic: shapes, views, sums and argmax.
_SHAPES = {"size", "dim", "view", "reshape", "flatten"}
_REDUCTIONS = {"sum", "argmax"}
_SHAPE_FUNCTIONS = {getattr, operator.getitem, torch.flatten, torch.reshape}
_REDUCTION_FUNCTIONS = {torch.sum, torch.argmax}


_ARITHMETIC_ONLY: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def arithmetic_only(module: nn.Module) -> bool:
    """Whether ``module`` (a layer of the user's own, without submodules) computes only arithmetic that becomes
    ``sum`` and ``argmax`` nodes: its forward, traced alone, is views, sums or an argmax, and arithmetic with
    numbers or its own tensors (TreeLUT's class sums with their bias). Such a module is traced into, not kept
    whole as a table (remembered per module).

    The trace runs the forward's Python code on torch.fx proxies: every module's plain attributes (numbers,
    strings and containers of those, such as ``self.seen = self.seen + x.shape[0]``) are put back afterwards,
    and those the trace made are removed. Module-level globals a forward writes cannot be restored."""
    known = _ARITHMETIC_ONLY.get(module)
    if known is None:
        known = _ARITHMETIC_ONLY[module] = _arithmetic_only(module)
    return known


def _arithmetic_only(module: nn.Module) -> bool:
    if next(iter(module.children()), None) is not None or not inferable(module):
        return False
    state = plain_attributes(module)  # the trace runs the forward, which may write proxies into them
    try:
        graph = fx.symbolic_trace(module).graph
    except Exception:  # any forward torch.fx cannot trace alone (shape asserts, Python branches): kept whole
        return False
    finally:
        restore_attributes(state)
    reduces = False
    for node in graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        target = node.target
        if node.op == "call_method" and target in _SHAPES | _REDUCTIONS | set(_ARITHMETIC_METHODS):
            reduces |= target in _REDUCTIONS
        elif node.op == "call_function" and (target in _SHAPE_FUNCTIONS or target in _ARITHMETIC):
            continue
        elif node.op == "call_function" and target in _REDUCTION_FUNCTIONS:
            reduces = True
        else:
            return False
    return reduces


def _quantizes(module: nn.Module) -> bool:
    try:
        return domain_of(module) is not None
    except IOTableError:
        return True  # a quantizer iotable refuses as it is


def units_of(found: Dependence) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """``(fan_in, fan_out)``: one unit per output (one table per neuron, as the field builds them), reading
    what the output may depend on; an output that depends on nothing reads the first input (a table has at
    least one)."""
    fan_in = tuple(found.fan_in(o) or (0,) for o in range(found.matrix.shape[0]))
    return fan_in, tuple((o,) for o in range(len(fan_in)))


def inferred_spec(module: nn.Module, example: torch.Tensor, name: str) -> Spec:
    """The units of a flat module with no metadata, from one run on ``example`` (two or more samples of
    shape ``(features,)``).

    Raises:
        SpecError: the module does not map each sample to its own output, its forward decides on values
            computed from its input, or its output is not flat; each message names the module and the fix.
    """
    declare = f"declare its units with iotable.decompose({name}, fan_in=...)"
    with torch.no_grad():
        found = dependence(module, example)
    samples = int(example.shape[0])
    if found.crosses_samples:
        with torch.no_grad():
            rows = _rows(module(example))
        if rows != samples:
            msg = (
                f"{name}: returned {rows} rows for {samples} inputs: a module must map each sample to its own "
                f"output (stack sub-results along a feature axis, not the batch axis), or {declare}"
            )
        else:
            msg = f"{name}: the output of one sample depends on the input of another; a table cannot compute it"
        raise SpecError(msg)
    if found.escapes:
        msg = (
            f"{name}: its forward reads back a value computed from its input ({', '.join(found.escapes)}), so "
            f"the inputs each output depends on cannot be bounded from its structure; {declare}"
        )
        raise SpecError(msg)
    if found.sparse:
        msg = (
            f"{name}: its forward makes a sparse tensor from its input ({', '.join(found.sparse)}), whose "
            f"dependence on the inputs cannot be followed; keep values computed from the input dense (a sparse "
            f"constant weight, as in torch.sparse.mm(weight, x), is fine), or {declare}"
        )
        raise SpecError(msg)
    fan_in, fan_out = units_of(found)
    source = INFERRED
    if found.unknown:
        source += f" ({', '.join(found.unknown)} taken to read every input: {declare} if that is too wide)"
    return Spec(fan_in=fan_in, fan_out=fan_out, layout=Layout.NC, source=source)


def _rows(out: object) -> int:
    if isinstance(out, torch.Tensor):
        return int(out.shape[0]) if out.dim() else 1
    return -1
