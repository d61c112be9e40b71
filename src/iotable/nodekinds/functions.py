"""Arithmetic nodes as functions: each output of a ``sum``, ``argmax`` or ``threshold`` node as a function of the
codes it reads (:class:`ArithFunction`) and its LUT estimate before any row (the formulas of
:mod:`iotable.lutcount`), shared by the network's summary and the cost layer (:mod:`iotable.synth.arith`, which
also writes each function's logic for ABC).

A function is canonical: the elements an output reads become inputs ``0 .. n-1`` in the order its record
names them (a sum's repeated elements merged, its zero weights dropped), so that outputs computing the same
thing from other elements (the classes of a GroupSum, the elements of a threshold) are one function, mapped
once and cached once by content. Each output is hardware of its own, so each costs its function's LUTs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..bits import field_width
from ..domain import Domain
from ..graph.fields import element_radix_bits
from ..graph.graph import Graph
from ..graph.kind import NodeKind, definition
from ..graph.liveness import Liveness
from ..graph.nodes import ArgmaxMeta, Node, SumMeta, ThresholdMeta
from ..lutcount import adder_tree_luts, comparator_tree_luts, threshold_luts
from ..subexpressions import shared_sum_luts

__all__ = [
    "ARITHMETIC_KINDS",
    "ArithFunction",
    "arithmetic_nodes",
    "estimated_luts",
    "live_outputs",
    "node_estimate",
    "node_functions",
    "node_terms",
]

#: The node kinds whose hardware is arithmetic logic rather than tables.
ARITHMETIC_KINDS = ("sum", "argmax", "threshold")

# Part of every arithmetic function's key: bump when the logic handed to ABC changes for the same function.
_FLOW_VERSION = b"iotable.synth.arith/1"


@dataclass(frozen=True)
class ArithFunction:
    """One output of an arithmetic node as a function of the codes it reads (canonical: see the module).

    Attributes:
        kind: ``"sum"``, ``"argmax"`` or ``"threshold"``.
        radices: the codes each input takes (``0 .. radix - 1``), its field ``field_width(radix)`` bits.
        output_width: the output code's bits (the node's domain).
        weights, constant: a sum's ``constant + sum(weights[j] * x[j])``.
        thresholds, constant, direction: a threshold's ``constant + direction * (thresholds at most x[0])``.
    """

    kind: str
    radices: tuple[int, ...]
    output_width: int
    weights: tuple[int, ...] = ()
    constant: int = 0
    thresholds: tuple[int, ...] = ()
    direction: int = 1

    @property
    def widths(self) -> tuple[int, ...]:
        """Each input code's field bits."""
        return tuple(field_width(r) for r in self.radices)

    @property
    def input_bits(self) -> int:
        return sum(self.widths)

    @property
    def output_bits(self) -> int:
        return self.output_width

    def input_names(self) -> list[str]:
        """Input bit names, most significant first: ``x<input>_<bit>`` (as a table's address bits)."""
        return [f"x{j}_{b}" for j, w in enumerate(self.widths) for b in range(w - 1, -1, -1)]

    def output_names(self) -> list[str]:
        """Output code bits, most significant first: ``y0_<bit>``."""
        return [f"y0_{b}" for b in range(self.output_width - 1, -1, -1)]

    def key(self) -> str:
        """A content hash of the function (what is mapped)."""
        fields = (self.kind, self.radices, self.output_width, self.weights, self.constant, self.thresholds)
        digest = hashlib.sha256(_FLOW_VERSION)
        digest.update(repr((*fields, self.direction)).encode())
        return digest.hexdigest()

    def node(self) -> Node:
        """The function as a one-output node of its kind, reading inputs ``0 .. n-1`` (its kernel is the
        reference every mapped netlist is checked against)."""
        n = len(self.radices)
        if self.kind == "sum":
            meta: Any = SumMeta(np.arange(n)[None], np.array([self.weights]), np.array([self.constant]))
            return Node("function", NodeKind.SUM, (1,), None, None, meta)
        if self.kind == "threshold":
            meta = ThresholdMeta(np.array([self.thresholds]), np.array([self.constant]), np.array([self.direction]))
            return Node("function", NodeKind.THRESHOLD, (1,), None, None, meta)
        return Node("function", NodeKind.ARGMAX, (), None, None, ArgmaxMeta(0))

    def reference(self, codes: np.ndarray) -> np.ndarray:
        """The output code of every row of ``codes`` (``(rows, inputs)``), by the node kind's runtime kernel."""
        node = self.node()
        kernel = definition(node.kind).compile(None, node)
        out = kernel([torch.as_tensor(np.asarray(codes, np.int64))])
        return out.reshape(len(codes)).numpy()

    def estimate(self, k: int = 6) -> int:
        """The LUTs :mod:`iotable.lutcount` counts for the function's logic (see docs/hardware.md)."""
        if self.kind == "sum":
            return adder_tree_luts(
                self.widths, self.weights, constant=self.constant, output_bits=self.output_width, k=k
            )
        if self.kind == "threshold":
            reached = sum(1 <= t < self.radices[0] for t in set(self.thresholds))
            return threshold_luts(self.widths[0], reached, output_bits=self.output_width, k=k)
        return comparator_tree_luts(len(self.radices), self.widths[0], k=k)


