"""The element order of a unit's inputs, stated once: every table column, packed-address digit and window
element follows it.

A unit reads ``channels x window`` input elements: each of its input channels (ascending within the unit)
at each kernel position (row-major over the spatial axes). Channels-first layouts (``NCW``, ``NCHW``) order
them **channel-major** (channel, then kernel position): the kernel positions of the first channel, then
those of the next. Channels-last layouts (``NWC``, ``NHWC``) order them **kernel-major** (kernel position,
then channel), as the elements lie in memory. Non-spatial layers (``NC``) have one kernel position, so both
orders agree. The first element is the most significant digit of a row's packed address.

Example:
    >>> unit_elements(2, 3, channels_last=False)[0].tolist(), element_order(channels_last=False).value
    ([0, 0, 0, 1, 1, 1], 'channel-major')
    >>> unit_elements(2, 3, channels_last=True)[0].tolist(), element_order(channels_last=True).value
    ([0, 1, 0, 1, 0, 1], 'kernel-major')
"""

from __future__ import annotations

import enum
import math
from typing import Protocol

import numpy as np

__all__ = ["CHANNEL_MAJOR", "KERNEL_MAJOR", "ElementOrder", "element_order", "frame_channels", "unit_elements"]


class _HasLayout(Protocol):
    @property
    def channels_last(self) -> bool: ...


class ElementOrder(enum.Enum):
    """The order of the elements of a window vector (what a table's index map indexes).

    ``CHANNEL_MAJOR`` (channels-first layouts): element ``c * taps + t`` is channel ``c`` at kernel position
    ``t``; ``KERNEL_MAJOR`` (channels-last layouts): element ``t * channels + c``. Kernel positions ``t``
    count row-major over the kernel (``t = i * k_w + j`` in two dimensions).
    """

    CHANNEL_MAJOR = "channel-major"
    KERNEL_MAJOR = "kernel-major"

    @classmethod
    def of(cls, layout: _HasLayout) -> ElementOrder:
        """The order a window over ``layout`` uses: kernel-major for channels-last layouts."""
        return element_order(channels_last=layout.channels_last)


#: Channels-first units: the kernel positions of the first channel, then those of the next.
CHANNEL_MAJOR = ElementOrder.CHANNEL_MAJOR
#: Channels-last units: the channels at the first kernel position, then those at the next.
KERNEL_MAJOR = ElementOrder.KERNEL_MAJOR


def element_order(*, channels_last: bool) -> ElementOrder:
    """:data:`KERNEL_MAJOR` for channels-last layouts, :data:`CHANNEL_MAJOR` otherwise."""
    return KERNEL_MAJOR if channels_last else CHANNEL_MAJOR


def unit_elements(channels: int, window: int, *, channels_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """For each of a unit's ``channels * window`` inputs in table order: its channel's place among the unit's
    channels and its kernel position, as two int64 arrays."""
    element = np.arange(channels * window, dtype=np.int64)
    if channels_last:
        position, channel = np.divmod(element, channels)
    else:
        channel, position = np.divmod(element, window)
    return channel, position


def frame_channels(shape: tuple[int, ...], channels: int, *, channels_last: bool) -> np.ndarray:
    """The channel of every element of one sample of ``shape`` (no batch axis), in C order."""
    elements = math.prod(shape)
    flat = np.arange(elements)
    if channels_last:
        return flat % channels
    return flat // (elements // channels)
