"""Running a packed pass: sample ``z`` sets every input to its code ``forms[e] . z`` over GF(q), so classes
whose inputs overlap share the pass, each receiving every row once, out of order (see :mod:`.passes`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import DomainError
from ..front.layerplan import LayerPlan
from .cache import FileSink, MemorySink
from .design import Field
from .forward import _encode, _encodes, _numpy_dtype, _Run
from .passes import _Packed


def _field_codes(gf: Field, forms: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """``(samples, inputs)`` codes ``forms[e] . z`` over ``gf`` of each sample ``z`` (its base-q digits).

    Field arithmetic runs on base-p digits: multiplication by a coefficient is a matrix over GF(p), so all
    inputs' codes come from one integer matrix product, reduced mod p.
    """
    p, k, q = gf.p, gf.k, gf.q
    n_in, fan_in = forms.shape
    place = ((q ** np.arange(fan_in - 1, -1, -1))[:, None] * (p ** np.arange(k))[None, :]).reshape(-1)
    digits = samples[:, None] // place % p  # (samples, fan_in * k): digit l of base-q digit f
    matrix = gf.times[forms].transpose(1, 3, 0, 2).reshape(fan_in * k, n_in * k)
    # A float product is exact here (sums of at most 64 * 6 terms below 64 each) and runs in BLAS.
    sums = (digits.astype(np.float64) @ matrix.astype(np.float64)).astype(np.int64)
    return (sums % p).reshape(len(samples), n_in, k) @ p ** np.arange(k)


def _fill_packed(run: _Run, packed: _Packed, sinks: dict[int, MemorySink | FileSink], *, bar: Any) -> None:
    """Run a packed pass: sample ``z`` sets input ``e`` to the code ``forms[e] . z`` over GF(q).

    Codes are linear in ``z``, so a chunk of whole blocks of ``q**m`` samples (the last m digits varying) adds
    (over the field) each block's high-digit codes to one table of low-digit codes computed once; in
    characteristic 2 that addition is a XOR, and so is each class's row number, whose base-q digits are its
    inputs' codes. Rows arrive out of order: outputs are kept in sample order and put in row order when the
    pass ends. Everything but the forward passes depends on the plan alone and is kept on the pass
    (:func:`_packed_inputs`), inputs and row orders included when the pass is one chunk.
    """
    layer = run.layer
    prep = _packed_inputs(run, packed)
    rows_total = packed.rows
    out_dtype = layer.output_domain.code_dtype if layer.output_domain is not None else _numpy_dtype(run.dtype)
    gathered = np.empty((len(prep.out_index), rows_total), dtype=out_dtype)  # outputs in sample order
    rows = prep.rows if prep.rows is not None else torch.empty((len(prep.permuted), rows_total), dtype=prep.dtype)
    for z0 in range(0, rows_total, prep.per_chunk):
        z1 = min(rows_total, z0 + prep.per_chunk)
        batch = z1 - z0
        if prep.inputs is not None:  # one chunk: its inputs are the plan's (a copy: a module may write to them)
            x = prep.inputs.copy()
        else:
            x, chunk_rows = prep.chunk(z0, z1)
            if chunk_rows is not None:
                rows[:, z0:z1] = chunk_rows
        result = run.forward(x)[:, prep.out_index]
        coded = run.encoder(result) if run.encoder is not None else result
        if coded is None:
            samples = np.arange(z0, z1)
            coded = _encode_packed(result, layer, packed, prep.owner, samples, rows[:, z0:z1].numpy())
        gathered[:, z0:z1] = coded.T
        bar.update(batch * sum(len(c.units) for c in packed.classes))  # a sample is a row of every unit

    # Every permuted column to row order at once: column j of class c puts sample z at row rows[c][z].
    if len(prep.moved):
        in_order = gathered.copy()
        in_order[prep.moved[:, None], rows.numpy()[prep.order[prep.owner[prep.moved]]]] = gathered[prep.moved]
        gathered = in_order
    column = 0
    for cls in packed.classes:
        for unit in cls.units:
            sinks[unit.index].write(0, gathered[column : column + unit.fan_out].T)
            column += unit.fan_out


@dataclass
class _PackedInputs:
    """What a packed pass's forward passes read, made once per pass (see :func:`_packed_inputs`)."""

    per_chunk: int
    dtype: torch.dtype  # of indices and rows
    out_index: np.ndarray  # every class's output columns
    owner: np.ndarray  # class of each output column
    permuted: np.ndarray  # classes whose rows are not in sample order
    order: np.ndarray  # (classes,) each class's place among the permuted ones, -1 for the others
    moved: np.ndarray  # output columns of permuted classes
    chunk: Callable[[int, int], tuple[np.ndarray, torch.Tensor | None]]  # inputs and rows of samples z0:z1
    inputs: np.ndarray | None  # the one chunk's inputs, when the pass is one chunk
    rows: torch.Tensor | None  # (permuted classes, rows) every permuted class's row of each sample, then


