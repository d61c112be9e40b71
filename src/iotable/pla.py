"""Export tables to PLA files (Espresso format) for logic minimisation, and read them back.

One file per table. Inputs: each input code in binary, most significant bit first, inputs in the table's
input order (``.ilb`` labels ``x<j>_<bit>``). Outputs: each output code in binary, most significant bit
first (``.ob`` labels ``y<k>_<bit>``). The file is ``.type fr``: every row a table holds is listed with its
output bits (``1`` on-set, ``0`` off-set); rows a partial table lacks are don't-cares — listed with ``-``
outputs (``dont_cares="explicit"``, the default for tables up to 2**16 rows) or left out, which in type
``fr`` means the same (``"implicit"``). Input codes a non-power-of-two domain does not use are never listed,
so they are don't-cares as well. Text is produced with vectorized byte arithmetic, never a loop over rows.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import bits
from ._util.files import atomic_write
from .domain import Domain
from .errors import IOTableError, PLAError
from .table import IOTable

__all__ = ["PLAError", "export_pla", "read_pla", "write_pla"]


_EXPLICIT_LIMIT = 2**16


def pla_text(table: IOTable, *, dont_cares: str = "auto") -> bytes:
    """The PLA file of ``table`` as bytes (see the module docstring for the layout)."""
    if not isinstance(table, IOTable):
        msg = f"write_pla: expected an IOTable, received {type(table).__name__}"
        raise PLAError(msg)
    if table.output_domain is None:
        msg = f"{table!r}: PLA needs code outputs (a table that ends in a quantizer); this one holds raw values"
        raise PLAError(msg)
    if dont_cares not in ("auto", "explicit", "implicit"):
        msg = f"write_pla: dont_cares must be 'auto', 'explicit' or 'implicit', received {dont_cares!r}"
        raise PLAError(msg)
    in_widths = bits.widths(table.input_domains)
    out_widths = [bits.width(table.output_domain)] * table.fan_out
    full = int(np.prod(table.radices))
    explicit = dont_cares == "explicit" or (dont_cares == "auto" and full <= _EXPLICIT_LIMIT)
    rows = np.concatenate(
        [
            bits.digits(table.inputs, in_widths),
            np.full((len(table), 1), 2, np.uint8),
            bits.digits(table.outputs, out_widths),
        ],
        axis=1,
    )
    if explicit and not table.is_dense:
        missing = np.setdiff1d(np.arange(full, dtype=np.int64), table.addresses, assume_unique=True)
        dc = np.concatenate(
            [
                bits.digits(table.unpack(missing), in_widths),
                np.full((len(missing), 1), 2, np.uint8),
                np.full((len(missing), sum(out_widths)), 3, np.uint8),
            ],
            axis=1,
        )
        rows = np.concatenate([rows, dc])
    # 0 -> '0', 1 -> '1', 2 -> ' ', 3 -> '-', then a newline per row.
    alphabet = np.frombuffer(b"01 -", dtype=np.uint8)
    body = np.concatenate([alphabet[rows], np.full((len(rows), 1), ord("\n"), np.uint8)], axis=1).tobytes()
    labels_in = " ".join(f"x{j}_{b}" for j, w in enumerate(in_widths) for b in range(w - 1, -1, -1))
    labels_out = " ".join(f"y{k}_{b}" for k, w in enumerate(out_widths) for b in range(w - 1, -1, -1))
    where = f"unit {table.unit} of layer {table.layer}" if table.layer is not None else "an iotable table"
    header = (
        f"# {where}: {table.fan_in} inputs, {table.fan_out} outputs, {len(table)} of {full} rows\n"
        f"# inputs: {', '.join(repr(d) for d in dict.fromkeys(table.input_domains))}; "
        f"outputs: {table.output_domain!r}; codes in binary, most significant bit first\n"
        f".i {sum(in_widths)}\n.o {sum(out_widths)}\n.ilb {labels_in}\n.ob {labels_out}\n.type fr\n.p {len(rows)}\n"
    )
    return header.encode() + body + b".e\n"


def _path(path: Any, what: str) -> Path:
    """``path`` as a :class:`Path`, or a :class:`PLAError` for a non-path or a NUL character."""
    if not isinstance(path, (str, os.PathLike)):
        msg = f"{what}: expected a path (str or os.PathLike), received {type(path).__name__}"
        raise PLAError(msg)
    if "\0" in os.fspath(path):
        msg = f"{what}: the path {os.fspath(path)!r} holds a NUL character, which no file name can; pass another path"
        raise PLAError(msg)
    return Path(path)


def _disk_error(what: str, path: Path, exc: OSError) -> PLAError:
    """A :class:`PLAError` for a failed file operation: the path, the system's reason and what to do."""
    fixes = {
        errno.ENOSPC: "free space on that disk or write elsewhere",
        errno.EACCES: "write to a folder you may write to",
        errno.EPERM: "write to a folder you may write to",
        errno.EROFS: "write to a writable file system",
        errno.ENAMETOOLONG: "use a shorter path",
    }
    fix = fixes.get(exc.errno or 0, "check the path and the disk")
    return PLAError(f"{what}: cannot write {str(path)!r}: {exc.strerror or exc}; {fix}")


