"""The adder trees a sum node's HDL is printed from (iotable.hdl.emit's Term, Adding and AdderTree records), run by
a small interpreter of what they mean, bit by bit, over many random sums (negative, zero, power-of-two and large
weights, 1- to 5-bit codes, truncated output widths, any constants): every output equals ``constant + sum(w * x)``
modulo ``2**width`` on every input, every shared sum its exact value, and every record reads only bits that
exist; deep sums split into levels of small trees give their sums too. The branches most likely to go wrong (low
bits that bypass an adder, a negated root, an adder cut below its range) are shown to run."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from iotable.hdl import emit
from iotable.hdl.arithmetic import sum_levels
from iotable.hdl.emit import AdderTree, Adding, Term
from iotable.hdl.netlist import Adder
from iotable.subexpressions import share, signed_bits

# -- the interpreter -------------------------------------------------------------------------------------------


@dataclass
class Wires:
    """The wires of one adder block while it is interpreted: each name's values (one per input row, unsigned, in
    exactly its bits) and its bits; ``x``, the codes, as ``(lsb, bits, values)`` per element (element 0 lowest)."""

    values: dict[str, np.ndarray]
    bits: dict[str, int]
    x: list[tuple[int, int, np.ndarray]]

    @classmethod
    def of(cls, x_widths: list[int], codes: np.ndarray) -> Wires:
        """Port ``x`` of codes of ``x_widths`` bits, ``codes`` a row per input."""
        lsb = np.concatenate([[0], np.cumsum(x_widths)[:-1]]).astype(int).tolist()
        return cls(
            {}, {}, [(low, int(w), codes[:, i].astype(np.int64)) for i, (low, w) in enumerate(zip(lsb, x_widths))]
        )

    def define(self, name: str, value: np.ndarray, bits: int) -> None:
        assert name not in self.values and name != "x", f"wire {name} defined twice"
        assert bits >= 1, f"wire {name} of {bits} bits"
        self.values[name] = value & ((1 << bits) - 1)
        self.bits[name] = bits

    def read(self, term: Term) -> np.ndarray:
        """A term's value: its field (two's complement where ``signed``) times ``2**shift``; the field must lie in
        a defined wire (and, in ``x``, in one code)."""
        assert term.shift >= 0 and term.low <= term.high, term
        if term.source == "x":
            inside = [(lsb, v) for lsb, bits, v in self.x if lsb <= term.low and term.high < lsb + bits]
            assert inside, f"{term} outside every code"
            lsb, value = inside[0]
        else:
            assert term.source in self.values, f"{term} reads a wire not yet defined"
            assert 0 <= term.low and term.high < self.bits[term.source], f"{term} outside {self.bits[term.source]} bits"
            lsb, value = 0, self.values[term.source]
        field = (value >> (term.low - lsb)) & ((1 << term.field_bits) - 1)
        if term.signed:
            field = field - ((field >> (term.field_bits - 1)) << term.field_bits)
        return field << term.shift

    def add(self, adding: Adding) -> None:
        """``a + b`` (or ``a - b``) modulo ``2**sum_bits``, with ``low``'s bits below where it has them."""
        a, b = self.read(adding.a), self.read(adding.b)
        total = a - b if adding.subtract else a + b
        if adding.low is None:
            self.define(adding.name, total, adding.bits)
            return
        assert not adding.low.signed and adding.low.shift == 0, adding
        assert adding.sum_bits >= 1, adding
        low = self.read(adding.low)
        high = (total & ((1 << adding.sum_bits) - 1)) << adding.low.field_bits
        self.define(adding.name, high | low, adding.bits)

    def tree(self, tree: AdderTree) -> np.ndarray:
        """The tree's adders, then its value: the constant plus (or minus) the root, modulo ``2**width``."""
        for adding in tree.adders:
            self.add(adding)
        if tree.root is None:
            return np.full(len(self.x[0][2]), tree.constant) & ((1 << tree.width) - 1)
        root = self.read(tree.root)
        return (tree.constant - root if tree.negated else tree.constant + root) & ((1 << tree.width) - 1)


def interpret(block: Adder, codes: np.ndarray) -> np.ndarray:
    """The outputs of ``block`` on each row of ``codes`` as its records say to compute them; each shared sum is
    checked to hold its exact value."""
    wires = Wires.of([int(w) for w in block.x_widths], codes)
    operands = [codes[:, i].astype(np.int64) for i in range(codes.shape[1])]
    for j, shared in enumerate(block.shared):
        value = wires.tree(emit.shared_tree(block, j))
        wires.define(emit.shared_name(j), value, shared.width)
        exact = sum(w * operands[t] for t, w in zip(shared.terms, shared.weights))
        assert np.array_equal(wires.read(Term(emit.shared_name(j), shared.width - 1, 0, shared.signed)), exact)
        operands.append(exact)
    return np.stack([wires.tree(emit.adder_tree(block, k)) for k in range(len(block.terms))], axis=1)


