"""What :func:`~iotable.hdl.export` returns: the :class:`Design`, its :class:`Port` s and its layers' costs
(:class:`~iotable.synth.LayerCost`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..network.network import TableNetwork
from ..synth.records import LayerCost
from .bench import vectors_file
from .language import Language
from .sources import every

__all__ = ["Design", "Port", "codes_at"]


@dataclass(frozen=True)
class Port:
    """A data port of the top module and how the codes of a tensor sit in it.

    Element ``i`` of a word is the unsigned bit field ``[offset(i) + widths[i] - 1 : offset(i)]``,
    ``offset(i)`` the sum of the widths before it: element 0 in the lowest bits. With one domain for every
    element, element ``i`` is ``[i*b +: b]``. In the unrolled style a word is the whole tensor (flattened in C
    order, as the graph's node ``node`` holds it); in the streaming style a tensor with positions takes
    ``beats`` words, one position each in raster order, whose elements are its channels.
    """

    name: str
    node: str
    shape: tuple[int, ...]
    layout: str | None
    widths: tuple[int, ...]
    beats: int = 1

    @property
    def width(self) -> int:
        """Bits of the port (of one word)."""
        return sum(self.widths)

    @property
    def elements(self) -> int:
        """Codes in one word."""
        return len(self.widths)

    @property
    def bits(self) -> int | None:
        """Bits of every element when they are all the same, else ``None``."""
        return self.widths[0] if self.widths and len(set(self.widths)) == 1 else None

    def field(self, element: int) -> tuple[int, int]:
        """``(high, low)``: the bits of element ``element``."""
        low = sum(self.widths[:element])
        return low + self.widths[element] - 1, low


@dataclass(frozen=True)
class Design:
    """A design :func:`export` wrote: its files, ports, latency and resources.

    Attributes:
        top: the top module (entity); language: ``"verilog"`` or ``"vhdl"``; style: ``"unrolled"`` or
            ``"streaming"``; pipeline: a register after every ``pipeline``-th table layer (0: none).
        directory: where the files are.
        sources: the design's source files (tables first, then ``<top>.v|.vhd``): what synthesis reads.
        bench: the network bench's files (bench, input and expected vectors); table_benches: the top of
            each exhaustive table bench (``<module>_tb``), whose files are beside it.
        inputs, outputs: the data ports ``in_data`` and ``out_data``.
        latency: cycles from a vector taken at ``in_data`` to its codes at ``out_data`` (0: combinational);
            streaming: the registers a word passes (a line buffer's or a pipeline register's) when nothing
            stalls, counted from the word that completes its windows.
        interval: cycles per vector when nothing stalls (1 unrolled; streaming, the most words a stage moves
            per vector: the largest padded frame).
        layers: the cost of each layer module (:class:`~iotable.synth.LayerCost`: units, instances, distinct
            tables, rows, table bits, registers, LogicNets' estimate, LUTs with mapped tables).
        delay_registers: bits of registers that delay tensors which skip a pipeline stage; line_buffers: bits
            of the streaming line buffers.
        output_node: the graph node whose codes ``out_data`` carries; host: the host nodes left to software
            (everything after ``output_node`` runs there).
        vectors: how many vectors the network bench checks.
        tables: how the table modules are written: ``"case"`` (a ``case`` over the rows) or ``"mapped"`` (each
            table's LUT netlist, mapped by ABC; ``layers`` then count ``luts``).
        checksums: the design manifest: ``(file, sha256)`` for every file in :attr:`files`, as written.
            :func:`simulate` and :func:`check` refuse a directory whose files differ from it (docs/hardware.md,
            "The design manifest").
        keep_dead: the units whose outputs reach no network output were instantiated too (``export``'s
            ``keep_dead``).
        primitives: the device family whose LUT cells the mapped tables instantiate (``"ecp5"``, ``"ice40"``,
            ``"xilinx"``; ``export``'s ``primitives``), ``None`` for generic LUTs or ``case`` tables.
        pipeline_luts: a register after every ``pipeline_luts`` LUT levels inside each mapped table (0: none);
            ``latency`` counts them (each layer's ``latency`` in the top file's header).
        inline_bits: ``case`` tables of at most this many address bits are written inline in their layer
            modules, no file of their own (``export``'s ``inline_bits``; 0: none).
        min_luts: with ``primitives``, the fewest LUT cells synthesis can leave of the design (a lower
            bound, counted from its tables' cells as placed: :mod:`iotable.hdl.fit`), which
            :func:`~iotable.hdl.implement` holds against the device before synthesizing; ``None`` otherwise
            (``case`` tables, generic LUTs, the streaming style).
    """

    top: str
    language: str
    style: str
    pipeline: int
    directory: Path
    sources: tuple[str, ...]
    bench: tuple[str, ...]
    table_benches: tuple[str, ...]
    inputs: Port
    outputs: Port
    latency: int
    layers: tuple[LayerCost, ...]
    delay_registers: int
    output_node: str
    host: tuple[str, ...]
    vectors: int
    network: TableNetwork = field(repr=False, compare=False)
    interval: int = 1
    line_buffers: int = 0
    tables: str = "case"
    checksums: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    keep_dead: bool = False
    primitives: str | None = None
    pipeline_luts: int = 0
    inline_bits: int = 0
    min_luts: int | None = None

    @property
    def files(self) -> tuple[str, ...]:
        """Every file written, sources first."""
        tables = tuple(f for t in self.table_benches for f in _table_bench_names(t, self.language))
        return (*self.sources, *self.bench, *tables, f"{self.top}_design.json")

    def reference(self, x: Any, *, codes: bool = False) -> torch.Tensor:
        """What ``out_data`` must carry for a batch ``x``: ``net.run``'s codes at :attr:`output_node`, shaped
        ``(N, *outputs.shape)`` (``codes=True``: ``x`` holds input codes)."""
        encoded = self.network.encode_input(x, codes=codes, what="Design.reference")
        return codes_at(self.network, encoded, self.output_node)

    def summary(self) -> str:
        """A readable description: ports, latency, layers and their resources, what stays in software."""
        lines = [
            f"{self.top}: {self.language} design, style {self.style}, "
            + (every(self.pipeline) if self.pipeline else "no pipeline register" if self.latency else "combinational")
            + f", latency {self.latency} cycle(s)"
            + (f", {self.interval} cycles per vector" if self.interval > 1 else "")
            + (", tables as LUT netlists" if self.tables == "mapped" else "")
            + (f", a register after every {self.pipeline_luts} LUT level(s) inside" if self.pipeline_luts else ""),
            _port_line(self.inputs),
            _port_line(self.outputs),
            f"{'node':<24} {'units':>6} {'instances':>9} {'tables':>6} {'rows':>9} {'table bits':>11} {'registers':>9}"
            + f" {'estimate':>8}"
            + (f" {'LUTs':>8}" if self.tables == "mapped" else ""),
        ]
        for r in self.layers:
            lines.append(
                f"{r.node or r.name:<24} {r.tables:>6} {r.instances:>9} {r.distinct:>6} {r.rows:>9} {r.table_bits:>11} "
                f"{r.registers:>9} {r.estimate:>8}" + (f" {r.luts:>8}" if r.luts is not None else "")
            )
        if self.delay_registers:
            lines.append(f"delay registers: {self.delay_registers} bits")
        if self.line_buffers:
            lines.append(f"line buffers: {self.line_buffers} bits")
        if self.host:
            lines.append(
                f"host nodes left to software: {', '.join(self.host)} (they read out_data, the codes of "
                f"{self.output_node!r})"
            )
        return "\n".join(lines)


def _port_line(port: Port) -> str:
    words = f"{port.beats} words of " if port.beats > 1 else ""
    return (
        f"{port.name + ':':<10}{port.width} bits, {words}{port.elements} codes of node {port.node!r} {port.shape}"
        + (f", {port.bits} bits each" if port.bits else "")
    )


def _table_bench_names(top: str, language: str) -> tuple[str, str]:
    module = top[: -len("_tb")]
    return f"{top}{Language(language).suffixes[0]}", vectors_file(module)


def codes_at(net: TableNetwork, codes: torch.Tensor, node: str) -> torch.Tensor:
    if codes.shape[0] == 0:
        return torch.zeros((0, *net.graph[node].shape), dtype=torch.int64)
    if node == net.output_node.name or (
        net.graph.consumers(node) and net.graph.consumers(node)[0] == net.output_node.name
    ):
        return net.run(codes, codes=True, return_codes=True)
    _, env = _without_hosts(net).runtime.run(codes, capture=True)
    return env[node].to(torch.int64)


class _Unread(torch.nn.Module):
    """Stands for a host module when only the hardware part's codes are wanted: nothing there reads it."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((x.shape[0], *self.shape), dtype=torch.float32)


def _without_hosts(net: TableNetwork) -> TableNetwork:
    """``net`` with every host module replaced by one whose output nothing in the hardware part reads, so that
    a network loaded without its host modules (or with a costly host head) still gives its hardware's codes."""
    hosts = net.graph.host_nodes()
    if not hosts:
        return net
    graph = net.graph.replace(*(replace(n, meta=replace(n.meta, module=_Unread(tuple(n.shape)))) for n in hosts))
    return replace(net, graph=graph)
