"""The hardware IR: everything a design is, in either style, language-neutral.

A :class:`Netlist` holds an **element store** (an element is a bit field of a signal — ``signal``, ``lsb``,
``width`` — or a constant code), the top-level :class:`Signal` s, the distinct :class:`TableModule` s, the
combinational *blocks* (a :class:`Layer` of table instances, a :class:`Pool` of comparator trees, the
arithmetic of :class:`Adder` trees, :class:`Argmax` trees and :class:`Thresholds`) and the clocked parts:

- unrolled style: a :class:`ValidPipeline` — the valid shift register of ``latency`` bits and the registers
  (pipeline and delay registers, signals with a ``source``) that all move on one ``advance``;
- streaming style: *stages* between *handshakes* (valid/ready pairs, handshake 0 the input's): a
  :class:`PadStage`, a :class:`WindowStage` (a line buffer) or a :class:`RegisterStage`, and the handshake
  ``last`` the output moves on.

Every handshake out of a clocked part is *registered*: the part's word (its **main** word: a register, or
the pad stage's combinational pixel) is followed by a **skid** register, and its ``ready`` is a flip-flop that
says the skid is empty. The part moves only while ``ready`` is high; a word offered while ``out_ready`` is low
goes into the skid, which then drives the output until it is taken. So no combinational path runs from
``out_ready`` to ``in_ready`` (nor to the enables of the unrolled style's registers), and a word offered but
not taken stays on the output unchanged.

The builders (:mod:`.build`) make it; the printers (:mod:`.verilog`, :mod:`.vhdl`) write it; nothing here knows
a language.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OptionError
from ..table import IOTable
from .table import DontCares, TableLayout

__all__ = [
    "Adder",
    "Argmax",
    "Block",
    "Layer",
    "Netlist",
    "PadStage",
    "Pool",
    "RegisterStage",
    "Signal",
    "Stage",
    "Style",
    "TableModule",
    "Thresholds",
    "ValidPipeline",
    "WindowStage",
]


class Style(str, enum.Enum):
    """How a design computes the positions of a spatial layer."""

    UNROLLED = "unrolled"  # one instance of every unit at every position: a whole sample per cycle
    STREAMING = "streaming"  # pixels in raster order through line buffers, one instance of every unit

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Style:
        if isinstance(value, Style):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown style {value!r}; expected one of {accepted}"
        raise OptionError(msg)


@dataclass
class Signal:
    """A bit vector of the top level: the input, a module's output, a register or a delayed copy."""

    name: str
    width: int
    stage: int
    first: int  # the id of its first element; its elements have consecutive ids
    count: int
    source: int | None = None  # the signal a register copies, delayed by one cycle


@dataclass(frozen=True)
class TableModule:
    """One distinct table (deduplicated by content) and the module that holds it."""

    name: str
    table: IOTable
    layout: TableLayout
    uses: tuple[tuple[str, int], ...]  # (layer, unit) of every unit that instantiates it


@dataclass
class Layer:
    """A layer of tables (a table node, or a kind's :meth:`~.builder.Builder.lookup`) as a layer module: one
    instance per unit and position."""

    name: str  # the module's name
    node: str
    layer: str
    x_ids: np.ndarray  # the top-level elements driving port x, in order (element 0 at the lowest bits)
    x_widths: np.ndarray
    instances: list[tuple[str, str, list[int]]]  # (instance name, table module, local x elements, first input first)
    instance_units: list[tuple[int, int]]  # (unit, position) of each instance
    y_lsb: np.ndarray  # lowest bit in y of each instance's codes
    y_width: int
    output: int  # the top-level signal y drives
    register: int | None = None  # the top-level register after the layer, if any
    register_bits: int = 0
    units: int = 0  # the layer's tables
    kind: str = "table"  # the kind of the node it builds
    latency: int = 0  # registers inside its (pipelined, mapped) tables: y follows x by this many edges


@dataclass
class Pool:
    """A pool node as a module of comparator trees: ``y`` element e is the maximum of some ``x`` elements."""

    name: str
    node: str
    x_ids: np.ndarray
    x_widths: np.ndarray
    maxima: list[list[int]]  # for each output element, the local x elements it takes the maximum of
    y_widths: np.ndarray
    output: int


