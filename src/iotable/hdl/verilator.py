"""A design built once by Verilator into a program, then run on whole batches: :func:`verilator_model`.

Verilator translates the design's Verilog into C++; with a small driver (:data:`DRIVER`, compiled with it)
the result is a program that reads input words from a binary file, drives the top module through its
valid/ready handshake (``in_valid`` high while words remain, ``out_ready`` always high, a word taken at every
rising edge where ``in_valid & in_ready``), and writes every output word it takes to another binary file: a
whole test split in one run, millions of cycles per second. A word of ``w`` bits is ``ceil(w / 32)``
little-endian 32-bit integers, bit ``i`` of the port in bit ``i % 32`` of integer ``i // 32``.

Building takes seconds to minutes, so the program is cached: in ``cache_dir`` (default
``$XDG_CACHE_HOME/iotable/verilator``, else ``~/.cache/iotable/verilator``), under a key computed from the
sha256 of each source file of the design (its manifest, :attr:`Design.checksums
<iotable.hdl.Design.checksums>`), the table model, the Verilator version, the driver and the flags. An
entry holds the program, the memory models' hex files and ``entry.json``, a record of the key and every
file's sha256 sealed with a secret key of the cache; entries are named by the key under that secret, and
stored whole by a rename that never replaces a valid entry. A damaged entry is built again; one that is a
link, not ours, writable by others or whose record was rewritten is refused. Before every run the program
and hex files are checked again against the digests the model verified at load, copied into a private
folder and run from there. :mod:`iotable.hdl.verilator_cache` gives the design and the reasons.

A run is an error, never wrong rows, when the program exits non-zero, prints a warning or error (Verilator's
``%Warning`` / ``%Error``, such as ``$readmem`` file not found) or leaves a missing or short output file.

Verilator is a 2-state simulator: where the design drives ``x`` (a don't-care row of a table exported with
``dont_cares="x"``), it drives 0 (``--x-assign 0``; registers start at 0, ``--x-initial 0``), every run the
same. A don't-care row therefore reads as code 0 of each output, as with ``dont_cares="zero"``, and a table
reading that code looks it up. Where ``net.run`` defines the output (every row a table holds), the codes are
``net.run``'s; compare there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._util.process import run_in_group
from .._util.trust import Untrusted, read_bounded
from ..errors import CacheError, HDLError, HDLToolError, OptionError
from .design import Design
from .directory import path_error, read_verified
from .netlist import Style
from .primitives import models_file
from .streaming import beats_of, from_beats
from .tools import _require, _step, _tail
from .verilator_cache import entry_name, load, open_root, refusal, run_folder, store, verified_copy
from .verilog_simtables import simulation_sources

__all__ = [
    "DRIVER",
    "TABLE_MODELS",
    "VerilatorModel",
    "default_cache_dir",
    "pack_words",
    "table_model",
    "unpack_words",
    "verilator_model",
]

#: The table models a simulation can use: ``"memory"`` (each table module replaced by a memory read from a
#: hex file, :mod:`iotable.hdl.verilog_simtables`) or ``"sources"`` (the design's table files as written).
TABLE_MODELS = ("memory", "sources")

#: The C++ driver compiled with the design (``{in_words}``, ``{out_words}``: 32-bit integers per word).
DRIVER = """\
// Drives the top module through its valid/ready handshake: input words from a file, output words to a file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "verilated.h"
#include "Vdut.h"

static const std::size_t IN_WORDS = {in_words};
static const std::size_t OUT_WORDS = {out_words};

