"""The observer, the evaluation and the sweeper called in-process on real PostgreSQL and Redis.

The provider is an ``httpx.MockTransport``; messages the code would send are captured instead of
going to a broker, so each step can be checked on its own: fences, wakes, the webhook reduction
from stored events, the deadline and the action window applied with no task, the shared token
bucket in Redis.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine, event, select

from services.observer import observe as observe_module
from services.observer.observe import ObserveOutcome, Observer
from services.verdict.evaluate import Plan, evaluate_operation
from services.verdict.sweeper import ACTION_NOT_REPORTED, Sweeper
from shared.core.contract import contract_hash
from shared.db.models import Event, EventKey, Observation, Operation
from shared.db.session import session_scope
from shared.lifecycle.scheduling import ScheduleConflict, schedule_observation, wake
from shared.runtime.ratelimit import LocalTokenBucket, RedisTokenBucket
from shared.runtime.settings import Settings, get_settings
from tests.integration.workers.conftest import (
    API_KEY,
    SECRET_KEY,
    Cluster,
    Tenant,
    make_tenant,
    observations_of,
    short_contract,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def env(
    pg_engine: Engine, migrated_postgres_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    """Settings for this process (receipts and secrets read them) and a Cluster-like handle."""
    values = {
        "PROVELY_DATABASE_URL": migrated_postgres_url,
        "PROVELY_SECRET_KEY": SECRET_KEY,
        "PROVELY_DATA_DIR": str(tmp_path),
        "PROVELY_JITTER_RATIO": "0",
        "PROVELY_SWEEPER_GRACE_SECONDS": "2",
        "PROVELY_SWEEPER_INTERVAL_SECONDS": "1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield Cluster(env=values, settings=get_settings(), engine=pg_engine, logs=tmp_path)
    get_settings.cache_clear()


class Sent:
    def __init__(self) -> None:
        self.evaluates: list[str] = []
        self.observes: list[tuple[str, int, float]] = []
        self.plans: list[tuple[str, Plan]] = []


class Refunds:
    """A MockTransport provider: the body to answer per refund id, or a status code."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, Any]]] = {}
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return httpx.Response(401, json={})
        refund_id = request.url.path.rsplit("/", 1)[-1]
        code, body = self.answers.get(refund_id, (404, {}))
        return httpx.Response(code, json=body)


def _observer(cluster: Cluster, refunds: Refunds, sent: Sent, *, now: datetime | None = None):
    return Observer(
        settings=cluster.settings,
        engine=cluster.engine,
        http=httpx.Client(transport=httpx.MockTransport(refunds.handler)),
        limiter=LocalTokenBucket(),
        clock=(lambda: now) if now else (lambda: datetime.now(UTC)),
        sleep=lambda _s: None,
        send_evaluate=sent.evaluates.append,
        resend_observe=lambda op, fence, cd: sent.observes.append((op, fence, cd)),
    )


def _operation(
    cluster: Cluster,
    tenant: Tenant,
    refund_id: str | None,
    *,
    created: datetime,
    charge: str = "ch_1",
    state: str = "OBSERVING",
    action_deadline: datetime | None = None,
) -> str:
    op_id = f"op_{refund_id or 'none'}_{time.monotonic_ns()}"
    with session_scope(cluster.engine) as session:
        op = Operation(
            id=op_id,
            workspace_id=tenant.workspace_id,
            contract_id=tenant.contract.id,
            contract_version=tenant.contract.version,
            contract_hash=contract_hash(tenant.contract),
            completion_level="succeeded",
            custom_contract_id=tenant.contract_row_id,
            state=state,
            final=False,
            version=1,
            input={"charge": charge, "amount": 1000, "currency": "usd"},
            action_result={"id": refund_id} if refund_id else None,
            action_reported_at=created if state != "CREATED" else None,
            action_deadline=action_deadline,
            subject_id=refund_id,
            learned_keys={},
            attempts=0,
            fence=0,
            created_at=created,
            updated_at=created,
        )
        session.add(op)
        session.flush()
        if state != "CREATED":
            schedule_observation(session, op, delay_ms=0, now=created)
    return op_id


