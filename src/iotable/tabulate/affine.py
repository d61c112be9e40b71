"""Affine tails: batch norm, clamps, identities and the quantizer as one per-channel map between clamps, with
float32 error bounds, analysed for many layers at once and checked against the modules themselves before
any code relies on it (see :mod:`iotable.tabulate.fastpath`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..errors import EnumerationError
from ..nn import Quantize
from .columns import _U32, _codes_domain, _Part

# Modules of an affine tail: per-channel affine maps and clamps (their float32 error is bounded below).
# Each entry reads a module of its key's class (hence ``Any``: nn.Module states no min_val).
_CLAMPS: dict[type[nn.Module], Callable[[Any], tuple[float, float]]] = {
    nn.ReLU: lambda m: (0.0, math.inf),
    nn.ReLU6: lambda m: (0.0, 6.0),
    nn.Hardtanh: lambda m: (float(m.min_val), float(m.max_val)),
}
_IDENTITIES = (nn.Identity, nn.Dropout)


@dataclass(frozen=True)
class _AffineTail:
    """Per channel: the quantizer's rounding argument ``phi = gain * z + offset`` and the codes' range.

    The code of a float32 pre-activation ``z`` is ``clip(floor(phi(z)), low, high)`` wherever ``phi`` lies
    further than ``error_at(|z|)`` (code units) from an integer.
    """

    gain: np.ndarray
    offset: np.ndarray
    low: np.ndarray  # int64 codes
    high: np.ndarray
    error0: np.ndarray  # the tail's float32 error is at most error0 + error1 * |z|
    error1: np.ndarray

    def error_at(self, size: np.ndarray) -> np.ndarray:
        """Bound of the tail's float32 error (code units) for pre-activations up to ``size`` in magnitude."""
        return self.error0 + self.error1 * size

    def __getitem__(self, index: Any) -> _AffineTail:
        return _AffineTail(*(getattr(self, f.name)[index] for f in fields(self)))

    @classmethod
    def concat(cls, tails: list[_AffineTail]) -> _AffineTail:
        if len(tails) == 1:
            return tails[0]
        return cls(*(np.concatenate([getattr(t, f.name) for t in tails]) for f in fields(cls)))


def _tail_key(tail: tuple[nn.Module, ...], rank: int) -> tuple[Any, ...] | None:
    """What an affine tail's analysis and check depend on besides its per-channel statistics: the module
    types and settings (``None`` when the tail is not affine). Tails with equal keys are analysed together."""
    key: list[Any] = [rank]
    for m in tail:
        t = type(m)
        if "forward" in m.__dict__:  # an instance's own forward: analysed and checked on its own
            key.append(id(m))
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if m.running_mean is None or m.running_var is None:
                return None  # batch statistics even in eval: not a per-element function
            key.append((t, float(m.eps), m.weight is None, m.bias is None))
        elif t in _CLAMPS:
            key.append((t, *_CLAMPS[t](m)))
        elif isinstance(m, _IDENTITIES):
            key.append(t)
        elif t is Quantize and isinstance(m, Quantize):
            key.append((t, float(m.scale), float(m.zero_point), m.qmin, m.qmax))
        else:
            return None
    return tuple(key)


def _analyse_tails(parts: list[_Part], *, memory_budget: int) -> None:
    """Set each part's affine tail, analysed and checked against its modules; ``None`` where the tail is not
    affine or the check fails (those parts take the both-ends path).

    Parts whose tails have equal keys (:func:`_tail_key`) are analysed and checked as one batch; a batch that
    fails is retried part by part, so one layer's failure does not move the others.
    """
    batches: dict[tuple[Any, ...], list[_Part]] = {}
    for part in parts:
        key = _tail_key(part.job.fast.tail, part.job.layer.geometry.rank)
        if key is not None:
            batches.setdefault(key, []).append(part)
    for members in batches.values():
        modules = members[0].job.fast.tail
        norms = {
            k: _norm_parameters(members, k)
            for k, m in enumerate(modules)
            if isinstance(m, nn.modules.batchnorm._BatchNorm)
        }
        tail = _affine_tail(members, norms)
        magnitude = np.concatenate([p.magnitude() for p in members])
        if tail is not None and _tail_agrees(members, tail, magnitude, norms, memory_budget=memory_budget):
            start = 0
            for part in members:
                part.tail = tail[start : start + part.width]
                start += part.width
        elif len(members) > 1:
            for part in members:
                _analyse_tails([part], memory_budget=memory_budget)


