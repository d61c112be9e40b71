"""What arithmetic nodes cost: each live output of a ``sum``, ``argmax`` or ``threshold`` node as a function of
the codes it reads (:class:`ArithFunction`), its estimate before any row (:func:`arithmetic_estimate`, the
formulas of :mod:`iotable.lutcount`), its logic as BLIF for ABC (:mod:`.arithlogic`) and its reference: the
node kind's own runtime kernel.

A function is canonical: the elements an output reads become inputs ``0 .. n-1`` in the order its record
names them (a sum's repeated elements merged, its zero weights dropped), so that outputs computing the same
thing from other elements (the classes of a GroupSum, the elements of a threshold) are one function, mapped
once and cached once by content. Each output is hardware of its own, so each costs its function's LUTs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..graph.graph import Graph
from ..graph.liveness import Liveness, check_keep_dead, liveness
from ..graph.nodes import Node
from ..lutcount import check_k
from ..nodekinds.functions import (
    ARITHMETIC_KINDS,
    ArithFunction,
    arithmetic_nodes,
    estimated_luts,
    live_outputs,
    node_functions,
    node_terms,
)
from .arithlogic import Circuit
from .records import ArithmeticCost

__all__ = [
    "ARITHMETIC_KINDS",
    "ArithFunction",
    "arithmetic_estimate",
    "arithmetic_nodes",
    "cost_record",
    "function_blif",
    "live_outputs",
    "node_functions",
    "node_terms",
]


def function_blif(fn: ArithFunction) -> str:
    """The function's logic as BLIF (:class:`~iotable.synth.arithlogic.Circuit`)."""
    names = fn.input_names()
    circuit = Circuit(names)
    vectors, at = [], 0
    for w in fn.widths:  # each input's bits, least significant first
        vectors.append(names[at : at + w][::-1])
        at += w
    if fn.kind == "sum":
        bits = circuit.weighted_sum(list(zip(vectors, fn.weights)), fn.constant, fn.output_width)
    elif fn.kind == "threshold":
        bits = circuit.steps(vectors[0], fn.thresholds, fn.constant, fn.direction, fn.output_width)
    else:
        bits = circuit.argmax(vectors, fn.output_width)
    return circuit.blif([(f"y0_{b}", bits[b]) for b in range(fn.output_width - 1, -1, -1)])


def arithmetic_estimate(graph: Graph, *, k: int = 6, keep_dead: bool = False) -> tuple[ArithmeticCost, ...]:
    """The estimated LUTs of every arithmetic node of ``graph``, one :class:`ArithmeticCost` each: per live
    output (every output with ``keep_dead``) its function's count (:meth:`ArithFunction.estimate`).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(2))
        >>> net = iotable.precompute(model, input_domain=Domain.uniform(1))
        >>> arithmetic_estimate(net.graph)  # tables only: no arithmetic node
        ()
    """
    k = check_k(k, what="arithmetic_estimate")
    keep_dead = check_keep_dead(keep_dead, what="arithmetic_estimate")
    live = liveness(graph)
    return tuple(_estimated(graph, node, live, k, keep_dead) for node in arithmetic_nodes(graph))


def _estimated(graph: Graph, node: Node, live: Liveness, k: int, keep_dead: bool) -> ArithmeticCost:
    kept, dead = live_outputs(node, live, keep_dead)
    functions = node_functions(graph, node, kept)
    return cost_record(node, functions, dead, estimate=estimated_luts(functions, k))


def cost_record(
    node: Node,
    functions: Sequence[ArithFunction],
    dead: int,
    *,
    estimate: int,
    luts: int | None = None,
    depth: int | None = None,
    cached: int | None = None,
) -> ArithmeticCost:
    """The :class:`ArithmeticCost` of ``node`` whose counted outputs have ``functions`` (``dead`` outputs
    reach no network output)."""
    return ArithmeticCost(
        node=node.name,
        kind=node.kind.value,
        outputs=len(functions),
        dead=dead,
        input_bits=max((fn.input_bits for fn in functions), default=0),
        output_bits=max((fn.output_bits for fn in functions), default=0),
        estimate=estimate,
        luts=luts,
        depth=depth,
        distinct=len({fn.key() for fn in functions}),
        cached=cached,
    )