static void put(CData& p, const uint32_t* w) {{ p = static_cast<CData>(w[0]); }}
static void put(SData& p, const uint32_t* w) {{ p = static_cast<SData>(w[0]); }}
static void put(IData& p, const uint32_t* w) {{ p = w[0]; }}
static void put(QData& p, const uint32_t* w) {{ p = static_cast<QData>(w[0]) | (static_cast<QData>(w[1]) << 32); }}
template <std::size_t N> static void put(VlWide<N>& p, const uint32_t* w) {{
    for (std::size_t i = 0; i < N; ++i) p.at(i) = w[i];
}}
static void get(const CData& p, uint32_t* w) {{ w[0] = p; }}
static void get(const SData& p, uint32_t* w) {{ w[0] = p; }}
static void get(const IData& p, uint32_t* w) {{ w[0] = p; }}
static void get(const QData& p, uint32_t* w) {{
    w[0] = static_cast<uint32_t>(p);
    w[1] = static_cast<uint32_t>(p >> 32);
}}
template <std::size_t N> static void get(const VlWide<N>& p, uint32_t* w) {{
    for (std::size_t i = 0; i < N; ++i) w[i] = p.at(i);
}}

int main(int argc, char** argv) {{
    if (argc != 6) {{
        std::fprintf(stderr, "usage: %s INPUTS OUTPUTS INPUT_WORDS OUTPUT_WORDS MAX_CYCLES\\n", argv[0]);
        return 2;
    }}
    const unsigned long long n_in = std::strtoull(argv[3], nullptr, 10);
    const unsigned long long n_out = std::strtoull(argv[4], nullptr, 10);
    const unsigned long long limit = std::strtoull(argv[5], nullptr, 10);
    std::vector<uint32_t> in(n_in * IN_WORDS + 2), out(n_out * OUT_WORDS + 2);
    FILE* file = std::fopen(argv[1], "rb");
    if (!file || std::fread(in.data(), sizeof(uint32_t), n_in * IN_WORDS, file) != n_in * IN_WORDS) {{
        std::fprintf(stderr, "cannot read %llu input words from %s\\n", n_in, argv[1]);
        return 2;
    }}
    std::fclose(file);
    VerilatedContext context;
    Vdut top(&context);
    top.rst = 1;
    top.in_valid = 0;
    top.out_ready = 1;
    for (int k = 0; k < 4; ++k) {{
        top.clk = 0;
        top.eval();
        top.clk = 1;
        top.eval();
    }}
    top.rst = 0;
    unsigned long long taken = 0, given = 0, cycles = 0;
    while (given < n_out) {{
        if (++cycles > limit) {{
            std::fprintf(stderr, "stalled: %llu of %llu output words after %llu cycles\\n", given, n_out, limit);
            return 3;
        }}
        top.clk = 0;
        top.in_valid = taken < n_in;
        if (taken < n_in) put(top.in_data, &in[taken * IN_WORDS]);
        top.eval();
        const bool take_in = top.in_valid && top.in_ready;
        if (top.out_valid) get(top.out_data, &out[given++ * OUT_WORDS]);
        top.clk = 1;
        top.eval();
        if (take_in) ++taken;
    }}
    top.final();
    file = std::fopen(argv[2], "wb");
    if (!file || std::fwrite(out.data(), sizeof(uint32_t), n_out * OUT_WORDS, file) != n_out * OUT_WORDS) {{
        std::fprintf(stderr, "cannot write %s\\n", argv[2]);
        return 2;
    }}
    std::fclose(file);
    return 0;
}}
"""

# Verilator's options: 2-state values chosen as 0 (deterministic don't-cares), warnings not fatal (the
# generated design is checked by yosys and the benches; Verilator's lint is stricter about widths).
_FLAGS = ("--x-assign", "0", "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style", "--prefix", "Vdut")
_PROGRAM = "iotable_sim"
_FORMAT = 2
# What a Verilator program prints only when something is wrong (a $readmem file not found, an assertion).
_ALARMS = ("%Warning", "%Error", "%Fatal")


def default_cache_dir() -> Path:
    """Where :func:`verilator_model` keeps its programs unless told: ``$XDG_CACHE_HOME/iotable/verilator``, else
    ``~/.cache/iotable/verilator``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "iotable" / "verilator"


