"""A front end's registry of node builders by source operation: the torch front end's, and the rules any keeps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain
from iotable.errors import GraphError
from iotable.graph.operations import OperationRegistry
from iotable.network.builder import TORCH_OPERATIONS, GraphBuilder


def test_the_torch_front_end_builds_every_step_kind_through_its_registry() -> None:
    """Each step kind the torch front end makes has a registered builder, a GraphBuilder method."""
    assert set(TORCH_OPERATIONS.operations()) == {
        "input", "output", "table", "reshape", "pool", "concat", "host", "sum", "argmax",
    }  # fmt: skip
    assert TORCH_OPERATIONS.front_end == "torch"
    assert all(getattr(GraphBuilder, f"_{op}") is TORCH_OPERATIONS.builder(op) for op in TORCH_OPERATIONS.operations())


def test_a_network_is_built_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """precompute asks the registry for each step's builder: a step kind taken out of it is refused by name."""
    model = nn.Sequential(nn.Linear(2, 2), iotable.nn.Quantize(1)).eval()
    monkeypatch.delitem(TORCH_OPERATIONS._builders, "table")
    with pytest.raises(GraphError, match=r"torch front end: no node builder for operation 'table'; expected one of"):
        iotable.precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 2))


def test_an_operation_is_registered_once() -> None:
    """A second builder for one operation is refused naming the first; the same builder again is accepted."""
    ops: OperationRegistry = OperationRegistry("onnx")

    def gemm(builder: object, operation: object) -> None: ...

    def other(builder: object, operation: object) -> None: ...

    ops.register("Gemm")(gemm)
    ops.register("Gemm")(gemm)
    with pytest.raises(GraphError, match=r"onnx front end: operation 'Gemm' has a builder already \('.*gemm'\)"):
        ops.register("Gemm")(other)
    assert "Gemm" in ops and "Conv" not in ops and ops.builder("Gemm") is gemm
    with pytest.raises(
        GraphError, match=r"onnx front end: no node builder for operation 'Conv'; expected one of \['Gemm'\]"
    ):
        ops.builder("Conv")
