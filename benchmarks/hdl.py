"""Hardware export and simulation timings: ``python -m benchmarks.hdl`` (``--quick`` for a smoke run).

- **export**: ``iotable.hdl.export`` of ``jsc-m`` (165 tables of 4,096 rows), ``digits-cnn`` (the digits
  example's CNN: 32 tables of 2^16 to 2^18 rows; unrolled 512 instances, streamed 32) and ``cnn`` (3x32x32,
  its tables of 2^18 rows) in Verilog and VHDL, in the unrolled and the streaming style: seconds (median) and
  megabytes written. Precomputing is not timed.
- **simulation**: ``iotable.hdl.simulate`` of the ``jsc-m`` design (unrolled) and of the streamed
  ``digits-cnn`` and ``cnn`` designs under each installed simulator. iverilog and ghdl run batches of two
  sizes, with the table files as written (``tables="sources"``: a ``case`` walked branch by branch) and, for
  iverilog, with the simulation model of the tables (``tables="memory"``, ten times the batches); the
  difference between the two runs gives the throughput in vectors per second, the rest is the fixed cost of
  compiling (and elaborating) the design. Verilator builds the design into its cached program
  (``iotable.hdl.verilator_model``, into an empty cache: the build time) and runs one batch of 100 times the
  larger size through it (jsc-m: 200,000 vectors; packing and reading back included); it builds the ``case``
  files of jsc-m too (minutes), not with ``--quick``.
- **tiny tables**: a DiffLogic network (64 input bits -> 400 -> 400 two-input gates -> GroupSum of 10 classes),
  exported with its gates as ``case`` modules (``inline_bits=0``, what export wrote before) and inline (the
  default), in one run: the files written, and iverilog compiling and running the network bench on 1,000
  vectors (seconds, median).
- **table bench**: the exhaustive bench of one 2^18-row table of the digits CNN (in blocks), under iverilog
  and ghdl: rows per second.

Timings are wall-clock medians on the machine that runs it; the simulators run as subprocesses.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import iotable
from iotable.hdl import export, simulate, simulate_files, verilator_model

from . import workloads

SIMULATORS = {"iverilog": "verilog", "verilator": "verilog", "ghdl": "vhdl"}


def _median(fn: Any, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def network(name: str) -> iotable.TableNetwork:
    """A workload's tables; ``"digits-cnn"``: the digits CNN with its float classifier a host node."""
    if name == "digits-cnn":
        model = workloads.build_digits_cnn()
        return iotable.precompute(
            model, input_domain=workloads.DIGITS_DOMAIN, example_input=torch.zeros(1, 1, 8, 8), host=[model[-1]]
        )
    return workloads.build(name).precompute()


def bench_export(names: list[str], repeats: int, work: Path) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        net = network(name)
        styles = ("unrolled",) if name == "jsc-m" else ("unrolled", "streaming")
        for style, language in [(s, lang) for s in styles for lang in ("verilog", "vhdl")]:
            target = work / f"{name}-{style}-{language}"

            def run(net: Any = net, target: Path = target, language: str = language, style: str = style) -> Any:
                shutil.rmtree(target, ignore_errors=True)
                return export(net, target, language=language, style=style, top="net", vectors=64, table_benches=False)

            seconds, design = _median(run, repeats)
            size = sum((target / f).stat().st_size for f in design.sources) / 1e6
            rows.append({"workload": name, "style": style, "language": language, "seconds": seconds,
                         "megabytes": size, "tables": sum(r.tables for r in design.layers),
                         "instances": sum(r.instances for r in design.layers)})  # fmt: skip
            print(f"export {name:10s} {style:9s} {language:8s} {seconds:7.2f} s  {size:7.1f} MB of sources  "
                  f"{rows[-1]['tables']} tables, {rows[-1]['instances']} instances")  # fmt: skip
    return rows


def _random_input(net: iotable.TableNetwork, n: int) -> torch.Tensor:
    domain = net.input_node.domain
    return torch.tensor(domain.values, dtype=torch.float32)[torch.randint(0, len(domain), (n, *net.input_node.shape))]


