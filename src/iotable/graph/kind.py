"""The registry of node kinds: each kind is one :class:`NodeKindDef`, registered under its name.

A node kind says everything the library does with a node of that kind, in one class: its metadata record
(:attr:`NodeKindDef.meta`), its invariants (:meth:`~NodeKindDef.check`, run by :meth:`Graph.check
<iotable.graph.Graph.check>`), its runtime kernel (:meth:`~NodeKindDef.compile`), its bundle encoding
(:meth:`~NodeKindDef.encode`, :meth:`~NodeKindDef.decode`), its picture (:attr:`~NodeKindDef.dot_shape`,
:meth:`~NodeKindDef.label`) and its hardware in each style (:meth:`~NodeKindDef.unrolled`,
:meth:`~NodeKindDef.streaming`, written against the builder the hardware layer hands it, so that this core
never imports the hardware layer). The built-in kinds live one module each in :mod:`iotable.nodekinds` and are
registered when :mod:`iotable` is imported; a new kind registers itself the same way, without editing the
library::

    @register
    class Invert(NodeKindDef):
        name = "invert"
        meta = InvertMeta
        ...

Everything that handles nodes looks a kind up by its name (:func:`definition`), never by branching on
kinds. :class:`NodeKind` is the kind's name as an object: one object per name, so ``node.kind is
NodeKind.PAD`` holds for every pad node; ``NodeKind("pad")`` looks a registered or built-in name up.

This module imports no kind: the kinds import it.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..errors import GraphError

if TYPE_CHECKING:
    from .nodes import Edge, Meta, Node

__all__ = [
    "BUILTIN_KINDS",
    "MetaDecoder",
    "MetaEncoder",
    "NodeKind",
    "NodeKindDef",
    "definition",
    "definitions",
    "find",
    "register",
]

#: The names of the built-in kinds (:mod:`iotable.nodekinds`).
BUILTIN_KINDS = (
    "input", "output", "table", "pad", "window", "reshape", "duplicate", "join", "pool", "host", "sum", "argmax",
    "threshold",
)  # fmt: skip


class _NodeKindType(type):
    """``for kind in NodeKind`` walks the known kinds, built-in first, in registration order."""

    def __iter__(cls) -> Iterator[NodeKind]:
        return iter(list(NodeKind._by_name.values()))

    def __len__(cls) -> int:
        return len(NodeKind._by_name)


class NodeKind(metaclass=_NodeKindType):
    """A node kind's name as an object: one object per name (compare kinds with ``is``).

    ``NodeKind.PAD`` and the other built-in kinds are attributes; ``NodeKind("pad")`` looks a known kind
    up by its name and raises :class:`ValueError` for an unknown one, as an enumeration does; a new kind
    gets its object when it is registered (:func:`register`). ``value`` is the name bundles store.

    Example:
        >>> NodeKind("pad") is NodeKind.PAD, NodeKind.PAD.value
        (True, 'pad')
    """

    __slots__ = ("value",)
    _by_name: ClassVar[dict[str, NodeKind]] = {}
    value: str

    INPUT: ClassVar[NodeKind]
    OUTPUT: ClassVar[NodeKind]
    TABLE: ClassVar[NodeKind]
    PAD: ClassVar[NodeKind]
    WINDOW: ClassVar[NodeKind]
    RESHAPE: ClassVar[NodeKind]
    DUPLICATE: ClassVar[NodeKind]
    JOIN: ClassVar[NodeKind]
    POOL: ClassVar[NodeKind]
    HOST: ClassVar[NodeKind]
    SUM: ClassVar[NodeKind]
    ARGMAX: ClassVar[NodeKind]
    THRESHOLD: ClassVar[NodeKind]

    def __new__(cls, value: Any) -> NodeKind:
        if isinstance(value, NodeKind):
            return value
        kind = cls._by_name.get(value) if isinstance(value, str) else None
        if kind is None:
            accepted = ", ".join(repr(k) for k in cls._by_name)
            msg = f"{value!r} is not a NodeKind; expected one of {accepted} (or register the kind first)"
            raise ValueError(msg)
        return kind

    @classmethod
    def _define(cls, value: str) -> NodeKind:
        """The kind named ``value``, made once (every later call returns the same object)."""
        if value not in cls._by_name:
            kind = object.__new__(cls)
            object.__setattr__(kind, "value", value)
            cls._by_name[value] = kind
        return cls._by_name[value]

    @property
    def name(self) -> str:
        """The kind's name in capitals, as the attribute of a built-in kind (``PAD``)."""
        return self.value.upper()

    # What its registered definition says of its nodes (:class:`NodeKindDef`; ``False`` for a kind not
    # registered): code that handles nodes asks these, never which kind a node is.

    @property
    def is_input(self) -> bool:
        """Its node is the network's input (:attr:`NodeKindDef.is_input`)."""
        return _trait(self, "is_input")

    @property
    def is_output(self) -> bool:
        """Its node is the network's output (:attr:`NodeKindDef.is_output`)."""
        return _trait(self, "is_output")

    @property
    def tabulated(self) -> bool:
        """Its nodes look their outputs up in a layer of tables (:attr:`NodeKindDef.tabulated`)."""
        return _trait(self, "tabulated")

    @property
    def hosted(self) -> bool:
        """Its nodes run in software on decoded values (:attr:`NodeKindDef.hosted`)."""
        return _trait(self, "hosted")

    @property
    def windowed(self) -> bool:
        """Its nodes output window vectors (:attr:`NodeKindDef.windowed`)."""
        return _trait(self, "windowed")

    @property
    def pads(self) -> bool:
        """Its nodes pad their input's spatial axes (:attr:`NodeKindDef.pads`)."""
        return _trait(self, "pads")

    @property
    def reshapes(self) -> bool:
        """Its nodes only change the shape of their input (:attr:`NodeKindDef.reshapes`)."""
        return _trait(self, "reshapes")

    @property
    def sums(self) -> bool:
        """Its nodes output exact integer sums of codes (:attr:`NodeKindDef.sums`)."""
        return _trait(self, "sums")

    def __setattr__(self, key: str, value: Any) -> None:
        msg = f"a NodeKind is immutable; cannot set {key!r} on {self!r}"
        raise AttributeError(msg)

    def __repr__(self) -> str:
        return f"<NodeKind.{self.name}: {self.value!r}>"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return NodeKind, (self.value,)

    def __copy__(self) -> NodeKind:
        return self

    def __deepcopy__(self, memo: Any) -> NodeKind:
        return self


