"""A whole table network as Verilog or VHDL: :func:`export`, :func:`simulate` and :func:`check`.

:func:`export` walks the network's graph with the style's :class:`~iotable.hdl.builder.Builder` (a
:class:`~iotable.graph.GraphInterpreter`; each node built by its kind) into the hardware IR
(:mod:`iotable.hdl.netlist`), prints it, writes the design, its self-checking testbench with vectors from
``net.run`` and an exhaustive bench per distinct table, and returns a :class:`Design`: the files, the top
module's ports and their bit packing, the latency, and each layer's resources. docs/hardware.md is the
I/O contract.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._util.executor import run_all, submitter
from ..errors import HDLError, HDLToolError, IOTableError, OptionError
from ..graph.graph import Graph
from ..graph.liveness import check_keep_dead
from ..lutcount import lut_estimate
from ..network.network import TableNetwork
from ..synth.records import LayerCost
from .build import build_netlist
from .builder import hardware_nodes
from .design import Design, Port, codes_at
from .directory import read_verified, target_directory, write_design
from .fit import min_luts, table_bodies
from .inline import INLINE_BITS, check_inline_bits
from .language import Language
from .mapped import check_mapped_options, check_pipeline_luts, layer_luts, map_modules, table_latency
from .names import check_name
from .netbench import parse_words
from .netlist import Layer, Netlist, Style
from .primitives import cell_models, check_primitives, models_file
from .sources import bench_files, design_files, header_lines, table_bench
from .streaming import beats_of, from_beats
from .table import DontCares
from .tools import CheckResult, Simulator, check_files, simulate_files
from .verilator import table_model, verilator_model
from .verilog_simtables import simulation_sources

__all__ = ["UNROLL_LIMIT", "check", "design_latency", "export", "simulate"]

#: More instances than this make an unrolled design refuse (an image too large to unroll).
UNROLL_LIMIT = 200_000


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
        codes = net.encode_input(inputs, what=what)
        if codes.shape[0] == 0:
            msg = (
                f"{what}: inputs holds no vector (a batch of shape {tuple(codes.shape)}); the network bench needs at "
                "least one: pass a non-empty batch, or leave inputs out for random vectors"
            )
            raise OptionError(msg)
        return codes
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


def unrolled_instances(graph: Graph) -> int:
    """The table instances the unrolled style builds for ``graph``'s hardware part, counted from the graph
    alone: each table node's units times its positions (those of the window it reads, else one)."""
    hardware, _, _ = hardware_nodes(graph)
    count = 0
    for node in hardware:
        if node.kind.tabulated:
            producers = graph.producers(node.name)
            behind_window = bool(producers) and producers[0].kind.windowed
            count += len(node.meta.units) * (math.prod(node.spatial_size) if behind_window else 1)
    return count


def _unroll_limit(instances: int, *, what: str) -> None:
    if instances > UNROLL_LIMIT:
        msg = (
            f"{what}: style 'unrolled' needs {instances} table instances (more than {UNROLL_LIMIT}); export with "
            "style='streaming' (one instance of each unit, pixels in raster order), or a network with fewer "
            "positions per layer (smaller images, larger strides) or fewer units"
        )
        raise HDLError(msg)


def _build(
    net: TableNetwork,
    style: Style,
    top: str,
    pipeline: int,
    *,
    what: str,
    keep_dead: bool = False,
    table_latency: dict[str, int] | None = None,
) -> Netlist:
    """The netlist of ``net``'s hardware part in ``style``; refuses what the style cannot build, an unrolled
    design over :data:`UNROLL_LIMIT` instances before building it."""
    try:
        instances = unrolled_instances(net.graph) if style is Style.UNROLLED else 0
    except IOTableError as exc:
        raise HDLError(f"{what}: {exc}") from None
    _unroll_limit(instances, what=what)
    try:
        netlist = build_netlist(
            net.graph, net.layers, style, top=top, pipeline=pipeline, keep_dead=keep_dead, table_latency=table_latency
        )
    except IOTableError as exc:
        raise HDLError(f"{what}: {exc}") from None
    if not netlist.streaming:  # a node kind of its own may instantiate tables the count above cannot see
        _unroll_limit(sum(len(b.instances) for b in netlist.blocks if isinstance(b, Layer)), what=what)
    return netlist


