"""The stages of a sweep, cheapest first, each a function from its inputs to a JSON-able result.

- :func:`estimate_stage` — LogicNets' LUT6 estimate of the variant's live tables (:func:`iotable.estimate` on a
  module, from its plans alone; a bundle's tables);
- :func:`tables_stage` — the table network (:func:`iotable.precompute`, or :func:`iotable.load` of a bundle),
  saved as a bundle in the sweep's folder so that a rerun loads it instead of building it again;
- :func:`verify_stage` — :func:`iotable.verify` on the variant's inputs, and the scorer's accuracy;
- :func:`latency_stage` — the design's latency for a pipelining setting as :func:`iotable.hdl.export` gives it,
  the registers inside the tables (``pipeline_luts``) included (no file written);
- :func:`abc_stage` — :func:`iotable.synth.cost`: every live table mapped by ABC and checked;
- :func:`implement_stage` — :func:`iotable.hdl.export` and :func:`iotable.hdl.implement`: LUTs, flip-flops and
  Fmax after place and route.

The sweep (:mod:`.run`) calls them through this module's names, so each stage is one place to look.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..bundle.bundle import load, save
from ..errors import OptionError
from ..graph.graph import TableMeta
from ..hdl.implement import implement, tool_versions
from ..hdl.writer import design_latency, export
from ..network.network import TableNetwork
from ..network.precompute import precompute
from ..network.verify import verify
from ..synth.abcrun import abc_version
from ..synth.estimate import estimate
from ..synth.mapping import cost
from .options import Candidate, Pipelining
from .variant import Variant

__all__ = [
    "abc_stage",
    "abc_version",
    "estimate_stage",
    "implement_stage",
    "latency_stage",
    "load_tables",
    "tables_stage",
    "tool_versions",
    "verify_stage",
]

_ESTIMATE = ("input_domain", "example_input", "host", "input_layout", "max_rows")


def estimate_stage(variant: Variant, net: TableNetwork | None) -> dict[str, Any]:
    """LogicNets' LUT6 estimate of the live tables (and arithmetic) and the pipeline register bits."""
    if net is None:
        options = {name: value for name, value in variant.precompute.items() if name in _ESTIMATE}
        planned = estimate(variant.model, **options)
        return {"luts": int(planned.total_luts), "registers": int(planned.registers), "rows": int(planned.rows)}
    rows = net.rows()
    return {
        "luts": int(sum(r.get("estimate") or 0 for r in rows)),
        "registers": int(sum(r.get("registers") or 0 for r in rows)),
        "rows": int(sum(t.rows for t in net.tables)),
    }


def tables_stage(variant: Variant, directory: Path) -> tuple[TableNetwork, dict[str, Any]]:
    """The variant's table network, saved as a bundle in ``directory`` (replaced if there)."""
    net = load_tables(variant.model) if variant.is_bundle else precompute(variant.model, **variant.precompute)
    if not isinstance(net, TableNetwork):
        msg = (
            f"sweep: variant {variant.name!r} gives the tables of one layer, not a network; sweep whole models "
            "(wrap a single layer in torch.nn.Sequential)"
        )
        raise OptionError(msg)
    save(net, directory)
    return net, {"tables": len(net.tables), "rows": int(sum(t.rows for t in net.tables))}


def load_tables(path: Any) -> TableNetwork:
    """A network bundle (a layer's bundle is refused)."""
    net = load(path)
    if not isinstance(net, TableNetwork):
        msg = f"sweep: {path} holds the tables of one layer, not a network; save a whole model's network"
        raise OptionError(msg)
    return net


def verify_stage(variant: Variant, net: TableNetwork) -> dict[str, Any]:
    """Samples, mismatches against the model, and the scorer's accuracy (``None`` where not given)."""
    result: dict[str, Any] = {"samples": None, "mismatches": None, "accuracy": None}
    if variant.inputs is not None and not variant.is_bundle:
        report = verify(variant.model, net, variant.inputs)
        result.update(samples=int(report.samples), mismatches=int(report.mismatches))
    if variant.scorer is not None:
        score = variant.scorer(net)
        try:
            result["accuracy"] = float(score)
        except (TypeError, ValueError):
            msg = f"sweep: variant {variant.name!r}: the scorer must return a number, returned {type(score).__name__}"
            raise OptionError(msg) from None
    return result


def latency_stage(
    net: TableNetwork, pipelining: Pipelining, *, k: int = 6, executor: Any = None, cache_dir: Path | None = None
) -> dict[str, Any]:
    """The cycles from input to output of the design :func:`iotable.hdl.export` writes for ``pipelining``: the
    registers after every ``pipeline``-th table layer and, with ``pipeline_luts``, those inside each table, whose
    LUT depth needs the tables mapped (ABC, as export maps them, through the same ``cache_dir``)."""
    latency = design_latency(
        net, pipeline=pipelining.pipeline, pipeline_luts=pipelining.pipeline_luts, k=k, executor=executor,
        cache_dir=cache_dir,
    )  # fmt: skip
    tables = sum(isinstance(node.meta, TableMeta) for node in net.graph.nodes)
    return {"latency": latency, "table_layers": int(tables)}


def abc_stage(net: TableNetwork, *, effort: str, k: int, executor: Any, cache_dir: Path) -> dict[str, Any]:
    """ABC's LUT count of the live tables and arithmetic, every netlist checked."""
    report = cost(net, k=k, effort=effort, executor=executor, cache_dir=cache_dir, progress=False)
    return {"luts": int(report.total_luts), "k": int(report.k), "abc_version": report.abc_version}


def implement_stage(
    net: TableNetwork, candidate: Candidate, *, k: int, executor: Any, cache_dir: Path, options: dict[str, Any]
) -> dict[str, Any]:
    """The candidate's design exported and implemented on its target with its seed."""
    export_options = candidate.pipelining.export_options()
    if "tables" in export_options:
        export_options.update(k=k, executor=executor, cache_dir=cache_dir / "abc")
    with tempfile.TemporaryDirectory(prefix="iotable-sweep-") as tmp:
        design = export(net, Path(tmp) / "design", vectors=1, **export_options)
        result = implement(
            design, target=candidate.target, seed=candidate.seed, cache_dir=cache_dir / "implement", **options
        )
    return {
        "luts": int(result.luts), "lut_inputs": int(result.lut_inputs), "flip_flops": int(result.flip_flops),
        "fmax_mhz": None if result.fmax_mhz is None else float(result.fmax_mhz), "latency": int(design.latency),
        "placed": bool(result.placed), "tools": [list(t) for t in result.tools],
    }  # fmt: skip
