"""Fixtures of the webhook intake tests: a migrated PostgreSQL, a workspace with a Stripe
connection (two active secrets), the ingress app in process, and a live uvicorn when needed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from shared.db.models import Event, EventKey, Operation, OperationEvent
from shared.runtime.settings import Settings
from shared.trust.registry import get_registry
from shared.trust.signatures import STRIPE

with warnings.catch_warnings():
    # starlette's test client touches an alias anyio deprecates, at import only.
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[3]
SECRET = "whsec_current_" + "a1" * 16
OLD_SECRET = "whsec_rotating_" + "b2" * 16
RETIRED_SECRET = "whsec_retired_" + "c3" * 16


@dataclass
class Tenant:
    workspace_id: str
    provider: str = "stripe"

    @property
    def path(self) -> str:
        return f"/v1/events/{self.provider}/{self.workspace_id}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stripe_event(
    event_id: str,
    event_type: str,
    obj: dict[str, Any],
    *,
    created: int,
    api_version: str = "2026-08-26",
    idempotency_key: str | None = None,
) -> bytes:
    doc = {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created": created,
        "api_version": api_version,
        "livemode": False,
        "data": {"object": obj},
        "request": {"id": "req_1" if idempotency_key else None, "idempotency_key": idempotency_key},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def refund(
    refund_id: str, *, status: str, charge: str = "ch_1", amount: int = 1000, created: int
) -> dict[str, Any]:
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "currency": "eur",
        "charge": charge,
        "status": status,
        "created": created,
    }


def signed(body: bytes, secret: str = SECRET, *, t: int | None = None) -> dict[str, str]:
    headers = STRIPE.sign(
        body=body, secrets=[secret], timestamp=int(time.time()) if t is None else t
    )
    headers["Content-Type"] = "application/json"
    return headers


def count(engine: Engine, model: Any) -> int:
    with Session(engine) as session:
        return int(session.execute(select(func.count()).select_from(model)).scalar_one())


def counts(engine: Engine) -> tuple[int, int, int]:
    return count(engine, Event), count(engine, EventKey), count(engine, OperationEvent)


@pytest.fixture
def settings(migrated_postgres_url: str, redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=migrated_postgres_url,
        broker_url=redis_url,
        redis_url=redis_url,
        secret_key=Fernet.generate_key().decode(),
        data_dir=tmp_path,
        jitter_ratio=0.0,
    )


QUEUE_PREFIX = f"provely-webhook-tests-{os.getpid()}-"


@pytest.fixture(scope="session")
def celery_to_test_broker(redis_url: str) -> None:
    """Point the shared Celery app at the session's Redis database (wakes are sent there),
    under a key prefix of its own so that no worker of another test run consumes them.

    Once per session: the broker URL does not change, and reconfiguring closes live pools.
    """
    from shared.runtime import celery_app

    celery_app.configure(celery_app.app, Settings(broker_url=redis_url))
    prefix_queues()


def prefix_queues() -> None:
    """Keep this run's messages under QUEUE_PREFIX (after anything that configured Celery)."""
    from shared.runtime import celery_app

    options = dict(celery_app.app.conf.broker_transport_options or {})
    if options.get("global_keyprefix") != QUEUE_PREFIX:
        options["global_keyprefix"] = QUEUE_PREFIX
        celery_app.app.conf.broker_transport_options = options


@pytest.fixture
def tenant(pg_engine: Engine, settings: Settings) -> Tenant:
    from shared.db.tenants import create_workspace, set_connection

    now = datetime.now(UTC)
    with Session(pg_engine) as session, session.begin():
        workspace, _key = create_workspace(session, "webhooks", now=now)
        set_connection(
            session,
            workspace.id,
            provider="stripe",
            webhook_secrets=[SECRET, OLD_SECRET],
            api_key="sk_test_x",
            base_url="http://127.0.0.1:9",
            signature_scheme="stripe",
            settings=settings,
            now=now,
        )
        return Tenant(workspace.id)


def build_app(settings: Settings) -> FastAPI:
    from services.ingress.app import create_app

    return create_app(settings)