# -- random sums -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sums:
    """Sums ``constants[k] + sum(w * x[i] for i, w in terms[k])`` of codes of ``x_widths`` bits, output ``k``
    wanted modulo ``2**widths[k]``."""

    terms: list[list[tuple[int, int]]]
    constants: list[int]
    x_widths: list[int]
    widths: list[int]

    def block(self) -> Adder:
        """The adder block of these sums, built as :func:`~iotable.hdl.arithmetic.add_adder` builds it."""
        form = share(self.terms, self.constants, [(1 << b) - 1 for b in self.x_widths])
        count = len(self.x_widths)
        return Adder("sums", "sums", np.arange(count), np.asarray(self.x_widths, np.int64),
                     [list(t) for t in form.terms], [list(w) for w in form.weights], list(form.constants),
                     np.asarray(self.widths, np.int64), 0, shared=form.shared)  # fmt: skip

    def exact(self, codes: np.ndarray) -> np.ndarray:
        rows = [c + sum((w * codes[:, i].astype(np.int64) for i, w in row), np.zeros(len(codes), np.int64))
                for row, c in zip(self.terms, self.constants)]  # fmt: skip
        return np.stack(rows, axis=1) & ((1 << np.asarray(self.widths, np.int64)) - 1)


def weight(rng: np.random.Generator) -> int:
    """A weight: zero, a small one, a power of two or its negative, a run of ones, or a large one."""
    kind = rng.integers(6)
    sign = 1 if rng.integers(2) else -1
    if kind == 0:
        return 0
    if kind == 1:
        return int(rng.integers(-8, 9))
    if kind == 2:
        return sign << int(rng.integers(0, 12))
    if kind == 3:
        return sign * ((1 << int(rng.integers(2, 9))) - 1)
    if kind == 4:
        return int(rng.integers(-(2**16), 2**16))
    return sign * int(rng.integers(1, 64))


def random_sums(seed: int) -> Sums:
    """2 to 6 outputs over 1 to 6 codes of 1 to 5 bits (some read twice, some columns repeated), output widths
    from 1 bit to a few above the exact range, constants anywhere."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 7))
    x_widths = rng.integers(1, 6, size=count).tolist()
    outputs = int(rng.integers(2, 7))
    terms: list[list[tuple[int, int]]] = []
    for _ in range(outputs):
        if terms and rng.integers(3) == 0:  # the same weights again, scaled: much to share
            scale = [1, 2, -1, -4, 3][int(rng.integers(5))]
            terms.append([(i, scale * w) for i, w in terms[int(rng.integers(len(terms)))]])
            continue
        chosen = rng.integers(0, count, size=int(rng.integers(1, 7))).tolist()
        terms.append([(int(i), weight(rng)) for i in chosen])
    widths = []
    for row in terms:
        top = [(1 << x_widths[i]) - 1 for i, _ in row]
        low = sum(min(0, w * t) for (_, w), t in zip(row, top))
        high = sum(max(0, w * t) for (_, w), t in zip(row, top))
        full = max((high - low).bit_length(), 1)
        widths.append(int(rng.integers(1, full + 3)))
    constants = [int(rng.integers(-(2**20), 2**20)) if rng.integers(2) else int(rng.integers(-4, 5)) for _ in terms]
    return Sums(terms, constants, [int(b) for b in x_widths], widths)


def inputs(x_widths: list[int], seed: int, limit: int = 4096) -> np.ndarray:
    """Every input where there are at most ``limit``, else ``limit`` random ones (with the all-zero and all-ones
    rows)."""
    tops = [1 << b for b in x_widths]
    if math.prod(tops) <= limit:
        return np.array(list(itertools.product(*[range(t) for t in tops])), np.int64).reshape(-1, len(tops))
    rng = np.random.default_rng(seed)
    rows = np.stack([rng.integers(0, t, size=limit) for t in tops], axis=1)
    return np.concatenate([rows, np.zeros((1, len(tops)), np.int64), np.array([tops]) - 1])


# -- coverage of the branches ----------------------------------------------------------------------------------


class Branches:
    """Counts of the branches of the trees' construction that ran: low bits bypassing an adder, a negated root, an
    adder cut below its exact bits (its result then unsigned), a subtraction."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def join(self, original: Callable[..., tuple[Any, Adding]]) -> Callable[..., tuple[Any, Adding]]:
        """``emit._join``, counting."""

        def counted(a: Any, b: Any, name: str, width: int) -> tuple[Any, Adding]:
            value, adding = original(a, b, name, width)
            shift = value.term.shift
            if value.term.field_bits < signed_bits(value.low >> shift, value.high >> shift):
                self.counts["truncated"] += 1
                if value.low < 0:
                    self.counts["truncated signed"] += 1
            self.counts["bypass"] += adding.low is not None
            self.counts["subtract"] += adding.subtract
            self.counts["bypass subtract"] += adding.low is not None and adding.subtract
            return value, adding

        return counted

    def counted(self, original: Callable[[Adder, int], AdderTree], what: str) -> Callable[[Adder, int], AdderTree]:
        """``emit.adder_tree`` or ``emit.shared_tree`` (``what``), counting."""

        def counted(block: Adder, k: int) -> AdderTree:
            tree = original(block, k)
            self.counts[what] += 1
            self.counts["negated"] += tree.negated
            self.counts["negated constant"] += tree.negated and tree.constant != 0
            return tree

        return counted


