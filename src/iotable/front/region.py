"""Regions: the calls a module of the user's own makes between two quantizers, kept as one mixing layer.

A neuron module in the form LogicNets, PolyLUT and NeuraLUT write it holds its quantizers, so torch.fx traces
into it; between its input and output quantizers it gathers each neuron's inputs (``x[:, self.imask]``),
raises them to powers, multiplies them out, repeats and reshapes them, and runs per-neuron linear maps. None
of those calls has a meaning between tables on its own, but together, from one quantized tensor up to the
next quantizer, they are one function of a flat input: a layer whose units are inferred from its structure,
exactly as a layer of the user's own that holds no quantizer is (:mod:`iotable.front.infer`).

:class:`Region` is that layer: the traced nodes copied into a graph of their own (a ``GraphModule`` over the
model's own submodules and tensors, so a mask changed later is the model's), run as one module.
:class:`OpenRegion` is one being gathered while the model is cut into steps (:mod:`.segment`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch import nn

from ..errors import ModelError

__all__ = ["OpenRegion", "Region", "step_inputs"]


class Region(nn.Module):
    """The traced calls of ``owner`` (a ``cls``) from one quantized tensor up to its next quantizer, as one module.

    ``calls`` names the operations it holds (``getitem``, ``pow``, ``fc``, ...), for messages and summaries;
    ``code`` is the Python torch.fx writes for them, a plain attribute, so the keys under which plans are reused
    and tables cached (:func:`iotable.front.reuse.settings`) see the operations and their constant arguments.
    """

    def __init__(self, body: fx.GraphModule, *, owner: str, cls: str, calls: tuple[str, ...]) -> None:
        super().__init__()
        self.body = body
        self.owner, self.cls, self.calls = owner, cls, calls
        self.code = body.code

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]  # a GraphModule's forward returns its output

    def extra_repr(self) -> str:
        return f"of {self.owner!r} ({self.cls}): {', '.join(self.calls)}"


def step_inputs(node: fx.Node) -> list[fx.Node]:
    """The tensor nodes ``node`` reads, looking through the non-tensor values between (``x.size(0)``, a tuple):
    every input with a recorded shape, or the model's input. Tensors of the model (``get_attr``) are constants."""
    found: list[fx.Node] = []
    pending = list(node.all_input_nodes)
    seen: set[fx.Node] = set()
    while pending:
        n = pending.pop()
        if n in seen or n.op == "get_attr":
            continue
        seen.add(n)
        if n.meta.get("shape") is not None or n.op == "placeholder":
            found.append(n)
        else:
            pending.extend(n.all_input_nodes)
    return found


@dataclass
class OpenRegion:
    """A region being gathered: the step it becomes, the node whose value it reads, the nodes it holds so far
    (in model order), and where it began (the user module's qualified name and class)."""

    step: str
    input: fx.Node
    owner: str
    cls: str
    members: list[fx.Node] = field(default_factory=list)

    def holds(self, node: fx.Node) -> bool:
        return node in self.members

    def close(self, graph_module: fx.GraphModule, output: fx.Node) -> Region:
        """The region computing ``output`` (one of its nodes) from its input, over ``graph_module``'s submodules
        and tensors (the model's own)."""
        needed = _ancestors(output, stop=self.input)
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {self.input: graph.placeholder("x")}
        for node in graph_module.graph.nodes:  # model order: every argument is copied before its user
            if node in needed and node is not self.input:
                env[node] = graph.node_copy(node, lambda n: env[n])
        graph.output(env[output])
        graph.lint()
        body = fx.GraphModule(graph_module, graph, class_name="RegionBody")
        calls = tuple(dict.fromkeys(_call_name(n) for n in self.members if n in needed))
        return Region(body, owner=self.owner, cls=self.cls, calls=calls)

    def refuse_other_input(self, node: fx.Node, other: fx.Node, where: str) -> ModelError:
        """The refusal for a node of the region that also reads a tensor from outside it."""
        msg = (
            f"{where}: reads {other.name!r} besides values computed from {self.input.name!r} in {self.owner!r} "
            f"({self.cls}); the calls of a module of one's own between two quantizers become one table layer only "
            "when they read one quantized tensor: concatenate the quantized tensors they read "
            f"(torch.cat(..., dim=1)) and compute from that, decorate {self.cls} with "
            f"iotable.decompose(fan_in=..., output_domain=...), or list {self.owner!r} in host="
        )
        return ModelError(msg)

    def refuse_inner_value(self, value: fx.Node, where: str) -> str:
        """The refusal for a node after the region that reads one of its values other than the one it returns."""
        return (
            f"{where}: reads {value.name!r}, a value {self.owner!r} ({self.cls}) computes before its quantizer, "
            "but only the value its quantizer reads leaves its table layer; compute from the quantized output, or "
            f"decorate {self.cls} with iotable.decompose(fan_in=..., output_domain=...), or list {self.owner!r} in "
            "host="
        )


def _ancestors(output: fx.Node, *, stop: fx.Node) -> set[fx.Node]:
    """``output`` and every node it is computed from, not looking past ``stop``."""
    found: set[fx.Node] = set()
    pending = [output]
    while pending:
        n = pending.pop()
        if n in found:
            continue
        found.add(n)
        if n is not stop:
            pending.extend(n.all_input_nodes)
    return found


def _call_name(node: fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))
