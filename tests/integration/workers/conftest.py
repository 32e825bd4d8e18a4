"""Harness of the workers' integration tests: real PostgreSQL, real Redis, real Celery workers.

- ``provider``: a small refund API on a loopback port whose answers the test steers
  (succeeded, pending, failed, 503, hanging …) and which records when each refund was read.
- ``cluster``: the observer worker, the verdict worker and a sweeper as separate OS processes
  (``celery -A shared.runtime.celery_app worker -Q observe|verdict``), configured through
  ``PROVELY_*`` variables to use the session's database and a random Redis db index. The observer
  can be killed (SIGKILL of its whole process group) and restarted.
- helpers that create a workspace, its connection, a short-timing contract and operations the
  as the action report leaves them (state OBSERVING, first observation scheduled, then sent).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from cryptography.fernet import Fernet
from sqlalchemy import Engine, select

from shared.core.contract import Contract, contract_hash
from shared.db.models import Connection, CustomContract, Observation, Operation, Workspace
from shared.db.session import make_engine, session_scope
from shared.lifecycle.messages import observe as dispatch_observe
from shared.lifecycle.scheduling import schedule_observation
from shared.runtime.settings import Settings
from shared.trust.secrets import encrypt, encrypt_webhook_secrets
from tests.integration.conftest import truncate_all

ROOT = Path(__file__).resolve().parents[3]
CELERY = str(ROOT / ".venv" / "bin" / "celery")
API_KEY = "sk_test_workers"
SECRET_KEY = Fernet.generate_key().decode()
# The workers' pool: prefork (the default deployment) unless PROVELY_TEST_WORKER_POOL says.
WORKER_POOL = os.environ.get("PROVELY_TEST_WORKER_POOL", "prefork")


# --------------------------------------------------------------------------------------------
# A provider that answers as the test says
# --------------------------------------------------------------------------------------------


@dataclass
class RefundPlan:
    """How the provider answers for one refund id."""

    body: dict[str, Any]
    mode: str = "ok"  # ok | unavailable | hang | missing
    pending_reads: int = 0  # answer status "pending" for the first N reads


@dataclass
class FakeProvider:
    url: str = ""
    plans: dict[str, RefundPlan] = field(default_factory=dict)
    reads: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)
    unauthorised: int = 0
    paths: list[str] = field(default_factory=list)  # every GET's path, as the server got it

    def refund(
        self,
        refund_id: str,
        *,
        amount: int = 1000,
        currency: str = "usd",
        charge: str = "ch_1",
        status: str = "succeeded",
        created: int | None = None,
        mode: str = "ok",
        pending_reads: int = 0,
    ) -> None:
        body = {
            "id": refund_id,
            "object": "refund",
            "amount": amount,
            "currency": currency,
            "charge": charge,
            "status": status,
            "created": created,  # None: stamped at the first read (made after the operation)
        }
        with self.lock:
            self.plans[refund_id] = RefundPlan(body=body, mode=mode, pending_reads=pending_reads)

    def set_mode(self, refund_id: str, mode: str) -> None:
        with self.lock:
            self.plans[refund_id].mode = mode

    def answer(self, refund_id: str, authorised: bool) -> tuple[int, dict[str, Any] | None, float]:
        with self.lock:
            self.reads[refund_id].append(time.time())
            if not authorised:
                self.unauthorised += 1
                return 401, {"error": {"type": "invalid_request_error"}}, 0.0
            plan = self.plans.get(refund_id)
            if plan is None or plan.mode == "missing":
                return 404, {"error": {"type": "invalid_request_error"}}, 0.0
            if plan.mode == "unavailable":
                return 503, {"error": {"type": "api_error"}}, 0.0
            if plan.mode == "hang":
                return 503, None, 3.0
            if plan.body["created"] is None:
                plan.body["created"] = int(time.time())
            body = dict(plan.body)
            if len(self.reads[refund_id]) <= plan.pending_reads:
                body["status"] = "pending"
            return 200, body, 0.0


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with provider.lock:
                provider.paths.append(self.path)
            prefix = "/v1/refunds/"
            if not self.path.startswith(prefix):
                self._send(404, {"error": "no route"})
                return
            authorised = self.headers.get("Authorization") == f"Bearer {API_KEY}"
            code, body, delay = provider.answer(self.path[len(prefix) :], authorised)
            if delay:
                time.sleep(delay)
            self._send(code, body)

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the reader gave up (timeout)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------


def flush_redis(url: str) -> None:
    """Empty the test's Redis database (FLUSHALL only in CI, where Redis is ours alone)."""
    client = redis.Redis.from_url(url)
    try:
        if os.environ.get("CI") == "true":
            client.flushall()
        else:
            client.flushdb()
    finally:
        client.close()


