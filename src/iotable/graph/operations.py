"""What a front end registers: its map from source operations to the builders of graph nodes.

Each front end reads its own source (torch steps today; ONNX or QONNX operations next) and keeps its own
:class:`OperationRegistry`: one entry per source operation it understands, naming the builder that turns
one such operation into nodes of the registered node kinds. The graph never imports a front end; a front
end imports the graph and fills its registry. Recognising operations is the front end's business, the node
kinds (:mod:`iotable.graph.kind`) are shared.

Example:
    >>> ops = OperationRegistry("example")
    >>> @ops.register("Identity")
    ... def identity(builder, operation):
    ...     return builder.source(operation)
    >>> ops.builder("Identity") is identity, ops.operations()
    (True, ('Identity',))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from ..errors import GraphError

__all__ = ["OperationRegistry"]

B = TypeVar("B", bound=Callable[..., object])


class OperationRegistry(Generic[B]):
    """A front end's builders by source operation: registered once each, looked up by name.

    Args:
        front_end: the front end's name, for messages (``"torch"``).
    """

    def __init__(self, front_end: str) -> None:
        self.front_end = front_end
        self._builders: dict[str, B] = {}

    def register(self, operation: str) -> Callable[[B], B]:
        """Register the decorated builder for ``operation``.

        Raises:
            GraphError: ``operation`` has a builder already (the front end must choose one).
        """

        def decorate(builder: B) -> B:
            held = self._builders.get(operation)
            if held is not None and held is not builder:
                msg = (
                    f"{self.front_end} front end: operation {operation!r} has a builder already "
                    f"({getattr(held, '__qualname__', held)!r}); unregister it or name the new operation otherwise"
                )
                raise GraphError(msg)
            self._builders[operation] = builder
            return builder

        return decorate

    def builder(self, operation: str) -> B:
        """The builder registered for ``operation``.

        Raises:
            GraphError: the front end has no builder for ``operation``.
        """
        found = self._builders.get(operation)
        if found is None:
            msg = (
                f"{self.front_end} front end: no node builder for operation {operation!r}; expected one of "
                f"{sorted(self._builders)} (register one with {type(self).__name__}.register)"
            )
            raise GraphError(msg)
        return found

    def operations(self) -> tuple[str, ...]:
        """The operations with a builder, in registration order."""
        return tuple(self._builders)

    def __contains__(self, operation: object) -> bool:
        return operation in self._builders

    def __repr__(self) -> str:
        return f"OperationRegistry({self.front_end!r}, {len(self._builders)} operation(s))"
