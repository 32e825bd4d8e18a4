"""The embedded system: the production code with two local stand-ins, a SQLite database file
and kombu's SQLAlchemy broker (a second SQLite file), both under ``PROVELY_DATA_DIR``.

:class:`EmbeddedSystem` applies the migrations, then starts each service as its own child
process — exactly the ``provely serve …`` commands a deployment runs — under a
:class:`~services.cli.supervisor.Supervisor`, and waits for the API to answer. It is a context
manager, used by ``provely up`` and ``provely demo``.

With ``PROVELY_METRICS_PORT`` set, the system serves its metrics there as a deployment does: the
services write their counters to one directory of their own (``PROMETHEUS_MULTIPROC_DIR``, made
at start and removed at stop), and a fifth child, ``provely serve metrics``, serves them
aggregated, with the database-wide gauges, on ``PROVELY_METRICS_HOST:PROVELY_METRICS_PORT``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.cli.supervisor import ChildSpec, Supervisor, SupervisorError

__all__ = ["EmbeddedSystem"]


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
    metrics_port: int | None = None
    """Where the system's metrics are served (default: ``PROVELY_METRICS_PORT``; unset: none)."""
    _metrics_dir: str | None = field(default=None, init=False, repr=False)

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
        # One port serves the whole system (the metrics child, from the services' shared
        # directory): no service serves its own.
        env.pop("PROVELY_METRICS_PORT", None)
        if self._metrics_dir is not None:
            env["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir
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
            *(
                [ChildSpec("metrics", ["serve", "metrics", "--port", str(port)])]
                if (port := self._served_metrics_port()) is not None
                else []
            ),
        ]

    def _served_metrics_port(self) -> int | None:
        if self.metrics_port is not None:
            return self.metrics_port
        from shared.runtime.settings import get_settings

        return get_settings().metrics_port

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
        if self._served_metrics_port() is not None and self._metrics_dir is None:
            self._metrics_dir = tempfile.mkdtemp(prefix="provely-metrics-")
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
        if self._metrics_dir is not None:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
            self._metrics_dir = None

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
