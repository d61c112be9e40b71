"""``verify`` of a QONNX model: the table network against qonnx's own executor (``execute_onnx``, float32), in
the output-code domain; a mismatch is located at the first table whose codes differ, and its row is said to
be a float32 tie (a value within float32 rounding of a quantization boundary) when it is one.

The model given to the executor is a copy with every ``quantization_annotation`` removed and no qonnx
transform applied: qonnx evaluates strings stored in some annotations (``tensor_layout``,
``tensor_sparsity``), which a file must never get to run.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import InputError, ModelError, ONNXNotInstalledError
from ..network.network import TableNetwork
from ..network.verify import VerifyReport
from ..runtime.runtime import decode
from .network import plan_onnx, unit_rows
from .read import load_proto, onnx_module

__all__ = ["verify_onnx"]


def _executor(what: str) -> tuple[Any, Any]:
    try:
        from qonnx.core.modelwrapper import ModelWrapper
        from qonnx.core.onnx_exec import execute_onnx
    except ImportError:
        msg = (
            f"{what}: checking a QONNX model needs qonnx and onnxruntime, which are not installed; install the "
            "extra: pip install 'iotable[onnx]'"
        )
        raise ONNXNotInstalledError(msg) from None
    return ModelWrapper, execute_onnx


def _proto(model: Any, what: str) -> Any:
    """The model as a ``ModelProto`` the executor may run: read as :func:`read_graph` reads it, annotations
    removed."""
    onnx = onnx_module(what)
    if isinstance(model, onnx.ModelProto):
        proto = copy.deepcopy(model)
    else:
        proto, _ = load_proto(model, what)
    del proto.graph.quantization_annotation[:]
    return proto


def _batched(proto: Any, computed: set[str], batch: int) -> Any:
    """A copy of ``proto`` whose computed tensors have ``batch`` samples (constants keep their shapes)."""
    result = copy.deepcopy(proto)
    graph = result.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name in computed and value.type.tensor_type.shape.dim:
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_value = batch
    return result


def _reference(proto: Any, input_name: str, output_name: str, values: np.ndarray, computed: set[str], what: str) -> Any:
    """The reference's outputs on ``values`` ``(N, ...)``: onnxruntime for a graph of standard operations (the
    QCDQ form), qonnx's executor for one with QONNX operations; in one batch where the graph allows it, else
    sample by sample."""
    qonnx_ops = any(node.domain not in ("", "ai.onnx") for node in proto.graph.node)
    run = _executor_run(what) if qonnx_ops else _runtime_run(what)
    try:
        return np.asarray(run(_batched(proto, computed, len(values)), input_name, output_name, values))
    except Exception:  # a shape fixed to one sample inside the graph (a Reshape to (1, -1)): one at a time
        pass
    single = _batched(proto, computed, 1)
    outputs = []
    for sample in values:
        try:
            outputs.append(np.asarray(run(single, input_name, output_name, sample[None])))
        except Exception as exc:  # the reference failing is the user's model failing: say so, with its words
            reference = "qonnx's execute_onnx" if qonnx_ops else "onnxruntime"
            msg = f"{what}: {reference} fails on the model ({type(exc).__name__}: {str(exc)[:200]})"
            raise ModelError(msg) from None
    return np.concatenate(outputs)


def _executor_run(what: str) -> Any:
    wrapper_class, execute = _executor(what)

    def run(proto: Any, input_name: str, output_name: str, values: np.ndarray) -> Any:
        return execute(wrapper_class(proto), {input_name: values})[output_name]

    return run


def _runtime_run(what: str) -> Any:
    try:
        import onnxruntime
    except ImportError:
        msg = f"{what}: checking an ONNX model needs onnxruntime, which is not installed; pip install 'iotable[onnx]'"
        raise ONNXNotInstalledError(msg) from None

    def run(proto: Any, input_name: str, output_name: str, values: np.ndarray) -> Any:
        del proto.graph.value_info[:]  # shapes of one sample; onnxruntime infers them again
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: initializers listed as inputs are warned about otherwise
        session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return session.run([output_name], {input_name: values})[0]

    return run


def _intermediates(proto: Any, input_name: str, names: list[str], values: np.ndarray) -> dict[str, Any]:
    """The reference's tensors ``names`` on one sample: qonnx's executor's whole context for a graph with QONNX
    operations, onnxruntime asked for them as extra outputs for one of standard operations."""
    if any(node.domain not in ("", "ai.onnx") for node in proto.graph.node):
        wrapper_class, execute = _executor("verify")
        return dict(execute(wrapper_class(proto), {input_name: values}, True))
    onnx = onnx_module("verify")
    known = {v.name for v in proto.graph.output}
    for name in names:
        if name not in known:
            proto.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    run = _runtime_run("verify")
    results = {}
    for name in names:
        results[name] = run(copy.deepcopy(proto), input_name, name, values)
    return results


def _nearest_codes(values: np.ndarray, domain_values: np.ndarray) -> np.ndarray:
    return np.abs(values.reshape(len(values), -1, 1) - domain_values[None, None, :]).argmin(axis=2)


def verify_onnx(model: Any, net: TableNetwork, inputs: Any, *, codes: bool = False) -> VerifyReport:
    """Compare ``net`` with qonnx's ``execute_onnx`` on ``model`` (a path or ``onnx.ModelProto``), in output codes.

    Returns:
        A :class:`~iotable.network.verify.VerifyReport`; for the first mismatching sample it names the first
        table node whose codes differ from the executor's tensor at the same point, the unit, its input codes,
        both output codes, the row's value (float64, or float32 where the layer computes in float32 as the model
        does: after an average pool or a residual add), and whether the row is a float32 tie (``tie``: the value
        lies within float32 rounding of a quantization boundary, where float32 arithmetic may round either way).
    """
    what = "verify"
    if not isinstance(net, TableNetwork):
        msg = f"verify: expected a TableNetwork second (from iotable.precompute), received {type(net).__name__}"
        raise ModelError(msg)
    parsed, walk = plan_onnx(model, what=what)
    input_codes = net.encode_input(inputs, codes=codes, what=what)
    if input_codes.shape[0] == 0:
        msg = "verify: expected a batch of at least one sample, received none; pass the inputs to check"
        raise InputError(msg)
    output = net.output_node
    if not isinstance(output.domain, Domain):
        msg = "verify: the network's output is not one domain of codes; a QONNX network ends in a quantizer"
        raise ModelError(msg)
    values = decode(input_codes, net.input_node).numpy().astype(np.float32)
    proto = _proto(model, what)
    computed = {t for op in parsed.ops for t in op.outputs if t not in walk.constants} | {parsed.input_name}
    reference = _reference(proto, parsed.input_name, parsed.output_name, values, computed, what)
    expected = _nearest_codes(reference.astype(np.float64), np.asarray(output.domain.values))
    got = net.run(input_codes, codes=True, return_codes=True).numpy().reshape(len(values), -1)
    if expected.shape != got.shape:
        msg = f"verify: the network outputs {got.shape[1]} element(s) per sample, the model {expected.shape[1]}"
        raise ModelError(msg)
    same = (expected == got).all(axis=1)
    mismatches = int((~same).sum())
    first = None
    if mismatches:
        sample = int(np.flatnonzero(~same)[0])
        first = _locate(net, walk, proto, parsed, input_codes[sample : sample + 1], values[sample : sample + 1])
        first["sample"] = sample
        tie = _TIE32 if first.pop("float32", False) else _TIE
        first["note"] = first.get("note") or (tie if first["tie"] else _NOT_TIE)
    return VerifyReport(samples=len(values), mismatches=mismatches, first=first)


_TIE = (
    "a float32 tie: the row's exact value lies within float32 rounding of a quantization boundary or threshold, "
    "which the reference's float32 arithmetic rounds the other way; the table holds the exact result"
)
_TIE32 = (
    "a float32 tie: the row's value lies within float32 rounding of a quantization boundary or threshold; the "
    "layer computes in float32 as the model does (after an average pool or a residual add), but where a step's "
    "float32 result is the exact value rounded once (a matrix product's sum, a sigmoid or tanh), the reference's "
    "own float32 arithmetic may round it the other way"
)
_NOT_TIE = "not a float32 tie: the table differs from the model's own semantics"


def _locate(net: TableNetwork, walk: Any, proto: Any, parsed: Any, codes: Any, values: np.ndarray) -> dict[str, Any]:
    """The first table node whose output codes differ from the executor's tensor of the same name."""
    computed = {t for op in parsed.ops for t in op.outputs if t not in walk.constants} | {parsed.input_name}
    wanted = [n.fx_node for n in net.graph.table_nodes() if n.fx_node is not None]
    context = _intermediates(_batched(proto, computed, 1), parsed.input_name, wanted, values)
    _, env = net.runtime.run(codes, capture=True)
    for node in net.graph.table_nodes():
        if node.fx_node is None or node.fx_node not in context:
            continue
        domain = node.domain
        assert isinstance(domain, Domain)  # a QONNX table layer ends in one quantizer
        reference = _nearest_codes(np.asarray(context[node.fx_node], np.float64), np.asarray(domain.values))[0]
        mine = env[node.name].numpy().reshape(-1)
        differs = np.flatnonzero(reference != mine)
        if not differs.size:
            continue
        element = int(differs[0])
        meta = node.meta
        plan = walk.planned[meta.layer].plan
        taps, positions = plan.geometry.window, math.prod(node.shape[1:]) if len(node.shape) > 1 else 1
        unit = next(u for u in meta.units if element // positions in u.out_channels)
        # the reader holds, per position, every input channel's window (channel-major): the unit's row is its
        # channels' taps at the element's position
        reader = env[net.graph.inputs(node.name)[0]].numpy().reshape(positions, -1)[element % positions]
        row = reader[np.asarray([c * taps + t for c in unit.in_channels for t in range(taps)])][None, :]
        _, near, value = unit_rows(walk.planned[meta.layer], unit.index, row)
        return {
            "node": node.name,
            "unit": unit.index,
            "output": element,
            "input_codes": tuple(int(v) for v in row[0]),
            "table": int(mine[element]),
            "model": int(reference[element]),
            "value": float(value[0]),
            "tie": bool(near[0]),
            "float32": walk.planned[meta.layer].float32,
        }
    return {
        "node": net.output_node.name,
        "unit": None,
        "tie": False,
        "note": "tables agree; the difference is after them",
    }
