"""Self-checking testbenches of a whole design, in no language: what a bench drives and checks (a
:class:`BenchPlan`, which the printers write), and the hex words of its input and output vectors.

A bench reads ``<top>_inputs.hex`` (one input word ``in_data`` per line) and ``<top>_expected.hex`` (one
output word ``out_data`` per line), in hexadecimal, zero-padded on the left to whole hex digits. It drives the
top module through its valid/ready handshake with a clock of 10 time units, holding ``in_valid`` low one
cycle in 7 and ``out_ready`` low one cycle in 5 so that stalls are exercised, and compares every output it
takes with the next expected word. It prints ``N/N vectors match`` and exits with status 0, or prints the
first mismatch, ``mismatch at vector V: output element E (node 'NAME' unit U position P) expected B got B``
(codes in binary), and stops with a non-zero exit status. A streaming design takes a vector as several input
words and gives ``beats`` output words per vector (one per position): the bench counts vectors, and a mismatch
names the vector and the position (``mismatch at vector V position P: ...``). A *printing* bench (what
:func:`iotable.hdl.simulate` runs) writes every output word in hexadecimal instead of comparing. Either writes
its words, its first mismatch or timeout and its verdict (``pass N/N`` and the run's nonce, or ``fail G/N``)
to its results file ``<top>_tb_results.txt`` (:mod:`.results`), which is what
:func:`~iotable.hdl.simulate_files` judges by.

With a ``backpressure`` seed, the bench is a *random backpressure* bench instead: every cycle a 32-bit
xorshift generator (:func:`noise_state` from the seed, the same sequence in both languages) draws whether
``in_valid`` rises (it then stays high, its word unchanged, until taken) and whether ``out_ready`` is high;
and after an edge where ``out_valid`` was high and ``out_ready`` low, ``out_valid`` and ``out_data`` must be
unchanged, else the bench fails with ``output not held at cycle C``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..bits import digits as binary_digits
from .table import lines

__all__ = ["BenchPlan", "Check", "bench_plan", "noise_state", "parse_words", "vector_files", "words"]

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def words(codes: np.ndarray, widths: np.ndarray) -> str:
    """One hexadecimal word per row of ``codes`` ``(N, elements)``: element i at bits ``[offset_i +: width_i]``
    (element 0 lowest), zero-padded on the left to whole hex digits; one line each. Vectorized."""
    n = codes.shape[0]
    bits = binary_digits(np.ascontiguousarray(codes[:, ::-1]), [int(w) for w in widths[::-1]])  # most significant first
    total = bits.shape[1]
    digits = -(-total // 4)
    padded = np.zeros((n, 4 * digits), dtype=np.uint8)
    padded[:, 4 * digits - total :] = bits
    nibbles = padded.reshape(n, digits, 4) @ np.array([8, 4, 2, 1], dtype=np.uint8)
    return lines([_HEX[nibbles], "\n"], n)


def parse_words(text: str, widths: np.ndarray, *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The codes ``(N, elements)`` of hex words (one a line, as :func:`words` writes them), and a mask of the
    elements holding bits that are not 0 or 1 (``x``, ``z``, ``-``, ``u``), whose codes read as 0."""
    lines = [line.strip().lower() for line in text.splitlines() if line.strip()]
    total = int(widths.sum())
    digits = -(-total // 4)
    if not lines:
        return np.zeros((0, len(widths)), np.int64), np.zeros((0, len(widths)), bool)
    raw = np.frombuffer("".join(line[-digits:].rjust(digits, "0") for line in lines).encode("ascii"), np.uint8)
    raw = raw.reshape(len(lines), digits)
    lookup = np.full(256, 255, dtype=np.uint8)
    lookup[_HEX] = np.arange(16, dtype=np.uint8)
    nibbles = lookup[raw]
    unknown_nibble = nibbles == 255
    bits = ((np.where(unknown_nibble, 0, nibbles)[..., None] >> np.array([3, 2, 1, 0], np.uint8)) & 1).reshape(
        len(lines), -1
    )
    unknown_bits = np.repeat(unknown_nibble, 4, axis=1)
    bits, unknown_bits = bits[:, 4 * digits - total :], unknown_bits[:, 4 * digits - total :]
    # Fields most significant first: the last element first.
    ends = np.cumsum(widths[::-1])
    starts = ends - widths[::-1]
    codes = np.zeros((len(lines), len(widths)), dtype=np.int64)
    unknown = np.zeros((len(lines), len(widths)), dtype=bool)
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):  # a loop over fields, not rows
        place = 1 << np.arange(b - a - 1, -1, -1, dtype=np.int64)
        codes[:, len(widths) - 1 - k] = bits[:, a:b].astype(np.int64) @ place
        unknown[:, len(widths) - 1 - k] = unknown_bits[:, a:b].any(axis=1)
    del what
    return codes, unknown


