"""``provely serve``'s worker keeper: restarts with back-off, gives up, stops on a signal."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from services.cli.keeper import WorkerKeeper

pytestmark = pytest.mark.e2e


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _note(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    info = warning = error = _note

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.events if name == event]


def _keeper(script: str, log: Log, **limits: Any) -> WorkerKeeper:
    keeper = WorkerKeeper(role="verdict", argv=[sys.executable, "-c", script], log=log)
    for name, value in {"FIRST_BACKOFF_S": 0.05, **limits}.items():
        setattr(keeper, name, value)
    return keeper


def test_a_worker_that_keeps_failing_at_start_is_given_up_with_its_code() -> None:
    log = Log()
    keeper = _keeper("raise SystemExit(3)", log, MAX_QUICK_FAILURES=3)
    assert keeper.run() == 3
    exits = log.named("worker.exited")
    assert [e["exit_code"] for e in exits] == [3, 3]
    waits = [e["restart_in_s"] for e in exits]
    assert waits == sorted(waits)
    assert waits[0] < waits[1]
    assert len(log.named("worker.restarting")) == 2
    assert log.named("worker.giving_up")[0]["quick_exits"] == 3


def test_a_worker_that_dies_is_restarted_and_a_sigterm_stops_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    grandchild = tmp_path / "grandchild"
    # Runs 1 and 2 leave a process in their group and die; run 3 serves until SIGTERM.
    script = f"""
import os, pathlib, signal, subprocess, sys, time
runs = pathlib.Path({str(runs)!r})
n = len(runs.read_text()) if runs.exists() else 0
runs.write_text("x" * (n + 1))
if n < 2:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path({str(grandchild)!r} + str(n)).write_text(str(p.pid))
    os.kill(os.getpid(), signal.SIGKILL)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.1)
"""
    log = Log()
    keeper = _keeper(script, log)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(keeper.run()))
    thread.start()
    deadline = time.monotonic() + 30
    while (not runs.exists() or len(runs.read_text()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    keeper.request_stop(signal.SIGTERM)
    thread.join(timeout=30)
    assert result == [0]
    assert len(runs.read_text()) == 3
    assert keeper.restarts == 2
    assert [e["exit_code"] for e in log.named("worker.exited")] == [-9, -9, 0]
    for n in (0, 1):  # what a killed worker left in its group was killed with it
        pid = int((tmp_path / f"grandchild{n}").read_text())
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
