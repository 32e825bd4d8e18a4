"""The intake answers after the durable insert; correlation is the observer's, after the answer.

The intake stores each event marked not yet correlated and sends a ``provely.correlate`` message
for the batches committed meanwhile; a correlator claims pending events (rows of
``event_backlog``) with ``FOR UPDATE SKIP LOCKED`` (so two never take the same), links and
wakes; the sweeper correlates what a lost message left pending past its grace. The result equals
correlating at intake time.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from services.ingress.intake.correlate_messages import correlation_requests
from services.verdict.sweeper import Sweeper
from shared.db.models import Event, EventBacklog
from shared.intake.backlog import correlate_backlog
from shared.intake.correlate import correlate_pending_events
from shared.intake.correlator import correlate_pending
from shared.intake.results import IntakeResult
from shared.intake.store import store_many
from shared.runtime.settings import Settings

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
from .test_group_commit import delivery, one_by_one, scenario, snapshot

pytestmark = pytest.mark.integration


def store(engine: Engine, tenant: Tenant, *bodies: bytes) -> None:
    """Store signed bodies as the intake does (committed, waiting for a correlator)."""
    with Session(engine) as session, session.begin():
        store_many(session, [delivery(tenant, body) for body in bodies])


def pending(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return sorted(
            session.execute(
                select(Event.event_id).join(EventBacklog, EventBacklog.event_pk == Event.id)
            ).scalars()
        )


def test_the_answer_comes_before_correlation_and_one_message_asks_for_it(
    client: TestClient, tenant: Tenant, pg_engine: Engine, redis_url: str
) -> None:
    import redis

    queue = redis.Redis.from_url(redis_url)
    key = QUEUE_PREFIX + "correlate"
    queued = queue.llen(key)
    op_id = add_operation(pg_engine, tenant, subject_id="re_B1", action_result={"id": "re_B1"})
    t = int(time.time())
    body = stripe_event(
        "evt_b1", "refund.updated", refund("re_B1", status="succeeded", created=t), created=t
    )
    assert client.post(tenant.path, content=body, headers=signed(body)).status_code == 200
    # stored and committed, not linked, not woken yet; one correlate message (no arguments)
    assert correlation_requests.wait_idle()
    assert pending(pg_engine) == ["evt_b1"]
    assert links(pg_engine, op_id) == []
    assert load_operation(pg_engine, op_id).fence == 1
    assert queue.llen(key) == queued + 1
    message = json.loads(queue.lindex(key, 0))
    assert message["headers"]["task"] == "provely.correlate"
    assert message["headers"]["argsrepr"] == "()"
    # a repeat stores nothing and asks for nothing
    again = client.post(tenant.path, content=body, headers=signed(body))
    assert again.json()["duplicate"] is True
    assert correlation_requests.wait_idle()
    assert queue.llen(key) == queued + 1
    # the observer's run links, wakes and marks; a second run finds nothing
    assert correlate_pending(pg_engine) == 1
    assert correlate_pending(pg_engine) == 0
    woken = json.loads(queue.lindex(QUEUE_PREFIX + "observe", 0))
    assert woken["headers"]["kwargsrepr"] == repr({"pairs": [[op_id, 2]]})
    assert pending(pg_engine) == []
    assert links(pg_engine, op_id) == [("evt_b1", "resource_id", "strong")]
    assert load_operation(pg_engine, op_id).fence == 2


def test_stored_then_correlated_later_equals_correlated_at_intake(
    pg_engine: Engine, tenant: Tenant
) -> None:
    ops, deliveries = scenario(pg_engine, tenant)
    with Session(pg_engine) as session, session.begin():
        stored = store_many(session, deliveries)
    assert [r.duplicate for r in stored] == [False, False, True, False, False, False]
    assert all(link == [] for link in (links(pg_engine, op) for op in ops))
    with Session(pg_engine) as session, session.begin():
        results = correlate_backlog(session, now=datetime.now(UTC))
    assert len(results) == 5
    later = snapshot(pg_engine, ops)
    wakes = sorted({w for r in results for w in r.wakes})

    _, ops2 = one_by_one(pg_engine)
    assert later[1] == snapshot(pg_engine, ops2)[1]
    assert [op for op, _ in wakes] == sorted([ops[0], ops[1], ops[2]])
    assert load_operation(pg_engine, ops[2]).subject_id == "re_T"
    assert links(pg_engine, ops[3]) == [("evt_w", "fingerprint", "weak")]
    assert pending(pg_engine) == []


def test_an_event_the_report_linked_first_is_not_linked_or_woken_twice(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(pg_engine, tenant, state="PENDING")
    t = int(time.time())
    body = stripe_event(
        "evt_r1", "refund.updated", refund("re_R1", status="succeeded", created=t), created=t
    )
    store(pg_engine, tenant, body)
    # the action report arrives before any correlator: the operation learns re_R1 and finds
    # the stored event by its keys
    with Session(pg_engine) as session, session.begin():
        from shared.db.models import Operation

        op = session.get(Operation, op_id)
        assert op is not None
        op.subject_id = "re_R1"
        op.action_result = {"id": "re_R1"}
        session.flush()
        assert correlate_pending_events(session, op, datetime.now(UTC)) != []
    fence = load_operation(pg_engine, op_id).fence
    with Session(pg_engine) as session, session.begin():
        results = correlate_backlog(session, now=datetime.now(UTC))
    assert [r.links for r in results] == [[]]
    assert [r.wakes for r in results] == [[]]
    assert links(pg_engine, op_id) == [("evt_r1", "resource_id", "strong")]
    assert load_operation(pg_engine, op_id).fence == fence
    assert pending(pg_engine) == []


def test_a_weak_link_becomes_strong_when_the_correlator_matches_strongly(
    pg_engine: Engine, tenant: Tenant
) -> None:
    op_id = add_operation(
        pg_engine, tenant, state="PENDING", input={"charge": "ch_U", "amount": 9, "currency": "eur"}
    )
    t = int(time.time())
    body = stripe_event(
        "evt_u1",
        "refund.created",
        refund("re_U1", status="pending", charge="ch_U", amount=9, created=t),
        created=t,
    )
    store(pg_engine, tenant, body)
    with Session(pg_engine) as session, session.begin():
        from shared.db.models import Operation

        op = session.get(Operation, op_id)
        assert op is not None
        correlate_pending_events(session, op, datetime.now(UTC))  # the fingerprint: weak
    assert links(pg_engine, op_id) == [("evt_u1", "fingerprint", "weak")]
    with Session(pg_engine) as session, session.begin():
        op = session.get(Operation, op_id)
        assert op is not None
        op.subject_id = "re_U1"  # learned meanwhile (say, from a readback)
    with Session(pg_engine) as session, session.begin():
        results = correlate_backlog(session, now=datetime.now(UTC))
    assert links(pg_engine, op_id) == [("evt_u1", "resource_id", "strong")]
    assert [w[0] for r in results for w in r.wakes] == [op_id]


def test_two_correlators_never_take_the_same_event(pg_engine: Engine, tenant: Tenant) -> None:
    import threading

    t = int(time.time())
    bodies = [
        stripe_event(
            f"evt_s{i}",
            "refund.updated",
            refund(f"re_S{i}", status="pending", created=t),
            created=t,
        )
        for i in range(6)
    ]
    store(pg_engine, tenant, *bodies)
    now = datetime.now(UTC)
    others: list[IntakeResult] = []

    def second() -> None:
        # claims what the first left, then waits for the workspace's correlation lock
        with Session(pg_engine) as session, session.begin():
            others.extend(correlate_backlog(session, now=now))

    with Session(pg_engine) as first, first.begin():
        taken = correlate_backlog(first, now=now, limit=4)
        assert len(taken) == 4
        worker = threading.Thread(target=second)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the second correlator did not wait for the first"
    worker.join(10)
    assert len(others) == 2
    assert not {r.event_pk for r in taken} & {r.event_pk for r in others}
    assert pending(pg_engine) == []


def test_the_sweeper_correlates_what_a_lost_message_left_pending(
    pg_engine: Engine, tenant: Tenant, settings: Settings
) -> None:
    op_id = add_operation(pg_engine, tenant, subject_id="re_L1", action_result={"id": "re_L1"})
    t = int(time.time())
    old = stripe_event(
        "evt_l1", "refund.updated", refund("re_L1", status="succeeded", created=t), created=t
    )
    young = stripe_event(
        "evt_l2", "refund.updated", refund("re_L2", status="pending", created=t), created=t
    )
    received = datetime.now(UTC)
    store(pg_engine, tenant, old)
    later = received + timedelta(seconds=settings.sweeper_grace_seconds + 1)
    with Session(pg_engine) as session, session.begin():
        d = delivery(tenant, young)
        store_many(session, [type(d)(d.workspace_id, d.provider, d.event, d.raw, later)])
    sent: list[tuple[str, int, float]] = []
    sweeper = Sweeper(
        engine=pg_engine,
        settings=settings,
        clock=lambda: later,
        send_observe=lambda op, fence, countdown: sent.append((op, fence, countdown)),
    )
    report = sweeper.sweep_once()
    assert report.correlated == 1
    # the old event is linked and its operation woken; the young one waits for its message
    assert links(pg_engine, op_id) == [("evt_l1", "resource_id", "strong")]
    assert sent == [(op_id, 2, 0.0)]
    assert pending(pg_engine) == ["evt_l2"]


def test_a_burst_of_batches_is_asked_for_with_few_messages(
    client: TestClient, tenant: Tenant, pg_engine: Engine, redis_url: str
) -> None:
    """Requests made while a message is being sent share the next one; none is left unsent."""
    import threading

    import redis

    queue = redis.Redis.from_url(redis_url)
    key = QUEUE_PREFIX + "correlate"
    queued = queue.llen(key)
    t = int(time.time())
    bodies = [
        stripe_event(
            f"evt_burst{i}",
            "refund.updated",
            refund(f"re_X{i}", status="pending", created=t),
            created=t,
        )
        for i in range(24)
    ]

    def post(body: bytes) -> None:
        assert client.post(tenant.path, content=body, headers=signed(body)).status_code == 200

    threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert correlation_requests.wait_idle()
    sent = queue.llen(key) - queued
    assert 1 <= sent <= 24
    assert correlate_pending(pg_engine) == 24


def test_a_correlator_waits_for_an_action_report_in_flight(
    pg_engine: Engine, tenant: Tenant
) -> None:
    """The interleaving that would lose a link without the workspace's correlation lock: the
    report scans the stored events, then an event is stored, then the correlator looks for
    candidates — all before the report commits."""
    import threading

    from shared.db.models import Operation
    from shared.intake.correlate import lock_correlation

    op_id = add_operation(pg_engine, tenant, state="PENDING")
    t = int(time.time())
    body = stripe_event(
        "evt_z1", "refund.updated", refund("re_Z1", status="succeeded", created=t), created=t
    )
    report = Session(pg_engine)
    report.begin()
    lock_correlation(report, [tenant.workspace_id], shared=True)
    op = report.get(Operation, op_id, with_for_update=True)
    assert op is not None
    op.subject_id = "re_Z1"
    op.action_result = {"id": "re_Z1"}
    report.flush()
    assert correlate_pending_events(report, op, datetime.now(UTC)) == []  # nothing stored yet
    store(pg_engine, tenant, body)
    done = threading.Event()

    def correlator() -> None:
        with Session(pg_engine) as session, session.begin():
            correlate_backlog(session, now=datetime.now(UTC))
        done.set()

    worker = threading.Thread(target=correlator)
    worker.start()
    try:
        assert not done.wait(0.5), "the correlator did not wait for the report"
    finally:
        report.commit()
        report.close()
    assert done.wait(10)
    worker.join()
    assert links(pg_engine, op_id) == [("evt_z1", "resource_id", "strong")]
    assert pending(pg_engine) == []


def test_a_report_links_an_event_a_correlator_has_claimed_without_deadlock(
    pg_engine: Engine, tenant: Tenant
) -> None:
    """The report holds the workspace's correlation lock (shared) and the operation's row; a
    correlator claims the stored event, then waits for the lock; the report links the claimed
    event (its foreign key check locks the event row for key share) and commits. The claim must
    not block that link, or the two wait for each other."""
    import threading

    from shared.db.models import Operation
    from shared.intake.correlate import lock_correlation

    op_id = add_operation(
        pg_engine, tenant, state="PENDING", input={"charge": "ch_K", "amount": 3, "currency": "eur"}
    )
    t = int(time.time())
    body = stripe_event(
        "evt_k1",
        "refund.created",
        refund("re_K1", status="pending", charge="ch_K", amount=3, created=t),
        created=t,
        idempotency_key=op_id,
    )
    store(pg_engine, tenant, body)
    report = Session(pg_engine)
    report.begin()
    lock_correlation(report, [tenant.workspace_id], shared=True)
    op = report.get(Operation, op_id, with_for_update=True)
    assert op is not None
    failures: list[BaseException] = []
    done = threading.Event()

    def correlator() -> None:
        try:
            with Session(pg_engine) as session, session.begin():
                correlate_backlog(session, now=datetime.now(UTC))
        except BaseException as exc:
            failures.append(exc)
        done.set()

    worker = threading.Thread(target=correlator)
    worker.start()
    try:
        assert not done.wait(0.5)  # claimed, waiting for the lock
        linked = correlate_pending_events(report, op, datetime.now(UTC))
        assert len(linked) == 1
        report.commit()
    finally:
        report.close()
    assert done.wait(10)
    worker.join()
    assert failures == []
    assert links(pg_engine, op_id) == [("evt_k1", "idempotency_key", "strong")]
    assert load_operation(pg_engine, op_id).subject_id == "re_K1"
    assert pending(pg_engine) == []


def test_the_wakes_of_one_transaction_go_to_redis_in_messages_of_a_few_each(
    client: TestClient, redis_url: str
) -> None:
    """``messages.observe_many`` sends ``observe_many`` messages of at most ``WAKES_PER_MESSAGE``
    wakes each, in order, pipelined (kombu's publish batch) on the observe queue, the wakes
    as the task's keyword ``pairs``."""
    import redis

    from shared.lifecycle import messages
    from shared.runtime.queues import WAKES_PER_MESSAGE

    queue = redis.Redis.from_url(redis_url)
    key = QUEUE_PREFIX + "observe"
    queue.delete(key)
    wakes = [(f"op_batch_{i:04d}", i + 2) for i in range(7000)]  # more than one round trip
    assert messages.observe_many(wakes) is True
    count = -(-7000 // WAKES_PER_MESSAGE)
    assert queue.llen(key) == count
    sent = [json.loads(raw) for raw in reversed(queue.lrange(key, 0, -1))]  # LPUSH: newest first
    assert [m["headers"]["task"] for m in sent] == ["provely.observe_many"] * count
    bodies = [json.loads(base64.b64decode(m["body"])) for m in sent]
    assert {len(args) for args, _, _ in bodies} == {0}  # no positional arguments
    carried = [pair for _, kwargs, _ in bodies for pair in kwargs["pairs"]]
    assert carried == [[op, f] for op, f in wakes]
    assert max(len(kwargs["pairs"]) for _, kwargs, _ in bodies) == WAKES_PER_MESSAGE
    assert len({m["headers"]["id"] for m in sent}) == count
    # the same message as one ``observe`` makes (the same headers, routed to the same queue)
    queue.delete(key)
    assert messages.observe("op_single", 2, countdown_s=0) is True
    single = json.loads(queue.lindex(key, 0))
    assert set(sent[0]["headers"]) == set(single["headers"])
    assert sent[0]["properties"]["delivery_info"] == single["properties"]["delivery_info"]
    assert sent[0]["headers"]["ignore_result"] is True
    queue.delete(key)


def test_an_operation_whose_keys_changed_is_matched_by_its_new_keys(
    pg_engine: Engine, tenant: Tenant
) -> None:
    """The correlator keeps the keys it derived of a candidate operation while the operation's
    documents are unchanged; a change to any of them is seen by the next batch. Here only the
    action result changes (the subject id stays empty), and it names the refund."""
    from sqlalchemy import update

    from shared.db.models import Operation

    op_id = add_operation(pg_engine, tenant, input={"charge": "ch_M1", "amount": 700})
    t = int(time.time())

    def correlate(event_id: str) -> None:
        body = stripe_event(
            event_id,
            "refund.updated",
            refund("re_M1", status="pending", charge="ch_M1", amount=700, created=t),
            created=t,
        )
        store(pg_engine, tenant, body)
        with Session(pg_engine) as session, session.begin():
            correlate_backlog(session, now=datetime.now(UTC))

    correlate("evt_m1")  # by the fingerprint alone: weak
    with Session(pg_engine) as session, session.begin():
        session.execute(
            update(Operation).where(Operation.id == op_id).values(action_result={"id": "re_M1"})
        )
    correlate("evt_m2")  # the action result names the refund now: strong
    assert links(pg_engine, op_id) == [
        ("evt_m1", "fingerprint", "weak"),
        ("evt_m2", "resource_id", "strong"),
    ]
