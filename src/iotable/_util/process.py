"""External programs (simulators, synthesis, ABC) run in their own process group, ended whole.

A tool's output is read as it comes and only its last bytes are kept (a simulator printing gigabytes must
not fill memory). When the tool ends, runs past its timeout or the caller is interrupted, everything it
started is ended: its process group, and on Linux every descendant that left the group (``setsid``, a double
fork), found by a token in its environment, which children inherit. A descendant that keeps the output pipes
open therefore cannot make the run hang.

A tool runs in a session of its own, so a signal sent to the caller does not reach it. When the caller is ended
by SIGTERM (a job scheduler's or a container's stop) while tools run, in any thread, every running tool is ended
first: the first run installs a SIGTERM handler where the process has none of its own (the default action),
which ends the tools and then lets the default action end the process as before.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .programs import search_path

__all__ = ["TAIL_BYTES", "run_in_group"]

#: Bytes of standard output and of standard error kept by default: the last ones.
TAIL_BYTES = 1 << 20
_TOKEN = "IOTABLE_TOOL_RUN"  # the environment variable marking a run's descendants
_CHUNK = 1 << 16
_GRACE = 2.0  # seconds to drain the pipes once the tool and its descendants are ended


class _Tail:
    """The last ``limit`` bytes written to it, and how many came before them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trim in batches, not at every chunk
            self.trim()

    def trim(self) -> None:
        extra = len(self.data) - self.limit
        if extra > 0:
            del self.data[:extra]
            self.dropped += extra

    def text(self) -> str:
        self.trim()
        # universal newlines, as text-mode pipes give
        body = self.data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        return f"[... {self.dropped} earlier bytes not kept ...]\n{body}" if self.dropped else body


def _marked(token: str) -> list[int]:
    """Processes (of this user) whose environment carries ``token``: a run's descendants wherever they went."""
    found: list[int] = []
    needle = f"{_TOKEN}={token}".encode()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: the process group is all that can be ended
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _end_all(process: subprocess.Popen[bytes], token: str) -> None:
    """SIGKILL the tool's process group and every marked descendant, until none is left (forks in flight)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:  # the group is already empty
        pass
    for _ in range(20):
        left = _marked(token)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


_RUNNING: dict[int, tuple[subprocess.Popen[bytes], str]] = {}  # id -> (tool, token) of every run in flight
_RUNNING_LOCK = threading.Lock()


def _on_sigterm(signum: int, frame: Any) -> None:
    """End every running tool, then end this process by SIGTERM's default action."""
    with _RUNNING_LOCK:
        running = list(_RUNNING.values())
    for process, token in running:
        _end_all(process, token)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _guard_sigterm() -> None:
    """Install :func:`_on_sigterm` where SIGTERM has its default action (never over a handler of the caller's;
    only the main thread may install one)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # no signals here (an embedded interpreter): the tools are ended at timeouts
        pass


def _pump(selector: selectors.BaseSelector, tails: dict[int, _Tail], wait: float) -> None:
    """Read whatever is ready within ``wait`` seconds; unregister a pipe at its end."""
    for key, _ in selector.select(timeout=max(wait, 0.0)):
        chunk = os.read(key.fd, _CHUNK)
        if chunk:
            tails[key.fd].add(chunk)
        else:
            selector.unregister(key.fd)


def run_in_group(
    command: list[str], cwd: str | Path, timeout: float, *, tail: int = TAIL_BYTES
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run ``command`` in a new process group; return its result and whether it ran past ``timeout`` seconds.

    ``stdout`` and ``stderr`` of the result hold the last ``tail`` bytes of each (decoded as UTF-8, an earlier
    part marked as not kept). Past the timeout, when the tool exits, or at any interruption (which
    propagates), the tool's group and all its descendants are killed; the pipes are then drained for at most
    a short grace period, so a descendant that escaped and holds them open cannot stall the return. The
    program is looked up as :func:`~iotable._util.programs.find_program` finds it (``PATH``, then the folder
    of the running Python), and the tool's own ``PATH`` is that too.
    """
    _guard_sigterm()
    token = uuid.uuid4().hex
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PATH": search_path(), _TOKEN: token},
    )
    assert process.stdout is not None and process.stderr is not None
    pipes = [process.stdout, process.stderr]
    fds = [pipe.fileno() for pipe in pipes]
    tails = {fd: _Tail(tail) for fd in fds}
    deadline = time.monotonic() + timeout
    late = False
    with _RUNNING_LOCK:
        _RUNNING[id(process)] = (process, token)
    try:
        with selectors.DefaultSelector() as selector:
            for fd in fds:
                selector.register(fd, selectors.EVENT_READ)
            while process.poll() is None and selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    late = True
                    break
                _pump(selector, tails, min(left, 0.1))
            if not late and process.poll() is None:  # both pipes closed, the tool still running
                try:
                    process.wait(timeout=max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    late = True
            _end_all(process, token)
            grace = time.monotonic() + _GRACE
            while selector.get_map() and time.monotonic() < grace:
                _pump(selector, tails, grace - time.monotonic())
    except BaseException:
        _end_all(process, token)
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(id(process), None)
        for pipe in pipes:
            pipe.close()
        process.wait()
    stdout, stderr = (tails[fd].text() for fd in fds)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), late
