"""Keeps one Celery worker running: ``provely serve observer|verdict`` without a process manager.

``provely serve observer`` (and ``verdict``) is a small parent process that runs the Celery
worker as its child (the same command with ``--no-supervise``) and starts it again when it
exits without having been asked to: a worker killed by the kernel or by hand, or one that
stopped on an error it could not recover from (a broker restart once did that, see
docs/reliability.md). Each exit and each restart is logged (``worker.exited``,
``worker.restarting``), with the exit code and the wait.

- The wait before a restart doubles with each exit that comes soon after a start (from
  ``FIRST_BACKOFF_S`` up to ``MAX_BACKOFF_S``); a worker that ran ``QUICK_EXIT_S`` or longer is
  restarted after the first wait again. After ``MAX_QUICK_FAILURES`` quick exits in a row the
  parent gives up and exits with the worker's code, so an orchestrator sees a service that
  cannot start (a broker that refuses the password, a port in use) instead of a restart loop.
- SIGTERM and SIGINT are passed on to the worker once (a warm shutdown: running tasks finish,
  unacknowledged messages go back to the broker); the parent then exits with the worker's code.
- The worker runs in a session of its own, so a terminal's Ctrl-C reaches it once, through the
  parent. When it has exited, whatever it left in its process group (pool processes of a worker
  that was killed) is killed before the next one starts. The worker stops itself when the
  parent disappears (see ``services.cli.spawn.provely_argv``).

Everything a worker does is idempotent and fenced, and PostgreSQL holds every schedule, so a
restart loses nothing: what the dead worker held is delivered again or re-sent by the sweeper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WorkerKeeper"]


@dataclass
class WorkerKeeper:
    """Run ``argv`` as a child and keep it running until :meth:`request_stop` (or a signal)."""

    role: str
    argv: Sequence[str]
    log: Any
    env: dict[str, str] | None = None
    QUICK_EXIT_S: float = 10.0
    FIRST_BACKOFF_S: float = 0.5
    MAX_BACKOFF_S: float = 30.0
    MAX_QUICK_FAILURES: int = 8
    restarts: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _child: subprocess.Popen[bytes] | None = None

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop: pass ``signum`` to the running worker once and start no other."""
        first = not self._stop.is_set()
        self._stop.set()
        child = self._child
        if first and child is not None and child.poll() is None:
            with suppress(ProcessLookupError):
                child.send_signal(signum)

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.log.info("worker.stop_requested", role=self.role, signal=signum)
            self.request_stop(signum)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _spawn(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            list(self.argv),
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._child = child
        return child

    @staticmethod
    def _reap_group(pid: int) -> None:
        """Kill what the worker left in its process group (pool processes of a killed worker)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def run(self) -> int:
        """Run until stopped; return the exit code the parent should exit with."""
        quick_failures = 0
        while True:
            started = time.monotonic()
            child = self._spawn()
            self.log.info("worker.started", role=self.role, pid=child.pid, restarts=self.restarts)
            if self._stop.is_set():  # a signal arrived while it was being started
                with suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)
            code = self._wait(child)
            self._reap_group(child.pid)
            self._child = None
            if self._stop.is_set():
                self.log.info("worker.exited", role=self.role, pid=child.pid, exit_code=code)
                return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else _exit_code(code)
            ran_s = time.monotonic() - started
            quick_failures = quick_failures + 1 if ran_s < self.QUICK_EXIT_S else 0
            if quick_failures >= self.MAX_QUICK_FAILURES:
                self.log.error(
                    "worker.giving_up",
                    role=self.role,
                    exit_code=code,
                    quick_exits=quick_failures,
                    hint="it keeps exiting right after it starts; see its output above",
                )
                return _exit_code(code) or 1
            backoff = min(self.MAX_BACKOFF_S, self.FIRST_BACKOFF_S * 2 ** max(0, quick_failures))
            self.log.warning(
                "worker.exited",
                role=self.role,
                pid=child.pid,
                exit_code=code,
                ran_s=round(ran_s, 1),
                restart_in_s=backoff,
            )
            if self._stop.wait(backoff):
                return 0
            self.restarts += 1
            self.log.warning("worker.restarting", role=self.role, restarts=self.restarts)

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        while True:
            try:
                return child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue


def _exit_code(code: int) -> int:
    """A child's return code as an exit status (a signal ``-n`` becomes ``128 + n``)."""
    return 128 - code if code < 0 else code
