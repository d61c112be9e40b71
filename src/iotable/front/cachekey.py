"""The content key of the table cache: every value a layer's tables depend on, encoded the same in every process.

A layer's key (:func:`module_key`) holds, for the layer and each of its submodules, its class (qualified name
and, for every class it derives from that is written in Python, every member by value, read anew by every key:
methods by their code, defaults, closures and the module-level globals they read that are plain data or tensors,
class-level data like attributes; a member that cannot be keyed is refused, naming the class and the
attribute; only the bytes of code objects are computed once), every attribute in
its ``__dict__`` (the ones ``torch.nn.Module`` keeps for itself aside), its parameters and buffers, its
forward hooks, and torch's global forward hooks. Attribute values are encoded *by value*, to any depth:

- numbers, strings, bytes, ``None``, enums, domains, dtypes and devices;
- dicts, lists, tuples, sets and frozensets of any length (dicts and sets in an order of their encoded
  items, not of insertion or hashing); dataclasses field by field; plain objects (instances of classes
  written in Python) by their class and their ``__dict__`` and slots;
- tensors and arrays by their dtype, shape and bytes (a digest of them);
- functions by their code (bytecode, constants, names), defaults and closure; library functions without
  Python code (``torch.relu``) by the name they are importable under; a torch.fx graph (a region of traced
  calls, :mod:`iotable.front.region`) by the Python code it generates;
- a reference to one of the layer's own modules by its name in the layer (its state is keyed there).

Anything else — an object whose state Python cannot read (a lock, a file, an extension type), a callable
whose code cannot be read, a container that holds itself, a value nested more than :data:`MAX_DEPTH` deep or
with more than :data:`MAX_ITEMS` items — is refused with a :class:`~iotable.errors.CacheError` naming the
layer, the attribute path and the fix, never keyed by its type alone. What a key cannot see: module-level
globals a method reads that are not plain data (modules, classes, functions, objects: keyed by name), and code
outside the classes and functions reached from the layer; after changing those, clear the cache.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import sys
import types
import typing
import weakref
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from torch import nn

from ..domain import Domain
from ..errors import CacheError

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "module_key", "value_bytes", "value_digest"]

#: The deepest nesting of containers and objects keyed (an attribute at depth 1).
MAX_DEPTH = 64
#: The most values keyed for one layer (elements of containers, fields of objects): more is refused.
MAX_ITEMS = 1_000_000
#: The most values keyed for the members of one class (its data, its methods' defaults and closures).
MAX_CLASS_ITEMS = 1_000_000

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (by a class statement, or by an extension)
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: set on extensions' heap types, never by a class statement
_MODULE_INTERNALS = frozenset(nn.Module().__dict__) | {"_compiled_call_impl"}
_HOOKS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
)
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called")
_PLAIN = (torch.Tensor, np.ndarray, Domain, dict, list, tuple, set, frozenset, slice, range)
_CODE_FIELDS = ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_flags", "co_names", "co_varnames")


class _Refused(Exception):
    """A value the key cannot hold: ``path`` is where it sits, ``reason`` what it is."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason


