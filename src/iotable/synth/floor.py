"""Mapping effort: one ABC run per table (``"fast"``), or many and the smallest checked netlist kept (``"floor"``).

ABC's LUT count depends on the netlist it is handed: ``collapse`` builds each output's BDD in the order of the
inputs it reads, and the same 12-input table maps to 144 or 231 LUT4 depending on that order. One mapping is a
sample; ``effort="floor"`` maps each table several ways, every input order of :data:`ORDERS` under every
script (the one asked for, then :data:`FLOOR_SCRIPTS`), checks each netlist on every care row of the table,
and keeps the smallest (fewest LUTs, then least depth, then the first attempt).

An input order is a permutation of the table's address bits: the truth table is written to ABC with its
columns permuted and each column still named by its address bit (``x<input>_<bit>``), so ABC's netlist reads
the table's own bit names and is checked against the original table unchanged; its ``.inputs`` line is put
back in the table's order (:func:`canonical_inputs`). The orders are fixed, so a floor is reproducible:

- ``given``: the table's address bits, most significant first (the order ``"fast"`` maps in);
- ``reversed``: least significant first;
- ``influence``: the bits that change the function on the most addresses first (ties in the given order);
- ``seed0`` ... ``seed2``: permutations drawn by numpy's generator from those seeds.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import numpy as np

from ..errors import SynthError
from ..lutnet import BitFunction
from .blif import blif_text, fill_dont_cares

__all__ = [
    "FLOOR_SCRIPTS",
    "ORDERS",
    "Effort",
    "attempt_name",
    "canonical_inputs",
    "check_effort",
    "effort_flow",
    "floor_attempts",
    "floor_script",
    "floor_strategies",
    "is_floor",
    "order_of",
    "permuted_blif",
]


class Effort(enum.Enum):
    """How hard :func:`~iotable.synth.map_luts` looks for a small netlist."""

    FAST = "fast"
    FLOOR = "floor"


#: The input orders a floor tries (see the module docstring), the given one first.
ORDERS = ("given", "reversed", "influence", "seed0", "seed1", "seed2")

#: The scripts a floor tries after the one asked for: structural choices (``dch``), area-oriented mapping
#: (``if -a``), and the mapped netlist resynthesised with its don't-cares (``mfs2``) and its LUTs repacked
#: (``lutpack``). On 12-input quantized-neuron tables the repacking saves 1-10% of LUT4 at 3-5x the time.
FLOOR_SCRIPTS = (
    "collapse; muxes; strash; if -K {k} -a",
    "collapse; muxes; strash; if -K {k}; mfs2; lutpack",
    "collapse; muxes; strash; dch; if -K {k}; mfs2; lutpack",
)

# Part of a floor's cache key (its ``script``): bump when the orders or the choice of the winner change.
_FLOOR_PREFIX = "floor/1"


def check_effort(effort: Any, *, what: str) -> Effort:
    """``effort`` as an :class:`Effort`: ``"fast"`` or ``"floor"``."""
    try:
        return Effort(effort)
    except ValueError:
        accepted = ", ".join(repr(e.value) for e in Effort)
        msg = (
            f"{what}: effort must be one of {accepted}, received {effort!r}; 'fast' maps each table once with the "
            "script, 'floor' maps it several ways and keeps the smallest checked netlist"
        )
        raise SynthError(msg) from None


def effort_flow(effort: Effort, script: str, k: int) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a result of ``effort`` records as its script (and its cache key holds), and the attempts a worker
    makes: ``script`` and none for ``"fast"``; :func:`floor_script` and :func:`floor_attempts` for a floor."""
    if effort is Effort.FAST:
        return script, ()
    return floor_script(script, k), floor_attempts(script, k)


