"""LogicNets' estimate of one table (:func:`table_lut_estimate`); the count itself is :mod:`iotable.lutcount`'s."""

from __future__ import annotations

from ..lutcount import check_k, lut_estimate
from ..lutnet import table_bits
from ..table import IOTable

__all__ = ["check_k", "lut_estimate", "table_bits", "table_lut_estimate"]


def table_lut_estimate(table: IOTable, *, k: int = 6) -> int:
    """:func:`lut_estimate` for one table: its address bits and code bits as ``iotable.hdl`` packs them.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0]] * 4096, input_domains=[Domain.uniform(2)] * 6, output_domain=Domain.uniform(2))
        >>> table_lut_estimate(t)
        170
    """
    x, y = table_bits(table, what="table_lut_estimate")
    return int(lut_estimate(x, y, k=k))
