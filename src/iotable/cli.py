"""The ``iotable`` command line: inspect, check, draw and export bundles written by :func:`iotable.save`.

- ``iotable precompute MODEL.onnx -o BUNDLE`` reads a QONNX model (brevitas' ``export_qonnx``), builds its
  table network exactly by QONNX's rules and saves it as a bundle (needs the extra ``iotable[onnx]``);
- ``iotable info BUNDLE`` prints the network's summary (or the layer's unit table);
- ``iotable check BUNDLE`` re-verifies the manifest's checksum, every field and file, the graph's invariants
  and the golden vectors;
- ``iotable dot BUNDLE [-o FILE]`` writes the interlayer graph as Graphviz DOT (or SVG, for ``FILE.svg``);
- ``iotable pla BUNDLE DIRECTORY`` writes every table as a PLA file for logic minimisers;
- ``iotable export verilog|vhdl BUNDLE DIRECTORY`` writes the network as a hardware design with its testbenches
  (``--style streaming``: pixels in raster order through line buffers; ``--tables mapped``: each table as its
  LUT netlist); ``iotable export onnx BUNDLE -o FILE.onnx`` writes it as plain ONNX (``iotable.export_onnx``);
- ``iotable cost BUNDLE`` maps every table onto LUTs with ABC and prints the LUT report (``--save`` keeps the
  results in the bundle);
- ``iotable implement BUNDLE TARGET`` synthesizes the network for an FPGA (``ice40-hx8k``, ``ecp5-85k``,
  ``xilinx``) and, for iCE40 and ECP5, places and routes it: LUTs, flip-flops, Fmax after routing;
- ``iotable sweep BUNDLE... --target T --pipeline K --seed S`` sweeps bundles over implementation options,
  places and routes only what may be on the Pareto front and prints the table (``--plot FILE.png``: the plot;
  :mod:`iotable.sweep.command`).

Each exits with status 1 and the reason on stderr when something is wrong (a bad path, a damaged bundle, a
missing optional dependency), 2 on a usage error (a bad option value among them) and 130 when interrupted
(Ctrl-C); none prints a traceback. A network bundle whose host modules are stored as weights only (they are not
code) exports its table part, as ``iotable.hdl.export`` does from a live network. ``python -m iotable`` is the same
command. Each command is one ``_NAME(args)`` function and one ``_add_NAME(commands)`` that declares its
arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from ._util.files import atomic_write
from .bundle.bundle import open_bundle, save
from .bundle.hosts import unavailable_hosts
from .bundle.manifest import CHECKSUMMED
from .errors import CommandError, IOTableError
from .network.network import TableNetwork
from .network.precompute import precompute
from .onnxout import DEFAULT_OPSET
from .pla import export_pla
from .sweep.command import add_sweep

__all__ = ["main"]

_DESCRIPTION = """\
Inspect, check, draw and export iotable bundles: the directories iotable.save() writes (manifest.json plus
.npy tables). See docs/bundle.md for the format."""


def _path(text: str, option: str, what: str) -> Path:
    """An output path as given on the command line, refused when no file can have it (checked before any work)."""
    if not text:
        msg = f"{option}: the path is empty; give {what}"
        raise CommandError(msg)
    if "\0" in text:
        msg = f"{option} {text!r}: holds a NUL character, which no file name can; give {what}"
        raise CommandError(msg)
    return Path(text)


def _directory(text: str, option: str, what: str) -> Path:
    """An output directory: a usable path that is a directory or does not exist yet."""
    target = _path(text, option, f"a directory for {what}")
    if target.exists() and not target.is_dir():
        msg = f"{option} {text}: exists and is not a directory; give a directory for {what}"
        raise CommandError(msg)
    return target


def _positive(option: str) -> Callable[[str], int]:
    """An argparse type: a positive integer, refused with the words the library uses for ``option``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            msg = f"{option} must be a positive integer, received {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _network(path: str, command: str) -> TableNetwork:
    """The network a bundle holds, or an error naming the layer it holds instead."""
    obj, _ = open_bundle(path)
    if not isinstance(obj, TableNetwork):
        msg = (
            f"{path} holds one layer ({obj.name!r}), which has no interlayer graph; iotable {command} needs a network "
            "bundle, saved from precompute() on a whole model"
        )
        raise CommandError(msg)
    return obj


