"""The supervisor of ``provely`` child processes, one per service:

- a child that dies is restarted with a growing back-off (a service that keeps dying at start,
  e.g. on a port in use, stops the whole system with an error instead of looping);
- stopping sends SIGTERM to every child (uvicorn finishes its requests, the Celery workers their
  tasks; anything unacknowledged stays in the broker), then kills what is still running after
  the grace period;
- children stop themselves when their supervisor disappears (``services.cli.spawn``), so none
  is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import typer

from services.cli.spawn import provely_argv

__all__ = ["ChildSpec", "Supervisor", "SupervisorError"]


@dataclass
class ChildSpec:
    """One supervised service: a name and the ``provely`` arguments that run it."""

    name: str
    args: list[str]
    restart: bool = True


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_failures: int = 0
    restart_at: float | None = None
    log: IO[bytes] | None = None


class SupervisorError(RuntimeError):
    """A service cannot be kept running (it keeps exiting right after it starts)."""


class Supervisor:
    """Start, watch, restart and stop a set of ``provely`` child processes."""

    QUICK_EXIT_S = 10.0
    MAX_QUICK_FAILURES = 5
    MAX_BACKOFF_S = 30.0

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        env: Mapping[str, str],
        log_dir: Path | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self._children = {spec.name: _Child(spec) for spec in specs}
        self._env = dict(env)
        self._log_dir = log_dir
        self._echo = echo or (lambda line: typer.echo(line, err=True))
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        for child in self._children.values():
            self._spawn(child)

    def _spawn(self, child: _Child) -> None:
        stdout: Any = None
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            if child.log is None:
                child.log = (self._log_dir / f"{child.spec.name}.log").open("ab")
            stdout = child.log
        child.process = subprocess.Popen(
            provely_argv(*child.spec.args),
            env=self._env,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops the rest
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        self._echo(f"started {child.spec.name} (pid {child.process.pid})")

    def pid(self, name: str) -> int | None:
        process = self._children[name].process
        return process.pid if process is not None and process.poll() is None else None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a service (tests use SIGKILL to crash one on purpose)."""
        process = self._children[name].process
        if process is not None and process.poll() is None:
            process.send_signal(sig)

    def wait(self, name: str, timeout_s: float) -> int:
        """Wait for a service to exit (after ``kill``); return its exit code."""
        process = self._children[name].process
        assert process is not None
        return process.wait(timeout=timeout_s)

    def poll(self) -> None:
        """Restart children that exited (call regularly); raise when one cannot stay up."""
        if self._stopping:
            return
        now = time.monotonic()
        for child in self._children.values():
            process = child.process
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    self._spawn(child)
                continue
            if process is None or process.poll() is None:
                continue
            code = process.returncode
            if not child.spec.restart:
                continue
            ran = now - child.started_at
            child.quick_failures = child.quick_failures + 1 if ran < self.QUICK_EXIT_S else 0
            if child.quick_failures >= self.MAX_QUICK_FAILURES:
                raise SupervisorError(
                    f"{child.spec.name} keeps exiting right after it starts (last exit code "
                    f"{code}); see its output"
                    + (f" in {self._log_dir / (child.spec.name + '.log')}" if self._log_dir else "")
                )
            backoff = min(self.MAX_BACKOFF_S, 0.5 * 2**child.quick_failures)
            self._echo(f"{child.spec.name} exited with code {code}; restarting in {backoff:.1f} s")
            child.restart_at = now + backoff

    def check_running(self) -> None:
        """Raise when a service has exited (used while waiting for the system to start)."""
        for child in self._children.values():
            process = child.process
            if process is not None and process.poll() is not None:
                where = (
                    f"; see {self._log_dir / (child.spec.name + '.log')}" if self._log_dir else ""
                )
                raise SupervisorError(
                    f"{child.spec.name} exited with code {process.returncode} at start{where}"
                )

    def restart(self, name: str) -> None:
        """Start a service again now (after ``kill``)."""
        child = self._children[name]
        if child.process is not None and child.process.poll() is None:
            return
        child.restarts += 1
        self._spawn(child)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM every service's main process, wait up to ``grace_s``, then SIGKILL the rest.

        Only the main process gets SIGTERM: it stops its own children (uvicorn's workers,
        Celery's pool) in order. Signalling the whole group would kill a Celery pool process
        under a running task and make the worker wait for replacements.
        """
        self._stopping = True
        running = [
            c.process
            for c in self._children.values()
            if c.process is not None and c.process.poll() is None
        ]
        for process in running:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in running:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self._echo(f"pid {process.pid} did not stop in {grace_s:.0f} s; killing it")
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        # A process group may still hold children that outlived their parent.
        for process in running:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for child in self._children.values():
            if child.log is not None:
                child.log.close()
                child.log = None
