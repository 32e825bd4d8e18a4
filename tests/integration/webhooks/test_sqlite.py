"""The embedded default: the same intake on SQLite (dialect inserts, correlation, wake)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from shared.intake.correlator import correlate_pending
from shared.runtime.settings import Settings

from .conftest import (
    SECRET,
    Tenant,
    TestClient,
    add_operation,
    build_app,
    counts,
    links,
    load_operation,
    prefix_queues,
    refund,
    signed,
    stripe_event,
)
from .test_ignored_events import ignored_count

pytestmark = pytest.mark.integration


def test_intake_on_sqlite(
    sqlite_url: str,
    sqlite_engine: Engine,
    redis_url: str,
    tmp_path: Path,
    celery_to_test_broker: None,
) -> None:
    from shared.db.tenants import create_workspace, set_connection

    settings = Settings(
        database_url=sqlite_url,
        broker_url=redis_url,
        secret_key=Fernet.generate_key().decode(),
        data_dir=tmp_path,
    )
    now = datetime.now(UTC)
    with Session(sqlite_engine) as session, session.begin():
        workspace, _ = create_workspace(session, "embedded", now=now)
        set_connection(
            session,
            workspace.id,
            provider="stripe",
            webhook_secrets=[SECRET],
            api_key=None,
            base_url="http://127.0.0.1:9",
            signature_scheme="stripe",
            settings=settings,
            now=now,
        )
        tenant = Tenant(workspace.id)
    known = add_operation(sqlite_engine, tenant, subject_id="re_L")
    timed_out = add_operation(
        sqlite_engine,
        tenant,
        state="PENDING",
        input={"charge": "ch_9", "amount": 1000, "currency": "eur"},
    )
    fingerprinted = add_operation(
        sqlite_engine,
        tenant,
        state="PENDING",
        input={"charge": "ch_Q", "amount": 300, "currency": "eur"},
    )
    app = build_app(settings)
    prefix_queues()
    t = int(time.time())
    bodies = [
        stripe_event(
            "evt_a", "refund.updated", refund("re_L", status="succeeded", created=t), created=t
        ),
        stripe_event(
            "evt_b",
            "refund.created",
            refund("re_T", status="pending", charge="ch_9", created=t),
            created=t,
            idempotency_key=timed_out,
        ),
        stripe_event(
            "evt_c",
            "refund.created",
            refund("re_Q", status="pending", charge="ch_Q", amount=300, created=t),
            created=t,
        ),
        # Older than the operation it names: linked, and counted as ignored by the correlator.
        stripe_event(
            "evt_o",
            "refund.updated",
            refund("re_L", status="succeeded", created=t - 120),
            created=t - 120,
        ),
    ]
    ignored_before = ignored_count("before_operation")
    with TestClient(app) as client:
        for body in bodies:
            response = client.post(tenant.path, content=body, headers=signed(body))
            assert response.status_code == 200, response.text
        again = client.post(tenant.path, content=bodies[0], headers=signed(bodies[0]))
        assert again.json()["duplicate"] is True
        refused = client.post(tenant.path, content=bodies[0], headers=signed(bodies[0], "whsec_x"))
        assert refused.status_code == 400
    assert counts(sqlite_engine)[0] == 4
    # stored, not correlated yet: that is the observer's work, after the answer
    assert counts(sqlite_engine)[2] == 0
    assert correlate_pending(sqlite_engine) == 4
    assert correlate_pending(sqlite_engine) == 0
    assert links(sqlite_engine, known) == [
        ("evt_a", "resource_id", "strong"),
        ("evt_o", "resource_id", "strong"),
    ]
    assert ignored_count("before_operation") == ignored_before + 1
    assert links(sqlite_engine, timed_out) == [("evt_b", "idempotency_key", "strong")]
    assert links(sqlite_engine, fingerprinted) == [("evt_c", "fingerprint", "weak")]
    assert load_operation(sqlite_engine, timed_out).subject_id == "re_T"
    assert load_operation(sqlite_engine, known).fence == 2
