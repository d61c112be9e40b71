"""External programs (simulators, synthesis, ABC) run in their own process group, killed whole at a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

__all__ = ["run_in_group"]


def run_in_group(command: list[str], cwd: str | Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run ``command`` in a new process group and return its result and whether it ran past ``timeout``
    seconds; then the whole group (compilers a tool started included) is killed and the result holds the
    output so far. Any other interruption kills the group too and propagates."""
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    late = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        late = True
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), late