def _norm_parameters(parts: list[_Part], position: int) -> np.ndarray:
    """``(4, K)`` float64 of the parts' columns: running mean and variance, weight and bias of the batch norm
    at ``position`` of each part's tail."""
    rows: list[list[torch.Tensor]] = [[], [], [], []]
    for part in parts:
        m = cast(_BatchNorm, part.job.fast.tail[position])  # the caller found a batch norm there
        stats: tuple[torch.Tensor | None, ...] = (m.running_mean, m.running_var, m.weight, m.bias)
        if not part.group.whole:
            index = torch.from_numpy(part.group.channels)
            stats = tuple(None if t is None else t[index] for t in stats)
        for k, t in enumerate(stats):
            rows[k].append(torch.full((part.width,), float(k == 2)) if t is None else t.detach())
    return torch.stack([torch.cat(r) if len(r) > 1 else r[0] for r in rows]).numpy().astype(np.float64)


def _affine_tail(parts: list[_Part], norms: dict[int, np.ndarray]) -> _AffineTail | None:
    """The parts' tails (equal keys) as an affine map between clamps, with float32 error bounds, or ``None``.

    Each module maps ``v = clip(A z + B, L, H)`` to another such map: batch norm (eval, running statistics)
    is affine per channel, ReLU / ReLU6 / hardtanh clamp, identity and dropout (eval) pass. For
    ``|z| <= Z``, ``|v| <= bound0 + bound1 * Z`` and the float32 value lies within ``err0 + err1 * Z`` of
    the exact one. ``norms``: :func:`_norm_parameters` of each batch norm, by position.
    """
    tail = parts[0].job.fast.tail
    n = sum(p.width for p in parts)
    a, b = np.ones(n), np.zeros(n)
    low, high = np.full(n, -math.inf), np.full(n, math.inf)
    bound0, bound1, err0, err1 = np.zeros(n), np.ones(n), np.zeros(n), np.zeros(n)
    for position, m in enumerate(tail[:-1]):
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            mean, var, w, c = norms[position]
            alpha = w / np.sqrt(var + float(np.float32(m.eps)))
            beta = c - mean * alpha
            # float32 alpha = w / sqrt(var + eps) (3.5 roundings relative), beta = b - mean * alpha, then
            # x * alpha + beta, or (x - mean) * alpha + b: within 6u of |x alpha| + |mean alpha| + |b| + |beta|.
            size = np.abs(alpha)
            err0 = size * err0 + 8 * _U32 * (size * bound0 + np.abs(mean * alpha) + np.abs(c) + np.abs(beta))
            err1 = size * err1 + 8 * _U32 * size * bound1
            bound0, bound1 = size * bound0 + np.abs(beta), size * bound1
            a, b = alpha * a, alpha * b + beta
            with np.errstate(invalid="ignore"):  # 0 * inf: a zero gain maps everything to beta
                ends = alpha * low + beta, alpha * high + beta
            if not alpha.all():
                ends = tuple(np.where(alpha == 0, beta, e) for e in ends)
            low, high = np.minimum(*ends), np.maximum(*ends)
        elif type(m) in _CLAMPS:
            lo, hi = _CLAMPS[type(m)](m)
            low, high = np.minimum(np.maximum(low, lo), hi), np.minimum(np.maximum(high, lo), hi)
            bound0 = bound0 + max(lo, 0.0) + max(-hi, 0.0)  # a clamp away from 0 can lift small values
        elif not isinstance(m, _IDENTITIES):
            return None
    q = cast(Quantize, tail[-1])  # _read_structure: every recognized tail ends in a Quantize
    scale, zero = float(q.scale), float(q.zero_point)
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(zero)):
        return None
    # Quantize: x / scale + zero_point, each rounded once (2u |x| / scale + u |zero_point|), clamp, round.
    err0 = err0 / scale + 3 * _U32 * (bound0 / scale + abs(zero) + 1)
    err1 = err1 / scale + 3 * _U32 * bound1 / scale
    low_q = np.minimum(np.maximum(low / scale + zero, q.qmin), q.qmax)
    high_q = np.minimum(np.maximum(high / scale + zero, q.qmin), q.qmax)
    # A saturated value within rounding of a half step: leave the layer to the modules.
    saturated = np.concatenate([low_q, high_q])
    if (np.abs(saturated - np.floor(saturated) - 0.5) <= np.concatenate([err0, err0]) + 1e-9).any():
        return None
    return _AffineTail(
        gain=a / scale,
        offset=b / scale + zero + 0.5 - q.qmin,
        low=(np.round(low_q) - q.qmin).astype(np.int64),
        high=(np.round(high_q) - q.qmin).astype(np.int64),
        error0=err0,
        error1=err1,
    )


