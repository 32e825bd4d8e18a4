"""The supervisor behind ``provely up``: restarts, gives up on a service that cannot start."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.cli.supervisor import ChildSpec, Supervisor, SupervisorError

pytestmark = pytest.mark.e2e


class _Impatient(Supervisor):
    MAX_QUICK_FAILURES = 2


def _until_raises(step: Callable[[], None], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step()
        time.sleep(0.1)


def test_a_service_that_keeps_failing_at_start_stops_the_system(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = _Impatient(
        [ChildSpec("broken", ["serve", "observer", "--pool", "no-such-pool"])],
        env=dict(os.environ),
        log_dir=tmp_path,
        echo=lines.append,
    )
    supervisor.start()
    with pytest.raises(SupervisorError, match="broken keeps exiting right after it starts"):
        _until_raises(supervisor.poll, 60)
    supervisor.stop()
    assert any("restarting in" in line for line in lines), lines
    assert "--pool must be one of" in (tmp_path / "broken.log").read_text()


def test_check_running_reports_a_service_that_died_at_start(tmp_path: Path) -> None:
    supervisor = Supervisor(
        [ChildSpec("broken", ["serve", "verdict", "--pool", "no-such-pool"])],
        env=dict(os.environ),
        log_dir=tmp_path,
        echo=lambda _line: None,
    )
    supervisor.start()
    try:
        with pytest.raises(SupervisorError, match="broken exited with code 2 at start"):
            _until_raises(supervisor.check_running, 30)
    finally:
        supervisor.stop()