def floor_attempts(script: str, k: int) -> tuple[tuple[str, str], ...]:
    """Every ``(order, script)`` a floor tries, the given order under ``script`` (what ``"fast"`` maps) first."""
    scripts = [script] + [s.replace("{k}", str(k)) for s in FLOOR_SCRIPTS if s.replace("{k}", str(k)) != script]
    return tuple((order, s) for s in scripts for order in ORDERS)


def floor_script(script: str, k: int) -> str:
    """What a floor's result records as its script (and its cache key holds): every attempt, in order."""
    scripts = dict.fromkeys(s for _, s in floor_attempts(script, k))
    return f"{_FLOOR_PREFIX} orders {','.join(ORDERS)}; scripts " + " | ".join(scripts)


def floor_strategies(script: str, k: int, input_bits: int) -> set[str]:
    """The strategies a floor recorded as ``script`` (:func:`floor_script`) may name for a function of
    ``input_bits`` address bits: one per attempt, or ``"direct"`` for at most k bits (no ABC)."""
    if input_bits <= k:
        return {"direct"}
    base = script.split("; scripts ", 1)[1].split(" | ", 1)[0]  # a script holds no '|' (resolve_script)
    return {attempt_name(*a) for a in floor_attempts(base, k)}


def is_floor(script: str) -> bool:
    """Whether ``script`` is a floor's (:func:`floor_script`), not one ABC script."""
    return script.startswith(_FLOOR_PREFIX + " ")


def attempt_name(order: str, script: str) -> str:
    """How a result names the attempt that won (its ``strategy``)."""
    return f"{order} order: {script}"


def order_of(name: str, values: np.ndarray, care: np.ndarray) -> list[int]:
    """The address bits (0 the most significant) in the order ``name`` (one of :data:`ORDERS`) gives, for the
    function ``values`` (output bits x addresses) with care mask ``care``."""
    n = int(values.shape[1]).bit_length() - 1
    if name == "given":
        return list(range(n))
    if name == "reversed":
        return list(range(n - 1, -1, -1))
    if name == "influence":
        cube = values.reshape(values.shape[0], *([2] * n))
        cared = care.reshape([2] * n)
        influence = []
        for i in range(n):  # on how many care pairs flipping bit i changes an output
            changed = (np.take(cube, 0, axis=1 + i) != np.take(cube, 1, axis=1 + i)).any(axis=0)
            influence.append(int((changed & np.take(cared, 0, axis=i) & np.take(cared, 1, axis=i)).sum()))
        return sorted(range(n), key=lambda i: (-influence[i], i))
    seed = int(name.removeprefix("seed"))
    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def permuted_blif(fn: BitFunction, values: np.ndarray, care: np.ndarray, order: list[int]) -> bytes:
    """The BLIF of ``fn`` (``values`` and ``care`` from :meth:`BitFunction.truth`) with its address bits in
    ``order``, each still named by its bit; don't-cares filled in that order (the fill follows the BDD's)."""
    n = fn.input_bits
    axes = [1 + i for i in order]
    values = values.reshape(values.shape[0], *([2] * n)).transpose(0, *axes).reshape(values.shape[0], -1)
    care = care.reshape([2] * n).transpose(*order).reshape(-1) if n else care
    if not care.all():
        values = fill_dont_cares(values, care)
    names = fn.input_names()
    return blif_text(fn, np.ascontiguousarray(values), inputs=[names[i] for i in order])


_INPUTS = re.compile(r"^\.inputs(?:[^\n]*\\\n)*[^\n]*\n?", re.MULTILINE)


def canonical_inputs(text: str, fn: BitFunction) -> str:
    """ABC's netlist ``text`` with its ``.inputs`` line in ``fn``'s address order (the order it was handed to
    ABC in is undone; the names, and so the netlist, are unchanged)."""
    found = _INPUTS.search(text)
    if found is None:
        return text
    held = set(found.group().replace("\\\n", " ").split()[1:])
    line = " ".join([".inputs", *(name for name in fn.input_names() if name in held)]) + "\n"
    return text[: found.start()] + line + text[found.end() :]