def _packed_inputs(run: _Run, packed: _Packed) -> _PackedInputs:
    """The structural part of :func:`_fill_packed`, kept on the pass (per dtype and chunk size)."""
    key = (run.dtype, run.chunk)
    if key in packed.memo:
        return packed.memo[key]
    gf = packed.gf
    q = gf.q
    fan_in = packed.forms.shape[1]
    rows_total = packed.rows
    n_frame = run.frame.offsets.numel()
    block = 1  # samples whose last digits vary: the largest power of q in a chunk (at most all rows)
    while block * q <= min(run.chunk, rows_total):
        block *= q
    per_chunk = run.chunk // block * block

    # Gather index into ``values`` ``(frame elements, q)``, whose row e holds element e's domain values (the
    # fill value throughout for elements no class of the pass reads): e * q + code.
    buffer_dtype = _numpy_dtype(run.dtype)
    elements = torch.as_tensor(packed.elements)
    table = np.repeat(run.frame.fill_values(buffer_dtype)[:, None], q, axis=1)
    table[packed.elements] = run.frame.exact[run.frame.offsets.numpy()[packed.elements, None] + np.arange(q)]
    values = torch.from_numpy(table.astype(buffer_dtype).reshape(-1))
    # int32 indices and rows where they fit: the per-chunk XOR and gather move half the bytes.
    index_dtype = torch.int32 if n_frame * q < 2**31 and rows_total < 2**31 else torch.int64
    low = torch.zeros((block, n_frame), dtype=index_dtype)
    low[:, elements] = torch.as_tensor(_field_codes(gf, packed.forms, np.arange(block, dtype=np.int64))).to(low)
    base = torch.arange(n_frame, dtype=index_dtype) * q
    low_index = low + base if gf.p == 2 else None
    add = torch.as_tensor(gf.add.reshape(-1))

    # Rows of the classes not in sample order: the base-q number of their inputs' codes.
    permuted = np.flatnonzero(~packed.identity)
    place = torch.as_tensor(q ** np.arange(fan_in - 1, -1, -1)).to(index_dtype)
    positions = torch.as_tensor(packed.positions[permuted])  # (permuted classes, fan_in) into ``elements``
    low_rows = (low[:, elements][:, positions] * place).sum(-1)  # (block, permuted classes)

    def chunk(z0: int, z1: int) -> tuple[np.ndarray, torch.Tensor | None]:
        batch, blocks = z1 - z0, (z1 - z0) // block
        high = torch.zeros((blocks, 1, n_frame), dtype=index_dtype)
        high_codes = torch.as_tensor(_field_codes(gf, packed.forms, np.arange(z0, z1, block, dtype=np.int64)))
        high_codes = high_codes.to(index_dtype)
        high[:, 0, elements] = high_codes
        if low_index is not None:  # GF(2**k): field addition is a XOR of codes, which leaves e * q's bits alone
            index = low_index ^ high
        else:
            index = add[low * q + high] + base
        x = np.empty((batch, n_frame), dtype=buffer_dtype)
        torch.index_select(values, 0, index.reshape(-1), out=torch.from_numpy(x).view(-1))
        chunk_rows = None
        if len(permuted):
            if gf.p == 2:  # the digits of a row are disjoint bit fields: XOR them all at once
                chunk_rows = low_rows[None] ^ (high_codes[:, positions] * place).sum(-1)[:, None]
            else:
                codes = (index - base).reshape(batch, n_frame)[:, elements]
                chunk_rows = (codes[:, positions] * place).sum(-1)
            chunk_rows = chunk_rows.reshape(batch, -1).T
        return x, chunk_rows

    widths = [sum(u.fan_out for u in c.units) for c in packed.classes]
    owner = np.repeat(np.arange(len(packed.classes)), widths)  # class of each output column
    order = np.full(len(packed.classes), -1)
    order[permuted] = np.arange(len(permuted))
    inputs, rows = None, None
    if per_chunk >= rows_total:
        inputs, chunk_rows = chunk(0, rows_total)
        rows = chunk_rows if chunk_rows is not None else torch.empty((0, rows_total), dtype=index_dtype)
    found = _PackedInputs(
        per_chunk=per_chunk,
        dtype=index_dtype,
        out_index=np.concatenate([c.output_index[0] for c in packed.classes]),
        owner=owner,
        permuted=permuted,
        order=order,
        moved=np.flatnonzero(order[owner] >= 0),
        chunk=chunk,
        inputs=inputs,
        rows=rows,
    )
    packed.memo[key] = found
    return found


def _encode_packed(
    result: np.ndarray, layer: LayerPlan, packed: _Packed, owner: np.ndarray, samples: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """:meth:`Domain.encode` of a packed chunk's outputs; on failure, the error names the first bad row.

    ``rows`` holds the chunk's row of each class not in sample order (``(such classes, samples)``).
    """
    assert layer.output_domain is not None
    try:
        return layer.output_domain.encode(result)
    except DomainError:
        pass
    permuted = iter(range(len(rows)))
    for c, cls in enumerate(packed.classes):
        class_rows = samples if packed.identity[c] else rows[next(permuted)]
        by_row = np.argsort(class_rows)
        block, class_rows = result[:, owner == c][by_row], class_rows[by_row]
        if _encodes(layer.output_domain, block):
            continue
        low, high = 0, len(block)  # the shortest failing prefix ends at the class's lowest bad row
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _encodes(layer.output_domain, block[:middle]) else (low, middle)
        _encode(block[low:high], layer, cls, int(class_rows[low]))
    raise AssertionError("Domain.encode failed on a chunk but on none of its classes")
