"""Cutting a traced model into steps at quantizers (:func:`segment`).

Everything from a quantized tensor up to the next quantizer is one *segment*: a table layer (one mixing layer
such as a Linear or a convolution plus elementwise modules, or an add of two quantized tensors, then a
quantizer). Max-pools, flattens and concats of quantized tensors become structural steps; modules the user
marks as host run with torch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch import nn

from ..errors import ModelError
from ..nn import domain_of
from .glue import Arithmetic, _elementwise_call
from .infer import inferred_leaf, outputs_from_tables
from .metadata import declared_spec
from .region import OpenRegion, Region, step_inputs
from .registry import Role, kind_of, role_of

if TYPE_CHECKING:
    from .trace import Chain

__all__ = ["Step", "segment"]

_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape}
_RESHAPE_METHODS = {"flatten", "view", "reshape"}
_ADD = {operator.add, torch.add}
#: Reductions and decisions that become arithmetic nodes (``sum``, ``argmax``).
_SUM_CALLS = {torch.sum}
_ARGMAX_CALLS = {torch.argmax}


def _user_module(node: fx.Node) -> tuple[str, str] | None:
    """``(qualified name, class name)`` of the innermost user module (not torch's, not brevitas') ``node`` was
    traced inside, from torch.fx's module stack; ``None`` at the model's top level."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, cls in reversed(list(stack.values())):
        origin = getattr(cls, "__module__", "") or ""
        if path and not origin.startswith(("torch.", "brevitas.")):
            return str(path), getattr(cls, "__name__", str(cls))
    return None


@dataclass
class Step:
    """One step of the table network, in model order.

    ``kind`` is ``"table"`` (a segment: ``modules`` from ``sources`` up to a quantizer or the output),
    ``"pool"``, ``"reshape"``, ``"concat"``, ``"host"``, ``"sum"`` (a sum of codes along ``meta["dims"]``
    of ``meta["in_shape"]``, then the arithmetic with constants in ``modules``), ``"argmax"``
    (``meta["dim"]``, ``meta["keepdim"]``), ``"input"`` or ``"output"``. ``sources`` are the names of earlier
    steps; ``mixing`` names the segment's mixing layer (``"add"`` for a join).
    """

    name: str
    kind: str
    sources: list[str]
    shape: tuple[int, ...]
    modules: list[nn.Module] = field(default_factory=list)
    module_names: list[str] = field(default_factory=list)
    mixing: str | None = None
    closed: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


def _is_mixing(m: nn.Module) -> bool:
    return isinstance(m, Region) or declared_spec(m) is not None or role_of(m) is Role.MIXING or inferred_leaf(m)


def _averages(m: nn.Module) -> bool:
    """Whether ``m``'s output is a float that only a quantizer turns back into codes (an average)."""
    kind = kind_of(m)
    return kind is not None and kind.needs_quantizer_after


def _closes(m: nn.Module) -> bool:
    """Whether a module's outputs are codes: a quantizer, or a module that declares its ``output_domain``.

    Neuron modules in the LogicNets / PolyLUT / NeuraLUT style apply their output quantizer inside their own
    forward; declaring it (``decompose(..., output_domain=...)``) closes their table layer as a quantizer does.
    """
    declared = declared_spec(m)
    if declared is not None and (declared.output_domain is not None or declared.output_domain_from is not None):
        return True
    if declared is None and inferred_leaf(m) and domain_of(_last_child(m)) is not None:
        return True  # a layer of the user's own whose last submodule is its output quantizer
    return domain_of(m) is not None


def _last_child(m: nn.Module) -> nn.Module:
    children = list(m.children())
    return children[-1] if children else m


def segment(module: fx.GraphModule | Chain, *, host: frozenset[str]) -> list[Step]:
    """Cut a traced model into steps (see :class:`Step`); raise :class:`ModelError` where it cannot."""
    return _Segmenter(module, host).run()


