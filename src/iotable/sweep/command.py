"""``iotable sweep BUNDLE... --target T --pipeline P --seed S``: a sweep of saved networks on the command line.

Each bundle is a variant (named by its directory); the table goes to stdout as markdown, ``--csv FILE`` writes
it as CSV and ``--plot FILE.png`` the Pareto plot (matplotlib, ``iotable[sweep]``). ``--folder DIR`` keeps the
records, so that the same command run again after an interruption resumes where it stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import CommandError
from .options import EFFORTS, Pipelining
from .variant import Variant

__all__ = ["add_sweep", "run_sweep"]


def _pipelining(text: str) -> Pipelining:
    """``K`` (a register after every K-th table layer), ``none``, or ``K:L`` (and after every L LUT levels)."""
    pipeline, _, luts = text.partition(":")
    try:
        value: Any = pipeline if pipeline.lower() in ("none", "combinational") else int(pipeline)
        return Pipelining.parse({"pipeline": value, "pipeline_luts": int(luts) if luts else 0})
    except ValueError:
        msg = f"--pipeline {text!r}: expected K, none or K:L (K table layers, L LUT levels between registers)"
        raise argparse.ArgumentTypeError(msg) from None


def add_sweep(commands: argparse._SubParsersAction) -> None:
    """Declare ``iotable sweep`` and its arguments."""
    sweep = commands.add_parser(
        "sweep",
        help="sweep network bundles over targets, pipelining and seeds; print the table and the Pareto front",
        description="Measure every network bundle with every target, pipelining setting, mapping effort and "
        "placement seed, cheapest stage first: LogicNets' estimate, ABC's LUT count (berkeley-abc), then place "
        "and route (yosys and nextpnr) only for the candidates on or near the front of the cheaper numbers. "
        "Print a markdown table of every candidate with the Pareto front (LUTs, Fmax, latency) marked. With "
        "--folder, each finished stage is recorded there and the same command resumes after an interruption. See "
        "docs/hardware.md, section Sweeps.",
    )
    sweep.add_argument("bundles", nargs="+", metavar="BUNDLE", help="network bundle directories (the variants)")
    sweep.add_argument("--target", action="append", default=None, help="ice40-<device>, ecp5-<size> or xilinx "
                       "(repeat for several; default: ice40-hx8k)")  # fmt: skip
    sweep.add_argument("--pipeline", action="append", type=_pipelining, default=None, metavar="K[:L]",
                       help="a register after every K-th table layer (none: combinational) and, with :L, after "
                       "every L LUT levels inside the tables (repeat for several; default: 1)")  # fmt: skip
    sweep.add_argument("--seed", action="append", type=int, default=None, help="a placement seed (repeat; default: 1)")
    sweep.add_argument("--effort", action="append", choices=EFFORTS, default=None, help="ABC's mapping effort")
    sweep.add_argument("--folder", metavar="DIR", default=None, help="keep the records here, to resume")
    sweep.add_argument(
        "--near", type=float, default=0.05, help="carry candidates within this fraction of a front on (default: 0.05)"
    )
    sweep.add_argument("--k", type=int, default=6, help="LUT inputs for ABC (default: %(default)s)")
    sweep.add_argument("--timeout", type=float, default=3600.0, help="seconds per place and route (default: 3600)")
    sweep.add_argument("--csv", metavar="FILE", default=None, help="write the table as CSV")
    sweep.add_argument("--plot", metavar="FILE.png", default=None, help="write the Pareto plot (needs matplotlib)")
    sweep.set_defaults(run=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    """Run ``iotable sweep``; outputs are checked before any work."""
    from .run import sweep

    for option, value in (("--csv", args.csv), ("--plot", args.plot)):
        if value is not None and (not value or Path(value).is_dir()):
            msg = f"{option} {value!r}: expected a file path, received a directory or nothing; give a file name"
            raise CommandError(msg)
    if args.plot is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            msg = "--plot: matplotlib is not installed; pip install 'iotable[sweep]' (checked before the sweep runs)"
            raise CommandError(msg)
    names = [Path(b).name or b for b in args.bundles]
    if len(set(names)) != len(names):
        names = list(args.bundles)
    variants = [Variant(name, bundle) for name, bundle in zip(names, args.bundles)]
    result = sweep(
        variants, targets=args.target or "ice40-hx8k", pipelines=args.pipeline or 1, seeds=args.seed or 1,
        efforts=args.effort or "fast", folder=args.folder, near=args.near, k=args.k, timeout=args.timeout,
    )  # fmt: skip
    print(result.summary())
    if args.csv is not None:
        result.to_csv(args.csv)
    if args.plot is not None:
        result.plot(args.plot)
        print(f"wrote the Pareto plot to {args.plot}")
    return 0
