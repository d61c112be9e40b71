"""A mapped LUT netlist: read from ABC's BLIF, evaluated bit-parallel on every row, checked against a table.

Evaluation packs 64 rows in a machine word: every signal is a ``uint64`` vector over all ``2**n`` bit
addresses, a LUT's value is its cover (an OR of cubes, each an AND of literals) in whole-vector bitwise
operations. The Python loop is over LUTs and the cubes of their covers, never over rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import NetlistMismatchError, SynthError
from ..table import IOTable
from ._function import BitFunction, bit_function

__all__ = ["Lut", "LutNetlist", "check_netlist", "check_table"]

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


def address_patterns(bits: int) -> tuple[np.ndarray, int]:
    """Bit vectors of the ``bits`` address bits over every address, 64 addresses a word (address ``a`` is bit
    ``a % 64`` of word ``a // 64``); first the most significant address bit. Returns ``(patterns, words)``."""
    space = 1 << bits
    words = max(1, space // _WORD)
    address = np.arange(words * _WORD, dtype=np.int64)
    patterns = np.empty((bits, words), dtype=np.uint64)
    for i in range(bits):  # a loop over address bits, vectorized over addresses
        bit = (address >> (bits - 1 - i)) & 1
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
    shifts = np.cumsum((0, *fn.input_widths[::-1]))[:-1][::-1]
    codes = [(address >> int(s)) & ((1 << w) - 1) for s, w in zip(shifts, fn.input_widths)]
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