def _rate(design: Any, net: Any, simulator: str, tables: str, sizes: tuple[int, int]) -> dict[str, Any]:
    """iverilog or ghdl on two batch sizes: the difference gives the rate, the rest is compiling."""
    timings = []
    for n in sizes:
        x = _random_input(net, n)
        start = time.perf_counter()
        out = simulate(design, x, simulator=simulator, tables=tables, timeout=7200)
        timings.append(time.perf_counter() - start)
        assert torch.equal(out, design.reference(x)), f"{simulator} ({tables}) differs from net.run"
    extra = timings[1] - timings[0]
    # Below a second of difference the run is lost in the spread of compiling: no rate to report.
    rate = (sizes[1] - sizes[0]) / extra if extra > 1.0 else None
    fixed = timings[0] - sizes[0] / rate if rate else timings[0]
    return {"vectors": list(sizes), "seconds": timings, "vectors_per_s": rate, "build_s": fixed}


def _verilator(design: Any, net: Any, tables: str, n: int, cache: Path) -> dict[str, Any]:
    """Verilator: the build (into an empty cache), then one batch of ``n`` vectors through the program, packing
    and reading back included."""
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    model = verilator_model(design, tables=tables, cache_dir=cache, timeout=7200)
    build = time.perf_counter() - start
    x = _random_input(net, n)
    start = time.perf_counter()
    out = model(x, timeout=3600)
    seconds = time.perf_counter() - start
    assert torch.equal(out, design.reference(x)), f"verilator ({tables}) differs from net.run"
    return {"vectors": [n], "seconds": [seconds], "vectors_per_s": n / seconds, "build_s": build}


def bench_simulation(
    cases: list[tuple[str, str, tuple[int, int]]], work: Path, *, sources: bool = True
) -> list[dict[str, Any]]:
    """``cases``: (workload, style, (small, large) batch sizes), each under every installed simulator, with each
    table model: ``"sources"`` (the ``case`` files as written) and ``"memory"`` (the simulation model, ten times
    the batches; ghdl has none). Verilator runs 100 times the large batch through its program; with
    ``sources=False`` it builds only the memory model (the case files take it minutes)."""
    rows = []
    for name, style, sizes in cases:
        net = network(name)
        for simulator, language in SIMULATORS.items():
            if shutil.which(simulator) is None:
                print(f"simulate {name} {simulator}: not installed, skipped")
                continue
            target = work / f"sim-{name}-{language}"
            design = export(
                net, target, language=language, style=style, top="net", vectors=8, table_benches=False, overwrite=True
            )
            models = ("sources",) if simulator == "ghdl" else ("sources", "memory")
            if simulator == "verilator" and (not sources or style == "streaming"):
                models = ("memory",)  # the case tables of jsc-m or the CNNs take Verilator minutes
            for tables in models:
                if simulator == "verilator":
                    row = _verilator(design, net, tables, 100 * sizes[1], work / "verilator-cache")
                else:
                    row = _rate(design, net, simulator, tables, sizes if tables == "sources" else
                                (10 * sizes[0], 10 * sizes[1]))  # fmt: skip
                rows.append({"workload": name, "style": style, "simulator": simulator, "tables": tables, **row})
                rate = row["vectors_per_s"]
                shown = f"{rate:10.0f} vectors/s" if rate else "run time within the spread of compiling"
                batches = ", ".join(f"{n} vectors {t:6.1f} s" for n, t in zip(row["vectors"], row["seconds"]))
                print(f"simulate {name} ({style}) {simulator:9s} {tables:7s} {batches}: {shown} after "
                      f"{row['build_s']:6.1f} s of building")  # fmt: skip
    return rows


