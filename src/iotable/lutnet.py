"""The LUT netlist value: a table's function on bits, a combinational LUT netlist, its check against the
table on every row, and a checked mapping result as a network holds it.

The bundle stores a network's mapping results and checks each, row by row, when it loads them; the cost layer
(:mod:`iotable.synth`) produces them with ABC. Both read this module, which knows nothing of ABC.

Bits follow the hardware bit contract (:mod:`iotable.bits`): input i's code is a field of
``bits.width(domain)`` bits, the first input most significant; output j's code a field of the output
domain's width, the first output most significant. The *care set* is the bit addresses of the rows the table
holds; every other address is a don't-care: rows a partial (restricted) table lacks, and bit patterns that are
no code of a domain whose size is not a power of two.

A netlist is evaluated 64 rows to a machine word: every signal is a ``uint64`` vector over all ``2**n`` bit
addresses, a LUT's value is its cover (an OR of cubes, each an AND of literals) in whole-vector bitwise
operations. The Python loop is over LUTs and the cubes of their covers, never over rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import bits
from .errors import NetlistMismatchError, SynthError
from .table import IOTable

#: A BDD of each output, its multiplexers as an AIG, LUT mapping: on random dense tables of 6 to 16 bits
#: (1 and 2 outputs) it gives LogicNets' count exactly (12 inputs, 2 outputs: 170 LUT6, where the
#: sum-of-products route gives 665). Structural choices (``dch`` before ``if``, the first pinned flow)
#: cost about 10% more LUTs at odd widths from 9 bits, about 5% more on quantized-neuron tables, and 3x
#: the time. ``{k}`` is replaced by the LUT size.
DEFAULT_SCRIPT = "collapse; muxes; strash; if -K {k}"

__all__ = [
    "MAX_INPUT_BITS",
    "RECORD_FORMAT",
    "BitFunction",
    "Lut",
    "LutNetlist",
    "LutResult",
    "LutResults",
    "bit_function",
    "check_netlist",
    "result_name",
    "table_bits",
]


def table_bits(table: Any, *, what: str) -> tuple[int, int]:
    """Address bits and code bits of ``table`` as hardware packs them (:func:`iotable.bits.table_bits`),
    checked: an IOTable whose outputs are codes."""
    if not isinstance(table, IOTable):
        msg = f"{what}: expected an IOTable, received {type(table).__name__}"
        raise SynthError(msg)
    address, code = bits.table_bits(table.input_domains, table.output_domain, table.fan_out)
    if code is None:
        msg = (
            f"{what}: {table!r} holds raw output values, not codes; LUTs need a table whose unit ends in a "
            "quantizer (or one built with output_domain=)"
        )
        raise SynthError(msg)
    return address, code


#: Tables up to this many address bits are mapped (2**24 rows; ABC needs minutes from about 2**16).
MAX_INPUT_BITS = 24

# Part of every cache key: bump when the function handed to ABC changes for the same table.
_FLOW_VERSION = b"iotable.synth/1"


@dataclass(frozen=True, eq=False)
class BitFunction:
    """A table's function on bits: ``outputs`` (care rows, code bits MSB first) at ``care`` bit addresses.

    ``care`` is ``None`` when every bit address is a row (a dense table over power-of-two domains): then
    ``outputs`` is in address order.
    """

    input_widths: tuple[int, ...]
    output_width: int
    fan_out: int
    care: np.ndarray | None
    outputs: np.ndarray  # (rows, output_bits) uint8

    @property
    def input_bits(self) -> int:
        return sum(self.input_widths)

    @property
    def output_bits(self) -> int:
        return self.output_width * self.fan_out

    @property
    def space(self) -> int:
        return 1 << self.input_bits

    def input_names(self) -> list[str]:
        """Address bit names, most significant first: ``x<input>_<bit>`` as in iotable's PLA files."""
        return [f"x{j}_{b}" for j, w in enumerate(self.input_widths) for b in range(w - 1, -1, -1)]

    def output_names(self) -> list[str]:
        """Code bit names, most significant first: ``y<output>_<bit>``."""
        return [f"y{j}_{b}" for j in range(self.fan_out) for b in range(self.output_width - 1, -1, -1)]

    def truth(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, care)``: every output bit over every bit address, shape ``(output_bits, space)`` uint8
        (0 where not cared), and the care mask ``(space,)`` bool."""
        values = np.zeros((self.output_bits, self.space), dtype=np.uint8)
        if self.care is None:
            values[:] = self.outputs.T
            return values, np.ones(self.space, dtype=bool)
        care = np.zeros(self.space, dtype=bool)
        care[self.care] = True
        values[:, self.care] = self.outputs.T
        return values, care

    def key(self) -> str:
        """A content hash of the function (what is mapped): widths, care set and output bits."""
        digest = hashlib.sha256(_FLOW_VERSION)
        digest.update(repr((self.input_widths, self.output_width, self.fan_out)).encode())
        digest.update(b"dense" if self.care is None else self.care.astype("<i8").tobytes())
        digest.update(np.packbits(self.outputs, axis=None).tobytes())
        return digest.hexdigest()


def bit_function(table: IOTable, *, what: str) -> BitFunction:
    """The function ``table`` computes on bits (see the module docstring); checked: codes out, bits bounded."""
    input_bits, _ = table_bits(table, what=what)
    if input_bits > MAX_INPUT_BITS:
        msg = (
            f"{what}: {table!r} has {input_bits} address bits; ABC mapping is limited to {MAX_INPUT_BITS} "
            "(2**24 rows); use lut_estimate for larger tables or decompose finer"
        )
        raise SynthError(msg)
    assert table.output_domain is not None  # table_bits refuses raw outputs
    widths = bits.widths(table.input_domains)
    out_width = bits.width(table.output_domain)
    outputs = bits.digits(np.asarray(table.outputs), [out_width] * table.fan_out)
    whole = all(n == 1 << w for n, w in zip(table.radices, widths))
    if table.is_dense and whole:
        return BitFunction(widths, out_width, table.fan_out, None, outputs)
    # Fields have fixed widths, so bit addresses rise with packed addresses: the rows stay sorted.
    care = bits.pack(table.inputs, widths) if len(table) else np.zeros(0, np.int64)
    return BitFunction(widths, out_width, table.fan_out, care, outputs)


_WORD = 64


@dataclass(frozen=True)
class Lut:
    """One node of the netlist: ``output = cover(inputs)``, the cover as BLIF writes it.

    ``cubes`` are the input parts of the cover's lines (``'0'``, ``'1'``, ``'-'`` per input); ``onset`` says
    whether they list the on-set (lines ending in 1) or the off-set (lines ending in 0). No cube and
    ``onset=True`` is the constant 0; one empty cube, the constant 1.
    """

    output: str
    inputs: tuple[str, ...]
    cubes: tuple[str, ...]
    onset: bool = True

    @property
    def is_buffer(self) -> bool:
        """A wire (one input, passed through): no LUT in hardware."""
        return len(self.inputs) == 1 and self.cubes == (("1",) if self.onset else ("0",))

    @property
    def is_lut(self) -> bool:
        """Whether this node costs a LUT: it reads an input and is not a wire (constants and wires are free)."""
        return bool(self.inputs) and not self.is_buffer


@dataclass(frozen=True)
class LutNetlist:
    """A combinational netlist of LUTs: primary inputs, outputs and nodes in topological order.

    Build one with :meth:`from_blif` (ABC's ``write_blif`` after ``if -K k``); ``blif`` keeps the text.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Lut, ...]
    blif: str

    @property
    def luts(self) -> int:
        """LUTs: nodes that read at least one signal and are not wires."""
        return sum(node.is_lut for node in self.nodes)

    @property
    def depth(self) -> int:
        """LUTs on the longest path from an input to an output (wires and constants count 0)."""
        level = dict.fromkeys(self.inputs, 0)
        for node in self.nodes:
            below = max((level[s] for s in node.inputs), default=0)
            level[node.output] = below + int(node.is_lut)
        return max((level.get(o, 0) for o in self.outputs), default=0)

    @property
    def max_fan_in(self) -> int:
        """The widest node's number of inputs."""
        return max((len(node.inputs) for node in self.nodes), default=0)

    @classmethod
    def from_blif(cls, text: str, *, what: str = "LutNetlist.from_blif") -> LutNetlist:
        """Parse a combinational BLIF model of ``.names`` nodes (one model; no latches, no subcircuits).

        Example:
            >>> net = LutNetlist.from_blif(".model m\\n.inputs a b\\n.outputs y\\n.names a b y\\n11 1\\n.end\\n")
            >>> net.luts, net.depth, net.nodes[0].cubes
            (1, 1, ('11',))
        """
        lines = re.sub(r"\\\r?\n", " ", text).splitlines()  # join continuation lines
        inputs: list[str] = []
        outputs: list[str] = []
        nodes: list[Lut] = []
        current: tuple[str, tuple[str, ...]] | None = None
        rows: list[str] = []
        polarity: set[str] = set()

        def close() -> None:
            if current is None:
                return
            if len(polarity) > 1:
                msg = f"{what}: node {current[0]!r} mixes on-set and off-set lines; not a valid BLIF cover"
                raise SynthError(msg)
            nodes.append(Lut(current[0], current[1], tuple(rows), onset=polarity != {"0"}))

        for number, raw in enumerate(lines, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if words[0].startswith("."):
                close()
                current, rows, polarity = None, [], set()
                keyword = words[0]
                if keyword == ".inputs":
                    inputs += words[1:]
                elif keyword == ".outputs":
                    outputs += words[1:]
                elif keyword == ".names":
                    if len(words) < 2:
                        msg = f"{what}: line {number}: .names without an output signal"
                        raise SynthError(msg)
                    current = (words[-1], tuple(words[1:-1]))
                elif keyword in (".model", ".end", ".default_input_arrival", ".default_output_required"):
                    continue
                else:
                    msg = f"{what}: line {number}: {keyword} is not supported; expected a combinational LUT netlist"
                    raise SynthError(msg)
                continue
            if current is None:
                msg = f"{what}: line {number} ({line!r}) is a cover line outside a .names node"
                raise SynthError(msg)
            width = len(current[1])
            if width == 0 and words in (["1"], ["0"]):  # a constant: 1, or (as ABC writes it) 0
                rows.append("")
                polarity.add(words[0])
                continue
            if len(words) != 2 or len(words[0]) != width or words[1] not in ("0", "1") or set(words[0]) - set("01-"):
                msg = (
                    f"{what}: line {number} ({line!r}) of node {current[0]!r}: expected {width} characters of "
                    "0/1/- and an output 0 or 1"
                )
                raise SynthError(msg)
            rows.append(words[0])
            polarity.add(words[1])
        close()
        return cls(tuple(inputs), tuple(outputs), _topological(nodes, inputs, outputs, what=what), text)

    def simulate(self, patterns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output's bit vector from the inputs' (``uint64`` words, 64 rows each, all the same length)."""
        values = dict(patterns)
        length = len(next(iter(patterns.values()))) if patterns else 1
        ones = np.full(length, ~np.uint64(0), dtype=np.uint64)
        for node in self.nodes:
            result = np.zeros(length, dtype=np.uint64)
            for cube in node.cubes:
                term = ones.copy()
                for signal, literal in zip(node.inputs, cube):
                    if literal == "1":
                        term &= values[signal]
                    elif literal == "0":
                        term &= ~values[signal]
                result |= term
            values[node.output] = result if node.onset else ~result
        return {name: values[name] for name in self.outputs}


def _topological(nodes: list[Lut], inputs: list[str], outputs: list[str], *, what: str) -> tuple[Lut, ...]:
    """``nodes`` ordered so that every node follows the nodes it reads; checks names, drivers and loops."""
    driver: dict[str, Lut] = {}
    for node in nodes:
        if node.output in driver or node.output in inputs:
            msg = f"{what}: signal {node.output!r} has more than one driver"
            raise SynthError(msg)
        driver[node.output] = node
    known = set(inputs) | set(driver)
    for name in [*outputs, *(s for node in nodes for s in node.inputs)]:
        if name not in known:
            msg = f"{what}: signal {name!r} is read but never driven (not an input, not a node's output)"
            raise SynthError(msg)
    ordered: list[Lut] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: placed
    for root in driver:
        stack = [(root, 0)]
        while stack:  # depth-first, iterative (netlists can be deep)
            name, index = stack.pop()
            found = driver.get(name)
            if found is None or state.get(name) == 2:
                continue
            node = found
            if index == 0:
                if state.get(name) == 1:
                    msg = f"{what}: a combinational loop passes through {name!r}"
                    raise SynthError(msg)
                state[name] = 1
            if index < len(node.inputs):
                stack.append((name, index + 1))
                child = node.inputs[index]
                if state.get(child) == 1 and child in driver:
                    msg = f"{what}: a combinational loop passes through {child!r}"
                    raise SynthError(msg)
                stack.append((child, 0))
            else:
                state[name] = 2
                ordered.append(node)
    return tuple(ordered)


def address_patterns(count: int) -> tuple[np.ndarray, int]:
    """Bit vectors of the ``count`` address bits over every address, 64 addresses a word (address ``a`` is bit
    ``a % 64`` of word ``a // 64``); first the most significant address bit. Returns ``(patterns, words)``."""
    space = 1 << count
    words = max(1, space // _WORD)
    address = np.arange(words * _WORD, dtype=np.int64)
    patterns = np.empty((count, words), dtype=np.uint64)
    for i in range(count):  # a loop over address bits, vectorized over addresses
        bit = (address >> (count - 1 - i)) & 1
        patterns[i] = np.packbits(bit.astype(np.uint8), bitorder="little").view("<u8")
    return patterns, words


def pack_rows(matrix: np.ndarray, words: int) -> np.ndarray:
    """Rows of 0/1 values over addresses, ``(m, space)``, packed 64 to a word: ``(m, words)`` uint64."""
    padded = np.zeros((matrix.shape[0], words * _WORD), dtype=np.uint8)
    padded[:, : matrix.shape[1]] = matrix
    return np.packbits(padded, axis=1, bitorder="little").view("<u8")


def check_netlist(netlist: LutNetlist, fn: BitFunction, *, name: str, k: int | None = None) -> None:
    """Raise :class:`NetlistMismatchError` unless ``netlist`` computes ``fn`` on every care row.

    ``name`` names the table in the message. With ``k``, also check no node reads more than ``k`` signals.
    """
    inputs, outputs = fn.input_names(), fn.output_names()
    if set(netlist.inputs) - set(inputs) or set(netlist.outputs) != set(outputs):
        msg = (
            f"{name}: the mapped netlist has inputs {list(netlist.inputs)} and outputs {list(netlist.outputs)}; "
            f"expected inputs among {inputs} and outputs {outputs}"
        )
        raise NetlistMismatchError(msg)
    if k is not None and netlist.max_fan_in > k:
        wide = next(node for node in netlist.nodes if len(node.inputs) > k)
        msg = (
            f"{name}: node {wide.output!r} of the mapped netlist reads {len(wide.inputs)} signals; expected LUTs "
            f"of at most {k} inputs (does the script end in 'if -K {k}'?)"
        )
        raise NetlistMismatchError(msg)
    patterns, words = address_patterns(fn.input_bits)
    got = netlist.simulate({n: patterns[i] for i, n in enumerate(inputs) if n in netlist.inputs})
    values, care = fn.truth()
    expected = pack_rows(values, words)
    care_words = pack_rows(care[None, :], words)[0]
    wrong = np.zeros(words, dtype=np.uint64)
    for o, out in enumerate(outputs):
        wrong |= (got[out] ^ expected[o]) & care_words
    if not wrong.any():
        return
    word = int(np.flatnonzero(wrong)[0])
    address = word * _WORD + (int(wrong[word]) & -int(wrong[word])).bit_length() - 1
    codes = bits.unpack(np.array([address]), fn.input_widths)[0].tolist()
    bit = address % _WORD
    have = [int((int(got[out][word]) >> bit) & 1) for out in outputs]
    want = [int(values[o, address]) for o in range(len(outputs))]

    def as_codes(bits: list[int]) -> list[int]:
        w = fn.output_width
        return [int("".join(map(str, bits[j * w : (j + 1) * w])), 2) for j in range(fn.fan_out)]

    msg = (
        f"{name}: the mapped LUT netlist does not compute the table: input codes {tuple(codes)} "
        f"(address bits {address:0{fn.input_bits}b}) give output codes {as_codes(have)}, the table holds "
        f"{as_codes(want)}; the mapper produced a wrong netlist (try another script=, or report it with the table)"
    )
    raise NetlistMismatchError(msg)


# -- a checked mapping result, and a network's results ---------------------------------------------------------

#: The format of a mapping record (a cache file of :func:`iotable.synth.map_luts`); part of every result's name.
RECORD_FORMAT = 2


def result_name(key: str, k: int, script: str, abc_version: str) -> str:
    """The name of the result of mapping the function ``key`` with ``k``, ``script`` and ``abc_version``: one
    per flow and function (the cache's file name, and the key of :class:`LutResults`)."""
    digest = hashlib.sha256(json.dumps([RECORD_FORMAT, key, k, script, abc_version]).encode()).hexdigest()
    return f"{digest[:40]}.json"


@dataclass(frozen=True)
class LutResult:
    """One function mapped onto k-input LUTs, its netlist checked against its table on every care row.

    Attributes:
        key: the content hash of the mapped function (:meth:`BitFunction.key`).
        k, script, abc_version: the flow: LUT inputs, the ABC commands, the ABC program's version line.
        method: ``"abc"``, or ``"direct"`` for a function of at most k address bits (written without ABC).
        input_bits, output_bits: the function's address and code bits.
        luts, depth: the netlist's LUTs and LUTs on its longest path.
        seconds: the mapper's wall time when it was mapped.
        netlist: the checked :class:`LutNetlist` (its BLIF text in ``netlist.blif``).
        strategy, attempts: for a floor (``effort="floor"``), the attempt kept and the LUTs of every attempt
            that passed; ``None`` and ``()`` otherwise (a bundle does not store them).
    """

    key: str
    k: int
    script: str
    abc_version: str
    method: str
    input_bits: int
    output_bits: int
    luts: int
    depth: int
    seconds: float
    netlist: LutNetlist
    strategy: str | None = None
    attempts: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """:func:`result_name` of this result's function and flow."""
        return result_name(self.key, self.k, self.script, self.abc_version)

    def record(self) -> dict[str, Any]:
        """The result as a JSON-ready mapping record (the netlist as its BLIF text, ``"blif"``)."""
        fields = ("key", "k", "script", "abc_version", "input_bits", "output_bits", "method", "luts", "depth")
        return {
            "format": RECORD_FORMAT,
            **{f: getattr(self, f) for f in fields},
            "seconds": self.seconds,
            "blif": self.netlist.blif,
            **({} if self.strategy is None else {"strategy": self.strategy, "attempts": list(self.attempts)}),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], netlist: LutNetlist) -> LutResult:
        """A result from a mapping record and its netlist, already parsed and checked by the caller."""
        return cls(
            key=record["key"],
            k=int(record["k"]),
            script=record["script"],
            abc_version=record["abc_version"],
            method=record["method"],
            input_bits=int(record["input_bits"]),
            output_bits=int(record["output_bits"]),
            luts=int(record["luts"]),
            depth=int(record["depth"]),
            seconds=float(record["seconds"]),
            netlist=netlist,
            strategy=record.get("strategy"),
            attempts=tuple(record.get("attempts", ())),
        )


class LutResults(Mapping[str, LutResult]):
    """The checked mapping results a network holds, an immutable mapping from each result's :attr:`LutResult.name`
    (one per function and flow) to the result; :meth:`adding` gives a new one.

    Example:
        >>> results = LutResults()
        >>> len(results), bool(results)
        (0, False)
    """

    __slots__ = ("_items",)
    _items: dict[str, LutResult]

    def __init__(self, results: Iterable[LutResult] = ()) -> None:
        items: dict[str, LutResult] = {}
        for result in results:
            if not isinstance(result, LutResult):
                msg = f"LutResults: expected LutResult values, received {type(result).__name__}"
                raise SynthError(msg)
            items[result.name] = result
        object.__setattr__(self, "_items", items)

    def __setattr__(self, name: str, value: Any) -> None:
        msg = "LutResults is immutable; adding() gives a new one"
        raise AttributeError(msg)

    def __getitem__(self, name: str) -> LutResult:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"LutResults({len(self)} result{'s' if len(self) != 1 else ''})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (LutResults, (tuple(self._items.values()),))

    def adding(self, results: Iterable[LutResult]) -> LutResults:
        """These results and ``results`` (a result of the same name replaces the one held)."""
        return LutResults([*self._items.values(), *results])
