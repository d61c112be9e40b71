"""Arithmetic nodes mapped onto k-input LUTs by ABC, each netlist checked against the node kind's kernel
(:func:`map_arithmetic`, run by :func:`iotable.synth.cost` for a network; :func:`check_arithmetic`).

Each live output of a ``sum``, ``argmax`` or ``threshold`` node is a function of the codes it reads
(:class:`~iotable.synth.arith.ArithFunction`); each distinct function's logic (:mod:`.arithlogic`:
ripple-carry adders, comparators and multiplexers, generated here, not by a synthesis tool) is mapped by ABC
with the pinned :data:`ARITH_SCRIPT`, and the netlist ABC writes is evaluated on input codes and compared with
the kernel's outputs: on every combination of codes where the inputs have at most :data:`EXHAUSTIVE_BITS` bits,
on :data:`RANDOM_VECTORS` random combinations (and the all-lowest and all-highest codes) otherwise. Results are
cached as tables' are (:class:`~iotable.synth.cache.Cache`: one JSON record per function and flow, checked
again when read) and held by the network (``net.luts``; a bundle stores only its tables' results).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from .. import bits
from ..errors import CacheError, IOTableError, IOTableWarning, NetlistMismatchError
from ..lutcount import check_k
from ..lutnet import RECORD_FORMAT, LutNetlist, LutResult, pack_rows, result_name
from ..network.network import TableNetwork
from .abcrun import abc_version, find_abc, resolve_script, run_abc
from .arith import ArithFunction, arithmetic_nodes, cost_record, function_blif, live_outputs, node_functions
from .cache import Cache, _unused
from .inputs import DEFAULT_TIMEOUT, check_timeout
from .records import ArithmeticCost

__all__ = ["ARITH_SCRIPT", "EXHAUSTIVE_BITS", "RANDOM_VECTORS", "check_arithmetic", "map_arithmetic", "map_function"]

#: The ABC commands that map arithmetic logic (``{k}``: the LUT inputs): structural choices, then LUT mapping
#: and a resynthesis of the LUTs. Measured against the tables' script (which collapses the function to BDDs,
#: impossible over 256 inputs) and others in docs/hardware.md, "The cost of arithmetic".
ARITH_SCRIPT = "strash; dch; if -K {k}; mfs2"
#: A function of at most this many input bits is checked on every combination of its input codes.
EXHAUSTIVE_BITS = 16
#: A wider one on this many random combinations (and the all-lowest and all-highest codes).
RANDOM_VECTORS = 4096
# ABC maps up to this many functions in one session.
_BATCH = 32


def _vectors(fn: ArithFunction) -> np.ndarray:
    """Input codes to check ``fn`` on, ``(rows, inputs)``: every combination, or random ones and the corners."""
    radices = np.asarray(fn.radices, np.int64)
    if not len(radices):  # a constant: one row of no codes
        return np.zeros((1, 0), np.int64)
    if fn.input_bits <= EXHAUSTIVE_BITS:
        grids = np.meshgrid(*[np.arange(r) for r in radices], indexing="ij")
        return np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.int64)
    rng = np.random.default_rng(int(fn.key()[:16], 16))
    drawn = rng.integers(0, radices, size=(RANDOM_VECTORS, len(radices)))
    return np.concatenate([np.zeros((1, len(radices)), np.int64), radices[None] - 1, drawn]).astype(np.int64)


def check_arithmetic(netlist: LutNetlist, fn: ArithFunction, *, name: str, k: int | None = None) -> None:
    """Raise :class:`NetlistMismatchError` unless ``netlist`` computes ``fn`` (see the module: every input
    combination, or random ones), compared with the node kind's kernel; with ``k``, also refuse a node of more
    than ``k`` inputs. ``name`` names the node's output in the message."""
    inputs, outputs = fn.input_names(), fn.output_names()
    if set(netlist.inputs) - set(inputs) or list(netlist.outputs) != outputs:
        msg = (
            f"{name}: the mapped netlist has inputs {list(netlist.inputs)[:8]} and outputs {list(netlist.outputs)}; "
            f"expected inputs among x<input>_<bit> of {len(fn.radices)} inputs and outputs {outputs}"
        )
        raise NetlistMismatchError(msg)
    if k is not None and netlist.max_fan_in > k:
        msg = f"{name}: the mapped netlist has a node of {netlist.max_fan_in} inputs; expected LUTs of at most {k}"
        raise NetlistMismatchError(msg)
    codes = _vectors(fn)
    expected = fn.reference(codes)
    words = -(-len(codes) // 64)
    digits = bits.digits(codes, list(fn.widths))  # (rows, input bits), most significant first
    patterns = pack_rows(digits.T.astype(np.uint8), words)
    got_bits = netlist.simulate({n: patterns[i] for i, n in enumerate(inputs) if n in netlist.inputs})
    rows = np.arange(len(codes))
    got = np.zeros(len(codes), np.int64)
    for out in outputs:  # most significant first
        word = got_bits[out][rows // 64]
        got = (got << 1) | ((word >> (rows % 64).astype(np.uint64)) & np.uint64(1)).astype(np.int64)
    wrong = np.flatnonzero(got != expected % (1 << fn.output_width))
    if wrong.size:
        row = int(wrong[0])
        how = "every combination" if fn.input_bits <= EXHAUSTIVE_BITS else f"{len(codes)} combinations"
        msg = (
            f"{name}: the mapped LUT netlist does not compute the {fn.kind}: input codes {tuple(codes[row].tolist())} "
            f"give the output code {int(got[row])}, the node's kernel {int(expected[row])} ({wrong.size} of "
            f"{how} differ); the mapper produced a wrong netlist (report it with the node)"
        )
        raise NetlistMismatchError(msg)


def map_function(
    fn: ArithFunction,
    *,
    k: int = 6,
    abc: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> LutResult:
    """Map one arithmetic function onto k-input LUTs with ABC (:data:`ARITH_SCRIPT`) and check the netlist
    against the node kind's kernel (:func:`check_arithmetic`); what :func:`iotable.synth.cost` does for each
    distinct output of a network's arithmetic nodes, without a network or a cache.

    Raises:
        SynthError: a bad k or timeout.
        ABCNotInstalledError: no ABC program (install the Debian package ``berkeley-abc``).
        NetlistMismatchError: the netlist does not compute the function.

    Example:
        >>> popcount = ArithFunction("sum", (2,) * 8, 4, weights=(1,) * 8)
        >>> result = map_function(popcount)
        >>> result.method, result.luts > 0, result.input_bits
        ('arith', True, 8)
    """
    what = "map_function"
    k = check_k(k, what=what)
    timeout = check_timeout(timeout, what=what)
    program = find_abc(abc, what=what)
    version = abc_version(program)
    script = resolve_script(ARITH_SCRIPT, k, what=what)
    name = f"the {fn.kind} of {len(fn.radices)} input(s)"
    ((text, seconds),) = run_abc(program, [function_blif(fn).encode()], script, timeout=timeout, names=[name])
    netlist = LutNetlist.from_blif(text, what=f"{name}: ABC's netlist")
    check_arithmetic(netlist, fn, name=name, k=k)
    return LutResult.from_record(_record(fn, k, script, version, text, seconds), netlist)


def _record(fn: ArithFunction, k: int, script: str, version: str, text: str, seconds: float) -> dict[str, Any]:
    netlist = LutNetlist.from_blif(text)
    return {
        "format": RECORD_FORMAT,
        "key": fn.key(),
        "k": k,
        "script": script,
        "abc_version": version,
        "input_bits": fn.input_bits,
        "output_bits": fn.output_bits,
        "method": "arith",
        "luts": netlist.luts,
        "depth": netlist.depth,
        "seconds": round(seconds, 4),
        "blif": text,
    }


def _from_cache(record: dict[str, Any], fn: ArithFunction, file: str, where: str, name: str, k: int) -> LutNetlist:
    """The netlist of a cached record for ``fn``, every field checked (as :func:`.cache.checked_record` does
    for a table); :class:`CacheError` naming the file otherwise."""
    expected = {"format": RECORD_FORMAT, "key": fn.key(), "k": k, "method": "arith"}
    expected |= {"input_bits": fn.input_bits, "output_bits": fn.output_bits}
    for field, value in expected.items():
        if record[field] != value:
            msg = f"{where}: {field} is {str(record[field])[:60]!r}, expected {value!r} for {name} in this run"
            raise CacheError(msg)
    if result_name(record["key"], record["k"], record["script"], record["abc_version"]) != file:
        msg = f"{where}: its fields give another file name; an entry is stored under its own name only"
        raise CacheError(msg)
    try:
        netlist = LutNetlist.from_blif(record["blif"], what=where)
        check_arithmetic(netlist, fn, name=f"{where}, for {name}", k=k)
    except IOTableError as exc:
        raise CacheError(str(exc)) from None
    if _unused(netlist) or (record["luts"], record["depth"]) != (netlist.luts, netlist.depth):
        msg = f"{where}: its netlist has nodes that feed no output, or other LUTs or depth than the record says"
        raise CacheError(msg)
    return netlist


def map_arithmetic(
    network: Any,
    *,
    k: int,
    cache: Cache,
    program: str,
    version: str,
    timeout: float,
    keep_dead: bool,
    what: str,
) -> tuple[ArithmeticCost, ...]:
    """Every arithmetic node of ``network`` (a :class:`~iotable.TableNetwork`; anything else has none) mapped:
    its live outputs (all with ``keep_dead``), each distinct function once, from ``cache`` (its memory, then
    its folder) where it holds a result that checks, by ABC otherwise (checked, then saved and held in
    ``cache``). One :class:`ArithmeticCost` per node."""
    if not isinstance(network, TableNetwork):
        return ()
    graph, live = network.graph, network.liveness
    nodes = arithmetic_nodes(graph)
    if not nodes:
        return ()
    script = resolve_script(ARITH_SCRIPT, k, what=what)
    per_node = []
    distinct: dict[str, tuple[ArithFunction, str]] = {}
    for node in nodes:
        kept, dead = live_outputs(node, live, keep_dead)
        functions = node_functions(graph, node, kept)
        per_node.append((node, functions, dead))
        outputs = np.flatnonzero(kept.reshape(-1))
        for fn, output in zip(functions, outputs):
            distinct.setdefault(fn.key(), (fn, f"{node.kind.value} node {node.name!r}, output {int(output)}"))
    netlists: dict[str, LutNetlist] = {}
    held: set[str] = set()
    pending = []
    for key, (fn, name) in distinct.items():
        file = cache.name(key, k, script, version)
        if file in cache.memory:  # checked when it was mapped or read
            netlists[key] = cache.memory[file].netlist
            held.add(key)
            continue
        try:
            record = cache.load(file)
            if record is not None:
                netlists[key] = _from_cache(record, fn, file, f"{what}: {cache.where(file)}", name, k)
                cache.keep(file, record, netlists[key])
                held.add(key)
                continue
        except CacheError as exc:
            message = f"{exc}; mapping {name} again, the fresh result replaces the file"
            warnings.warn(message, IOTableWarning, stacklevel=4)  # the caller of map_luts / cost
        pending.append((key, fn, name))
    for start in range(0, len(pending), _BATCH):
        batch = pending[start : start + _BATCH]
        texts = run_abc(
            program,
            [function_blif(fn).encode() for _, fn, _ in batch],
            script,
            timeout=timeout,
            names=[n for *_, n in batch],
        )
        for (key, fn, name), (text, seconds) in zip(batch, texts):
            netlist = LutNetlist.from_blif(text, what=f"{name}: ABC's netlist")
            check_arithmetic(netlist, fn, name=name, k=k)
            record = _record(fn, k, script, version, text, seconds)
            file = cache.name(key, k, script, version)
            cache.save(file, record)
            cache.keep(file, record, netlist)
            netlists[key] = netlist
    return tuple(_mapped(node, functions, dead, netlists, held, k) for node, functions, dead in per_node)


def _mapped(
    node: Any, functions: list[ArithFunction], dead: int, netlists: dict[str, LutNetlist], held: set[str], k: int
) -> ArithmeticCost:
    keys = [fn.key() for fn in functions]
    estimates = {key: fn.estimate(k) for key, fn in zip(keys, functions)}
    return cost_record(
        node,
        functions,
        dead,
        estimate=sum(estimates[key] for key in keys),
        luts=sum(netlists[key].luts for key in keys),
        depth=max((netlists[key].depth for key in keys), default=0),
        cached=len(set(keys) & held),
    )
