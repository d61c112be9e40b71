"""The default process pool of map_luts/cost: a script without a main guard is refused before a worker
starts, and Ctrl-C while workers start or run ends in one line, not a traceback per worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iotable._util import mainguard

from .optional import require_program

_TABLES = """
import numpy as np
from iotable import Domain, IOTable
from iotable.synth import map_luts

def tables(count, bits=8):
    rng = np.random.default_rng(0)
    two = Domain.uniform(2)
    return [
        IOTable.dense(rng.integers(0, 4, (4**(bits // 2), 1)), input_domains=[two] * (bits // 2), output_domain=two)
        for _ in range(count)
    ]
"""


def _run(script: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env, cwd=script.parent
    )


def test_a_script_without_a_main_guard_is_refused_before_workers_start(tmp_path: Path) -> None:
    """A script that maps on the default pool from its top level fails at once with the script's name and
    both fixes; its top level runs once (no worker started to run it again)."""
    require_program("berkeley-abc", package="berkeley-abc")
    script = tmp_path / "unguarded.py"
    body = "print('top level ran', flush=True)\nmap_luts(tables(130, bits=4), k=3, workers=2, progress=False)\n"
    script.write_text(_TABLES + body)
    done = _run(script)
    assert done.returncode != 0
    assert done.stdout.count("top level ran") == 1
    assert f"SynthError: map_luts: the script {str(script)!r} calls map_luts from its top level" in done.stderr
    assert "if __name__ == '__main__':" in done.stderr and "workers=1" in done.stderr


def test_a_line_of_a_changed_script_says_nothing() -> None:
    """A line in a function's body or past the end cannot be where the script's own code runs (the file changed
    since the script started): not refused; a line at the top level is unguarded, one under the guard guarded."""
    source = "import x\n\ndef main():\n    run()\n    return 1\n\nrun()\nif __name__ == '__main__':\n    main()\n"
    assert mainguard._guarded(source, 4) is None and mainguard._guarded(source, 40) is None
    assert mainguard._guarded(source, 7) is False and mainguard._guarded(source, 9) is True
    assert mainguard._guarded(source, 3) is False  # the def line runs at the top level (its defaults)


@pytest.mark.slow
def test_a_script_edited_while_it_runs_is_not_refused(tmp_path: Path) -> None:
    """A guarded script that rewrites its own file before it maps (its running line then lies in a function
    body of the new file) maps on the pool: the changed file says nothing about where the script runs."""
    require_program("berkeley-abc", package="berkeley-abc")
    script = tmp_path / "edited.py"
    body = textwrap.dedent(
        """
        import pathlib

        def main():
            path = pathlib.Path(__file__)
            path.write_text("def padding():\\n" + "    pass\\n" * 200 + path.read_text())
            report = map_luts(tables(130, bits=4), k=3, workers=2, progress=False)
            print("mapped", report.mapped, flush=True)

        if __name__ == "__main__":
            main()
        """
    )
    script.write_text(_TABLES + body)
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mapped 130" in done.stdout


@pytest.mark.slow
def test_a_guarded_script_maps_on_the_pool(tmp_path: Path) -> None:
    """The same script with its main code under a main guard maps on the pool of 2 processes."""
    require_program("berkeley-abc", package="berkeley-abc")
    script = tmp_path / "guarded.py"
    body = textwrap.dedent(
        """
        def main():
            report = map_luts(tables(130, bits=4), k=3, workers=2, progress=False)
            print("mapped", report.mapped, flush=True)

        if __name__ == "__main__":
            main()
        """
    )
    script.write_text(_TABLES + body)
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mapped 130" in done.stdout


def _children(pid: int) -> int:
    """How many processes have ``pid`` as their parent (Linux /proc)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat_file:
                fields = stat_file.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        count += int(fields[1]) == pid
    return count


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="counts worker processes through /proc")
def test_ctrl_c_while_workers_start_prints_no_worker_traceback(tmp_path: Path) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C) while the pool's workers start: the parent
    gets one KeyboardInterrupt, the workers print nothing, and everything ends within seconds."""
    require_program("berkeley-abc", package="berkeley-abc")
    script = tmp_path / "interrupted.py"
    body = textwrap.dedent(
        """
        import sys

        if __name__ == "__main__":
            work = tables(24, bits=12)
            print("mapping", flush=True)
            try:
                map_luts(work, workers=2, progress=False)
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                sys.exit(130)
        """
    )
    script.write_text(_TABLES + body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stdout.readline() == "mapping\n"
        for _ in range(600):  # until the pool has started its workers (at most 60 s)
            if _children(process.pid) >= 2:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # the workers are importing the script and iotable
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert process.returncode == 130
    assert err.splitlines() == ["interrupted"], err[-3000:]