class _Segmenter:
    """One walk over a traced graph, node by node in model order, growing the steps of :func:`segment`.

    ``steps`` holds the steps found so far by name, ``order`` their order, and ``value`` the step that
    produces each fx node's tensor. A table step stays *open* (``closed=False``) while elementwise modules
    and a mixing layer join it, and closes at its quantizer.
    """

    def __init__(self, module: fx.GraphModule | Chain, host: frozenset[str]) -> None:
        self.module, self.host = module, host
        self.root = module.meta.get("root")
        self.steps: dict[str, Step] = {}
        self.value: dict[str, str] = {}  # fx node name -> step name producing it
        self.order: list[str] = []
        self.stacks: dict[str, list[str]] = {}  # fx node of a cat along the batch axis -> the steps it stacks
        self.regions: dict[str, OpenRegion] = {}  # step name -> the region it gathers (see region_call)
        self.inside: dict[fx.Node, OpenRegion] = {}  # a node of a closed region that the region does not return

    def run(self) -> list[Step]:
        """Every node in turn, then each step's ``meta["fx_node"]``: the last node it produced."""
        for node in self.module.graph.nodes:
            self.visit(node)
        for region in list(self.regions.values()):  # read by nothing: it returns its last value
            self.close_region(region, region.members[-1])
        for fx_name, step_name in self.value.items():  # in model order: the last node a step produced is its output
            if step_name in self.steps:
                self.steps[step_name].meta["fx_node"] = fx_name
        return [self.steps[n] for n in self.order]

    def visit(self, node: fx.Node) -> None:
        """Dispatch one node by its kind: the input, the output, a module (or an elementwise call), a function."""
        if node.op == "placeholder":
            self.placeholder(node)
            return
        if node.op != "get_attr" and self.in_region(node):
            return
        if node.op == "output":
            self.output(node)
        elif node.meta.get("shape") is None:
            return  # parameters (read by the glue that uses them), sizes and other non-tensor values
        else:
            functional = _elementwise_call(node, self.root)
            if node.op == "call_module" or functional is not None:
                self.call_module(node, functional)
            else:
                self.call_function(node)

    # Bookkeeping.

    def add(self, step: Step) -> Step:
        """Record a new step, renamed ``name_1``, ``name_2``, ... when a module is called more than once."""
        base, k = step.name, 1
        while step.name in self.steps:
            step.name, k = f"{base}_{k}", k + 1
        self.steps[step.name] = step
        self.order.append(step.name)
        return step

    def remove(self, step: Step) -> None:
        """Forget a step (it is about to be merged into another, or added again under a new name)."""
        self.order.remove(step.name)
        del self.steps[step.name]

    def produce(self, node: fx.Node, step: Step) -> None:
        """Record that ``node``'s tensor comes from ``step``."""
        self.value[node.name] = step.name

    def where(self, node: fx.Node) -> str:
        """``node``'s name and the module it was traced in: a submodule by qualified name and class, else the
        model's own forward."""
        return _node_where(node, self.root)

    def source(self, node: Any, user: fx.Node) -> Step:
        """The step that produced ``node``, an argument of ``user``; a non-tensor argument is refused."""
        if not isinstance(node, fx.Node) or node.name not in self.value:
            msg = f"{self.where(user)}: expected a tensor produced by an earlier layer, received {node!r}"
            raise ModelError(msg)
        return self.steps[self.value[node.name]]

    def check_users(self, step: Step, node: fx.Node) -> None:
        """An open (unquantized) table output must not fan out: each consumer reads codes."""
        consumers = [user for user in node.users if user.meta.get("shape") is not None]  # not ``x.shape`` reads
        if not step.closed and len(consumers) > 1:
            msg = (
                f"{self.where(node)}: the unquantized output of {step.mixing or step.name} feeds {len(consumers)} "
                "consumers; put a Quantize before the fan-out so each consumer reads codes"
            )
            raise ModelError(msg)

    def codes_from_table(self, step: Step, *, required: bool = True) -> bool:
        """Close the open table layer ``step`` for a reader of codes where its output domain can be the values its
        own tables hold: elementwise modules after codes, or a layer of the user's own (:func:`~iotable.front.
        infer.outputs_from_tables`). The builder takes it from them (``meta["domain_from_table"]``); where not
        ``required`` (the model's output), too many values leave the outputs raw."""
        if step.kind != "table" or step.closed or step.name in self.regions:
            return False
        if step.mixing is not None:
            if step.mixing not in step.module_names:
                return False  # a join (``"add"``)
            m = step.modules[step.module_names.index(step.mixing)]
            if _averages(m) or not outputs_from_tables(m):
                return False
        step.closed = True
        step.meta["domain_from_table"] = "required" if required else "if few"
        return True

    # The model's input and output.

    def placeholder(self, node: fx.Node) -> None:
        """The model's one input."""
        if self.steps:
            msg = f"{self.where(node)}: models with more than one input are not supported; wrap them to take one tensor"
            raise ModelError(msg)
        self.produce(node, self.add(Step("input", "input", [], node.meta["shape"], closed=True)))

    def output(self, node: fx.Node) -> None:
        """The model's one output: it closes the step producing it (raw values when that has no quantizer)."""
        result = node.args[0]
        if not isinstance(result, fx.Node):
            msg = f"the model returns {type(result).__name__}; expected a single tensor"
            raise ModelError(msg)
        last = self.source(result, node)
        if not last.closed and last.kind == "table" and any(_averages(m) for m in last.modules):
            msg = (
                f"{last.mixing}: the model's output is the unquantized average of {last.mixing}, a float no "
                f"table network can hold exactly in codes; put a quantizer after {last.mixing} (an average "
                "of quantized codes followed by a quantizer is one table per window)"
            )
            raise ModelError(msg)
        self.codes_from_table(last, required=False)  # codes where the tables show few values: hardware reads codes
        last.closed = True
        self.add(Step("output", "output", [last.name], last.shape, closed=True))

    # Modules, and calls that act as elementwise modules.

    def call_module(self, node: fx.Node, functional: nn.Module | None) -> None:
        """A module (or the module equivalent of an elementwise call): host, pool, flatten or table layer."""
        shape = node.meta["shape"]
        m = functional if functional is not None else self.module.get_submodule(str(node.target))
        target = node.name if functional is not None else str(node.target)
        reverse = isinstance(functional, Arithmetic) and functional.reverse  # ``number - x``: x comes second
        src = self.source(node.args[1] if reverse else node.args[0], node)
        if self.folds_into_sum(node, target, m, src):
            return
        if target in self.host or src.kind == "host":
            self.host_module(node, target, m, src)
            return
        quantizer = _closes(m)
        role = role_of(m) if declared_spec(m) is None else None
        if role in (Role.POOL, Role.RESHAPE):
            self.codes_from_table(src)
        if role is Role.POOL:
            if not src.closed:
                msg = (
                    f"{target}: max-pool reads the unquantized output of {src.mixing or src.name}; "
                    "put a Quantize before the pool (pooling quantized codes is exact)"
                )
                raise ModelError(msg)
            self.produce(node, self.add(Step(target, "pool", [src.name], shape, [m], [target], closed=True)))
        elif role is Role.RESHAPE:
            if not src.closed:
                msg = f"{target}: flatten reads an unquantized tensor; put a Quantize before it"
                raise ModelError(msg)
            self.produce(node, self.add(Step(target, "reshape", [src.name], shape, closed=True)))
        elif quantizer or role is Role.ELEMENTWISE or isinstance(m, Arithmetic) or _is_mixing(m):
            self.table_module(node, target, m, src, quantizer=quantizer)
        else:
            msg = (
                f"{target}: {type(m).__name__} has no decomposition metadata and no built-in rule; decorate "
                "it with iotable.decompose(...), or list it in host= to run it with torch"
            )
            raise ModelError(msg)

    def folds_into_sum(self, node: fx.Node, target: str, m: nn.Module, src: Step) -> bool:
        """Arithmetic with a number or a tensor of the model after an open sum (``/ tau``, ``+ bias``) is an affine
        function of the sum: it joins the sum step. Anything else closes the sum: it reads the sum's codes."""
        if src.kind != "sum" or src.closed:
            return False
        reverse = isinstance(m, Arithmetic) and m.reverse
        if isinstance(m, Arithmetic) and not (reverse and m.op == "div") and target not in self.host:
            src.modules.append(m)
            src.module_names.append(target)
            src.shape = node.meta["shape"]
            self.produce(node, src)
            return True
        src.closed = True
        return False

    def host_module(self, node: fx.Node, target: str, m: nn.Module, src: Step) -> None:
        """A module run with torch: listed in ``host=``, or after one. It reads codes (or a host's values): a
        table layer still open before it would have to run on the host too, which is refused, never done
        silently (:func:`_moves_to_host`)."""
        if not src.closed and src.kind == "table" and not self.codes_from_table(src):
            raise ModelError(_moves_to_host(target, src, self.root))
        self.produce(node, self.add(Step(target, "host", [src.name], node.meta["shape"], [m], [target], closed=True)))

    def table_module(self, node: fx.Node, target: str, m: nn.Module, src: Step, *, quantizer: bool) -> None:
        """A quantizer, an elementwise module or a mixing layer: it starts a table layer after a closed step,
        or joins the open one (which takes the mixing layer's name); a quantizer closes the layer."""
        mixing = _is_mixing(m)
        if src.closed or (mixing and src.mixing is not None and self.codes_from_table(src)):
            step = self.add(Step(target, "table", [src.name], node.meta["shape"]))
        elif mixing and src.mixing is not None:
            raise ModelError(_two_mixing_layers(target, m, src.mixing))
        else:
            step = src
            self.remove(step)
            step.name = target if mixing else step.name
            self.add(step)
        step.modules.append(m)
        step.module_names.append(target)
        step.shape = node.meta["shape"]
        if mixing:
            step.mixing = target
        if quantizer:
            step.closed = True
        self.produce(node, step)
        self.check_users(step, node)

    # Function and method calls between tables.

    def call_function(self, node: fx.Node) -> None:
        """A function or method call: a reshape, an add of two quantized tensors, a channel concat."""
        target = node.target
        if target in _RESHAPE_FUNCTIONS or (node.op == "call_method" and target in _RESHAPE_METHODS):
            src = self.source(node.args[0], node)
            if not src.closed and not self.codes_from_table(src):
                msg = f"{self.where(node)}: a reshape of an unquantized tensor; put a Quantize before it"
                raise ModelError(msg)
            self.produce(node, self.add(Step(node.name, "reshape", [src.name], node.meta["shape"], closed=True)))
        elif target in _ADD or (node.op == "call_method" and target == "add"):
            self.add_join(node)
        elif target is torch.cat:
            self.concat(node)
        elif target is operator.getitem and self.unstack(node):
            return
        elif target in _SUM_CALLS or (node.op == "call_method" and target == "sum"):
            self.reduce_sum(node)
        elif target in _ARGMAX_CALLS or (node.op == "call_method" and target == "argmax"):
            self.argmax(node)
        else:
            self.open_region(node)

    # Regions: the calls a module of the user's own makes between two quantizers (see iotable.front.region).

    def open_region(self, node: fx.Node) -> None:
        """A call with no meaning between tables, traced inside a module of the user's own: it begins a region
        that reads the one tensor it reads (a quantized one, or the open layer before it, which it takes in), and
        gathers every later call on values it computed until a quantizer reads one."""
        owner = _user_module(node)
        inputs = list(dict.fromkeys(step_inputs(node)))
        src = self.steps.get(self.value.get(inputs[0].name, "")) if len(inputs) == 1 else None
        if owner is None or src is None or src.kind == "host" or (not src.closed and src.kind != "table"):
            raise ModelError(_unsupported_call(node, self.root))
        if not src.closed and src.mixing == "add":
            raise ModelError(_unsupported_call(node, self.root))
        if src.closed:
            step = self.add(Step(owner[0], "table", [src.name], node.meta["shape"]))
        else:  # elementwise modules or a layer before it, unquantized: the region's table runs them first
            step = src
            self.remove(step)
            step.name = owner[0]
            self.add(step)
        self.regions[step.name] = OpenRegion(step.name, inputs[0], owner[0], owner[1], [node])
        self.produce(node, step)

    def in_region(self, node: fx.Node) -> bool:
        """Whether ``node`` joins an open region: it computes on the region's values and is no quantizer, host
        module or the model's output. Such a node that does not join closes the region first: the region then
        returns the value that node reads."""
        if node.meta.get("shape") is None and node.op != "output":
            return False  # sizes and other plain values: copied into a region with the calls that use them
        inputs = step_inputs(node)
        for n in inputs:
            if n in self.inside:
                raise ModelError(self.inside[n].refuse_inner_value(n, self.where(node)))
        regions = list({id(r): r for r in self.regions.values() for n in inputs if r.holds(n)}.values())
        if not regions:
            return False
        region = regions[0]
        if len(regions) > 1:
            raise region.refuse_other_input(node, regions[1].input, self.where(node))
        if not self.joins(node, region):
            read = list(dict.fromkeys(n for n in inputs if region.holds(n)))
            if len(read) > 1:
                raise region.refuse_other_input(node, read[1], self.where(node))
            self.close_region(region, read[0])
            return False
        other = next((n for n in inputs if not region.holds(n) and n is not region.input), None)
        if other is not None:
            raise region.refuse_other_input(node, other, self.where(node))
        region.members.append(node)
        self.produce(node, self.steps[region.step])
        return True

    def joins(self, node: fx.Node, region: OpenRegion) -> bool:
        """Whether a node that reads a region's value is part of it: any call but a quantizer, a host module, or a
        mixing layer outside the region's module (the next layer, which reads the codes the region's tables hold)."""
        if node.op == "output":
            return False
        if node.op == "call_module":
            target = str(node.target)
            m = self.module.get_submodule(target)
            inside = target.startswith(f"{region.owner}.")
            return target not in self.host and not _closes(m) and (inside or not _is_mixing(m))
        return True

    def close_region(self, region: OpenRegion, output: fx.Node) -> None:
        """Make ``region`` the mixing layer of its step, returning ``output``; its other values stay inside."""
        del self.regions[region.step]
        if not isinstance(self.module, fx.GraphModule):  # a chain of modules calls no function
            raise ModelError(_unsupported_call(region.members[0], self.root))
        module = region.close(self.module, output)
        step = self.steps[region.step]
        step.modules.append(module)
        step.module_names.append(step.name)
        step.mixing = step.name
        step.shape = output.meta["shape"]
        for n in region.members:
            if n is not output:
                self.value.pop(n.name, None)
                self.inside[n] = region
        self.check_users(step, output)

    def add_join(self, node: fx.Node) -> None:
        """``a + b`` of two quantized tensors of one shape: a table layer that reads both."""
        tensor_args = [a for a in node.args if isinstance(a, fx.Node) and a.meta.get("shape") is not None]
        if len(tensor_args) != 2 or node.kwargs:
            msg = f"{self.where(node)}: only the add of two tensors is supported; received args {node.args}"
            raise ModelError(msg)
        a, b = (self.source(t, node) for t in tensor_args)
        for operand in (a, b):
            self.codes_from_table(operand)
        if not (a.closed and b.closed) or a.kind == "host" or b.kind == "host":
            msg = f"{self.where(node)}: an add must read two quantized tensors; put a Quantize on each operand"
            raise ModelError(msg)
        if a.shape != b.shape:
            msg = f"{self.where(node)}: adding shapes {a.shape} and {b.shape}; broadcasting adds are not supported"
            raise ModelError(msg)
        step = self.add(Step(node.name, "table", [a.name, b.name], node.meta["shape"], mixing="add"))
        self.produce(node, step)
        self.check_users(step, node)

    def unstack(self, node: fx.Node) -> bool:
        """``x.chunk(n)[k]`` (along the batch axis) of ``torch.cat(parts, 0)``: the step of ``parts[k]``."""
        chunk = node.args[0]
        if not isinstance(chunk, fx.Node) or not (chunk.target == "chunk" or chunk.target is torch.chunk):
            return False
        stacked = chunk.args[0]
        count = chunk.args[1] if len(chunk.args) > 1 else chunk.kwargs.get("chunks")
        dim = chunk.args[2] if len(chunk.args) > 2 else chunk.kwargs.get("dim", 0)
        parts = self.stacks.get(stacked.name) if isinstance(stacked, fx.Node) else None
        if parts is None or dim != 0 or count != len(parts) or not isinstance(node.args[1], int):
            return False
        self.produce(node, self.steps[parts[node.args[1]]])
        return True

    def concat(self, node: fx.Node) -> None:
        """``torch.cat`` of quantized tensors along the channel axis."""
        parts = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        srcs = [self.source(p, node) for p in parts]  # type: ignore[union-attr]  # torch.cat's first argument
        for part in srcs:
            self.codes_from_table(part)
        if dim == 0 and all(s.closed and s.kind != "host" and s.shape == srcs[0].shape for s in srcs):
            # PolyLUT-Add's sub-neurons handed to their adder stacked along the batch axis: kept as the operands,
            # which a chunk along the same axis gives back (see unstack)
            self.stacks[node.name] = [s.name for s in srcs]
            return
        if dim != 1 or not all(s.closed and s.kind != "host" for s in srcs):
            msg = f"{self.where(node)}: only a concat of quantized tensors along the channel axis (dim=1) is supported"
            raise ModelError(msg)
        self.produce(node, self.add(Step(node.name, "concat", [s.name for s in srcs], node.meta["shape"], closed=True)))

    def codes_of(self, node: fx.Node, what: str) -> Step:
        """The step producing the codes ``node`` (a sum or an argmax) reads: a closed step, or an open sum, which it
        closes."""
        src = self.source(node.args[0], node)
        self.codes_from_table(src)
        if src.kind == "sum" or (src.kind == "table" and src.mixing not in (None, "add") and src.modules[-1:] and
                                 src.module_names[-1] == src.mixing):  # fmt: skip
            src.closed = True  # a sum's codes; a layer's outputs, codes where it becomes exact arithmetic
        if not src.closed or src.kind == "host":
            layer = src.mixing or src.name
            msg = f"{self.where(node)}: {what} reads the unquantized output of {layer}; put a Quantize before it"
            raise ModelError(msg)
        return src

    def reduce_sum(self, node: fx.Node) -> None:
        """``x.sum(dim)`` of codes (GroupSum, class sums): a sum step, open to the arithmetic after it."""
        src = self.codes_of(node, "a sum")
        args: dict[str, Any] = dict(zip(("input", "dim", "keepdim"), node.args)) | dict(node.kwargs)
        rank = len(src.shape)
        dims = args.get("dim")
        dims = tuple(range(rank)) if dims is None else (dims,) if isinstance(dims, int) else tuple(dims)
        if not all(isinstance(d, int) and -rank - 1 <= d <= rank for d in dims) or set(args) - {
            "input",
            "dim",
            "keepdim",
        }:
            msg = (
                f"{self.where(node)}: a sum over {args.get('dim')!r}; expected the sum of codes over axes of the sample"
            )
            raise ModelError(msg)
        axes = tuple(sorted({d % (rank + 1) - 1 for d in dims}))  # per-sample axes (the batch axis is 0)
        if -1 in axes:
            msg = f"{self.where(node)}: a sum over the batch axis mixes samples; sum over axes of one sample"
            raise ModelError(msg)
        keepdim = bool(args.get("keepdim", False))
        meta = {"dims": axes, "keepdim": keepdim, "in_shape": tuple(src.shape), "where": self.where(node)}
        step = self.add(Step(node.name, "sum", [src.name], node.meta["shape"], meta=meta))
        self.produce(node, step)

    def argmax(self, node: fx.Node) -> None:
        """``x.argmax(dim)`` of codes (or of class sums): the class decision."""
        src = self.codes_of(node, "an argmax")
        args: dict[str, Any] = dict(zip(("input", "dim", "keepdim"), node.args)) | dict(node.kwargs)
        rank, dim = len(src.shape), args.get("dim")
        if not isinstance(dim, int) or not -rank - 1 <= dim <= rank or dim % (rank + 1) == 0:
            msg = (
                f"{self.where(node)}: an argmax over {dim!r}; expected one axis of the sample (an argmax over the "
                "whole tensor or the batch axis has no per-sample hardware)"
            )
            raise ModelError(msg)
        meta = {"dim": dim % (rank + 1) - 1, "keepdim": bool(args.get("keepdim", False)), "where": self.where(node)}
        step = self.add(Step(node.name, "argmax", [src.name], node.meta["shape"], closed=True, meta=meta))
        self.produce(node, step)


