"""Which inputs each output of a module can depend on, found by running it once (:func:`dependence`).

The module runs on a real example under a :class:`~torch.utils._python_dispatch.TorchDispatchMode` that
follows every aten operation and carries, beside each value, a boolean matrix: for every element, the input
elements it may depend on. The matrices live per *storage* (one row per storage element), so views, slices
and in-place writes through them (``out[:, k] = ...``) are followed with no rule of their own. Each
operation that makes a new value gets its dependence from a rule:

- elementwise operations: the union over their operands, broadcast; a product with a constant that is
  exactly zero drops the dependence there (a pruned weight), when the other operand is finite for every
  input (see below);
- data movement (``cat``, ``gather``, indexing with constant indices, ``clone``, padding, ...): the same
  operation run on the element numbers, so every output element follows the one element it copies;
- reductions along dimensions (``sum``, ``amax``, ``softmax``, ``sort``, ...): the union along them;
- ``mm``/``addmm``/``bmm`` and ``convolution``: the union over the operand elements with a non-zero
  constant coefficient (exactly-zero weights and masks dropped, from a finite operand only);
- indexing with indices computed from the input (a learned table looked up at an address, an embedding):
  the indices' dependence, plus everything of the indexed value when that depends on the input too.

Zero times infinity is NaN, so a zero coefficient drops a dependence only from an operand that cannot be
infinite or NaN for any input: each value computed from the input carries that flag, per storage (see
:mod:`iotable.front.finite`).

An operation without a rule makes every element of its outputs depend on everything its operands depend on
(a bound, never an omission), and is named in the result. Python control flow on a value computed from the
input (``.item()``, ``bool(x)``, ``nonzero``) cannot be followed: the result says so and callers refuse.

The result is an upper bound on the true dependence for the example's control flow; the table check after
enumeration (:func:`iotable.table.IOTable.unused_inputs`) then drops inputs that never change a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .finite import may_make_nonfinite

__all__ = ["Dependence", "dependence"]

_aten = torch.ops.aten

# Data movement: each output element is a copy of one operand element (or a constant).
_MOVES = {
    _aten.cat.default,
    _aten.stack.default,
    _aten.clone.default,
    _aten._to_copy.default,
    _aten.contiguous.default,
    _aten.index_select.default,
    _aten.gather.default,
    _aten.index.Tensor,
    _aten.repeat.default,
    _aten.flip.default,
    _aten.roll.default,
    _aten.constant_pad_nd.default,
    _aten._unsafe_view.default,
    _aten.expand_copy.default,
    _aten.permute_copy.default,
    _aten.view_copy.default,
    _aten.slice_copy.Tensor,
    _aten.select_copy.int,
    _aten.unfold_copy.default,
    _aten.copy.default,
    _aten.lift_fresh_copy.default,
    _aten.split_with_sizes_copy.default,
    _aten.unbind_copy.int,
    _aten.reflection_pad1d.default,
    _aten.reflection_pad2d.default,
    _aten.replication_pad1d.default,
    _aten.replication_pad2d.default,
    _aten.repeat_interleave.self_int,
    _aten.tril.default,
    _aten.triu.default,
    _aten.diagonal_copy.default,
}
# Index arguments of the moves: kept as they are (their own dependence handled apart).
_INDEX_ARGUMENTS = ("index", "indices")
# Reductions and scans along the `dim` argument (all dimensions when it is None or absent).
_ALONG = {
    _aten.sum.dim_IntList, _aten.sum.default, _aten.mean.dim, _aten.mean.default, _aten.amax.default,
    _aten.amin.default, _aten.max.dim, _aten.min.dim, _aten.max.default, _aten.min.default, _aten.argmax.default,
    _aten.argmin.default, _aten.prod.dim_int, _aten.prod.default, _aten.any.dim, _aten.any.default,
    _aten.all.dim, _aten.all.default, _aten.var.correction, _aten.std.correction, _aten.logsumexp.default,
    _aten._softmax.default, _aten._log_softmax.default, _aten.cumsum.default, _aten.cumprod.default,
    _aten.sort.default, _aten.sort.stable, _aten.topk.default, _aten.cummax.default, _aten.cummin.default,
    _aten.linalg_vector_norm.default, _aten.any.dims, _aten.all.dims, _aten.median.dim, _aten.mode.default,
    _aten.count_nonzero.dim_IntList, _aten.count_nonzero.default,
}  # fmt: skip
# New values shaped like an operand but not computed from it.
_SHAPED_LIKE = {
    _aten.zeros_like.default, _aten.ones_like.default, _aten.empty_like.default, _aten.full_like.default,
    _aten.new_zeros.default, _aten.new_ones.default, _aten.new_full.default, _aten.new_empty.default,
    _aten.new_empty_strided.default, _aten.rand_like.default, _aten.randn_like.default,
    _aten.randint_like.default, _aten.scalar_tensor.default, _aten.empty_strided.default,
}  # fmt: skip
# Values Python reads back: control flow on them is not followed.
_ESCAPES = {
    _aten._local_scalar_dense.default, _aten.is_nonzero.default, _aten.equal.default, _aten.nonzero.default,
    _aten.masked_select.default, _aten.unique_dim.default, _aten._unique2.default,
}  # fmt: skip


@dataclass(frozen=True)
class Dependence:
    """What :func:`dependence` found.

    Attributes:
        matrix: ``(outputs, inputs)`` booleans per sample: output element ``o`` (flat, row-major over the
            output's per-sample shape) may depend on input element ``i``.
        crosses_samples: an output of one sample depends on an input of another (a module that does not keep
            the batch axis).
        unknown: aten operations without a rule (their outputs were given all their operands' dependence).
        escapes: aten operations whose value Python read back (control flow on the input is not followed).
        sparse: aten operations that made a sparse value from the input (its dependence is not followed).
    """

    matrix: np.ndarray
    crosses_samples: bool
    unknown: tuple[str, ...]
    escapes: tuple[str, ...]
    sparse: tuple[str, ...] = ()

    def fan_in(self, output: int) -> tuple[int, ...]:
        """The input elements output element ``output`` may depend on."""
        return tuple(int(i) for i in np.flatnonzero(self.matrix[output]))


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    if t.layout != torch.strided:  # a sparse tensor has no storage: keyed by itself, it carries no rows
        return id(t), -1
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class _Follow(TorchDispatchMode):
    """Carries, per storage, one row of input dependence for each element (see the module docstring)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.rows: dict[tuple[int, int], tuple[torch.Tensor, int, torch.Tensor]] = {}
        self.unknown: set[str] = set()
        self.escapes: set[str] = set()
        self.sparse: set[str] = set()
        self.nonfinite: set[tuple[int, int]] = set()  # storages that may hold an infinity or a NaN
        self.risky: set[int] = set()  # ids of the running operation's operands that may (see _nonfinite)

    def may_be_nonfinite(self, t: Any) -> bool:
        """Whether ``t`` (computed from the input) may hold an infinity or a NaN for some input."""
        return isinstance(t, torch.Tensor) and _storage_key(t) in self.nonfinite

    # -- the per-storage rows -------------------------------------------------------------------------------
    def deps(self, t: Any) -> torch.Tensor | None:
        """``t``'s dependence, shaped ``(*t.shape, width)``, or ``None`` when it depends on no input."""
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return None
        entry = self.rows.get(_storage_key(t))
        if entry is None:
            return None
        _, itemsize, rows = entry
        if itemsize != t.element_size():
            return rows.any().expand(*t.shape, self.width) if rows.any() else None
        shape = (*t.shape, self.width)
        strides = (*(s * self.width for s in t.stride()), 1)
        return rows.as_strided(shape, strides, t.storage_offset() * self.width)

    def set_deps(self, t: torch.Tensor, value: torch.Tensor | None) -> None:
        key = _storage_key(t)
        if value is None and key not in self.rows:
            return
        if key not in self.rows:
            count = t.untyped_storage().nbytes() // max(t.element_size(), 1)
            self.rows[key] = (t, t.element_size(), torch.zeros((count, self.width), dtype=torch.bool))
        view = self.deps(t)
        if view is None:
            return
        view.copy_(torch.zeros((), dtype=torch.bool) if value is None else value.expand_as(view))

    # -- dispatch --------------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        before = {id(t): self.deps(t) for t in inputs}
        before = {k: (v.clone() if v is not None else None) for k, v in before.items()}
        self.risky = {id(t) for t in inputs if before.get(id(t)) is not None and self.may_be_nonfinite(t)}
        out = func(*args, **kwargs)
        if not any(v is not None for v in before.values()):
            return out  # nothing here depends on the input (outputs written in place keep their rows)
        if func in _ESCAPES:
            self.escapes.add(str(func))
        rule = _copy if func.overloadpacket is _aten.copy_ else _rule(func)
        written = [id(w) for w in _written(func, args, kwargs)]
        for index, t in _made(func, args, kwargs, inputs, out):
            value = rule(self, func, args, kwargs, before, t, index)
            if t.layout != torch.strided and value is not None:
                self.sparse.add(str(func))  # its elements carry no rows: what it depends on would be lost
            elif t.layout == torch.strided:
                self.set_deps(t, value)
                self.mark(func, args, kwargs, before, rule, t, written=id(t) in written, depends=value is not None)
        return out

    def mark(self, func: Any, args: tuple, kwargs: dict, before: dict, rule: Any, t: torch.Tensor, *,
             written: bool, depends: bool) -> None:  # fmt: skip
        """Flag ``t`` (made by ``func``) when it may hold an infinity or a NaN; clear the flag of a new value
        that cannot (a value written in place keeps the flag: the rest of its storage may hold one)."""
        key = _storage_key(t)
        structural = rule in (_move, _along, _matmul, _convolution, _embedding, _batch_norm, _constant, _copy)
        kind = "structural" if structural else "pointwise" if rule is _pointwise else "other"
        if depends and may_make_nonfinite(func, args, kwargs, before, t, risky=bool(self.risky), kind=kind):
            self.nonfinite.add(key)
        elif not written:
            self.nonfinite.discard(key)


def _made(func: Any, args: tuple, kwargs: dict, inputs: list[torch.Tensor], out: Any) -> list[tuple[int, Any]]:
    """The outputs of ``func`` (with their positions) whose values it wrote: new storage, or written in place
    (a view shares its base's rows and needs nothing)."""
    written = _written(func, args, kwargs)
    alias = {_storage_key(t) for t in inputs}
    results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return [
        (index, t) for index, t in enumerate(results) if _storage_key(t) not in alias or any(t is w for w in written)
    ]


class _Leaks(TorchFunctionMode):
    """Notes a tensor's values leaving torch (``.numpy()``, ``np.asarray``, ``.tolist()``, its storage read by
    ``pickle`` or ``torch.save``): what is computed from them outside torch cannot be followed."""

    NAMES = frozenset(
        {"numpy", "__array__", "tolist", "item", "data_ptr", "__bool__", "__int__", "__float__", "__index__"}
    )
    # Reading a tensor's storage is how pickle, torch.save and copies through bytes take its values: the copy
    # they give back is a new tensor the dispatch sees no operation make.
    STORAGE = frozenset({"untyped_storage", "storage", "_typed_storage"})

    def __init__(self, follow: _Follow) -> None:
        super().__init__()
        self.follow = follow

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in self.NAMES | self.STORAGE and args and self.follow.deps(args[0]) is not None:
            serialized = ", as pickle and torch.save read it" if name in self.STORAGE else ""
            self.follow.escapes.add(f"Tensor.{name}{serialized}")
        return func(*args, **(kwargs or {}))


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``func`` writes in place (``add_``, ``copy_``, ``out=``)."""
    written = []
    schema = func._schema
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        if isinstance(value, torch.Tensor):
            written.append(value)
    return written


def _bound(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """``func``'s arguments by name, defaults filled in."""
    bound: dict[str, Any] = {}
    for position, argument in enumerate(func._schema.arguments):
        if position < len(args):
            bound[argument.name] = args[position]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


def _union(deps: list[torch.Tensor], shape: tuple[int, ...], width: int) -> torch.Tensor:
    """The union of ``deps`` broadcast to ``shape`` (each broadcast as a value of its own shape would be)."""
    total = torch.zeros((*shape, width), dtype=torch.bool)
    for d in deps:
        total |= d.expand(*shape, width) if d.dim() - 1 <= len(shape) else d.any()
    return total


def _everything(follow: _Follow, before: dict[int, torch.Tensor | None], out: torch.Tensor) -> torch.Tensor:
    every = torch.zeros(follow.width, dtype=torch.bool)
    for d in before.values():
        if d is not None:
            every |= d.reshape(-1, follow.width).any(0)
    return every.expand(*out.shape, follow.width)


def _pointwise(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    shape = tuple(out.shape)
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    deps = [before[id(t)] for t in tensors if before.get(id(t)) is not None]
    try:
        total = _union(deps, shape, follow.width)
    except RuntimeError:
        return _everything(follow, before, out)
    if func.overloadpacket in (_aten.mul, _aten.mul_) and len(tensors) == 2:
        constants = [t for t in tensors if before.get(id(t)) is None]
        if len(constants) == 1 and not any(id(t) in follow.risky for t in tensors):  # 0 * inf is NaN
            total &= (constants[0] != 0).expand(shape).unsqueeze(-1)
    return total


def _move(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, index: int) -> Any:
    """Run ``func`` on element numbers (1 + position in one table of rows; 0: a constant)."""
    table = [torch.zeros((1, follow.width), dtype=torch.bool)]
    offset = 1
    names = [a.name for a in func._schema.arguments]
    index_deps: list[torch.Tensor] = []
    indexed: list[torch.Tensor] = []  # the dependence of each moved operand that depends on the input

    def numbered(value: Any, name: str | None) -> Any:
        nonlocal offset
        if isinstance(value, (list, tuple)):
            return type(value)(numbered(v, name) for v in value)
        if not isinstance(value, torch.Tensor):
            return 0 if name == "value" else value
        d = before.get(id(value))
        if name in _INDEX_ARGUMENTS or (value.dtype in (torch.int64, torch.int32) and name == "indices"):
            if d is not None:
                index_deps.append(d)
            return value
        if value.dtype == torch.bool and func is _aten.index.Tensor and name == "indices":
            return value
        ids = torch.zeros(value.shape, dtype=torch.int64)
        if d is not None:
            count = value.numel()
            ids = torch.arange(offset, offset + count, dtype=torch.int64).reshape(value.shape)
            table.append(d.reshape(count, follow.width))
            indexed.append(d)
            offset += count
        return ids

    new_args = tuple(numbered(a, names[i] if i < len(names) else None) for i, a in enumerate(args))
    new_kwargs = {k: numbered(v, k) for k, v in kwargs.items()}
    if func is _aten._to_copy.default:
        new_kwargs.pop("dtype", None)
    try:
        result = func(*new_args, **new_kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError):
        follow.unknown.add(str(func))
        return _everything(follow, before, out)
    ids = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)][index].long()
    rows = torch.cat(table)[ids.reshape(-1)].reshape(*out.shape, follow.width)
    if index_deps:  # the positions read depend on the input: the example's choice says nothing of another's
        shape = tuple(out.shape)
        whole = _whole_indexed(indexed, shape, follow.width, _keeps_batch_axis(func, args, kwargs))
        rows = rows | whole | _index_dependence(index_deps, shape, follow.width)
    return rows


def _keeps_batch_axis(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a move with input-dependent indices leaves the first (batch) axis alone: a ``gather`` or an
    ``index_select`` along another axis, or indexing whose first index is ``:``."""
    bound = _bound(func, args, kwargs)
    if func in (_aten.gather.default, _aten.index_select.default):
        source = bound.get("self")
        rank = source.dim() if isinstance(source, torch.Tensor) else 0
        return rank > 1 and isinstance(bound.get("dim"), int) and bound["dim"] % rank != 0
    if func is _aten.index.Tensor:
        indices = bound.get("indices")
        return isinstance(indices, (list, tuple)) and len(indices) > 0 and indices[0] is None
    return False


def _whole_indexed(deps: list[torch.Tensor], shape: tuple[int, ...], width: int, per_sample: bool) -> torch.Tensor:
    """Everything the indexed operands depend on, for every output element: per sample (the union along all
    but the first axis) when the batch axis is kept, else the union of all."""
    total = torch.zeros((*shape, width), dtype=torch.bool)
    for d in deps:
        if per_sample and shape and d.dim() > 2 and d.shape[0] == shape[0]:
            per = d.reshape(d.shape[0], -1, width).any(1)
            total |= per.reshape(shape[0], *(1,) * (len(shape) - 1), width)
        else:
            total |= d.reshape(-1, width).any(0)
    return total


def _index_dependence(deps: list[torch.Tensor], shape: tuple[int, ...], width: int) -> torch.Tensor:
    """What indices computed from the input add to an indexed value: each output element reads the index
    elements at its own position when their broadcast shape is a block of the output's shape, else all."""
    union = deps[0]
    for d in deps[1:]:
        union = union | d
    index_shape = tuple(union.shape[:-1])
    rank = len(index_shape)
    for start in range(len(shape) - rank + 1):
        if shape[start : start + rank] == index_shape:
            view = union.reshape(*(1,) * start, *index_shape, *(1,) * (len(shape) - start - rank), width)
            return view.expand(*shape, width)
    return union.reshape(-1, width).any(0).expand(*shape, width)


def _along(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    bound = _bound(func, args, kwargs)
    source = bound.get("self", args[0])
    d = before.get(id(source))
    if d is None:
        return None
    dims = bound.get("dim", None)
    rank = source.dim()
    if dims is None or dims == [] or rank == 0:
        dims = list(range(rank))
    elif isinstance(dims, int):
        dims = [dims]
    dims = sorted({int(k) % max(rank, 1) for k in dims})
    reduced = d.any(dim=tuple(dims), keepdim=True) if dims else d
    if out.dim() != rank:  # keepdim=False
        reduced = reduced.squeeze(tuple(dims)) if dims else reduced
    try:
        return reduced.expand(*out.shape, follow.width)
    except RuntimeError:
        return _everything(follow, before, out)


def _matmul(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    """``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``mv``, ``addmv``, ``dot``: an output element depends on what
    the operand elements it sums depend on, where the other operand's coefficient is not a constant zero."""
    packet = func.overloadpacket
    extra = args[0] if packet in (_aten.addmm, _aten._sparse_addmm, _aten.baddbmm, _aten.addmv) else None
    a, b = (args[1], args[2]) if extra is not None else (args[0], args[1])
    da, db = before.get(id(a)), before.get(id(b))
    # a sparse operand (``torch.sparse.mm``'s weight) is a constant here: its values as a dense matrix
    risky_a, risky_b = id(a) in follow.risky, id(b) in follow.risky
    a, b = (t.to_dense() if t.layout != torch.strided else t for t in (a, b))
    width = follow.width
    # as batched matrices (batch, i, k) @ (batch, k, j)
    a3 = a.reshape(1, 1, -1) if a.dim() == 1 else (a.unsqueeze(0) if a.dim() == 2 else a)
    b3 = b.reshape(1, -1, 1) if b.dim() == 1 else (b.unsqueeze(0) if b.dim() == 2 else b)
    da3 = None if da is None else da.reshape(*a3.shape, width)
    db3 = None if db is None else db.reshape(*b3.shape, width)
    total = torch.zeros((a3.shape[0], a3.shape[1], b3.shape[2], width), dtype=torch.bool)
    if da3 is not None:  # a zero coefficient drops only what a finite operand depends on (0 * inf is NaN)
        coeff = (b3 != 0).float() if db3 is None and not risky_a else torch.ones(b3.shape)
        total |= torch.einsum("bikn,bkj->bijn", da3.float(), coeff) > 0
    if db3 is not None:
        coeff = (a3 != 0).float() if da3 is None and not risky_b else torch.ones(a3.shape)
        total |= torch.einsum("bik,bkjn->bijn", coeff, db3.float()) > 0
    total = total.reshape(*out.shape, width)
    if extra is not None and before.get(id(extra)) is not None:
        total |= before[id(extra)].expand_as(total)
    return total


def _convolution(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    dx, dw = before.get(id(x)), before.get(id(weight))
    if dw is not None or (bias is not None and before.get(id(bias)) is not None) or x.shape[0] != out.shape[0]:
        return _everything(follow, before, out)
    if dx is None:
        return None
    n = x.shape[0]
    rank = x.dim()
    # the input elements' dependence as a batch of width x n samples of the same convolution
    folded = dx.movedim(-1, 1).reshape(n * follow.width, *x.shape[1:]).float()
    coeff = torch.ones(weight.shape) if id(x) in follow.risky else (weight != 0).float()  # 0 * inf is NaN
    spread = _aten.convolution.default(
        folded, coeff, None, stride, padding, dilation, transposed, output_padding, groups
    )
    spread = spread.reshape(n, follow.width, *spread.shape[1:]).movedim(1, rank)
    return spread > 0


def _embedding(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    weight, indices = args[0], args[1]
    deps = []
    if before.get(id(indices)) is not None:
        deps.append(before[id(indices)].unsqueeze(-2))
    total = (
        _union(deps, tuple(out.shape), follow.width)
        if deps
        else torch.zeros((*out.shape, follow.width), dtype=torch.bool)
    )
    if before.get(id(weight)) is not None:
        total |= _everything(follow, {0: before[id(weight)]}, out)
    return total


def _batch_norm(
    follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, index: int
) -> Any:
    """Batch norm with running statistics is elementwise per channel; with batch statistics it mixes samples."""
    training = _bound(func, args, kwargs).get("training", False)
    d = before.get(id(args[0]))
    if index or d is None:
        return None if index else d
    if training:
        return _everything(follow, before, out)
    return d.expand(*out.shape, follow.width)


def _copy(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    """``dst.copy_(src)``: what ``dst`` held before no longer counts."""
    d = before.get(id(args[1]))
    return None if d is None else d.expand(*out.shape, follow.width)


def _unknown(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    follow.unknown.add(str(func))
    return _everything(follow, before, out)


_RULES_BY_PACKET = {
    _aten.mm: _matmul,
    _aten.addmm: _matmul,
    _aten._sparse_addmm: _matmul,
    _aten.bmm: _matmul,
    _aten.baddbmm: _matmul,
    _aten.mv: _matmul,
    _aten.addmv: _matmul,
    _aten.dot: _matmul,
    _aten.convolution: _convolution,
    _aten.native_batch_norm: _batch_norm,
    _aten._native_batch_norm_legit_no_training: _batch_norm,
}


def _constant(follow: _Follow, func: Any, args: tuple, kwargs: dict, before: dict, out: torch.Tensor, _: int) -> Any:
    return None


def _rule(func: Any) -> Any:
    if func in _SHAPED_LIKE:
        return _constant
    if func in _MOVES:
        return _move
    if func in _ALONG:
        return _along
    if func.overloadpacket in _RULES_BY_PACKET:
        return _RULES_BY_PACKET[func.overloadpacket]
    if func.overloadpacket is _aten.embedding:
        return _embedding
    if torch.Tag.pointwise in func.tags or func.overloadpacket in (_aten.copy_, _aten.fill_, _aten.zero_):
        return _pointwise
    return _unknown


def dependence(module: torch.nn.Module, example: torch.Tensor) -> Dependence:
    """Run ``module`` once on ``example`` (a batch of two or more samples) and return which input elements
    each output element may depend on (see the module docstring). Raises what the module raises."""
    samples = int(example.shape[0])
    per_sample = math.prod(example.shape[1:])
    width = samples * per_sample
    follow = _Follow(width)
    x = example.clone()
    follow.set_deps(x, torch.eye(width, dtype=torch.bool).reshape(*x.shape, width))
    with torch.no_grad(), _Leaks(follow), follow:
        out = module(x)
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if len(outputs) != 1:
        msg = f"returned {len(outputs)} tensors"
        raise ValueError(msg)
    result = outputs[0]
    d = follow.deps(result)
    out_samples = int(result.shape[0]) if result.dim() else 1
    rows = (
        torch.zeros((result.numel(), width), dtype=torch.bool) if d is None else d.reshape(result.numel(), width)
    ).numpy()
    crosses = out_samples != samples
    if not crosses:
        per_out = result.numel() // samples
        blocks = rows.reshape(samples, per_out, samples, per_sample)
        own = np.stack([blocks[s, :, s, :] for s in range(samples)])
        crosses = bool(blocks.any(axis=(1, 3)).sum() != np.diag(blocks.any(axis=(1, 3))).sum())
        matrix = own.any(axis=0)
    else:
        matrix = rows.reshape(-1, samples, per_sample).any(axis=1)
    return Dependence(
        matrix=np.ascontiguousarray(matrix),
        crosses_samples=crosses,
        unknown=tuple(sorted(follow.unknown)),
        escapes=tuple(sorted(follow.escapes)),
        sparse=tuple(sorted(follow.sparse)),
    )
