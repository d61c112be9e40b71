"""From estimate to device: ``python -m benchmarks.implement`` (``--only jsc-s``, ``--targets ...``, ``--seeds``,
``--placer``, ``--no-check``, ``--json FILE``).

For jsc-s, jsc-m and the digits MLP (examples/digits_mlp.py, trained as the example trains it), unrolled, and
for the digits CNN (benchmarks/workloads.py's, calibrated random weights, its float classifier a host node) and
``chain-8`` (eight layers of four 1-bit units of fan-in 4: tables so small that the handshake sets the clock),
streaming, the ladder of LUT counts a user can ask iotable for, each with its time:

- **estimate**: LogicNets' formula on the design's tables (no tool);
- **ABC**: every distinct table mapped onto LUT6 by ABC and checked row by row (``iotable.synth.cost``), the
  count of the design's instances;
- **synthesis**: yosys ``synth_xilinx -nobram -nolutram`` of the design with its tables mapped (K=6, placed as
  ``LUT1``-``LUT6`` cells), the synthesized netlist simulated against the design's vectors (LUT6, MUXF,
  flip-flops);
- **place and route**: ``iotable.hdl.implement`` for ECP5 and iCE40 targets (yosys, then nextpnr) with the
  tables mapped (``tables="mapped"``: each table's ABC netlist, K=4, checked row by row, placed as the family's
  LUT cells), ``--seeds`` placements (Fmax median and range) and ``verify``: the synthesized and routed
  netlists simulated against the design's vectors. LUT4, flip-flops, Fmax, LUT4 against ABC's K=4 count of
  the tables, and the peak memory of the largest tool;
- and ``iotable.hdl.check`` of the design (each distinct table elaborated and checked once, the wiring
  through yosys's generic synthesis with the tables as black boxes), with its time.

A target a design does not fit (more LUTs or I/O than the device has) is reported as such, with the time the
refusal took. ``--refuse WORKLOAD TARGET`` (``jsc-m ice40-hx8k``) times that refusal alone: from the call of
``implement(design, target=TARGET, tables="mapped")`` on the exported design (its tables mapped onto LUT4 by ABC,
cold, exported as the family's cells, the lower bound of their LUT cells counted) to the error, and whether it
came before synthesis. Timings are wall-clock seconds of one run on the machine that runs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import iotable
from iotable.errors import HDLError, HDLToolError
from iotable.hdl import check, export, implement
from iotable.nn import Quantize

from . import hdl, workloads

#: The workloads of the ladder, and the targets each is implemented for.
WORKLOADS = ("jsc-s", "jsc-m", "digits-mlp", "digits-cnn", "chain-8")
#: The workloads exported streaming (the others are unrolled).
STREAMING = ("chain-8", "digits-cnn")
TARGETS = ("xilinx", "ecp5-85k", "ice40-hx8k")


def digits_mlp() -> iotable.TableNetwork:
    """The digits example's MLP, trained as examples/digits_mlp.py trains it (seeded), as tables."""
    examples = str(Path(__file__).resolve().parent.parent / "examples")
    sys.path.insert(0, examples)
    try:
        example, digits = importlib.import_module("digits_mlp"), importlib.import_module("_digits")
    finally:
        sys.path.remove(examples)
    torch.manual_seed(0)
    x_train, y_train, _, _ = digits.load(image=False)
    model = example.build_model()
    digits.train(model, x_train, y_train, epochs=example.EPOCHS)
    return iotable.precompute(model.eval(), input_domain=digits.INPUT_DOMAIN, progress=False)