@dataclass
class Adder:
    """Adder trees (a level of a sum node): ``y`` element ``k`` is ``(constants[k] + sum_j weights[k][j] *
    op[terms[k][j]]) mod 2**y_widths[k]``, in unsigned arithmetic (the builder makes every true result fit its
    field, so the modulus only drops bits that cancel; :func:`~.emit.adder_tree` says how it is computed). The
    operands ``op`` are the ``x`` elements, then the ``shared`` sums (:class:`~iotable.subexpressions.Shared`:
    sums of two operands that several outputs read, each computed once)."""

    name: str
    node: str
    x_ids: np.ndarray
    x_widths: np.ndarray
    terms: list[list[int]]  # for each output element, the local x elements it adds
    weights: list[list[int]]  # their small integer weights (a power of two is a shift)
    constants: list[int]
    y_widths: np.ndarray
    output: int
    level: int = 0  # the level of the node's tree (0 the first); a deep sum is split into levels
    levels: int = 1
    shared: tuple[Any, ...] = ()  # Shared sums, operands len(x_ids) + j


@dataclass
class Argmax:
    """Comparator trees with indices: ``y`` element ``k`` is the position in ``groups[k]`` of its largest ``x``
    element, the first of equal ones (``torch.argmax``)."""

    name: str
    node: str
    x_ids: np.ndarray
    x_widths: np.ndarray
    groups: list[list[int]]  # for each output element, the local x elements it compares, in index order
    y_widths: np.ndarray
    output: int


@dataclass
class Thresholds:
    """Comparisons against constants: ``y`` element ``k``, for ``(element, thresholds, codes, base) = rows[k]``,
    is ``codes[j]`` for the last ``j`` with ``x[element] >= thresholds[j]`` (they ascend), else ``base``."""

    name: str
    node: str
    x_ids: np.ndarray
    x_widths: np.ndarray
    rows: list[tuple[int, tuple[int, ...], tuple[int, ...], int]]
    y_widths: np.ndarray
    output: int


Block = Layer | Pool | Adder | Argmax | Thresholds


@dataclass(frozen=True)
class ValidPipeline:
    """The unrolled style's clocking: ``latency`` valid bits shifted on ``advance`` (the output is taken or not
    valid); every register of the netlist loads on ``advance`` too. ``latency`` 0: combinational."""

    latency: int


@dataclass(frozen=True)
class PadStage:
    """Zeros padding of a frame: ``before``/``after`` rows and columns of pad codes around it."""

    name: str
    node: str
    source: int  # the handshake it reads
    target: int  # the handshake it drives
    x_ids: np.ndarray  # the input pixel's elements
    output: int  # the signal of the output pixel
    frame: tuple[int, int]  # the padded frame
    rows: tuple[bool, ...]  # rows of the padded frame that are input rows
    columns: tuple[bool, ...]
    widths: tuple[int, ...]  # bits of each channel
    codes: tuple[int, ...]  # the pad code of each channel


MEMORY_WORDS = 8  # a line buffer whose rows are delayed by at least this many pixels keeps them in a memory

Part = tuple[str, int, int]  # a bit field of a stage's own register: (register, high bit, low bit)


