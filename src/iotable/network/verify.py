"""Verifying a table network against its model, bit for bit, and locating the first layer that differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._util import display as _display
from .._util.modules import module_dtype, run_module
from ..errors import InputError, ModelError
from ..front.modelcheck import check_float32, warn_training
from ..front.trace import trace
from ..packages import check_runnable
from ..runtime.runtime import decode
from .frontends import file_front_end
from .network import TableNetwork


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found: samples checked, samples that differ, and where the first one differs."""

    samples: int
    mismatches: int
    first: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """Whether every sample agrees bit for bit."""
        return self.mismatches == 0

    @property
    def agreement(self) -> float:
        """Fraction of samples that agree bit for bit."""
        return 1.0 - self.mismatches / self.samples if self.samples else 1.0

    def __str__(self) -> str:
        text = f"{self.samples - self.mismatches}/{self.samples} samples agree bit for bit"
        if self.first:
            text += f"; first mismatch: {self.first}"
        return text

    def _repr_html_(self) -> str:
        columns = (
            ("samples", "samples"),
            ("agree", "agree bit for bit"),
            ("mismatches", "differ"),
            ("agreement", "agreement"),
        )
        counts = {
            "samples": self.samples,
            "agree": self.samples - self.mismatches,
            "mismatches": self.mismatches,
            "agreement": f"{self.agreement:.2%}",
        }
        title = f"VerifyReport: {'OK' if self.ok else 'MISMATCH'}, {self.samples - self.mismatches}/{self.samples} "
        title += "samples agree bit for bit"
        parts = [_display.table([counts], columns)]
        if self.first:
            where = [{"what": key, "value": value} for key, value in self.first.items()]
            parts.append(_display.table(where, (("what", "first mismatch"), ("value", ""))))
        return _display.view(title, *parts)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    equal = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return equal.reshape(a.shape[0], -1).all(dim=1)


def verify(model: Any, net: TableNetwork, inputs: Any, *, codes: bool = False) -> VerifyReport:
    """Compare ``net.run`` with the model's own forward, bit for bit, on a batch of inputs.

    Args:
        model: the model the network was built from (a torch module; or the QONNX file or ``onnx.ModelProto``,
            then compared with qonnx's ``execute_onnx`` in output codes, float32 ties named).
        net: the table network.
        inputs: a batch of input values (or codes with ``codes=True``).

    Returns:
        A :class:`VerifyReport`; for the first mismatching sample it names the first table node whose
        output codes differ from the model's, the unit, the output element and that unit's input codes.
    """
    front_end = file_front_end(model)
    if front_end is not None:  # a QONNX file or ModelProto: compared with its own reference executor
        return front_end.verify(model, net, inputs, codes=codes)  # type: ignore[no-any-return]
    if not isinstance(model, nn.Module):
        msg = f"verify: expected the model (a torch.nn.Module) first, received {type(model).__name__}"
        raise ModelError(msg)
    if not isinstance(net, TableNetwork):
        msg = f"verify: expected a TableNetwork second (from iotable.precompute), received {type(net).__name__}"
        raise ModelError(msg)
    check_float32(model, "verify", ModelError)
    warn_training(model, "verify")
    check_runnable(model, inputs, "verify")
    input_codes = net.encode_input(inputs, codes=codes, what="verify")
    if input_codes.shape[0] == 0:  # net.run answers an empty batch with an empty output; a proof of nothing fails
        msg = (
            f"verify: expected a batch of at least one sample, received shape {tuple(input_codes.shape)}; a "
            "verification of no sample proves nothing: pass the inputs to check"
        )
        raise InputError(msg)
    values = decode(input_codes, net.input_node).to(module_dtype(model)[0])
    expected = run_module(model, values, type(model).__name__)
    got = net.run(input_codes, codes=True)
    if got.shape != expected.shape:
        msg = f"verify: the network outputs shape {tuple(got.shape)}, the model {tuple(expected.shape)}"
        raise ModelError(msg)
    same = _same(got.to(expected.dtype), expected)
    mismatches = int((~same).sum())
    first: dict[str, Any] | None = None
    if mismatches:
        sample = int(torch.nonzero(~same)[0])
        if _batch_dependent(model, values, got, ~same):
            first = {"node": net.output_node.name, "unit": None, "note": _BATCH_NOTE}
        else:
            first = _locate(model, net, input_codes[sample : sample + 1], values[sample : sample + 1])
        first["sample"] = sample
    return VerifyReport(samples=int(same.numel()), mismatches=mismatches, first=first)


