"""Correlation: strong keys (resource id, idempotency key), weak fingerprints, events that come
before the operation can correlate, late events of final operations, and wakes."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.core.events import reduce_events
from shared.core.expressions import EvaluationContext
from shared.db.models import Event, EventKey, Operation
from shared.intake.correlate import correlate_pending_events
from shared.intake.correlator import correlate_pending
from shared.intake.store import event_record
from shared.trust.registry import get_registry

from .conftest import (
    QUEUE_PREFIX,
    Tenant,
    TestClient,
    add_operation,
    links,
    load_operation,
    refund,
    signed,
    stripe_event,
)

pytestmark = pytest.mark.integration


def deliver(client: TestClient, tenant: Tenant, body: bytes) -> None:
    """Deliver, then do what the observer does with the intake's correlate message."""
    response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 200, response.text
    correlate_pending(client.app.state.engine)  # type: ignore[attr-defined]


def now_s() -> int:
    return int(time.time())


def test_event_of_the_subject_links_strongly_and_wakes(
    client: TestClient, tenant: Tenant, pg_engine: Engine, redis_url: str
) -> None:
    import redis

    queue = redis.Redis.from_url(redis_url)
    key = QUEUE_PREFIX + "observe"
    queued = queue.llen(key)
    op_id = add_operation(pg_engine, tenant, subject_id="re_A", action_result={"id": "re_A"})
    before = load_operation(pg_engine, op_id)
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_1", "refund.updated", refund("re_A", status="succeeded", created=t), created=t
        ),
    )
    assert links(pg_engine, op_id) == [("evt_1", "resource_id", "strong")]
    after = load_operation(pg_engine, op_id)
    assert after.fence == before.fence + 1
    assert after.next_observation_at is not None
    assert abs((after.next_observation_at - datetime.now(UTC)).total_seconds()) < 10
    # the correlator sent the observe message for the new fence after its commit
    assert queue.llen(key) == queued + 1
    message = json.loads(queue.lindex(key, 0))
    assert message["headers"]["task"] == "provely.observe_many"
    assert message["headers"]["kwargsrepr"] == repr({"pairs": [[op_id, after.fence]]})


def test_keys_the_event_carries_are_stored(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_k",
            "refund.created",
            refund("re_K", status="pending", charge="ch_K", amount=700, created=t),
            created=t,
            idempotency_key="op_something",
        ),
    )
    with Session(pg_engine) as session:
        keys = dict(session.execute(select(EventKey.name, EventKey.value)).all())
    assert keys == {
        "object_id": "re_K",
        "charge": "ch_K",
        "idempotency_key": "op_something",
        "amount": "700",
    }


def test_timed_out_action_learns_its_refund_id_from_the_idempotency_key(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    # The agent reported a timeout: no result, no subject id.
    op_id = add_operation(pg_engine, tenant, state="PENDING")
    t = now_s()
    # The refund's update arrives first (no idempotency key on it): only the charge and the
    # amount match, a weak candidate.
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_u", "refund.updated", refund("re_T", status="succeeded", created=t), created=t + 2
        ),
    )
    assert links(pg_engine, op_id) == [("evt_u", "fingerprint", "weak")]
    # Then refund.created, created by the request whose idempotency key is the operation id.
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_c",
            "refund.created",
            refund("re_T", status="pending", created=t),
            created=t,
            idempotency_key=op_id,
        ),
    )
    op = load_operation(pg_engine, op_id)
    assert op.subject_id == "re_T"
    assert op.learned_keys == {"refund_id": "re_T"}
    assert links(pg_engine, op_id) == [
        ("evt_c", "idempotency_key", "strong"),
        ("evt_u", "resource_id", "strong"),
    ]


def test_a_charge_event_with_the_same_idempotency_key_teaches_nothing(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    op_id = add_operation(pg_engine, tenant, state="PENDING")
    t = now_s()
    charge = {"id": "ch_1", "object": "charge", "amount_refunded": 1000}
    deliver(
        client,
        tenant,
        stripe_event("evt_ch", "charge.refunded", charge, created=t, idempotency_key=op_id),
    )
    op = load_operation(pg_engine, op_id)
    assert op.subject_id is None
    assert links(pg_engine, op_id) == [("evt_ch", "idempotency_key", "strong")]


def test_fingerprint_match_is_only_a_weak_link(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    op_id = add_operation(
        pg_engine,
        tenant,
        state="PENDING",
        input={"charge": "ch_F", "amount": 500, "currency": "eur"},
    )
    other = add_operation(
        pg_engine,
        tenant,
        state="PENDING",
        input={"charge": "ch_F", "amount": 900, "currency": "eur"},
    )
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_f",
            "refund.created",
            refund("re_F", status="pending", charge="ch_F", amount=500, created=t),
            created=t,
        ),
    )
    assert links(pg_engine, op_id) == [("evt_f", "fingerprint", "weak")]
    assert links(pg_engine, other) == []
    assert load_operation(pg_engine, op_id).subject_id is None
    assert load_operation(pg_engine, op_id).fence == 1  # a weak candidate wakes nothing


def test_an_operation_that_knows_its_subject_gets_no_fingerprint_candidates(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_mine")  # charge ch_1, amount 1000
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_other",
            "refund.created",
            refund("re_other", status="pending", created=t),
            created=t,
        ),
    )
    assert links(pg_engine, op_id) == []
    assert load_operation(pg_engine, op_id).fence == 1


