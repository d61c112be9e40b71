"""Plain ONNX out: a table network as a standard ONNX model that onnxruntime runs with no custom operator.

:func:`export_onnx` writes the network's interlayer graph as standard operators (see docs/graph.md, section
"Plain ONNX out"): the input encoded to codes, each table layer as packed address arithmetic and one ``Gather``
from its units' tables stacked in one initializer, the structural kinds as ``Gather`` with constant indices,
``Concat`` and ``Reshape``, the arithmetic kinds as integer operators, and the output decoded to values. The
package ``onnx`` is the optional extra ``iotable[onnx]``, imported only here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .._util.files import atomic_write, path_text
from ..errors import ModelError, ONNXNotInstalledError, OptionError
from ..graph.nodes import Node, PadMeta, PoolMeta, SumMeta, TableMeta, ThresholdMeta
from ..runtime.codes import codes_dtype

__all__ = ["DEFAULT_OPSET", "OPSETS", "PROTOBUF_LIMIT", "export_onnx"]

#: The opsets :func:`export_onnx` writes (every operator it uses has its current form in each).
OPSETS = range(13, 22)
#: The opset written unless asked otherwise.
DEFAULT_OPSET = 17
#: The largest serialized ONNX model protobuf allows (2 GiB less one byte): initializers beyond it cannot be written.
PROTOBUF_LIMIT = 2**31 - 1

_INSTALL = "pip install 'iotable[onnx]'"
_INT64 = 7  # onnx.TensorProto.INT64
_FLOAT = 1  # onnx.TensorProto.FLOAT


def export_onnx(net: Any, path: str | os.PathLike[str], *, opset: int = DEFAULT_OPSET, codes: bool = False) -> Path:
    """Write ``net`` as a standard ONNX model that computes exactly what ``net.run`` computes.

    The model has one input ``input`` and one output ``output``, each ``(N, *shape)`` with a free batch axis
    ``N``. With ``codes=False`` the input is ``float32`` values of the input domain (each encoded to the code
    of its nearest domain value: a value ``net.run`` accepts gets its own code; one it refuses is not refused
    here) and the output is ``float32`` values, as ``net.run(x)`` returns them. With ``codes=True`` the input
    is ``int64`` codes and the output ``int64`` codes, as ``net.run(x, codes=True, return_codes=True)`` (codes
    outside the input domain are not refused: ONNX has no error to raise); a network that outputs raw values
    outputs them in both forms. The model uses the default ONNX domain only,
    opset ``opset`` (13 to 21; default 17) and the lowest IR version that opset needs (IR 7 for opset 13,
    8 for 17, 10 for 21). It is checked with ``onnx.checker.check_model(full_check=True)`` and written
    atomically: ``path`` holds the whole model or is left as it was.

    Args:
        net: a :class:`~iotable.TableNetwork` with no host nodes and no partial table without a don't-care value.
        path: the ``.onnx`` file to write, in an existing folder.
        opset: the ONNX opset of the default domain.
        codes: take and return codes instead of values.

    Returns:
        The path written.

    Raises:
        OptionError: ``net`` is not a table network, ``opset`` is not supported, or ``path`` is not a file path in
            an existing folder.
        ModelError: a node ONNX cannot hold (a host node, a kind with no lowering, a partial table without a
            don't-care value), or initializers past ONNX's 2 GiB limit.
        ONNXNotInstalledError: the package ``onnx`` is missing.

    Example:
        >>> import tempfile, torch, onnxruntime
        >>> model = torch.nn.Sequential(torch.nn.Linear(3, 2), iotable.nn.Quantize(2))
        >>> net = iotable.precompute(model, input_domain=iotable.Domain.uniform(2))
        >>> path = iotable.export_onnx(net, Path(tempfile.mkdtemp()) / "net.onnx")
        >>> x = torch.tensor(iotable.Domain.uniform(2).values, dtype=torch.float32)[torch.randint(0, 4, (5, 3))]
        >>> got = onnxruntime.InferenceSession(str(path)).run(None, {"input": x.numpy()})[0]
        >>> bool((got == net.run(x).numpy()).all())
        True
    """
    target = _check_arguments(net, path, opset, codes)
    onnx = _onnx()
    _check_nodes(net)
    _check_size(net)
    model = _build(onnx, net, opset, codes)
    size = model.ByteSize()
    if size > PROTOBUF_LIMIT:  # the count above is of the largest initializers only
        msg = f"export_onnx: the model takes {size:,} bytes, past ONNX's protobuf limit of {PROTOBUF_LIMIT:,} bytes"
        raise ModelError(f"{msg} (2 GiB); use fewer or smaller tables, or export the layers apart")
    onnx.checker.check_model(model, full_check=True)
    atomic_write(target, model.SerializeToString())
    return target


def _onnx() -> Any:
    """The ``onnx`` package, or the error that names the extra to install."""
    try:
        import onnx
        import onnx.checker
        import onnx.helper
        import onnx.numpy_helper
    except ImportError:
        msg = f"iotable.export_onnx needs the package onnx; install it with {_INSTALL}"
        raise ONNXNotInstalledError(msg) from None
    return onnx


def _check_arguments(net: Any, path: Any, opset: Any, codes: Any) -> Path:
    from ..network.network import TableNetwork

    if not isinstance(net, TableNetwork):
        msg = (
            f"export_onnx: expected a TableNetwork (iotable.precompute of a whole model), received "
            f"{type(net).__name__}; a single layer's tables have no graph to export: precompute the whole model"
        )
        raise OptionError(msg)
    if isinstance(opset, bool) or not isinstance(opset, int) or opset not in OPSETS:
        msg = f"export_onnx: opset must be an integer from {OPSETS[0]} to {OPSETS[-1]}, received {opset!r}"
        raise OptionError(msg)
    if not isinstance(codes, bool):
        msg = f"export_onnx: codes must be True or False, received {codes!r}"
        raise OptionError(msg)
    fix = "give a file name such as 'net.onnx'"
    text = path_text(path, what="export_onnx", noun="a file path", subject="path", fix=fix, error=OptionError)
    target = Path(text)
    if not target.parent.is_dir():
        msg = f"export_onnx: the folder of {text!r} does not exist; create it first or {fix} in an existing folder"
        raise OptionError(msg)
    if target.is_dir():
        msg = f"export_onnx: {text!r} is a directory; {fix} inside it"
        raise OptionError(msg)
    return target


def _check_nodes(net: Any) -> None:
    """Refuse, by name, every node the model cannot hold, before anything is built."""
    from ._lower import Lowering

    hosts = [node.name for node in net.graph.nodes if node.kind.hosted]
    if hosts:
        msg = (
            f"export_onnx: host node(s) {', '.join(map(repr, hosts))} run float modules with torch, which plain "
            "ONNX from tables cannot hold; quantize those modules so that they become tables and precompute without "
            "host=, or precompute only the part of the model before them and run the rest with torch"
        )
        raise ModelError(msg)
    for node in net.graph.nodes:
        if not node.kind.is_input and not hasattr(Lowering, f"_{node.kind.value}"):
            msg = (
                f"export_onnx: node {node.name!r} is of kind {node.kind.value!r}, which has no ONNX lowering; "
                "export a network of the built-in kinds"
            )
            raise ModelError(msg)
        if isinstance(node.meta, TableMeta):
            for u, table in enumerate(net.runtime.layers[node.meta.layer].tables):
                if not table.is_dense and table.dont_care is None:
                    msg = (
                        f"export_onnx: table layer {node.name!r} unit {u} is partial and has no don't-care value, so "
                        "a missing row would have no output in ONNX; restrict with default= (a value for missing "
                        "rows), or export the dense network"
                    )
                    raise ModelError(msg)


def _check_size(net: Any) -> None:
    """Refuse a network whose initializers pass ONNX's protobuf limit, counted from the graph before building."""
    total = sum(_initializer_bytes(net, node) for node in net.graph.nodes)
    if total > PROTOBUF_LIMIT:
        msg = (
            f"export_onnx: the network's tables and index tensors take {total:,} bytes, past ONNX's protobuf limit "
            f"of {PROTOBUF_LIMIT:,} bytes (2 GiB); use fewer or smaller tables (fewer input bits per unit), or "
            "export the layers apart"
        )
        raise ModelError(msg)


def _initializer_bytes(net: Any, node: Node) -> int:
    """The bytes of the initializers a node's lowering holds (its largest ones: tables and index tensors)."""
    meta, size = node.meta, math.prod(node.shape)
    if isinstance(meta, TableMeta):
        tables = net.runtime.layers[meta.layer].tables
        fan_out = max(t.fan_out for t in tables)
        top = max((len(d) for d in node.channel_domains() or ()), default=2**32) - 1
        itemsize = 4 if node.domain is None else codes_dtype(0, top).itemsize
        rows = sum(math.prod(t.radices) for t in tables)
        return rows * fan_out * itemsize + 16 * meta.index_map.size + 16 * len(meta.units) + 8 * size
    if isinstance(meta, PoolMeta):
        return 8 * size * math.prod(meta.kernel_size)
    if isinstance(meta, SumMeta):
        return 16 * meta.index_map.size
    if isinstance(meta, ThresholdMeta):
        return 8 * meta.thresholds.size
    if isinstance(meta, PadMeta) or node.kind.windowed:
        return 8 * size
    return 0


def _build(onnx: Any, net: Any, opset: int, codes: bool) -> Any:
    """The ONNX model of ``net`` (checked nodes and size)."""
    from ._lower import Lowering

    lowering = Lowering(onnx, net, opset)
    first, last = net.graph.nodes[0], net.graph.nodes[-1]
    helper = onnx.helper
    x = helper.make_tensor_value_info("input", _INT64 if codes else _FLOAT, ["N", *first.shape])
    lowering.values[first.name] = "input" if codes else lowering.encode("input", first)
    for node in net.graph.nodes[1:]:
        lowering.lower(node)
    out = lowering.values[last.name]
    if last.domain is not None and not codes:
        out = lowering.decode(out, last)
    raw = last.domain is None
    lowering.nodes.append(helper.make_node("Identity", [out], ["output"], name="output"))
    y = helper.make_tensor_value_info("output", _INT64 if codes and not raw else _FLOAT, ["N", *last.shape])
    graph = helper.make_graph(lowering.nodes, "iotable", [x], [y], initializer=lowering.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(
        graph, opset_imports=opsets, producer_name="iotable", ir_version=helper.find_min_ir_version_for(opsets)
    )
    return model