def _two_mixing_layers(target: str, m: nn.Module, previous: str) -> str:
    """The message for a mixing layer reading the unquantized output of another."""
    if _averages(m):
        return (
            f"{target}: average pooling reads the unquantized output of {previous}; put a quantizer "
            f"after {previous} (an average of quantized codes followed by a quantizer is one table per "
            "window), or list both in host="
        )
    return (
        f"{target}: {previous} and {target} sit between the same pair of quantizers, so "
        "their composition has no small table; put a quantizer (iotable.nn.Quantize, or brevitas' "
        f"QuantIdentity) after {previous}, decorate a block holding both as one unit, or list "
        f"both in host= ({previous} and {target})"
    )


def _moves_to_host(target: str, src: Step, root: nn.Module | None) -> str:
    """The message for a module listed in ``host=`` that reads the unquantized output of the open table layer
    ``src``: running it with torch would take that layer's modules onto the host, which ``host=`` did not ask."""
    layer = src.mixing or src.name
    submodules = {n for n, _ in root.named_modules()} if root is not None else set(src.module_names)
    listed = [n for n in src.module_names if n in submodules]
    fixes = [f"put a quantizer before {target!r} so that {layer!r} ends in codes", f"drop {target!r} from host="]
    if listed:  # what follows a host module runs on the host too, so listing the first one would do
        fixes.insert(0, f"list them in host= too (host={[*listed, target]!r})")
    return (
        f"host=: {target!r} is listed to run with torch, but it reads the unquantized output of the table layer "
        f"{layer!r} (modules {src.module_names!r}), which would move onto the host with it; host= never moves a "
        f"table layer's modules silently: {', or '.join(fixes)}"
    )


