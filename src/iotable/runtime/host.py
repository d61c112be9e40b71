"""A host node's kernels: its torch module run on the decoded values of its input."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._util.modules import run_module
from ..errors import EnumerationError, IOTableError
from ..graph.graph import Graph, Node
from ..graph.nodes import HostMeta
from .codes import Kernel, _as_tensor, channel_values, decode


def host_kernel(graph: Graph, node: Node, *, decoded: bool = False) -> Kernel:
    """A host node's module on its input's values (``decoded``: the input already holds them)."""
    assert isinstance(node.meta, HostMeta)  # a checked graph
    module = node.meta.module
    producer = graph.producers(node.name)[0]
    table = channel_values(producer)

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        # Contiguous, as the model hands its tensors on: a kernel may sum in another order on other strides.
        values = (xs[0] if decoded else decode(xs[0], producer, table)).contiguous()
        return run_module(module, values, node.name, switched=True)  # in eval_mode for the run

    return kernel


def small_host_kernel(graph: Graph, node: Node, *, decoded: bool) -> Kernel:
    """:func:`host_kernel` for a few samples: numpy codes decoded by numpy, the module called directly
    (the run holds eval and inference mode, see :meth:`Runtime.run <iotable.runtime.runtime.Runtime.run>`)."""
    assert isinstance(node.meta, HostMeta)  # a checked graph
    module = node.meta.module
    producer = graph.producers(node.name)[0]
    full = host_kernel(graph, node, decoded=decoded)
    table = channel_values(producer)
    values = None if table is None or len(table[1]) > 1 else table[0].numpy()

    def kernel(xs: list[Any]) -> torch.Tensor:
        x = xs[0]
        if not isinstance(x, np.ndarray) or (values is None and not decoded):
            return full([_as_tensor(x)])
        inputs = x if decoded or values is None else values[x]
        try:
            out = module(torch.from_numpy(np.ascontiguousarray(inputs)))
        except IOTableError:
            raise
        except Exception as exc:  # the host is a black box: its failure reported with context, as run_module
            msg = f"{node.name}: forward failed on an input of shape {inputs.shape}: {type(exc).__name__}: {exc}"
            raise EnumerationError(msg) from exc
        if not isinstance(out, torch.Tensor):
            return full([_as_tensor(x)])  # run_module reports it
        return out

    return kernel
