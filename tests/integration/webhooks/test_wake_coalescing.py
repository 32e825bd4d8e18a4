"""A wake keeps the observe message already on its way while no observer has begun to read it.

``shared.lifecycle.scheduling.wake_for_events``: an open operation whose observation is due, whose
message for the current fence was sent and whose fence no observer has claimed
(``shared.lifecycle.scheduling.claim_reading``) is left as it is — its coming reading starts after
the event was linked. Otherwise the fence moves on and a new message is due, as before. The
operation rows are locked first, so an observer claiming the pending fence waits for the
correlating transaction.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from shared.db.models import Operation
from shared.intake.backlog import correlate_backlog
from shared.intake.store import store_many
from shared.lifecycle.scheduling import claim_reading, wake_for_events

from .conftest import Tenant, add_operation, links, load_operation, refund, stripe_event
from .test_group_commit import delivery

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC).replace(microsecond=0)


def pending_message(engine: Engine, op_id: str, *, due: datetime, sent: datetime | None) -> None:
    """The operation's current fence (1) is due at ``due``; its message was sent at ``sent``."""
    with Session(engine) as session, session.begin():
        session.execute(
            update(Operation)
            .where(Operation.id == op_id)
            .values(next_observation_at=due, enqueued_at=sent)
        )


def wake(engine: Engine, op_ids: list[str], now: datetime = NOW) -> list[tuple[str, int]]:
    with Session(engine) as session, session.begin():
        return wake_for_events(session, op_ids, now=now)


def claimed(engine: Engine, op_id: str, fence: int) -> bool:
    with engine.begin() as connection:
        return claim_reading(connection, op_id, fence)


def test_a_due_message_no_observer_claimed_is_kept(pg_engine: Engine, tenant: Tenant) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K1", action_result={"id": "re_K1"})
    sent = NOW - timedelta(seconds=3)
    pending_message(pg_engine, op_id, due=sent, sent=sent)
    assert wake(pg_engine, [op_id]) == []
    op = load_operation(pg_engine, op_id)
    assert (op.fence, op.next_observation_at, op.enqueued_at) == (1, sent, sent)


@pytest.mark.parametrize(
    ("due", "sent", "claim"),
    [
        # the observation is not due yet: the event brings it forward
        (+30.0, -3.0, False),
        # no message is on its way (a due time beyond the broker's countdown)
        (-3.0, None, False),
        # an observer has begun to read the pending fence: its reading may predate the event
        (-3.0, -3.0, True),
    ],
    ids=["not-due", "no-message", "fence-claimed"],
)
def test_otherwise_the_fence_moves_on_and_a_message_is_due(
    pg_engine: Engine, tenant: Tenant, due: float, sent: float | None, claim: bool
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K2", action_result={"id": "re_K2"})
    pending_message(
        pg_engine,
        op_id,
        due=NOW + timedelta(seconds=due),
        sent=None if sent is None else NOW + timedelta(seconds=sent),
    )
    if claim:
        assert claimed(pg_engine, op_id, 1)
    assert wake(pg_engine, [op_id]) == [(op_id, 2)]
    op = load_operation(pg_engine, op_id)
    # Due from now, or from when it was due already.
    assert (op.fence, op.next_observation_at, op.enqueued_at) == (
        2,
        min(NOW, NOW + timedelta(seconds=due)),
        NOW,
    )
    assert not claimed(pg_engine, op_id, 1)  # the old message is stale now


@pytest.mark.parametrize(("due", "heap_only"), [(-3.0, 1), (+30.0, 0)], ids=["due", "not-due"])
def test_waking_a_due_operation_writes_no_index_entry(
    pg_engine: Engine, tenant: Tenant, due: float, heap_only: int
) -> None:
    """The due time of an operation that is due already stays as it is, so PostgreSQL writes
    the woken row as a heap-only update; one not due yet moves its indexed due time."""
    op_id = add_operation(pg_engine, tenant, subject_id="re_K5", action_result={"id": "re_K5"})
    pending_message(pg_engine, op_id, due=NOW + timedelta(seconds=due), sent=None)
    counts = text(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = :t"
    )
    with Session(pg_engine) as session, session.begin():
        updated, hot = session.execute(counts, {"t": "operations"}).one()
        assert wake_for_events(session, [op_id], now=NOW) == [(op_id, 2)]
        after = session.execute(counts, {"t": "operations"}).one()
    assert (after[0] - updated, after[1] - hot) == (1, heap_only)


def test_closed_operations_are_neither_woken_nor_kept(pg_engine: Engine, tenant: Tenant) -> None:
    final = add_operation(
        pg_engine, tenant, subject_id="re_K3", action_result={"id": "re_K3"}, final=True,
        state="VERIFIED", verdict="VERIFIED",
    )  # fmt: skip
    unreported = add_operation(pg_engine, tenant, state="ACTION_STARTED")
    assert wake(pg_engine, [final, unreported, "op_unknown"]) == []
    assert load_operation(pg_engine, final).fence == 1
    assert load_operation(pg_engine, unreported).fence == 1


def test_an_observer_claiming_the_pending_fence_waits_for_the_correlation(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K4", action_result={"id": "re_K4"})
    pending_message(
        pg_engine, op_id, due=NOW - timedelta(seconds=3), sent=NOW - timedelta(seconds=3)
    )
    with Session(pg_engine) as correlating, correlating.begin():
        assert wake_for_events(correlating, [op_id], now=NOW) == []
        # The claim updates the row: it cannot pass the correlation, which has not committed
        # its links yet, so no readback of this fence starts before them.
        with pg_engine.connect() as observer:
            observer.execute(text("SET lock_timeout = '200ms'"))
            started = time.monotonic()
            with pytest.raises(OperationalError, match="lock timeout"):
                claim_reading(observer, op_id, 1)
            assert time.monotonic() - started >= 0.15
    assert claimed(pg_engine, op_id, 1)  # once the correlation committed, it goes through
    assert wake(pg_engine, [op_id]) == [(op_id, 2)]  # and the next event wakes again


def test_a_burst_for_one_operation_sends_one_message_per_reading(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K5", action_result={"id": "re_K5"})
    t = int(time.time())

    def arrive(event_id: str) -> None:
        body = stripe_event(
            event_id, "refund.updated", refund("re_K5", status="pending", created=t), created=t
        )
        with pg_engine.begin() as conn:
            store_many(conn, [delivery(tenant, body)])

    def correlate() -> list[tuple[str, int]]:
        with Session(pg_engine) as session, session.begin():
            return sorted({w for r in correlate_backlog(session, now=NOW) for w in r.wakes})

    arrive("evt_k5_1")
    assert correlate() == [(op_id, 2)]
    # more events while that message waits for an observer: it reads after them
    arrive("evt_k5_2")
    arrive("evt_k5_3")
    assert correlate() == []
    arrive("evt_k5_4")
    assert correlate() == []
    assert load_operation(pg_engine, op_id).fence == 2
    # an observer began to read fence 2: the next event wakes again
    assert claimed(pg_engine, op_id, 2)
    arrive("evt_k5_5")
    arrive("evt_k5_6")
    assert correlate() == [(op_id, 3)]
    assert [event_id for event_id, _, _ in links(pg_engine, op_id)] == [
        f"evt_k5_{n}" for n in range(1, 7)
    ]
