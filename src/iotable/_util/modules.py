"""Running a module as a black box: its eval mode, its dtype, and one forward pass with errors in context.

:func:`eval_mode` is the one place iotable switches a model's training flags: every forward it runs for a
plan, a trace, a probe, an enumeration or a quantizer check runs inside it, and every flag is restored after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from ..errors import EnumerationError, IOTableError

__all__ = ["eval_mode", "module_dtype", "run_module"]


def module_dtype(module: nn.Module) -> tuple[torch.dtype, torch.device]:
    """Float dtype and device the module computes in (its first floating parameter or buffer)."""
    for t in list(module.parameters()) + list(module.buffers()):
        if t.is_floating_point():
            return t.dtype, t.device
    return torch.float32, torch.device("cpu")


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Put ``module`` (every submodule) in eval mode for the block, then restore each training flag.

    Around many forward passes of one enumeration (with ``run_module(..., switched=True)``), this saves and
    restores the flags once instead of on every call.
    """
    flags = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        yield
    finally:
        for m, training in flags:
            m.training = training


def run_module(module: nn.Module, x: torch.Tensor, name: str, *, switched: bool = False) -> torch.Tensor:
    """Run ``module`` in eval and inference mode on ``x``, restoring its training flags afterwards.

    ``switched``: the caller holds :func:`eval_mode` around this call; the flags are left alone.
    """
    try:
        with nullcontext() if switched else eval_mode(module), torch.inference_mode():
            out = module(x)
    except IOTableError:
        raise
    except Exception as exc:  # the module is a black box: any failure is reported with context
        msg = f"{name}: forward failed on an input of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}"
        raise EnumerationError(msg) from exc
    if not isinstance(out, torch.Tensor):
        msg = f"{name}: expected forward to return one tensor, received {type(out).__name__}"
        raise EnumerationError(msg)
    return out