@dataclass(frozen=True)
class WindowStage:
    """A line buffer of ``depth`` pixels over a frame; a window is out after the pixel that completes it.

    Its output is the window: the pixel of each tap (row-major over the kernel, tap 0 lowest), ``back[t]``
    pixels before the newest. Two ways to hold the pixels, by size (:attr:`memory`):

    - **registers**: a shift register ``pixels`` of ``depth`` pixels, the newest lowest, moved on every pixel;
    - **memory**: the ``span`` newest pixels of each kernel row in registers (``newest`` for the bottom row;
      for each older row its first pixel in ``line_q`` and the rest in ``older``), and between rows a delay of
      ``words`` pixels in a circular buffer ``lines`` (one word per pixel time, a pixel of every kernel row but
      the top one) addressed by a counter: read (into ``line_q``) and written at the same address on each
      pixel, so that a pixel comes out ``words`` pixels after it went in. Nothing moves in the memory, which
      the tools can place in LUT RAM or block RAM.
    """

    name: str
    node: str
    source: int
    target: int
    x_ids: np.ndarray
    output: int  # the signal of the window: one pixel per tap, tap 0 lowest
    frame: tuple[int, int]  # the input frame
    rows: tuple[bool, ...]  # input rows that complete a window (its bottom row, at a stride)
    columns: tuple[bool, ...]
    depth: int  # pixels held
    pixel: int  # bits of a pixel
    kernel: tuple[int, int] = (1, 1)  # (rows, columns) of the window
    dilation: tuple[int, int] = (1, 1)
    memory: bool = False  # the rows' delays in a memory (else the whole buffer a shift register)

    @property
    def span(self) -> int:
        """Pixels of one kernel row, first tap to last: ``(kw - 1) * dw + 1``."""
        return (self.kernel[1] - 1) * self.dilation[1] + 1

    @property
    def words(self) -> int:
        """Words of the memory: the pixels between the end of one kernel row's span and the next row's start."""
        return self.dilation[0] * self.frame[1] - self.span

    @property
    def back(self) -> tuple[int, ...]:
        """Each tap's place in the buffer: how many pixels before the newest, row-major over the kernel."""
        (kh, kw), (dh, dw), columns = self.kernel, self.dilation, self.frame[1]
        return tuple((kh - 1 - ky) * dh * columns + (kw - 1 - kx) * dw for ky in range(kh) for kx in range(kw))

    def place(self, back: int) -> Part:
        """The register bits holding the pixel ``back`` pixels before the newest."""
        pw = self.pixel
        if not self.memory:
            return ("pixels", (back + 1) * pw - 1, back * pw)
        row, i = divmod(back, self.dilation[0] * self.frame[1])
        assert i < self.span, "a tap between kernel rows"
        if row == 0:
            return ("newest", (i + 1) * pw - 1, i * pw)
        if i == 0:
            return ("line_q", row * pw - 1, (row - 1) * pw)
        k = (row - 1) * (self.span - 1) + i - 1
        return ("older", (k + 1) * pw - 1, k * pw)

    def line_in(self) -> list[Part]:
        """What the memory stores on each pixel, most significant first: the oldest pixel of every kernel row
        but the top one (the bottom row's lowest)."""
        line = self.dilation[0] * self.frame[1]
        return [self.place(row * line + self.span - 1) for row in range(self.kernel[0] - 2, -1, -1)]

    def older_in(self, row: int) -> list[Part]:
        """What the ``older`` registers of kernel row ``row`` (1 the one above the bottom) load on each pixel,
        most significant first: their own newer pixels, then the one leaving ``line_q``."""
        pw, span = self.pixel, self.span
        low = (row - 1) * (span - 1) * pw
        keep = [("older", low + (span - 2) * pw - 1, low)] if span > 2 else []
        return [*keep, ("line_q", row * pw - 1, (row - 1) * pw)]

    @property
    def taps(self) -> list[Part]:
        """The window, most significant first (the last tap first)."""
        return [self.place(b) for b in reversed(self.back)]


@dataclass(frozen=True)
class RegisterStage:
    """A pipeline register on a stream."""

    name: str
    node: str
    source: int
    target: int
    x_ids: np.ndarray
    output: int


Stage = PadStage | WindowStage | RegisterStage


