"""Checks of a whole model before any work: its float type, modules left in training mode, and whether it is
a function of its input (no random numbers, no state its forward updates, no dependence on the batch).

Table networks carry float32 values (domains are float32 values, raw outputs float32, host nodes are fed
float32), so a model computing in another float type is refused up front with the fix, rather than giving
tables whose decoded values differ from the model's in the last bits. A model left in training mode is
evaluated in eval mode (as hardware runs it); modules whose behaviour differs between the two are named in
a warning.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .._util.modules import PlainState, changed_attributes, eval_mode, plain_attributes, restore_attributes
from ..brevitas import is_brevitas
from ..errors import IOTableWarning, ModelError
from ..torchao import fake_quantize_domain, is_fake_quantize

__all__ = ["check_float32", "check_function_of_inputs", "warn_training"]


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


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same shape and bytes (a NaN written over a NaN is no change)."""
    flat = [t.detach().reshape(-1).view(torch.uint8) for t in (a, b)]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(*flat)


class _Watch(TorchDispatchMode):
    """Records, with the module running it, each random operation and each write into a parameter or buffer."""

    def __init__(self, stack: list[str], owned: dict[int | None, str], labels: dict[str, str]) -> None:
        super().__init__()
        self.stack, self.owned, self.labels = stack, owned, labels
        self.found: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        where = self.stack[-1] if self.stack else ""
        name = func.overloadpacket.__name__
        if torch.Tag.nondeterministic_seeded in func.tags and where is not None:
            self.found.append(f"module {self.labels.get(where, where)} calls {name}, which draws random numbers")
        before = []  # what an operation may write (by its schema) of the model's tensors, compared after it ran:
        for argument, value in zip(func._schema.arguments, [*args, *kwargs.values()]):  # fused ops declare writes
            written = argument.alias_info is not None and argument.alias_info.is_write  # they skip when disabled
            held = self.owned.get(_address(value)) if written and isinstance(value, torch.Tensor) else None
            if held is not None and where is not None:
                before.append((held, value, _values(value).detach().clone()))
        result = func(*args, **kwargs)
        for held, value, old in before:
            if not _same_bytes(_values(value), old):
                self.found.append(f"module {self.labels.get(where, where)} updates {held} in place ({name})")
        return result


def _address(tensor: torch.Tensor) -> int | None:
    """Where a tensor's values live: its data pointer, or its values' for a sparse tensor (which has no storage
    of its own, and whose in-place updates write its values); ``None`` for layouts with neither."""
    if tensor.layout == torch.strided:
        return tensor.data_ptr()
    if tensor.layout == torch.sparse_coo:
        return tensor._values().data_ptr()
    if tensor.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        return tensor.values().data_ptr()
    return None