def _node_where(node: fx.Node, root: nn.Module | None) -> str:
    """``node``'s name with the user module it was traced in (qualified name and class), else the model's."""
    owner = _user_module(node)
    if owner is not None:
        return f"{node.name} (in module {owner[0]!r}, a {owner[1]})"
    return node.name if root is None else f"{node.name} (in the forward of {type(root).__name__}, the model)"


def _unsupported_call(node: fx.Node, root: nn.Module | None) -> str:
    """The message for a function no table step stands for, naming the user module it was traced in."""
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    owner = _user_module(node)
    if owner is not None:  # an undecorated custom module that torch.fx traced into: name it, not the node
        path, cls = owner
        return (
            f"{path}: {cls} has no decomposition metadata, so its forward was traced into, and its call of "
            f"{name} is not supported between tables; decorate {cls} with iotable.decompose(...) (e.g. "
            f"fan_in=..., output_domain=...) so it becomes one unit, or list {path!r} in host= to run it "
            "with torch"
        )
    return (
        f"{_node_where(node, root)}: the function {name} is not supported between tables (supported: layers, "
        "elementwise modules and relu/tanh/sigmoid calls, arithmetic with a number or a per-channel parameter, "
        "quantizers, add, cat, flatten/view/reshape, max-pool, avg-pool); wrap the computation in a module "
        "decorated with iotable.decompose, or list the layer in host="
    )