def _check_dont_cares(dont_cares: Any, what: str) -> None:
    if dont_cares not in ("auto", "explicit", "implicit"):
        msg = f"{what}: dont_cares must be 'auto', 'explicit' or 'implicit', received {dont_cares!r}"
        raise PLAError(msg)


def write_pla(table: IOTable, path: str | os.PathLike[str], *, dont_cares: str = "auto") -> Path:
    """Write one table as a PLA file (atomically) and return its path.

    Example:
        >>> t = IOTable.from_pairs([((0, 1), (1,)), ((1, 1), (0,))], input_domains=Domain.uniform(1),
        ...                        output_domain=Domain.uniform(1))
        >>> print(pla_text(t).decode().splitlines()[-5:])
        ['01 1', '11 0', '00 -', '10 -', '.e']
    """
    target = _path(path, "write_pla")
    _check_dont_cares(dont_cares, "write_pla")
    try:
        if target.is_dir():
            msg = f"write_pla: {str(target)!r} is a directory; pass the path of the file to write"
            raise PLAError(msg)
        folder_exists = target.parent.is_dir()
    except OSError as exc:
        raise _disk_error("write_pla", target, exc) from None
    if not folder_exists:
        msg = f"write_pla: the folder of {str(target)!r} does not exist; create it first"
        raise PLAError(msg)
    text = pla_text(table, dont_cares=dont_cares)
    try:
        atomic_write(target, text)
    except OSError as exc:
        raise _disk_error("write_pla", target, exc) from None
    return target


def export_pla(tables: Any, directory: str | os.PathLike[str], *, dont_cares: str = "auto") -> list[Path]:
    """Write every table of a network or layer (anything with ``.tables``) to ``directory``, one PLA each.

    Files are named ``<layer>.u<unit>.pla`` (characters other than letters, digits, ``-`` and ``_`` in a
    layer name become ``_``; at most 120 of them are kept). Two tables whose names are then equal, ignoring
    case (as some file systems do), never share a file: the later one, in table order, gets ``.2``, ``.3``, ...
    before ``.pla``. ``directory`` is created if needed; a file at that path is refused.

    Returns:
        The paths written, one per table, in table order (all different).

    Example:
        >>> import tempfile
        >>> from iotable import Domain, IOTable
        >>> def xor(layer):
        ...     return IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                          output_domain=Domain.uniform(1), layer=layer, unit=0)
        >>> [p.name for p in export_pla([xor("a b"), xor("a_b"), xor("A_B")], tempfile.mkdtemp())]
        ['a_b.u0.pla', 'a_b.u0.2.pla', 'A_B.u0.3.pla']
    """
    folder = _path(directory, "export_pla")
    _check_dont_cares(dont_cares, "export_pla")
    given = list(getattr(tables, "tables", tables)) if not isinstance(tables, (str, bytes)) else [tables]
    items: list[IOTable] = []
    for table in given:  # validate everything before writing a byte
        if not isinstance(table, IOTable):
            msg = f"export_pla: expected a network, a layer or IOTables, received {type(table).__name__}"
            raise PLAError(msg)
        items.append(table)
        if table.output_domain is None:
            msg = f"export_pla: {table!r} holds raw values; PLA needs code outputs (end the layer in a quantizer)"
            raise PLAError(msg)
    try:
        if folder.exists() and not folder.is_dir():
            msg = f"export_pla: {str(folder)!r} exists and is not a directory; pass a directory to write the files in"
            raise PLAError(msg)
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _disk_error("export_pla", folder, exc) from None
    return [write_pla(table, folder / name, dont_cares=dont_cares) for table, name in zip(items, _file_names(items))]


