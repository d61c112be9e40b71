"""The results file a bench writes and :func:`~iotable.hdl.simulate_files` reads: the output words a printing
bench took and the bench's own verdict, so that nothing depends on what the simulator prints or on its exit
status alone.

A bench whose top is ``T`` writes ``T_results.txt`` in the directory it runs in, one record a line:

- ``expect W``, first: the bench will write ``W`` output words (0 for a checking bench);
- the output words, one a line, in hexadecimal (``x``, ``z``, ``u``, ``-`` for unknown bits);
- any message lines (a checking bench's first mismatch, a timeout), which start with a letter that is not a
  hex digit;
- ``pass G/E`` or ``fail G/E``, last: the vectors the bench took (``G``) of those it expected (``E``).

The bench passed when the simulation exited with status 0 and the file ends with ``pass E/E`` after exactly
the announced words. The file is read line by line: words past the announced count and messages past a few
kilobytes are not kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Record", "read_record", "results_file"]

_MESSAGE_BYTES = 64 * 1024
_LINE_BYTES = 64 * 1024  # longer lines are cut (a word wider than this is not a bench's)
_WORD = re.compile(rb"[0-9a-fA-FxXzZuU-]+")
_EXPECT = re.compile(rb"expect (\d{1,18})")
_VERDICT = re.compile(rb"(pass|fail) (\d{1,18})/(\d{1,18})")


def results_file(bench: str) -> str:
    """The name of the results file of the bench whose top is ``bench``."""
    return f"{bench}_results.txt"


@dataclass(frozen=True)
class Record:
    """What a bench wrote to its results file.

    Attributes:
        words: the output words, one a line (at most the announced count).
        messages: the other lines (a mismatch, a timeout, a malformed record), the first few kilobytes.
        passed: the file ends with ``pass E/E``, after exactly the words its ``expect`` line announced.
    """

    words: str
    messages: str
    passed: bool


def read_record(path: Path) -> Record:
    """The record of a results file, read line by line (bounded memory whatever the bench wrote)."""
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
    )
    text = b"\n".join(words).decode("ascii") + ("\n" if words else "")
    return Record(words=text, messages=messages.decode("utf-8", errors="replace"), passed=passed)
