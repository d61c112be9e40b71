"""Helpers of the table kernel: address matrices of a layer's tables, per-position vectors, and what a
convolution fusion needs to know of pads and weights."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..graph.nodes import Node, PadMeta
from ..layout import PaddingMode


def _vector_at(vectors: torch.Tensor, positions: int) -> Callable[[int], torch.Tensor]:
    """The input vector of lookup ``at`` (sample ``at // positions``, position ``at % positions``)."""
    return lambda at: vectors[at // positions, at % positions]


def _address_matrix(tables: Sequence[Any], index_map: np.ndarray, width: int, dtype: Any) -> np.ndarray:
    """``(width, units)``: column ``u`` holds unit ``u``'s place values at the elements it reads (summed where
    an element feeds several of its inputs), filled for all units at once."""
    units, fan_in = index_map.shape
    weights = np.zeros((units, fan_in), dtype=np.int64)
    for u, table in enumerate(tables):  # one short vector per table
        weights[u, : table.fan_in] = table.address_weights
    driven = index_map >= 0
    matrix = np.zeros((width, units), dtype=dtype)
    np.add.at(matrix, (index_map[driven], np.nonzero(driven)[0]), weights[driven])
    return matrix


def _constant_pad(pad: Node) -> bool:
    """Whether a pad node pads with its channels' constant codes as wide before as after each axis: what a
    convolution's own padding (plus a fixed border term) does, so that it fuses into the convolution."""
    meta = pad.meta
    assert isinstance(meta, PadMeta)  # a checked graph
    zeros = meta.mode is PaddingMode.ZEROS and meta.pad_codes is not None
    return zeros and all(before == after for before, after in meta.padding)


def _conv_groups(weight: np.ndarray) -> int:
    """The most groups a convolution with ``weight`` ``(rows, channels, taps)`` splits into: row blocks that
    read only their own block of channels (a depthwise table layer is as many groups as channels)."""
    rows, channels = weight.shape[:2]
    reads = (weight != 0).any(axis=2)  # (rows, channels)
    for groups in range(math.gcd(rows, channels), 1, -1):
        if rows % groups or channels % groups:
            continue
        row_block = np.arange(rows) // (rows // groups)
        channel_block = np.arange(channels) // (channels // groups)
        if not (reads & (row_block[:, None] != channel_block[None, :])).any():
            return groups
    return 1
