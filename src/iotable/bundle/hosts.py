"""Host modules in bundles: a stand-in for a module the caller did not hand back, and setting a caller's
module's weights from the bundle. A bundle stores a host module's class name and weights, never its code."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import BundleError
from ..graph.graph import Graph

__all__ = ["unavailable_hosts"]


def unavailable_hosts(graph: Graph) -> list[str]:
    """The host nodes of a loaded network's graph whose module was not passed to :func:`iotable.load`.

    The bundle holds their class name and weights; running the network through one of them raises
    :class:`BundleError` naming it, while what does not run them (the summary, cost, ``iotable check`` and
    ``iotable export``, which writes the table part) works.

    Example:
        >>> import pathlib, tempfile
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), iotable.nn.Quantize(2), torch.nn.Linear(2, 1))
        >>> net = precompute(model.eval(), input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4), host=["2"])
        >>> path = save(net, pathlib.Path(tempfile.mkdtemp()) / "net")
        >>> unavailable_hosts(load(path).graph), unavailable_hosts(load(path, host_modules={"2": model[2]}).graph)
        (['2'], [])
    """
    return [n.name for n in graph.host_nodes() if isinstance(n.meta.module, _MissingHost)]


class _MissingHost(nn.Module):
    """Stands in for a host module the caller did not pass to :func:`load`; running it is an error.

    It keeps the bundle's class name and weights, so that saving the loaded network again loses nothing.
    """

    def __init__(self, node: str, cls: str, state: dict[str, np.ndarray], missing: list[str]) -> None:
        super().__init__()
        self.node, self.cls, self.state, self.missing = node, cls, state, missing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modules = ", ".join(f"{name!r}: ..." for name in self.missing)
        msg = (
            f"host node {self.node!r} has no module: a bundle stores a host module's class ({self.cls}) and "
            f"weights, not its code. Pass the host modules when loading: iotable.load(path, host_modules="
            f"{{{modules}}}); their weights are then set from the bundle"
        )
        raise BundleError(msg)


def _attach(name: str, module: Any, state: dict[str, np.ndarray]) -> nn.Module:
    """Set a caller's host module's weights from the bundle; the keys and shapes must match."""
    if not isinstance(module, nn.Module):
        msg = f"load: host_modules[{name!r}] must be a torch.nn.Module, received {type(module).__name__}"
        raise BundleError(msg)
    own = module.state_dict()
    missing, extra = sorted(set(state) - set(own)), sorted(set(own) - set(state))
    if missing or extra:
        msg = (
            f"load: host_modules[{name!r}] ({type(module).__name__}) does not fit host node {name!r}: the bundle "
            f"stores {sorted(state)}, the module has {sorted(own)}; pass a module of the saved architecture"
        )
        raise BundleError(msg)
    for key, array in state.items():
        if tuple(own[key].shape) != array.shape:
            msg = (
                f"load: host_modules[{name!r}] state {key!r} has shape {tuple(own[key].shape)}, the bundle "
                f"stores {array.shape}; pass a module of the saved architecture"
            )
            raise BundleError(msg)
    try:
        module.load_state_dict({k: torch.from_numpy(np.array(a)) for k, a in state.items()}, strict=True)
    except RuntimeError as exc:
        msg = f"load: host_modules[{name!r}]: the bundle's weights do not load into it: {exc}"
        raise BundleError(msg) from None
    return module