for _name in BUILTIN_KINDS:
    setattr(NodeKind, _name.upper(), NodeKind._define(_name))


class MetaEncoder(Protocol):
    """What the bundle writer hands :meth:`NodeKindDef.encode`: field values as JSON, bound to one node."""

    def field(self, name: str, value: Any) -> Any:
        """A metadata field as JSON: arrays as files, enumerations as their values, library types tagged."""

    def host_module(self) -> Any:
        """Record the node's torch module (``meta.module``) in the bundle; return the tag its field holds."""


class MetaDecoder(Protocol):
    """What the bundle reader hands :meth:`NodeKindDef.decode`: JSON fields back to values."""

    def fields(self, record: Any, names: set[str], where: str, *, hosts: bool = False) -> dict[str, Any]:
        """``record`` checked to be an object of exactly the keys ``names``, each value decoded (``hosts``:
        a host tag becomes the host node's module)."""

    def choice(self, cls: Any, value: Any, where: str, what: str) -> Any:
        """The member of the enumeration ``cls`` whose value is ``value``, or an error saying it is not
        ``what`` (``"a padding mode"``)."""

    def index_array(self, value: Any, where: str, *, ndim: int | None = None) -> Any:
        """``value`` checked to be an ``int64`` array (of ``ndim`` axes when given)."""


#: A runtime kernel: the batched tensors of the node's inputs (by port) to its batched output.
Kernel = Callable[[list[Any]], Any]


