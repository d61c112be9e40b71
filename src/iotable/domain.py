"""Quantized domains: the finite, ordered set of values an element can take, stored as integer codes."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import DomainError

__all__ = ["Domain", "code_dtype"]

_F32_EPS = float(np.finfo(np.float32).eps)


@functools.lru_cache(maxsize=64)
def code_dtype(n: int) -> np.dtype:
    """Return the smallest unsigned integer dtype that holds codes ``0..n-1``.

    Example:
        >>> code_dtype(4), code_dtype(300)
        (dtype('uint8'), dtype('uint16'))
    """
    for dtype in (np.uint8, np.uint16, np.uint32):
        if n - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def as_array(values: Any, *, what: str, error: type[Exception] = DomainError) -> np.ndarray:
    """``values`` (array, tensor or nested sequence) as a numpy array, or ``error`` naming ``what``.

    Tensors are taken as they hold their values: sparse ones densified, bfloat16 (which numpy lacks)
    widened exactly to float32.
    """
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = _tensor_array(values, what=what, error=error)
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as exc:
        msg = f"{what}: expected numbers (array, tensor or sequence), received {type(values).__name__} ({exc})"
        raise error(msg) from None


def _tensor_array(tensor: Any, *, what: str, error: type[Exception]) -> np.ndarray:
    """A torch tensor's values as a numpy array: dense, on the CPU, bfloat16 widened exactly to float32."""
    tensor = tensor.detach()
    if tensor.device.type == "meta" or getattr(tensor, "is_quantized", False):
        kind = "a meta tensor (no data)" if tensor.device.type == "meta" else "a quantized tensor"
        msg = f"{what}: expected a tensor of numbers, received {kind} of dtype {tensor.dtype}; pass its values"
        raise error(msg)
    if str(tensor.layout) != "torch.strided":  # sparse layouts: the same values, densified
        tensor = tensor.to_dense()
    if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16; every bfloat16 is a float32
        tensor = tensor.float()
    try:
        return tensor.cpu().numpy()
    except (TypeError, RuntimeError) as exc:
        msg = f"{what}: expected a tensor of numbers, received dtype {tensor.dtype} ({exc})"
        raise error(msg) from None


def _flag(value: Any, name: str) -> bool:
    """``value`` as a bool; anything but ``True``/``False`` (a truthy string such as ``"no"``) is an error."""
    if not isinstance(value, (bool, np.bool_)):
        msg = f"Domain.uniform: expected True or False for {name}, received {type(value).__name__} {value!r}"
        raise DomainError(msg)
    return bool(value)


