"""Tracing whole models with torch.fx.

The leaf tracer keeps torch layers (not containers), decorated modules and quantizers as single
``call_module`` nodes, and :func:`trace` records every node's output shape; :func:`segment
<iotable.front.segment.segment>` then cuts the traced graph into table layers at quantizers.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from .._util.modules import eval_mode
from .._util.text import unprintable, unprintable_module
from ..brevitas import check_leaves, is_brevitas
from ..errors import IOTableError, ModelError
from ..nn import domain_of
from ..torchao import fake_quantize_domain, is_fake_quantize
from .glue import Arithmetic
from .infer import inferred_leaf
from .metadata import declared_spec
from .registry import kind_of
from .segment import Step, _user_module, segment

__all__ = ["Arithmetic", "Chain", "LeafTracer", "ModelError", "ShapeTracer", "Step", "segment", "trace"]


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


_UNKNOWN: Any = object()  # a value the example cannot give: a second input, or a call that failed on it
_SIZE_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout"})
_SIZE_METHODS = frozenset({"size", "dim", "ndimension", "numel", "get_device"})

# Layers that have no table network, and why (checked where the tracer meets them, unless they are hosts).
_RECURRENT = (nn.RNNBase, nn.RNNCellBase)
_ATTENTION = (
    nn.MultiheadAttention,
    nn.Transformer,
    nn.TransformerEncoder,
    nn.TransformerDecoder,
    nn.TransformerEncoderLayer,
    nn.TransformerDecoderLayer,
)
_EMBEDDING = (nn.Embedding, nn.EmbeddingBag)


def _unsupported_layer(m: nn.Module) -> str | None:
    """Why ``m`` (a torch recurrent, attention or embedding layer) has no table network; ``None`` for others."""
    if isinstance(m, _RECURRENT):
        return (
            "recurrent layers are not supported: each output depends on every earlier step of the sequence "
            "through the hidden state (and the layer returns a tuple of output and state), so no table over a "
            "few quantized inputs computes it; run it outside the table network (split the model there), or "
            "wrap it in a module that returns one tensor and list that module in host="
        )
    if isinstance(m, _ATTENTION):
        return (
            "attention layers are not supported: each output mixes every position of the sequence through a "
            "softmax of products of two inputs, so it has no small fan-in and no table over a few quantized "
            "inputs; run it outside the table network (split the model there), or wrap it in a module that "
            "takes and returns one tensor and list that module in host="
        )
    if isinstance(m, _EMBEDDING):
        return (
            "embedding layers are not supported: they read integer indices (a LongTensor), while a table network "
            "feeds every layer float32 values decoded from codes; look the embedding up before the table network "
            "(outside the model), or write it as a Linear layer over a one-hot input"
        )
    return None


def _refuse_unsupported(m: nn.Module, path: str) -> None:
    """Refuse a recurrent, attention or embedding layer by name, saying why (unless decorated or of a registered
    kind: then it is the user's unit)."""
    reason = _unsupported_layer(m) if declared_spec(m) is None and kind_of(m) is None else None
    if reason is not None:
        msg = f"module {path!r} ({type(m).__name__}): {reason}"
        raise ModelError(msg)


def _check_name(path: str, module: nn.Module) -> None:
    """Refuse a submodule name torch.fx cannot write as code, nor HDL as a name (a newline, a quote, ...)."""
    bad = unprintable(path)
    if bad is not None:
        raise ModelError(unprintable_module(path, bad))
    for key in path.split("."):
        if any(c in key for c in "\"'\\"):
            parent = module.get_submodule(path.rpartition(".")[0]) if "." in path else module
            container = type(parent).__name__
            msg = (
                f"module {path!r}: the key {key!r} of its {container} holds a character that cannot name a "
                "node of the traced graph (a quote or a backslash, which torch.fx writes into code); "
                "rename the submodule (letters, digits and underscores)"
            )
            raise ModelError(msg)


def _holds_tensor(value: Any) -> bool:
    found = False

    def visit(v: Any) -> Any:
        nonlocal found
        found = found or isinstance(v, torch.Tensor)
        return v

    if isinstance(value, (tuple, list, dict)):
        fx.node.map_aggregate(value, visit)
    return found or isinstance(value, torch.Tensor)


def _holds_proxy(value: Any) -> bool:
    found = False

    def visit(v: Any) -> Any:
        nonlocal found
        found = found or isinstance(v, fx.Proxy)
        return v

    fx.node.map_aggregate(value, visit)
    return found


def _same(a: Any, b: Any) -> bool:
    """Whether two results of one call are equal (tensors element for element, NaNs in the same places)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b) or a.equal(b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b) if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) else False


class _ShapeProxy(fx.Proxy):
    """A proxy whose static value (a shape, a size, ...) the tracer knows: ``len``, ``int`` and ``range`` of it
    follow the example, as :meth:`ShapeTracer.to_bool` does for ``bool``."""

    tracer: ShapeTracer

    def __len__(self) -> int:
        return self.tracer.length(self)

    def __index__(self) -> int:
        return int(self.tracer.static_value(self, "int()"))

    def __int__(self) -> int:
        return self.__index__()

    def __getattr__(self, k: str) -> fx.proxy.Attribute:
        return _ShapeAttribute(self, k)


class _ShapeAttribute(_ShapeProxy, fx.proxy.Attribute):
    """``proxy.shape`` and other attributes: as torch.fx's, with the static ``len`` and ``int`` above."""


class ShapeTracer(LeafTracer):
    """The leaf tracer, running ``example`` (one sample's batch) alongside: each node's concrete value is known.

    Python control flow on a *static* value (fixed by the model and the shape of a sample: ``x.shape[-1]``,
    ``x.dim()``, a dtype) follows the example, so the checks the field's models make (DiffLogic's and DWN's
    ``assert x.shape[-1] % self.k == 0``, ``if x.dim() == 3``, ``x.reshape(*x.shape[:-1], k, -1)``,
    ``range(x.size(1))``) trace, while the graph keeps ``x.shape`` nodes, so reshapes still serve any batch.
    Control flow on tensor values or on the batch size (which no table may depend on) is refused, naming the
    submodule by qualified name and class. Leaves are evaluated in eval and inference mode; a value the
    example cannot give is unknown (the run that records shapes reports why).
    """

    def __init__(self, host: frozenset[str], example: torch.Tensor) -> None:
        super().__init__(host)
        self.example = example
        self.values: dict[fx.Node, Any] = {}
        self.varying: set[fx.Node] = set()  # depends on the input
        self.static: set[fx.Node] = set()  # a non-tensor value fixed by the model and the sample's shape
        self.batch_first: set[fx.Node] = set()  # a static sequence of sizes, save its element 0: the batch size
        self.batch: set[fx.Node] = set()  # otherwise depends on the batch size
        self.failed_in: tuple[str, str] | None = None  # the innermost module an exception left
        self.evaluating = False  # running a node on the example: modules are called, not traced
        self.failed_on: tuple[fx.Node, Exception] | None = None  # the first node the example failed on

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _ShapeProxy(node, self)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """As the leaf tracer's; a quantizer's domain read on the way (brevitas runs its proxies to give its
        scale) is a real call, not part of the traced graph."""
        evaluating, self.evaluating = self.evaluating, True
        try:
            return super().is_leaf_module(m, module_qualified_name)
        finally:
            self.evaluating = evaluating

    def call_module(self, m: nn.Module, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """As torch.fx's, after refusing odd names and unsupported layers; remembers where an exception began.

        A module called on no traced value (LogicNets' ``self.mask()``, NeuraLUT's ``self.imask()``) computes a
        constant of the model: it runs once, here, and its result enters the graph as a tensor of the model."""
        if self.evaluating:  # a module called inside a leaf that runs on the example: no node, its own call
            return forward(*args, **kwargs)
        if not _holds_proxy((args, kwargs)):
            return self._constant(m, forward, args, kwargs)
        path = self.path_of_module(m)
        try:
            _check_name(path, self.root)
            if path not in self.host and self.is_leaf_module(m, path) and not is_brevitas(m):
                _refuse_unsupported(m, path)
            if is_fake_quantize(m):  # refused by name before it runs (an enabled observer would learn the example)
                fake_quantize_domain(m, path)
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = (path, type(m).__name__)
            raise

    def _constant(self, m: nn.Module, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The value of a module called on constants only; refused by name when two calls disagree (a forward
        that draws random numbers or updates its own state is no constant of the model)."""
        path = self.path_of_module(m)
        self.evaluating = True
        try:
            with torch.no_grad(), eval_mode(m):
                first = forward(*args, **kwargs)
                second = forward(*args, **kwargs)
        finally:
            self.evaluating = False
        if not _same(first, second):
            msg = (
                f"module {path!r} ({type(m).__name__}): called without a traced input, it returned different "
                "values on two calls, so it is no fixed part of the model (it draws random numbers or updates "
                "its own state); make its forward return a fixed tensor (a buffer), or list the module that "
                "calls it in host= to run it with torch"
            )
            raise ModelError(msg)
        return first

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        """As torch.fx's (parameters read by traced code become nodes), save inside a leaf running on the example."""
        return attr_val if self.evaluating else super().getattr(attr, attr_val, parameter_proxy_cache)

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        """As torch.fx's, then the node's value on the example (tensor constants included) and its kind."""
        node = super().create_node(*args, **kwargs)
        if node.op == "output":
            return node
        self.values[node] = value = self._evaluate(node)
        inputs = node.all_input_nodes
        if node.op == "placeholder" or any(n in self.varying for n in inputs):
            self.varying.add(node)
        if value is not _UNKNOWN and not _holds_tensor(value):
            self._classify(node, inputs, value)
        return node

    def _evaluate(self, node: fx.Node) -> Any:
        """``node``'s value on the example (leaves in eval and inference mode), or ``_UNKNOWN``."""
        if node.op == "placeholder":
            first = not any(n.op == "placeholder" for n in self.values)
            return self.example.clone() if first else _UNKNOWN  # clone: an in-place forward keeps the example
        if any(self.values.get(n, _UNKNOWN) is _UNKNOWN for n in node.all_input_nodes):
            return _UNKNOWN
        args = fx.node.map_arg(node.args, self.values.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, self.values.__getitem__)
        self.evaluating = True
        try:
            with torch.inference_mode():
                if node.op == "get_attr":
                    path, _, name = str(node.target).rpartition(".")
                    return getattr(self.root.get_submodule(path), name)
                if node.op == "call_module":
                    module = self.root.get_submodule(str(node.target))
                    with eval_mode(module):
                        return module(*args, **kwargs)
                if node.op == "call_method":
                    return getattr(args[0], str(node.target))(*args[1:], **kwargs)
                return node.target(*args, **kwargs)  # type: ignore[operator]  # a call_function node
        except Exception as exc:  # the shape run after tracing reports it, naming the module
            if self.failed_on is None:
                self.failed_on = (node, exc)
            return _UNKNOWN
        finally:
            self.evaluating = False

    def _classify(self, node: fx.Node, inputs: list[fx.Node], value: Any) -> None:
        """Sort a non-tensor value: static, a size sequence led by the batch size, or batch-dependent."""
        varying_tensor = bool(inputs) and inputs[0] in self.varying and isinstance(self.values[inputs[0]], torch.Tensor)
        if node.op == "call_function" and node.target is getattr and node.args[1] in _SIZE_ATTRIBUTES:
            (self.batch_first if node.args[1] == "shape" and varying_tensor else self.static).add(node)
        elif node.op == "call_method" and node.target in _SIZE_METHODS:
            self._size_call(node, varying_tensor)
        elif node.op == "call_function" and node.target is operator.getitem and inputs[:1] == [node.args[0]]:
            self._item(node, inputs)
        elif any(n in self.batch or n in self.batch_first for n in inputs):
            self.batch.add(node)
        elif all(n in self.static for n in inputs):
            self.static.add(node)

    def _size_call(self, node: fx.Node, varying_tensor: bool) -> None:
        """``x.size()``, ``x.size(d)``, ``x.dim()``, ``x.numel()``: the batch size is in some of them."""
        if not varying_tensor or node.target not in ("size", "numel"):
            self.static.add(node)
            return
        axis = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if node.target == "numel" or isinstance(axis, fx.Node):
            self.batch.add(node)
        elif axis is None:
            self.batch_first.add(node)
        elif isinstance(axis, int):
            ndim = self.values[node.args[0]].dim()  # type: ignore[index]  # a tensor's node
            (self.batch if axis % max(ndim, 1) == 0 else self.static).add(node)
        else:
            self.batch.add(node)

    def _item(self, node: fx.Node, inputs: list[fx.Node]) -> None:
        """``sizes[i]`` or ``sizes[a:b]`` of a sequence of sizes: batch-dependent only where it takes element 0."""
        rest = inputs[1:]
        if any(n not in self.static for n in rest):
            self.batch.add(node)
            return
        sequence, index = node.args[0], fx.node.map_arg(node.args[1], self.values.__getitem__)
        if sequence in self.static:
            self.static.add(node)
        elif sequence in self.batch_first and isinstance(index, (int, slice)):
            positions = range(len(self.values[sequence]))  # type: ignore[index]  # a node
            taken = [positions[index]] if isinstance(index, int) else list(positions[index])
            if 0 not in taken:
                self.static.add(node)
            else:
                (self.batch_first if isinstance(index, slice) and taken[0] == 0 else self.batch).add(node)
        else:
            self.batch.add(node)

    def static_value(self, proxy: fx.Proxy, use: str) -> Any:
        """The value of a static node, for Python control flow; refuse tensor values and the batch size."""
        node = proxy.node
        if node in self.static:
            return self.values[node]
        if node in self.batch or node in self.batch_first:
            msg = (
                f"{use} of a value that depends on the batch size ({node.format_node()}): a table network serves "
                "any batch, so the forward must not branch on it; compute it from the other axes"
            )
            raise fx.proxy.TraceError(msg)
        if self.values.get(node, _UNKNOWN) is _UNKNOWN and self.failed_on is not None:
            failed, exc = self.failed_on
            where = _node_owner(self.root, self.root, failed)
            msg = f"{use} of a value the example input cannot give: {where} failed on it: {type(exc).__name__}: {exc}"
            raise fx.proxy.TraceError(msg)
        msg = (
            f"{use} of a tensor or of a value computed from tensor data ({node.format_node()}): data-dependent "
            "control flow cannot be traced"
        )
        raise fx.proxy.TraceError(msg)

    def to_bool(self, obj: fx.Proxy) -> bool:
        """``bool`` of a static value (a shape ``assert``, ``if x.dim() == 3``): the example's answer."""
        return bool(self.static_value(obj, "a Python check (if, assert, and, ...)"))

    def length(self, obj: fx.Proxy) -> int:
        """``len`` of a static sequence, or of sizes led by the batch size (the number of axes is static)."""
        if obj.node in self.batch_first:
            return len(self.values[obj.node])
        return len(self.static_value(obj, "len()"))

    def iter(self, obj: fx.Proxy) -> Iterator[Any]:
        """Iterating a static sequence (``*x.shape[:-1]``): one item proxy per element, so the graph keeps them."""
        items: Any = obj  # a proxy: indexing it records getitem nodes
        return iter([items[i] for i in range(self.length(obj))])

    def failure(self, model: nn.Module, exc: Exception) -> ModelError:
        """The refusal for ``exc``, raised while tracing ``model``: named after the innermost module it left."""
        path, cls = self.failed_in or ("", type(model).__name__)
        where = f"module {path!r} ({cls})" if path else cls  # the model's own forward
        msg = (
            f"cannot trace {where} with torch.fx: {type(exc).__name__}: {exc}. Data-dependent control flow and "
            "other dynamic Python cannot be traced: decorate the block that holds it with iotable.decompose(...) "
            "so it becomes one unit, or list it in host= to run it with torch"
        )
        return ModelError(msg)


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
    for name, m in leaves:
        _check_name(name, model)
        if name not in host:
            _refuse_unsupported(m, name)
        x = graph.call_module(name, (x,))
    graph.output(x)
    return Chain(graph, model)


def trace(
    model: nn.Module, *, host: frozenset[str], example_input: torch.Tensor, lean: bool = False
) -> fx.GraphModule | Chain:
    """Trace ``model`` with the leaf tracer and record every node's output shape (``meta["shape"]``).

    The example runs alongside the trace (:class:`ShapeTracer`), so checks on static shapes pass. ``lean``: a
    plain ``nn.Sequential`` of leaf modules gives a :class:`Chain` (its graph without a GraphModule), what
    :func:`segment` reads; anything else is traced.
    """
    chain = _chain(model, host) if lean else None
    if chain is not None:
        return _record_shapes(model, chain, example_input)
    tracer = ShapeTracer(host, example_input)
    try:
        graph = tracer.trace(model)
    except IOTableError:
        raise
    except Exception as exc:  # torch.fx raises TraceError, TypeError, ... on untraceable Python
        raise tracer.failure(model, exc) from None
    try:
        module = fx.GraphModule(model, graph)
    except SyntaxError as exc:  # a name torch.fx wrote as code it cannot read back (the names were checked)
        msg = (
            f"{type(model).__name__}: torch.fx could not compile the traced graph ({exc.msg}); an attribute or "
            "submodule name holds a character Python code cannot hold: rename it (letters, digits, underscores)"
        )
        raise ModelError(msg) from None
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
    shapes: dict[str, Any] = {}
    node = None
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
        where = _node_owner(model, module, node)
        msg = (
            f"{where}: running the traced model on example_input of shape {tuple(example_input.shape)} failed: "
            f"{type(exc).__name__}: {exc}"
        )
        raise ModelError(msg) from exc
    for node in module.graph.nodes:
        node.meta["shape"] = shapes.get(node.name)
    return module


def _node_owner(model: nn.Module, module: Any, node: fx.Node | None) -> str:
    """The module a node of the traced graph stands for, or was traced inside, by qualified name and class."""
    if node is not None and node.op == "call_module":
        return f"module {node.target!r} ({type(module.get_submodule(str(node.target))).__name__})"
    owner = _user_module(node) if node is not None else None
    call = f"its call {node.format_node()}" if node is not None else "its forward"
    if owner is not None:
        return f"module {owner[0]!r} ({owner[1]}), {call}"
    return f"{type(model).__name__} (the model itself), {call}"
