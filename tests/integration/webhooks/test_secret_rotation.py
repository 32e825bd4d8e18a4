"""A webhook secret rotated through the settings API (#36): during the overlap a delivery
signed with the secret before it or with the new one is stored; once ``overlap_until`` has
passed the old one is refused — checked by the intake against each delivery's arrival time —
and the refusal is listed with its reason by ``GET /v1/deliveries``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from shared.db.tenants import create_api_key

from .conftest import OLD_SECRET, SECRET, Tenant, TestClient, refund, signed, stripe_event

pytestmark = pytest.mark.integration

NEW_SECRET = "whsec_rolled_" + "f6" * 16
OVERLAP_S = 10.0
"""Long enough for the deliveries of the overlap to arrive before it ends on a loaded machine."""


def admin_of(engine: Engine, workspace_id: str) -> dict[str, str]:
    with Session(engine) as session, session.begin():
        _, plain = create_api_key(session, workspace_id, scope="admin", now=datetime.now(UTC))
    return {"Authorization": f"Bearer {plain}"}


def deliver(client: TestClient, tenant: Tenant, event_id: str, secret: str) -> int:
    t = int(time.time())
    body = stripe_event(
        event_id, "refund.updated", refund("re_R", status="succeeded", created=t), created=t
    )
    return client.post(tenant.path, content=body, headers=signed(body, secret)).status_code


def test_old_and_new_secrets_verify_during_the_overlap_and_only_the_new_one_after(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    admin = admin_of(pg_engine, tenant.workspace_id)
    ends = datetime.now(UTC) + timedelta(seconds=OVERLAP_S)
    rotated = client.post(
        "/v1/connections/stripe/webhook-secrets",
        headers=admin,
        json={"secret": NEW_SECRET, "overlap_until": ends.isoformat()},
    )
    assert rotated.status_code == 200, rotated.text
    assert [s["until"] is None for s in rotated.json()["webhook_secrets"]] == [True, False, False]

    assert deliver(client, tenant, "evt_during_old", SECRET) == 200
    assert deliver(client, tenant, "evt_during_older", OLD_SECRET) == 200
    assert deliver(client, tenant, "evt_during_new", NEW_SECRET) == 200
    assert datetime.now(UTC) < ends, "the overlap ended before its deliveries were sent"

    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.2)
    assert deliver(client, tenant, "evt_after_old", SECRET) == 400
    assert deliver(client, tenant, "evt_after_older", OLD_SECRET) == 400
    assert deliver(client, tenant, "evt_after_new", NEW_SECRET) == 200

    listed = client.get("/v1/deliveries", headers=admin, params={"outcome": "refused"})
    assert [d["reason"] for d in listed.json()["data"]] == ["no_matching_signature"] * 2
    stored = client.get("/v1/deliveries", headers=admin, params={"outcome": "stored"}).json()
    assert {d["event_id"] for d in stored["data"]} == {
        "evt_during_old",
        "evt_during_older",
        "evt_during_new",
        "evt_after_new",
    }


def test_an_overlap_ending_now_stops_the_old_secret_at_once(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    admin = admin_of(pg_engine, tenant.workspace_id)
    now = datetime.now(UTC).isoformat()
    rotated = client.post(
        "/v1/connections/stripe/webhook-secrets",
        headers=admin,
        json={"secret": NEW_SECRET, "overlap_until": now},
    )
    assert rotated.status_code == 200, rotated.text
    assert deliver(client, tenant, "evt_old", SECRET) == 400
    assert deliver(client, tenant, "evt_new", NEW_SECRET) == 200
