"""The ``iotable`` command line: inspect and check bundles written by :func:`iotable.save`.

``iotable info BUNDLE`` prints the network's summary (or the layer's unit table); ``iotable check BUNDLE``
re-verifies the manifest's checksum, every field and file, the graph's invariants and the golden vectors,
and exits with status 1 and the reason on stderr when something is wrong. No error prints a traceback.
``python -m iotable`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .bundle import BundleError, _open
from .errors import IOTableError
from .network import TableNetwork

__all__ = ["main"]

_DESCRIPTION = """\
Inspect and check iotable bundles: the directories iotable.save() writes (manifest.json plus .npy tables).
See docs/bundle.md for the format."""


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="iotable", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"iotable {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = commands.add_parser(
        "info",
        help="print a bundle's summary",
        description="Print a bundle's summary: for a network, every graph node with its shape, units, fan-in, "
        "bits, rows, line buffer and stride, then the table and row counts and the host nodes; for one layer, "
        "its unit table.",
    )
    info.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    check = commands.add_parser(
        "check",
        help="verify a bundle's checksums, fields, graph and golden vectors",
        description="Verify a bundle: the manifest's sha256 (manifest.sha256), every field of the manifest, every "
        "path inside the bundle with no symlink, every .npy header, size and sha256, the tables against their "
        "plans, the graph against Graph.check() and the tables, and that the network reproduces the golden "
        "vectors stored when it was saved. Prints one OK line and exits 0, or prints the problem on stderr and "
        "exits 1 (also for a format_version 1 bundle, which has no manifest checksum to check).",
    )
    check.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Exit status 0: success; 1: the bundle cannot be read or fails a check (the reason is on stderr);
    2: a usage error.

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
        return _run(args)
    except IOTableError as exc:
        print(f"iotable {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # never a traceback: a bug is reported as one line, with what to do
        print(
            f"iotable {args.command}: internal error ({type(exc).__name__}: {exc}); please report it with the bundle",
            file=sys.stderr,
        )
        return 1


def _run(args: argparse.Namespace) -> int:
    obj, manifest = _open(args.bundle)
    if args.command == "info":
        kind = "network" if isinstance(obj, TableNetwork) else f"layer {obj.name!r}"
        print(
            f"{args.bundle}: iotable bundle (format version {manifest['format_version']}, written by iotable "
            f"{manifest.get('library_version', '?')}), one {kind}"
        )
        print(obj.summary())
        return 0
    if manifest["format_version"] < 2:
        msg = (
            f"{args.bundle}: format_version {manifest['format_version']} has no manifest checksum or golden vectors, "
            "so its manifest cannot be checked; it loads, and saving it again upgrades it: "
            "iotable.save(iotable.load(path), path)"
        )
        raise BundleError(msg)
    files, tables = len(manifest["files"]), len(obj.tables)
    checks = "plans and tables agree"
    if isinstance(obj, TableNetwork):
        samples = manifest["files"][manifest["golden"]["inputs"]]["shape"][0]
        checks = f"plans, tables and graph agree; the graph passes its checks; {samples} golden sample(s) reproduce"
    counts = f"{files} array file(s) match their checksums; {tables} table(s)"
    print(f"OK: {args.bundle}: manifest checksum matches; {counts}; {checks}")
    return 0