# -- info ---------------------------------------------------------------------------------------------------------


def _add_info(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser(
        "info",
        help="print a bundle's summary",
        description="Print a bundle's summary: for a network, every graph node with its shape, units, fan-in, "
        "bits, rows, line buffer and stride, then the table and row counts and the host nodes; for one layer, "
        "its unit table.",
    )
    info.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    info.set_defaults(run=_info)


def _info(args: argparse.Namespace) -> int:
    obj, manifest = open_bundle(args.bundle)
    kind = "network" if isinstance(obj, TableNetwork) else f"layer {obj.name!r}"
    print(
        f"{args.bundle}: iotable bundle (format version {manifest['format_version']}, written by iotable "
        f"{manifest.get('library_version', '?')}), one {kind}"
    )
    print(obj.summary())
    return 0


# -- check --------------------------------------------------------------------------------------------------------


def _add_check(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check",
        help="verify a bundle's checksums, fields, graph and golden vectors",
        description="Verify a bundle: the manifest's sha256 (manifest.sha256), every field of the manifest, every "
        "path inside the bundle with no symlink, every .npy header, size and sha256, the tables against their "
        "plans, the graph against Graph.check() and the tables, and that the network reproduces the golden "
        "vectors stored when it was saved. Prints one OK line and exits 0, or prints the problem on stderr and "
        "exits 1 (also for a bundle of a format version older than 3, which has no manifest checksum).",
    )
    check.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    check.set_defaults(run=_check)


def _check(args: argparse.Namespace) -> int:
    obj, manifest = open_bundle(args.bundle)
    version = manifest["format_version"]
    if version < CHECKSUMMED:
        msg = (
            f"{args.bundle}: format_version {version} has no manifest checksum or golden vectors, so its manifest "
            "cannot be checked; it loads, and saving it again upgrades it: iotable.save(iotable.load(path), path)"
        )
        raise CommandError(msg)
    files, tables = len(manifest["files"]), len(obj.tables)
    checks = "plans and tables agree"
    if isinstance(obj, TableNetwork):
        samples = manifest["files"][manifest["golden"]["inputs"]]["shape"][0]
        checks = f"plans, tables and graph agree; the graph passes its checks; {samples} golden sample(s) reproduce"
    counts = f"{files} array file(s) match their checksums; {tables} table(s)"
    print(f"OK: {args.bundle}: manifest checksum matches; {counts}; {checks}")
    return 0


# -- dot ----------------------------------------------------------------------------------------------------------


def _add_dot(commands: argparse._SubParsersAction) -> None:
    dot = commands.add_parser(
        "dot",
        help="draw a network bundle's interlayer graph (Graphviz DOT or SVG)",
        description="Write a network bundle's interlayer graph in Graphviz DOT: node shapes by kind, host nodes "
        "grey and dashed, edges labelled with the shape and bits they carry, edges into windows with the line "
        "buffer depth and stride. Without -o the DOT text goes to stdout (render it with `dot -Tsvg`). "
        "-o FILE.svg draws the picture itself, which needs the extra iotable[notebook] and Graphviz's dot program "
        "(Debian/Ubuntu: apt-get install graphviz); -o FILE.dot or FILE.gv writes the DOT text.",
    )
    dot.add_argument("bundle", metavar="BUNDLE", help="the bundle directory (of a network)")
    dot.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (.svg, .dot or .gv) instead of stdout; atomically"
    )
    dot.set_defaults(run=_dot)


