"""ABC as a subprocess: find the program, ask its version, run a mapping script under a deadline.

ABC runs in a fresh temporary directory holding only the function's BLIF, in its own process group; past
the timeout the whole group is killed and :class:`ABCError` raised with ABC's own output.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .._util.process import run_in_group
from .._util.programs import find_program
from ..errors import ABCError, ABCNotInstalledError, SynthError
from ..lutnet import DEFAULT_SCRIPT  # the pinned script, beside the netlists it makes

__all__ = ["DEFAULT_SCRIPT", "PROGRAMS", "SCRIPT_COMMANDS", "abc_version", "find_abc", "resolve_script", "run_abc"]

#: The programs tried, in order: Debian's ``berkeley-abc``, the copy yosys ships, a plain ``abc``.
PROGRAMS = ("berkeley-abc", "yosys-abc", "abc")


_OUTPUT_TAIL = 4000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# ABC's first line of a written BLIF names the date and time: dropped, so that a netlist is a function of its
# table and script alone (the same mapping stores the same text).
_STAMP = re.compile(r"\A# Benchmark .* written by ABC on .*\n?")


def find_abc(abc: Any = None, *, what: str) -> str:
    """The ABC program to run: ``abc`` (a name on PATH or a path) if given, else the first of :data:`PROGRAMS`."""
    if abc is not None:
        if not isinstance(abc, (str, os.PathLike)) or not os.fspath(abc):
            msg = f"{what}: abc must be the name or path of an ABC program, received {abc!r}"
            raise SynthError(msg)
        found = find_program(os.fspath(abc))
        if found is None:
            msg = (
                f"{what}: the ABC program {os.fspath(abc)!r} is not found or not executable; install the Debian "
                "package 'berkeley-abc' (apt-get install berkeley-abc) or pass abc= the path of one"
            )
            raise ABCNotInstalledError(msg)
        return found
    for program in PROGRAMS:
        found = find_program(program)
        if found is not None:
            return found
    msg = (
        f"{what}: no ABC program ({', '.join(PROGRAMS)}) is on PATH; install the Debian package 'berkeley-abc' "
        "(apt-get install berkeley-abc) or pass abc= the path of an ABC binary"
    )
    raise ABCNotInstalledError(msg)


def _tail(text: str) -> str:
    text = _ANSI.sub("", text)
    return text if len(text) <= _OUTPUT_TAIL else "...\n" + text[-_OUTPUT_TAIL:]


def _run(command: list[str], cwd: str, timeout: float, *, what: str) -> subprocess.CompletedProcess[str]:
    done, late = run_in_group(command, cwd, timeout)
    if late:
        msg = (
            f"{what}: {command[0]} did not finish within {timeout:g} s; raise timeout= (a table of 16 input bits "
            f"takes about 3 s, each further bit about twice as long). Output so far:\n"
            f"{_tail(done.stdout + done.stderr)}"
        )
        raise ABCError(msg)
    return done


@functools.lru_cache(maxsize=8)
def _version(program: str, mtime: float) -> str:
    with tempfile.TemporaryDirectory(prefix="iotable-abc-") as folder:
        done = _run([program, "-c", "version"], folder, 30.0, what="abc_version")
    text = _ANSI.sub("", done.stdout + done.stderr)
    lines = [ln.strip() for ln in text.splitlines() if "ABC" in ln and "command line" not in ln]
    if done.returncode != 0 or not lines:
        msg = f"abc_version: {program} did not print an ABC version (is it Berkeley ABC?):\n{_tail(text)}"
        raise ABCError(msg)
    return lines[0]


def abc_version(abc: Any = None) -> str:
    """The version line of the ABC program (e.g. ``UC Berkeley, ABC 1.01 (compiled Feb  7 2023 01:39:45)``).

    Part of every cache key: counts are tied to the program that made them.
    """
    program = find_abc(abc, what="abc_version")
    return _version(program, os.stat(program).st_mtime)


#: The ABC commands a mapping script may use: optimisation and LUT mapping, none of which reads or writes a
#: file named by its arguments (ABC's own reading, writing, shell and scripting commands are refused; iotable
#: reads the table and writes the netlist). Arguments may be only options (``-K``) and numbers (``6``).
SCRIPT_COMMANDS = frozenset(
    """
    balance bdd bidec cleanup collapse csweep dc2 dch dfraig drf drw drwsat dsd fraig fx if ifraig iresyn irw
    irws logic lutpack mfs mfs2 mfs3 multi muxes print_level print_stats refactor renode resub rewrite satclp
    sop strash sweep
    &b &dc2 &dch &dsdb &fraig &fx &get &if &jf &kf &lf &mf &mfs &ps &put &satlut &shrink &sopb &st &sweep
    &syn2 &syn3 &syn4 &synch2
    """.split()
)

_ARGUMENT = re.compile(r"-[A-Za-z]+|[0-9]+(\.[0-9]+)?")
_OTHER = re.compile(r"[^A-Za-z0-9_&.; -]")


def resolve_script(script: Any, k: int, *, what: str) -> str:
    """The mapping script with ``{k}`` filled in; checked: ABC commands separated by ``;``, each one of
    :data:`SCRIPT_COMMANDS` with only options and numbers as arguments (nothing that reads or writes a file)."""
    if script is None:
        script = DEFAULT_SCRIPT
    if not isinstance(script, str) or not script.strip(";\n\t "):
        msg = f"{what}: script must be a non-empty string of ABC commands, received {script!r}"
        raise SynthError(msg)
    resolved = script.replace("{k}", str(k)).strip().strip(";").strip()
    fix = (
        f"give only optimisation and mapping commands separated by ';' (e.g. {DEFAULT_SCRIPT!r}), with options "
        "and numbers as their arguments: iotable reads the table and writes the netlist"
    )
    odd = _OTHER.search(resolved)
    if odd is not None:  # quotes, comments, a newline, a path's '/': nothing a plain command line needs
        msg = f"{what}: script {script!r} holds the character {odd.group()!r}; {fix}"
        raise SynthError(msg)
    for command in resolved.split(";"):
        words = command.split()
        if not words:
            msg = f"{what}: script {script!r} holds an empty command (two ';' in a row); {fix}"
            raise SynthError(msg)
        if words[0] not in SCRIPT_COMMANDS:
            allowed = ", ".join(sorted(SCRIPT_COMMANDS))
            msg = (
                f"{what}: script {script!r}: {words[0][:40]!r} is not one of the ABC commands a mapping script "
                f"may use (a command that reads, writes or leaves ABC, or one iotable does not list); {fix}. "
                f"Allowed: {allowed}"
            )
            raise SynthError(msg)
        for word in words[1:]:
            if not _ARGUMENT.fullmatch(word):
                msg = (
                    f"{what}: script {script!r}: the argument {word[:40]!r} of {words[0]!r} is neither an option "
                    f"nor a number (a file name, perhaps); {fix}"
                )
                raise SynthError(msg)
    return resolved


def run_abc(
    program: str, blifs: list[bytes], script: str, *, timeout: float, names: list[str]
) -> list[tuple[str, float]]:
    """Map each of ``blifs`` with ``script`` in one ABC session (ABC's start-up is paid once, which is most
    of the time for small tables); returns each mapped BLIF text with ABC's time for it, in seconds.

    ``names`` name the tables in errors; ``timeout`` bounds the whole session.
    """
    with tempfile.TemporaryDirectory(prefix="iotable-abc-") as folder:
        commands = []
        for i, blif in enumerate(blifs):
            Path(folder, f"table{i}.blif").write_bytes(blif)
            commands.append(f"read_blif table{i}.blif; {script}; write_blif mapped{i}.blif; time")
        line = "; ".join(commands)
        what = names[0] if len(names) == 1 else f"{names[0]} (and {len(names) - 1} more table(s) in one ABC run)"
        done = _run([program, "-c", line], folder, timeout, what=what)
        output = done.stdout + done.stderr
        times = [float(t) for t in re.findall(r"elapse:\s*([0-9.]+)\s*seconds", _ANSI.sub("", output))]
        results = []
        for i, name in enumerate(names):
            mapped = Path(folder, f"mapped{i}.blif")
            # ABC exits 0 even when a command fails, but stops there: no netlist file is the failure's mark.
            if done.returncode != 0 or not mapped.exists():
                shown = f"{program} -c {commands[i]!r}" + (f" (and {len(names) - 1} more)" if len(names) > 1 else "")
                msg = f"{name}: {shown} failed (exit status {done.returncode}, no netlist written):\n{_tail(output)}"
                raise ABCError(msg)
            text = _STAMP.sub("", mapped.read_text(), count=1)
            results.append((text, times[i] if i < len(times) else 0.0))
        return results
