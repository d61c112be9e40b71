"""Tracing whole models with torch.fx.

The leaf tracer keeps torch layers (not containers), decorated modules and quantizers as single
``call_module`` nodes, and :func:`trace` records every node's output shape; :func:`segment
<iotable.front.segment.segment>` then cuts the traced graph into table layers at quantizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from .._util.modules import eval_mode
from ..brevitas import check_leaves, is_brevitas
from ..errors import IOTableError, ModelError
from ..nn import domain_of
from ..torchao import fake_quantize_domain, is_fake_quantize
from .glue import Arithmetic
from .infer import inferred_leaf
from .metadata import declared_spec
from .registry import kind_of
from .segment import Step, segment

__all__ = ["Arithmetic", "Chain", "LeafTracer", "ModelError", "Step", "segment", "trace"]


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class LeafTracer(fx.Tracer):
    """A torch.fx tracer whose leaves are torch / brevitas layers, decorated modules, quantizers and hosts."""

    def __init__(self, host: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.host = host

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """Leaves: host modules, decorated modules, quantizers, modules of a registered kind
        (:mod:`iotable.kinds`), layers of the user's own that hold parameters or buffers (their units inferred),
        and torch / brevitas layers (not containers)."""
        if module_qualified_name in self.host or is_brevitas(m):  # brevitas: checked after tracing
            return True
        if is_fake_quantize(m):  # checked after tracing, where its name is known
            return True
        if declared_spec(m) is not None or domain_of(m) is not None or kind_of(m) is not None:
            return True
        if inferred_leaf(m):  # a layer of the user's own: its units are inferred from its structure
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
