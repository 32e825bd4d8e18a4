"""The embedded system: the production code with two local stand-ins, a SQLite database file
and kombu's SQLAlchemy broker (a second SQLite file), both under ``PROVELY_DATA_DIR``.

:class:`EmbeddedSystem` applies the migrations, then starts each service as its own child
process — exactly the ``provely serve …`` commands a deployment runs — under a
:class:`~services.cli.supervisor.Supervisor`, and waits for the API to answer. It is a context
manager, used by ``provely up`` and ``provely demo``.
"""

from __future__ import annotations

import os
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