class _Encoder:
    """Encodes values to bytes, refusing what cannot be encoded by value (see the module docstring)."""

    def __init__(self, modules: dict[int, str], *, module_identity: bool = False, plain: bool = False) -> None:
        self.modules = modules  # id of each of the layer's modules -> its name in the layer
        self.module_identity = module_identity  # other modules by identity (within one process) or by state
        self.plain = plain  # plain data only (a global a function reads): scalars, containers, tensors, arrays
        self.limit = MAX_GLOBAL_ITEMS if plain else MAX_ITEMS
        self.items = 0
        self.open: set[int] = set()  # ids of the containers on the current path (a cycle returns to one)
        self.classes: dict[type, bytes] = {}  # each class's own members, keyed once per key (not across keys)
        self.open_classes: set[type] = set()  # classes whose members are being keyed (a loop returns to one)

    def value(self, v: Any, path: str, depth: int = 1) -> bytes:
        self.items += 1
        if self.items > self.limit:
            raise _Refused(path, f"more than {self.limit:,} values to key (too large to key by value)")
        if depth > MAX_DEPTH:
            raise _Refused(path, f"values nested more than {MAX_DEPTH} deep")
        simple = _simple(v)
        if simple is not None:
            return simple
        if id(v) in self.open:
            raise _Refused(path, f"a {type(v).__qualname__} that holds itself (a cycle)")
        self.open.add(id(v))
        try:
            return self._compound(v, path, depth + 1)
        finally:
            self.open.discard(id(v))

    def _compound(self, v: Any, path: str, depth: int) -> bytes:
        if self.plain and not isinstance(v, _PLAIN):
            raise _Refused(path, f"a {_qualified(type(v))}, not plain data")
        if isinstance(v, nn.Module):
            name = self.modules.get(id(v))
            if name is not None:
                return f"module-ref:{name!r};".encode()
            if self.module_identity:
                return f"module-id:{id(v)};".encode()
            return b"module(" + self.module_state(v, path, depth) + b")"
        if isinstance(v, torch.Tensor):
            return _tensor_bytes(v, path)
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return b"ndarray-object(" + self.value(v.tolist(), path, depth) + b")"
            return b"ndarray:" + f"{v.dtype.str}{v.shape}:".encode() + _sha(np.ascontiguousarray(v).tobytes())
        if isinstance(v, Domain):
            params = sorted(v.params.items())
            return b"Domain:" + _sha(v.values.tobytes()) + self.value(params, f"{path}.params", depth)
        if isinstance(v, weakref.ReferenceType):
            return b"weakref(" + self.value(v(), f"{path}()", depth) + b")"
        container = self._container(v, path, depth)
        if container is not None:
            return container
        return self._object(v, path, depth)

    def _object(self, v: Any, path: str, depth: int) -> bytes:
        """Classes, annotations, functions, slices, traced graphs, dataclasses and objects written in Python."""
        if isinstance(v, type):
            return b"class:" + self.class_key(v, path)
        if _is_annotation(v):
            return b"annotation:" + _annotation(v).encode() + b";"
        if isinstance(v, (types.FunctionType, types.MethodType, functools.partial)):
            return self.function(v, path, depth)
        if isinstance(v, _CACHED_FUNCTION):  # functools.cache and lru_cache: by the function they wrap
            return b"cached(" + self.value(v.__wrapped__, path, depth) + b")"
        if isinstance(v, (slice, range)):
            return f"{type(v).__name__}:".encode() + self.value((v.start, v.stop, v.step), path, depth)
        if isinstance(v, fx.Graph):  # a region's traced calls: by the code they run (their modules keyed apart)
            return b"fx-graph(" + self.value(v.python_code("self").src, path, depth) + b")"
        if dataclasses.is_dataclass(v):
            fields = [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
            return b"dataclass:" + self.class_key(type(v), path) + self.value(fields, path, depth)
        if _written_in_python(type(v)):
            return b"object:" + self.class_key(type(v), path) + self.value(_state(v), path, depth)
        if callable(v):
            return _named_callable(v, path)
        raise _Refused(path, f"a {_qualified(type(v))}, whose state cannot be read as plain data")

    def _container(self, v: Any, path: str, depth: int) -> bytes | None:
        """Dicts, lists, tuples and sets, element by element (dicts and sets in the order of their encodings)."""
        if isinstance(v, dict):
            entries = sorted(
                self.value(k, f"{path} key", depth) + self.value(x, f"{path}[{k!r}]", depth) for k, x in v.items()
            )
            return f"{_qualified(type(v))}{{".encode() + b"".join(entries) + b"}"
        if isinstance(v, (list, tuple)):
            inner = b"".join(self.value(x, f"{path}[{i}]", depth) for i, x in enumerate(v))
            return f"{_qualified(type(v))}[{len(v)}](".encode() + inner + b")"
        if isinstance(v, (set, frozenset)):
            inner = b"".join(sorted(self.value(x, f"{path} element", depth) for x in v))
            return f"{_qualified(type(v))}[{len(v)}]{{".encode() + inner + b"}"
        return None

    def function(self, v: Any, path: str, depth: int) -> bytes:
        if isinstance(v, functools.partial):
            parts = (v.func, v.args, sorted(v.keywords.items()))
            return b"partial(" + self.value(parts, path, depth) + b")"
        if isinstance(v, types.MethodType):
            return b"method(" + self.value((v.__func__, v.__self__), path, depth) + b")"
        cells = tuple(_cell(name, c) for name, c in zip(v.__code__.co_freevars, v.__closure__ or ()))
        state = (v.__defaults__, sorted((v.__kwdefaults__ or {}).items()), cells)
        code, names = _code_key(v.__code__)
        head = f"function:{v.__module__}.{v.__qualname__}:".encode() + code
        if _in_python_itself(v.__module__):  # the standard library's: its closures and globals are its own state
            return head
        state_bytes = self.value(state, f"{path} (defaults and closure of {v.__qualname__})", depth)
        return head + state_bytes + _globals_bytes(v, names)

    def class_key(self, cls: type, path: str) -> bytes:
        """A class by qualified name and, for each class it derives from that is written in Python, every member
        by value: methods by their code, defaults, closure and the plain globals they read; data at any depth.

        Keyed anew by every key (a class attribute may change between two keys), once per key.
        """
        digest = hashlib.sha256(_qualified(cls).encode())
        for c in cls.__mro__:
            digest.update(self._own_members(c))
        return digest.digest()

    def _own_members(self, cls: type) -> bytes:
        """The members in ``cls.__dict__`` (an extension's class: its name)."""
        if cls.__flags__ & (_HEAP_TYPE | _IMMUTABLE_TYPE) != _HEAP_TYPE or _in_python_itself(cls.__module__):
            return f"|{_qualified(cls)}".encode()  # an extension's or the standard library's: by name
        known = self.classes.get(cls)
        if known is not None:
            return known
        if cls in self.open_classes:  # keyed further up this path (classes that refer to each other): by name
            return f"|class-ref {_qualified(cls)};".encode()
        self.open_classes.add(cls)
        counted, limit = self.items, self.limit  # a class's members count apart from the layer's values
        self.items, self.limit = 0, MAX_CLASS_ITEMS
        try:
            digest = hashlib.sha256(f"|{_qualified(cls)}:".encode())
            for name, member in sorted(cls.__dict__.items()):
                if name not in _CLASS_UNKEYED:
                    where = f"class {_qualified(cls)}, attribute {name}"
                    digest.update(f"{name}=".encode() + self.member(name, member, where))
        finally:
            self.open_classes.discard(cls)
            self.items, self.limit = counted, limit
        known = self.classes[cls] = digest.digest()
        return known

    def member(self, name: str, member: Any, path: str) -> bytes:
        """A class member: methods and properties by their functions, annotations by their text, descriptors of
        slots by name, classes by name, anything else by value like an instance's attribute."""
        if isinstance(member, (staticmethod, classmethod)):
            return f"{type(member).__name__}(".encode() + self.member(name, member.__func__, path) + b")"
        if isinstance(member, property):
            return b"property(" + b"".join(self.member(name, f, path) for f in _accessors(member)) + b")"
        if isinstance(member, functools.cached_property):
            return b"cached_property(" + self.member(name, member.func, path) + b")"
        if name == "__annotations__" and isinstance(member, dict):
            return b"annotations:" + repr(sorted((str(k), _annotation(a)) for k, a in member.items())).encode()
        if isinstance(member, _DESCRIPTORS):
            return f"descriptor:{type(member).__name__}:{getattr(member, '__name__', name)};".encode()
        if isinstance(member, type):  # a class a class refers to: its code is keyed where it is used
            return f"class {_qualified(member)};".encode()
        return self.value(member, path)

    def module_state(self, m: nn.Module, path: str, depth: int = 1) -> bytes:
        """A module's class, own attributes, tensors and hooks (not its submodules')."""
        parts = [b"class:" + self.class_key(type(m), f"{path} (its class)")]
        for name in sorted(m.__dict__):
            if name not in _MODULE_INTERNALS:
                parts.append(f"attr {name}=".encode() + self.value(m.__dict__[name], f"{path}.{name}", depth))
        for table in ("_parameters", "_buffers"):
            for name, tensor in getattr(m, table).items():
                encoded = b"None" if tensor is None else _tensor_bytes(tensor, f"{path}.{name}")
                parts.append(f"{table} {name}=".encode() + encoded)
        for table in _HOOKS:
            hooks = getattr(m, table, None)
            if hooks:
                parts.append(f"{table}=".encode() + self.value(list(hooks.values()), f"{path} ({table})", depth))
        return b"".join(parts)


def module_key(module: nn.Module, *, layer: str) -> bytes:
    """The digest of everything ``module`` (the layer ``layer``) and its submodules compute with.

    Raises:
        CacheError: a value that cannot be keyed by value, named by its attribute path, with the fix.
    """
    modules = {id(m): name for name, m in module.named_modules()}
    encoder = _Encoder(modules)
    digest = hashlib.sha256(f"torch {torch.__version__}; numpy {np.__version__};".encode())
    try:
        from torch.nn.modules import module as torch_module

        for table in _GLOBAL_HOOKS:
            hooks = getattr(torch_module, table, None)
            if hooks:
                digest.update(encoder.value(list(hooks.values()), f"torch's {table}"))
        for name, m in module.named_modules():
            digest.update(f"module {name!r}:".encode())
            digest.update(encoder.module_state(m, _path(layer, name)))
    except _Refused as exc:
        raise _error(layer, exc) from None
    return digest.digest()


def value_bytes(value: Any, *, layer: str, what: str) -> bytes:
    """``value`` (a plan's spec, geometry, ...) encoded for a key; :class:`CacheError` as :func:`module_key`."""
    try:
        return _Encoder({}).value(value, what)
    except _Refused as exc:
        raise _error(layer, exc) from None


def value_digest(value: Any) -> bytes | None:
    """A digest of ``value`` by its contents, as keys encode attributes, for comparisons within one process
    (modules by identity); ``None`` for a value that cannot be read by value."""
    try:
        return _sha(_Encoder({}, module_identity=True).value(value, "value"))
    except (_Refused, RecursionError):
        return None


def _error(layer: str, exc: _Refused) -> CacheError:
    return CacheError(
        f"precompute(cache_dir=...): the table cache cannot key layer {layer!r}: {exc.path} holds {exc.reason}, "
        "and a key that skipped it would serve stale tables after it changes; pass no cache_dir, or make that "
        "attribute plain data (numbers, strings, containers of them, tensors, arrays, dataclasses)"
    )


def _path(layer: str, name: str) -> str:
    return f"{layer or 'the model'}.{name}" if name else (layer or "the model")


def _simple(v: Any) -> bytes | None:
    """The encoding of a scalar (no recursion needed), or ``None`` for anything else."""
    if isinstance(v, enum.Enum):
        return f"enum:{_qualified(type(v))}.{v.name}={v.value!r};".encode()
    if v is None or v is Ellipsis or type(v) in (bool, int, float, complex, str):
        return f"{type(v).__name__}:{v!r};".encode()
    if isinstance(v, (bytes, bytearray)):
        return f"bytes[{len(v)}]:".encode() + bytes(v)
    if isinstance(v, (torch.dtype, torch.device, np.dtype)):
        return f"{type(v).__name__}:{v};".encode()
    if isinstance(v, np.generic):
        return f"scalar:{v.dtype.str}:".encode() + v.tobytes()
    return None


def _tensor_bytes(t: torch.Tensor, path: str) -> bytes:
    """A tensor by dtype, shape and a digest of its bytes (whatever its dtype, on the CPU)."""
    try:
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    except (RuntimeError, TypeError, ValueError) as exc:  # ValueError: a lazy module's uninitialized parameter
        raise _Refused(path, f"a tensor whose bytes cannot be read ({str(exc)[:80]})") from None
    return f"tensor:{t.dtype}{tuple(t.shape)}:".encode() + _sha(raw)


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _written_in_python(cls: type) -> bool:
    """True for classes whose instances keep all their state in ``__dict__`` and slots."""
    return all(c.__flags__ & (_HEAP_TYPE | _IMMUTABLE_TYPE) == _HEAP_TYPE for c in cls.__mro__[:-1])


def _state(v: Any) -> list[tuple[str, Any]]:
    """An instance's ``__dict__`` and slot values, by name."""
    state = dict(getattr(v, "__dict__", {}))
    for cls in type(v).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__"):
                state.setdefault(slot, getattr(v, slot, "<unset>"))
    return sorted(state.items())


def _cell(name: str, cell: Any) -> Any:
    """A closure cell's value; the class of a method that calls ``super()`` (its ``__class__`` cell) by name: it is
    the class being keyed."""
    if not _filled(cell):
        return "<empty cell>"
    if name == "__class__" and isinstance(cell.cell_contents, type):
        return f"<class {_qualified(cell.cell_contents)}>"
    return cell.cell_contents


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _named_callable(v: Any, path: str) -> bytes:
    """A callable without Python code (a builtin, a ufunc), by the name it can be imported under."""
    module, name = getattr(v, "__module__", None), getattr(v, "__name__", None)
    if isinstance(module, str) and isinstance(name, str):
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            found = None
        if found is v:
            return f"callable:{module}.{name};".encode()
    raise _Refused(path, f"a callable {type(v).__qualname__} whose code cannot be read and that no name imports")


#: Class members that are not the class's data: its namespace's plumbing, line numbers, abc's registry cache, and
#: the slot names pickle caches on a class the first time it pickles one of its instances (copyreg), which would
#: give a layer another key once it has been sent to a worker.
_CLASS_UNKEYED = frozenset(
    {"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__firstlineno__", "__static_attributes__"}
    | {"_abc_impl", "__orig_bases__", "__parameters__", "__dataclass_fields__", "__dataclass_params__"}
    | {"__slotnames__"}
)
_CACHED_FUNCTION = type(functools.lru_cache(maxsize=None)(lambda: None))
_DESCRIPTORS = (
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.BuiltinFunctionType,
)


def _in_python_itself(module: Any) -> bool:
    """True for the modules of Python's standard library (``typing``, ``abc``, ``dataclasses``, ...)."""
    return isinstance(module, str) and module.partition(".")[0] in sys.stdlib_module_names


def _accessors(p: property) -> tuple[Any, ...]:
    return tuple(f if f is not None else "<none>" for f in (p.fget, p.fset, p.fdel))


def _is_annotation(v: Any) -> bool:
    """A typing construct (``TypeVar``, ``Optional[int]``, ``list[int]``, ``int | None``): an annotation."""
    return isinstance(v, (typing.TypeVar, types.GenericAlias, types.UnionType)) or type(v).__module__ == "typing"


def _annotation(v: Any) -> str:
    """An annotation as text: a class by qualified name, anything else (strings, typing constructs) by repr."""
    return _qualified(v) if isinstance(v, type) else repr(v)


#: What a code object gives a key, computed once per code object (immutable): its bytes, and the names it and the
#: code nested in it read (globals among them).
_CODE_KEYS: weakref.WeakKeyDictionary[types.CodeType, tuple[bytes, tuple[str, ...]]] = weakref.WeakKeyDictionary()


def _code_key(code: types.CodeType) -> tuple[bytes, tuple[str, ...]]:
    known = _CODE_KEYS.get(code)
    if known is None:
        known = _CODE_KEYS[code] = (_code_bytes(code), tuple(sorted(_names(code))))
    return known


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


#: The most values of plain data keyed for one global a function reads (more: the global is keyed by name only).
MAX_GLOBAL_ITEMS = 100_000


def _globals_bytes(function: types.FunctionType, names: tuple[str, ...]) -> bytes:
    """The module-level globals among ``names`` that ``function`` reads, by value where they are plain data
    (numbers, strings, containers of them, tensors, arrays, domains); others (modules, classes, functions, objects)
    are keyed by their name alone, in the function's code."""
    scope = function.__globals__
    parts = []
    for name in names:
        if name in scope:
            encoder = _Encoder({}, plain=True)
            try:
                parts.append(f"global {name}=".encode() + encoder.value(scope[name], name))
            except (_Refused, RecursionError):
                continue
    return b"globals(" + b"".join(parts) + b")" if parts else b""


def _code_bytes(code: types.CodeType) -> bytes:
    """A code object by what it does: bytecode, constants (nested code too), names and signature."""
    head = repr(tuple(getattr(code, f, None) for f in _CODE_FIELDS)).encode()
    consts = b"".join(_const_bytes(c) for c in code.co_consts)
    return b"code(" + head + _sha(code.co_code) + b"[" + consts + b"])"


def _const_bytes(c: Any) -> bytes:
    if isinstance(c, types.CodeType):
        return _code_bytes(c)
    if isinstance(c, tuple):
        return b"(" + b"".join(_const_bytes(x) for x in c) + b")"
    if isinstance(c, frozenset):  # a set's iteration order follows string hashing, which differs per process
        return b"{" + b"".join(sorted(_const_bytes(x) for x in c)) + b"}"
    return f"{type(c).__name__}:{c!r};".encode()