_BATCH_NOTE = (
    "the model's output for a sample depends on its batch: run alone, the failing samples give the tables' "
    "output; a table computes one output per input, so make the forward independent of the batch (no "
    "x.shape[0] or batch statistics in its arithmetic)"
)

#: The most failing samples run again one by one to tell a batch dependence.
_RERUN = 8


def _batch_dependent(model: nn.Module, values: torch.Tensor, got: torch.Tensor, failing: torch.Tensor) -> bool:
    """Whether the first (up to :data:`_RERUN`) failing samples of a batch of two or more, each run alone
    through the model, give the network's output: then the model's answer depends on the batch."""
    if len(values) < 2:
        return False
    rerun = torch.nonzero(failing).reshape(-1)[:_RERUN].tolist()
    name = type(model).__name__
    for sample in rerun:
        alone = run_module(model, values[sample : sample + 1], name)
        if alone.shape != got[sample : sample + 1].shape:
            return False
        if not bool(_same(got[sample : sample + 1].to(alone.dtype), alone).all()):
            return False
    return True


def _locate(model: nn.Module, net: TableNetwork, codes: torch.Tensor, values: torch.Tensor) -> dict[str, Any]:
    """Find the first table node whose codes differ from the model's quantized tensor at the same point."""
    hosts = frozenset(n.meta.modules[-1] for n in net.graph.host_nodes())
    traced = trace(model, host=hosts, example_input=values)
    model_values: dict[str, torch.Tensor] = {}
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            interpreter = _Capture(traced, model_values)  # type: ignore[arg-type]  # not lean: a GraphModule
            interpreter.run(values)
    finally:
        for m, training in flags:
            m.training = training
    _, env = net.runtime.run(codes, capture=True)
    for node in net.graph.table_nodes():
        reference = model_values.get(node.fx_node) if node.fx_node is not None else None
        if reference is None:
            continue
        mine = decode(env[node.name], node).to(reference.dtype) if node.domain is not None else env[node.name]
        differs = ~((mine == reference) | (torch.isnan(mine) & torch.isnan(reference)))
        if differs.any():
            element = tuple(int(i) for i in torch.nonzero(differs[0])[0])
            channel_axis = -1 if node.layout is not None and node.layout.channels_last else 0
            channel = element[channel_axis]
            meta = node.meta
            unit = next(u for u in meta.units if channel in u.out_channels)
            reader = env[net.graph.inputs(node.name)[0]][0]
            index_map = meta.index_map[unit.index][: unit.fan_in]
            if node.spatial_size:
                position = element[1:] if channel_axis == 0 else element[:-1]
                vector = reader[position]
            else:
                position, vector = (), reader.reshape(-1)
            return {
                "node": node.name,
                "unit": unit.index,
                "output": element,
                "position": position,
                "input_codes": tuple(int(v) for v in vector[torch.tensor(index_map)]),
                "table": float(mine[0][element]),
                "model": float(reference[0][element]),
            }
    return {"node": net.output_node.name, "unit": None, "note": "tables agree; the difference arises after them"}


class _Capture(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule, store: dict[str, torch.Tensor]) -> None:
        super().__init__(module)
        self.store = store

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, torch.Tensor):
            self.store[n.name] = result
        return result