def _staged(
    net: TableNetwork, netlist: Netlist, build: tuple[Style, str, int], mapping: dict[str, Any] | None, every: int,
    keep_dead: bool, *, what: str,
) -> tuple[Netlist, dict[str, Any] | None, dict[str, int]]:  # fmt: skip
    """With ``mapping`` (``tables="mapped"``: ``k``, ``executor``, ``cache_dir``), every table module mapped and,
    with ``every`` (``pipeline_luts``), the registers inside each; the netlist then built again with each layer
    as many stages later as its tables' registers. The netlist, the mapped modules and the registers by module."""
    if mapping is None:
        return netlist, None, {}
    mapped = map_modules(netlist.modules, **mapping, what=what)
    latency = table_latency(netlist, mapped, every, what=what) if every else {}
    if any(latency.values()):  # the same walk again, each layer as many stages later as its tables' registers
        style, top, depth = build
        netlist = _build(net, style, top, depth, what=what, keep_dead=keep_dead, table_latency=latency)
    return netlist, mapped, latency


def design_latency(
    net: TableNetwork,
    *,
    pipeline: int | str | None = 1,
    pipeline_luts: int | None = 0,
    k: int = 6,
    executor: Any = None,
    cache_dir: str | Path | None = None,
    keep_dead: bool = False,
) -> int:
    """The latency :func:`export` gives the unrolled design of ``net`` with these options, without writing a
    file: the registers after every ``pipeline``-th table layer and, with ``pipeline_luts``, those inside
    each table (its tables then mapped as ``export(tables="mapped", k=k)`` maps them, through ``cache_dir``).
    Example: ``design_latency(net, pipeline=1, pipeline_luts=1, k=4)`` is 4 for two layers of two LUT levels."""
    what = "design_latency"
    if not isinstance(net, TableNetwork):
        msg = f"{what}: expected a TableNetwork (iotable.precompute or iotable.load), received {type(net).__name__}"
        raise HDLError(msg)
    depth = _pipeline(pipeline, what=what)
    table_kind = check_mapped_options("mapped" if pipeline_luts else "case", k, "x", what=what)
    every = check_pipeline_luts(pipeline_luts, tables=table_kind, style=Style.UNROLLED.value, what=what)
    keep_dead = check_keep_dead(keep_dead, what=what)
    netlist = _build(net, Style.UNROLLED, "iotable_net", depth, what=what, keep_dead=keep_dead)
    mapping = {"k": k, "executor": executor, "cache_dir": cache_dir} if every else None
    netlist, _, _ = _staged(net, netlist, (Style.UNROLLED, "iotable_net", depth), mapping, every, keep_dead, what=what)
    return int(netlist.latency)


def _words(netlist: Netlist, codes: np.ndarray, node: Any) -> np.ndarray:
    """A batch of ``node``'s codes as the words its port carries, one a row."""
    return beats_of(codes, node) if netlist.streaming else codes.reshape(codes.shape[0], -1)