@dataclass
class Cluster:
    env: dict[str, str]
    settings: Settings
    engine: Engine
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _start(self, name: str, argv: list[str], ready: str | None) -> None:
        log_path = self.logs / f"{name}.log"
        handle = log_path.open("ab")
        start = log_path.stat().st_size
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        self.processes[name] = proc
        if ready is None:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {log_path.read_text()[-3000:]}")
            with log_path.open("rb") as fh:
                fh.seek(start)
                if ready.encode() in fh.read():
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready: {log_path.read_text()[-3000:]}")

    def start_observer(self, concurrency: int = 4) -> None:
        self._start(
            "observer",
            [
                CELERY,
                "-A",
                "shared.runtime.celery_app",
                "worker",
                "-Q",
                "observe",
                "-c",
                str(concurrency),
                "-P",
                WORKER_POOL,
                "-n",
                f"observer-{time.monotonic_ns()}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
            ],
            "ready.",
        )

    def start_verdict(self, concurrency: int = 2) -> None:
        self._start(
            "verdict",
            [
                CELERY,
                "-A",
                "shared.runtime.celery_app",
                "worker",
                "-Q",
                "verdict",
                "-c",
                str(concurrency),
                "-P",
                WORKER_POOL,
                "-n",
                f"verdict-{time.monotonic_ns()}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
            ],
            "ready.",
        )

    def start_sweeper(self) -> None:
        code = (
            "import logging; logging.basicConfig(level=logging.INFO);"
            "print('sweeper ready.', flush=True);"
            "from services.verdict.sweeper import run_forever; run_forever()"
        )
        self._start("sweeper", [sys.executable, "-c", code], "sweeper ready.")

    def kill(self, name: str) -> None:
        """SIGKILL the process and every process it started (its session)."""
        proc = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, name: str) -> None:
        proc = self.processes.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def log_tail(self, name: str, size: int = 4000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""


@pytest.fixture(scope="module")
def cluster(migrated_postgres_url: str, redis_url: str) -> Iterator[Cluster]:
    """Observer, verdict worker and sweeper processes on the session's database and Redis."""
    from shared.runtime import celery_app

    # Not under pytest's base temp: concurrent pytest runs on this machine rotate it away.
    logs = Path(tempfile.mkdtemp(prefix="provely-workers-"))
    values = {
        "PROVELY_DATABASE_URL": migrated_postgres_url,
        "PROVELY_BROKER_URL": redis_url,
        "PROVELY_REDIS_URL": redis_url,
        "PROVELY_SECRET_KEY": SECRET_KEY,
        "PROVELY_DATA_DIR": str(logs),
        "PROVELY_JITTER_RATIO": "0",
        "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.25",
        "PROVELY_SWEEPER_GRACE_SECONDS": "2",
        "PROVELY_HTTP_TIMEOUT_SECONDS": "0.5",
        "PROVELY_LOG_JSON": "false",
    }
    env = {**os.environ, **values, "PYTHONPATH": str(ROOT)}
    settings = Settings(**{k.removeprefix("PROVELY_").lower(): v for k, v in values.items()})
    flush_redis(redis_url)
    celery_app.configure(celery_app.app, settings)
    engine = make_engine(migrated_postgres_url)
    truncate_all(engine)
    running = Cluster(env=env, settings=settings, engine=engine, logs=logs)
    try:
        running.start_verdict()
        running.start_observer()
        running.start_sweeper()
        yield running
    finally:
        running.stop_all()
        if not os.environ.get("PROVELY_KEEP_WORKER_LOGS"):
            shutil.rmtree(logs, ignore_errors=True)
        truncate_all(engine)
        engine.dispose()
        flush_redis(redis_url)
        from shared.runtime.settings import get_settings

        celery_app.configure(celery_app.app, get_settings())


# --------------------------------------------------------------------------------------------
# Records: workspace, connection, contract, operations
# --------------------------------------------------------------------------------------------


def short_contract(
    *,
    contract_id: str,
    initial_ms: int = 300,
    poll_ms: int = 300,
    factor: int = 2,
    max_ms: int = 1200,
    max_attempts: int = 6,
    timeout_ms: int = 8000,
) -> Contract:
    """stripe.refund.succeeded's readback conditions with a short schedule, as a custom contract."""
    readback = "$observed.refund_readback"
    document = {
        "id": contract_id,
        "version": "1.0.0",
        "completion_level": "succeeded",
        "certification": "custom",
        "skill": {"provider": "stripe", "version": "0.1.0"},
        "provider_api_versions": ["2026-08-26"],
        "title": "Refund succeeded (short timing, tests)",
        "intent": "Refund a charge.",
        "input": {
            "charge": {"type": "string"},
            "amount": {"type": "integer", "minimum": 1},
            "currency": {"type": "string"},
        },
        "subject": {
            "type": "stripe.refund",
            "identity": {"key": "refund_id", "expr": "$action.result.id"},
            "canonical_effect": "money.refund",
            "provider_operation": {"method": "POST", "path": "/v1/refunds"},
            "idempotency": {
                "key": "idempotency_key",
                "header": "Idempotency-Key",
                "retry_safe": True,
            },
        },
        "correlation": [
            {
                "strategy": "resource_id",
                "assurance": "strong",
                "keys": [{"name": "refund_id", "expr": "$action.result.id"}],
                "required": True,
            },
            {
                "strategy": "idempotency_key",
                "assurance": "strong",
                "keys": [{"name": "idempotency_key", "expr": "$operation.id"}],
            },
        ],
        "evidence": {
            "minimum_level": "E2",
            "independent_channel_required": True,
            "minimum_channels": 1,
        },
        "channels": [
            {
                "name": "refund_readback",
                "level": "E2",
                "independence": "provider readback",
                "verifier": "http",
                "description": "The refund read back.",
                "freshness_ms": 10000,
                "http": {"method": "GET", "path": "/v1/refunds/{$correlation.refund_id}"},
            },
            {
                "name": "refund_created_events",
                "level": "E3",
                "independence": "provider event",
                "verifier": "webhook",
                "description": "refund.created events of the charge.",
                "webhook": {
                    "event_types": ["refund.created"],
                    "match": [
                        {"path": "$event.data.object.charge", "op": "eq", "value": "$input.charge"}
                    ],
                },
            },
        ],
        "completion": [
            {
                "id": "refund_status_succeeded",
                "meaning": "succeeded",
                "path": f"{readback}.status",
                "op": "eq",
                "value": "succeeded",
                "evidence": "refund_readback",
            },
            {
                "id": "refund_amount_matches",
                "meaning": "amount",
                "path": f"{readback}.amount",
                "op": "eq",
                "value": "$input.amount",
                "evidence": "refund_readback",
            },
            {
                "id": "refund_created_in_window",
                "meaning": "window",
                "path": f"{readback}.created",
                "op": "time_after",
                "value": "$operation.created_at",
                "evidence": "refund_readback",
            },
        ],
        "negative": [
            {
                "id": "refund_amount_mismatch",
                "class": "wrong amount",
                "reason": "amount differs",
                "path": f"{readback}.amount",
                "op": "ne",
                "value": "$input.amount",
            },
            {
                "id": "duplicate_refund_present",
                "class": "duplicate side effect",
                "reason": "two refunds",
                "path": "$observed.refund_created_events.count",
                "op": "gt",
                "value": 1,
            },
        ],
        "verdict_map": [
            {
                "id": "terminal_failure",
                "path": f"{readback}.status",
                "op": "in",
                "value": ["failed"],
                "verdict": "FAILED",
                "reason": "failed",
            },
            {
                "id": "still_transitional",
                "path": f"{readback}.status",
                "op": "in",
                "value": ["pending", "requires_action"],
                "verdict": "PENDING",
                "reason": "pending",
            },
        ],
        "timing": {
            "initial_delay_ms": initial_ms,
            "poll_interval_ms": poll_ms,
            "backoff": {"kind": "exponential", "factor": factor, "max_ms": max_ms},
            "max_attempts": max_attempts,
            "timeout_ms": timeout_ms,
            "stale_read_window_ms": 20000,
            "on_timeout": {
                "verdict": "UNVERIFIABLE",
                "reason": "evidence_unavailable_before_timeout",
                "escalate": "human_review",
            },
        },
    }
    return Contract.model_validate(document)


@dataclass
class Tenant:
    workspace_id: str
    contract: Contract
    contract_row_id: int


def make_tenant(
    cluster: Cluster, provider_url: str, contract: Contract, *, name: str, rate: float = 5000.0
) -> Tenant:
    now = datetime.now(UTC)
    ws_id = f"ws_{name}"
    with session_scope(cluster.engine) as session:
        session.add(Workspace(id=ws_id, name=name, created_at=now))
        session.flush()
        session.add(
            Connection(
                id=f"conn_{name}",
                workspace_id=ws_id,
                provider="stripe",
                base_url=provider_url,
                signature_scheme="stripe",
                signature_tolerance_seconds=300,
                webhook_secrets_enc=encrypt_webhook_secrets(["whsec_t"], settings=cluster.settings),
                api_key_enc=encrypt(API_KEY.encode(), settings=cluster.settings),
                auth_scheme="bearer",
                rate_limit_per_second=rate,
                created_at=now,
                updated_at=now,
            )
        )
        row = CustomContract(
            workspace_id=ws_id,
            contract_id=contract.id,
            version=contract.version,
            hash=contract_hash(contract),
            document=contract.document(),
            created_at=now,
        )
        session.add(row)
        session.flush()
        row_id = row.id
    return Tenant(ws_id, contract, row_id)


def create_operations(
    cluster: Cluster,
    tenant: Tenant,
    refunds: list[tuple[str, str, int]],
    *,
    dispatch: bool = True,
) -> list[tuple[str, datetime]]:
    """Operations whose action was reported (refund id, charge, amount), first observation
    scheduled and its message sent after commit — what the action report commits (it moves the
    operation through ACTION_ACCEPTED to OBSERVING in one transaction)."""
    made: list[tuple[str, datetime, int]] = []
    delay = tenant.contract.timing.initial_delay_ms
    with session_scope(cluster.engine) as session:
        for op_id, refund_id, charge, amount in (
            (f"op_{refund_id}", refund_id, charge, amount) for refund_id, charge, amount in refunds
        ):
            now = datetime.now(UTC)
            op = Operation(
                id=op_id,
                workspace_id=tenant.workspace_id,
                contract_id=tenant.contract.id,
                contract_version=tenant.contract.version,
                contract_hash=contract_hash(tenant.contract),
                completion_level="succeeded",
                custom_contract_id=tenant.contract_row_id,
                state="OBSERVING",
                verdict="PENDING",
                reason="awaiting_evidence",
                final=False,
                version=1,
                input={"charge": charge, "amount": amount, "currency": "usd"},
                action_phase="accepted",
                action_result={"id": refund_id, "object": "refund"},
                action_http_status=200,
                action_reported_at=now,
                subject_id=refund_id,
                learned_keys={},
                attempts=0,
                fence=0,
                created_at=now,
                updated_at=now,
            )
            session.add(op)
            session.flush()
            fence = schedule_observation(session, op, delay_ms=delay, now=now)
            made.append((op_id, now, fence))
    if dispatch:
        for op_id, reported, fence in made:
            due = reported.timestamp() + delay / 1000.0
            dispatch_observe(op_id, fence, countdown_s=max(0.0, due - time.time()))
    return [(op_id, reported) for op_id, reported, _ in made]


def wait_for(
    predicate: Callable[[], bool], *, timeout: float, interval: float = 0.1, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def load_operation(cluster: Cluster, op_id: str) -> Operation:
    with session_scope(cluster.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        session.expunge(op)
        return op


def observations_of(cluster: Cluster, op_id: str) -> list[Observation]:
    with session_scope(cluster.engine) as session:
        rows = list(
            session.execute(
                select(Observation)
                .where(Observation.operation_id == op_id)
                .order_by(Observation.observed_at)
            ).scalars()
        )
        for row in rows:
            session.expunge(row)
        return rows
