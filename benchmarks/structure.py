"""What the structural dependence pass costs: ``python -m benchmarks.structure`` (``--quick`` for a smoke run).

For ``jsc-m`` (five sparse layers of 4,096-row tables) and the digits CNN (three convolution layers), the
median time of ``iotable.precompute`` of the whole model next to the median time of
:func:`iotable.front.dependence.dependence` over every table layer's modules (a two-sample batch each, as
the automatic decomposition runs it for a module without metadata), and the ratio of the two. Torch runs on
one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch import nn

import iotable
from iotable.front.dependence import dependence

from . import workloads
from .measure import configure_threads


def _median(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _blocks(model: nn.Sequential) -> list[nn.Sequential]:
    """The model's table layers: each mixing module with the elementwise modules up to its quantizer."""
    blocks, current = [], []
    for module in model:
        if isinstance(module, nn.Flatten):
            break  # the digits CNN's float head stays on the host
        current.append(module)
        if isinstance(module, iotable.nn.Quantize):
            blocks.append(nn.Sequential(*current))
            current = []
    return blocks


def _case(name: str) -> tuple[nn.Sequential, Any, torch.Tensor]:
    if name == "digits-cnn":
        model = workloads.build_digits_cnn()
        example = torch.zeros(1, 1, 8, 8)

        def run() -> Any:
            return iotable.precompute(
                model, input_domain=workloads.DIGITS_DOMAIN, example_input=example, host=[model[-1]], reuse=False
            )

        return model, run, example
    workload = workloads.build(name)

    def run_mlp() -> Any:
        return workload.precompute(reuse=False)

    return workload.model, run_mlp, workload.example_input[:1]


def bench(name: str, repeats: int) -> dict[str, Any]:
    model, run, example = _case(name)
    blocks = _blocks(model)

    def structural() -> None:
        x = example.repeat(2, *([1] * (example.dim() - 1)))
        for block in blocks:
            dependence(block, x)
            with torch.no_grad():
                x = block(x)

    structural()  # the first dispatch mode of a process imports part of torch: not the pass's cost
    precompute_s = _median(run, repeats)
    pass_s = _median(structural, repeats)
    return {
        "model": name,
        "table layers": len(blocks),
        "precompute s": round(precompute_s, 3),
        "structural pass s": round(pass_s, 4),
        "pass / precompute": round(pass_s / precompute_s, 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.structure", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repeat: a smoke run, not a measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    configure_threads(1)
    repeats = 1 if args.quick else args.repeats
    rows = [bench(name, repeats) for name in ("jsc-m", "digits-cnn")]
    for row in rows:
        print("  ".join(f"{k}: {v}" for k, v in row.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(rows, file, indent=2)


if __name__ == "__main__":
    main()