def _dot(args: argparse.Namespace) -> int:
    output = _path(args.output, "-o", "a file name such as graph.svg") if args.output is not None else None
    if output is not None:  # the output path is checked before the bundle is read
        if output.suffix.lower() not in (".svg", ".dot", ".gv"):
            msg = f"-o {args.output}: cannot tell the format; name the file *.svg (a picture) or *.dot / *.gv (DOT)"
            raise CommandError(msg)
        if not output.parent.is_dir():
            msg = f"-o {args.output}: the folder {str(output.parent)!r} does not exist; create it first"
            raise CommandError(msg)
        if output.is_dir():
            msg = f"-o {args.output}: is a directory; give a file name such as {str(output / 'graph.svg')!r}"
            raise CommandError(msg)
    graph = _network(args.bundle, "dot").graph
    if output is None:
        print(graph.to_dot())
        return 0
    text = graph.to_svg() if output.suffix.lower() == ".svg" else graph.to_dot()
    atomic_write(output, text.encode("utf-8"))
    print(f"wrote {output}")
    return 0


# -- precompute ---------------------------------------------------------------------------------------------------


def _add_precompute(commands: argparse._SubParsersAction) -> None:
    precompute = commands.add_parser(
        "precompute",
        help="build the table network of a QONNX model (.onnx) and save it as a bundle",
        description="Read MODEL, a QONNX file (brevitas.export.export_qonnx writes one), cut it into table layers "
        "at its quantizers, compute every table exactly by QONNX's rules and save the network as the bundle "
        "BUNDLE. The input domain is the model's first quantizer's. Needs the extra iotable[onnx]. See the QONNX "
        "section of docs/models.md.",
    )
    precompute.add_argument("model", metavar="MODEL", help="the QONNX model (.onnx file)")
    precompute.add_argument("-o", "--output", metavar="BUNDLE", required=True, help="the bundle directory to write")
    precompute.add_argument(
        "--max-rows", type=_positive("--max-rows"), default=2**24, help="the largest table allowed (default: 2**24)"
    )
    precompute.set_defaults(run=_precompute)


def _precompute(args: argparse.Namespace) -> int:
    target = _directory(args.output, "-o", "the bundle")
    model = _path(args.model, "MODEL", "the path of a QONNX model (.onnx)")
    net = precompute(model, max_rows=args.max_rows)
    save(net, target)
    print(f"wrote {target}: {net!r}")
    return 0


# -- pla ----------------------------------------------------------------------------------------------------------


def _add_pla(commands: argparse._SubParsersAction) -> None:
    pla = commands.add_parser(
        "pla",
        help="export a bundle's tables as PLA files (Espresso format)",
        description="Write every table of a bundle as a PLA file (Espresso format, type fr) in DIRECTORY, named "
        "<layer>.u<unit>.pla, for logic minimisers; rows a partial table lacks are don't-cares. DIRECTORY is "
        "created if it does not exist. See docs/partial.md.",
    )
    pla.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    pla.add_argument("directory", metavar="DIRECTORY", help="where to write the .pla files")
    pla.add_argument(
        "--dont-cares",
        choices=("auto", "explicit", "implicit"),
        default="auto",
        help="list don't-care rows with '-' outputs (explicit) or leave them out (implicit); auto: explicit for "
        "tables up to 2**16 rows (default: %(default)s)",
    )
    pla.set_defaults(run=_pla)


def _pla(args: argparse.Namespace) -> int:
    target = _directory(args.directory, "DIRECTORY", "the .pla files")
    obj, _ = open_bundle(args.bundle)
    paths = export_pla(obj, target, dont_cares=args.dont_cares)
    print(f"wrote {len(paths)} PLA file(s) to {target}")
    return 0