class NodeKindDef:
    """One node kind: its record, invariants, runtime kernel, bundle codec, picture and hardware.

    Subclass it, set :attr:`name` and :attr:`meta`, override what the kind needs and decorate the class
    with :func:`register`. Defaults: one input port, no checks beyond the record's type, metadata stored
    field by field, a box in pictures, no hardware (export refuses its nodes by name); :meth:`compile` has
    no default (a kind says what it computes).
    """

    #: The kind's name: ``node.kind.value`` and what bundles store (a Python identifier).
    name: ClassVar[str]
    #: The kind's metadata record, a frozen dataclass (a subclass of :class:`~iotable.graph.Meta`).
    meta: ClassVar[type]
    #: The input ports it reads: ``0``, ``1``, ... or ``None`` for one or more (a join).
    reads: ClassVar[int | None] = 1
    #: Its output is its input's elements, unchanged or viewed (the runtime keeps its input's layout).
    passes_through: ClassVar[bool] = False
    #: Its node is the network's input: first in the graph, no producer, fed the batch by the runtime.
    is_input: ClassVar[bool] = False
    #: Its node is the network's output: last in the graph, its producer's output passed on.
    is_output: ClassVar[bool] = False
    #: Its nodes look their outputs up in a layer of tables that ``meta.layer`` names (``net[meta.layer]``).
    tabulated: ClassVar[bool] = False
    #: Its nodes run in software (torch) on decoded values: hardware stops before them, bundles keep their module.
    hosted: ClassVar[bool] = False
    #: Its nodes output one window vector per output position: the last axis holds channels times taps, every
    #: element with its own domain, the axes before it the positions.
    windowed: ClassVar[bool] = False
    #: Its nodes pad their input's spatial axes (the runtime may fuse a constant pad into the window after it).
    pads: ClassVar[bool] = False
    #: Its nodes only change the shape of their input: the same elements in C order.
    reshapes: ClassVar[bool] = False
    #: Its nodes output exact integer sums of codes, one code per element (a table after one may become
    #: comparisons).
    sums: ClassVar[bool] = False
    #: The Graphviz shape of its nodes, and extra DOT attributes (``""``: none).
    dot_shape: ClassVar[str] = "box"
    dot_style: ClassVar[str] = ""

    @property
    def kind(self) -> NodeKind:
        """The kind's name as an object (``node.kind``)."""
        return NodeKind(self.name)

    # -- graph ----------------------------------------------------------------------------------------

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        """Raise :class:`~iotable.errors.GraphError` where ``node`` breaks the kind's invariants.

        Called by :meth:`Graph.check <iotable.graph.Graph.check>` after every field of the node was
        typed and its record found of type :attr:`meta`, with the node's producers and edges in by port
        (``producers`` checked already) and its edges out.
        """

    def output_ports(self, meta: Any) -> int:
        """How many output ports a node of this kind has (each drives one edge)."""
        return 1

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """Which elements of each producer ``node`` reads to compute its live output elements.

        ``live`` is a boolean array of ``node.shape`` (the output elements something live reads, at least one
        of them true); the result holds, per input port, a boolean array of that producer's shape, or
        ``None`` for every element. :func:`iotable.graph.liveness.liveness` walks the graph back from its
        output with it. The default reads every element of every producer: a kind that does not say is
        kept whole, which is always correct.
        """
        return [None] * len(producers)

    # -- runtime --------------------------------------------------------------------------------------

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """The node's runtime kernel: batched input tensors (``(N, *shape)`` by port) to ``(N, *node.shape)``.

        ``runtime`` is the :class:`~iotable.runtime.runtime.Runtime` compiling the graph (``runtime.graph``,
        ``runtime.layers``).
        """
        msg = (
            f"node kind {self.name!r} has no runtime kernel; define compile(self, runtime, node) on "
            f"{type(self).__name__}"
        )
        raise GraphError(msg)

    # -- bundle ---------------------------------------------------------------------------------------

    def encode(self, meta: Meta, codec: MetaEncoder) -> dict[str, Any]:
        """The record as a JSON object, field by field (what a bundle's ``node.meta`` holds)."""
        return {f.name: codec.field(f.name, getattr(meta, f.name)) for f in dataclasses.fields(meta)}

    def decode(self, record: Any, where: str, codec: MetaDecoder) -> Meta:
        """Inverse of :meth:`encode`: the record of a bundle's ``node.meta`` (types are checked later, by
        :meth:`Graph.check <iotable.graph.Graph.check>`); ``where`` names the record in errors."""
        values = codec.fields(record, {f.name for f in dataclasses.fields(self.meta)}, where)
        result: Meta = self.meta(**values)
        return result

    # -- pictures -------------------------------------------------------------------------------------

    def label(self, node: Node) -> list[str]:
        """The lines of a node's picture label after its kind, name and shape."""
        return []

    def row(self, node: Node) -> dict[str, Any]:
        """What a node adds to its row of :meth:`Graph.rows <iotable.graph.Graph.rows>` (summary columns)."""
        return {}

    def title(self, node: Node) -> str:
        """The first line of a node's picture label."""
        return self.name

    # -- hardware -------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The node in the unrolled style: its output as an array of element ids in the node's shape.

        ``builder`` is the hardware layer's builder of the walk (:class:`iotable.hdl.builder.Builder`: its
        netlist, the results of the nodes before, and what a kind builds with, such as ``builder.lookup``,
        a layer of tables over given elements); ``inputs`` are the producers' results by input port. The
        default refuses the node: the kind has no hardware in this style.
        """
        raise builder.no_hardware(node, self)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The node in the streaming style: its output as a stream (``builder.stream(...)``: one beat's element
        ids, the handshake they move on, the frame), ``inputs`` the producers' streams by input port. The
        default refuses the node: the kind has no hardware in this style.
        """
        raise builder.no_hardware(node, self)