@dataclass
class Netlist:
    """A whole design: signals, element store, table modules, blocks, clocked parts, the output and its latency."""

    top: str
    style: Style = Style.UNROLLED
    signals: list[Signal] = field(default_factory=list)
    modules: dict[str, TableModule] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    valid: ValidPipeline | None = None  # unrolled: the valid pipeline
    stages: list[Stage] = field(default_factory=list)  # streaming: the clocked stages
    beats: list[int] = field(default_factory=lambda: [1])  # beats per sample on each handshake
    last: int = 0  # streaming: the handshake of the output
    out_beats: int = 1
    hosts: list[str] = field(default_factory=list)  # host nodes left to software
    sig: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: a constant
    lsb: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    width: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    value: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # a constant's code
    input_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    input_node: str = "input"
    output_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    output_node: str = "output"
    latency: int = 0
    origin: dict[int, str] = field(default_factory=dict)  # element id -> what writes it, for the bench
    # table modules written inline in their layer modules (hdl.inline), each with what its missing rows drive
    inline: dict[str, DontCares] = field(default_factory=dict)

    # -- the element store ----------------------------------------------------------------------------------

    def _grow(self, sig: np.ndarray, lsb: np.ndarray, width: np.ndarray, value: np.ndarray) -> np.ndarray:
        start = len(self.sig)
        self.sig = np.concatenate([self.sig, sig.astype(np.int64)])
        self.lsb = np.concatenate([self.lsb, lsb.astype(np.int64)])
        self.width = np.concatenate([self.width, width.astype(np.int64)])
        self.value = np.concatenate([self.value, value.astype(np.int64)])
        return np.arange(start, len(self.sig), dtype=np.int64)

    def signal(self, name: str, widths: np.ndarray, *, stage: int, lsb: np.ndarray | None = None) -> np.ndarray:
        """A new signal whose elements have ``widths`` (element 0 at the lowest bits, unless ``lsb`` says where
        each sits); returns the elements' ids."""
        widths = np.asarray(widths, dtype=np.int64).reshape(-1)
        if lsb is None:
            lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        total = int((lsb + widths).max()) if widths.size else 0
        index = len(self.signals)
        ids = self._grow(np.full(widths.size, index), lsb, widths, np.zeros(widths.size, np.int64))
        first = int(ids[0]) if ids.size else len(self.sig)
        self.signals.append(Signal(name, max(total, 1), stage, first, int(widths.size)))
        return ids

    def constants(self, widths: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Constant elements (pad codes)."""
        widths, values = np.asarray(widths, np.int64).reshape(-1), np.asarray(values, np.int64).reshape(-1)
        return self._grow(np.full(widths.size, -1), np.zeros(widths.size, np.int64), widths, values)

    def stage_of(self, ids: np.ndarray) -> np.ndarray:
        """Each element's stage (registers passed); constants count as stage -1 (any stage)."""
        stages = np.array([s.stage for s in self.signals] + [-1], dtype=np.int64)
        return stages[self.sig[ids]]

    def register(self, signal: int, name: str) -> int:
        """A register copying ``signal`` one cycle later; returns the new signal's index."""
        src = self.signals[signal]
        count = src.count
        part = slice(src.first, src.first + count)
        self._grow(np.full(count, len(self.signals)), self.lsb[part], self.width[part], np.zeros(count, np.int64))
        new = Signal(name, src.width, src.stage + 1, len(self.sig) - count, count, source=signal)
        self.signals.append(new)
        return len(self.signals) - 1

    def moved(self, ids: np.ndarray, signal: int, to: int) -> np.ndarray:
        """``ids`` with the elements of ``signal`` replaced by the same elements of signal ``to``."""
        old, new = self.signals[signal], self.signals[to]
        inside = (ids >= old.first) & (ids < old.first + old.count)
        return np.where(inside, ids - old.first + new.first, ids)

    def aligned(self, ids: np.ndarray, stage: int) -> np.ndarray:
        """``ids`` read at ``stage``: elements of earlier stages through delay registers (made once, reused)."""
        ids = np.asarray(ids, dtype=np.int64)
        for index in np.unique(self.sig[ids.reshape(-1)]):
            if index < 0:
                continue
            current = int(index)
            while self.signals[current].stage < stage:
                current = self._delay(current)
            if current != index:
                ids = self.moved(ids, int(index), current)
        return ids

    def _delay(self, signal: int) -> int:
        """The one-cycle delayed copy of ``signal`` (made on first use), named after the signal it delays."""
        for k, s in enumerate(self.signals):
            if s.source == signal:
                return k
        root = signal
        while self.signals[root].source is not None:
            root = self.signals[root].source  # type: ignore[assignment]
        return self.register(signal, f"{self.signals[root].name}_d{self.signals[signal].stage + 1}")

    def describe(self, element: int) -> str:
        """What writes ``element`` (a node, unit and position), through the registers that copy it."""
        index = int(self.sig[element])
        while index >= 0 and self.signals[index].source is not None:
            src = self.signals[index].source
            assert src is not None
            element = element - self.signals[index].first + self.signals[src].first
            index = src
        if index < 0:
            return "a constant"
        return self.origin.get(int(element), f"node '{self.input_node}' element {element - self.signals[index].first}")

    @property
    def registers(self) -> list[Signal]:
        """The signals that are registers, in creation order."""
        return [s for s in self.signals if s.source is not None]

    @property
    def streaming(self) -> bool:
        """Whether the design is a chain of stages between handshakes (else: one valid pipeline)."""
        return self.style is Style.STREAMING

    @property
    def in_beats(self) -> int:
        """Words per input vector."""
        return self.beats[0]

    @property
    def interval(self) -> int:
        """Cycles per vector when nothing stalls: the most words a handshake moves per vector."""
        return max(self.beats)

    @property
    def line_buffers(self) -> int:
        """Bits of the streaming line buffers (in registers or memory)."""
        return sum(s.depth * s.pixel for s in self.stages if isinstance(s, WindowStage))

    @property
    def in_width(self) -> int:
        """Bits of ``in_data``."""
        return self.signals[0].width

    @property
    def out_width(self) -> int:
        """Bits of ``out_data`` (at least 1)."""
        return int(self.width[self.output_ids].sum()) if self.output_ids.size else 1
