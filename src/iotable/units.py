"""The front-end-neutral vocabulary of layers split into units: what every front end, the graph, the runtime,
the bundle and hardware share, and none of them owns.

A layer's decomposition metadata (:class:`Spec`, declared with :func:`iotable.decompose` or read from a
model by a front end), its sliding window (:class:`Geometry`), its smallest independent units (:class:`Unit`)
and the default limit on a table's rows (:data:`DEFAULT_MAX_ROWS`); axis orders and padding modes are in
:mod:`iotable.layout`. Nothing here imports torch or a front end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .domain import Domain
from .errors import SpecError
from .layout import Layout, PaddingMode

__all__ = ["DEFAULT_MAX_ROWS", "Geometry", "Spec", "Unit"]

#: Default limit on the rows of one table (2**24).
DEFAULT_MAX_ROWS = 2**24


@dataclass(frozen=True)
class Spec:
    """Decomposition metadata of one module (immutable; see :func:`iotable.decompose` for the fields' meaning).

    ``padding`` holds one ``(before, after)`` pair per spatial axis (or one pair for every axis);
    ``padding_mode`` ``None`` means zeros. ``per_output`` splits every unit into one unit per output channel
    that reads the same inputs (the built-in rule for ``nn.Linear`` and convolutions); ``elementwise`` makes
    every channel its own unit of kernel 1 (the rule for activations, batch norm and quantizers); ``depthwise``
    makes every channel its own unit over the kernel window (the rule for average pooling). ``fan_in_from``
    names the module's tensor of shape ``(outputs, inputs, ...)`` whose non-zero entries are the fan-ins (a
    pruning mask); :func:`spec_of` resolves it into ``fan_in``; ``output_domain_from`` names the submodule (a
    quantizer) whose domain is the output domain, resolved into ``output_domain``. ``infer`` asks for the
    units the module's structure shows (``decompose(fan_in="auto")``), resolved when the module is planned.
    ``source`` says where the spec came from.
    """

    groups: int | None = None
    fan_in: tuple[tuple[int, ...], ...] | None = None
    fan_out: tuple[tuple[int, ...], ...] | None = None
    kernel_size: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    dilation: tuple[int, ...] | None = None
    padding: tuple[tuple[int, int], ...] | None = None
    padding_mode: PaddingMode | None = None
    layout: Layout | None = None
    output_domain: Domain | None = None
    per_output: bool = False
    elementwise: bool = False
    depthwise: bool = False
    fan_in_from: str | None = None
    output_domain_from: str | None = None
    infer: bool = False
    source: str = "decompose()"

    @property
    def spatial(self) -> bool:
        """Whether the spec describes a sliding-window (convolution-like) layer."""
        return self.kernel_size is not None or (self.layout is not None and self.layout.spatial_rank > 0)


@dataclass(frozen=True)
class Geometry:
    """The sliding window of a spatial layer, one entry per spatial axis (all empty for ``"NC"``).

    ``padding`` holds a ``(before, after)`` pair per axis: torch's ``padding="same"`` with an even kernel
    pads one element more after than before. ``padding_mode`` says what padded positions hold.

    Example:
        >>> g = Geometry(kernel=(4,), stride=(1,), dilation=(1,), padding=((1, 2),))
        >>> g.before, g.after, g.output_size((6,))
        ((1,), (2,), (6,))
    """

    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    padding: tuple[tuple[int, int], ...] = ()
    padding_mode: PaddingMode = PaddingMode.ZEROS

    def __post_init__(self) -> None:
        if not all(isinstance(p, tuple) and len(p) == 2 for p in self.padding):
            msg = (
                f"Geometry: padding must hold one (before, after) pair per spatial axis, received {self.padding!r}; "
                "write an axis padded p on both sides as (p, p)"
            )
            raise SpecError(msg)
        if not isinstance(self.padding_mode, PaddingMode):
            object.__setattr__(self, "padding_mode", PaddingMode.parse(self.padding_mode, what="Geometry"))

    @property
    def rank(self) -> int:
        """Number of spatial axes."""
        return len(self.kernel)

    @property
    def window(self) -> int:
        """Number of kernel positions."""
        return math.prod(self.kernel)

    @property
    def span(self) -> tuple[int, ...]:
        """Input extent of one window per axis: ``(k - 1) * d + 1``."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    def offsets(self) -> np.ndarray:
        """Kernel positions times dilation, row-major, shape ``(window, rank)``."""
        grids = np.meshgrid(*[np.arange(k) * d for k, d in zip(self.kernel, self.dilation)], indexing="ij")
        return np.stack([g.reshape(-1) for g in grids], axis=1) if grids else np.zeros((1, 0), np.int64)

    @property
    def before(self) -> tuple[int, ...]:
        """Padding before the first element, per axis (where the first window starts)."""
        return tuple(b for b, _ in self.padding)

    @property
    def after(self) -> tuple[int, ...]:
        """Padding after the last element, per axis."""
        return tuple(a for _, a in self.padding)

    @property
    def padded(self) -> bool:
        """Whether any axis is padded."""
        return any(b or a for b, a in self.padding)

    def padded_size(self, size: tuple[int, ...]) -> tuple[int, ...]:
        """Extent per axis of an input of ``size`` once padded."""
        return tuple(n + b + a for n, (b, a) in zip(size, self.padding))

    def output_size(self, size: tuple[int, ...]) -> tuple[int, ...]:
        """Output extent per axis for an input of ``size``: ``(n + before + after - d (k - 1) - 1) // s + 1``."""
        return tuple(
            (n - d * (k - 1) - 1) // s + 1
            for n, k, s, d in zip(self.padded_size(size), self.kernel, self.stride, self.dilation)
        )

    def sources(self, size: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """Per axis, the input position each padded position reads (``-1``: real 0), by :attr:`padding_mode`.

        Raises:
            SpecError: a padding wider than the mode allows for ``size``.
        """
        return tuple(self.padding_mode.sources(n, b, a) for n, (b, a) in zip(size, self.padding))


@dataclass(frozen=True)
class Unit:
    """One smallest independent unit: the input channels it reads and the output channels it writes."""

    index: int
    in_channels: tuple[int, ...]
    out_channels: tuple[int, ...]
    fan_in: int
    rows: int

    @property
    def fan_out(self) -> int:
        """Number of outputs the unit writes (per position)."""
        return len(self.out_channels)
