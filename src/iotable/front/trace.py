"""Tracing whole models with torch.fx and cutting them into table layers at quantizers.

The leaf tracer keeps torch layers (not containers), decorated modules and quantizers as single
``call_module`` nodes. :func:`segment` then walks the traced graph: everything from a quantized tensor up to
the next quantizer is one *segment* — a table layer (one mixing layer such as a Linear or a convolution plus
elementwise modules, or an add of two quantized tensors, then a quantizer). Max-pools, flattens and concats
of quantized tensors become structural steps; modules the user marks as host run with torch.
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from .._torchao import fake_quantize_domain, is_fake_quantize
from .._util.modules import eval_mode
from ..brevitas import check_leaves, is_brevitas
from ..errors import IOTableError, ModelError
from ..nn import domain_of
from .registry import Role, kind_of, role_of
from .spec import _declared

__all__ = ["Arithmetic", "Chain", "LeafTracer", "ModelError", "Step", "segment", "trace"]


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape}
_RESHAPE_METHODS = {"flatten", "view", "reshape"}
_ADD = {operator.add, torch.add}
# Functions that act elementwise like these modules, when called on one tensor with no other argument.
_ELEMENTWISE_FUNCTIONS: dict[Any, type[nn.Module]] = {
    torch.relu: nn.ReLU,
    F.relu: nn.ReLU,
    torch.tanh: nn.Tanh,
    torch.sigmoid: nn.Sigmoid,
    F.sigmoid: nn.Sigmoid,
    F.tanh: nn.Tanh,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}


_ARITHMETIC: dict[Any, str] = {
    operator.mul: "mul",
    torch.mul: "mul",
    operator.add: "add",
    torch.add: "add",
    operator.sub: "sub",
    torch.sub: "sub",
    operator.truediv: "div",
    torch.div: "div",
}
_ARITHMETIC_METHODS = {"mul": "mul", "add": "add", "sub": "sub", "div": "div"}
_OPERATORS: dict[str, Callable[..., torch.Tensor]] = {
    "mul": torch.mul,
    "add": torch.add,
    "sub": torch.sub,
    "div": torch.div,
}


class Arithmetic(nn.Module):
    """``x <op> operand`` (or ``operand <op> x``) where the operand is a number or a tensor of the model.

    Traced glue such as LogicNets' output scaling (``x * self.scale + self.bias``) is elementwise when the
    operand holds one value, or one per channel: it fuses into the table layer it sits in like an elementwise
    module. A tensor operand is read from its owner module at every call (through a weak reference, so the
    plan never keeps the model alive), so updated weights are seen; :meth:`tensors` exposes it to the keys
    that decide whether cached tables are still valid.
    """

    def __init__(self, op: str, operand: Any, *, reverse: bool, owner: nn.Module | None = None) -> None:
        super().__init__()
        self.op, self.reverse = op, reverse
        self.attribute = operand if owner is not None else None
        self.constant = None if owner is not None else operand
        self._owner = weakref.ref(owner) if owner is not None else None

    def operand(self) -> Any:
        """The number, or the owner's tensor as it is now."""
        if self._owner is None:
            return self.constant
        owner = self._owner()
        if owner is None:
            msg = f"{self.op} by {self.attribute!r}: the model that owned it no longer exists"
            raise ModelError(msg)
        return getattr(owner, str(self.attribute))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors this module reads besides its input (for cache and reuse keys)."""
        value = self.operand()
        return (value,) if isinstance(value, torch.Tensor) else ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn, y = _OPERATORS[self.op], self.operand()
        return fn(y, x) if self.reverse else fn(x, y)

    def extra_repr(self) -> str:
        operand = repr(self.constant) if self._owner is None else self.attribute
        return f"{operand} {self.op} x" if self.reverse else f"x {self.op} {operand}"


def _arithmetic(node: fx.Node, root: nn.Module | None) -> nn.Module | None:
    """The :class:`Arithmetic` module of ``tensor <op> (number | parameter)``, or ``None`` for other nodes."""
    op = _arithmetic_op(node)
    if op is None or len(node.args) != 2 or node.kwargs:
        return None
    tensors = [isinstance(a, fx.Node) and a.op != "get_attr" for a in node.args]
    if tensors.count(True) != 1:
        return None  # two tensors (an add join), or none
    reverse = tensors[1]
    x, other = (node.args[1], node.args[0]) if reverse else (node.args[0], node.args[1])
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return Arithmetic(op, other, reverse=reverse)
    if not (isinstance(other, fx.Node) and other.op == "get_attr" and root is not None and isinstance(x, fx.Node)):
        return None
    path, _, attribute = str(other.target).rpartition(".")
    owner = root.get_submodule(path) if path else root
    value = getattr(owner, attribute)
    where = f"{node.name}: {op} by the tensor {other.target!r} (of {_describe(owner, path)})"
    if not isinstance(value, torch.Tensor):
        msg = f"{where} is a {type(value).__name__}; expected a tensor"
        raise ModelError(msg)
    _check_per_channel(where, tuple(value.shape), x.meta.get("shape"))
    return Arithmetic(op, attribute, reverse=reverse, owner=owner)


def _arithmetic_op(node: fx.Node) -> str | None:
    """``"mul"``, ``"add"``, ``"sub"`` or ``"div"`` for a node calling that operator, function or method."""
    if node.op == "call_function":
        try:
            return _ARITHMETIC.get(node.target)
        except TypeError:  # unhashable targets are no arithmetic
            return None
    if node.op == "call_method" and isinstance(node.target, str):
        return _ARITHMETIC_METHODS.get(node.target)
    return None


def _check_per_channel(where: str, shape: tuple[int, ...], sample: tuple[int, ...] | None) -> None:
    """Refuse a tensor operand that holds more than one value and not one per channel of the tensor it meets
    (``sample``: that tensor's shape without the batch axis, unknown when ``None``)."""
    if math.prod(shape) == 1 or sample is None:
        return
    aligned = (1,) * (len(sample) + 1 - len(shape)) + shape
    per_channel = len(aligned) == len(sample) + 1 and aligned[0] == 1 and aligned[1] in (1, sample[0])
    if not per_channel or any(a != 1 for a in aligned[2:]):
        msg = (
            f"{where} has shape {shape}, which does not hold one value per channel of a tensor of shape "
            f"(N, {', '.join(map(str, sample))}); an elementwise table needs one value, or one per channel "
            f"(shape ({sample[0]},{' 1,' * (len(sample) - 1)})); fold it into the layer before, or decorate "
            "the block that holds it with iotable.decompose(...)"
        )
        raise ModelError(msg)


def _describe(module: nn.Module, path: str) -> str:
    return f"module {path!r}, a {type(module).__name__}" if path else f"the model, a {type(module).__name__}"


def _elementwise_call(node: fx.Node, root: nn.Module | None) -> nn.Module | None:
    """The module equivalent of an elementwise call: ``torch.relu(x)``, ``x * self.scale``, ``x + 0.5``, ..."""
    glue = _arithmetic(node, root)
    if glue is not None:
        return glue
    if node.op not in ("call_function", "call_method") or len(node.args) != 1:
        return None
    if any(key != "inplace" for key in node.kwargs):
        return None
    try:
        kind = _ELEMENTWISE_FUNCTIONS.get(node.target)
    except TypeError:  # unhashable targets are no elementwise function
        return None
    return kind() if kind is not None else None


def _user_module(node: fx.Node) -> tuple[str, str] | None:
    """``(qualified name, class name)`` of the innermost user module (not torch's, not brevitas') ``node`` was
    traced inside, from torch.fx's module stack; ``None`` at the model's top level."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, cls in reversed(list(stack.values())):
        origin = getattr(cls, "__module__", "") or ""
        if path and not origin.startswith(("torch.", "brevitas.")):
            return str(path), getattr(cls, "__name__", str(cls))
    return None


class LeafTracer(fx.Tracer):
    """A torch.fx tracer whose leaves are torch / brevitas layers, decorated modules, quantizers and hosts."""

    def __init__(self, host: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.host = host

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """Leaves: host modules, decorated modules, quantizers, modules of a registered kind
        (:mod:`iotable.kinds`), and torch / brevitas layers (not containers)."""
        if module_qualified_name in self.host or is_brevitas(m):  # brevitas: checked after tracing
            return True
        if is_fake_quantize(m):  # checked after tracing, where its name is known
            return True
        if _declared(m) is not None or domain_of(m) is not None or kind_of(m) is not None:
            return True
        if isinstance(m, _CONTAINERS):
            return False
        return type(m).__module__.startswith(("torch.nn", "brevitas.nn"))


@dataclass(frozen=True)
class Chain:
    """A chain of leaf modules read straight from an ``nn.Sequential``: the graph torch.fx's leaf tracer would
    record for it (the same node names), without tracing or generating code (see :func:`trace`)."""

    graph: fx.Graph
    root: nn.Module

    def get_submodule(self, target: str) -> nn.Module:
        return self.root.get_submodule(target)

    @property
    def meta(self) -> dict[str, Any]:
        """As a traced module's: the model, whose tensors glue would read (a chain has no glue)."""
        return {"root": self.root}


def _leaves(module: nn.Module, prefix: str, tracer: LeafTracer) -> list[tuple[str, nn.Module]] | None:
    """The leaf modules a plain ``nn.Sequential`` calls in order, with their qualified names; ``None`` when
    the model is anything else (an override, a hook, a module torch.fx would trace into)."""
    found: list[tuple[str, nn.Module]] = []
    for name, child in module._modules.items():
        qualified = f"{prefix}{name}"
        if child is None:
            continue
        if tracer.is_leaf_module(child, qualified):
            found.append((qualified, child))
        elif type(child) is nn.Sequential and not _overridden(child):
            inner = _leaves(child, f"{qualified}.", tracer)
            if inner is None:
                return None
            found += inner
        else:
            return None
    return found


def _overridden(module: nn.Module) -> bool:
    return "forward" in module.__dict__ or bool(module._forward_hooks or module._forward_pre_hooks)


def _chain(model: nn.Module, host: frozenset[str]) -> Chain | None:
    """:class:`Chain` of a plain ``nn.Sequential`` of torch (not brevitas) leaves, else ``None``."""
    if type(model) is not nn.Sequential or _overridden(model):
        return None
    leaves = _leaves(model, "", LeafTracer(host))
    if not leaves or any(is_brevitas(m) for _, m in leaves):
        return None
    graph = fx.Graph()
    x = graph.placeholder("input")  # nn.Sequential.forward's argument, as the tracer names it
    for name, _ in leaves:
        x = graph.call_module(name, (x,))
    graph.output(x)
    return Chain(graph, model)


def trace(
    model: nn.Module, *, host: frozenset[str], example_input: torch.Tensor, lean: bool = False
) -> fx.GraphModule | Chain:
    """Trace ``model`` with the leaf tracer and record every node's output shape (``meta["shape"]``).

    ``lean``: a plain ``nn.Sequential`` of leaf modules gives a :class:`Chain` (its graph without a
    GraphModule), what :func:`segment` reads; anything else is traced.
    """
    name = type(model).__name__
    chain = _chain(model, host) if lean else None
    if chain is not None:
        return _record_shapes(model, chain, example_input)
    try:
        graph = LeafTracer(host).trace(model)
    except IOTableError:
        raise
    except Exception as exc:  # torch.fx raises TraceError, TypeError, ... on untraceable Python
        msg = (
            f"cannot trace {name} with torch.fx: {type(exc).__name__}: {exc}. Data-dependent control flow and "
            "other dynamic Python cannot be traced: decorate the block that holds it with iotable.decompose(...) "
            "so it becomes one unit, or list it in host= to run it with torch"
        )
        raise ModelError(msg) from None
    module = fx.GraphModule(model, graph)
    if any(is_brevitas(m) for m in model.modules()):
        check_leaves(module, host)
    module.meta["root"] = model  # get_attr glue reads its tensors from their owners in the model
    return _record_shapes(model, module, example_input)


def _refuse_fake_quantize(module: fx.GraphModule | Chain) -> None:
    """Raise for a torch.ao fake quantizer iotable cannot read (still observing, per channel, ...), by name."""
    for node in module.graph.nodes:
        if node.op == "call_module" and is_fake_quantize(module.get_submodule(node.target)):
            fake_quantize_domain(module.get_submodule(node.target), node.target)  # refused by name, with the fix


def _record_shapes(model: nn.Module, module: Any, example_input: torch.Tensor) -> Any:
    """Run ``module``'s graph on ``example_input`` (the model in eval mode) and record every node's shape."""
    _refuse_fake_quantize(module)
    name = type(model).__name__
    shapes: dict[str, Any] = {}
    try:
        with eval_mode(model), torch.inference_mode():
            env: dict[fx.Node, Any] = {}
            interpreter = fx.Interpreter(module) if isinstance(module, fx.GraphModule) else None
            for node in module.graph.nodes:
                args = fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
                if node.op == "placeholder":
                    env[node] = example_input
                elif interpreter is None:  # a chain: call modules, return the output
                    env[node] = module.get_submodule(node.target)(*args) if node.op == "call_module" else args[0]
                else:
                    env[node] = getattr(interpreter, node.op)(node.target, args, kwargs)
                if isinstance(env[node], torch.Tensor) and node.op != "get_attr":  # parameters have no batch axis
                    shapes[node.name] = tuple(env[node].shape[1:])
    except IOTableError:
        raise
    except Exception as exc:
        msg = f"{name}: running the traced model on example_input of shape {tuple(example_input.shape)} failed: {exc}"
        raise ModelError(msg) from exc
    for node in module.graph.nodes:
        node.meta["shape"] = shapes.get(node.name)
    return module


@dataclass
class Step:
    """One step of the table network, in model order.

    ``kind`` is ``"table"`` (a segment: ``modules`` from ``sources`` up to a quantizer or the output),
    ``"pool"``, ``"reshape"``, ``"concat"``, ``"host"``, ``"input"`` or ``"output"``. ``sources`` are
    the names of earlier steps; ``mixing`` names the segment's mixing layer (``"add"`` for a join).
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
    return _declared(m) is not None or role_of(m) is Role.MIXING


def _averages(m: nn.Module) -> bool:
    """Whether ``m``'s output is a float that only a quantizer turns back into codes (an average)."""
    kind = kind_of(m)
    return kind is not None and kind.needs_quantizer_after


def _closes(m: nn.Module) -> bool:
    """Whether a module's outputs are codes: a quantizer, or a module that declares its ``output_domain``.

    Neuron modules in the LogicNets / PolyLUT / NeuraLUT style apply their output quantizer inside their own
    forward; declaring it (``decompose(..., output_domain=...)``) closes their table layer as a quantizer does.
    """
    declared = _declared(m)
    if declared is not None and (declared.output_domain is not None or declared.output_domain_from is not None):
        return True
    return domain_of(m) is not None


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

    def run(self) -> list[Step]:
        """Every node in turn, then each step's ``meta["fx_node"]``: the last node it produced."""
        for node in self.module.graph.nodes:
            self.visit(node)
        for fx_name, step_name in self.value.items():  # in model order: the last node a step produced is its output
            if step_name in self.steps:
                self.steps[step_name].meta["fx_node"] = fx_name
        return [self.steps[n] for n in self.order]

    def visit(self, node: fx.Node) -> None:
        """Dispatch one node by its kind: the input, the output, a module (or an elementwise call), a function."""
        if node.op == "placeholder":
            self.placeholder(node)
        elif node.op == "output":
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

    def source(self, node: Any, user: fx.Node) -> Step:
        """The step that produced ``node``, an argument of ``user``; a non-tensor argument is refused."""
        if not isinstance(node, fx.Node) or node.name not in self.value:
            owner = _user_module(user)
            where = f" in module {owner[0]!r} ({owner[1]})" if owner else ""
            msg = f"{user.name}{where}: expected a tensor produced by an earlier layer, received {node!r}"
            raise ModelError(msg)
        return self.steps[self.value[node.name]]

    @staticmethod
    def check_users(step: Step, node: fx.Node) -> None:
        """An open (unquantized) table output must not fan out: each consumer reads codes."""
        if not step.closed and len(node.users) > 1:
            msg = (
                f"{node.name}: the unquantized output of {step.mixing or step.name} feeds {len(node.users)} consumers; "
                "put a Quantize before the fan-out so each consumer reads codes"
            )
            raise ModelError(msg)

    # The model's input and output.

    def placeholder(self, node: fx.Node) -> None:
        """The model's one input."""
        if self.steps:
            msg = f"{node.name}: models with more than one input are not supported; wrap them to take one tensor"
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
        if target in self.host or src.kind == "host":
            self.host_module(node, target, m, src)
            return
        quantizer = _closes(m)
        role = role_of(m) if _declared(m) is None else None
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

    def host_module(self, node: fx.Node, target: str, m: nn.Module, src: Step) -> None:
        """A module run with torch: listed in ``host=``, or after one. An open table layer before it becomes
        part of the host step, which then runs from that layer's quantized input."""
        shape = node.meta["shape"]
        if not src.closed and src.kind == "table":
            self.remove(src)
            merged = [*src.modules, m], [*src.module_names, target]
            self.produce(node, self.add(Step(target, "host", list(src.sources), shape, *merged, closed=True)))
        else:
            self.produce(node, self.add(Step(target, "host", [src.name], shape, [m], [target], closed=True)))

    def table_module(self, node: fx.Node, target: str, m: nn.Module, src: Step, *, quantizer: bool) -> None:
        """A quantizer, an elementwise module or a mixing layer: it starts a table layer after a closed step,
        or joins the open one (which takes the mixing layer's name); a quantizer closes the layer."""
        mixing = _is_mixing(m)
        if src.closed:
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
            if not src.closed:
                msg = f"{node.name}: a reshape of an unquantized tensor; put a Quantize before it"
                raise ModelError(msg)
            self.produce(node, self.add(Step(node.name, "reshape", [src.name], node.meta["shape"], closed=True)))
        elif target in _ADD or (node.op == "call_method" and target == "add"):
            self.add_join(node)
        elif target is torch.cat:
            self.concat(node)
        else:
            raise ModelError(_unsupported_call(node))

    def add_join(self, node: fx.Node) -> None:
        """``a + b`` of two quantized tensors of one shape: a table layer that reads both."""
        tensor_args = [a for a in node.args if isinstance(a, fx.Node) and a.meta.get("shape") is not None]
        if len(tensor_args) != 2 or node.kwargs:
            msg = f"{node.name}: only the add of two tensors is supported; received args {node.args}"
            raise ModelError(msg)
        a, b = (self.source(t, node) for t in tensor_args)
        if not (a.closed and b.closed) or a.kind == "host" or b.kind == "host":
            msg = f"{node.name}: an add must read two quantized tensors; put a Quantize on each operand"
            raise ModelError(msg)
        if a.shape != b.shape:
            msg = f"{node.name}: adding shapes {a.shape} and {b.shape}; broadcasting adds are not supported"
            raise ModelError(msg)
        step = self.add(Step(node.name, "table", [a.name, b.name], node.meta["shape"], mixing="add"))
        self.produce(node, step)
        self.check_users(step, node)

    def concat(self, node: fx.Node) -> None:
        """``torch.cat`` of quantized tensors along the channel axis."""
        parts = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        srcs = [self.source(p, node) for p in parts]  # type: ignore[union-attr]  # torch.cat's first argument
        if dim != 1 or not all(s.closed and s.kind != "host" for s in srcs):
            msg = f"{node.name}: only a concat of quantized tensors along the channel axis (dim=1) is supported"
            raise ModelError(msg)
        self.produce(node, self.add(Step(node.name, "concat", [s.name for s in srcs], node.meta["shape"], closed=True)))


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
        f"{target} in host="
    )


def _unsupported_call(node: fx.Node) -> str:
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
        f"{node.name}: the function {name} is not supported between tables (supported: layers, elementwise "
        "modules and relu/tanh/sigmoid calls, arithmetic with a number or a per-channel parameter, "
        "quantizers, add, cat, flatten/view/reshape, max-pool, avg-pool); wrap the computation in a module "
        "decorated with iotable.decompose, or list the layer in host="
    )