def _real(value: Any, name: str) -> float:
    """``value`` as a float, or a :class:`DomainError` naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"Domain.uniform: expected a real number for {name}, received {type(value).__name__} {value!r}"
        raise DomainError(msg)
    return float(value)


def _preview(values: np.ndarray, limit: int = 8, brackets: str = "{}") -> str:
    shown = ", ".join(f"{v:g}" for v in values[:limit])
    return brackets[0] + shown + (", ..." if len(values) > limit else "") + brackets[1]


class _ValuesAccessor:
    """``Domain.values(seq)`` builds a domain from explicit values; ``domain.values`` is its value array."""

    def __get__(self, obj: Domain | None, owner: type[Domain]) -> Any:
        if obj is None:
            return owner._from_values
        return obj._values


def _check_float32(ordered: np.ndarray, tolerance: float) -> None:
    """Refuse ascending values that float32, in which models compute, cannot hold or tell apart: a value past
    float32's range, two values that round to one float32, or a value whose float32 lies further from it than
    ``tolerance`` (how far an output may lie from a value and still encode to it)."""
    with np.errstate(over="ignore"):
        rounded = ordered.astype(np.float32)
    if not np.all(np.isfinite(rounded)):
        big = ordered[~np.isfinite(rounded)]
        msg = (
            f"Domain: expected values float32 holds (magnitude at most {float(np.finfo(np.float32).max):.8g}: "
            f"models compute in float32), received {_preview(big)}; scale the values down"
        )
        raise DomainError(msg)
    same = np.flatnonzero(rounded[1:] == rounded[:-1])
    if same.size:
        k = int(same[0])
        msg = (
            f"Domain: expected values distinct in float32 (models compute in float32), received "
            f"{float(ordered[k])!r} and {float(ordered[k + 1])!r}, which both round to the float32 "
            f"{float(rounded[k])!r}; keep one of them, or values further apart"
        )
        raise DomainError(msg)
    far = np.flatnonzero(np.abs(rounded.astype(np.float64) - ordered) > tolerance)
    if far.size:
        k = int(far[0])
        msg = (
            f"Domain: expected values whose float32 lies within {tolerance:.3g} of them (a fraction of the "
            f"smallest gap between values, how close a model's float32 output must come), received "
            f"{float(ordered[k])!r}, whose float32 is {float(rounded[k])!r}; pass values nearer in magnitude, or "
            "further apart"
        )
        raise DomainError(msg)


class Domain:
    """The finite, ordered set of values a quantized element takes; codes ``0..n-1`` in ascending value order.

    Build one with :meth:`Domain.uniform` (integer quantization: ``value = (q - zero_point) * scale``) or
    ``Domain.values(seq)`` for an explicit set such as bipolar ``{-1, +1}``. Domains are immutable and
    hashable; two domains are equal when they hold the same values.

    Uniform values are computed in float32, exactly as :class:`iotable.nn.Quantize` computes them, so that
    a model's quantized outputs match the domain bit for bit.

    Example:
        >>> d = Domain.uniform(2, signed=True)
        >>> d.values.tolist(), len(d), d.bits
        ([-2.0, -1.0, 0.0, 1.0], 4, 2)
        >>> d.encode([-2.0, 1.0]).tolist(), d.decode([0, 3]).tolist()
        ([0, 3], [-2.0, 1.0])
        >>> Domain.values([-1, 1]).bits
        1
    """

    __slots__ = ("_hash", "_params", "_tolerance", "_values", "_zero")

    values = _ValuesAccessor()

    def __init__(self, values: Iterable[float], *, params: dict[str, Any] | None = None) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            msg = f"Domain: expected a sequence of numbers, received {type(values).__name__} {values!r}"
            raise DomainError(msg)
        array = as_array(list(values) if not hasattr(values, "shape") else values, what="Domain values")
        if array.size and array.dtype.kind not in "biuf":
            msg = f"Domain: expected real numbers, received {array.dtype} values {list(array.reshape(-1)[:4])}"
            raise DomainError(msg)
        array = array.astype(np.float64).reshape(-1)  # a copy of the caller's values: ours to freeze
        if array.size == 0:
            msg = "Domain: expected at least one value, received an empty sequence"
            raise DomainError(msg)
        if not np.all(np.isfinite(array)):
            msg = f"Domain: expected finite values, received {_preview(array)}"
            raise DomainError(msg)
        if array.size > 1 and bool((array[1:] > array[:-1]).all()):
            ordered = array  # already ascending (every uniform domain): no sort
        else:
            ordered = np.unique(array)
        if ordered.size != array.size:
            msg = f"Domain: expected distinct values, received duplicates in {_preview(array)}"
            raise DomainError(msg)
        ordered.flags.writeable = False
        self._values = ordered
        # Domain.uniform passes parameters it computed the values from; anything else is checked.
        self._params = params.trusted if isinstance(params, _Trusted) else _checked_params(params, ordered)
        # Model outputs are float32: accept values within float32 rounding of a domain value, never half a gap.
        gap = float(np.min(np.diff(ordered))) if ordered.size > 1 else 1.0
        rounding = 8 * _F32_EPS * float(np.max(np.abs(ordered)))
        self._tolerance = min(0.25 * gap, max(0.01 * gap, rounding))
        _check_float32(ordered, self._tolerance)
        zero = np.flatnonzero(np.abs(ordered) <= self._tolerance)
        self._zero = int(zero[0]) if zero.size else None
        self._hash = hash(ordered.tobytes())

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def uniform(
        cls,
        bits: int,
        *,
        signed: bool = False,
        narrow: bool = False,
        scale: float = 1.0,
        zero_point: float = 0,
    ) -> Domain:
        """Integer-quantization domain: ``q`` in ``[min, max]``, value ``(q - zero_point) * scale``.

        ``min = -2**(bits-1) + narrow`` if signed else ``0``; ``max = 2**(bits-1) - 1`` if signed else
        ``2**bits - 1 - narrow`` (the QONNX / brevitas convention).

        Example:
            >>> Domain.uniform(2, scale=0.5).values.tolist()
            [0.0, 0.5, 1.0, 1.5]
            >>> Domain.uniform(3, signed=True, narrow=True).values.tolist()
            [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
        """
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= 24:
            msg = f"Domain.uniform: expected bits as an integer from 1 to 24, received {bits!r}"
            raise DomainError(msg)
        scale_f = _real(scale, "scale")
        if not math.isfinite(scale_f) or scale_f <= 0:
            msg = f"Domain.uniform: expected a finite scale > 0 (codes ascend with values), received {scale!r}"
            raise DomainError(msg)
        zero_f = _real(zero_point, "zero_point")
        if not math.isfinite(zero_f):
            msg = f"Domain.uniform: expected a finite zero_point, received {zero_point!r}"
            raise DomainError(msg)
        signed, narrow = _flag(signed, "signed"), _flag(narrow, "narrow")
        qmin, qmax = cls.integer_range(int(bits), signed=signed, narrow=narrow)
        if qmax < qmin:
            msg = f"Domain.uniform: {bits} bit(s) with signed={signed}, narrow={narrow} leave no value"
            raise DomainError(msg)
        params = {
            "bits": int(bits),
            "signed": signed,
            "narrow": narrow,
            "scale": float(np.float32(scale_f)),
            "zero_point": float(np.float32(zero_f)),
        }
        try:
            return cls(_uniform_values(params), params=_Trusted(params))  # type: ignore[arg-type]
        except DomainError:
            msg = (
                f"Domain.uniform: scale={scale!r} is too small for float32 at {bits} bits: "
                "neighbouring values collapse; use a larger scale"
            )
            raise DomainError(msg) from None

    @classmethod
    def _from_values(cls, seq: Iterable[float]) -> Domain:
        """Build a domain from explicit values (any order, distinct): ``Domain.values([-1, 1])``."""
        return cls(seq)

    @staticmethod
    def integer_range(bits: int, *, signed: bool, narrow: bool) -> tuple[int, int]:
        """The integer range ``(min, max)`` of ``bits``-bit quantization.

        Example:
            >>> Domain.integer_range(4, signed=True, narrow=False)
            (-8, 7)
        """
        if signed:
            return -(2 ** (bits - 1)) + int(narrow), 2 ** (bits - 1) - 1
        return 0, 2**bits - 1 - int(narrow)

    # -- properties ---------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._values.size)

    @property
    def bits(self) -> int:
        """Bits needed for a code: ``ceil(log2(len(self)))`` (0 for a one-value domain)."""
        return (len(self) - 1).bit_length()

    @property
    def code_dtype(self) -> np.dtype:
        """Smallest unsigned integer dtype holding this domain's codes."""
        return code_dtype(len(self))

    @property
    def params(self) -> dict[str, Any]:
        """Quantization parameters for uniform domains (bits, signed, narrow, scale, zero_point); else empty."""
        return dict(self._params)

    @property
    def zero_code(self) -> int | None:
        """The code of real 0 (what padding feeds), or ``None`` when 0 is not in the domain."""
        return self._zero

    # -- conversion ---------------------------------------------------------------------------------------

    def encode(self, values: Any) -> np.ndarray:
        """Codes of ``values`` (any shape); a value that is not in the domain raises :class:`DomainError`.

        Values within float32 rounding of a domain value are accepted, so float32 model outputs encode.
        """
        array = as_array(values, what="Domain.encode")
        if array.dtype.kind not in "biuf":
            msg = f"Domain.encode: expected numeric values, received dtype {array.dtype}"
            raise DomainError(msg)
        flat = array.astype(np.float64, copy=False).reshape(-1)
        mids = (self._values[1:] + self._values[:-1]) / 2
        codes = np.searchsorted(mids, flat)
        bad = ~(np.abs(flat - self._values[codes]) <= self._tolerance)  # NaN counts as bad
        if bad.any():
            where = int(np.flatnonzero(bad)[0])
            index = np.unravel_index(where, array.shape) if array.ndim else ()
            msg = (
                f"value {float(flat[where])!r} at index {tuple(int(i) for i in index)} is not in {self!r}; "
                f"expected one of {_preview(self._values)} ({int(bad.sum())} value(s) outside the domain)"
            )
            raise DomainError(msg)
        return codes.astype(self.code_dtype).reshape(array.shape)

    def decode(self, codes: Any, *, dtype: Any = np.float64) -> np.ndarray:
        """Values of integer ``codes`` (any shape); a code outside ``0..n-1`` raises :class:`DomainError`."""
        array = as_array(codes, what="Domain.decode")
        if array.dtype.kind not in "biu":
            msg = f"Domain.decode: expected integer codes, received dtype {array.dtype}"
            raise DomainError(msg)
        if array.size and (array.min() < 0 or array.max() >= len(self)):
            bad = int(array[(array < 0) | (array >= len(self))].reshape(-1)[0])
            msg = f"Domain.decode: code {bad} is out of range for {self!r}; expected 0..{len(self) - 1}"
            raise DomainError(msg)
        return self._values.astype(dtype)[array.astype(np.intp)]

    # -- identity -----------------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Domain):
            return NotImplemented
        return self._hash == other._hash and np.array_equal(self._values, other._values)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self._params:
            p = self._params
            extras = "".join(
                f", {k}={p[k]!r}"
                for k, default in (("signed", False), ("narrow", False), ("scale", 1.0), ("zero_point", 0.0))
                if p[k] != default
            )
            return f"Domain.uniform({p['bits']}{extras})"
        return f"Domain.values({_preview(self._values, brackets='[]')})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through __init__ (the values and their parameters), so copies and pickles stay immutable.
        return (_rebuild, (self._values.tolist(), self._params))

    def __copy__(self) -> Domain:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Domain:
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_hash"):
            msg = f"Domain is immutable; cannot set {name!r}"
            raise AttributeError(msg)
        object.__setattr__(self, name, value)


_PARAMS = ("bits", "signed", "narrow", "scale", "zero_point")


class _Trusted:
    """Parameters :meth:`Domain.uniform` computed the values from (no second computation to check them)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.trusted = params


def _uniform_values(params: dict[str, Any]) -> np.ndarray:
    """The values of integer quantization with checked ``params``, computed in float32 as Quantize does."""
    qmin, qmax = Domain.integer_range(params["bits"], signed=params["signed"], narrow=params["narrow"])
    q = np.arange(qmin, qmax + 1, dtype=np.float32)
    return (q - np.float32(params["zero_point"])) * np.float32(params["scale"])


def _checked_params(params: Any, values: np.ndarray) -> dict[str, Any]:
    """``params`` of a uniform domain, validated against its ``values``; ``{}`` for an explicit domain.

    A domain's parameters are what its ``repr`` shows and what a bundle stores: they must be the five
    quantization parameters, of their types, and give exactly ``values``.
    """
    if params is None or (isinstance(params, dict) and not params):
        return {}
    fix = "omit params= (Domain(values)), or build the domain with Domain.uniform(...)"
    if not isinstance(params, dict) or set(params) != set(_PARAMS):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        msg = f"Domain: params must be a dict with exactly the keys {list(_PARAMS)}, received {got}; {fix}"
        raise DomainError(msg)
    bits = params["bits"]
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= 24:
        msg = f"Domain: params['bits'] must be an integer from 1 to 24, received {bits!r}; {fix}"
        raise DomainError(msg)
    checked: dict[str, Any] = {"bits": int(bits)}
    for key in ("signed", "narrow"):
        if not isinstance(params[key], (bool, np.bool_)):
            msg = f"Domain: params[{key!r}] must be True or False, received {params[key]!r}; {fix}"
            raise DomainError(msg)
        checked[key] = bool(params[key])
    for key in ("scale", "zero_point"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            msg = f"Domain: params[{key!r}] must be a real number, received {value!r}; {fix}"
            raise DomainError(msg)
        checked[key] = float(value)
        if not math.isfinite(checked[key]) or float(np.float32(value)) != checked[key]:
            msg = f"Domain: params[{key!r}] must be a finite float32 value, received {value!r}; {fix}"
            raise DomainError(msg)
    if checked["scale"] <= 0:
        msg = f"Domain: params['scale'] must be > 0, received {params['scale']!r}; {fix}"
        raise DomainError(msg)
    qmin, qmax = Domain.integer_range(checked["bits"], signed=checked["signed"], narrow=checked["narrow"])
    if qmax - qmin + 1 != len(values) or not np.array_equal(_uniform_values(checked), values):
        msg = f"Domain: params {params} do not give the {len(values)} value(s) {_preview(values)}; {fix}"
        raise DomainError(msg)
    return checked


def _rebuild(values: list[float], params: dict[str, Any]) -> Domain:
    """A domain from its values and parameters (what :meth:`Domain.__reduce__` stores)."""
    return Domain(values, params=params)
