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

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .domain import Domain
from .errors import IOTableError
from .table import IOTable

__all__ = ["PLAError", "export_pla", "read_pla", "write_pla"]

_EXPLICIT_LIMIT = 2**16


class PLAError(IOTableError, ValueError):
    """A table cannot be written as PLA, or a PLA file does not match what it should hold."""


def _bits(codes: np.ndarray, widths: Sequence[int]) -> np.ndarray:
    """Binary digits, most significant first, of each column of ``codes``: shape ``(N, sum(widths))``."""
    columns = []
    for j, width in enumerate(widths):
        shifts = np.arange(width - 1, -1, -1, dtype=np.int64)
        columns.append((codes[:, j : j + 1].astype(np.int64) >> shifts) & 1)
    return np.concatenate(columns, axis=1).astype(np.uint8) if columns else np.zeros((len(codes), 0), np.uint8)


def _widths(domains: Sequence[Domain]) -> list[int]:
    return [max(d.bits, 1) for d in domains]


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
    in_widths = _widths(table.input_domains)
    out_widths = [max(table.output_domain.bits, 1)] * table.fan_out
    full = int(np.prod(table.radices))
    explicit = dont_cares == "explicit" or (dont_cares == "auto" and full <= _EXPLICIT_LIMIT)
    rows = np.concatenate(
        [_bits(table.inputs, in_widths), np.full((len(table), 1), 2, np.uint8), _bits(table.outputs, out_widths)],
        axis=1,
    )
    if explicit and not table.is_dense:
        missing = np.setdiff1d(np.arange(full, dtype=np.int64), table.addresses, assume_unique=True)
        dc = np.concatenate(
            [
                _bits(table.unpack(missing), in_widths),
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


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_pla(table: IOTable, path: str | os.PathLike[str], *, dont_cares: str = "auto") -> Path:
    """Write one table as a PLA file (atomically) and return its path.

    Example:
        >>> t = IOTable.from_pairs([((0, 1), (1,)), ((1, 1), (0,))], input_domains=Domain.uniform(1),
        ...                        output_domain=Domain.uniform(1))
        >>> print(pla_text(t).decode().splitlines()[-5:])
        ['01 1', '11 0', '00 -', '10 -', '.e']
    """
    target = Path(path)
    if not target.parent.is_dir():
        msg = f"write_pla: the folder of {str(target)!r} does not exist; create it first"
        raise PLAError(msg)
    _atomic_write(target, pla_text(table, dont_cares=dont_cares))
    return target


def export_pla(tables: Any, directory: str | os.PathLike[str], *, dont_cares: str = "auto") -> list[Path]:
    """Write every table of a network or layer (anything with ``.tables``) to ``directory``, one PLA each.

    Files are named ``<layer>.u<unit>.pla`` (characters other than letters, digits, ``-`` and ``_`` in a
    layer name become ``_``).
    """
    folder = Path(directory)
    items = list(getattr(tables, "tables", tables)) if not isinstance(tables, (str, bytes)) else [tables]
    for table in items:  # validate everything before writing a byte
        if not isinstance(table, IOTable):
            msg = f"export_pla: expected a network, a layer or IOTables, received {type(table).__name__}"
            raise PLAError(msg)
        if table.output_domain is None:
            msg = f"export_pla: {table!r} holds raw values; PLA needs code outputs (end the layer in a quantizer)"
            raise PLAError(msg)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, table in enumerate(items):
        layer = re.sub(r"[^A-Za-z0-9_-]", "_", str(table.layer)) if table.layer is not None else "table"
        unit = table.unit if table.unit is not None else k
        paths.append(write_pla(table, folder / f"{layer}.u{unit}.pla", dont_cares=dont_cares))
    return paths


def read_pla(path: str | os.PathLike[str], *, input_domains: Sequence[Domain], output_domain: Domain) -> IOTable:
    """Read a PLA file written by :func:`write_pla` back into a (partial) table of its care rows.

    Rows whose outputs are all ``-`` are don't-cares and are left out; a row with some ``-`` outputs, or
    input bits that are not ``0``/``1``, is an error (iotable never writes them).
    """
    file = Path(path)
    try:
        text = file.read_bytes()
    except OSError as exc:
        msg = f"read_pla: cannot read {str(file)!r}: {exc.strerror}"
        raise PLAError(msg) from None
    header = dict(re.findall(rb"^\.(i|o) (\d+)\s*$", text, flags=re.M))
    in_widths = _widths(input_domains)
    out_width = max(output_domain.bits, 1)
    if int(header.get(b"i", -1)) != sum(in_widths) or int(header.get(b"o", -1)) % out_width:
        msg = (
            f"read_pla: {str(file)!r} declares .i {header.get(b'i')!r} .o {header.get(b'o')!r}; expected .i "
            f"{sum(in_widths)} and .o a multiple of {out_width} for the given domains"
        )
        raise PLAError(msg)
    lines = b"\n".join(ln for ln in text.split(b"\n") if ln and not ln.startswith((b".", b"#")))
    tokens = lines.split()
    if len(tokens) % 2:
        msg = f"read_pla: {str(file)!r} has a row without outputs"
        raise PLAError(msg)
    n_in, n_out = sum(in_widths), int(header[b"o"])
    widths = np.char.str_len(np.asarray(tokens, dtype=bytes)).reshape(-1, 2) if tokens else np.zeros((0, 2))
    if (widths != [n_in, n_out]).any():
        row = int(np.flatnonzero((widths != [n_in, n_out]).any(axis=1))[0])
        msg = f"read_pla: {str(file)!r} row {row} has fields of widths {widths[row].tolist()}; expected {[n_in, n_out]}"
        raise PLAError(msg)
    ins = np.frombuffer(b"".join(tokens[0::2]), dtype=np.uint8).reshape(-1, n_in) - ord("0")
    outs = np.frombuffer(b"".join(tokens[1::2]), dtype=np.uint8).reshape(-1, n_out)
    care = (outs != ord("-")).all(axis=1)
    if ((outs == ord("-")).any(axis=1) & care).any() or (ins > 1).any():
        msg = f"read_pla: {str(file)!r} has rows with partly unspecified outputs or non-binary inputs"
        raise PLAError(msg)
    ins, outs = ins[care], outs[care] - ord("0")
    return IOTable(
        _codes(ins, in_widths),
        _codes(outs, [out_width] * (n_out // out_width)),
        input_domains=input_domains,
        output_domain=output_domain,
    )


def _codes(bits: np.ndarray, widths: Sequence[int]) -> np.ndarray:
    """Codes from most-significant-first binary digits, one code per width."""
    codes, start = [], 0
    for width in widths:
        weights = 1 << np.arange(width - 1, -1, -1, dtype=np.int64)
        codes.append(bits[:, start : start + width].astype(np.int64) @ weights)
        start += width
    return np.stack(codes, axis=1)