class _Gates(torch.nn.Module):
    """A DiffLogic gate layer at evaluation: output j is gate ``ops[j]`` (one of the 16 two-input Boolean functions,
    as a truth table) of inputs ``a[j]`` and ``b[j]``."""

    def __init__(self, inputs: int, outputs: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        pairs = torch.stack([torch.randperm(inputs, generator=generator)[:2] for _ in range(outputs)])
        self.register_buffer("a", pairs[:, 0].clone())
        self.register_buffer("b", pairs[:, 1].clone())
        ops = torch.randint(0, 16, (outputs,), generator=generator)
        # row op of the truth tables: bit (2a + b) of op
        self.register_buffer("truth", ((ops[:, None] >> torch.arange(4)) & 1).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        address = (2 * x[..., self.a] + x[..., self.b]).long()
        return self.truth.expand(*x.shape[:-1], -1, -1).gather(-1, address[..., None])[..., 0]


class _GroupSum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*x.shape[:-1], 10, -1).sum(-1)


def bench_tiny(work: Path, repeats: int, vectors: int = 1000) -> list[dict[str, Any]]:
    """The DiffLogic network's design with its gates as ``case`` modules and inline: files, iverilog's time."""
    if shutil.which("iverilog") is None:
        print("tiny tables: iverilog not installed, skipped")
        return []
    model = torch.nn.Sequential(_Gates(64, 400, 0), _Gates(400, 400, 1), _GroupSum()).eval()
    net = iotable.precompute(model, input_domain=iotable.Domain([0.0, 1.0]), example_input=torch.zeros(1, 64))
    rows = []
    for label, inline_bits in (("case modules", 0), ("inline", 6)):
        target = work / f"tiny-{inline_bits}"
        design = export(net, target, top="net", vectors=vectors, inline_bits=inline_bits, overwrite=True)
        files = {n: (target / n).read_text() for n in design.sources + design.bench}

        def run(files: dict[str, str] = files) -> Any:
            result = simulate_files(files, "net_tb", simulator="iverilog", timeout=3600)
            assert result.passed, result.stdout + result.stderr
            return result

        seconds, _ = _median(run, repeats)
        size = sum((target / f).stat().st_size for f in design.files) / 1e6
        rows.append({"tables": label, "files": len(design.files), "megabytes": size, "vectors": vectors,
                     "iverilog_s": seconds})  # fmt: skip
        print(f"tiny tables {label:12s} {len(design.files):4d} files {size:6.2f} MB  iverilog {seconds:6.2f} s "
              f"for {vectors} vectors (compile and run)")  # fmt: skip
    return rows


def bench_table(work: Path) -> list[dict[str, Any]]:
    net = network("digits-cnn")
    rows = []
    for simulator, language in (("iverilog", "verilog"), ("ghdl", "vhdl")):
        if shutil.which(simulator) is None:
            continue
        target = work / f"table-{language}"
        design = export(net, target, language=language, style="streaming", top="net", vectors=4, overwrite=True)
        bench = design.table_benches[0]
        module = bench[: -len("_tb")]
        suffix = ".v" if language == "verilog" else ".vhd"
        names = (f"{module}{suffix}", f"{bench}{suffix}", f"{module}_vectors.hex")
        files = {n: (target / n).read_text() for n in names}
        result = simulate_files(files, bench, simulator=simulator, timeout=1800)
        rows_ = net.tables[0].rows
        assert result.passed, result.stdout
        rows.append({"simulator": simulator, "rows": rows_, "seconds": result.seconds})
        print(f"table bench {module} ({rows_} rows) {simulator:9s} {result.seconds:6.1f} s: "
              f"{rows_ / result.seconds:8.0f} rows/s, {result.stdout.strip().splitlines()[-1]}")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hdl", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repeat, small batches, jsc-m only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory(prefix="iotable-hdl-bench-") as tmp:
        work = Path(tmp)
        report = {
            "export": bench_export(["jsc-m"] if args.quick else ["jsc-m", "digits-cnn", "cnn"], repeats, work),
            "simulation": bench_simulation(
                [("jsc-m", "unrolled", (20, 100))]
                if args.quick
                else [
                    ("jsc-m", "unrolled", (200, 2000)),
                    ("digits-cnn", "streaming", (200, 2000)),
                    ("cnn", "streaming", (4, 24)),
                ],
                work,
                sources=not args.quick,
            ),
            "tiny_tables": bench_tiny(work, repeats, 100 if args.quick else 1000),
            "table_bench": [] if args.quick else bench_table(work),
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
