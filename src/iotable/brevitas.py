"""brevitas models: read brevitas quantizers as iotable domains (the optional extra ``iotable[brevitas]``).

With this extra, whole-model :func:`iotable.precompute` takes brevitas models as they are: every brevitas
quantizer (``QuantIdentity``, ``QuantReLU``, ``QuantHardTanh``, ``QuantSigmoid``, ``QuantTanh``, and a
``QuantLinear`` / ``QuantConv1d`` / ``QuantConv2d`` built with ``output_quant=``) is a quantizer like
:class:`iotable.nn.Quantize`, ``QuantLinear`` and ``QuantConv1d``/``2d`` are mixing layers under the
built-in ``nn.Linear`` / ``nn.Conv1d`` / ``nn.Conv2d`` rules (they subclass those), and the tables come
from the modules' own forward, so weight quantization (per-tensor or per-channel) and brevitas' rounding
are reproduced bit for bit.

:func:`quantizer_domain` reads a quantizer's :class:`~iotable.Domain` through its brevitas proxy:
``scale()``, ``zero_point()``, ``bit_width()``, ``is_signed`` and ``is_narrow_range``. brevitas outputs
``(q - zero_point) * scale`` for an integer ``q`` in ``[min, max]`` (rounded half to even, then clamped);
the domain holds exactly those float values, computed with the same operations in the quantizer's dtype.

brevitas itself is imported only when a brevitas module is met; :class:`BrevitasNotInstalledError` names
the extra to install.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from torch import nn

from ._util.modules import eval_mode
from .domain import Domain
from .errors import BrevitasNotInstalledError, DomainError, ModelError, UnsupportedQuantizerError

__all__ = ["MIN_VERSION", "BrevitasNotInstalledError", "UnsupportedQuantizerError", "quantizer_domain"]

#: The oldest brevitas release whose quantizer proxies this module reads.
MIN_VERSION = (0, 13)

_INSTALL = 'pip install "iotable[brevitas]"'
_PER_TENSOR_FIX = (
    "iotable needs one scale and one zero point per quantizer (per-tensor activation scaling): build it with "
    "scaling_per_output_channel=False (per-channel *weight* scales are fine)"
)


def is_brevitas(module: nn.Module) -> bool:
    """Whether ``module`` is a brevitas module (or a subclass of one), without importing brevitas."""
    return any(c.__module__.partition(".")[0] == "brevitas" for c in type(module).__mro__)


def _brevitas() -> Any:
    """Import brevitas, or raise :class:`BrevitasNotInstalledError` with the install command."""
    try:
        import brevitas
    except ImportError:
        msg = f"iotable.brevitas needs brevitas >= {'.'.join(map(str, MIN_VERSION))}; install it with {_INSTALL}"
        raise BrevitasNotInstalledError(msg) from None
    version = tuple(int(v) for v in re.findall(r"\d+", getattr(brevitas, "__version__", "0"))[:2])
    if version < MIN_VERSION:
        msg = (
            f"iotable.brevitas needs brevitas >= {'.'.join(map(str, MIN_VERSION))}, found {brevitas.__version__}; "
            f"upgrade it with {_INSTALL}"
        )
        raise BrevitasNotInstalledError(msg)
    return brevitas


def _output_proxy(module: nn.Module) -> Any:
    """The activation quantizer proxy whose values a brevitas module outputs, or ``None`` when it has none."""
    _brevitas()
    from brevitas.nn.quant_layer import QuantNonLinearActLayer, QuantWeightBiasInputOutputLayer
    from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase

    if isinstance(module, ActQuantProxyFromInjectorBase):
        proxy = module
    elif isinstance(module, QuantNonLinearActLayer):
        proxy = module.act_quant
    elif isinstance(module, QuantWeightBiasInputOutputLayer) and isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
        proxy = module.output_quant  # a layer built with output_quant=: a mixing layer that ends in a quantizer
    else:
        return None
    return proxy if proxy.is_quant_enabled else None


def _read(proxy: Any, what: str, name: str) -> torch.Tensor:
    """One quantizer parameter through its proxy (``scale()``, ...), as a detached tensor."""
    try:
        with torch.no_grad():
            value = getattr(proxy, what)()
    except RuntimeError as exc:  # e.g. dynamic quantizers: "Scale for Dynamic Act Quant is input-dependant"
        msg = (
            f"{name}: brevitas cannot state its quantizer's {what} ({exc}); iotable needs a fixed {what}: use an "
            "activation quantizer with a learned or constant scale (e.g. Int8ActPerTensorFloat, bit_width=...)"
        )
        raise UnsupportedQuantizerError(msg) from None
    if not isinstance(value, torch.Tensor):
        msg = f"{name}: its quantizer proxy returned {what}() = {value!r}; expected a tensor"
        raise UnsupportedQuantizerError(msg)
    return value.detach()


def _single(value: torch.Tensor, what: str, name: str) -> torch.Tensor:
    if value.numel() != 1:
        msg = f"{name}: its activation quantizer has {value.numel()} {what}s (shape {tuple(value.shape)}); "
        raise UnsupportedQuantizerError(msg + _PER_TENSOR_FIX)
    return value.reshape(())


def _proxy_values(proxy: Any, name: str) -> tuple[Domain, torch.Tensor]:
    """The domain a proxy's parameters state, and the float values it was built from (the quantizer's dtype)."""
    from brevitas.core.quant import BinaryQuant, ClampedBinaryQuant
    from brevitas.proxy.float_runtime_quant import ActFloatQuantProxyFromInjectorBase
    from brevitas.proxy.runtime_quant import ActQuantProxyFromInjector, DynamicActQuantProxyFromInjector

    if isinstance(proxy, ActFloatQuantProxyFromInjectorBase):
        msg = (
            f"{name}: its quantizer is a minifloat (FP8-style) quantizer, not integer quantization; iotable reads "
            "integer quantizers: use an Int or Uint activation quantizer (e.g. Int8ActPerTensorFloat, bit_width=...)"
        )
        raise UnsupportedQuantizerError(msg)
    if not isinstance(proxy, ActQuantProxyFromInjector):
        msg = (
            f"{name}: its activation quantizer proxy is a {type(proxy).__name__}, which iotable cannot read; "
            "expected an integer quantizer (an ActQuantProxyFromInjector, e.g. from Int8ActPerTensorFloat)"
        )
        raise UnsupportedQuantizerError(msg)
    if isinstance(proxy, DynamicActQuantProxyFromInjector):
        msg = (
            f"{name}: {type(proxy).__name__} computes its scale from each input (dynamic quantization), so its "
            "outputs have no fixed domain; use an activation quantizer with a learned or constant scale "
            "(e.g. Int8ActPerTensorFloat, bit_width=...)"
        )
        raise UnsupportedQuantizerError(msg)
    if proxy.is_groupwise:
        msg = f"{name}: its activation quantizer is groupwise (one scale per group of elements); {_PER_TENSOR_FIX}"
        raise UnsupportedQuantizerError(msg)
    scale = _single(_read(proxy, "scale", name), "scale", name)
    zero_point = _single(_read(proxy, "zero_point", name), "zero point", name).to(scale.dtype)
    bit_width = float(_single(_read(proxy, "bit_width", name), "bit width", name))
    if not scale.is_floating_point() or not bool(torch.isfinite(scale)) or float(scale) <= 0:
        msg = f"{name}: its quantizer's scale is {float(scale)!r}; expected a finite float > 0"
        raise UnsupportedQuantizerError(msg)
    if bit_width != round(bit_width) or not 1 <= bit_width <= 24:
        msg = f"{name}: its quantizer's bit width is {bit_width:g}; iotable tabulates integer bit widths 1 to 24"
        raise UnsupportedQuantizerError(msg)
    bits = int(bit_width)
    tensor_quant = proxy.fused_activation_quant_proxy.tensor_quant
    if isinstance(tensor_quant, (BinaryQuant, ClampedBinaryQuant)):
        # sign(x) * scale: the two values -scale and +scale, whatever the integer range says.
        values = torch.stack([-scale, scale])
        return Domain.values(values), values
    signed, narrow = proxy.is_signed, bool(proxy.is_narrow_range)
    if signed is None:
        msg = f"{name}: its quantizer proxy does not state is_signed; expected an integer quantizer"
        raise UnsupportedQuantizerError(msg)
    qmin, qmax = Domain.integer_range(bits, signed=bool(signed), narrow=narrow)
    # brevitas' IntQuant: q = clamp(round(x / scale + zero_point), min, max), output (q - zero_point) * scale.
    q = torch.arange(qmin, qmax + 1, dtype=scale.dtype, device=scale.device)
    values = (q - zero_point) * scale
    try:
        domain = Domain.uniform(
            bits, signed=bool(signed), narrow=narrow, scale=float(scale), zero_point=float(zero_point)
        )
    except DomainError as exc:
        msg = f"{name}: its quantizer's values do not form a domain: {exc}"
        raise UnsupportedQuantizerError(msg) from None
    if not np.array_equal(domain.values, np.sort(values.double().cpu().numpy())):
        domain = Domain.values(values)  # a float64 (or other non-float32) quantizer: keep its own values
    return domain, values


def _check_outputs(proxy: Any, domain: Domain, values: torch.Tensor, name: str) -> None:
    """Run the quantizer on a ramp across and beyond its range: every output must be a value of ``domain``."""
    low, high = float(values.min()), float(values.max())
    step = (high - low) / max(len(domain) - 1, 1)
    count = min(4 * len(domain) + 25, 1 << 16)
    ramp = torch.linspace(low - 3 * step, high + 3 * step, count, dtype=values.dtype, device=values.device)
    ramp = torch.cat([ramp, values, -values])
    with eval_mode(proxy), torch.no_grad():
        out = proxy(ramp)
    out = getattr(out, "value", out)
    try:
        domain.encode(out)
    except DomainError as exc:
        msg = (
            f"{name}: its outputs are not the values its quantizer proxy states ({domain!r}): {exc}. iotable "
            "cannot tabulate a quantizer whose scale depends on its input; use a learned or constant scale"
        )
        raise UnsupportedQuantizerError(msg) from None


def quantizer_domain(module: nn.Module) -> Domain | None:
    """The :class:`~iotable.Domain` of a brevitas quantizer's outputs, or ``None`` when ``module`` quantizes nothing.

    Quantizers are brevitas activation layers (``QuantIdentity``, ``QuantReLU``, ``QuantHardTanh``,
    ``QuantSigmoid``, ``QuantTanh``, ...) with quantization enabled, ``QuantLinear`` and
    ``QuantConv1d``/``2d`` built with ``output_quant=``, and activation quantizer proxies (``m.act_quant``).
    Integer quantizers give ``Domain.uniform(bit_width, signed=, narrow=, scale=, zero_point=)``, read through
    the proxy; binary ones give ``{-scale, +scale}``. The values are computed as brevitas computes its
    outputs, ``(q - zero_point) * scale`` in the quantizer's dtype, and checked against the quantizer's own
    outputs on a ramp, so model outputs encode exactly.

    Args:
        module: a brevitas module or activation quantizer proxy (anything else gives ``None``).

    Returns:
        The domain, or ``None`` for modules that do not end in an enabled activation quantizer.

    Raises:
        UnsupportedQuantizerError: a quantizer with no single fixed domain: per-channel or groupwise
            activation scales, dynamic (input-dependent) scales, minifloat quantization.
        BrevitasNotInstalledError: brevitas is missing or older than :data:`MIN_VERSION`.

    Example:
        >>> from brevitas.nn import QuantHardTanh, QuantReLU
        >>> from brevitas.quant import Uint8ActPerTensorFloatMaxInit
        >>> quantizer_domain(QuantHardTanh(bit_width=2, min_val=-1.0, max_val=1.0))
        Domain.uniform(2, signed=True, scale=0.5)
        >>> relu = QuantReLU(act_quant=Uint8ActPerTensorFloatMaxInit, bit_width=2, max_val=1.5)
        >>> quantizer_domain(relu).values.tolist()
        [0.0, 0.5, 1.0, 1.5]
        >>> quantizer_domain(torch.nn.ReLU()) is None
        True
    """
    return _domain(module, type(module).__name__)


def _domain(module: nn.Module, name: str) -> Domain | None:
    if not is_brevitas(module):
        return None
    proxy = _output_proxy(module)
    if proxy is None:
        return None
    domain, values = _proxy_values(proxy, name)
    _check_outputs(proxy, domain, values, name)
    return domain


def check_leaves(traced: fx.GraphModule, host: Collection[str]) -> None:
    """Reject the brevitas layers of a traced model that no table can reproduce, naming each and the fix.

    :func:`iotable.front.trace.trace` calls this for models that hold brevitas modules; host modules run with
    torch, so they may be anything.
    """
    for node in traced.graph.nodes:
        if node.op == "call_module" and node.target not in host:
            module = traced.get_submodule(node.target)
            if is_brevitas(module):
                _check_leaf(module, node.target)


def _check_leaf(module: nn.Module, name: str) -> None:
    cls = type(module).__name__
    if getattr(module, "return_quant_tensor", False):
        msg = (
            f"{name}: {cls}(return_quant_tensor=True) returns a brevitas QuantTensor, but iotable's tables read and "
            f"write plain tensors; build it with return_quant_tensor=False (the values are the same). A later layer "
            "whose bias quantizer needs its input's scale (e.g. bias_quant=Int32Bias) then needs bias_quant=None "
            "(a float bias is tabulated exactly) or its own input_quant="
        )
        raise ModelError(msg)
    bias_quant = getattr(module, "bias_quant", None)
    input_quant = getattr(module, "input_quant", None)
    if (
        bias_quant is not None
        and getattr(bias_quant, "requires_input_scale", False)
        and bias_quant.is_quant_enabled
        and getattr(module, "bias", None) is not None
        and not (input_quant is not None and input_quant.is_quant_enabled)
    ):
        msg = (
            f"{name}: {cls}'s bias quantizer needs the scale of a QuantTensor input, but iotable feeds plain tensors; "
            "use bias_quant=None (a float bias is tabulated exactly) or give the layer its own input_quant="
        )
        raise ModelError(msg)
    if getattr(module, "is_same_padded_strided", False):
        msg = (
            f"{name}: {cls}(padding='same') with stride > 1 pads unevenly inside brevitas, which no window "
            "description states; give an explicit padding= instead"
        )
        raise ModelError(msg)
    _domain(module, f"{name} ({cls})")
