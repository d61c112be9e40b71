"""Tracing whole models with torch.fx and cutting them into table layers at quantizers.

The leaf tracer keeps torch layers (not containers), decorated modules and quantizers as single
``call_module`` nodes. :func:`segment` then walks the traced graph: everything from a quantized tensor up to
the next quantizer is one *segment* — a table layer (one mixing layer such as a Linear or a convolution plus
elementwise modules, or an add of two quantized tensors, then a quantizer). Max-pools, flattens and concats
of quantized tensors become structural steps; modules the user marks as host run with torch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from .errors import IOTableError
from .nn import _is_brevitas, domain_of
from .spec import ELEMENTWISE, _declared

__all__ = ["Chain", "LeafTracer", "ModelError", "Step", "segment", "trace"]


class ModelError(IOTableError, ValueError):
    """A whole model cannot be turned into a table network as it stands (the message says what to change)."""


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_POOLS = (nn.MaxPool1d, nn.MaxPool2d)
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


def _elementwise_function(node: fx.Node) -> nn.Module | None:
    """The module equivalent of an elementwise function call such as ``torch.relu(x)``, if it is one."""
    if node.op not in ("call_function", "call_method") or len(node.args) != 1:
        return None
    if any(key != "inplace" for key in node.kwargs):
        return None
    try:
        kind = _ELEMENTWISE_FUNCTIONS.get(node.target)
    except TypeError:  # unhashable targets are no elementwise function
        return None
    return kind() if kind is not None else None


class LeafTracer(fx.Tracer):
    """A torch.fx tracer whose leaves are torch / brevitas layers, decorated modules, quantizers and hosts."""

    def __init__(self, host: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.host = host

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """Leaves: host modules, decorated modules, quantizers, and torch / brevitas layers (not containers)."""
        if module_qualified_name in self.host or _is_brevitas(m):  # brevitas: checked after tracing
            return True
        if _declared(m) is not None or domain_of(m) is not None:
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
    if not leaves or any(_is_brevitas(m) for _, m in leaves):
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
    if any(_is_brevitas(m) for m in model.modules()):
        from .brevitas import check_leaves  # the optional integration: imported for brevitas models only

        check_leaves(module, host)
    return _record_shapes(model, module, example_input)


def _record_shapes(model: nn.Module, module: Any, example_input: torch.Tensor) -> Any:
    """Run ``module``'s graph on ``example_input`` (the model in eval mode) and record every node's shape."""
    name = type(model).__name__
    flags = [(m, m.training) for m in model.modules()]
    shapes: dict[str, Any] = {}
    try:
        model.eval()
        with torch.inference_mode():
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
                if isinstance(env[node], torch.Tensor):
                    shapes[node.name] = tuple(env[node].shape[1:])
    except IOTableError:
        raise
    except Exception as exc:
        msg = f"{name}: running the traced model on example_input of shape {tuple(example_input.shape)} failed: {exc}"
        raise ModelError(msg) from exc
    finally:
        for m, training in flags:
            m.training = training
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
    return _declared(m) is not None or isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d))


def segment(module: fx.GraphModule | Chain, *, host: frozenset[str]) -> list[Step]:
    """Cut a traced model into steps (see :class:`Step`); raise :class:`ModelError` where it cannot."""
    steps: dict[str, Step] = {}
    value: dict[str, str] = {}  # fx node name -> step name producing it
    order: list[str] = []

    def add(step: Step) -> Step:
        base, k = step.name, 1
        while step.name in steps:  # a module called twice gives two steps
            step.name, k = f"{base}_{k}", k + 1
        steps[step.name] = step
        order.append(step.name)
        return step

    def source(node: Any, user: fx.Node) -> Step:
        if not isinstance(node, fx.Node) or node.name not in value:
            msg = f"{user.name}: expected a tensor produced by an earlier layer, received {node!r}"
            raise ModelError(msg)
        return steps[value[node.name]]

    def close(step: Step) -> None:
        step.closed = True

    def users_ok(step: Step, node: fx.Node) -> None:
        if not step.closed and len(node.users) > 1:
            msg = (
                f"{node.name}: the unquantized output of {step.mixing or step.name} feeds {len(node.users)} consumers; "
                "put a Quantize before the fan-out so each consumer reads codes"
            )
            raise ModelError(msg)

    for node in module.graph.nodes:
        shape = node.meta.get("shape")
        if node.op == "placeholder":
            if steps:
                msg = f"{node.name}: models with more than one input are not supported; wrap them to take one tensor"
                raise ModelError(msg)
            value[node.name] = add(Step("input", "input", [], shape, closed=True)).name
            continue
        if node.op == "output":
            result = node.args[0]
            if not isinstance(result, fx.Node):
                msg = f"the model returns {type(result).__name__}; expected a single tensor"
                raise ModelError(msg)
            last = source(result, node)
            close(last)
            add(Step("output", "output", [last.name], last.shape, closed=True))
            continue
        if shape is None:
            continue  # sizes and other non-tensor values only feed reshapes, which read shapes from the trace
        functional = _elementwise_function(node)
        if node.op == "call_module" or functional is not None:
            m = functional if functional is not None else module.get_submodule(node.target)
            target = node.name if functional is not None else node.target
            src = source(node.args[0], node)
            if target in host or src.kind == "host":
                if not src.closed and src.kind == "table":
                    # The host runs the open segment's modules too, from its quantized input.
                    host_step = Step(
                        target,
                        "host",
                        list(src.sources),
                        shape,
                        [*src.modules, m],
                        [*src.module_names, target],
                        closed=True,
                    )
                    order.remove(src.name)
                    del steps[src.name]
                    value[node.name] = add(host_step).name
                else:
                    value[node.name] = add(Step(target, "host", [src.name], shape, [m], [target], closed=True)).name
                continue
            quantizer = domain_of(m) is not None
            if isinstance(m, _POOLS):
                if not src.closed:
                    msg = (
                        f"{target}: max-pool reads the unquantized output of {src.mixing or src.name}; "
                        "put a Quantize before the pool (pooling quantized codes is exact)"
                    )
                    raise ModelError(msg)
                value[node.name] = add(Step(target, "pool", [src.name], shape, [m], [target], closed=True)).name
            elif isinstance(m, nn.Flatten):
                if not src.closed:
                    msg = f"{target}: flatten reads an unquantized tensor; put a Quantize before it"
                    raise ModelError(msg)
                value[node.name] = add(Step(target, "reshape", [src.name], shape, closed=True)).name
            elif quantizer or isinstance(m, ELEMENTWISE) or _is_mixing(m):
                mixing = _is_mixing(m)
                if src.closed:
                    step = add(Step(target, "table", [src.name], shape))
                elif mixing and src.mixing is not None:
                    msg = (
                        f"{target}: {src.mixing} and {target} sit between the same pair of quantizers, so "
                        "their composition has no small table; put a quantizer (iotable.nn.Quantize, or brevitas' "
                        f"QuantIdentity) after {src.mixing}, decorate a block holding both as one unit, or list "
                        f"{target} in host="
                    )
                    raise ModelError(msg)
                else:
                    step = src
                    order.remove(step.name)
                    del steps[step.name]
                    step.name = target if mixing else step.name
                    add(step)
                step.modules.append(m)
                step.module_names.append(target)
                step.shape = shape
                if mixing:
                    step.mixing = target
                if quantizer:
                    close(step)
                value[node.name] = step.name
                users_ok(step, node)
            else:
                msg = (
                    f"{target}: {type(m).__name__} has no decomposition metadata and no built-in rule; decorate "
                    "it with iotable.decompose(...), or list it in host= to run it with torch"
                )
                raise ModelError(msg)
            continue
        # call_function / call_method
        target = node.target
        tensor_args = [a for a in node.args if isinstance(a, fx.Node) and a.meta.get("shape") is not None]
        if target in _RESHAPE_FUNCTIONS or (node.op == "call_method" and target in _RESHAPE_METHODS):
            src = source(node.args[0], node)
            if not src.closed:
                msg = f"{node.name}: a reshape of an unquantized tensor; put a Quantize before it"
                raise ModelError(msg)
            value[node.name] = add(Step(node.name, "reshape", [src.name], shape, closed=True)).name
        elif target in _ADD or (node.op == "call_method" and target == "add"):
            if len(tensor_args) != 2 or node.kwargs:
                msg = f"{node.name}: only the add of two tensors is supported; received args {node.args}"
                raise ModelError(msg)
            a, b = (source(t, node) for t in tensor_args)
            if not (a.closed and b.closed) or a.kind == "host" or b.kind == "host":
                msg = f"{node.name}: an add must read two quantized tensors; put a Quantize on each operand"
                raise ModelError(msg)
            if a.shape != b.shape:
                msg = f"{node.name}: adding shapes {a.shape} and {b.shape}; broadcasting adds are not supported"
                raise ModelError(msg)
            step = add(Step(node.name, "table", [a.name, b.name], shape, mixing="add"))
            value[node.name] = step.name
            users_ok(step, node)
        elif target is torch.cat:
            parts = node.args[0]
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            srcs = [source(p, node) for p in parts]
            if dim != 1 or not all(s.closed and s.kind != "host" for s in srcs):
                msg = f"{node.name}: only a concat of quantized tensors along the channel axis (dim=1) is supported"
                raise ModelError(msg)
            value[node.name] = add(Step(node.name, "concat", [s.name for s in srcs], shape, closed=True)).name
        else:
            name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
            msg = (
                f"{node.name}: the function {name} is not supported between tables (supported: layers, elementwise "
                "modules and relu/tanh/sigmoid calls, quantizers, add, cat, flatten/view/reshape, max-pool); wrap "
                "the computation in a module decorated with iotable.decompose, or list the layer in host="
            )
            raise ModelError(msg)
    for fx_name, step_name in value.items():  # in model order: the last node a step produced is its output
        if step_name in steps:
            steps[step_name].meta["fx_node"] = fx_name
    return [steps[n] for n in order]