def _file_names(tables: list[IOTable]) -> list[str]:
    """``<layer>.u<unit>.pla`` per table, made unique ignoring case by a ``.<n>`` suffix on later repeats (a
    cleaned layer name holds no dot, so a suffixed name cannot equal another table's plain one)."""
    names: list[str] = []
    taken: set[str] = set()
    for k, table in enumerate(tables):
        layer = re.sub(r"[^A-Za-z0-9_-]", "_", str(table.layer))[:120] if table.layer is not None else "table"
        stem = f"{layer}.u{table.unit if table.unit is not None else k}"
        name, n = f"{stem}.pla", 1
        while name.lower() in taken:
            n += 1
            name = f"{stem}.{n}.pla"
        taken.add(name.lower())
        names.append(name)
    return names


def _read_domains(input_domains: Any, output_domain: Any, inputs: int | None, file: str) -> list[Domain]:
    """The input domains, one per input (a single Domain repeated to fill the ``.i`` bits), validated."""
    if not isinstance(output_domain, Domain):
        msg = (
            f"read_pla: output_domain must be a Domain (PLA outputs are codes of it), received "
            f"{type(output_domain).__name__}"
        )
        raise PLAError(msg)
    if isinstance(input_domains, Domain):
        width = bits.width(input_domains)
        if inputs is None or inputs % width:
            msg = (
                f"read_pla: {file} declares .i {inputs}, not a multiple of the {width} bit(s) of one input of "
                f"{input_domains!r}; pass one Domain per input"
            )
            raise PLAError(msg)
        return [input_domains] * (inputs // width)
    if isinstance(input_domains, (str, bytes)) or not isinstance(input_domains, Sequence):
        kind = type(input_domains).__name__
        msg = f"read_pla: input_domains must be a Domain or a sequence of Domains, received {kind}"
        raise PLAError(msg)
    domains = list(input_domains)
    if not domains or not all(isinstance(d, Domain) for d in domains):
        msg = f"read_pla: input_domains must be a non-empty sequence of Domains, received {input_domains!r}"
        raise PLAError(msg)
    return domains


def _header(text: bytes, key: bytes, file: str) -> int | None:
    """The value of the ``.i``/``.o``/``.p`` line (at most one, a non-negative integer), or ``None``."""
    lines = re.findall(rb"^\." + key + rb"(?:[ \t]+(\S*))?[ \t]*\r?$", text, flags=re.M)
    if not lines:
        return None
    if len(lines) > 1 or not re.fullmatch(rb"[0-9]{1,9}", lines[0]):
        shown = [line.decode("ascii", "replace") for line in lines]
        msg = f"read_pla: {file} has .{key.decode()} line(s) {shown}; expected one, with a non-negative integer"
        raise PLAError(msg)
    return int(lines[0])


def read_pla(path: str | os.PathLike[str], *, input_domains: Sequence[Domain], output_domain: Domain) -> IOTable:
    """Read a PLA file written by :func:`write_pla` back into a (partial) table of its care rows.

    ``input_domains`` is one Domain per input, or one Domain for every input (their number is then read
    from ``.i``). Rows whose outputs are all ``-`` are don't-cares and are left out; a row with some ``-``
    outputs, input bits that are not ``0``/``1`` or output bits that are not ``0``/``1``/``-`` is an error
    (iotable never writes them), as is a row whose codes lie outside the domains.
    """
    file = _path(path, "read_pla")
    name = repr(str(file))
    try:
        text = file.read_bytes()
    except OSError as exc:
        msg = f"read_pla: cannot read {name}: {exc.strerror or exc}"
        raise PLAError(msg) from None
    n_in, n_out, declared_rows = (_header(text, key, name) for key in (b"i", b"o", b"p"))
    domains = _read_domains(input_domains, output_domain, n_in, name)
    in_widths = bits.widths(domains)
    out_width = bits.width(output_domain)
    if n_in is None or n_out is None:
        missing = " and ".join(f".{k}" for k, v in (("i", n_in), ("o", n_out)) if v is None)
        msg = f"read_pla: {name} has no {missing} line; a PLA file declares its input and output bits first"
        raise PLAError(msg)
    if n_in != sum(in_widths) or n_out == 0 or n_out % out_width:
        msg = (
            f"read_pla: {name} declares .i {n_in} .o {n_out}; expected .i {sum(in_widths)} and .o a positive "
            f"multiple of {out_width} for the given domains"
        )
        raise PLAError(msg)
    ins, outs = _care_rows(text, n_in, n_out, declared_rows, name)
    try:
        return IOTable(
            _codes(ins, in_widths),
            _codes(outs, [out_width] * (n_out // out_width)),
            input_domains=domains,
            output_domain=output_domain,
        )
    except IOTableError as exc:
        msg = f"read_pla: {name} does not hold a table of the given domains: {exc}"
        raise PLAError(msg) from None


def _care_rows(
    text: bytes, n_in: int, n_out: int, declared_rows: int | None, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The input and output bits (0/1, one byte each) of the rows a PLA file specifies, checked: every row
    has fields of ``n_in`` and ``n_out`` characters, ``.p`` (when given) counts them, inputs are ``0``/``1``
    and outputs ``0``/``1``/``-``, and a row's outputs are all ``-`` (a don't-care, left out) or none."""
    lines = b"\n".join(ln for ln in text.split(b"\n") if ln.strip() and not ln.lstrip().startswith((b".", b"#")))
    tokens = lines.split()
    if len(tokens) % 2:
        msg = f"read_pla: {name} has a row without outputs"
        raise PLAError(msg)
    widths = np.char.str_len(np.asarray(tokens, dtype=bytes)).reshape(-1, 2) if tokens else np.zeros((0, 2))
    if (widths != [n_in, n_out]).any():
        row = int(np.flatnonzero((widths != [n_in, n_out]).any(axis=1))[0])
        msg = f"read_pla: {name} row {row} has fields of widths {widths[row].tolist()}; expected {[n_in, n_out]}"
        raise PLAError(msg)
    if declared_rows is not None and declared_rows != len(tokens) // 2:
        msg = f"read_pla: {name} declares .p {declared_rows} but lists {len(tokens) // 2} row(s)"
        raise PLAError(msg)
    ins = np.frombuffer(b"".join(tokens[0::2]), dtype=np.uint8).reshape(-1, n_in)
    outs = np.frombuffer(b"".join(tokens[1::2]), dtype=np.uint8).reshape(-1, n_out)
    bad_in = ~np.isin(ins, np.frombuffer(b"01", np.uint8))
    bad_out = ~np.isin(outs, np.frombuffer(b"01-", np.uint8))
    if bad_in.any() or bad_out.any():
        row = int(np.flatnonzero(bad_in.any(axis=1) | bad_out.any(axis=1))[0])
        fields = b" ".join(tokens[2 * row : 2 * row + 2]).decode("ascii", "replace")
        msg = f"read_pla: {name} row {row} ({fields!r}) holds a character other than 0/1 (inputs) or 0/1/- (outputs)"
        raise PLAError(msg)
    care = (outs != ord("-")).all(axis=1)
    if ((outs == ord("-")).any(axis=1) & care).any():
        row = int(np.flatnonzero((outs == ord("-")).any(axis=1) & care)[0])
        msg = f"read_pla: {name} row {row} has partly unspecified outputs; expected all '-' or none"
        raise PLAError(msg)
    return ins[care] - ord("0"), outs[care] - ord("0")


def _codes(digits: np.ndarray, widths: Sequence[int]) -> np.ndarray:
    """Codes from binary digits (:func:`iotable.bits.digits`' layout), one code per width: each field's digits
    packed as one-bit fields, most significant first."""
    starts = np.cumsum((0, *widths))
    return np.stack([bits.pack(digits[:, a:b], (1,) * (b - a)) for a, b in itertools.pairwise(starts)], axis=1)
