"""Checks of a whole model before any work: its float type, and modules left in training mode.

Table networks carry float32 values (domains are float32 values, raw outputs float32, host nodes are fed
float32), so a model computing in another float type is refused up front with the fix, rather than giving
tables whose decoded values differ from the model's in the last bits. A model left in training mode is
evaluated in eval mode (as hardware runs it); modules whose behaviour differs between the two are named in
a warning.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import nn

from ..brevitas import is_brevitas
from ..errors import IOTableWarning

__all__ = ["check_float32", "warn_training"]


def check_float32(model: nn.Module, what: str, error: type[Exception]) -> None:
    """Raise ``error`` naming the first floating parameter or buffer of ``model`` that is not float32."""
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in named:
            if tensor.is_floating_point() and tensor.dtype != torch.float32:
                msg = (
                    f"{what}: {type(model).__name__} computes in {tensor.dtype} ({kind} {name!r}); table networks "
                    "carry float32 values (domains, raw outputs and host nodes), so their decoded outputs would "
                    f"differ from this model's in the last bits: convert the model with model.float() before {what}"
                )
                raise error(msg)


def _difference(m: nn.Module) -> str | None:
    """How ``m`` behaves differently in training mode, when it is known to."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return "drops inputs at random in training mode, passes them unchanged in eval mode"
    if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        if m.track_running_stats:
            return "normalises with batch statistics (and updates its running ones) in training mode"
        return None
    if is_brevitas(m):
        return "a brevitas layer: quantizers with statistics-based scaling collect statistics in training mode"
    forward = type(m).forward
    if not type(m).__module__.startswith("torch.") and forward is not nn.Module.forward:
        try:
            source = inspect.getsource(forward)
        except (OSError, TypeError):  # built in, or defined where no source is kept
            return None
        if "self.training" in source:
            return "its forward reads self.training"
    return None


def warn_training(model: nn.Module, what: str) -> None:
    """Warn (:class:`~iotable.IOTableWarning`) when modules of ``model`` that behave differently in training mode
    are in it; iotable evaluates them in eval mode."""
    found = []
    inside_brevitas: set[str] = set()  # a brevitas layer is named once, not with every proxy inside it
    for name, m in model.named_modules():
        if any(name.startswith(f"{outer}.") for outer in inside_brevitas):
            continue
        if is_brevitas(m):
            inside_brevitas.add(name)
        if m.training:
            difference = _difference(m)
            if difference is not None:
                found.append(f"{name or type(model).__name__!r} ({type(m).__name__}: {difference})")
    if found:
        shown = "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else "")
        msg = (
            f"{what}: the model is in training mode; iotable evaluates it in eval mode, as hardware runs it, where "
            f"these modules behave differently: {shown}. Call model.eval() before {what} to silence this warning"
        )
        warnings.warn(msg, IOTableWarning, stacklevel=3)
