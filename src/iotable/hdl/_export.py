"""A whole table network as Verilog or VHDL: :func:`export`, :func:`simulate` and :func:`check`.

:func:`export` walks the network's graph with :class:`~iotable.hdl._netlist.NetlistBuilder` (a
:class:`~iotable.interpret.GraphInterpreter`), writes the design, its self-checking testbench with vectors
from ``net.run`` and an exhaustive bench per distinct table, and returns a :class:`Design`: the files, the
top module's ports and their bit packing, the latency, and each layer's resources. docs/hardware.md is the
I/O contract.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import HDLError, HDLToolError, IOTableError, OptionError
from ..network.network import TableNetwork
from ._bench import Language, table_bench
from ._emit import design_files
from ._mapped import check_mapped_options, layer_luts, map_modules
from ._names import check_name
from ._netbench import bench_files, parse_words
from ._netlist import Layer, Netlist, NetlistBuilder
from ._stream import Stage, StreamBuilder, WindowStage, beats_of, from_beats
from ._streamemit import stream_files
from ._table import DontCares
from ._tools import CheckResult, Simulator, check_files, simulate_files, write_files

__all__ = ["Design", "LayerResources", "Port", "Style", "check", "export", "simulate"]

#: More instances than this make an unrolled design refuse (an image too large to unroll).
UNROLL_LIMIT = 200_000


class Style(str, enum.Enum):
    """How a design computes the positions of a spatial layer."""

    UNROLLED = "unrolled"  # one instance of every unit at every position: a whole sample per cycle
    STREAMING = "streaming"  # pixels in raster order through line buffers, one instance of every unit

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Style:
        if isinstance(value, Style):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown style {value!r}; expected one of {accepted}"
        raise OptionError(msg)


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
class LayerResources:
    """What one table node costs: its module, instances, distinct tables, their rows and bits, registers.

    Attributes:
        node: the table node; layer: its layer in ``net.layers``; module: its layer module.
        units: units of the layer; instances: table instances (units x positions).
        tables: distinct table modules it instantiates (tables shared with an earlier layer count there).
        rows: rows of those tables; table_bits: rows x code bits of those tables (the memory they describe).
        registers: bits of the pipeline register after the layer (0 when not registered).
        luts: with mapped tables, the LUTs of all its instances (each costs its table's LUTs); else ``None``.
    """

    node: str
    layer: str
    module: str
    units: int
    instances: int
    tables: int
    rows: int
    table_bits: int
    registers: int
    luts: int | None = None


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
        layers: resources of each table node; delay_registers: bits of registers that delay tensors which
            skip a pipeline stage; line_buffers: bits of the streaming line buffers.
        output_node: the graph node whose codes ``out_data`` carries; host: the host nodes left to software
            (everything after ``output_node`` runs there).
        vectors: how many vectors the network bench checks.
        tables: how the table modules are written: ``"case"`` (a ``case`` over the rows) or ``"mapped"`` (each
            table's LUT netlist, mapped by ABC; ``layers`` then count ``luts``).
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
    layers: tuple[LayerResources, ...]
    delay_registers: int
    output_node: str
    host: tuple[str, ...]
    vectors: int
    network: TableNetwork = field(repr=False, compare=False)
    interval: int = 1
    line_buffers: int = 0
    tables: str = "case"

    @property
    def files(self) -> tuple[str, ...]:
        """Every file written, sources first."""
        tables = tuple(f for t in self.table_benches for f in _table_bench_names(t, self.language))
        return (*self.sources, *self.bench, *tables, f"{self.top}_design.json")

    def reference(self, x: Any, *, codes: bool = False) -> torch.Tensor:
        """What ``out_data`` must carry for a batch ``x``: ``net.run``'s codes at :attr:`output_node`, shaped
        ``(N, *outputs.shape)`` (``codes=True``: ``x`` holds input codes)."""
        encoded = self.network.encode_input(x, codes=codes, what="Design.reference")
        return _codes_at(self.network, encoded, self.output_node)

    def summary(self) -> str:
        """A readable description: ports, latency, layers and their resources, what stays in software."""
        lines = [
            f"{self.top}: {self.language} design, style {self.style}, "
            + (_every(self.pipeline) if self.pipeline else "no pipeline register" if self.latency else "combinational")
            + f", latency {self.latency} cycle(s)"
            + (f", {self.interval} cycles per vector" if self.interval > 1 else "")
            + (", tables as LUT netlists" if self.tables == "mapped" else ""),
            _port_line(self.inputs),
            _port_line(self.outputs),
            f"{'node':<24} {'units':>6} {'instances':>9} {'tables':>6} {'rows':>9} {'table bits':>11} {'registers':>9}"
            + (f" {'LUTs':>8}" if self.tables == "mapped" else ""),
        ]
        for r in self.layers:
            lines.append(
                f"{r.node:<24} {r.units:>6} {r.instances:>9} {r.tables:>6} {r.rows:>9} {r.table_bits:>11} "
                f"{r.registers:>9}" + (f" {r.luts:>8}" if r.luts is not None else "")
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


def _every(pipeline: int) -> str:
    return "a register after every table layer" if pipeline == 1 else f"a register after every {pipeline} table layers"


def _table_bench_names(top: str, language: str) -> tuple[str, str]:
    module = top[: -len("_tb")]
    return (f"{top}{'.v' if language == 'verilog' else '.vhd'}", f"{module}_vectors.hex")


def _codes_at(net: TableNetwork, codes: torch.Tensor, node: str) -> torch.Tensor:
    if codes.shape[0] == 0:
        return torch.zeros((0, *net.graph[node].shape), dtype=torch.int64)
    if node == net.output_node.name or (
        net.graph.consumers(node) and net.graph.consumers(node)[0] == net.output_node.name
    ):
        return net.run(codes, codes=True, return_codes=True)
    _, env = net.runtime.run(codes, capture=True)
    return env[node].to(torch.int64)


def _pipeline(value: Any, *, what: str) -> int:
    if value is None or (isinstance(value, str) and value.lower() in ("none", "combinational")):
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = (
            f"{what}: pipeline must be a number of table layers between registers (1: after every table layer, "
            f"k: after every k-th) or 0 / 'none' (combinational), received {value!r}"
        )
        raise OptionError(msg)
    return value


def _stimulus(net: TableNetwork, inputs: Any, vectors: Any, seed: int, *, what: str) -> torch.Tensor:
    """Input codes for the network bench: ``inputs`` (values of the input domain) or random codes."""
    if inputs is not None:
        return net.encode_input(inputs, what=what)
    if isinstance(vectors, bool) or not isinstance(vectors, int) or vectors < 1:
        msg = f"{what}: vectors must be a positive number of random input vectors, received {vectors!r}"
        raise OptionError(msg)
    node = net.input_node
    sizes = [len(d) for d in node.channel_domains() or ()]
    generator = np.random.default_rng(seed)
    codes = generator.integers(0, 2**62, size=(vectors, *node.shape)) % _broadcast_sizes(node, sizes)
    return torch.as_tensor(codes, dtype=torch.int64)


def _broadcast_sizes(node: Any, sizes: list[int]) -> np.ndarray:
    array = np.asarray(sizes, dtype=np.int64)
    if node.layout is None or len(node.shape) <= 1:
        return np.broadcast_to(array if array.size > 1 else array[:1], node.shape)
    axis = -1 if node.layout.channels_last else 0
    shape = [1] * len(node.shape)
    shape[axis] = -1
    return np.broadcast_to(array.reshape(shape), node.shape)


def _port(name: str, netlist: Netlist, ids: np.ndarray, node: Any, beats: int) -> Port:
    layout = node.layout.value if node.layout is not None else None
    return Port(name, node.name, tuple(node.shape), layout, tuple(int(w) for w in netlist.width[ids]), beats)


@dataclass(frozen=True)
class _Built:
    """A netlist of either style, with what the writer needs to know of its words and stages."""

    netlist: Netlist
    hosts: list[str]
    stages: list[Stage] | None = None  # streaming: the clocked stages
    last: int = 0  # streaming: the handshake of the output
    in_beats: int = 1
    out_beats: int = 1
    interval: int = 1
    line_buffers: int = 0

    def words(self, codes: np.ndarray, node: Any) -> np.ndarray:
        """A batch of ``node``'s codes as the words its port carries, one a row."""
        return beats_of(codes, node) if self.stages is not None else codes.reshape(codes.shape[0], -1)

    def sources(
        self, language: str, *, dont_cares: str, header: list[str], mapped: Mapping[str, Any] | None
    ) -> dict[str, str]:
        """The design's source files (tables as LUT netlists where ``mapped`` gives them)."""
        if self.stages is None:
            return design_files(self.netlist, language, dont_cares=dont_cares, header=header, mapped=mapped)
        return stream_files(
            self.netlist, self.stages, self.last, language, dont_cares=dont_cares, header=header, mapped=mapped
        )


def _build(net: TableNetwork, style: Style, top: str, pipeline: int, *, what: str) -> _Built:
    """The netlist of ``net``'s hardware part in ``style``; refuses what the style cannot build."""
    builder = (StreamBuilder if style is Style.STREAMING else NetlistBuilder)(
        net.graph, net.layers, top=top, pipeline=pipeline
    )
    try:
        netlist = builder.build()
    except IOTableError as exc:
        raise HDLError(f"{what}: {exc}") from None
    if isinstance(builder, StreamBuilder):
        stream = builder.output_stream
        assert stream is not None
        buffers = sum(netlist.signals[s.output].width for s in builder.stages if isinstance(s, WindowStage))
        return _Built(
            netlist, builder.hosts, builder.stages, stream.handshake, builder.beats[0], stream.beats,
            max(builder.beats), buffers,
        )  # fmt: skip
    instances = sum(len(b.instances) for b in netlist.blocks if isinstance(b, Layer))
    if instances > UNROLL_LIMIT:
        msg = (
            f"{what}: style 'unrolled' needs {instances} table instances (more than {UNROLL_LIMIT}); export with "
            "style='streaming' (one instance of each unit, pixels in raster order), or a network with fewer "
            "positions per layer (smaller images, larger strides) or fewer units"
        )
        raise HDLError(msg)
    return _Built(netlist, builder.hosts)


def _resources(net: TableNetwork, netlist: Netlist) -> tuple[tuple[LayerResources, ...], int]:
    seen: set[str] = set()
    layers = []
    for block in netlist.blocks:
        if not isinstance(block, Layer):
            continue
        modules = [m for m in dict.fromkeys(m for _, m, _ in block.instances) if m not in seen]
        seen.update(modules)
        rows = sum(netlist.modules[m].layout.rows for m in modules)
        bits = sum(netlist.modules[m].layout.rows * netlist.modules[m].layout.code_bits for m in modules)
        layers.append(
            LayerResources(
                node=block.node,
                layer=block.layer,
                module=block.name,
                units=len(net[block.layer].tables),
                instances=len(block.instances),
                tables=len(modules),
                rows=rows,
                table_bits=bits,
                registers=block.register_bits,
            )
        )
    layer_registers = {b.register for b in netlist.blocks if isinstance(b, Layer) and b.register is not None}
    delays = sum(s.width for k, s in enumerate(netlist.signals) if s.source is not None and k not in layer_registers)
    return tuple(layers), delays


def _header(net: TableNetwork, top: str, built: _Built, pipeline: int) -> list[str]:
    netlist = built.netlist
    inw = netlist.signals[0].width
    outw = int(netlist.width[netlist.output_ids].sum())
    lines = [f"Generated by iotable: the table network as the module {top} (see docs/hardware.md for the contract)."]
    if built.stages is None:
        lines += [
            f"in_data ({inw} bits): the codes of node '{netlist.input_node}', element i (C order) in the bits "
            "after elements 0..i-1, element 0 lowest.",
            f"out_data ({outw} bits): the codes of node '{netlist.output_node}', packed the same way.",
            f"Latency: {netlist.latency} cycle(s) from in_valid & in_ready to out_valid"
            + (f"; {_every(pipeline)}." if pipeline else " (combinational)."),
            "Handshake: a vector is taken when in_valid and in_ready are high at a rising clock edge; out_data is",
            "taken when out_valid and out_ready are high. rst (synchronous, active high) clears the valid bits.",
        ]
    else:
        lines += [
            f"Streaming: in_data ({inw} bits) takes the codes of node '{netlist.input_node}' one position per "
            f"word ({built.in_beats} word(s) a vector, positions in raster order), channel c in the bits after "
            "channels 0..c-1, channel 0 lowest.",
            f"out_data ({outw} bits): the codes of node '{netlist.output_node}', {built.out_beats} word(s) a "
            "vector, packed the same way.",
            f"At most one vector every {built.interval} cycles; {netlist.latency} register stage(s) (line "
            + (f"buffers and {_every(pipeline)})." if pipeline else "buffers)."),
            "Handshake: a word is taken when in_valid and in_ready are high at a rising clock edge; out_data is",
            "taken when out_valid and out_ready are high. rst (synchronous, active high) clears the valid bits",
            "and the position counters.",
        ]
    if built.hosts:
        lines.append(f"Host nodes left to software, reading out_data: {', '.join(built.hosts)}.")
    return lines


def export(
    net: TableNetwork,
    directory: str | Path,
    *,
    language: str = "verilog",
    pipeline: int | str | None = 1,
    style: str = "unrolled",
    top: str = "iotable_net",
    inputs: Any = None,
    vectors: int = 256,
    seed: int = 0,
    dont_cares: str = "x",
    table_benches: bool = True,
    tables: str = "case",
    k: int = 6,
    executor: Any = None,
    cache_dir: str | Path | None = None,
) -> Design:
    """Write a table network as a Verilog or VHDL design with its testbenches; return its description.

    The design computes the network up to its first host node (host nodes stay in software; the
    description says which) with one table module per distinct table, a layer module per table node, and
    registers after every ``pipeline``-th table layer. Its top module streams vectors through a valid/ready
    handshake (docs/hardware.md: ports, bit packing, latency, reset). The network bench feeds ``inputs`` (or
    ``vectors`` random input vectors) and checks every output against ``net.run``; each distinct table gets
    an exhaustive bench. Everything is checked before the first file is written.

    Args:
        net: the table network (``iotable.precompute`` or ``iotable.load``).
        directory: where to write (created if missing).
        language: ``"verilog"`` (Verilog-2001) or ``"vhdl"`` (VHDL-2008).
        pipeline: a register after every ``pipeline``-th table layer (1: after every one); 0 or ``"none"``:
            combinational.
        style: ``"unrolled"``: every unit instantiated at every position, a whole sample per cycle.
        top: the top module's name; other modules are named ``<top>_layer<i>``, ``<top>_layer<i>_u<unit>``.
        inputs: a batch of the input domain's values for the network bench (default: random codes).
        vectors: how many random vectors when ``inputs`` is not given.
        seed: the random vectors' seed.
        dont_cares: rows a partial table lacks drive ``"x"`` (don't-care) or code 0 (``"zero"``).
        table_benches: write an exhaustive bench for every distinct table.
        tables: ``"case"``: each table module a ``case`` over its rows; ``"mapped"``: each distinct table
            mapped onto ``k``-input LUTs by :func:`iotable.synth.map_luts` (needs ABC; every netlist checked
            on every row) and written as that LUT netlist, same ports (needs ``dont_cares="x"``).
        k: LUT inputs, with ``tables="mapped"``.
        executor: where ``map_luts`` maps (``None``: a local process pool), with ``tables="mapped"``.
        cache_dir: ``map_luts``' JSON cache folder, with ``tables="mapped"``.

    Returns:
        The :class:`Design`.

    Raises:
        HDLError: a graph or option the generator cannot build (the message names the node and the fix).
        OptionError: an unknown language, style, pipeline, dont_cares or tables.

    Example:
        >>> import tempfile, torch
        >>> from iotable import Domain, precompute, nn
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), nn.Quantize(2)).eval()
        >>> net = precompute(model, input_domain=Domain.uniform(2))
        >>> design = export(net, tempfile.mkdtemp(), top="tiny")
        >>> design.latency, design.inputs.width, design.outputs.width, design.sources
        (1, 8, 6, ('tiny_layer0_u0.v', 'tiny_layer0_u1.v', 'tiny_layer0_u2.v', 'tiny.v'))
    """
    what = "export"
    if not isinstance(net, TableNetwork):
        msg = f"{what}: expected a TableNetwork (iotable.precompute or iotable.load), received {type(net).__name__}"
        raise HDLError(msg)
    lang = Language.parse(language, what=what).value
    chosen = Style.parse(style, what=what)
    depth = _pipeline(pipeline, what=what)
    top = check_name(top, language=lang, what=what)
    mode = DontCares.parse(dont_cares, what=what).value
    table_kind = check_mapped_options(tables, k, mode, what=what)
    target = Path(directory)
    if target.exists() and not target.is_dir():
        msg = f"{what}: {str(target)!r} exists and is not a directory; give a directory for the design's files"
        raise HDLError(msg)
    built = _build(net, chosen, top, depth, what=what)
    netlist = built.netlist
    stimulus = _stimulus(net, inputs, vectors, seed, what=what)
    n = int(stimulus.shape[0])
    mapped = None
    if table_kind.value == "mapped":
        mapped = map_modules(netlist.modules, k=k, executor=executor, cache_dir=cache_dir, what=what)
    expected = _codes_at(net, stimulus, netlist.output_node).numpy()
    in_node, out_node = net.graph[netlist.input_node], net.graph[netlist.output_node]
    files = built.sources(lang, dont_cares=mode, header=_header(net, top, built, depth), mapped=mapped)
    sources = tuple(files)
    in_widths, out_widths = netlist.width[netlist.input_ids], netlist.width[netlist.output_ids]
    origins = [netlist.describe(int(e)) for e in netlist.output_ids]
    bench = bench_files(
        top, lang, built.words(stimulus.numpy(), in_node), in_widths, out_widths, origins,
        expected=built.words(expected, out_node), vectors=n, beats=built.out_beats, interval=built.interval,
    )  # fmt: skip
    files.update(bench)
    benches = []
    if table_benches:
        for module in netlist.modules.values():
            if module.layout.rows and module.layout.address_bits + module.layout.code_bits <= 64:
                files.update(table_bench(module.table, module.name, language=lang))
                benches.append(f"{module.name}_tb")
    layers, delays = _resources(net, netlist)
    layers = layer_luts(layers, netlist, mapped) if mapped is not None else layers
    design = Design(
        top=top,
        language=lang,
        style=chosen.value,
        pipeline=depth,
        directory=target,
        sources=sources,
        bench=tuple(bench),
        table_benches=tuple(benches),
        inputs=_port("in_data", netlist, netlist.input_ids, in_node, built.in_beats),
        outputs=_port("out_data", netlist, netlist.output_ids, out_node, built.out_beats),
        latency=netlist.latency,
        layers=layers,
        delay_registers=delays,
        output_node=netlist.output_node,
        host=tuple(built.hosts),
        vectors=n,
        network=net,
        interval=built.interval,
        line_buffers=built.line_buffers,
        tables=table_kind.value,
    )
    files[f"{top}_design.json"] = _description_json(design)
    target.mkdir(parents=True, exist_ok=True)
    write_files(files, target)
    return design


def _description_json(design: Design) -> str:
    record = {k: v for k, v in asdict(design).items() if k != "network"}
    record["directory"] = None  # where it lies is the reader's business
    record["files"] = list(design.files)
    return json.dumps(record, indent=2, default=str) + "\n"


def _read(design: Design, names: tuple[str, ...], *, what: str) -> dict[str, str]:
    files = {}
    for name in names:
        path = design.directory / name
        try:
            files[name] = path.read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"{what}: cannot read {str(path)!r} ({exc.strerror or exc}); export the design again"
            raise HDLError(msg) from None
    return files


def simulate(
    design: Design, x: Any, *, simulator: str = "iverilog", codes: bool = False, timeout: float = 600.0
) -> torch.Tensor:
    """Run a design on a batch in a simulator and return the codes it outputs, shaped ``(N, *outputs.shape)``.

    The design's sources (read from its directory) run under a bench that feeds ``x`` through the
    handshake and prints every output word; elements the hardware drives as unknown (``x``: a don't-care row)
    come back as ``-1``. Compare with :meth:`Design.reference` (``net.run``'s codes) or the model.

    Args:
        design: what :func:`export` returned.
        x: a batch of the input domain's values (``codes=True``: of input codes), shaped as ``net.run`` takes it.
        simulator: ``"iverilog"`` or ``"verilator"`` for Verilog, ``"ghdl"`` for VHDL.
        codes: ``x`` holds codes.
        timeout: seconds for compiling and running.

    Raises:
        HDLError: the simulator does not read the design's language; SimulatorNotInstalledError: it is not
            installed (the message names the Debian package); HDLToolError: it failed.
    """
    what = "simulate"
    if not isinstance(design, Design):
        msg = f"{what}: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    sim = Simulator.parse(simulator, what=what)
    if sim.language != design.language:
        accepted = "'ghdl'" if design.language == "vhdl" else "'iverilog' or 'verilator'"
        msg = f"{what}: simulator {sim.value!r} does not read {design.language.upper()}; use {accepted}"
        raise HDLError(msg)
    encoded = design.network.encode_input(x, codes=codes, what=what)
    n = int(encoded.shape[0])
    if n == 0:
        return torch.zeros((0, *design.outputs.shape), dtype=torch.int64)
    in_widths = np.asarray(design.inputs.widths, dtype=np.int64)
    out_widths = np.asarray(design.outputs.widths, dtype=np.int64)
    graph = design.network.graph
    streaming = design.style == Style.STREAMING.value
    words = beats_of(encoded.numpy(), graph[design.inputs.node]) if streaming else encoded.reshape(n, -1).numpy()
    files = _read(design, design.sources, what=what)
    printing = bench_files(
        design.top, design.language, words, in_widths, out_widths, [], expected=None, vectors=n,
        beats=design.outputs.beats, interval=design.interval,
    )  # fmt: skip
    files.update(printing)
    result = simulate_files(files, f"{design.top}_tb", simulator=sim.value, timeout=timeout)
    digits = -(-design.outputs.width // 4)
    lines = [
        line for line in result.stdout.splitlines() if re.fullmatch(rf"[0-9a-fA-FxXzZuU-]{{{digits}}}", line.strip())
    ]
    count = n * design.outputs.beats
    if not result.passed or len(lines) != count:
        msg = (
            f"{what}: {sim.value} ran {design.top} but printed {len(lines)} of {count} output words (exit status "
            f"{result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}"
        )
        raise HDLToolError(msg)
    values, unknown = parse_words("\n".join(lines), out_widths, what=what)
    values[unknown] = -1
    if streaming:
        return torch.as_tensor(from_beats(values, graph[design.outputs.node], n))
    return torch.as_tensor(values).reshape(n, *design.outputs.shape)


def check(design: Design, *, timeout: float = 600.0) -> CheckResult:
    """Synthesize a design's sources and raise unless they are clean (:func:`check_files`): for Verilog, yosys
    ``synth`` and ``check -assert`` (nothing undriven, no multiple drivers, no combinational loop) and no
    latch; for VHDL, ghdl's synthesis.

    Raises:
        SimulatorNotInstalledError: yosys (or ghdl) is not installed; HDLToolError: the check failed.
    """
    if not isinstance(design, Design):
        msg = f"check: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    return check_files(_read(design, design.sources, what="check"), design.top, timeout=timeout)
