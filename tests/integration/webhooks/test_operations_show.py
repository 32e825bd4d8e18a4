"""``provely operations show`` says in its lines for people what its ``--json`` carries for an
agent to decide with: ``blocked_by`` (the events that cannot count, #33) and
``retry.stands_until`` (the retry advice of a watched verdict, #32). Before, only ``--json``
had them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from shared.db.models import Operation

from .conftest import Tenant, TestClient, add_operation, refund, stripe_event
from .test_correlation import deliver

pytestmark = pytest.mark.integration

PROVELY = str(Path(sys.executable).parent / "provely")
OTHER = "2025-03-31.basil"


def show(database_url: str, op_id: str, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env |= {
        "PROVELY_DATABASE_URL": database_url,
        "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
        "PROVELY_LOG_JSON": "false",
    }
    done = subprocess.run(
        [PROVELY, "operations", "show", op_id, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_show_names_what_blocks_an_operation(
    client: TestClient, tenant: Tenant, pg_engine: Engine, migrated_postgres_url: str
) -> None:
    op_id = add_operation(
        pg_engine,
        tenant,
        subject_id="re_S",
        action_result={"id": "re_S"},
        input={"charge": "ch_S", "amount": 1000, "currency": "eur"},
    )
    waiting = add_operation(pg_engine, tenant, subject_id="re_W", action_result={"id": "re_W"})
    t = int(time.time())
    for n in range(3):
        obj = refund("re_S", status="succeeded", charge="ch_S", created=t)
        body = stripe_event(f"evt_s{n}", "refund.updated", obj, created=t + n, api_version=OTHER)
        deliver(client, tenant, body)
    document = json.loads(show(migrated_postgres_url, op_id, "--json"))
    said = f"3 events ignored: api_version {OTHER} is not among 2026-08-26"
    assert document["blocked_by"] == said
    lines = show(migrated_postgres_url, op_id).splitlines()
    assert f"blocked by {said}" in lines
    # Nothing blocks an operation with no ignored event: no such line.
    assert not any(
        line.startswith("blocked by") for line in show(migrated_postgres_url, waiting).splitlines()
    )


def test_show_says_until_when_the_retry_advice_stands(
    tenant: Tenant, pg_engine: Engine, migrated_postgres_url: str
) -> None:
    op_id = add_operation(
        pg_engine, tenant, state="FAILED", verdict="FAILED", final=True, subject_id="re_F"
    )
    with Session(pg_engine) as session, session.begin():
        session.execute(
            update(Operation)
            .where(Operation.id == op_id)
            .values(watch_until=datetime.now(UTC) + timedelta(days=3))
        )
    retry = json.loads(show(migrated_postgres_url, op_id, "--json"))["retry"]
    assert retry["action"] == "allowed_as_new_operation"
    assert retry["stands_until"] is not None
    lines = [
        line for line in show(migrated_postgres_url, op_id).splitlines() if line.startswith("retry")
    ]
    assert len(lines) == 1
    assert "action: allowed_as_new_operation" in lines[0]
    assert f"(stands until {retry['stands_until']}" in lines[0]