def _tail_agrees(
    parts: list[_Part], tail: _AffineTail, zmax: np.ndarray, norms: dict[int, np.ndarray], *, memory_budget: int
) -> bool:
    """Whether the analytic tail gives the modules' own codes on both sides of every boundary and at the ends.

    Pre-activations just outside each boundary's margin, and at ``+-zmax``, run through the tail modules
    (the first part's; the others' have equal types and settings, and batch norm runs on each column's own
    statistics); every proved analytic code must equal theirs. Columns go in chunks within a quarter of
    ``memory_budget``.
    """
    margin = tail.error_at(zmax) + 1e-6
    steps = np.arange(1, int((tail.high - tail.low).max()) + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero gain: one code, tested at the ends
        crossing = (tail.low + steps - tail.offset) / tail.gain  # (steps, K): where phi crosses each integer
        delta = 3 * margin / np.abs(tail.gain)
        points = np.concatenate([-zmax[None], zmax[None], crossing - delta, crossing + delta])
    if not tail.gain.all():
        points = np.nan_to_num(points, nan=0.0, posinf=0.0, neginf=0.0)
    points = np.minimum(np.maximum(points, -zmax), zmax).astype(np.float32)
    phi = tail.gain * points.astype(np.float64) + tail.offset
    sure = np.abs(phi - np.round(phi)) > margin
    expected = np.minimum(np.maximum(np.floor(phi), tail.low), tail.high).astype(np.int64)
    first = parts[0].job
    rank = first.layer.geometry.rank
    values = _codes_domain(first.layer).values.astype(np.float32)
    # Each batch norm's statistics, column by column (the parts' channels, in batch order).
    stats = {position: torch.from_numpy(norm.astype(np.float32)) for position, norm in norms.items()}
    width = points.shape[1]
    step = max(1, (memory_budget // 4) // (12 * len(points)))
    for k0 in range(0, width, step):
        k1 = min(width, k0 + step)
        x = torch.from_numpy(np.ascontiguousarray(points[:, k0:k1])).reshape((len(points), k1 - k0) + (1,) * rank)
        try:
            with torch.inference_mode():
                for position, m in enumerate(first.fast.tail):
                    if position in stats:
                        mean, var, w, c = stats[position] if k1 - k0 == width else stats[position][:, k0:k1]
                        x = F.batch_norm(x, mean, var, w, c, False, 0.0, cast(_BatchNorm, m).eps)
                    elif not isinstance(m, nn.Dropout):
                        x = m.forward(x)  # no hooks on a recognized layer's modules: its forward is its call
        except Exception as exc:  # the modules' own failure, reported as the black box would
            msg = f"{first.layer.name}: forward failed on an input of shape {tuple(x.shape)}: {exc}"
            raise EnumerationError(msg) from exc
        got = x.reshape(len(points), -1).numpy()
        # The quantizer's outputs are exactly its domain's float32 values: compare values, not codes.
        if not bool((got == values[expected[:, k0:k1]])[sure[:, k0:k1]].all()):
            return False
    return True