def _fields(widths: np.ndarray) -> list[tuple[int, int]]:
    """``(high, low)`` bits of each element (element 0 lowest)."""
    lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    return [(int(lo + w - 1), int(lo)) for lo, w in zip(lsb.tolist(), widths.tolist())]


@dataclass(frozen=True)
class Check:
    """An output element a checking bench compares: bits ``high..low`` of ``out_data``, and where it comes
    from in words (the node, unit and position; the printer escapes it)."""

    high: int
    low: int
    where: str


@dataclass(frozen=True)
class BenchPlan:
    """What the bench of ``top`` does: ``vectors`` samples of ``beats`` output words each (1 unless
    streaming), ``inputs`` input words of ``in_width`` bits, output words of ``out_width`` bits, at best one
    sample every ``interval`` cycles; a checking bench compares ``checks``, a printing one prints every word."""

    top: str
    vectors: int
    inputs: int
    beats: int
    interval: int
    in_width: int
    out_width: int
    checks: tuple[Check, ...]
    printing: bool
    backpressure: int | None = None  # a seed: random in_valid and out_ready, outputs not taken checked held

    @property
    def notes(self) -> tuple[str, ...]:
        """What the bench's header says besides what it reads and writes."""
        if self.backpressure is None:
            return ()
        return (f"Random backpressure (seed {self.backpressure}): outputs not taken must be held.",)

    @property
    def noise(self) -> int:
        """The random backpressure generator's first state (nonzero)."""
        return noise_state(self.backpressure or 0)

    @property
    def outputs(self) -> int:
        """Output words the bench waits for."""
        return self.vectors * self.beats

    @property
    def limit(self) -> int:
        """Cycles after which the bench gives up."""
        # Stalls: the bench holds in_valid low one cycle in 7 and out_ready one in 5 (or each half the time).
        return (8 if self.backpressure is None else 16) * self.vectors * max(
            self.interval, self.beats, self.inputs // max(self.vectors, 1)
        ) + 1000

    @property
    def in_word(self) -> int:
        """Bits of an input word as the bench reads it, whole hex digits."""
        return 4 * -(-self.in_width // 4)

    @property
    def out_word(self) -> int:
        """Bits of an output word as the bench reads it, whole hex digits."""
        return 4 * -(-self.out_width // 4)

    @property
    def inputs_file(self) -> str:
        return f"{self.top}_inputs.hex"

    @property
    def expected_file(self) -> str:
        return f"{self.top}_expected.hex"


def noise_state(seed: int) -> int:
    """The first state of the benches' 32-bit xorshift generator for ``seed`` (never 0, which would stay 0)."""
    return (int(seed) * 0x9E3779B1 + 0x7F4A7C15) % (1 << 32) or 1


def bench_plan(
    top: str,
    inputs: np.ndarray,
    in_widths: np.ndarray,
    out_widths: np.ndarray,
    origins: list[str],
    *,
    printing: bool,
    vectors: int | None = None,
    beats: int = 1,
    interval: int = 1,
    backpressure: int | None = None,
) -> BenchPlan:
    """The plan of the bench of ``top``: ``inputs`` holds one input word per row; a streaming design takes
    ``vectors`` samples as several words each and gives ``beats`` output words per sample, one every
    ``interval`` cycles at best. ``origins``: where each output element comes from, in words. ``backpressure``:
    a seed for random ``in_valid`` and ``out_ready`` every cycle (else the fixed stalls)."""
    checks = tuple(Check(hi, lo, where) for (hi, lo), where in zip(_fields(out_widths), origins))
    count = vectors if vectors is not None else inputs.shape[0]
    inw, outw = int(in_widths.sum()), int(out_widths.sum())
    return BenchPlan(top, count, inputs.shape[0], beats, interval, inw, outw, checks, printing, backpressure)


def vector_files(
    plan: BenchPlan, inputs: np.ndarray, in_widths: np.ndarray, out_widths: np.ndarray, expected: np.ndarray | None
) -> dict[str, str]:
    """The bench's vector files: the input words, and with ``expected``, the expected output words."""
    files = {plan.inputs_file: words(inputs, in_widths)}
    if expected is not None:
        files[plan.expected_file] = words(expected, out_widths)
    return files
