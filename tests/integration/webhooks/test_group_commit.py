"""Group commit: ``store_many`` then ``correlate_stored`` give, in one transaction, what
``ingest_event`` gives one by one — stored rows, duplicate counters, links (strong, weak,
learned subject ids) and wakes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.db.models import Event
from shared.intake.batch import correlate_stored
from shared.intake.ingest import ingest_event
from shared.intake.parse import parse_event
from shared.intake.results import Delivery
from shared.intake.store import store_many
from shared.trust.registry import get_registry
from shared.trust.signatures import VerifiedDelivery

from .conftest import Tenant, add_operation, links, load_operation, refund, stripe_event

pytestmark = pytest.mark.integration


def delivery(tenant: Tenant, body: bytes) -> Delivery:
    now = datetime.now(UTC)
    shape = get_registry().skill("stripe").manifest.event_shape
    event = parse_event(
        body,
        shape=shape,
        delivery=VerifiedDelivery(scheme="stripe", secret_index=0, timestamp=int(time.time())),
        received_at=now,
        extra_keys=("amount", "charge"),
    )
    return Delivery(tenant.workspace_id, "stripe", event, body, now)


def scenario(engine: Engine, tenant: Tenant) -> tuple[list[str], list[Delivery]]:
    known = add_operation(engine, tenant, subject_id="re_G1", action_result={"id": "re_G1"})
    other = add_operation(engine, tenant, subject_id="re_G2", action_result={"id": "re_G2"})
    timed_out = add_operation(
        engine, tenant, state="PENDING", input={"charge": "ch_T", "amount": 5, "currency": "eur"}
    )
    weak = add_operation(
        engine, tenant, state="PENDING", input={"charge": "ch_W", "amount": 7, "currency": "eur"}
    )
    t = int(time.time())
    bodies = [
        stripe_event(
            "evt_g1", "refund.updated", refund("re_G1", status="succeeded", created=t), created=t
        ),
        stripe_event(
            "evt_g2", "refund.updated", refund("re_G2", status="pending", created=t), created=t
        ),
        stripe_event(
            "evt_g1", "refund.updated", refund("re_G1", status="succeeded", created=t), created=t
        ),
        stripe_event(
            "evt_t",
            "refund.created",
            refund("re_T", status="pending", charge="ch_T", amount=5, created=t),
            created=t,
            idempotency_key=timed_out,
        ),
        stripe_event(
            "evt_w",
            "refund.created",
            refund("re_W", status="pending", charge="ch_W", amount=7, created=t),
            created=t,
        ),
        stripe_event(
            "evt_none", "charge.succeeded", {"id": "ch_zzz", "object": "charge"}, created=t
        ),
    ]
    return [known, other, timed_out, weak], [delivery(tenant, b) for b in bodies]


def snapshot(engine: Engine, ops: list[str]) -> tuple[object, ...]:
    with Session(engine) as session:
        events = sorted(session.execute(select(Event.event_id, Event.duplicates)).all())
    state = [
        (links(engine, op), load_operation(engine, op).subject_id, load_operation(engine, op).fence)
        for op in ops
    ]
    return tuple(events), tuple(map(str, state))


def one_by_one(engine: Engine) -> tuple[str, list[str]]:
    """The scenario in a fresh workspace, each delivery ingested in its own transaction (the
    reference the batched paths are compared with); its workspace id and operations."""
    from shared.db.tenants import create_workspace

    with Session(engine) as session, session.begin():
        ws, _ = create_workspace(session, "one-by-one", now=datetime.now(UTC))
        workspace_id = ws.id
    ops, deliveries = scenario(engine, Tenant(workspace_id))
    for d in deliveries:
        with Session(engine) as session, session.begin():
            ingest_event(
                session,
                workspace_id=d.workspace_id,
                provider=d.provider,
                event=d.event,
                raw=d.raw,
                now=d.now,
            )
    return workspace_id, ops


def test_a_batch_equals_one_by_one(pg_engine: Engine, tenant: Tenant) -> None:
    ops, deliveries = scenario(pg_engine, tenant)
    with Session(pg_engine) as session, session.begin():
        results = store_many(session, deliveries)
        fresh = [(d, r) for d, r in zip(deliveries, results, strict=True) if not r.duplicate]
        correlate_stored(session, fresh, now=max(d.now for d in deliveries))
    assert [r.duplicate for r in results] == [False, False, True, False, False, False]
    batched = snapshot(pg_engine, ops)
    wakes = sorted({w for r in results for w in r.wakes})

    # the same deliveries, one transaction each, in a fresh workspace of the same shape
    second_id, ops2 = one_by_one(pg_engine)
    with Session(pg_engine) as session:
        events2 = sorted(
            session.execute(
                select(Event.event_id, Event.duplicates).where(Event.workspace_id == second_id)
            ).all()
        )
    # event rows and counters
    expected = {"evt_g1": 1, "evt_g2": 0, "evt_t": 0, "evt_w": 0, "evt_none": 0}
    assert dict(events2) == expected
    with Session(pg_engine) as session:
        first = session.execute(
            select(Event.event_id, Event.duplicates).where(
                Event.workspace_id == tenant.workspace_id
            )
        ).all()
    assert dict(first) == expected
    # links, learned subject ids and fences agree operation by operation
    assert batched[1] == snapshot(pg_engine, ops2)[1]
    assert [op for op, _ in wakes] == sorted([ops[0], ops[1], ops[2]])
    assert links(pg_engine, ops[2]) == [("evt_t", "idempotency_key", "strong")]
    assert load_operation(pg_engine, ops[2]).subject_id == "re_T"
    assert links(pg_engine, ops[3]) == [("evt_w", "fingerprint", "weak")]