# -- export -------------------------------------------------------------------------------------------------------


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write a network bundle as a Verilog or VHDL design with its testbenches",
        description="Write a network bundle as a hardware design in DIRECTORY (created if missing): one module per "
        "distinct table, a layer module per table node, a top module with a valid/ready handshake, a self-checking "
        "testbench that checks random input vectors against the network's own outputs, an exhaustive bench per "
        "table and <top>_design.json. Host nodes stay in software. See docs/hardware.md. "
        "'iotable export onnx BUNDLE -o FILE.onnx' writes the network as plain ONNX instead (docs/graph.md).",
    )
    export.add_argument("language", choices=("verilog", "vhdl", "onnx"), help="the language to write")
    export.add_argument("bundle", metavar="BUNDLE", help="the bundle directory (of a network)")
    export.add_argument("directory", metavar="DIRECTORY", nargs="?", help="where to write the design (verilog, vhdl)")
    export.add_argument("-o", "--output", metavar="FILE.onnx", help="the ONNX file to write (onnx)")
    export.add_argument(
        "--opset", type=int, default=DEFAULT_OPSET, help="the ONNX opset, 13 to 21 (onnx; default: %(default)s)"
    )
    export.add_argument(
        "--codes", action="store_true", help="the ONNX model takes and returns codes instead of values (onnx)"
    )
    export.add_argument("--top", default="iotable_net", help="the top module's name (default: %(default)s)")
    export.add_argument(
        "--pipeline",
        type=int,
        default=1,
        metavar="K",
        help="a register after every K-th table layer; 0: combinational (default: %(default)s)",
    )
    export.add_argument("--vectors", type=int, default=256, help="random vectors for the testbench (default: 256)")
    export.add_argument(
        "--dont-cares",
        choices=("x", "zero"),
        default="x",
        help="what rows a partial table lacks drive: x (don't-care) or code 0 (default: %(default)s)",
    )
    export.add_argument(
        "--style",
        choices=("unrolled", "streaming"),
        default="unrolled",
        help="unrolled: every unit at every position, a vector per cycle; streaming: pixels in raster order "
        "through line buffers, every unit instantiated once (default: %(default)s)",
    )
    export.add_argument(
        "--tables",
        choices=("case", "mapped"),
        default="case",
        help="each table as a case over its rows, or mapped onto 6-input LUTs by ABC and written as that LUT "
        "netlist (needs berkeley-abc) (default: %(default)s)",
    )
    export.add_argument(
        "--inline-bits",
        type=int,
        default=6,
        help="case tables of at most this many address bits are written inline in their layer module, no file "
        "of their own (0 to 8; 0: every table its own module) (default: %(default)s)",
    )
    export.add_argument(
        "--table-benches",
        action="store_true",
        help="also write an exhaustive bench and its vectors for every table module (default: the network bench only)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the design an earlier export wrote in DIRECTORY (default: refuse a non-empty DIRECTORY)",
    )
    export.set_defaults(run=_export)


def _export(args: argparse.Namespace) -> int:
    from .hdl import export

    if args.language == "onnx":
        return _export_onnx(args)
    if args.directory is None or args.output is not None:
        msg = f"export {args.language} writes a design into DIRECTORY: give BUNDLE DIRECTORY, without -o"
        raise CommandError(msg)
    target = _directory(args.directory, "DIRECTORY", "the design")
    net = _network(args.bundle, "export")
    unloaded = unavailable_hosts(net.graph)
    design = export(
        _table_part(net, unloaded),
        target,
        language=args.language,
        top=args.top,
        pipeline=args.pipeline,
        vectors=args.vectors,
        dont_cares=args.dont_cares,
        style=args.style,
        tables=args.tables,
        overwrite=args.overwrite,
        inline_bits=args.inline_bits,
        table_benches=args.table_benches,
    )
    print(design.summary())
    if unloaded:
        print(
            f"exported the table part: the bundle stores host module(s) {', '.join(unloaded)} as weights only, and "
            "the hardware never runs them"
        )
    print(f"wrote {len(design.files)} file(s) to {target}")
    return 0


def _export_onnx(args: argparse.Namespace) -> int:
    from .onnxout import export_onnx

    if args.output is None or args.directory is not None:
        msg = "export onnx writes one file: give BUNDLE -o FILE.onnx, without DIRECTORY"
        raise CommandError(msg)
    output = _path(args.output, "-o", "a file name such as net.onnx")
    if not output.parent.is_dir():  # the output path is checked before the bundle is read
        msg = f"-o {args.output}: the folder {str(output.parent)!r} does not exist; create it first"
        raise CommandError(msg)
    path = export_onnx(_network(args.bundle, "export"), output, opset=args.opset, codes=args.codes)
    print(f"wrote {path}")
    return 0


