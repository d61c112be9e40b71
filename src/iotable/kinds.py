"""Layer kinds: one registry entry per kind of torch module, holding everything iotable knows about it.

An entry (:class:`LayerKind`) gives the module classes it covers, how tracing treats them (:class:`Role`:
a mixing layer, an elementwise module, a max-pool on codes or a reshape), their built-in decomposition rule
(the :class:`~iotable.Spec` an undecorated module gets), the fast path that reads their weights, and the
input shape they state. The built-in kinds are registered below; adding a kind is one :func:`register`
call, after which models holding it need no decoration:

    >>> class SumPool1d(torch.nn.Module):  # the sum of each channel over windows of 2
    ...     def forward(self, x):
    ...         return x.unfold(2, 2, 2).sum(-1)
    >>> def windows_of_two(module):  # one unit per channel over each window of 2, stride 2
    ...     return Spec(depthwise=True, kernel_size=(2,), stride=(2,), layout=Layout.NCW, source="SumPool1d")
    >>> kind = register(LayerKind("example.SumPool1d", (SumPool1d,), Role.MIXING, rule=windows_of_two))
    >>> model = torch.nn.Sequential(iotable.nn.Quantize(1), SumPool1d(), iotable.nn.Quantize(2))
    >>> net = precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 2, 4))
    >>> verify(model, net, torch.randint(0, 2, (64, 2, 4)).float()).mismatches
    0
    >>> _ = unregister("example.SumPool1d")

What a *node* of the interlayer graph does at run time, in a bundle and in hardware depends on its node
kind (:mod:`iotable.graph.nodes`), not on the layer it came from: a registered layer becomes table, pool or
reshape nodes like the built-in ones.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .errors import SpecError
from .front.registry import LayerKind, Role, kind_of, register, registered, role_of, unregister
from .front.spec import ELEMENTWISE, Layout, PaddingMode, Spec, mask_fan_in, normalize_padding, pool_geometry

__all__ = ["LayerKind", "Role", "is_elementwise", "kind_of", "register", "registered", "role_of", "unregister"]


def is_elementwise(module: nn.Module) -> bool:
    """Whether ``module`` is of an elementwise kind (it joins the table layer around it)."""
    return role_of(module) is Role.ELEMENTWISE


def _linear(module: nn.Module) -> Spec:
    """One unit per output over every input, or the fan-ins of a pruning mask; for a subclass with a forward of
    its own (LogicNets' ``SparseLinear``: ``F.linear(x, self.weight * self.mask(), self.bias)``), the units its
    structure shows, as a module of the user's own gets them."""
    if type(module).forward is not nn.Linear.forward:
        source = f"built-in rule for nn.Linear: {type(module).__name__} has a forward of its own, units inferred"
        return Spec(layout=Layout.NC, infer=True, source=source)
    if isinstance(getattr(module, "weight_mask", None), torch.Tensor):  # torch.nn.utils.prune: mask = fan-in
        return Spec(
            layout=Layout.NC,
            fan_in=mask_fan_in(module, "weight_mask"),
            source="built-in rule for nn.Linear, fan-ins from its pruning mask (weight_mask)",
        )
    return Spec(layout=Layout.NC, per_output=True, source="built-in rule for nn.Linear")


def _conv(module: Any) -> Spec:
    """One unit per output channel over its group's channels in the window, or a pruning mask's fan-ins."""
    rank = len(module.kernel_size)
    geometry: dict[str, Any] = {
        "kernel_size": tuple(module.kernel_size),
        "stride": tuple(module.stride),
        "dilation": tuple(module.dilation),
        "padding": normalize_padding(module),
        "padding_mode": PaddingMode.parse(module.padding_mode, what=f"nn.{type(module).__name__}"),
        "layout": Layout.NCW if rank == 1 else Layout.NCHW,
    }
    kind = f"nn.{type(module).__name__}"
    if isinstance(getattr(module, "weight_mask", None), torch.Tensor):
        fan_in = mask_fan_in(module, "weight_mask", groups=module.groups)
        source = f"built-in rule for {kind}, fan-ins from its pruning mask (weight_mask)"
        return Spec(fan_in=fan_in, source=source, **geometry)
    return Spec(groups=module.groups, per_output=True, source=f"built-in rule for {kind}", **geometry)


def _avg_pool(module: Any) -> Spec:
    """One unit per channel over its window (a quantizer must follow: see ``needs_quantizer_after``)."""
    rank = 1 if isinstance(module, nn.AvgPool1d) else 2
    kernel, stride, padding = pool_geometry(module, rank)
    if any(padding) and not module.count_include_pad:
        msg = (
            f"{type(module).__name__}(padding={padding}, count_include_pad=False) divides edge windows by fewer "
            "elements than inner ones, so no single table serves every position; use count_include_pad=True "
            "or padding=0"
        )
        raise SpecError(msg)
    return Spec(
        depthwise=True,
        kernel_size=kernel,
        stride=stride,
        dilation=(1,) * rank,
        padding=tuple((p, p) for p in padding),  # torch pools pad with zeros, symmetrically
        layout=Layout.NCW if rank == 1 else Layout.NCHW,
        source=f"built-in rule for nn.{type(module).__name__} (one unit per channel over its window)",
    )


def _elementwise(module: nn.Module) -> Spec:
    return Spec(elementwise=True, source=f"built-in elementwise rule for {type(module).__name__}")


def _in_features(module: Any) -> tuple[int, ...]:
    return (int(module.in_features),)


register(LayerKind("nn.Linear", (nn.Linear,), Role.MIXING, _linear, fast_path="linear", input_shape=_in_features))
register(LayerKind("nn.Conv1d", (nn.Conv1d,), Role.MIXING, _conv, fast_path="conv"))
register(LayerKind("nn.Conv2d", (nn.Conv2d,), Role.MIXING, _conv, fast_path="conv"))
register(LayerKind("nn.AvgPool1d", (nn.AvgPool1d,), Role.MIXING, _avg_pool, needs_quantizer_after=True))
register(LayerKind("nn.AvgPool2d", (nn.AvgPool2d,), Role.MIXING, _avg_pool, needs_quantizer_after=True))
register(LayerKind("nn.MaxPool1d", (nn.MaxPool1d,), Role.POOL))
register(LayerKind("nn.MaxPool2d", (nn.MaxPool2d,), Role.POOL))
register(LayerKind("nn.Flatten", (nn.Flatten,), Role.RESHAPE))
for _cls in ELEMENTWISE:
    _name = f"nn.{_cls.__name__}" if _cls.__module__.startswith("torch.") else f"{_cls.__module__}.{_cls.__name__}"
    register(LayerKind(_name, (_cls,), Role.ELEMENTWISE, _elementwise))
