"""The distributed launcher of the end-to-end tests: every service a separate OS process.

PostgreSQL is the record and Redis the broker; the services are the production commands —
``provely serve ingress`` (uvicorn), ``provely serve observer``, ``provely serve verdict``,
``provely serve sweeper`` — and each Stripe sandbox is a ``provely sandbox stripe`` process. It
implements the scenario engine's ``System`` so the demo's scenarios run unchanged on it (one
engine, two launchers).

Start one with :func:`running_system`: every system gets a PostgreSQL database and a Redis
database index of its own, and leaves neither behind. Two systems must never share either:

- the broker's queues have fixed names, so workers of one system would take (or a flush would
  drop) another's messages, and a stopped system's unacknowledged messages are put back in its
  queues for whoever consumes them next;
- each system has its own ``PROVELY_SECRET_KEY``, and the receipt signing key it generates is
  stored encrypted with it in ``receipt_keys``: a second system on the same database cannot
  decrypt that key, so every evaluation that issues a receipt fails and its operations stay
  PENDING. Its sweeper would also pick up the first system's open operations.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url

from services.cli.demo.scenarios.refund_contract import write_short_timing_skill
from services.cli.demo.scenarios.system import DEFAULT_SANDBOX_OPTIONS, Sandbox
from services.cli.spawn import free_port, provely_argv
from services.cli.supervisor import ChildSpec, Supervisor

CLAIM_KEY = "provely:tests:claimed"
REDIS_DB_COUNT = 16  # Redis's default ``databases``; index 0 is left to interactive use
CLAIM_WAIT_S = 60.0

# Celery's line once a worker consumes: "observer.<pid>@<host> ready."
_READY = re.compile(r"\b(?:observer|verdict)\.\d+@[^\s\"]+ ready\.")

# Both run in Redis as one step: nobody can write to the index between the check and the claim,
# and a flush can only drop what its claimer put there.
_CLAIM_IF_EMPTY = """
if redis.call('DBSIZE') == 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
    return 1
end
return 0
"""
_FLUSH_IF_OURS = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
    redis.call('FLUSHDB')
    return 1
end
return 0
"""


def _script(client: redis.Redis[bytes], source: str, *args: str | int) -> bool:
    return bool(client.eval(source, 1, CLAIM_KEY, *args))  # type: ignore[no-untyped-call]


@contextmanager
def claimed_redis_db(redis_url: str, *, owner: str, ttl_s: int = 4 * 3600) -> Iterator[str]:
    """``redis_url`` moved to a database index that was empty and is now claimed for the caller.

    The claim is a key written only into an empty index, in one atomic step, so two test
    processes (or two fixtures of one) never get the same index. An index that holds anything
    is never taken, claimed or not (the TTL only ends the claim of a process that was killed;
    what it left keeps the index taken until someone empties it). On exit the index is flushed,
    unless someone else's claim is in it. Fails when no index frees up within
    ``CLAIM_WAIT_S``: sharing one would bring back the interference this prevents.
    """
    base, _, _index = redis_url.rpartition("/")
    token = f"{owner}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    first = secrets.randbelow(REDIS_DB_COUNT - 1)
    deadline = time.monotonic() + CLAIM_WAIT_S
    claimed: str | None = None
    while claimed is None:
        for step in range(REDIS_DB_COUNT - 1):
            url = f"{base}/{(first + step) % (REDIS_DB_COUNT - 1) + 1}"
            with redis.Redis.from_url(url) as client:
                if _script(client, _CLAIM_IF_EMPTY, token, ttl_s):
                    claimed = url
                    break
        else:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no empty Redis database index on {base} after {CLAIM_WAIT_S:.0f} s; "
                    "indexes left dirty by killed runs can be emptied with FLUSHDB"
                )
            time.sleep(1.0)
    try:
        yield claimed
    finally:
        with redis.Redis.from_url(claimed) as client:
            _script(client, _FLUSH_IF_OURS, token)


@contextmanager
def own_database(postgres_url: str, *, prefix: str = "provely_sys_") -> Iterator[str]:
    """A new, empty database on ``postgres_url``'s server; dropped (connections and all) after."""
    url = make_url(postgres_url)
    name = f"{prefix}{secrets.token_hex(6)}"
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def running_system(
    postgres_url: str,
    redis_url: str,
    workdir: Path,
    *,
    name: str = "system",
    restart_services: bool = True,
) -> Iterator[DistributedSystem]:
    """A started :class:`DistributedSystem` on a database and a Redis index of its own.

    ``postgres_url`` and ``redis_url`` name the servers (the session's fixtures, which fail
    when a server is missing); the system migrates a new database on the first and claims an
    empty index on the second. On exit, whatever happened: every process is stopped, the
    index is flushed and released, and the database is dropped. ``restart_services=False``
    leaves a service that exits dead (no outside process manager: what keeps a worker running
    is then ``provely serve`` itself).
    """
    with ExitStack() as stack:
        database = stack.enter_context(own_database(postgres_url))
        broker = stack.enter_context(claimed_redis_db(redis_url, owner=name))
        system = DistributedSystem(
            postgres_url=database,
            redis_url=broker,
            workdir=workdir,
            restart_services=restart_services,
        )
        stack.callback(system.stop)
        system.start()
        yield system