def _resources(netlist: Netlist) -> tuple[tuple[LayerCost, ...], int]:
    """Each layer module's :class:`~iotable.synth.LayerCost`, and the bits of the delay registers."""
    seen: set[str] = set()
    layers = []
    for block in netlist.blocks:
        if not isinstance(block, Layer):
            continue
        modules = [m for m in dict.fromkeys(m for _, m, _ in block.instances) if m not in seen]
        seen.update(modules)
        # each unit's table (the module its instances share), for the layer's own counts
        unit_modules = dict(zip((unit for unit, _ in block.instance_units), (m for _, m, _ in block.instances)))
        units = [netlist.modules[m].layout for m in unit_modules.values()]
        layers.append(
            LayerCost(
                name=block.layer,
                tables=len(unit_modules),
                dead=block.units - len(unit_modules),
                luts=None,
                estimate=int(sum(lut_estimate(u.address_bits, u.code_bits) for u in units)),
                input_bits=tuple(sorted({u.address_bits for u in units})),
                registers=block.register_bits,
                rows=sum(u.rows for u in units),
                output_bits=max((u.code_bits for u in units), default=0),
                node=block.node,
                module=block.name,
                instances=len(block.instances),
                distinct=len(modules),
                table_bits=sum(netlist.modules[m].layout.rows * netlist.modules[m].layout.code_bits for m in modules),
            )
        )
    layer_registers = {b.register for b in netlist.blocks if isinstance(b, Layer) and b.register is not None}
    delays = sum(s.width for k, s in enumerate(netlist.signals) if s.source is not None and k not in layer_registers)
    return tuple(layers), delays


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
    table_benches: bool = False,
    tables: str = "case",
    k: int = 6,
    primitives: str | None = None,
    executor: Any = None,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    keep_dead: bool = False,
    backpressure: int | None = None,
    pipeline_luts: int | None = 0,
    inline_bits: int = INLINE_BITS,
) -> Design:
    """Write a table network as a Verilog or VHDL design with its testbenches; return its description.

    The design computes the network up to its first host node (host nodes stay in software; the
    description says which) with one table module per distinct table (tables of at most ``inline_bits``
    address bits written inline in their layer module instead), a layer module per table node, and registers
    after every ``pipeline``-th table layer. Its top module streams vectors through a valid/ready
    handshake (docs/hardware.md: ports, bit packing, latency, reset). The network bench feeds ``inputs`` (or
    ``vectors`` random input vectors) and checks every output against ``net.run``; with ``table_benches``,
    each distinct table module gets an exhaustive bench too. Everything is checked before the first file is written.

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
        table_benches: also write an exhaustive bench (and its vectors) for every table module, two files per
            distinct table (by default only the network bench is written); the tables written inline have none.
        tables: ``"case"``: each table module a ``case`` over its rows; ``"mapped"``: each distinct table
            mapped onto ``k``-input LUTs by :func:`iotable.synth.map_luts` (needs ABC; every netlist checked
            on every row) and written as that LUT netlist, same ports (needs ``dont_cares="x"``).
        k: LUT inputs, with ``tables="mapped"``.
        primitives: with ``tables="mapped"`` and Verilog, write each LUT as a device cell that synthesis keeps
            as it is (:mod:`iotable.hdl.primitives`): ``"ecp5"`` (``LUT4``, ``k`` at most 4), ``"ice40"``
            (``SB_LUT4``, ``k`` at most 4) or ``"xilinx"`` (``LUT1`` to ``LUT6``); ``None``: generic LUTs
            (an INIT mask selected by the inputs), which synthesis maps again. The bench files then include
            ``<top>_primitives.v``, the cells' simulation models.
        executor: where ``map_luts`` maps (``None``: a local process pool), with ``tables="mapped"``.
        cache_dir: ``map_luts``' JSON cache folder, with ``tables="mapped"``.
        overwrite: replace the design an earlier export wrote into ``directory`` (a non-empty directory is
            refused without it; with it, one that holds anything but an earlier design and its files, as its
            ``<top>_design.json`` lists them, is refused too: nothing else is ever deleted).
        keep_dead: instantiate the units whose outputs reach no network output too (by default they are left
            out, their outputs constant 0, and each layer's ``dead`` in ``Design.layers`` counts them).
        backpressure: a seed: the network bench drives ``in_valid`` and ``out_ready`` at random every cycle
            and checks that an output not taken stays unchanged (default: fixed stalls).
        pipeline_luts: with ``tables="mapped"`` (unrolled style), a register after every ``pipeline_luts`` LUT
            levels inside each table: its LUT netlist cut by depth into stages, every signal that crosses a
            stage boundary registered (inputs that skip a stage too); every table of a layer gets as many
            registers as its deepest one needs (the others padded at their outputs), and the design's latency
            counts them (docs/hardware.md, "Pipelined tables"). 0 or ``None``: tables stay combinational.
        inline_bits: with ``tables="case"``, a table of at most this many address bits (0 to 8) is no module
            of its own but an expression in its layer module (:mod:`iotable.hdl.inline`: in Verilog a
            multiplexer tree per output bit, in VHDL a constant array indexed by the address), the same
            function, don't-care rows included; a design of many tiny tables (DiffLogic's gates, DWN's LUT-6
            nodes) then simulates several times faster and is a few files. 0: every table its own module.

    The directory is one unit: every file is written into a hidden staging directory beside it, which is
    then renamed into place, so that it holds the old design or the whole new one, never a mix; its
    ``<top>_design.json`` lists every file's sha256, which :func:`simulate` and :func:`check` verify.

    Returns:
        The :class:`Design`.

    Raises:
        HDLError: a graph or option the generator cannot build (the message names the node and the fix); a
            directory that cannot hold the design (empty path, a file, a bundle or inside one, not empty
            without ``overwrite``, not an earlier design with it, a dangling or looping link, a disk error: the
            message names the path).
        OptionError: an unknown language, style, pipeline, dont_cares or tables; an empty ``inputs`` batch;
            ``inline_bits`` not 0 to 8;
            ``pipeline_luts`` not a count, or without ``tables="mapped"`` and the unrolled style.

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
    lang = Language.parse(language, what=what)
    chosen = Style.parse(style, what=what)
    depth = _pipeline(pipeline, what=what)
    top = check_name(top, language=lang, what=what)
    mode = DontCares.parse(dont_cares, what=what)
    table_kind = check_mapped_options(tables, k, mode.value, what=what)
    cells = check_primitives(primitives, tables=table_kind.value, k=k, language=lang.value, what=what)
    every = check_pipeline_luts(pipeline_luts, tables=table_kind, style=chosen.value, what=what)
    inline_bits = check_inline_bits(inline_bits, tables=table_kind.value, what=what)
    if not isinstance(overwrite, bool):
        msg = f"{what}: overwrite must be True or False, received {overwrite!r}"
        raise OptionError(msg)
    if backpressure is not None and (isinstance(backpressure, bool) or not isinstance(backpressure, int)):
        msg = f"{what}: backpressure must be a seed (an int) or None, received {backpressure!r}"
        raise OptionError(msg)
    target = target_directory(directory, overwrite=overwrite, what=what)
    keep_dead = check_keep_dead(keep_dead, what=what)
    netlist = _build(net, chosen, top, depth, what=what, keep_dead=keep_dead)
    stimulus = _stimulus(net, inputs, vectors, seed, what=what)
    n = int(stimulus.shape[0])
    mapping = {"k": k, "executor": executor, "cache_dir": cache_dir} if table_kind.value == "mapped" else None
    netlist, mapped, latency = _staged(net, netlist, (chosen, top, depth), mapping, every, keep_dead, what=what)
    expected = codes_at(net, stimulus, netlist.output_node).numpy()
    in_node, out_node = net.graph[netlist.input_node], net.graph[netlist.output_node]
    header = header_lines(netlist, depth, pipeline_luts=every)
    bodies = table_bodies(netlist, mapped, (every, latency))
    files = design_files(
        netlist,
        lang,
        dont_cares=mode,
        header=header,
        mapped=mapped,
        primitives=cells,
        stages=(every, latency),
        inline_bits=inline_bits,
        bodies=bodies,
    )
    sources = tuple(files)
    in_widths, out_widths = netlist.width[netlist.input_ids], netlist.width[netlist.output_ids]
    origins = [netlist.describe(int(e)) for e in netlist.output_ids]
    bench = bench_files(
        top, lang, _words(netlist, stimulus.numpy(), in_node), in_widths, out_widths, origins,
        expected=_words(netlist, expected, out_node), vectors=n, beats=netlist.out_beats, interval=netlist.interval,
        backpressure=backpressure,
    )  # fmt: skip
    if cells is not None:
        bench[models_file(top)] = cell_models(cells)
    files.update(bench)
    benches = []
    if table_benches:
        for module in netlist.modules.values():
            if module.layout.rows and module.layout.address_bits > inline_bits:
                files.update(table_bench(module.table, module.name, language=lang, latency=latency.get(module.name, 0)))
                benches.append(f"{module.name}_tb")
    layers, delays = _resources(netlist)
    layers = layer_luts(layers, netlist, mapped) if mapped is not None else layers
    design = Design(
        top=top,
        language=lang.value,
        style=chosen.value,
        pipeline=depth,
        directory=target,
        sources=sources,
        bench=tuple(bench),
        table_benches=tuple(benches),
        inputs=_port("in_data", netlist, netlist.input_ids, in_node, netlist.in_beats),
        outputs=_port("out_data", netlist, netlist.output_ids, out_node, netlist.out_beats),
        latency=netlist.latency,
        layers=layers,
        delay_registers=delays,
        output_node=netlist.output_node,
        host=tuple(netlist.hosts),
        vectors=n,
        network=net,
        interval=netlist.interval,
        line_buffers=netlist.line_buffers,
        tables=table_kind.value,
        keep_dead=keep_dead,
        primitives=None if cells is None else cells.value,
        pipeline_luts=every,
        inline_bits=inline_bits,
        min_luts=min_luts(netlist, bodies) if cells is not None else None,
    )
    description = f"{top}_design.json"
    checksums = write_design(target, files, description, lambda sums: _description_json(design, sums), what=what)
    return replace(design, checksums=tuple((name, checksums[name]) for name in design.files))


def _description_json(design: Design, checksums: dict[str, str]) -> str:
    """The design's description as JSON: every field but the network (whose tables are not copied), the
    files, and the sha256 of every file but this one."""
    record: dict[str, Any] = {}
    for item in fields(design):
        if item.name in ("network", "checksums"):
            continue
        value = getattr(design, item.name)
        if isinstance(value, Port):
            value = asdict(value)
        elif item.name == "layers":
            value = [asdict(layer) for layer in value]
        record[item.name] = value
    record["directory"] = None  # where it lies is the reader's business
    record["files"] = list(design.files)
    record["sha256"] = dict(checksums)
    return json.dumps(record, indent=2, default=str) + "\n"


def _read(design: Design, names: tuple[str, ...], *, what: str) -> dict[str, str]:
    """The texts of ``names`` once the design's directory is verified against its manifest."""
    return read_verified(Path(design.directory), dict(design.checksums), names, what=what)


