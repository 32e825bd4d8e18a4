"""Nothing ignored in silence (#33): a stored event that cannot count for an operation — its API
version is not the contract's, it is older than the operation, no channel reads its type — is
named on the operation (``blocked_by``, ``ignored_events``, the timeline), counted in
``provely_events_ignored_total`` and said once in the intake's log. Before, the operation sat
PENDING awaiting_evidence with its events linked "strong" and nothing said why."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from shared.db.models import Operation
from shared.db.tenants import create_api_key
from shared.intake.correlate import correlate_pending_events
from shared.intake.correlator import correlate_pending

from .conftest import Tenant, TestClient, add_operation, links, refund, stripe_event
from .test_correlation import deliver

pytestmark = pytest.mark.integration

OTHER = "2025-03-31.basil"


def ignored_count(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "provely_events_ignored_total", {"provider": "stripe", "reason": reason}
    )
    return value or 0.0


def agent_key(engine: Engine, tenant: Tenant) -> dict[str, str]:
    with Session(engine) as session, session.begin():
        _, plain = create_api_key(session, tenant.workspace_id, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {plain}"}


def test_events_on_another_api_version_are_named_on_the_operation(
    client: TestClient, tenant: Tenant, pg_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    created = datetime.now(UTC) - timedelta(seconds=30)
    op_id = add_operation(
        pg_engine,
        tenant,
        subject_id="re_V",
        action_result={"id": "re_V"},
        input={"charge": "ch_V", "amount": 1000, "currency": "eur"},
        created_at=created,
    )
    t = int(time.time())
    before = ignored_count("api_version")
    with caplog.at_level(logging.WARNING, logger="services.ingress.intake.webhooks"):
        for n, kind in enumerate(["refund.created", "refund.updated", "refund.updated"]):
            status = "pending" if kind == "refund.created" else "succeeded"
            obj = refund("re_V", status=status, charge="ch_V", created=t)
            deliver(
                client,
                tenant,
                stripe_event(f"evt_v{n}", kind, obj, created=t + n, api_version=OTHER),
            )
    assert ignored_count("api_version") == before + 3
    said = [r for r in caplog.records if OTHER in r.getMessage()]
    assert len(said) == 1  # once per workspace and version, not per delivery

    headers = agent_key(pg_engine, tenant)
    view = client.get(f"/v1/operations/{op_id}", headers=headers).json()
    assert view["blocked_by"] == f"3 events ignored: api_version {OTHER} is not among 2026-08-26"
    assert sorted(i["event_id"] for i in view["ignored_events"]) == ["evt_v0", "evt_v1", "evt_v2"]
    assert {i["reason"] for i in view["ignored_events"]} == {"api_version"}
    timeline = client.get(f"/v1/operations/{op_id}/timeline", headers=headers).json()
    events = [e for e in timeline["entries"] if e["kind"] == "event"]
    assert len(events) == 3
    assert all(OTHER in e["ignored"] for e in events)
    # The list page carries neither (it reads no events).
    listed = client.get("/v1/operations", headers=headers).json()["data"]
    assert all("blocked_by" not in item for item in listed)


def test_an_event_older_than_the_operation_and_an_unread_type_are_named(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    created = datetime.now(UTC) - timedelta(seconds=5)
    op_id = add_operation(
        pg_engine,
        tenant,
        subject_id="re_O",
        action_result={"id": "re_O"},
        input={"charge": "ch_O", "amount": 1000, "currency": "eur"},
        created_at=created,
    )
    old = int((created - timedelta(minutes=2)).timestamp())
    before_unread = ignored_count("type_unread")
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_old",
            "refund.updated",
            refund("re_O", status="succeeded", created=old),
            created=old,
        ),
    )
    t = int(time.time())
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_unread",
            "refund.failed_custom",
            refund("re_O", status="succeeded", created=t),
            created=t,
        ),
    )
    assert ignored_count("type_unread") == before_unread + 1
    headers = agent_key(pg_engine, tenant)
    view = client.get(f"/v1/operations/{op_id}", headers=headers).json()
    reasons = {i["event_id"]: i["reason"] for i in view["ignored_events"]}
    assert reasons == {"evt_old": "before_operation", "evt_unread": "type_unread"}
    # An event of a type nothing reads is listed, but the operation is not waiting for it.
    assert view["blocked_by"] == "1 event ignored: the event is older than the operation"


def test_an_operation_whose_events_count_names_nothing(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    before = ignored_count("api_version")
    op_id = add_operation(pg_engine, tenant, subject_id="re_OK", action_result={"id": "re_OK"})
    t = int(time.time())
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_ok", "refund.updated", refund("re_OK", status="succeeded", created=t), created=t
        ),
    )
    view = client.get(f"/v1/operations/{op_id}", headers=agent_key(pg_engine, tenant)).json()
    assert view["blocked_by"] is None
    assert view["ignored_events"] == []
    assert ignored_count("api_version") == before


def test_an_event_older_than_the_operation_is_counted_once_by_the_correlator(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    """Older than the operation can only be told once the event is linked: the correlator
    counts it, once per event and operation however often correlation runs again."""
    created = datetime.now(UTC) - timedelta(seconds=5)
    op_id = add_operation(
        pg_engine,
        tenant,
        subject_id="re_C",
        action_result={"id": "re_C"},
        input={"charge": "ch_C", "amount": 1000, "currency": "eur"},
        created_at=created,
    )
    old = int((created - timedelta(minutes=2)).timestamp())
    before = ignored_count("before_operation")
    body = stripe_event(
        "evt_c_old", "refund.updated", refund("re_C", status="succeeded", created=old), created=old
    )
    deliver(client, tenant, body)
    assert ignored_count("before_operation") == before + 1
    deliver(client, tenant, body)  # the provider sends it again: stored once, linked once
    with Session(pg_engine) as session, session.begin():  # the operation's side, again
        op = session.get(Operation, op_id)
        assert op is not None
        correlate_pending_events(session, op, datetime.now(UTC))
    correlate_pending(pg_engine)
    t = int(time.time())
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_c_new", "refund.updated", refund("re_C", status="succeeded", created=t), created=t
        ),
    )
    assert ignored_count("before_operation") == before + 1


@pytest.mark.parametrize("charge", ["ch_elsewhere", "ch_R"])
def test_an_event_older_than_the_operation_linked_by_its_action_report_is_counted(
    client: TestClient, tenant: Tenant, pg_engine: Engine, charge: str
) -> None:
    """An event stored before the operation knew its subject is linked by the action report,
    in the API's process, and counted there after commit. With the operation's charge, the
    event was linked weakly (its fingerprint) and counted when it was stored: the report makes
    the link strong and counts nothing more."""
    created = datetime.now(UTC) - timedelta(seconds=5)
    op_id = add_operation(
        pg_engine,
        tenant,
        state="ACTION_STARTED",
        input={"charge": "ch_R", "amount": 1000, "currency": "eur"},
        created_at=created,
    )
    old = int((created - timedelta(minutes=2)).timestamp())
    before = ignored_count("before_operation")
    obj = refund("re_R", status="succeeded", charge=charge, created=old)
    deliver(client, tenant, stripe_event("evt_r_old", "refund.updated", obj, created=old))
    weak = [("evt_r_old", "fingerprint", "weak")] if charge == "ch_R" else []
    assert links(pg_engine, op_id) == weak
    headers = agent_key(pg_engine, tenant)
    report = {"phase": "result", "result": {"id": "re_R", "object": "refund", "charge": "ch_R"}}
    response = client.post(f"/v1/operations/{op_id}/action", json=report, headers=headers)
    assert response.status_code == 200, response.text
    assert links(pg_engine, op_id) == [("evt_r_old", "resource_id", "strong")]
    assert ignored_count("before_operation") == before + 1
    view = response.json()
    assert [(i["event_id"], i["reason"]) for i in view["ignored_events"]] == [
        ("evt_r_old", "before_operation")
    ]
