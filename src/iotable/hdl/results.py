"""The results file a bench writes and :func:`~iotable.hdl.simulate_files` reads: the output words a printing
bench took and the bench's own verdict, so that nothing depends on what the simulator prints or on its exit
status alone.

A bench whose top is ``T`` writes ``T_results.txt`` in the directory it runs in, one record a line:

- ``expect W``, first: the bench will write ``W`` output words (0 for a checking bench);
- the output words, one a line, in hexadecimal (``x``, ``z``, ``u``, ``-`` for unknown bits);
- any message lines (a checking bench's first mismatch, a timeout), which start with a letter that is not a
  hex digit;
- ``pass G/E N`` or ``fail G/E N``, last: the vectors the bench took (``G``) of those it expected (``E``),
  and the run's nonce ``N``.

The nonce proves the verdict was written by this run of the bench, not left by an earlier one or written by
a program that only poses as the simulator: :func:`~iotable.hdl.simulate_files` draws a fresh one for every
run and hands it to the bench, a Verilog bench as the plusarg ``+iotable_nonce=N`` (read with
``$value$plusargs``), a VHDL bench as the first line of the file ``iotable_nonce.txt`` in the directory it
runs in (read with ``file_open``, so a bench run by hand without it writes its verdict with no nonce).

The bench passed when the simulation exited with status 0 and the file ends with ``pass E/E N`` (``N`` the
run's nonce) after exactly the announced words. The file is read line by line: words past the announced
count and messages past a few kilobytes are not kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NONCE_FILE", "NONCE_PLUSARG", "Record", "read_record", "results_file", "verilog_nonce", "vhdl_nonce"]

NONCE_PLUSARG = "iotable_nonce"
NONCE_FILE = "iotable_nonce.txt"

_MESSAGE_BYTES = 64 * 1024
_LINE_BYTES = 64 * 1024  # longer lines are cut (a word wider than this is not a bench's)
_WORD = re.compile(rb"[0-9a-fA-FxXzZuU-]+")
_EXPECT = re.compile(rb"expect (\d{1,18})")
_VERDICT = re.compile(rb"(pass|fail) (\d{1,18})/(\d{1,18})(?: ([0-9a-f]{1,64}))?")


def verilog_nonce(indent: str) -> tuple[str, str]:
    """Verilog lines that give a bench the run's nonce: ``(declaration, statement for an initial block)``;
    the verdict writes it with ``%0s`` from ``iotable_nonce`` (empty when the run gave none)."""
    return (
        f"{indent}reg [8*64-1:0] iotable_nonce = 0;",
        f'{indent}    if (!$value$plusargs("{NONCE_PLUSARG}=%s", iotable_nonce)) iotable_nonce = 0;',
    )


def vhdl_nonce(indent: str) -> list[str]:
    """A VHDL impure function ``run_nonce`` (for a process's or architecture's declarations): ``" " & N`` for
    the run's nonce ``N`` (the first line of :data:`NONCE_FILE`), or ``""`` when the run gave none."""
    body = [
        "-- the run's nonce, for the verdict (see iotable.hdl.results)",
        "impure function run_nonce return string is",
        "    file source : text;",
        "    variable status : file_open_status;",
        "    variable l : line;",
        "begin",
        f'    file_open(status, source, "{NONCE_FILE}", read_mode);',
        "    if status /= open_ok then",
        '        return "";',
        "    end if;",
        "    if endfile(source) then",
        "        file_close(source);",
        '        return "";',
        "    end if;",
        "    readline(source, l);",
        "    file_close(source);",
        '    return " " & l.all;',
        "end function run_nonce;",
    ]
    return [indent + line for line in body]


def results_file(bench: str) -> str:
    """The name of the results file of the bench whose top is ``bench``."""
    return f"{bench}_results.txt"


@dataclass(frozen=True)
class Record:
    """What a bench wrote to its results file.

    Attributes:
        words: the output words, one a line (at most the announced count).
        messages: the other lines (a mismatch, a timeout, a malformed record), the first few kilobytes.
        passed: the file ends with ``pass E/E`` (with the run's nonce, when one was given), after exactly the
            words its ``expect`` line announced.
    """

    words: str
    messages: str
    passed: bool


def read_record(path: Path, *, nonce: str | None = None) -> Record:
    """The record of a results file, read line by line (bounded memory whatever the bench wrote); with
    ``nonce``, a verdict passes only when it carries that nonce."""
    words: list[bytes] = []
    messages = bytearray()
    expected = None
    extra = 0  # words past the announced count
    verdict = None
    with path.open("rb") as handle:
        for raw in iter(lambda: handle.readline(_LINE_BYTES), b""):
            line = raw.strip()
            if not line:
                continue
            verdict = None  # the verdict counts only as the last record
            if expected is None:
                found = _EXPECT.fullmatch(line)
                expected = int(found.group(1)) if found else -1
                if found:
                    continue
            if _WORD.fullmatch(line):
                if len(words) < expected:
                    words.append(line)
                else:
                    extra += 1
                continue
            verdict = _VERDICT.fullmatch(line)
            room = _MESSAGE_BYTES - len(messages) - 1  # a line, cut to the room left, and its newline
            if room > 0:
                messages += line[:room] + b"\n"
    passed = (
        verdict is not None
        and verdict.group(1) == b"pass"
        and int(verdict.group(2)) == int(verdict.group(3))
        and expected == len(words)
        and extra == 0
        and (nonce is None or verdict.group(4) == nonce.encode("ascii"))
    )
    text = b"\n".join(words).decode("ascii") + ("\n" if words else "")
    return Record(words=text, messages=messages.decode("utf-8", errors="replace"), passed=passed)