def chain(depth: int) -> iotable.TableNetwork:
    """``depth`` layers of four 1-bit units of fan-in 4 (seeded): tiny tables, so that the control path shows."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(4, 4), Quantize(1)]
    return iotable.precompute(torch.nn.Sequential(*layers).eval(), input_domain=iotable.Domain.uniform(1))


def _network(name: str) -> iotable.TableNetwork:
    if name.startswith("chain-"):
        return chain(int(name.removeprefix("chain-")))
    if name == "digits-cnn":
        return hdl.network(name)
    return digits_mlp() if name == "digits-mlp" else workloads.build(name).precompute()


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    try:
        result = fn()
    except (HDLError, HDLToolError) as exc:  # a design that does not fit the device: the refusal, or a tool's words
        result = exc
    return time.perf_counter() - start, result


def ladder(
    name: str,
    targets: tuple[str, ...],
    work: Path,
    cache: Path | None,
    seeds: int,
    placer: str = "heap",
    checked: bool = True,
) -> dict[str, Any]:
    net = _network(name)
    style = "streaming" if name in STREAMING else "unrolled"
    design = export(net, work / name, style=style, top="net", vectors=16, table_benches=False, overwrite=True)
    row: dict[str, Any] = {"workload": name, "style": style, "estimate": sum(layer.estimate for layer in design.layers)}
    print(f"{name} ({style}): estimate {row['estimate']} LUT6 (LogicNets)")
    seconds, report = _timed(lambda: iotable.synth.cost(net, progress=False, cache_dir=cache))
    row["abc"] = {"luts": report.luts, "seconds": seconds, "abc_version": report.abc_version}
    print(f"  ABC: {report.luts} LUT6 over the network's tables in {seconds:.1f} s ({report.abc_version})")
    if checked:
        seconds, result = _timed(lambda: check(design, timeout=3600))
        row["check"] = {"cells": getattr(result, "cells", None), "seconds": seconds}
        print(f"  check: {row['check']['cells']} cells (the wiring's, a table's ROM 2) in {seconds:.1f} s")
    if any(not target.startswith("xilinx") for target in targets):
        seconds, report = _timed(lambda: iotable.synth.cost(net, k=4, progress=False, cache_dir=cache))
        row["abc4"] = {"luts": report.luts, "seconds": seconds}
        print(f"  ABC: {report.luts} LUT4 over the network's tables in {seconds:.1f} s")
    for target in targets:
        options: dict[str, Any] = {"tables": "mapped", "verify": 16}
        if not target.startswith("xilinx"):
            options.update(seeds=seeds, placer=placer)
        seconds, result = _timed(
            lambda target=target, options=options: implement(design, target=target, timeout=3600, **options)
        )
        if isinstance(result, Exception):
            row[target] = {"error": str(result)[-600:], "seconds": seconds}
            print(f"  {target}: failed after {seconds:.1f} s: {str(result)[-300:]}")
            continue
        row[target] = {
            "luts": result.luts, "lut_inputs": result.lut_inputs, "flip_flops": result.flip_flops,
            "carry": result.carry, "muxes": result.muxes, "block_ram": result.block_ram,
            "fmax_mhz": result.fmax_mhz, "fmax_range_mhz": result.fmax_range, "seeds": [list(s) for s in result.seeds],
            "seconds": result.seconds, "tools": dict(result.tools), "placer": result.placer,
            "utilization": [list(u) for u in result.utilization],
            "verified": [[v.netlist, v.vectors] for v in result.verified], "tables": options.get("tables", "case"),
            "largest_tool_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        }  # fmt: skip
        abc = row["abc"] if target.startswith("xilinx") else row.get("abc4")
        if abc is not None:
            row[target]["luts_per_abc"] = round(result.luts / max(abc["luts"], 1), 3)
        print(result.summary())
    return row


def refusal(name: str, target: str, work: Path) -> dict[str, Any]:
    """How long implement takes to refuse ``name`` on ``target`` with its tables mapped, what it says, and whether
    it came before synthesis (the lower bound's refusal) or after (the synthesized cells')."""
    net = _network(name)
    design = export(net, work / name, top="net", vectors=16, table_benches=False, overwrite=True)
    seconds, result = _timed(lambda: implement(design, target=target, tables="mapped", timeout=3600))
    if not isinstance(result, Exception):
        raise SystemExit(f"{name} fits {target} ({result.luts} LUTs): nothing to refuse")
    row = {
        "workload": name, "target": target, "refused_s": round(seconds, 1), "error": type(result).__name__,
        "before_synthesis": "not synthesized" in str(result), "message": str(result)[:600],
    }  # fmt: skip
    print(f"{name} on {target}: refused in {seconds:.1f} s ({type(result).__name__}): {str(result)[:400]}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.implement", description=__doc__)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS), help="workloads (default: all)")
    parser.add_argument("--targets", nargs="*", default=list(TARGETS), help="targets (default: %(default)s)")
    parser.add_argument("--cache", default=None, help="a folder for ABC's cache of mapped tables")
    parser.add_argument("--seeds", type=int, default=3, help="placement seeds per target (default: %(default)s)")
    parser.add_argument("--placer", default="heap", help="nextpnr's placer: heap, static, sa (default: %(default)s)")
    parser.add_argument("--no-check", action="store_true", help="leave out hdl.check (minutes on the digits CNN)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON")
    parser.add_argument("--refuse", nargs=2, metavar=("WORKLOAD", "TARGET"), help="time this refusal alone")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="iotable-bench-implement-") as tmp:
        for name in [] if args.refuse else args.only:
            cache = Path(args.cache) if args.cache else None
            rows.append(ladder(name, tuple(args.targets), Path(tmp), cache, args.seeds, args.placer, not args.no_check))
        if args.refuse:
            rows.append(refusal(*args.refuse, Path(tmp)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
