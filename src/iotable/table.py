"""IOTable: one unit's function as rows of input codes -> outputs, dense or partial.

Row order and addresses: a row's *packed address* is the mixed-radix integer of its input codes with the
**first input as the most significant digit**: ``address = sum(code[j] * prod(len(domain[i]) for i > j))``.
Dense tables list every row in ascending address order, which is the lexicographic order of the input-code
tuples (the order of ``itertools.product``). Partial tables hold a subset, also in ascending address order;
the rows they lack are don't-cares.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from ._util import display as _display
from .domain import Domain, as_array, code_dtype
from .errors import MissingRowError, TableError

__all__ = ["IOTable", "TableList", "place_values"]


def place_values(radices: Any) -> np.ndarray:
    """Place value of each digit of a packed address (int64), the first digit most significant.

    Example:
        >>> place_values([4, 2, 3]).tolist()
        [6, 3, 1]
    """
    radices = np.asarray(radices, dtype=np.int64)
    if not len(radices):
        return np.zeros(0, dtype=np.int64)
    return np.cumprod(np.concatenate([radices[1:], [1]])[::-1])[::-1].astype(np.int64)


def _to_numpy(array: Any, what: str) -> np.ndarray:
    return as_array(array, what=f"IOTable: {what}", error=TableError)


def _domains(input_domains: Domain | Sequence[Domain], fan_in: int | None) -> tuple[Domain, ...]:
    if isinstance(input_domains, Domain):
        if fan_in is None:
            msg = "IOTable: give one Domain per input (a sequence) when the fan-in cannot be inferred"
            raise TableError(msg)
        return (input_domains,) * fan_in
    domains = tuple(input_domains)
    if not domains or not all(isinstance(d, Domain) for d in domains):
        msg = f"IOTable: input_domains must be a Domain or a non-empty sequence of Domains, received {input_domains!r}"
        raise TableError(msg)
    if fan_in is not None and len(domains) != fan_in:
        msg = f"IOTable: {len(domains)} input domain(s) for {fan_in} input column(s); expected one per input"
        raise TableError(msg)
    return domains


class IOTable:
    """One unit's table: integer input codes ``(N, fan_in)`` -> outputs ``(N, fan_out)``.

    Outputs are codes of ``output_domain`` when the unit ends in a quantizer, raw values (float) otherwise.
    Build a table from arrays or tensors (``IOTable(inputs, outputs, input_domains=...)``), from
    ``(input_tuple, output_tuple)`` pairs (:meth:`from_pairs`), or from outputs in address order
    (:meth:`dense`). Integer ``outputs`` with an ``output_domain`` are codes; float ones are values and are
    encoded. Rows are kept in ascending packed-address order (see the module docstring). ``layer`` and
    ``unit`` name where a table came from (set by :func:`iotable.precompute`; ``None`` otherwise).

    Example:
        >>> d = Domain.uniform(1)
        >>> t = IOTable([[0, 0], [0, 1], [1, 0], [1, 1]], [[0], [1], [1], [0]], input_domains=d)
        >>> t.is_dense, len(t), t.lookup([[1, 0], [1, 1]]).tolist()
        (True, 4, [[1], [0]])
        >>> list(t)[1]
        ((0, 1), (1,))
    """

    __slots__ = (
        "_addresses",
        "_domains",
        "_dont_care",
        "_inputs",
        "_output_domain",
        "_outputs",
        "layer",
        "unit",
    )

    def __init__(
        self,
        inputs: Any,
        outputs: Any,
        *,
        input_domains: Domain | Sequence[Domain],
        output_domain: Domain | None = None,
        dont_care: Any = None,
        layer: str | None = None,
        unit: int | None = None,
    ) -> None:
        in_arr = _to_numpy(inputs, "inputs")
        if in_arr.ndim != 2 or (in_arr.dtype.kind not in "biu" and in_arr.size):
            msg = f"IOTable: inputs must be integer codes of shape (N, fan_in), received {in_arr.dtype} {in_arr.shape}"
            raise TableError(msg)
        domains = _domains(input_domains, in_arr.shape[1])
        out_arr = self._check_outputs(outputs, in_arr.shape[0], output_domain)
        self._domains = domains
        self._output_domain = output_domain
        radices = self.radices
        for j, n in enumerate(radices):
            column = in_arr[:, j]
            if column.size and (column.min() < 0 or column.max() >= n):
                bad = int(column[(column < 0) | (column >= n)][0])
                msg = f"IOTable: input column {j} holds code {bad}; expected codes 0..{n - 1} of {domains[j]!r}"
                raise TableError(msg)
        addresses = in_arr.astype(np.int64) @ self.address_weights if in_arr.size else np.zeros(0, np.int64)
        order = np.argsort(addresses, kind="stable")
        addresses = addresses[order]
        if addresses.size > 1 and (np.diff(addresses) == 0).any():
            row = in_arr[order[int(np.flatnonzero(np.diff(addresses) == 0)[0])]]
            msg = f"IOTable: input row {tuple(int(v) for v in row)} appears more than once; expected distinct rows"
            raise TableError(msg)
        self._outputs = out_arr[order]
        self._outputs.flags.writeable = False
        dense = addresses.size == math.prod(radices)
        self._addresses = None if dense else addresses
        self._inputs = None if dense else in_arr[order].astype(code_dtype(max(radices)))
        self._dont_care = self._check_dont_care(dont_care)
        self.layer, self.unit = layer, unit

    # -- other constructors -------------------------------------------------------------------------------

    @classmethod
    def dense(
        cls,
        outputs: Any,
        *,
        input_domains: Sequence[Domain],
        output_domain: Domain | None = None,
        layer: str | None = None,
        unit: int | None = None,
    ) -> IOTable:
        """A dense table from outputs listed in ascending address order (no input array is stored).

        Example:
            >>> t = IOTable.dense([[0.0], [1.0], [1.0], [2.0]], input_domains=[Domain.uniform(1)] * 2)
            >>> t.inputs.tolist()
            [[0, 0], [0, 1], [1, 0], [1, 1]]
        """
        self = cls.__new__(cls)
        self._domains = _domains(input_domains, None)
        self._output_domain = output_domain
        self._outputs = self._check_outputs(outputs, math.prod(self.radices), output_domain)
        if self._outputs.flags.writeable:
            self._outputs.flags.writeable = False
        self._addresses = self._inputs = self._dont_care = None
        self.layer, self.unit = layer, unit
        return self

    @classmethod
    def _trusted(
        cls,
        outputs: np.ndarray,
        *,
        input_domains: Sequence[Domain],
        output_domain: Domain | None,
        layer: str | None,
        unit: int | None,
    ) -> IOTable:
        """A dense table from outputs iotable itself produced (already checked): no copy, no scan."""
        self = cls.__new__(cls)
        self._domains = tuple(input_domains)
        self._output_domain = output_domain
        self._outputs = outputs
        self._addresses = self._inputs = self._dont_care = None
        self.layer, self.unit = layer, unit
        return self

    @classmethod
    def from_pairs(
        cls,
        pairs: Iterable[tuple[Sequence[int], Sequence[Any]]],
        *,
        input_domains: Domain | Sequence[Domain],
        output_domain: Domain | None = None,
        dont_care: Any = None,
    ) -> IOTable:
        """A table from ``(input_tuple, output_tuple)`` pairs, the format iterating a table yields.

        Example:
            >>> t = IOTable.from_pairs([((0, 1), (3.0,)), ((1, 1), (4.0,))], input_domains=Domain.uniform(1))
            >>> t.is_dense, t.lookup([0, 1]).tolist()
            (False, [3.0])
        """
        rows = list(pairs)
        if not rows:
            msg = "IOTable.from_pairs: expected at least one (input_tuple, output_tuple) pair, received none"
            raise TableError(msg)
        try:
            inputs = np.asarray([tuple(i) for i, _ in rows])
            outputs = np.asarray([tuple(o) if isinstance(o, Iterable) else (o,) for _, o in rows])
        except (TypeError, ValueError) as exc:
            msg = f"IOTable.from_pairs: expected pairs of equal-length tuples, received {rows[0]!r} ... ({exc})"
            raise TableError(msg) from None
        return cls(inputs, outputs, input_domains=input_domains, output_domain=output_domain, dont_care=dont_care)

    # -- validation helpers -------------------------------------------------------------------------------

    @staticmethod
    def _check_outputs(outputs: Any, rows: int, output_domain: Domain | None) -> np.ndarray:
        out = _to_numpy(outputs, "outputs")
        if out.ndim == 1:
            out = out[:, None]
        if out.ndim != 2 or out.shape[0] != rows:
            msg = f"IOTable: outputs must have shape ({rows}, fan_out), received {out.shape}"
            raise TableError(msg)
        if output_domain is None:
            if out.dtype.kind not in "biuf":
                msg = f"IOTable: outputs must be numeric, received dtype {out.dtype}"
                raise TableError(msg)
            return out if out.flags.c_contiguous else np.ascontiguousarray(out)
        if out.dtype.kind == "f":
            return output_domain.encode(out)
        if out.dtype.kind not in "biu" or (out.size and (out.min() < 0 or out.max() >= len(output_domain))):
            msg = f"IOTable: outputs must be codes 0..{len(output_domain) - 1} of {output_domain!r}"
            raise TableError(msg)
        return out.astype(output_domain.code_dtype, copy=False)  # memory-mapped tables stay mapped

    def _fill_value(self, value: Any, what: str) -> np.ndarray:
        """A don't-care / default output row: a scalar or one value per output, valid for the outputs."""
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.ndim > 1 or array.size not in (1, self.fan_out):
            msg = f"IOTable: {what} must be a number or {self.fan_out} number(s), one per output; received {value!r}"
            raise TableError(msg)
        if self._output_domain is not None:
            n = len(self._output_domain)
            fractional = array.dtype.kind == "f" and not np.all(array == np.round(array))
            if fractional or (array < 0).any() or (array >= n).any():
                msg = f"IOTable: {what} must be output codes 0..{n - 1} of {self._output_domain!r}, received {value!r}"
                raise TableError(msg)
        return np.broadcast_to(array.astype(self._outputs.dtype), (self.fan_out,)).copy()

    def _check_dont_care(self, dont_care: Any) -> np.ndarray | None:
        if dont_care is None:
            return None
        value = self._fill_value(dont_care, "dont_care")
        return value

    # -- shape and domains --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._outputs.shape[0])

    @property
    def rows(self) -> int:
        """Number of rows held (``len(self)``)."""
        return len(self)

    @property
    def fan_in(self) -> int:
        """Number of inputs (columns of :attr:`inputs`)."""
        return len(self._domains)

    @property
    def fan_out(self) -> int:
        """Number of outputs (columns of :attr:`outputs`)."""
        return int(self._outputs.shape[1])

    @property
    def input_domains(self) -> tuple[Domain, ...]:
        """The domain of each input column."""
        return self._domains

    @property
    def output_domain(self) -> Domain | None:
        """The outputs' domain when outputs are codes, else ``None`` (outputs are raw values)."""
        return self._output_domain

    @property
    def radices(self) -> tuple[int, ...]:
        """Number of codes of each input (the digits of the packed address)."""
        return tuple(len(d) for d in self._domains)

    @property
    def input_bits(self) -> int:
        """Address bits: the sum of the inputs' code bits."""
        return sum(d.bits for d in self._domains)

    @property
    def address_weights(self) -> np.ndarray:
        """Weight of each input code in the packed address; the first input is the most significant."""
        radices = self.radices
        if math.prod(radices) >= 2**62:
            msg = f"IOTable: {math.prod(radices)} addresses do not fit a 64-bit integer; decompose finer"
            raise TableError(msg)
        return place_values(radices)

    @property
    def is_dense(self) -> bool:
        """Whether every input combination has a row."""
        return self._addresses is None

    @property
    def dont_care(self) -> np.ndarray | None:
        """The outputs a lookup of a missing row returns, or ``None`` (then a missing row is an error)."""
        return self._dont_care

    # -- rows ---------------------------------------------------------------------------------------------

    @property
    def inputs(self) -> np.ndarray:
        """Input codes of every row, shape ``(N, fan_in)``, in ascending address order."""
        if self._inputs is not None:
            return self._inputs
        addresses = np.arange(len(self), dtype=np.int64)
        return self.unpack(addresses)

    @property
    def outputs(self) -> np.ndarray:
        """Outputs of every row, shape ``(N, fan_out)``: codes of :attr:`output_domain`, or raw values."""
        return self._outputs

    @property
    def addresses(self) -> np.ndarray:
        """Packed address of every row, ascending."""
        if self._addresses is None:
            return np.arange(len(self), dtype=np.int64)
        return self._addresses

    def output_values(self) -> np.ndarray:
        """Outputs as real values (decoded through :attr:`output_domain` when outputs are codes)."""
        if self._output_domain is None:
            return self._outputs
        return self._output_domain.decode(self._outputs)

    def unpack(self, addresses: Any) -> np.ndarray:
        """Input codes of packed ``addresses`` (integers from 0 to the address space), shape ``(M, fan_in)``.

        Example:
            >>> t = IOTable.dense([[0.0]] * 6, input_domains=[Domain.uniform(1), Domain.values([0, 1, 2])])
            >>> t.unpack([0, 5]).tolist()
            [[0, 0], [1, 2]]
        """
        addr = self._addresses_in_range(addresses).reshape(-1, 1)
        digits = (addr // self.address_weights[None, :]) % np.asarray(self.radices, dtype=np.int64)[None, :]
        return digits.astype(code_dtype(max(self.radices)))

    def _addresses_in_range(self, addresses: Any) -> np.ndarray:
        """``addresses`` as int64, each an integer from 0 to the address space (no wrap, no truncation)."""
        space = math.prod(self.radices)
        try:
            array = np.asarray(addresses)
        except (TypeError, ValueError) as exc:
            msg = f"IOTable.unpack: expected integer addresses, received {type(addresses).__name__} ({exc})"
            raise TableError(msg) from None
        if array.dtype == object and array.size:  # Python integers beyond 64 bits
            bad = next(v for v in array.reshape(-1) if not (isinstance(v, int) and 0 <= v < space))
            msg = f"IOTable.unpack: address {bad!r} is outside 0..{space - 1}; expected integers in the address space"
            raise TableError(msg)
        if array.size and array.dtype.kind not in "iu":
            msg = (
                f"IOTable.unpack: expected integer addresses 0..{space - 1}, received dtype {array.dtype} "
                f"(e.g. {array.reshape(-1)[0].item()!r}); a fractional or boolean address names no row"
            )
            raise TableError(msg)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= space):
            bad = int(array.min()) if int(array.min()) < 0 else int(array.max())
            msg = f"IOTable.unpack: address {bad} is outside 0..{space - 1}; expected integers in the address space"
            raise TableError(msg)
        return array.astype(np.int64)

    def address(self, codes: Any) -> np.ndarray:
        """Packed address of each row of ``codes`` (shape ``(M, fan_in)`` or ``(fan_in,)``), validated."""
        array = _to_numpy(codes, "codes")
        single = array.ndim == 1
        array = array.reshape(1, -1) if single else array
        if array.ndim != 2 or array.shape[1] != self.fan_in or (array.dtype.kind not in "biu" and array.size):
            msg = (
                f"IOTable.lookup: expected integer codes of shape (M, {self.fan_in}), "
                f"received {array.dtype} {tuple(np.shape(codes))}"
            )
            raise TableError(msg)
        radices = np.asarray(self.radices)
        bad = (array < 0) | (array >= radices[None, :])
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            msg = (
                f"IOTable.lookup: row {row} holds code {int(array[row, col])} in input {col}; "
                f"expected 0..{radices[col] - 1} of {self._domains[col]!r}"
            )
            raise TableError(msg)
        return array.astype(np.int64) @ self.address_weights

    def lookup(self, codes: Any, *, default: Any = None) -> np.ndarray:
        """Outputs for many rows of input codes at once, shape ``(M, fan_out)`` (``(fan_out,)`` for one row).

        Dense tables index by packed address; partial tables search their sorted addresses. A row a partial
        table lacks returns ``default`` (or the table's declared ``dont_care``); with neither it raises
        :class:`MissingRowError`.
        """
        single = np.ndim(_to_numpy(codes, "codes")) == 1
        addresses = self.address(codes)
        if self._addresses is None:
            result = self._outputs[addresses]
        else:
            if len(self):
                pos = np.minimum(np.searchsorted(self._addresses, addresses), len(self) - 1)
                found = self._addresses[pos] == addresses
                result = self._outputs[pos]
            else:  # a partial table of no rows: every lookup is a don't-care
                found = np.zeros(len(addresses), dtype=bool)
                result = np.zeros((len(addresses), self.fan_out), dtype=self._outputs.dtype)
            if not found.all():
                fill = self._dont_care if default is None else self._fill_value(default, "default")
                if fill is None:
                    first = int(np.flatnonzero(~found)[0])
                    row = tuple(int(v) for v in self.unpack(addresses[first])[0])
                    msg = (
                        f"IOTable.lookup: input {row} (row {first} of the query) is not in this partial table "
                        f"of {len(self)} row(s) and no don't-care was declared; pass default= or dont_care="
                    )
                    raise MissingRowError(msg)
                result = np.where(found[:, None], result, fill)
        return result[0] if single else result

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], tuple[Any, ...]]]:
        """Yield ``(input_tuple, output_tuple)`` pairs in row order (for display and small tables)."""
        for inputs, outputs in zip(self.inputs.tolist(), self._outputs.tolist()):
            yield tuple(inputs), tuple(outputs)

    # -- inputs that never matter --------------------------------------------------------------------------

    def unused_inputs(self) -> tuple[int, ...]:
        """Input columns whose code never changes an output: for every other inputs' codes, every value of the
        column gives the same row. Decided for dense tables (a partial table lacks the rows to prove it: none).

        Example:
            >>> t = IOTable.dense([[0], [0], [1], [1]], input_domains=[Domain.uniform(1)] * 2)
            >>> t.unused_inputs()
            (1,)
        """
        if not self.is_dense or not len(self):
            return ()
        grid = self._outputs.reshape(*self.radices, self.fan_out)
        return tuple(
            j for j in range(self.fan_in) if np.array_equal(grid, np.broadcast_to(grid.take([0], axis=j), grid.shape))
        )

    def without_inputs(self, columns: Sequence[int]) -> IOTable:
        """The same function with the (unused, see :meth:`unused_inputs`) ``columns`` removed from its inputs.

        Raises:
            TableError: a partial table, or a column that does change the outputs.
        """
        drop = sorted({int(c) for c in columns})
        if not drop:
            return self
        if not self.is_dense or not set(drop) <= set(self.unused_inputs()):
            msg = f"IOTable: inputs {drop} change the outputs of {self!r}; only unused inputs can be removed"
            raise TableError(msg)
        grid = self._outputs.reshape(*self.radices, self.fan_out)
        kept = grid[tuple(0 if j in drop else slice(None) for j in range(self.fan_in))]
        domains = [d for j, d in enumerate(self._domains) if j not in drop]
        return IOTable._trusted(
            np.ascontiguousarray(kept.reshape(-1, self.fan_out)),
            input_domains=domains,
            output_domain=self._output_domain,
            layer=self.layer,
            unit=self.unit,
        )

    # -- identity -----------------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IOTable):
            return NotImplemented
        return (
            self._domains == other._domains
            and self._output_domain == other._output_domain
            and np.array_equal(self.addresses, other.addresses)
            and np.array_equal(self._outputs, other._outputs)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-by-identity arrays: not hashable

    def __repr__(self) -> str:
        where = f"unit {self.unit} of {_display.name(self.layer)}, " if self.layer is not None else ""
        kind = "dense" if self.is_dense else "partial"
        bits = sorted({d.bits for d in self._domains})
        out = f"codes of {self._output_domain!r}" if self._output_domain is not None else "values"
        return _display.bounded(
            f"IOTable({where}{len(self)} rows {kind}, {self.fan_in} inputs x {'/'.join(map(str, bits))} bit(s) "
            f"-> {self.fan_out} output(s) as {out})"
        )


class TableList(Sequence[IOTable]):
    """A sequence of tables, each made on first access by ``make(index)`` and kept.

    A layer's tables are views of arrays the layer already holds; making the view objects only when they
    are used keeps precomputing a many-unit layer free of per-unit work. Equal to any sequence of equal
    tables (a tuple or list of :class:`IOTable` too).

    Example:
        >>> d = Domain.uniform(1)
        >>> tables = TableList(2, lambda i: IOTable.dense([[i], [1 - i]], input_domains=[d]))
        >>> len(tables), tables[1].outputs.tolist(), tables == [tables[0], tables[1]]
        (2, [[1], [0]], True)
    """

    __slots__ = ("_made", "_make")

    def __init__(self, count: int, make: Callable[[int], IOTable]) -> None:
        self._made: list[IOTable | None] = [None] * count
        self._make = make

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, index: int) -> IOTable: ...

    @overload
    def __getitem__(self, index: slice) -> list[IOTable]: ...

    def __getitem__(self, index: int | slice) -> IOTable | list[IOTable]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self._made)
        if not -count <= index < count:
            raise IndexError(f"table index {index} out of range for {count} table(s)")
        index %= count
        table = self._made[index]
        if table is None:
            table = self._made[index] = self._make(index)
        return table

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:  # shown as the list it stands for
        return repr(list(self))