def test_event_before_the_action_report_is_matched_when_the_report_comes(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    op_id = add_operation(pg_engine, tenant, state="ACTION_STARTED")
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_early", "refund.updated", refund("re_E", status="succeeded", created=t), created=t
        ),
    )
    # Charge and amount match: a weak candidate only, nothing learned.
    assert links(pg_engine, op_id) == [("evt_early", "fingerprint", "weak")]
    # The action report: what DATA's route does, then the pending correlation.
    with Session(pg_engine) as session, session.begin():
        op = session.get(Operation, op_id)
        assert op is not None
        op.action_result = {"id": "re_E", "status": "pending"}
        op.subject_id = "re_E"
        op.state = "ACTION_ACCEPTED"
        session.flush()
        linked = correlate_pending_events(session, op, datetime.now(UTC))
        assert len(linked) == 1
        # idempotent
        assert correlate_pending_events(session, op, datetime.now(UTC)) == []
    assert links(pg_engine, op_id) == [("evt_early", "resource_id", "strong")]


def test_late_event_of_a_watched_verified_operation_is_linked_and_rechecks_it(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    op_id = add_operation(
        pg_engine,
        tenant,
        state="VERIFIED",
        final=True,
        verdict="VERIFIED",
        subject_id="re_V",
        watched=True,
    )
    before = load_operation(pg_engine, op_id)
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_late", "refund.updated", refund("re_V", status="failed", created=t), created=t
        ),
    )
    assert links(pg_engine, op_id) == [("evt_late", "resource_id", "strong")]
    after = load_operation(pg_engine, op_id)
    # Not a wake: the verdict stays. The watch schedules one recheck reading of the VERIFIED
    # operation (a new fence, due now).
    assert (after.fence, after.state) == (before.fence + 1, "VERIFIED")
    assert after.next_observation_at is not None


def test_a_linked_event_rechecks_an_operation_verified_before_the_watch_keys(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    """Migration 0008 gives an operation verified before it a ``watch_until`` but no keys: an
    event linked to it still rechecks it."""
    from sqlalchemy import delete

    from shared.db.models import WatchKey

    op_id = add_operation(
        pg_engine,
        tenant,
        state="VERIFIED",
        final=True,
        verdict="VERIFIED",
        subject_id="re_L",
        watched=True,
    )
    with pg_engine.begin() as conn:
        conn.execute(delete(WatchKey).where(WatchKey.operation_id == op_id))
    before = load_operation(pg_engine, op_id)
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_legacy", "refund.updated", refund("re_L", status="failed", created=t), created=t
        ),
    )
    after = load_operation(pg_engine, op_id)
    assert (after.fence, after.state) == (before.fence + 1, "VERIFIED")


def test_an_unlinked_event_on_the_same_charge_rechecks_a_watched_operation(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    """A second refund's ``refund.created`` carries none of the operation's keys (another
    refund id, no idempotency key), only the charge: no link, but the watch finds it."""
    op_id = add_operation(
        pg_engine,
        tenant,
        state="VERIFIED",
        final=True,
        verdict="VERIFIED",
        subject_id="re_V",
        watched=True,
    )
    unwatched = add_operation(
        pg_engine, tenant, state="VERIFIED", final=True, verdict="VERIFIED", subject_id="re_U"
    )
    before = load_operation(pg_engine, op_id)
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_other",
            "refund.created",
            refund("re_OTHER", status="pending", charge="ch_1", created=t),
            created=t,
        ),
    )
    assert links(pg_engine, op_id) == []
    after = load_operation(pg_engine, op_id)
    assert (after.fence, after.state) == (before.fence + 1, "VERIFIED")
    assert after.next_observation_at is not None
    assert load_operation(pg_engine, unwatched).next_observation_at is None


def test_other_workspaces_never_correlate(
    client: TestClient, tenant: Tenant, pg_engine: Engine, settings: object
) -> None:
    from shared.db.tenants import create_workspace

    with Session(pg_engine) as session, session.begin():
        other_ws, _ = create_workspace(session, "other", now=datetime.now(UTC))
        other_id = other_ws.id
    foreign = add_operation(pg_engine, Tenant(other_id), subject_id="re_S")
    mine = add_operation(pg_engine, tenant, subject_id="re_S")
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_s", "refund.updated", refund("re_S", status="succeeded", created=t), created=t
        ),
    )
    assert links(pg_engine, mine) == [("evt_s", "resource_id", "strong")]
    assert links(pg_engine, foreign) == []


def test_event_of_an_unsupported_api_version_is_stored_but_set_aside(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    created = datetime.now(UTC) - timedelta(minutes=5)
    op_id = add_operation(pg_engine, tenant, subject_id="re_AV", created_at=created)
    t = now_s()
    deliver(
        client,
        tenant,
        stripe_event(
            "evt_old_api",
            "refund.updated",
            refund("re_AV", status="succeeded", created=t),
            created=t,
            api_version="2019-01-01",
        ),
    )
    assert links(pg_engine, op_id) == [("evt_old_api", "resource_id", "strong")]
    with Session(pg_engine) as session:
        row = session.execute(select(Event)).scalar_one()
    assert row.api_version == "2019-01-01"
    contract = get_registry().get("stripe.refund.succeeded")
    channel = next(c for c in contract.channels if c.name == "refund_succeeded_events")
    context = EvaluationContext(correlation={"refund_id": "re_AV"})
    reduced = reduce_events(
        channel,
        [event_record(row)],
        context=context,
        operation_created_at=created,
        api_versions=contract.provider_api_versions,
    )
    assert (reduced["count"], reduced["unsupported"]) == (0, 1)