def _op(cluster: Cluster, op_id: str) -> Operation:
    with session_scope(cluster.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        session.expunge(op)
        return op


def _refund(refund_id: str, *, status: str = "succeeded", created: datetime) -> dict[str, Any]:
    return {
        "id": refund_id,
        "object": "refund",
        "amount": 1000,
        "currency": "usd",
        "charge": "ch_1",
        "status": status,
        "created": int(created.timestamp()) + 1,
    }


def test_observe_is_fenced_and_stores_one_reading_per_channel(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.fence"), name="fence"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_f", created=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_f"] = (200, _refund("re_f", created=now))
    observer = _observer(env, refunds, sent)

    assert observer.observe(op_id, 2) is ObserveOutcome.STALE
    assert _op(env, op_id).reading_fence is None  # a stale message claims nothing
    assert observer.observe(op_id, 1) is ObserveOutcome.OBSERVED
    assert _op(env, op_id).reading_fence == 1
    assert observer.observe(op_id, 1) is ObserveOutcome.DUPLICATE
    assert observer.observe("op_missing", 1) is ObserveOutcome.MISSING
    assert sent.evaluates == [op_id, op_id]  # the duplicate re-sends evaluate, nothing else
    assert [str(r.url) for r in refunds.requests] == ["http://provider.test/v1/refunds/re_f"]

    with session_scope(env.engine) as session:
        rows = (
            session.execute(select(Observation).where(Observation.operation_id == op_id))
            .scalars()
            .all()
        )
        by_channel = {row.channel: row for row in rows}
    assert set(by_channel) == {"refund_readback", "refund_created_events"}
    readback = by_channel["refund_readback"]
    assert readback.fence == 1
    assert readback.status == "ok"
    assert readback.digest == hashlib.sha256(readback.raw or b"").hexdigest()
    # The test's contract is a workspace contract: the reading keeps what its conditions read.
    assert json.loads(readback.raw or b"{}") == readback.value
    assert readback.value["status"] == "succeeded"
    assert "id" not in readback.value
    assert by_channel["refund_created_events"].value["count"] == 0
    assert _op(env, op_id).attempts == 1


def test_the_fence_is_claimed_and_committed_before_the_provider_is_read(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.claim"), name="claim"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_c", created=now)
    claimed_when_read: list[int | None] = []

    class Watching(Refunds):
        def handler(self, request: httpx.Request) -> httpx.Response:
            claimed_when_read.append(_op(env, op_id).reading_fence)  # another connection
            return super().handler(request)

    refunds, sent = Watching(), Sent()
    refunds.answers["re_c"] = (200, _refund("re_c", status="pending", created=now))
    assert _observer(env, refunds, sent).observe(op_id, 1) is ObserveOutcome.OBSERVED
    assert claimed_when_read == [1]


def test_a_fence_moved_while_the_claim_waits_is_stale_and_nothing_is_read(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.claimrace"), name="claimrace"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_cr", created=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_cr"] = (200, _refund("re_cr", status="pending", created=now))
    outcome: list[ObserveOutcome] = []
    with session_scope(env.engine) as waking:
        assert wake(waking, op_id, now=now) == 2  # the row stays locked until commit
        observing = threading.Thread(
            target=lambda: outcome.append(_observer(env, refunds, sent).observe(op_id, 1))
        )
        observing.start()
        observing.join(0.5)
        assert observing.is_alive()  # read fence 1, then waits to claim it
    observing.join(10)
    assert outcome == [ObserveOutcome.STALE]
    assert refunds.requests == []
    assert _op(env, op_id).reading_fence is None


def _statements_of(engine: Engine, run: Any) -> list[str]:
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return statements


def test_on_postgresql_the_load_and_the_claim_are_one_statement(
    env: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An observe is four statements: the load that claims the fence, the attempt counted, the
    webhook events reduced, the observations inserted. A stale or duplicate message is one
    statement and claims nothing. The operation is built once: its facts did not change."""
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.onestmt"), name="onestmt"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_os", created=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_os"] = (200, _refund("re_os", status="pending", created=now))
    observer = _observer(env, refunds, sent)
    observer.observe(_operation(env, tenant, "re_os", created=now), 1)  # contract loaded

    stale = _statements_of(env.engine, lambda: observer.observe(op_id, 2))
    assert len(stale) == 1
    assert _op(env, op_id).reading_fence is None
    built: list[object] = []
    operation_of = observe_module.operation_of
    monkeypatch.setattr(
        observe_module, "operation_of", lambda row: built.append(row) or operation_of(row)
    )
    observed = _statements_of(env.engine, lambda: observer.observe(op_id, 1))
    assert len(built) == 1
    assert _op(env, op_id).attempts == 1
    assert len(observed) == 4, observed
    assert observed[0].startswith("WITH claimed AS")
    assert not [s for s in observed[1:] if "reading_fence" in s]
    assert _op(env, op_id).reading_fence == 1
    duplicate = _statements_of(env.engine, lambda: observer.observe(op_id, 1))
    assert len(duplicate) == 1


def test_an_operation_closed_while_the_claim_waits_is_not_read(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.closerace"), name="closerace"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_cl", created=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_cl"] = (200, _refund("re_cl", status="pending", created=now))
    outcome: list[ObserveOutcome] = []
    with session_scope(env.engine) as closing:
        op = closing.get(Operation, op_id)
        assert op is not None
        op.state, op.final, op.next_observation_at = "FAILED", True, None
        closing.flush()  # the row stays locked until commit; the fence does not move
        observing = threading.Thread(
            target=lambda: outcome.append(_observer(env, refunds, sent).observe(op_id, 1))
        )
        observing.start()
        observing.join(0.5)
        assert observing.is_alive()  # waits to claim fence 1
    observing.join(10)
    assert outcome == [ObserveOutcome.STALE]
    assert refunds.requests == []
    assert _op(env, op_id).reading_fence is None


def test_on_sqlite_the_claim_is_a_statement_of_its_own_committed_before_the_read(
    sqlite_url: str, sqlite_engine: Engine, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {
        "PROVELY_DATABASE_URL": sqlite_url,
        "PROVELY_SECRET_KEY": SECRET_KEY,
        "PROVELY_DATA_DIR": str(tmp_path),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        lite = Cluster(env=values, settings=get_settings(), engine=sqlite_engine, logs=tmp_path)
        tenant = make_tenant(
            lite, "http://provider.test", short_contract(contract_id="t.lite"), name="lite"
        )
        now = datetime.now(UTC)
        op_id = _operation(lite, tenant, "re_l", created=now)
        claimed_when_read: list[int | None] = []

        class Watching(Refunds):
            def handler(self, request: httpx.Request) -> httpx.Response:
                claimed_when_read.append(_op(lite, op_id).reading_fence)  # another connection
                return super().handler(request)

        refunds, sent = Watching(), Sent()
        refunds.answers["re_l"] = (200, _refund("re_l", status="pending", created=now))
        observer = _observer(lite, refunds, sent)
        assert observer.observe(op_id, 2) is ObserveOutcome.STALE
        assert _op(lite, op_id).reading_fence is None
        observed = _statements_of(lite.engine, lambda: observer.observe(op_id, 1))
        assert claimed_when_read == [1]
        assert [s for s in observed if s.startswith("UPDATE operations SET reading_fence")]
        assert observer.observe(op_id, 1) is ObserveOutcome.DUPLICATE
        assert sent.evaluates == [op_id, op_id]
    finally:
        get_settings.cache_clear()


def test_observe_many_reads_its_operations_at_once_and_answers_in_order(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.many"), name="many"
    )
    now = datetime.now(UTC)
    ops = [_operation(env, tenant, f"re_m{n}", created=now) for n in range(3)]
    both_in_flight = threading.Barrier(3, timeout=5)

    class Together(Refunds):
        def handler(self, request: httpx.Request) -> httpx.Response:
            both_in_flight.wait()  # each readback waits until all three are in flight
            return super().handler(request)

    refunds, sent = Together(), Sent()
    for n in range(3):
        refunds.answers[f"re_m{n}"] = (200, _refund(f"re_m{n}", status="pending", created=now))
    observer = _observer(env, refunds, sent)
    outcomes = observer.observe_many([(ops[0], 1), (ops[1], 1), (ops[2], 1), (ops[0], 7)])
    assert outcomes == [ObserveOutcome.OBSERVED] * 3 + [ObserveOutcome.STALE]
    assert sorted(sent.evaluates) == sorted(ops)
    reading = observer._reading_threads()
    assert observer.observe_many([(ops[1], 1), (ops[2], 1)]) == [ObserveOutcome.DUPLICATE] * 2
    assert observer._reading_threads() is reading  # the threads are kept between messages
    observer.close()


def test_observe_many_observes_every_pair_and_then_raises_the_first_error(
    env: Cluster,
) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.manyerr"), name="manyerr"
    )
    now = datetime.now(UTC)
    ops = [_operation(env, tenant, f"re_e{n}", created=now) for n in range(3)]
    refunds, sent = Refunds(), Sent()
    for n in range(3):
        refunds.answers[f"re_e{n}"] = (200, _refund(f"re_e{n}", status="pending", created=now))

    def evaluate(op_id: str) -> None:
        if op_id == ops[1]:
            raise ConnectionError("broker unreachable")
        sent.evaluates.append(op_id)

    observer = _observer(env, refunds, sent)
    observer.send_evaluate = evaluate
    with pytest.raises(ConnectionError, match="broker unreachable"):
        observer.observe_many([(op_id, 1) for op_id in ops])
    observer.close()
    assert sorted(sent.evaluates) == sorted([ops[0], ops[2]])
    assert [len(observations_of(env, op_id)) > 0 for op_id in ops] == [True, True, True]


def test_a_path_that_cannot_be_filled_is_recorded_as_an_error_and_nothing_is_read(
    env: Cluster,
) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.nopath"), name="nopath"
    )
    op_id = _operation(env, tenant, None, created=datetime.now(UTC))
    refunds, sent = Refunds(), Sent()
    assert _observer(env, refunds, sent).observe(op_id, 1) is ObserveOutcome.OBSERVED
    assert refunds.requests == []
    with session_scope(env.engine) as session:
        row = session.execute(
            select(Observation).where(
                Observation.operation_id == op_id, Observation.channel == "refund_readback"
            )
        ).scalar_one()
    assert (row.status, row.error) == ("error", "path_unresolved")


def _store_event(
    env: Cluster, tenant: Tenant, event_id: str, refund_id: str, charge: str, at: datetime
) -> None:
    """A stored, verified ``refund.created`` event keyed by its refund and its charge."""
    body = {
        "id": event_id,
        "type": "refund.created",
        "created": int(at.timestamp()),
        "api_version": "2026-08-26",
        "data": {"object": {"id": refund_id, "charge": charge}},
    }
    raw = json.dumps(body).encode()
    with session_scope(env.engine) as session:
        row = Event(
            workspace_id=tenant.workspace_id,
            provider="stripe",
            event_id=event_id,
            type="refund.created",
            provider_timestamp=at,
            api_version="2026-08-26",
            object_id=refund_id,
            body=body,
            raw=raw,
            digest=hashlib.sha256(raw).hexdigest(),
            duplicates=0,
            received_at=datetime.now(UTC),
        )
        session.add(row)
        session.flush()
        for name, value in (("object_id", refund_id), ("charge", charge)):
            session.add(
                EventKey(
                    event_pk=row.id,
                    workspace_id=tenant.workspace_id,
                    provider="stripe",
                    name=name,
                    value=value,
                )
            )


def test_the_store_reads_the_facts_again_and_uses_them_when_they_changed(env: Cluster) -> None:
    """The load's operation serves the store only while its facts are unchanged: a fact changed
    during the readback is the one the webhook channel reduces with."""
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.fresh"), name="fresh"
    )
    created = datetime.now(UTC) - timedelta(seconds=30)
    op_id = _operation(env, tenant, "re_fr", created=created, charge="ch_1")
    _store_event(env, tenant, "evt_new_charge", "re_fr", "ch_new", created + timedelta(seconds=1))

    class Changing(Refunds):
        def handler(self, request: httpx.Request) -> httpx.Response:
            with session_scope(env.engine) as session:  # another transaction, committed
                op = session.get(Operation, op_id)
                assert op is not None
                op.input = {**op.input, "charge": "ch_new"}
            return super().handler(request)

    refunds, sent = Changing(), Sent()
    refunds.answers["re_fr"] = (200, _refund("re_fr", created=created))
    assert _observer(env, refunds, sent).observe(op_id, 1) is ObserveOutcome.OBSERVED
    with session_scope(env.engine) as session:
        row = session.execute(
            select(Observation).where(
                Observation.operation_id == op_id, Observation.channel == "refund_created_events"
            )
        ).scalar_one()
    assert [e["id"] for e in row.value["events"]] == ["evt_new_charge"]


def test_the_webhook_channel_reduces_stored_correlated_events(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.events"), name="events"
    )
    created = datetime.now(UTC) - timedelta(seconds=30)
    op_id = _operation(env, tenant, "re_e", created=created)

    def event(event_id: str, refund_id: str, charge: str, at: datetime) -> None:
        _store_event(env, tenant, event_id, refund_id, charge, at)

    event("evt_before", "re_old", "ch_1", created - timedelta(minutes=5))  # predates: ignored
    event("evt_1", "re_e", "ch_1", created + timedelta(seconds=1))
    event("evt_2", "re_dup", "ch_1", created + timedelta(seconds=2))  # a second refund
    event("evt_other", "re_x", "ch_other", created + timedelta(seconds=3))  # other charge

    refunds, sent = Refunds(), Sent()
    refunds.answers["re_e"] = (200, _refund("re_e", created=created))
    assert _observer(env, refunds, sent).observe(op_id, 1) is ObserveOutcome.OBSERVED
    with session_scope(env.engine) as session:
        row = session.execute(
            select(Observation).where(
                Observation.operation_id == op_id, Observation.channel == "refund_created_events"
            )
        ).scalar_one()
    assert row.status == "ok"
    assert row.value["count"] == 2
    assert [e["id"] for e in row.value["events"]] == ["evt_1", "evt_2"]
    assert row.digest is not None

    decision = evaluate_operation(env.engine, op_id, settings=env.settings, send=lambda *_: None)
    assert decision is not None
    assert (decision.verdict.value, decision.reason) == ("CONTRADICTED", "duplicate_refund_present")
    op = _op(env, op_id)
    assert (op.state, op.final) == ("CONTRADICTED", True)


def test_the_receipt_of_a_custom_contract_reuses_the_contract_the_evaluation_checked(
    env: Cluster,
) -> None:
    """The contract hash pins the contract: once a worker has loaded and checked it, neither the
    decision nor the receipt reads the workspace's custom contract again."""
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.pinned"), name="pinned"
    )
    now = datetime.now(UTC)
    refunds, sent = Refunds(), Sent()
    op_ids = []
    for refund_id in ("re_p1", "re_p2"):
        op_ids.append(_operation(env, tenant, refund_id, created=now))
        refunds.answers[refund_id] = (200, _refund(refund_id, created=now))
        _observer(env, refunds, sent).observe(op_ids[-1], 1)
    evaluate_operation(env.engine, op_ids[0], settings=env.settings, send=lambda *_: None)

    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(env.engine, "before_cursor_execute", record)
    try:
        decision = evaluate_operation(
            env.engine, op_ids[1], settings=env.settings, send=lambda *_: None
        )
    finally:
        event.remove(env.engine, "before_cursor_execute", record)
    assert decision is not None
    assert decision.verdict.value == "VERIFIED"
    assert any(s.startswith("INSERT INTO receipts") for s in statements)
    assert not [s for s in statements if "custom_contracts" in s]


def test_evaluate_schedules_from_the_reading_and_only_when_the_fence_was_read(
    env: Cluster,
) -> None:
    contract = short_contract(contract_id="t.sched", initial_ms=100, poll_ms=700, max_ms=700)
    tenant = make_tenant(env, "http://provider.test", contract, name="sched")
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_s", created=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_s"] = (200, _refund("re_s", status="pending", created=now))
    observed_at = datetime.now(UTC)
    _observer(env, refunds, sent, now=observed_at).observe(op_id, 1)

    plans: list[Plan] = []
    decision = evaluate_operation(
        env.engine, op_id, settings=env.settings, send=lambda _id, plan: plans.append(plan)
    )
    assert decision is not None
    assert (decision.verdict.value, decision.reason) == ("PENDING", "still_transitional")
    op = _op(env, op_id)
    assert op.fence == 2
    assert op.next_observation_at == observed_at + timedelta(milliseconds=700)
    assert plans[-1].observe_fence == 2
    assert 0 < plans[-1].observe_countdown_s <= 0.7

    # Evaluating again before fence 2 is read schedules nothing more.
    evaluate_operation(
        env.engine, op_id, settings=env.settings, send=lambda _id, plan: plans.append(plan)
    )
    assert _op(env, op_id).fence == 2
    assert plans[-1].observe_fence is None


def test_wake_moves_the_fence_and_only_for_open_observed_operations(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.wake"), name="wake"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_w", created=now)
    unreported = _operation(env, tenant, None, created=now, state="CREATED")
    with session_scope(env.engine) as session:
        assert wake(session, op_id, now=now) == 2
        assert wake(session, op_id, now=now) == 3
        assert wake(session, unreported, now=now) is None
        assert wake(session, "op_unknown", now=now) is None
        op = session.get(Operation, op_id)
        assert op is not None
        assert op.fence == 3
        stale = Operation(id=op_id, fence=1)
        with pytest.raises(ScheduleConflict):
            schedule_observation(session, stale, delay_ms=10, now=now)
    refunds, sent = Refunds(), Sent()
    refunds.answers["re_w"] = (200, _refund("re_w", status="pending", created=now))
    observer = _observer(env, refunds, sent)
    assert observer.observe(op_id, 1) is ObserveOutcome.STALE
    assert observer.observe(op_id, 2) is ObserveOutcome.STALE
    assert observer.observe(op_id, 3) is ObserveOutcome.OBSERVED


def test_the_sweeper_applies_deadline_and_action_window_with_no_task(env: Cluster) -> None:
    contract = short_contract(contract_id="t.sweep", timeout_ms=1000)
    tenant = make_tenant(env, "http://provider.test", contract, name="sweep")
    past = datetime.now(UTC) - timedelta(seconds=5)
    overdue = _operation(env, tenant, "re_d", created=past)  # never observed, deadline passed
    with session_scope(env.engine) as session:
        op = session.get(Operation, overdue)
        assert op is not None
        op.deadline = past + timedelta(milliseconds=1000)
    unreported = _operation(
        env,
        tenant,
        None,
        created=past,
        state="CREATED",
        action_deadline=past + timedelta(seconds=1),
    )
    fresh = _operation(
        env,
        tenant,
        None,
        created=datetime.now(UTC),
        state="CREATED",
        action_deadline=datetime.now(UTC) + timedelta(hours=1),
    )

    sent = Sent()
    sweeper = Sweeper(
        env.engine,
        env.settings,
        send_observe=lambda op_id, fence, cd: sent.observes.append((op_id, fence, cd)),
        send_plan=lambda op_id, plan: sent.plans.append((op_id, plan)),
    )
    report = sweeper.sweep_once()
    assert report.timed_out == 1
    assert report.expired == 1
    timed_out = _op(env, overdue)
    assert (timed_out.verdict, timed_out.reason, timed_out.state) == (
        "UNVERIFIABLE",
        "evidence_unavailable_before_timeout",
        "HUMAN_REVIEW",
    )
    expired = _op(env, unreported)
    assert (expired.verdict, expired.reason, expired.state, expired.final) == (
        "EXPIRED",
        ACTION_NOT_REPORTED,
        "EXPIRED",
        True,
    )
    assert _op(env, fresh).state == "CREATED"
    assert sweeper.sweep_once().total == 0  # nothing twice


def test_the_sweeper_resends_overdue_work_on_the_same_fence_with_backoff(env: Cluster) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.resend"), name="resend"
    )
    base = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_r", created=base - timedelta(seconds=10))
    clock = {"now": base}
    sent = Sent()
    sweeper = Sweeper(
        env.engine,
        env.settings,
        clock=lambda: clock["now"],
        send_observe=lambda op, fence, cd: sent.observes.append((op, fence, cd)),
        send_plan=lambda *_: None,
    )
    sweeper.sweep_once()
    assert sent.observes == [(op_id, 1, 0.0)]
    clock["now"] = base + timedelta(seconds=3)  # a grace later, but overdue 10 s at the last send
    sweeper.sweep_once()
    assert len(sent.observes) == 1
    clock["now"] = base + timedelta(seconds=11)
    sweeper.sweep_once()
    assert sent.observes[-1] == (op_id, 1, 0.0)
    assert len(sent.observes) == 2
    assert _op(env, op_id).fence == 1  # re-sends never move the fence


def test_a_due_time_too_far_for_the_broker_is_sent_by_the_sweeper_when_near(
    env: Cluster,
) -> None:
    tenant = make_tenant(
        env, "http://provider.test", short_contract(contract_id="t.far"), name="far"
    )
    now = datetime.now(UTC)
    op_id = _operation(env, tenant, "re_far", created=now)
    with session_scope(env.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        fence = schedule_observation(session, op, delay_ms=3_600_000, now=now)
        assert op.enqueued_at is None
    clock = {"now": now}
    sent = Sent()
    sweeper = Sweeper(
        env.engine,
        env.settings,
        clock=lambda: clock["now"],
        send_observe=lambda op, f, cd: sent.observes.append((op, f, cd)),
        send_plan=lambda *_: None,
    )
    sweeper.sweep_once()
    assert sent.observes == []
    clock["now"] = now + timedelta(seconds=3599)
    sweeper.sweep_once()
    assert [(o, f) for o, f, _ in sent.observes] == [(op_id, fence)]
    assert 0 < sent.observes[0][2] <= 1.0


def test_the_redis_token_bucket_paces_every_process_together(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = f"test-{time.monotonic_ns()}"
    bucket = RedisTokenBucket(client)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        other = RedisTokenBucket(redis.Redis.from_url(redis_url))  # as another process would
        for _ in range(10):
            wait = other.reserve(key, rate_per_s=20)
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    waits.sort()
    assert waits[:20] == [0.0] * 20  # a full bucket: one second's worth at once
    assert waits[20] > 0
    assert waits[-1] == pytest.approx(1.0, abs=0.15)  # 20 more at 20/s: the last waits ~1 s
    assert bucket.reserve(key, rate_per_s=20) > 0.9
    client.delete(f"provely:rl:{key}")
    client.close()


def test_settings_are_the_ones_the_workers_use(env: Cluster) -> None:
    assert isinstance(env.settings, Settings)
    assert env.settings.jitter_ratio == 0
