"""Walking the interlayer graph node by node: the base of the runtime and of any pass over a graph.

A :class:`GraphInterpreter` visits a graph's nodes in topological order and calls one method per node
kind (``input``, ``output``, ``table``, ``pad``, ``window``, ``reshape``, ``duplicate``, ``join``,
``pool``, ``host``, and the name of any kind registered later) with the node and the results of its
producers, one per input port; what the method returns is the node's result. The table-only runtime
(:class:`iotable.runtime.Runtime`) is one: it compiles each node into a kernel by its kind's
definition (:meth:`NodeKindDef.compile <iotable.graph.kind.NodeKindDef.compile>`). A hardware
generator, a cost estimate or a checker is another, overriding the kinds it handles, as torch.fx's
``Interpreter`` is specialised.

An error raised while a node runs is re-raised as a library error whose message ends "while executing
node <name>"; the original is chained (``__cause__``).

Example:
    >>> class Rows(GraphInterpreter[int]):
    ...     '''Table rows a node holds: its units' rows, 0 for structure.'''
    ...     def default(self, node, inputs):
    ...         return 0
    ...     def table(self, node, inputs):
    ...         return sum(u.rows for u in node.meta.units)
    >>> net = precompute(torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(1)),
    ...                  input_domain=Domain.uniform(1))
    >>> Rows(net.graph).run_graph()
    {'input': 0, '0': 8, 'output': 0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from ..errors import IOTableError, NodeExecutionError
from .graph import Graph, Node

__all__ = ["GraphInterpreter", "NodeExecutionError"]

T = TypeVar("T")


class GraphInterpreter(Generic[T]):
    """Runs a graph node by node, in topological order, with one overridable method per node kind.

    Each kind's method takes the node and the results of its producers (by input port) and returns the
    node's result; the input node receives the arguments of :meth:`run_graph`. Every kind's method calls
    :meth:`default` unless overridden, and :meth:`default` raises: a subclass handles the kinds it meets.

    Args:
        graph: the graph to walk (a checked one: :meth:`Graph.check <iotable.graph.Graph.check>`).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def run_graph(self, *args: Any) -> dict[str, T]:
        """Every node's result, by node name, in graph order.

        Raises:
            NodeExecutionError: a node's method raised something other than a library error (chained); a
                library error is re-raised as its own class, its message ending "while executing node <name>".
        """
        results: dict[str, T] = {}
        for node in self.graph.nodes:
            inputs = list(args) if node.kind.is_input else [results[p] for p in self.graph.inputs(node.name)]
            try:
                results[node.name] = self.run_node(node, inputs)
            except Exception as exc:
                wrapped = _in_context(exc, node)
                if wrapped is exc:  # already names its node (an interpreter inside another)
                    raise
                raise wrapped from exc
        return results

    def run_node(self, node: Node, inputs: Sequence[Any]) -> T:
        """The result of one node: the method named after its kind (``node.kind.value``), called with the node
        and its inputs; :meth:`default` for a kind the class has no method for (a registered kind of
        :mod:`iotable.graph.kind` gets a method by that name in a subclass)."""
        method = getattr(self, node.kind.value, None)
        if method is None or node.kind.value.startswith("_"):
            method = self.default
        result: T = method(node, inputs)
        return result

    def default(self, node: Node, inputs: Sequence[Any]) -> T:
        """What the kinds a subclass does not handle do: raise, naming the kind and the class."""
        msg = (
            f"{type(self).__name__} has no method for {node.kind.value} nodes; define "
            f"{node.kind.value}(self, node, inputs) (or default) on it"
        )
        raise NodeExecutionError(msg)

    # -- one method per node kind (NodeKind), each calling default unless overridden ----------------------

    def input(self, node: Node, inputs: Sequence[Any]) -> T:
        """The network input: ``inputs`` are the arguments of :meth:`run_graph`."""
        return self.default(node, inputs)

    def output(self, node: Node, inputs: Sequence[Any]) -> T:
        """The network output."""
        return self.default(node, inputs)

    def table(self, node: Node, inputs: Sequence[Any]) -> T:
        """A table layer (:class:`~iotable.graph.TableMeta`)."""
        return self.default(node, inputs)

    def pad(self, node: Node, inputs: Sequence[Any]) -> T:
        """Padding (:class:`~iotable.graph.PadMeta`)."""
        return self.default(node, inputs)

    def window(self, node: Node, inputs: Sequence[Any]) -> T:
        """A sliding window (:class:`~iotable.graph.WindowMeta`)."""
        return self.default(node, inputs)

    def reshape(self, node: Node, inputs: Sequence[Any]) -> T:
        """A flatten or view."""
        return self.default(node, inputs)

    def duplicate(self, node: Node, inputs: Sequence[Any]) -> T:
        """Fan-out to several consumers (:class:`~iotable.graph.DuplicateMeta`)."""
        return self.default(node, inputs)

    def join(self, node: Node, inputs: Sequence[Any]) -> T:
        """Concatenation along channels (:class:`~iotable.graph.JoinMeta`)."""
        return self.default(node, inputs)

    def pool(self, node: Node, inputs: Sequence[Any]) -> T:
        """Max-pooling (:class:`~iotable.graph.PoolMeta`)."""
        return self.default(node, inputs)

    def host(self, node: Node, inputs: Sequence[Any]) -> T:
        """A module run with torch (:class:`~iotable.graph.HostMeta`)."""
        return self.default(node, inputs)


def _in_context(exc: Exception, node: Node) -> Exception:
    """``exc`` with "while executing node <name>" added: the same library error class, or a
    :class:`NodeExecutionError` for any other error."""
    where = f"while executing node {node.name!r} ({node.kind.value})"
    if isinstance(exc, IOTableError):
        if where in str(exc):
            return exc
        try:
            return type(exc)(f"{exc} ({where})")
        except Exception:  # a library error whose constructor takes other arguments
            pass
    return NodeExecutionError(f"{type(exc).__name__}: {exc} ({where})")
