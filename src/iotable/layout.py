"""Axis orders (:class:`Layout`) and what a sliding window reads beyond the input's edges
(:class:`PaddingMode`): the two enumerated options of decomposition metadata."""

from __future__ import annotations

import enum

import numpy as np

from ._util.order import ElementOrder, element_order
from .errors import OptionError, SpecError

__all__ = ["Layout", "PaddingMode"]


class Layout(enum.Enum):
    """Axis order of a layer's input and output tensors (batch first).

    Example:
        >>> Layout.parse("nhwc"), Layout.NHWC.spatial_rank, Layout.NHWC.channels_last
        (<Layout.NHWC: 'NHWC'>, 2, True)
    """

    NC = "NC"
    NCW = "NCW"
    NWC = "NWC"
    NCHW = "NCHW"
    NHWC = "NHWC"

    @classmethod
    def parse(cls, value: str | Layout, *, what: str = "layout") -> Layout:
        """Convert a string such as ``"NCHW"`` (any case) to a :class:`Layout`; anything else is an error."""
        if isinstance(value, Layout):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown layout {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    @classmethod
    def channels_first(cls, rank: int) -> Layout:
        """The channels-first layout of a ``rank``-dimensional tensor (batch included), as torch layers use."""
        by_rank = {2: cls.NC, 3: cls.NCW, 4: cls.NCHW}
        if rank not in by_rank:
            msg = f"layout: expected an input of rank 2, 3 or 4 (N, C, spatial...), received rank {rank}"
            raise SpecError(msg)
        return by_rank[rank]

    @property
    def spatial_rank(self) -> int:
        """Number of spatial axes: 0, 1 or 2."""
        return len(self.value) - 2

    @property
    def channels_last(self) -> bool:
        """Whether channels are the last axis (``NWC``, ``NHWC``)."""
        return self.spatial_rank > 0 and self.value.endswith("C")

    @property
    def element_order(self) -> ElementOrder:
        """The order of a unit's input elements in this layout: kernel-major for channels-last layouts,
        channel-major otherwise (see :mod:`iotable._util.order`)."""
        return element_order(channels_last=self.channels_last)


class PaddingMode(enum.Enum):
    """What a sliding window reads beyond the input's edges: torch's ``padding_mode`` values.

    ``zeros`` reads real 0 (each channel's code of 0); the other modes copy input elements: ``reflect``
    mirrors the input about its edge element (which is not repeated), ``replicate`` repeats the edge
    element, ``circular`` wraps around to the other end.

    Example:
        >>> PaddingMode.parse("reflect").sources(4, 2, 1).tolist()  # positions -2..4 of an input of 4
        [2, 1, 0, 1, 2, 3, 2]
        >>> PaddingMode.ZEROS.sources(4, 2, 1).tolist()
        [-1, -1, 0, 1, 2, 3, -1]
    """

    ZEROS = "zeros"
    REFLECT = "reflect"
    REPLICATE = "replicate"
    CIRCULAR = "circular"

    @classmethod
    def parse(cls, value: str | PaddingMode, *, what: str = "padding_mode") -> PaddingMode:
        """Convert a string such as ``"reflect"`` (any case) to a :class:`PaddingMode`; anything else is an error."""
        if isinstance(value, PaddingMode):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown padding mode {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    def sources(self, size: int, before: int, after: int) -> np.ndarray:
        """The input position each of the ``before + size + after`` padded positions reads; ``-1``: real 0.

        Raises:
            SpecError: the padding is wider than the mode allows for ``size`` (torch's own limits: reflect
                needs less than ``size`` on each side, circular at most ``size``).
        """
        limit = {PaddingMode.REFLECT: size - 1, PaddingMode.CIRCULAR: size}.get(self)
        if size < 1 or (limit is not None and max(before, after) > limit):
            bound = f"at most {limit}" if limit is not None else "any padding"
            msg = (
                f"{self.value} padding of {before} before and {after} after an extent of {size}: {self.value} "
                f"padding allows {bound} on each side; use a smaller padding or a larger input"
            )
            raise SpecError(msg)
        position = np.arange(-before, size + after, dtype=np.int64)
        if self is PaddingMode.ZEROS:
            return np.where((position >= 0) & (position < size), position, -1)
        if self is PaddingMode.REFLECT:
            position = np.abs(position)  # one reflection: the limit above keeps it inside
            return np.where(position >= size, 2 * (size - 1) - position, position)
        if self is PaddingMode.REPLICATE:
            return np.clip(position, 0, size - 1)
        return position % size
