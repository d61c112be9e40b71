"""The default process pool of map_luts/cost: a script without a main guard is refused before a worker
starts, and Ctrl-C while workers start or run ends in one line, not a traceback per worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