class DistributedSystem:
    def __init__(
        self,
        *,
        postgres_url: str,
        redis_url: str,
        workdir: Path,
        restart_services: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.restart_services = restart_services
        self.extra_env = dict(extra_env or {})
        self.port = free_port()
        self.metrics_ports = {
            name: free_port() for name in ("ingress", "observer", "verdict", "sweeper", "metrics")
        }
        self.env: dict[str, str] = {}
        self._postgres_url = postgres_url
        self._redis_url = redis_url
        self._sandboxes: list[subprocess.Popen[bytes]] = []
        self.supervisor: Supervisor | None = None

    @property
    def postgres_url(self) -> str:
        return self._postgres_url

    @property
    def redis_url(self) -> str:
        return self._redis_url

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
        env.update(write_short_timing_skill(self.workdir / "demo-skill"))
        env.update(
            {
                "PROVELY_DATABASE_URL": self._postgres_url,
                "PROVELY_BROKER_URL": self._redis_url,
                "PROVELY_REDIS_URL": self._redis_url,
                "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
                "PROVELY_DATA_DIR": str(self.workdir / "data"),
                "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.5",
                "PROVELY_SWEEPER_GRACE_SECONDS": "2",
                "PROVELY_JITTER_RATIO": "0",
                "PROVELY_LOG_JSON": "true",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.env = self._environment()
        self.cli(["db", "upgrade"])
        specs = [
            ChildSpec(
                "ingress",
                [
                    "serve",
                    "ingress",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                    "--metrics-port",
                    str(self.metrics_ports["ingress"]),
                ],
            ),
            ChildSpec(
                "observer",
                [
                    "serve",
                    "observer",
                    "--concurrency",
                    "2",
                    "--metrics-port",
                    str(self.metrics_ports["observer"]),
                ],
            ),
            ChildSpec(
                "verdict",
                [
                    "serve",
                    "verdict",
                    "--concurrency",
                    "1",
                    "--metrics-port",
                    str(self.metrics_ports["verdict"]),
                ],
            ),
            ChildSpec(
                "sweeper",
                ["serve", "sweeper", "--metrics-port", str(self.metrics_ports["sweeper"])],
            ),
            ChildSpec(
                "metrics", ["serve", "metrics", "--port", str(self.metrics_ports["metrics"])]
            ),
        ]
        for spec in specs:
            spec.restart = self.restart_services
        self.supervisor = Supervisor(
            specs, env=self.env, log_dir=self.workdir / "logs", echo=lambda _line: None
        )
        self.supervisor.start()
        deadline = time.monotonic() + 60
        while True:
            self.supervisor.poll()
            try:
                if httpx.get(f"{self.api_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the ingress did not start:\n" + self.log_tail())
            time.sleep(0.1)
        self._wait_workers_ready(deadline)

    def _wait_workers_ready(self, deadline: float) -> None:
        """Wait until the observer's and the verdict's Celery workers say they are ready
        (consuming), so that a test's clock does not start while a worker is still booting."""
        assert self.supervisor is not None
        logs = self.workdir / "logs"
        waiting = {"observer", "verdict"}
        while waiting:
            self.supervisor.poll()
            for role in sorted(waiting):
                path = logs / f"{role}.log"
                if path.exists() and _READY.search(path.read_text("utf-8", errors="replace")):
                    waiting.discard(role)
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {', '.join(sorted(waiting))} worker did not start:\n" + self.log_tail()
                )
            time.sleep(0.1)

    def wait_ready(self) -> None:
        """``start`` already waited for the API and the workers."""

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        for process in self._sandboxes:
            process.terminate()
        for process in self._sandboxes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def cli(self, args: Any) -> str:
        run = subprocess.run(
            provely_argv(*args), env=self.env, capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            raise RuntimeError(f"provely {' '.join(args[:2])} failed: {run.stderr.strip()}")
        return run.stdout

    def create_workspace(self, name: str) -> tuple[str, str]:
        created = json.loads(self.cli(["workspace", "create", name]))
        return created["workspace_id"], created["api_key"]

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        self.cli(
            [
                "connection",
                "set",
                "--workspace",
                workspace_id,
                "--provider",
                "stripe",
                "--webhook-secret",
                webhook_secret,
                "--api-key",
                api_key,
                "--base-url",
                base_url,
            ]
        )

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")
        self.cli(
            [
                "connection",
                "set",
                "--workspace",
                workspace_id,
                "--provider",
                "http",
                "--webhook-secret",
                secret,
                "--base-url",
                base_url,
            ]
        )

    def new_sandbox(self) -> Sandbox:
        port = free_port()
        with (self.workdir / "logs" / f"sandbox-{port}.log").open("ab") as log:
            process = subprocess.Popen(
                provely_argv(
                    "sandbox",
                    "stripe",
                    "--port",
                    str(port),
                    "--settle-ms",
                    str(DEFAULT_SANDBOX_OPTIONS["settle_ms"]),
                ),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._sandboxes.append(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the sandbox did not start:\n" + self.log_tail()) from None
                time.sleep(0.05)
        return Sandbox(base_url=f"http://127.0.0.1:{port}")

    def log_tail(self, lines: int = 30) -> str:
        chunks = []
        for path in sorted((self.workdir / "logs").glob("*.log")):
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)
