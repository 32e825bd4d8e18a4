"""The processes of the pipeline benchmark: Celery workers started from the project's ``.venv``
(ready when their log says so, or a prefork pool has its children), the sweeper, and their
resident memory read from ``/proc``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["Workers", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(ROOT / ".venv" / "bin" / "celery")


class Workers:
    def __init__(self, env: dict[str, str], logs: Path, pool: str) -> None:
        self.env = env
        self.logs = logs
        self.pool = pool  # the Celery pool of every worker (--pool)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, queues: str, concurrency: int, app_path: str) -> None:
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        offset = log.stat().st_size
        proc = subprocess.Popen(
            [CELERY, "-A", app_path, "worker", "-Q", queues, "-c", str(concurrency),
             "-n", f"{name}-{time.monotonic_ns()}@%h", "-P", self.pool, "--without-gossip",
             "--without-mingle",
             "--without-heartbeat", "-l", "INFO"],
            cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        handle.close()
        self.procs[name] = proc
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:])
            with log.open("rb") as fh:
                fh.seek(offset)
                ready = b"ready" in fh.read()
                if ready or (self.pool == "prefork" and self._has_children(proc.pid, concurrency)):
                    time.sleep(0.5)
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready")

    @staticmethod
    def _has_children(pid: int, count: int) -> bool:
        return len(_children(pid)) >= count

    def start_sweeper(self) -> None:
        """The sweeper, as production runs it next to the workers."""
        log = (self.logs / "sweeper.log").open("ab")
        code = "from services.verdict.sweeper import run_forever; run_forever()"
        self.procs["sweeper"] = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def rss_mb(self, name: str) -> float:
        pid = self.procs[name].pid
        total = 0
        for p in [pid, *_children(pid)]:
            try:
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            for child in text:
                found.append(int(child))
                found.extend(_children(int(child)))
    except OSError:
        pass
    return found


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError("benchmark did not finish in time")
