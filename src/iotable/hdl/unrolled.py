"""The unrolled style: every unit instantiated at every position, a whole sample per cycle.

:class:`UnrolledBuilder` calls each node kind's :meth:`~iotable.graph.kind.NodeKindDef.unrolled`, which gives
the node's output tensor as an array of element ids in the node's shape. Structural nodes are wiring, so they
only rearrange ids: a reshape reshapes, a join concatenates, a duplicate repeats, a pad gathers through its
index map with the pad codes' constants, a window gathers its vectors. Only table layers (:meth:`lookup`: a
table node, or any kind's logic from codes), pool nodes and arithmetic make hardware: a table layer becomes a
*layer module* whose input port ``x`` is the tensor it reads (the window's input when a window feeds a table
node) and whose output port ``y`` is its output tensor, a pool node a module of comparator trees, a sum, an
argmax or a threshold a module of adder trees, indexed comparator trees or comparisons. Pipeline registers
follow table layers and arithmetic blocks (every ``pipeline``-th one); an element's *stage* is the registers
it has passed, and a consumer that reads elements of different stages reads the earlier ones through delay
registers (:meth:`~UnrolledBuilder.align`), so that every path from the input has the same latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import HDLError
from ..graph.graph import Node
from ..graph.kind import NodeKindDef
from ..table import IOTable
from .builder import Builder, element_widths
from .netlist import Netlist, Style, ValidPipeline

__all__ = ["UnrolledBuilder"]


class UnrolledBuilder(Builder):
    """The walk of the unrolled style: node results are arrays of element ids in the node's shape.

    Besides :class:`~iotable.hdl.builder.Builder`'s, what a kind builds with: :meth:`align` (elements of
    different stages read at one, through delay registers), before a block that reads them.
    """

    style: ClassVar[Style] = Style.UNROLLED

    def build(self, kind: NodeKindDef, node: Node, inputs: Sequence[Any]) -> Any:
        return kind.unrolled(self, node, inputs)

    def finish(self) -> Netlist:
        """The netlist after the walk: its output aligned to one stage (the latency), the valid pipeline."""
        netlist = self.netlist
        out = self.values[self.cut]
        stage = int(max(netlist.stage_of(out.reshape(-1)).max(), 0)) if out.size else 0
        netlist.output_ids = netlist.aligned(out.reshape(-1), stage)
        netlist.output_node = self.cut
        netlist.latency = stage
        netlist.valid = ValidPipeline(stage)
        return netlist

    def align(self, ids: Any) -> tuple[np.ndarray, int]:
        """``ids`` (flat) read at one stage, the latest of theirs, through delay registers; and that stage."""
        x_ids = np.asarray(ids).reshape(-1)
        stage = int(max(self.netlist.stage_of(x_ids).max(), 0)) if x_ids.size else 0
        return self.netlist.aligned(x_ids, stage), stage

    # -- the style's side of the arithmetic blocks -----------------------------------------------------

    def output_widths(self, node: Node) -> np.ndarray:
        return element_widths(node).reshape(-1)

    def arith_in(self, x: Any) -> tuple[np.ndarray, Any]:
        return np.asarray(x, np.int64).reshape(-1), None

    def arith_align(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        return self.align(ids)

    def arith_step(self, node: Node, operands: np.ndarray, ids: np.ndarray, carry: Any) -> tuple[np.ndarray, Any]:
        """A register on the block's output (the operands passed on are delayed where the next level reads them)."""
        if self.layer_done() and ids.size:
            signal = int(self.netlist.sig[ids[0]])
            registered = self.netlist.register(signal, f"{self.netlist.signals[signal].name[: -len('_y')]}_q")
            operands = self.netlist.moved(operands, signal, registered)
        return operands, carry

    def arith_out(self, node: Node, ids: np.ndarray, carry: Any) -> Any:
        return ids.reshape(node.shape)

    def lookup(
        self,
        node: Node,
        tables: Sequence[IOTable],
        index_map: np.ndarray,
        x: Any,
        *,
        positions: np.ndarray | None = None,
        channels: Sequence[Sequence[int]] | None = None,
        layer: str | None = None,
    ) -> Any:
        units = self.lookup_units(node, tables, index_map, channels, layer)
        x_ids, stage = self.align(x)
        if positions is None:
            local = np.arange(x_ids.size, dtype=np.int64).reshape(1, -1)
        else:
            local = np.asarray(positions, dtype=np.int64)
            local = local.reshape(-1, local.shape[-1])
            if local.size and (local.min() < 0 or local.max() >= x_ids.size):
                msg = f"lookup for node {node.name!r}: positions must index the {x_ids.size} elements of x"
                raise HDLError(msg)
        self.check_reads(node, units, local.shape[1])
        ids, block = self.layer_block(node, units, x_ids, local, stage=stage)
        if self.layer_done():
            signal = block.output
            registered = self.netlist.register(signal, f"layer{units.index}_q")
            block.register, block.register_bits = registered, self.netlist.signals[registered].width
            ids = self.netlist.moved(ids, signal, registered)
        return ids.reshape(node.shape) if ids.size == int(np.prod(node.shape)) else ids
