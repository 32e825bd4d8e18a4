"""A wake keeps the observe message already on its way when that message reads after the event.

``shared.scheduling.wake_for_events``: an open operation whose observation is due, whose message
for the current fence was sent after the event arrived (by more than the clock margin) and whose
fence has not been read is left as it is — its coming reading includes the event. Otherwise the
fence moves on and a new message is due, as before. The operation rows are locked first, so an
observer storing the pending fence waits for the correlating transaction.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from shared.db.models import Observation, Operation
from shared.intake import Delivery, correlate_backlog, store_many
from shared.scheduling import WAKE_CLOCK_MARGIN, wake_for_events

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


def wake(
    engine: Engine, received: dict[str, datetime], now: datetime = NOW
) -> list[tuple[str, int]]:
    with Session(engine) as session, session.begin():
        return wake_for_events(session, received, now=now)


def observed(engine: Engine, op_id: str, fence: int) -> None:
    with Session(engine) as session, session.begin():
        session.add(
            Observation(
                operation_id=op_id,
                workspace_id=load_operation(engine, op_id).workspace_id,
                fence=fence,
                channel="refund_api",
                status="ok",
                observed_at=NOW,
            )
        )


def test_a_message_sent_after_the_event_is_kept(pg_engine: Engine, tenant: Tenant) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K1", action_result={"id": "re_K1"})
    pending_message(
        pg_engine, op_id, due=NOW - timedelta(seconds=3), sent=NOW - timedelta(seconds=3)
    )
    received = NOW - timedelta(seconds=3) - WAKE_CLOCK_MARGIN
    assert wake(pg_engine, {op_id: received}) == []
    op = load_operation(pg_engine, op_id)
    assert (op.fence, op.next_observation_at, op.enqueued_at) == (
        1,
        NOW - timedelta(seconds=3),
        NOW - timedelta(seconds=3),
    )


@pytest.mark.parametrize(
    ("due", "sent", "received", "read"),
    [
        # the event came after the message was sent (or within the clock margin of it)
        (-3.0, -3.0, -3.5, False),
        (-3.0, -3.0, -1.0, False),
        # the observation is not due yet: the event brings it forward
        (+30.0, -3.0, -60.0, False),
        # no message is on its way (a due time beyond the broker's countdown)
        (-3.0, None, -60.0, False),
        # the pending fence was read already: its reading may predate the event
        (-3.0, -3.0, -60.0, True),
    ],
    ids=["event-within-margin", "event-after-message", "not-due", "no-message", "fence-read"],
)
def test_otherwise_the_fence_moves_on_and_a_message_is_due(
    pg_engine: Engine,
    tenant: Tenant,
    due: float,
    sent: float | None,
    received: float,
    read: bool,
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K2", action_result={"id": "re_K2"})
    pending_message(
        pg_engine,
        op_id,
        due=NOW + timedelta(seconds=due),
        sent=None if sent is None else NOW + timedelta(seconds=sent),
    )
    if read:
        observed(pg_engine, op_id, 1)
    assert wake(pg_engine, {op_id: NOW + timedelta(seconds=received)}) == [(op_id, 2)]
    op = load_operation(pg_engine, op_id)
    assert (op.fence, op.next_observation_at, op.enqueued_at) == (2, NOW, NOW)


def test_closed_operations_are_neither_woken_nor_kept(pg_engine: Engine, tenant: Tenant) -> None:
    final = add_operation(
        pg_engine, tenant, subject_id="re_K3", action_result={"id": "re_K3"}, final=True,
        state="VERIFIED", verdict="VERIFIED",
    )  # fmt: skip
    unreported = add_operation(pg_engine, tenant, state="ACTION_STARTED")
    assert wake(pg_engine, {final: NOW, unreported: NOW, "op_unknown": NOW}) == []
    assert load_operation(pg_engine, final).fence == 1
    assert load_operation(pg_engine, unreported).fence == 1


def test_an_observer_storing_the_pending_fence_waits_for_the_correlation(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K4", action_result={"id": "re_K4"})
    pending_message(
        pg_engine, op_id, due=NOW - timedelta(seconds=3), sent=NOW - timedelta(seconds=3)
    )
    with Session(pg_engine) as correlating, correlating.begin():
        assert wake_for_events(correlating, {op_id: NOW - timedelta(seconds=10)}, now=NOW) == []
        # The observer's first statement when it stores a reading locks the row (it counts the
        # attempt): it cannot pass the correlation, which has not committed its links yet.
        with pg_engine.connect() as observer:
            observer.execute(text("SET lock_timeout = '200ms'"))
            started = time.monotonic()
            with pytest.raises(OperationalError, match="lock timeout"):
                observer.execute(
                    update(Operation)
                    .where(Operation.id == op_id)
                    .values(attempts=Operation.attempts + 1)
                )
            assert time.monotonic() - started >= 0.15
    with pg_engine.begin() as observer:  # once the correlation committed, it goes through
        observer.execute(
            update(Operation).where(Operation.id == op_id).values(attempts=Operation.attempts + 1)
        )


def test_a_burst_for_one_operation_sends_one_message_until_the_events_outrun_it(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_K5", action_result={"id": "re_K5"})
    t = int(time.time())

    def arrive(event_id: str, at: datetime) -> None:
        body = stripe_event(
            event_id, "refund.updated", refund("re_K5", status="pending", created=t), created=t
        )
        d = delivery(tenant, body)
        with pg_engine.begin() as conn:
            store_many(conn, [Delivery(d.workspace_id, d.provider, d.event, d.raw, at)])

    def correlate(at: datetime) -> list[tuple[str, int]]:
        with Session(pg_engine) as session, session.begin():
            return [w for r in correlate_backlog(session, now=at) for w in r.wakes]

    arrive("evt_k5_1", NOW - timedelta(seconds=20))
    assert correlate(NOW - timedelta(seconds=10)) == [(op_id, 2)]  # sent at -10 s
    # two more arrived before that message was sent, correlated later: it reads after both
    arrive("evt_k5_2", NOW - timedelta(seconds=15))
    arrive("evt_k5_3", NOW - timedelta(seconds=12))
    assert correlate(NOW - timedelta(seconds=5)) == []
    assert load_operation(pg_engine, op_id).fence == 2
    # one that arrived after the message was sent wakes again
    arrive("evt_k5_4", NOW - timedelta(seconds=9))
    assert correlate(NOW) == [(op_id, 3)]
    assert [event_id for event_id, _, _ in links(pg_engine, op_id)] == [
        "evt_k5_1",
        "evt_k5_2",
        "evt_k5_3",
        "evt_k5_4",
    ]
