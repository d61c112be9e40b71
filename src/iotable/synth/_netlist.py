"""A mapped LUT netlist checked against a table (:func:`check_table`); the netlist value, its bit-parallel
evaluation and its check against a table's function are :mod:`iotable.lutnet`'s."""

from __future__ import annotations

from ..lutnet import Lut, LutNetlist, address_patterns, bit_function, check_netlist, pack_rows
from ..table import IOTable

__all__ = ["Lut", "LutNetlist", "address_patterns", "check_netlist", "check_table", "pack_rows"]


def check_table(netlist: LutNetlist, table: IOTable, *, k: int | None = None) -> None:
    """Raise :class:`NetlistMismatchError` unless ``netlist`` computes ``table`` on every row it holds.

    The netlist's inputs are the table's address bits ``x<input>_<bit>`` and its outputs the code bits
    ``y<output>_<bit>`` (as :func:`map_table` writes them); rows a partial table lacks and bit patterns that
    are no code are not checked (don't-cares). With ``k``, also refuse a node of more than ``k`` inputs.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> xor = ".model m\\n.inputs x0_0 x1_0\\n.outputs y0_0\\n.names x0_0 x1_0 y0_0\\n01 1\\n10 1\\n.end\\n"
        >>> check_table(LutNetlist.from_blif(xor), t)  # passes silently
        >>> check_table(LutNetlist.from_blif(xor.replace("01 1", "00 1")), t)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        iotable.errors.NetlistMismatchError: IOTable(4 rows dense, ...): the mapped LUT netlist does not compute ...
    """
    fn = bit_function(table, what="check_table")
    check_netlist(netlist, fn, name=repr(table), k=k)