def arithmetic_nodes(graph: Graph) -> list[Node]:
    """The ``sum``, ``argmax`` and ``threshold`` nodes of ``graph``, in graph order."""
    return [node for node in graph.nodes if node.kind.value in ARITHMETIC_KINDS]


def node_functions(graph: Graph, node: Node, outputs: np.ndarray | None = None) -> list[ArithFunction]:
    """The function of each output of an arithmetic ``node`` (flat, C order), or of ``outputs`` (a boolean
    mask of the node's shape: its live ones)."""
    return [fn for fn, _ in node_terms(graph, node, outputs)]


def node_terms(
    graph: Graph, node: Node, outputs: np.ndarray | None = None
) -> list[tuple[ArithFunction, tuple[int, ...]]]:
    """:func:`node_functions`, each with the producer's elements (flat, C order) its inputs read, in order."""
    producer = graph.producers(node.name)[0]
    radix, _ = element_radix_bits(producer)
    size = math.prod(node.shape)
    chosen = np.arange(size) if outputs is None else np.flatnonzero(np.asarray(outputs, dtype=bool).reshape(-1))
    meta = node.meta
    if isinstance(meta, ArgmaxMeta):
        candidates = np.moveaxis(np.arange(math.prod(producer.shape)).reshape(producer.shape), meta.dim, -1)
        n = producer.shape[meta.dim]
        rows = candidates.reshape(-1, n)
        return [
            (ArithFunction("argmax", tuple(int(radix[e]) for e in rows[i]), field_width(n)), tuple(rows[i].tolist()))
            for i in chosen
        ]
    assert isinstance(node.domain, Domain)  # checked: one domain of codes
    width = field_width(len(node.domain))
    if isinstance(meta, ThresholdMeta):
        return [
            (
                ArithFunction(
                    "threshold",
                    (int(radix[i]),),
                    width,
                    constant=int(meta.start[i]),
                    thresholds=tuple(int(t) for t in meta.thresholds[i]),
                    direction=int(meta.direction[i]),
                ),
                (int(i),),
            )
            for i in chosen
        ]
    assert isinstance(meta, SumMeta)
    found = []
    for i in chosen:
        merged: dict[int, int] = {}
        for element, weight in zip(meta.index_map[i].tolist(), meta.weights[i].tolist()):
            if element >= 0:
                merged[element] = merged.get(element, 0) + weight
        terms = [(e, w) for e, w in merged.items() if w]
        fn = ArithFunction(
            "sum",
            tuple(int(radix[e]) for e, _ in terms),
            width,
            weights=tuple(w for _, w in terms),
            constant=int(meta.constant[i]),
        )
        found.append((fn, tuple(e for e, _ in terms)))
    return found


def live_outputs(node: Node, live: Liveness, keep_dead: bool) -> tuple[np.ndarray, int]:
    """The outputs of ``node`` counted (the live ones, or all with ``keep_dead``) and how many are dead."""
    alive = np.asarray(live.elements[node.name], dtype=bool)
    return (np.ones(node.shape, dtype=bool) if keep_dead else alive), int((~alive).sum())


def node_estimate(graph: Graph, node: Node, outputs: np.ndarray | None = None, k: int = 6) -> int:
    """The LUTs of an arithmetic node's outputs (all, or the boolean mask ``outputs``): a sum node's as its adder
    block builds them, the pairs of shifted codes its outputs share counted once
    (:func:`~iotable.subexpressions.shared_sum_luts`); any other's by :func:`estimated_luts`."""
    found = node_terms(graph, node, outputs)
    if not isinstance(node.meta, SumMeta) or not found:
        return estimated_luts([fn for fn, _ in found], k)
    _, bits = element_radix_bits(graph.producers(node.name)[0])
    terms = [list(zip(elements, fn.weights)) for fn, elements in found]
    constants = [fn.constant for fn, _ in found]
    widths = [fn.output_width for fn, _ in found]
    return shared_sum_luts(terms, constants, [int(b) for b in bits], widths, k=k)


def estimated_luts(functions: list[ArithFunction], k: int = 6) -> int:
    """The LUTs of ``functions`` (a node's outputs): each distinct function estimated once, counted per output."""
    counts: dict[str, int] = {}
    for fn in functions:
        if fn.key() not in counts:
            counts[fn.key()] = fn.estimate(k)
    return sum(counts[fn.key()] for fn in functions)