def _models(design: Design) -> tuple[str, ...]:
    """The simulation models a design with primitive tables carries (none otherwise)."""
    return (models_file(design.top),) if design.primitives is not None else ()


def simulate(
    design: Design,
    x: Any,
    *,
    simulator: str = "iverilog",
    codes: bool = False,
    timeout: float = 600.0,
    tables: str = "memory",
    cache_dir: str | Path | None = None,
    executor: Any = None,
) -> torch.Tensor:
    """Run a design on a batch in a simulator and return the codes it outputs, shaped ``(N, *outputs.shape)``.

    The design's sources (read from its directory, verified against its manifest) run on ``x``: under
    iverilog and ghdl, a bench feeds ``x`` through the handshake and prints every output word; elements the
    hardware drives as unknown (``x``: a don't-care row) come back as ``-1``. Verilator builds the design once
    into a program cached in ``cache_dir`` (:func:`~iotable.hdl.verilator.verilator_model`) that runs the
    whole batch; it is 2-state: a don't-care row comes back as code 0, every run the same. Compare with
    :meth:`Design.reference` (``net.run``'s codes) where ``net.run`` defines the output.

    Args:
        design: what :func:`export` returned.
        x: a batch of the input domain's values (``codes=True``: of input codes), shaped as ``net.run`` takes it.
        simulator: ``"iverilog"`` or ``"verilator"`` for Verilog, ``"ghdl"`` for VHDL.
        codes: ``x`` holds codes.
        timeout: seconds for compiling and running.
        tables: ``"memory"``: each ``case`` table module simulated as a memory read from a hex file, the same
            function (:mod:`iotable.hdl.verilog_simtables`: a lookup per cycle instead of a walk over the
            rows; Verilog only, ghdl runs the sources); ``"sources"``: the table files as written.
        cache_dir: where Verilator's programs are kept (default ``~/.cache/iotable/verilator``).
        executor: where the batch runs: ``None`` (here), a ``concurrent.futures.Executor`` or a
            ``dask.distributed.Client``. The batch is cut into shards of consecutive samples (each at least
            :data:`SHARD_VECTORS`, at most :data:`MAX_SHARDS` of them), each a simulation on a worker (under
            Verilator, each worker builds the design once into its cache and runs every shard it gets on that
            build); the codes are the same as a run here. The workers read the design's directory: it must be
            at the same path on every worker (shared storage).

    Raises:
        HDLError: the simulator does not read the design's language; SimulatorNotInstalledError: it is not
            installed (the message names the Debian package); HDLToolError: it failed.
    """
    what = "simulate"
    if not isinstance(design, Design):
        msg = f"{what}: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    sim = Simulator.parse(simulator, what=what)
    lang = Language.parse(design.language, what=what)
    if sim.language is not lang:
        accepted = " or ".join(repr(s.value) for s in Simulator if s.language is lang)
        msg = f"{what}: simulator {sim.value!r} does not read {lang.name}; use {accepted}"
        raise HDLError(msg)
    model = table_model(tables, what=what)
    pool = submitter(executor, what=what, error=HDLError)
    encoded = design.network.encode_input(x, codes=codes, what=what)
    n = int(encoded.shape[0])
    if n == 0:
        return torch.zeros((0, *design.outputs.shape), dtype=torch.int64)
    if pool is not None:
        folder = None if cache_dir is None else str(cache_dir)
        count = max(1, min(MAX_SHARDS, n // SHARD_VECTORS))
        parts = [torch.as_tensor(part) for part in np.array_split(encoded.numpy(), count)]
        tasks = [(design, part, sim.value, model, folder, timeout) for part in parts]
        found = run_all(pool, _shard, tasks, what=what, error=HDLToolError)
        return torch.cat(found)
    if sim is Simulator.VERILATOR:
        start = time.monotonic()
        built = verilator_model(design, tables=model, cache_dir=cache_dir, timeout=timeout)
        return built(encoded, codes=True, timeout=max(timeout - (time.monotonic() - start), 1.0))
    in_widths = np.asarray(design.inputs.widths, dtype=np.int64)
    out_widths = np.asarray(design.outputs.widths, dtype=np.int64)
    graph = design.network.graph
    streaming = design.style == Style.STREAMING.value
    words = beats_of(encoded.numpy(), graph[design.inputs.node]) if streaming else encoded.reshape(n, -1).numpy()
    files = _read(design, design.sources + _models(design), what=what)
    if model == "memory" and lang is Language.VERILOG:
        files = simulation_sources(design, files, two_state=False)
    printing = bench_files(
        design.top, lang, words, in_widths, out_widths, [], expected=None, vectors=n,
        beats=design.outputs.beats, interval=design.interval,
    )  # fmt: skip
    files.update(printing)
    result = simulate_files(files, f"{design.top}_tb", simulator=sim.value, timeout=timeout)
    digits = -(-design.outputs.width // 4)
    lines = [
        line for line in result.words.splitlines() if re.fullmatch(rf"[0-9a-fA-FxXzZuU-]{{{digits}}}", line.strip())
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


#: The fewest samples one shard of :func:`simulate` on an executor holds, and the most shards of one batch.
SHARD_VECTORS = 64
MAX_SHARDS = 64


def _shard(
    design: Design, codes: torch.Tensor, simulator: str, tables: str, cache_dir: str | None, timeout: float
) -> Any:
    """A task: :func:`simulate` of one shard of input codes, here (on the worker that runs it)."""
    return simulate(design, codes, simulator=simulator, codes=True, timeout=timeout, tables=tables, cache_dir=cache_dir)


def check(design: Design, *, timeout: float = 600.0, executor: Any = None) -> CheckResult:
    """Synthesize a design's sources and raise unless they are clean (:func:`check_files`): for Verilog, yosys
    ``check -assert`` (nothing undriven, no multiple drivers, no combinational loop) and no latch; for VHDL,
    ghdl's synthesis. Each distinct table module is checked once, on its own (elaborated, then as generic
    gates: no ABC), and the rest (the tables written inline among it) with the table modules as black boxes
    through yosys's generic ``synth``; ``cells`` counts the whole design (each table module's gates times its
    instances, and the rest's cells). ``executor``: where the table modules are checked, a few a task (see
    :func:`check_files`); the result is the same as a check here.

    Raises:
        SimulatorNotInstalledError: yosys (or ghdl) is not installed; HDLToolError: the check failed.
    """
    if not isinstance(design, Design):
        msg = f"check: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    files = _read(design, design.sources, what="check")
    top_file = f"{design.top}{Language(design.language).suffixes[0]}"
    # each table module once, on its own; the wiring with the tables as black boxes
    tables = [n for n in design.sources if n != top_file] if design.language == Language.VERILOG.value else []
    return check_files(files, design.top, timeout=timeout, separate=tables, executor=executor)