class _Unused(nn.Module):
    """Stands in for a host module the bundle holds as weights only, while the table part is exported.

    The hardware ends before the first host node and never reads one (``Design.host`` lists them), so the
    codes the export takes from the network do not depend on what this returns: zeros of the node's shape.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((x.shape[0], *self.shape), dtype=torch.float32)


def _table_part(net: TableNetwork, unloaded: list[str]) -> TableNetwork:
    """The network with each host node in ``unloaded`` running :class:`_Unused` (the export runs the whole graph
    to take the codes of the hardware's output node)."""
    if not unloaded:
        return net
    stand_ins = [
        dataclasses.replace(node, meta=dataclasses.replace(node.meta, module=_Unused(node.shape)))
        for node in (net.graph[name] for name in unloaded)
    ]
    return dataclasses.replace(net, graph=net.graph.replace(*stand_ins))


# -- cost ---------------------------------------------------------------------------------------------------------


def _add_cost(commands: argparse._SubParsersAction) -> None:
    cost = commands.add_parser(
        "cost",
        help="map a bundle's tables onto LUTs with ABC and print what they cost",
        description="Map every distinct table of a bundle onto k-input LUTs with ABC (Debian package "
        "berkeley-abc), check every netlist on every row of its table, and print per table layer the tables, "
        "their input bits, LogicNets' estimate, ABC's LUTs, the depth and the pipeline register bits, with the "
        "totals, the ABC version and the script. Results a network bundle holds (from iotable.synth.cost or "
        "--save) are reused; --save stores the new ones in the bundle, so a rerun maps only what is missing. See "
        "docs/hardware.md, section Cost.",
    )
    cost.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    cost.add_argument("--k", type=int, default=6, help="LUT inputs (default: %(default)s)")
    cost.add_argument(
        "--workers", type=_positive("workers"), default=None, metavar="N", help="processes (default: the cores)"
    )
    cost.add_argument("--cache", metavar="DIR", default=None, help="a folder for the JSON cache of results")
    cost.add_argument("--script", default=None, help="ABC commands; {k} stands for k (default: the pinned flow)")
    cost.add_argument("--timeout", type=float, default=600.0, help="seconds ABC may run per table (default: 600)")
    cost.add_argument("--save", action="store_true", help="store the results in the (network) bundle")
    cost.set_defaults(run=_cost)


def _cost(args: argparse.Namespace) -> int:
    from .bundle.bundle import save
    from .synth import cost, map_luts

    if args.cache is not None:
        _directory(args.cache, "--cache", "the cache")
    obj, _ = open_bundle(args.bundle)
    if args.save and not isinstance(obj, TableNetwork):
        msg = f"--save: {args.bundle} holds one layer ({obj.name!r}); mapping results are stored in network bundles"
        raise CommandError(msg)
    options = {"k": args.k, "workers": args.workers, "cache_dir": args.cache, "script": args.script}
    options["timeout"] = args.timeout
    report = cost(obj, **options) if isinstance(obj, TableNetwork) else map_luts(obj, **options)
    print(report.summary())
    if args.save:
        assert report.network is not None  # a network, checked above before any mapping
        save(report.network, args.bundle)
        print(f"saved the mapping results of {report.distinct} distinct table(s) in {args.bundle}")
    return 0


# -- implement ----------------------------------------------------------------------------------------------------


def _add_implement(commands: argparse._SubParsersAction) -> None:
    implement = commands.add_parser(
        "implement",
        help="synthesize (and place and route) a network bundle for an FPGA and print what it takes",
        description="Export a network bundle as Verilog into a temporary directory, synthesize it with yosys for "
        "TARGET with tables kept in logic and, for iCE40 and ECP5, place and route it with nextpnr; print LUTs, "
        "flip-flops, carry cells, block RAM, Fmax after routing and the critical path beside LogicNets' estimate, "
        "with the tools' versions. TARGET: ice40-<device> (hx8k, up5k, ...), ecp5-<size> (25k, 85k, ...) or xilinx "
        "(synth_xilinx: synthesis only). The tools: yosys and nextpnr on PATH, else pip install 'iotable[fpga]'. "
        "See docs/hardware.md, section From estimate to device.",
    )
    implement.add_argument("bundle", metavar="BUNDLE", help="the bundle directory (of a network)")
    implement.add_argument("target", metavar="TARGET", help="ice40-<device>, ecp5-<size> or xilinx")
    implement.add_argument("--package", default=None, help="the package to place in (default: the device's usual)")
    implement.add_argument("--frequency", type=float, default=None, metavar="MHZ", help="the clock to aim for")
    implement.add_argument("--seed", type=int, default=1, help="nextpnr's placement seed (default: %(default)s)")
    implement.add_argument("--seeds", type=int, default=None, metavar="N", help="place N times: Fmax median, range")
    implement.add_argument("--placer", choices=("heap", "static", "sa"), default="heap", help="nextpnr's placer")
    implement.add_argument("--cache", metavar="DIR", default=None, help="a folder for the JSON cache of results")
    implement.add_argument("--style", choices=("unrolled", "streaming"), default="unrolled", help="the design style")
    implement.add_argument("--pipeline", type=int, default=1, metavar="K", help="a register after every K-th layer")
    implement.add_argument("--top", default="iotable_net", help="the top module's name (default: %(default)s)")
    implement.add_argument("--timeout", type=float, default=3600.0, help="seconds for the run (default: 3600)")
    implement.set_defaults(run=_implement)


def _implement(args: argparse.Namespace) -> int:
    import tempfile

    from .hdl import export
    from .hdl.implement import implement, parse_target

    parse_target(args.target, package=args.package, what="TARGET")  # refused before any work
    if args.cache is not None:
        _directory(args.cache, "--cache", "the cache")
    net = _network(args.bundle, "implement")
    with tempfile.TemporaryDirectory(prefix="iotable-implement-") as tmp:
        design = export(
            _table_part(net, unavailable_hosts(net.graph)), Path(tmp) / "design", language="verilog", top=args.top,
            pipeline=args.pipeline, style=args.style, vectors=1, table_benches=False,
        )  # fmt: skip
        result = implement(
            design, target=args.target, package=args.package, frequency=args.frequency, seed=args.seed,
            seeds=args.seeds, placer=args.placer, cache_dir=args.cache, timeout=args.timeout,
        )  # fmt: skip
    print(result.summary())
    return 0


# -- main ---------------------------------------------------------------------------------------------------------

_COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_precompute,
    _add_info,
    _add_check,
    _add_dot,
    _add_pla,
    _add_export,
    _add_cost,
    _add_implement,
    add_sweep,
)


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(prog="iotable", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"iotable {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Exit status 0: success; 1: the bundle cannot be read, fails a check, or an output cannot be written (the
    reason is on stderr); 2: a usage error; 130: interrupted (Ctrl-C), with one line on stderr.

    Example:
        >>> import pathlib, tempfile
        >>> conv = torch.nn.Conv1d(2, 2, kernel_size=2, groups=2, bias=False)
        >>> path = save(precompute(conv, input_domain=Domain.uniform(1)), pathlib.Path(tempfile.mkdtemp()) / "b")
        >>> iotable.cli.main(["check", str(path)])  # doctest: +ELLIPSIS
        OK: ...: manifest checksum matches; 2 array file(s) match their checksums; 2 table(s); plans and tables agree
        0
    """
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, and the shell's status for a command ended by SIGINT
        print(f"iotable {args.command}: interrupted", file=sys.stderr)
        return 130
    except IOTableError as exc:
        print(f"iotable {args.command}: error: {exc}", file=sys.stderr)
    except MemoryError as exc:  # a request too large for this machine (say, --vectors 10**11): what to change
        less = "fewer --vectors, a smaller network" if args.command == "export" else "a smaller network"
        print(
            f"iotable {args.command}: error: not enough memory ({exc or 'no details'}); ask for less ({less}) or use "
            "a machine with more memory",
            file=sys.stderr,
        )
    except OSError as exc:  # a path the checks could not foresee (permissions, a full disk): the reason alone
        where = f": {exc.filename}" if exc.filename else ""
        print(f"iotable {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
    except Exception as exc:  # never a traceback: a bug is reported as one line, with what to do
        print(
            f"iotable {args.command}: internal error ({type(exc).__name__}: {exc}); please report it with the bundle",
            file=sys.stderr,
        )
    return 1