@pytest.fixture
def branches(monkeypatch: pytest.MonkeyPatch) -> Branches:
    seen = Branches()
    monkeypatch.setattr(emit, "_join", seen.join(emit._join))
    monkeypatch.setattr(emit, "adder_tree", seen.counted(emit.adder_tree, "output"))
    monkeypatch.setattr(emit, "shared_tree", seen.counted(emit.shared_tree, "shared"))
    return seen


# -- the tests -------------------------------------------------------------------------------------------------

SEEDS = range(300)


def test_random_adder_trees_compute_their_sums(branches: Branches) -> None:
    """Over 300 random sums, the records' outputs equal the sums modulo their widths on every input (or 4,096
    random ones), and the bypass, negated-root and truncated branches each run many times."""
    for seed in SEEDS:
        sums = random_sums(seed)
        codes = inputs(sums.x_widths, seed)
        got = interpret(sums.block(), codes)
        assert np.array_equal(got, sums.exact(codes)), f"seed {seed}: {sums}"
    counts = branches.counts
    for branch in (
        "shared",
        "bypass",
        "bypass subtract",
        "negated",
        "negated constant",
        "truncated",
        "truncated signed",
    ):
        assert counts[branch] >= 20, dict(counts)


CASES = {  # one sum that takes each branch: (terms, constants, x_widths, widths, the branch)
    "bypass": ([[(0, 1), (1, 4)]], [0], [4, 3], [6], "bypass"),  # x0 + (x1 << 2): x0's low 2 bits pass by
    "bypass signed": ([[(0, 1), (1, -2), (2, 8)], [(0, 1), (1, -2)]], [0, 40], [4, 4, 2], [7, 7], "bypass"),
    "negated": ([[(0, -1), (1, -2)]], [9], [2, 2], [4], "negated"),  # 9 - (x0 + 2 x1)
    "truncated": ([[(0, 64), (1, -64), (2, 1)]], [5], [3, 3, 2], [3], "truncated"),  # wanted modulo 8 only
    "truncated to one bit": ([[(0, 1 << 9), (1, 3)]], [0], [2, 2], [4], "truncated"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_branch_runs_on_a_case_made_for_it(branches: Branches, case: str) -> None:
    """A sum made to take one branch takes it, and its outputs equal the sums on every input."""
    terms, constants, x_widths, widths, branch = CASES[case]
    sums = Sums(terms, constants, x_widths, widths)
    codes = inputs(x_widths, 0)
    assert np.array_equal(interpret(sums.block(), codes), sums.exact(codes))
    assert branches.counts[branch] >= 1, dict(branches.counts)


def test_the_interpreter_catches_a_wrong_bypass() -> None:
    """Tamper: the bypassed low bits taken one bit too high makes the outputs differ from the sums."""
    sums = Sums(*CASES["bypass"][:4])
    block = sums.block()
    codes = inputs(sums.x_widths, 0)
    tree = emit.adder_tree(block, 0)
    adding = next(a for a in tree.adders if a.low is not None)
    moved = replace(adding, low=replace(adding.low, high=adding.low.high + 1, low=adding.low.low + 1))
    wrong = replace(tree, adders=[moved if a is adding else a for a in tree.adders])
    wires = Wires.of(sums.x_widths, codes)
    assert not np.array_equal(wires.tree(wrong), sums.exact(codes)[:, 0])


TAMPERS = {  # what is changed in the records, and the words of the interpreter's complaint
    "negated": "differ",  # the second output's root added rather than subtracted
    "signed": "differ",  # the first output's signed operands read as unsigned
    "width": "outside",  # the first output's adders one bit narrower: the root reads a bit that is not there
}


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_the_interpreter_catches_a_wrong_record(what: str) -> None:
    """Tamper: a root's sign flipped, a signed operand read as unsigned, or an adder one bit narrower is caught
    (outputs that differ from the sums, or a read beyond a wire)."""
    sums = Sums(*CASES["bypass signed"][:4])
    block = sums.block()
    codes = inputs(sums.x_widths, 0)
    trees = [emit.adder_tree(block, k) for k in range(len(block.terms))]
    if what == "negated":
        trees[1] = replace(trees[1], negated=not trees[1].negated)
    elif what == "signed":
        assert any(a.a.signed or a.b.signed for a in trees[0].adders)
        trees[0] = replace(trees[0], adders=[replace(a, a=replace(a.a, signed=False), b=replace(a.b, signed=False))
                                             for a in trees[0].adders])  # fmt: skip
    else:
        trees[0] = replace(trees[0], adders=[replace(a, bits=a.bits - 1) for a in trees[0].adders])
    wires = Wires.of(sums.x_widths, codes)
    for j, shared in enumerate(block.shared):
        wires.define(emit.shared_name(j), wires.tree(emit.shared_tree(block, j)), shared.width)
    with pytest.raises(AssertionError, match=TAMPERS[what]):
        got = np.stack([wires.tree(t) for t in trees], axis=1)
        assert np.array_equal(got, sums.exact(codes)), "outputs differ from the sums"


def through_levels(sums: Sums, codes: np.ndarray, group: int, *, lows: bool = True) -> np.ndarray:
    """The outputs of ``sums`` split into levels of trees of at most ``group`` terms
    (:func:`~iotable.hdl.arithmetic.sum_levels`), each level's block interpreted on the outputs of the one before
    (``lows``: False drops the lows the partial sums leave out from the last level's constants)."""
    levels = sum_levels(sums.terms, sums.constants, np.asarray(sums.x_widths), sums.widths, group)
    if not lows:
        levels[-1] = replace(levels[-1], constants=list(sums.constants))
    operands, widths = codes, list(sums.x_widths)
    for level in levels:
        rows = [list(zip(t, w)) for t, w in zip(level.terms, level.weights)]
        block = Sums(rows, level.constants, widths, level.widths).block()
        outputs = interpret(block, operands) if level.terms else np.zeros((len(codes), 0), np.int64)
        operands = np.concatenate([operands[:, level.keep], outputs], axis=1)
        widths = [widths[i] for i in level.keep] + list(level.widths)
    return operands


def deep_sums(seed: int) -> tuple[Sums, int]:
    """1 to 3 sums of up to 30 terms over 3 to 30 codes of 1 to 3 bits, and a tree size from 2 to 16."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(3, 31))
    x_widths = [int(b) for b in rng.integers(1, 4, size=count)]
    terms = [
        [(int(i), weight(rng)) for i in rng.integers(0, count, size=int(rng.integers(1, 31)))]
        for _ in range(int(rng.integers(1, 4)))
    ]
    widths = []
    for row in terms:
        spread = sum(abs(w) * ((1 << x_widths[i]) - 1) for i, w in row)
        widths.append(int(rng.integers(1, max(spread.bit_length(), 1) + 2)))
    constants = [int(rng.integers(-1000, 1000)) for _ in terms]
    return Sums(terms, constants, x_widths, widths), int(rng.choice([2, 3, 4, 16]))


def test_deep_sums_split_into_levels_compute_their_sums() -> None:
    """Over 150 random deep sums split into levels of small trees (partial sums cut to the outputs' bits), the
    levels' blocks, interpreted one after another, give the sums modulo their widths on 300 random inputs."""
    for seed in range(150):
        sums, group = deep_sums(seed)
        codes = inputs(sums.x_widths, seed, limit=300)
        assert np.array_equal(through_levels(sums, codes, group), sums.exact(codes)), f"seed {seed}: {sums}"


def test_levels_without_their_lows_differ() -> None:
    """Tamper: the last level's constant without the lows its partial sums left out gives other outputs."""
    sums, group = deep_sums(0)
    codes = inputs(sums.x_widths, 0, limit=300)
    assert len(sum_levels(sums.terms, sums.constants, np.asarray(sums.x_widths), sums.widths, group)) > 1
    assert not np.array_equal(through_levels(sums, codes, group, lows=False), sums.exact(codes))