_DEFINITIONS: dict[str, NodeKindDef] = {}
#: Names the interpreter's own attributes hold: a kind of such a name would shadow them.
_RESERVED = {"default", "graph", "run_graph", "run_node"}


def register(cls: type[NodeKindDef]) -> type[NodeKindDef]:
    """Register a node kind (use as a class decorator); returns the class.

    Raises:
        GraphError: the name is not an identifier, is reserved, or is registered by another class; or the
            record is not a dataclass.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        msg = f"register: {cls.__name__}.name must be a Python identifier not starting with '_', received {name!r}"
        raise GraphError(msg)
    if name in _RESERVED:
        msg = f"register: the node kind name {name!r} is reserved ({sorted(_RESERVED)}); choose another"
        raise GraphError(msg)
    held = _DEFINITIONS.get(name)
    if held is not None and type(held).__qualname__ != cls.__qualname__:
        msg = f"register: node kind {name!r} is registered already by {type(held).__name__}; choose another name"
        raise GraphError(msg)
    record = getattr(cls, "meta", None)
    if not (isinstance(record, type) and dataclasses.is_dataclass(record)):
        msg = f"register: {cls.__name__}.meta must be the kind's record, a dataclass, received {record!r}"
        raise GraphError(msg)
    kind = NodeKind._define(name)
    if getattr(record, "kind", None) is None:
        record.kind = kind  # type: ignore[attr-defined]  # a new kind's record learns its kind here
    held_kind = getattr(record, "kind", kind)
    if held_kind is not kind:
        msg = f"register: {record.__name__}.kind is {held_kind!r}; the record of {name!r} has kind NodeKind({name!r})"
        raise GraphError(msg)
    _DEFINITIONS[name] = cls()
    return cls


def definition(kind: NodeKind | str) -> NodeKindDef:
    """The registered definition of a kind (an object or its name).

    Raises:
        GraphError: no kind of that name is registered.

    Example:
        >>> definition("pad").dot_shape
        'box'
    """
    name = kind.value if isinstance(kind, NodeKind) else kind
    found = _DEFINITIONS.get(name) if isinstance(name, str) else None
    if found is None:
        msg = (
            f"node kind {name!r} is not registered; expected one of {sorted(_DEFINITIONS)} "
            "(import the module that registers it)"
        )
        raise GraphError(msg)
    return found


def _trait(kind: NodeKind, name: str) -> bool:
    """What the registered definition of ``kind`` says of ``name`` (``False`` for a kind not registered)."""
    found = _DEFINITIONS.get(kind.value)
    return bool(getattr(found, name, False))


def find(kind: NodeKind | str) -> NodeKindDef | None:
    """The registered definition of a kind, or ``None``."""
    name = kind.value if isinstance(kind, NodeKind) else kind
    return _DEFINITIONS.get(name) if isinstance(name, str) else None


def definitions() -> dict[NodeKind, NodeKindDef]:
    """Every registered kind and its definition, in registration order."""
    return {NodeKind(name): d for name, d in _DEFINITIONS.items()}