@pytest.fixture
def client(settings: Settings, celery_to_test_broker: None) -> Iterator[TestClient]:
    app = build_app(settings)  # the ingress app points Celery at the settings' broker
    prefix_queues()
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def add_operation(
    engine: Engine,
    tenant: Tenant,
    *,
    contract_id: str = "stripe.refund.succeeded",
    input: dict[str, Any] | None = None,
    state: str = "OBSERVING",
    subject_id: str | None = None,
    action_result: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    final: bool = False,
    verdict: str | None = None,
    watched: bool = False,
) -> str:
    """An operation row as the API would have written it (bound to a shipped contract);
    ``watched``: a VERIFIED one watched as the evaluation watches it
    (``shared.lifecycle.watch``)."""
    from shared.core.context import build_context
    from shared.db.tenants import new_id
    from shared.evidence.webhooks import evidence_keys
    from shared.lifecycle.operations import facts_for
    from shared.lifecycle.watch import start_watch, watch_until

    entry = get_registry().entry(contract_id)
    now = created_at or datetime.now(UTC) - timedelta(seconds=30)
    op_id = new_id("op")
    with Session(engine) as session, session.begin():
        session.add(
            Operation(
                id=op_id,
                workspace_id=tenant.workspace_id,
                contract_id=entry.contract.id,
                contract_version=entry.contract.version,
                contract_hash=entry.hash,
                completion_level=entry.contract.completion_level,
                state=state,
                verdict=verdict,
                final=final,
                version=1,
                input=input or {"charge": "ch_1", "amount": 1000, "currency": "eur"},
                action_phase="succeeded" if action_result else None,
                action_result=action_result,
                action_reported_at=now if state != "ACTION_STARTED" else None,
                subject_id=subject_id,
                learned_keys={},
                attempts=0,
                fence=1,
                deadline=now + timedelta(days=7),
                created_at=now,
                updated_at=now,
                watch_until=watch_until(entry.contract, now) if watched else None,
            )
        )
        if watched:
            session.flush()
            op = session.get(Operation, op_id)
            assert op is not None
            assert op.watch_until is not None
            context = build_context(entry.contract, facts_for(op))
            keys = evidence_keys(op, entry.contract, context)
            start_watch(session, op, keys, until=op.watch_until)
    return op_id


def load_operation(engine: Engine, op_id: str) -> Operation:
    with Session(engine, expire_on_commit=False) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        return op


def links(engine: Engine, op_id: str) -> list[tuple[str, str, str]]:
    with Session(engine) as session:
        rows = session.execute(
            select(Event.event_id, OperationEvent.strategy, OperationEvent.assurance)
            .join(Event, Event.id == OperationEvent.event_pk)
            .where(OperationEvent.operation_id == op_id)
            .order_by(Event.event_id)
        ).all()
        return [tuple(row) for row in rows]  # type: ignore[misc]


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def start_live_server(
    settings: Settings, *, workers: int = 1, app_spec: str | None = None
) -> LiveServer:
    port = free_port()
    env = dict(os.environ)
    env.update(
        PROVELY_DATABASE_URL=settings.resolved_database_url(),
        PROVELY_BROKER_URL=settings.resolved_broker_url(),
        PROVELY_REDIS_URL=settings.redis_url or "",
        PROVELY_SECRET_KEY=settings.secret_key or "",
        PROVELY_DATA_DIR=str(settings.data_dir),
        PROVELY_WEBHOOK_MAX_BODY_BYTES=str(settings.webhook_max_body_bytes),
        PROVELY_LOG_JSON="false",
        PYTHONPATH=str(ROOT),
    )
    spec = app_spec or "tests.integration.webhooks.live_app:app"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            spec,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("the ingress server exited at start")
        try:
            httpx.get(url + "/v1/events/stripe/ws_none", timeout=1)
            return LiveServer(url, process)
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the ingress server did not start")


@pytest.fixture
def live_server(settings: Settings, tenant: Tenant) -> Iterator[LiveServer]:
    server = start_live_server(settings)
    try:
        yield server
    finally:
        server.process.terminate()
        try:
            server.process.wait(10)
        except subprocess.TimeoutExpired:
            server.process.kill()
