"""CLI: ``provely up`` — the whole system on one machine, with no external server.

The embedded default is the production code with two local stand-ins: a SQLite database file
and kombu's SQLAlchemy broker (a second SQLite file), both under ``PROVELY_DATA_DIR``. ``up``
applies the migrations, then starts each service as its own child process — exactly the
``provely serve …`` commands a deployment runs — and supervises them:

- a child that dies is restarted with a growing back-off (a service that keeps dying at start,
  e.g. on a port in use, stops the whole system with an error instead of looping);
- Ctrl-C or SIGTERM stops every child gracefully (SIGTERM: uvicorn finishes its requests, the
  Celery workers their tasks; anything unacknowledged stays in the broker), then kills what is
  still running after the grace period;
- children stop themselves when their supervisor disappears, so none is left behind.

Everything durable lives in the data directory: stop, start again, and open operations carry on
from ``next_observation_at`` (the sweeper re-sends what came due meanwhile).

:class:`EmbeddedSystem` is the same machinery as a context manager, used by ``provely demo``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import typer

__all__ = [
    "ChildSpec",
    "EmbeddedSystem",
    "Supervisor",
    "free_port",
    "provely_argv",
    "register",
]

# Runs the ``provely`` CLI in a child that stops itself (SIGTERM, so gracefully) when its
# parent goes away: a watcher thread compares the parent pid once a second. (The kernel's
# parent-death signal would follow the *thread* that spawned the child, not the process.)
_BOOTSTRAP = (
    "import os, signal, sys, threading, time\n"
    "_parent = os.getppid()\n"
    "def _watch():\n"
    "    while os.getppid() == _parent:\n"
    "        time.sleep(1.0)\n"
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "threading.Thread(target=_watch, name='parent-watch', daemon=True).start()\n"
    "sys.argv[0] = 'provely'\n"
    "from services.cli.main import main\n"
    "main()\n"
)


def provely_argv(*args: str) -> list[str]:
    """The argv that runs ``provely ARGS…`` with this interpreter (no PATH lookup needed)."""
    return [sys.executable, "-c", _BOOTSTRAP, *args]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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


def _wait_http(url: str, *, timeout_s: float, alive: Callable[[], None]) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last: str = "no answer"
    while time.monotonic() < deadline:
        alive()
        try:
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = exc.__class__.__name__
        time.sleep(0.1)
    raise SupervisorError(f"{url} did not answer in {timeout_s:.0f} s ({last})")


@dataclass
class EmbeddedSystem:
    """The embedded system as a context manager: migrate, start the services, wait for the API.

    ``env`` overrides go to every child (e.g. ``PROVELY_CONTRACT_PATHS``). The database and the
    broker are the SQLite files of ``data_dir`` unless ``embedded_only`` is false and the
    environment names others.
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    observer_concurrency: int = 2
    verdict_concurrency: int = 2
    env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    embedded_only: bool = True
    echo: Callable[[str], None] | None = None
    startup_timeout_s: float = 60.0
    supervisor: Supervisor | None = None

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        data_dir = self.data_dir.resolve()
        env["PROVELY_DATA_DIR"] = str(data_dir)
        if self.embedded_only:
            env["PROVELY_DATABASE_URL"] = f"sqlite:///{data_dir / 'provely.db'}"
            env["PROVELY_BROKER_URL"] = f"sqla+sqlite:///{data_dir / 'broker.db'}"
            env.pop("PROVELY_REDIS_URL", None)
        # One port cannot serve the four services: the embedded system serves no metrics
        # (each service of a deployment gets its own --metrics-port).
        env.pop("PROVELY_METRICS_PORT", None)
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def specs(self) -> list[ChildSpec]:
        return [
            ChildSpec(
                "ingress",
                ["serve", "ingress", "--host", self.host, "--port", str(self.port)],
            ),
            ChildSpec(
                "observer",
                ["serve", "observer", "--concurrency", str(self.observer_concurrency)],
            ),
            ChildSpec(
                "verdict",
                ["serve", "verdict", "--concurrency", str(self.verdict_concurrency)],
            ),
            ChildSpec("sweeper", ["serve", "sweeper"]),
        ]

    def prepare(self) -> None:
        """Create the data directory, migrate the database, create the broker's tables and
        queues."""
        from sqlalchemy.exc import SQLAlchemyError

        from shared.db.migrate import upgrade
        from shared.runtime.celery_app import prepare_embedded_broker
        from shared.runtime.datafiles import private_dir
        from shared.runtime.settings import Settings

        env = self.child_env()
        private_dir(self.data_dir)
        settings = Settings(
            data_dir=Path(env["PROVELY_DATA_DIR"]),
            database_url=env.get("PROVELY_DATABASE_URL") or None,
            broker_url=env.get("PROVELY_BROKER_URL") or None,
        )
        try:
            upgrade(settings.resolved_database_url(), "head")
            prepare_embedded_broker(settings.resolved_broker_url())
        except SQLAlchemyError as exc:
            first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            raise SupervisorError(f"cannot prepare the database: {first}") from None

    def start(self) -> None:
        """Prepare, then start every service (without waiting for them)."""
        self.prepare()
        self.supervisor = Supervisor(
            self.specs(), env=self.child_env(), log_dir=self.log_dir, echo=self.echo
        )
        self.supervisor.start()

    def wait_ready(self) -> None:
        """Wait until the API answers (restarting services that die meanwhile)."""
        assert self.supervisor is not None
        _wait_http(
            f"{self.api_url}/healthz",
            timeout_s=self.startup_timeout_s,
            alive=self.supervisor.check_running,
        )

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()

    def __enter__(self) -> EmbeddedSystem:
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def _signals_stop(flag: list[bool]) -> Iterator[None]:
    def handler(signum: int, _frame: Any) -> None:
        flag.append(True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def up(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Where the database and broker live (default: PROVELY_DATA_DIR)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address of the HTTP API."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port of the HTTP API."),
    observer_concurrency: int = typer.Option(2, "--observer-concurrency", min=1),
    verdict_concurrency: int = typer.Option(2, "--verdict-concurrency", min=1),
    log_dir: Path | None = typer.Option(
        None, "--log-dir", help="Write each service's output to DIR/<service>.log."
    ),
) -> None:
    """Run the whole system on this machine (SQLite, embedded broker); Ctrl-C stops it."""
    from shared.runtime.settings import get_settings

    directory = data_dir or get_settings().data_dir
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind((host, port))
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}", err=True)
        raise typer.Exit(1) from None
    system = EmbeddedSystem(
        data_dir=directory,
        host=host,
        port=port,
        observer_concurrency=observer_concurrency,
        verdict_concurrency=verdict_concurrency,
        log_dir=log_dir,
        embedded_only=False,
        env={"PROVELY_LOG_JSON": os.environ.get("PROVELY_LOG_JSON", "false")},
    )
    stop: list[bool] = []
    with _signals_stop(stop):
        try:
            system.__enter__()
        except SupervisorError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(
            f"Provely is up: API {system.api_url} (data in {directory.resolve()}); "
            "Ctrl-C stops it.",
            err=True,
        )
        if data_dir is not None:
            typer.echo(
                f"Admin commands act on this system with PROVELY_DATA_DIR={directory.resolve()}, "
                "e.g. `provely workspace create NAME`.",
                err=True,
            )
        code = 0
        try:
            assert system.supervisor is not None
            while not stop:
                system.supervisor.poll()
                time.sleep(0.2)
        except SupervisorError as exc:
            typer.echo(f"error: {exc}", err=True)
            code = 1
        finally:
            typer.echo("stopping …", err=True)
            system.__exit__(None, None, None)
            typer.echo("stopped", err=True)
        if code:
            raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``up`` to the root app."""
    app.command("up")(up)