def _values(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor that holds a tensor's values: itself, or a sparse tensor's values."""
    if tensor.layout == torch.sparse_coo:
        return tensor._values()
    if tensor.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        return tensor.values()
    return tensor


def _inside(name: str, host: frozenset[str]) -> bool:
    """Whether the module ``name`` is one of ``host`` or inside one."""
    return any(name == h or name.startswith(f"{h}.") for h in host)


class _Outputs:
    """Forward hooks keeping, per module outside ``host``, its first sample's output of every call, and a stack
    of the modules running (``None`` for a host module or one inside it)."""

    def __init__(self, names: dict[nn.Module, str], host: frozenset[str]) -> None:
        self.names, self.host = names, host
        self.holds_host = {n for n in names.values() if any(h.startswith(f"{n}.") or not n for h in host)}
        self.stack: list[str | None] = []
        self.outputs: dict[str, list[torch.Tensor]] = {}
        self.labels = {n: f"{(n or type(m).__name__)!r} ({type(m).__name__})" for m, n in names.items()}

    def enter(self, m: nn.Module, _: Any) -> None:
        name = self.names.get(m, "")
        self.stack.append(None if _inside(name, self.host) or None in self.stack else name)

    def leave(self, m: nn.Module, _: Any, out: Any) -> None:
        me = self.stack.pop()
        if isinstance(out, torch.Tensor) and out.dim() and me is not None and me not in self.holds_host:
            self.outputs.setdefault(self.names[m], []).append(out[:1].detach().clone())

    def batch_dependent(self, batch: int) -> list[str]:
        """The first module whose first sample's output alone differs from its output in the batch."""
        return [f"module {self.labels[n]} gives the first sample another output alone than in a "
                f"batch of {batch}, so it depends on the batch"
                for n, v in self.outputs.items() if _differs(v)][:1]  # fmt: skip


def check_function_of_inputs(model: nn.Module, samples: torch.Tensor, *, host: frozenset[str], what: str) -> None:
    """Raise :class:`ModelError` when ``model`` (in eval mode, as iotable evaluates it) is not a function of its
    input: a module outside ``host`` draws random numbers, updates a parameter or buffer, or changes one of its
    plain Python attributes (a number, a string, a container of those: a call counter) in its forward, or one
    sample's output depends on the rest of the batch. ``samples``: two or more different inputs. Parameters,
    buffers and plain attributes hold their values again afterwards."""
    names = {m: n for n, m in model.named_modules()}
    for m, name in names.items():  # a quantizer's own refusal (an observer still enabled) says more than ours
        if is_fake_quantize(m) and not _inside(name, host):
            fake_quantize_domain(m, name)
    found = _watched_runs(model, samples, _Outputs(names, host))
    if found:
        msg = (
            f"{what}: the model is not a function of its input: {found[0]}; a table computes one fixed output per "
            "input, so its tables would differ from the model. Call model.eval() (dropout, batch statistics), "
            "move the random or stateful operation out of the forward, or list the module in host= to run it "
            "with torch"
        )
        raise ModelError(msg)


def _watched_runs(model: nn.Module, samples: torch.Tensor, hooks: _Outputs) -> list[str]:
    """Run ``samples`` through the model, then their first alone, watching every operation and the modules'
    plain attributes; what is wrong, if anything. The model's parameters, buffers and plain attributes hold
    their values again afterwards."""
    saved = [(t, t.detach().clone()) for t in (*model.parameters(), *model.buffers())]  # put back after the runs
    attributes = plain_attributes(model)
    owned = {_address(t): f"{kind} {n!r}" for kind, named in (("parameter", model.named_parameters()),
             ("buffer", model.named_buffers())) for n, t in named}  # fmt: skip
    owned.pop(None, None)  # a layout with no values to point at is not watched
    handles = [h for m in model.modules() for h in (m.register_forward_pre_hook(hooks.enter),
               m.register_forward_hook(hooks.leave))]  # fmt: skip
    try:
        with eval_mode(model), torch.no_grad():
            watch = _Watch(hooks.stack, owned, hooks.labels)  # type: ignore[arg-type]  # None: a host module
            with watch:
                model(samples)
            first = plain_attributes(model)
            if not watch.found:
                model(samples[:1])
            changed = _changed_attributes(attributes, first, plain_attributes(model), hooks)
    except Exception:  # a forward that fails here is reported, with its context, by the trace
        return []
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for tensor, value in saved:
                tensor.copy_(value)
        restore_attributes(attributes)
    return watch.found or changed or hooks.batch_dependent(len(samples))


def _changed_attributes(before: PlainState, first: PlainState, after: PlainState, hooks: _Outputs) -> list[str]:
    """The plain attributes of modules outside the host that the runs changed: one held before them and
    changed by them, or one a run made and the next changed (a counter started at its first call)."""
    made = {m: (names - before[m][0], {k: v for k, v in plain.items() if k not in before[m][0]})
            for m, (names, plain) in first.items() if m in before}  # fmt: skip
    found = []
    for m, name, old, new in [*changed_attributes(before, after), *changed_attributes(made, after)]:
        where = hooks.names.get(m, "")
        if not _inside(where, hooks.host):
            found.append(
                f"module {hooks.labels[where]} changes its attribute {name!r} in its forward ({old} before "
                f"the calls, {new} after them), so its output may change from one call to the next"
            )
    return found[:1]


def _differs(outputs: list[torch.Tensor]) -> bool:
    """Whether a module's first-sample outputs in the batch run (first half) and the lone run (second half) differ
    by more than the rounding a kernel chosen for another batch size may bring."""
    half = len(outputs) // 2
    pairs = zip(outputs[:half], outputs[half : 2 * half])
    return any(a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5) for a, b in pairs)