def _chunks(width: int) -> int:
    """32-bit integers per word of ``width`` bits."""
    return max(1, -(-width // 32))


def pack_words(codes: np.ndarray, widths: tuple[int, ...]) -> np.ndarray:
    """Words ``(N, elements)`` of codes as ``(N, chunks)`` little-endian 32-bit integers, element 0 lowest."""
    n, total = codes.shape[0], sum(widths)
    chunks = _chunks(total)
    words = np.zeros((n, chunks + 1), dtype=np.uint64)
    low = 0
    for k, width in enumerate(widths):  # a loop over fields, never over words
        column = codes[:, k].astype(np.uint64)
        for start in range(0, width, 32):  # a field wider than 32 bits, 32 bits at a time
            bits = min(32, width - start)
            part = ((column >> np.uint64(start)) & np.uint64((1 << bits) - 1)) << np.uint64((low + start) % 32)
            index = (low + start) // 32
            words[:, index] |= part & np.uint64(0xFFFFFFFF)
            words[:, index + 1] |= part >> np.uint64(32)
        low += width
    return np.ascontiguousarray(words[:, :chunks].astype("<u4"))


def unpack_words(words: np.ndarray, widths: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`pack_words`: ``(N, chunks)`` integers back to codes ``(N, elements)``."""
    bits = np.unpackbits(np.ascontiguousarray(words.astype("<u4")).view(np.uint8), axis=1, bitorder="little")
    codes = np.zeros((words.shape[0], len(widths)), dtype=np.int64)
    low = 0
    for k, width in enumerate(widths):
        place = np.int64(1) << np.arange(width, dtype=np.int64)
        codes[:, k] = bits[:, low : low + width].astype(np.int64) @ place
        low += width
    return codes


@dataclass(frozen=True)
class VerilatorModel:
    """A design built by Verilator: call it on a batch to get the codes ``out_data`` carries.

    Attributes:
        design: the design it simulates.
        folder: its cache entry (the program and the memory models' hex files).
        key: the cache key (sha256 of the design's sources, the table model, Verilator, driver and flags).
        tables: the table model, ``"memory"`` or ``"sources"``.
        built: whether :func:`verilator_model` built it (``False``: it came from the cache).
        seconds: the time building took (0 when it came from the cache).
        digests: the sha256 of each file of the entry the program needs (the program, the hex files), as
            verified when the model was loaded; checked again before every run.
    """

    design: Design = field(repr=False)
    folder: Path
    key: str
    tables: str
    built: bool
    seconds: float
    digests: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __call__(self, x: Any, *, codes: bool = False, timeout: float = 600.0) -> torch.Tensor:
        """The codes of ``out_data`` for a batch ``x`` of the input domain's values (``codes=True``: of input
        codes), shaped ``(N, *design.outputs.shape)``.

        Raises:
            HDLToolError: the program failed, warned, left a missing or short output file, or ran past
                ``timeout`` seconds (a design that stops taking or giving words is ended after a cycle limit
                and named); its cache entry changed since the model was loaded.
        """
        what = "VerilatorModel"
        design = self.design
        encoded = design.network.encode_input(x, codes=codes, what=what)
        n = int(encoded.shape[0])
        if n == 0:
            return torch.zeros((0, *design.outputs.shape), dtype=torch.int64)
        graph = design.network.graph
        streaming = design.style == Style.STREAMING.value
        array = encoded.numpy()
        words = beats_of(array, graph[design.inputs.node]) if streaming else array.reshape(n, -1)
        count = n * design.outputs.beats
        values = self.run_words(words, count, timeout=timeout)
        if streaming:
            return torch.as_tensor(from_beats(values, graph[design.outputs.node], n))
        return torch.as_tensor(values).reshape(n, *design.outputs.shape)

    def run_words(self, words: np.ndarray, count: int, *, timeout: float = 600.0) -> np.ndarray:
        """Run the program on input words ``(M, input elements)`` (codes) until it gives ``count`` output words;
        return them as codes ``(count, output elements)``.

        The program and its hex files are checked against :attr:`digests` and copied into a private folder
        first; the program runs from there (see :mod:`iotable.hdl.verilator_cache`).
        """
        what = f"VerilatorModel ({self.design.top!r})"
        design = self.design
        in_widths, out_widths = design.inputs.widths, design.outputs.widths
        limit = 4 * (len(words) + count) * max(design.interval, 1) + 64 * design.latency + 100_000
        seconds = _timeout(timeout, what=what)
        run = self._stage(what)
        try:
            inputs, outputs = run / "inputs.bin", run / "outputs.bin"
            pack_words(words, in_widths).tofile(inputs)
            command = [str(run / _PROGRAM), str(inputs), str(outputs), str(len(words)), str(count), str(limit)]
            try:
                done, late = run_in_group(command, run, seconds)
            except OSError as exc:
                msg = f"{what}: cannot run the program of {str(self.folder)!r} ({exc.strerror or exc}); {self._fix}"
                raise HDLToolError(msg) from None
            chunks = _chunks(sum(out_widths))
            raw = self._output(done, late, outputs, count * chunks, what=what)
        finally:
            shutil.rmtree(run, ignore_errors=True)
        return unpack_words(raw.reshape(count, chunks), out_widths)

    @property
    def _fix(self) -> str:
        return (
            f"call verilator_model(design) again to rebuild it, or delete {str(self.folder)!r} or pass another "
            "cache_dir"
        )

    def _stage(self, what: str) -> Path:
        """A private run folder holding the program and hex files, each checked against :attr:`digests`."""
        files = dict(self.digests)
        if _PROGRAM not in files:
            msg = f"{what}: the model records no verified program; get it from verilator_model(design)"
            raise HDLToolError(msg)
        try:
            run = run_folder(self.folder.parent)
        except (Untrusted, OSError) as exc:
            msg = f"{what}: cannot use the cache folder {str(self.folder.parent)!r} ({exc}); {self._fix}"
            raise HDLToolError(msg) from None
        try:
            verified_copy(self.folder, files, run, program=_PROGRAM)
        except FileNotFoundError as exc:
            shutil.rmtree(run, ignore_errors=True)
            msg = (
                f"{what}: {str(exc.filename)!r} is gone: the cache entry was removed or damaged since the model "
                f"was loaded; {self._fix}"
            )
            raise HDLToolError(msg) from None
        except (Untrusted, OSError) as exc:
            shutil.rmtree(run, ignore_errors=True)
            msg = f"{what}: the cache entry changed since the model was loaded ({exc}); {self._fix}"
            raise HDLToolError(msg) from None
        return run

    def _output(self, done: Any, late: bool, path: Path, chunks: int, *, what: str) -> np.ndarray:
        """The output file's integers, after the run is checked: finished, exit 0, no warning, whole output."""
        text = done.stdout + done.stderr
        if late or done.returncode != 0:
            reason = "did not finish within the timeout; raise timeout=" if late else "failed"
            msg = f"{what}: {reason} (exit status {done.returncode}):\n{_tail(text)}"
            raise HDLToolError(msg)
        alarms = [line for line in text.splitlines() if line.lstrip().startswith(_ALARMS) or "$readmem" in line]
        if alarms:
            msg = (
                f"{what}: the program of {str(self.folder)!r} printed {len(alarms)} warning or error line(s), so its "
                f"rows cannot be believed; {self._fix}:\n{_tail(chr(10).join(alarms))}"
            )
            raise HDLToolError(msg)
        size = 4 * chunks
        try:
            data = read_bounded(path, limit=size)
        except FileNotFoundError:
            data = None
        except Untrusted as exc:
            msg = f"{what}: the output file is not the {size:,} bytes expected ({exc}); {self._fix}"
            raise HDLToolError(msg) from None
        if data is None or len(data) != size:
            got = "no output file" if data is None else f"{len(data):,} bytes"
            msg = f"{what}: the program exited 0 but wrote {got}, not the {size:,} bytes expected; {self._fix}"
            raise HDLToolError(msg)
        return np.frombuffer(data, dtype="<u4")


def _timeout(value: Any, *, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        msg = f"{what}: timeout must be a positive number of seconds, received {value!r}"
        raise OptionError(msg)
    return float(value)


def table_model(value: Any, *, what: str) -> str:
    """``value`` checked as one of :data:`TABLE_MODELS`."""
    if isinstance(value, str) and value.lower() in TABLE_MODELS:
        return value.lower()
    accepted = ", ".join(repr(m) for m in TABLE_MODELS)
    msg = f"{what}: unknown tables {value!r}; expected one of {accepted}"
    raise OptionError(msg)


def _cache_folder(cache_dir: Any, *, what: str) -> Path:
    if cache_dir is None:
        return default_cache_dir()
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        msg = f"{what}: cache_dir must be a folder path (str or os.PathLike), received {cache_dir!r}"
        raise OptionError(msg)
    folder = Path(os.fspath(cache_dir))
    if folder.exists() and not folder.is_dir():
        msg = f"{what}: cache_dir {str(folder)!r} exists and is not a folder; give a folder for the built programs"
        raise OptionError(msg)
    return folder


def _version(deadline: float, *, what: str) -> str:
    done = _step(["verilator", "--version"], Path.cwd(), deadline, what=what)
    return done.stdout.strip()


def _compiled(design: Design) -> tuple[str, ...]:
    """The files Verilator compiles: the design's sources and, for device-cell tables, the cells' models."""
    return design.sources + ((models_file(design.top),) if design.primitives is not None else ())


def _key(design: Design, tables: str, driver: str, version: str) -> str:
    record = {
        "format": _FORMAT,
        "top": design.top,
        "style": design.style,
        "sources": [[name, dict(design.checksums)[name]] for name in _compiled(design)],
        "tables": tables,
        "verilator": version,
        "driver": hashlib.sha256(driver.encode()).hexdigest(),
        "flags": list(_FLAGS),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def verilator_model(
    design: Design, *, tables: str = "memory", cache_dir: str | os.PathLike[str] | None = None, timeout: float = 1800.0
) -> VerilatorModel:
    """Build ``design`` with Verilator into a program (or take it from the cache) and return it as a callable.

    The design's directory is verified against its manifest first. The program is cached by the sha256 of the
    design's sources (see the module docstring), so a second call on the same design returns at once, and a
    changed design (or a damaged entry) is built again.

    Args:
        design: what :func:`~iotable.hdl.export` returned (Verilog).
        tables: ``"memory"``: every table module replaced by a memory read from a hex file
            (:mod:`iotable.hdl.verilog_simtables`: builds in seconds); ``"sources"``: the ``case`` files as
            written (Verilator turns them into lookup tables too, but takes minutes on a design such as jsc-m).
        cache_dir: where programs are kept (default :func:`default_cache_dir`).
        timeout: seconds for building.

    Returns:
        A :class:`VerilatorModel`; ``model(x)`` returns the codes of ``out_data``, as :func:`~iotable.hdl.simulate`.

    Raises:
        HDLError: not a Verilog design, or its directory differs from its manifest; OptionError: a bad option;
        SimulatorNotInstalledError: verilator, make or g++ is missing; HDLToolError: the build failed.

    Example (needs verilator)::

        model = verilator_model(design)
        torch.equal(model(x), design.reference(x))   # True
    """
    what = "verilator_model"
    if not isinstance(design, Design):
        msg = f"{what}: expected a Design (what iotable.hdl.export returns), received {type(design).__name__}"
        raise HDLError(msg)
    if design.language != "verilog":
        msg = f"{what}: Verilator reads Verilog; design {design.top!r} is {design.language}: export it in Verilog"
        raise HDLError(msg)
    tables = table_model(tables, what=what)
    folder = _cache_folder(cache_dir, what=what)
    deadline = time.monotonic() + _timeout(timeout, what=what)
    _require(("verilator", "make", "g++"), what=what)
    read_verified(Path(design.directory), dict(design.checksums), (), what=what)
    in_words, out_words = _chunks(design.inputs.width), _chunks(design.outputs.width)
    driver = DRIVER.format(in_words=in_words, out_words=out_words)
    key = _key(design, tables, driver, _version(deadline, what=what))
    root, secret = open_root(folder, what=what)
    entry = root / entry_name(secret, key)
    found = load(entry, key, secret, required=_PROGRAM, what=what)
    if found is not None:
        return VerilatorModel(design, entry, key, tables, built=False, seconds=0.0, digests=_digests(found))
    start = time.perf_counter()
    sources = read_verified(Path(design.directory), dict(design.checksums), _compiled(design), what=what)
    files = simulation_sources(design, sources, two_state=True) if tables == "memory" else dict(sources)
    stored = _build(files, design.top, driver, (entry, key, secret), deadline, what=what)
    seconds = time.perf_counter() - start
    return VerilatorModel(design, entry, key, tables, built=True, seconds=seconds, digests=_digests(stored))


def _digests(files: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The files of an entry the program needs (all but the record) and their sha256, sorted by name."""
    return tuple(sorted(files.items()))


def _build(
    files: dict[str, str], top: str, driver: str, target: tuple[Path, str, bytes], deadline: float, *, what: str
) -> dict[str, str]:
    """Build the program in a fresh folder beside the entry and store its entry (``target``: the entry, its key
    and the cache's secret); return the files of the entry in place (another process's, stored first).

    Verilator's runtime library (``verilated.o`` and kin: the same for every design) is compiled once and kept
    in a ``runtime-*`` entry of the cache; a build copies it in after Verilator wrote its makefiles, so that
    ``make`` finds it up to date.
    """
    entry, key, secret = target
    what = f"{what} (building {entry.name})"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        work = entry.parent / f".build-{uuid.uuid4().hex}"
        work.mkdir()
    except OSError as exc:
        raise path_error(what, "create the cache folder", entry.parent, exc) from None
    try:
        (work / "driver.cpp").write_text(driver, encoding="utf-8")
        for name, text in files.items():
            (work / name).write_text(text, encoding="utf-8")
        sources = [name for name in files if name.endswith(".v")]
        command = ["verilator", "--cc", "--exe", *_FLAGS, "--top-module", top, "-Mdir", "obj", "-o", _PROGRAM]
        _step([*command, "driver.cpp", *sources], work, deadline, what=what)
        runtime = _runtime(entry.parent, secret, deadline, what=what)
        _make(work / "obj", runtime, deadline, what=what)
        staged = work / "entry"
        staged.mkdir()
        shutil.copy2(work / "obj" / _PROGRAM, staged / _PROGRAM)
        for name in files:
            if not name.endswith(".v"):
                shutil.copy2(work / name, staged / name)
        return store(staged, entry, key, required=_PROGRAM, what=what)
    except CacheError:  # an OSError too, but already says what is wrong and the fix
        raise
    except OSError as exc:
        raise path_error(what, "write the cache entry", entry, exc) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _runtime(folder: Path, secret: bytes, deadline: float, *, what: str) -> tuple[Path, str, bytes]:
    """The cache entry of Verilator's compiled runtime library (it may not exist yet), its key and the secret."""
    compiler = _step(["g++", "--version"], folder, deadline, what=what).stdout.strip()
    record = {"format": _FORMAT, "verilator": _version(deadline, what=what), "g++": compiler, "flags": list(_FLAGS)}
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return folder / f"runtime-{entry_name(secret, key)[:16]}", key, secret


def _make(obj: Path, runtime: tuple[Path, str, bytes], deadline: float, *, what: str) -> None:
    """``make`` the program in ``obj``, with the cached runtime library when there is one (and without it, should
    the build with it fail); store the runtime library when it was compiled here."""
    jobs = str(min(os.cpu_count() or 1, 8))
    command = ["make", "-j", jobs, "-f", "Vdut.mk", _PROGRAM]
    folder, key, secret = runtime
    cached = load(folder, key, secret, required=None, what=what)
    if cached is not None:
        try:  # checked as it is copied: a fresh time stamp, newer than the makefiles
            verified_copy(folder, cached, obj)
        except Untrusted as exc:
            raise refusal(what, folder, str(exc)) from None
        try:
            _step(command, obj, deadline, what=what)
            return
        except HDLToolError:
            for name in cached:
                (obj / name).unlink(missing_ok=True)
    _step(command, obj, deadline, what=what)
    staged = obj / f"runtime-{uuid.uuid4().hex}"
    staged.mkdir()
    for built in obj.glob("verilated*.o"):
        shutil.copy2(built, staged / built.name)
    if any(staged.iterdir()):
        store(staged, folder, key, required=None, what=what)
