"""A real dask cluster for the tests: a scheduler and two worker processes started with the ``dask`` command
line, as a user starts one on their machines, each under a deadline and ended with its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: How long the scheduler and the workers may take to come up.
START_SECONDS = 90.0


class Cluster:
    """``dask scheduler`` and ``dask worker`` processes (one worker process and one thread each), and a
    ``distributed.Client`` connected to them (:attr:`client`)."""

    def __init__(self, folder: Path, workers: int = 2) -> None:
        from distributed import Client

        self.folder = folder
        self.file = folder / "scheduler.json"
        dask = str(Path(sys.executable).with_name("dask"))
        env = dict(os.environ)
        # the workers import iotable (and the tests' modules, whose functions some tasks run) from this tree
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        self.env = env
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            self._start(
                [dask, "scheduler", "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)], "scheduler"
            )
            deadline = time.monotonic() + START_SECONDS
            while not self.file.exists():
                self._alive()
                if time.monotonic() > deadline:
                    raise RuntimeError("the dask scheduler wrote no scheduler file in time")
                time.sleep(0.1)
            worker = [dask, "worker", "--scheduler-file", str(self.file), "--nworkers", "1", "--nthreads", "1"]
            worker += ["--no-dashboard", "--death-timeout", "60", "--local-directory", str(folder)]
            for index in range(workers):
                self._start(worker, f"worker-{index}")
            self.client = Client(scheduler_file=str(self.file), timeout=START_SECONDS)
            self.client.wait_for_workers(workers, timeout=START_SECONDS)
        except BaseException:
            self.close()
            raise

    def _start(self, command: list[str], name: str) -> None:
        log = open(self.folder / f"{name}.log", "wb")  # the process keeps it open
        with log:
            process = subprocess.Popen(
                command, cwd=self.folder, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)

    def _alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in self.folder.glob("*.log"))
                raise RuntimeError(f"a dask process ended at start (status {process.returncode}):\n{logs}")

    def worker_pids(self) -> dict[str, int]:
        """Each worker's address and the pid of the process that runs its tasks."""
        return self.client.run(os.getpid)

    def kill_worker(self, address: str) -> None:
        """End the worker process at ``address`` at once (SIGKILL), as a machine that fails; its nanny starts
        a fresh one."""
        os.kill(self.worker_pids()[address], signal.SIGKILL)

    def close(self) -> None:
        """Close the client, then end every process group (SIGTERM, then SIGKILL after a few seconds)."""
        client = getattr(self, "client", None)
        if client is not None:
            client.close(timeout=10)
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
