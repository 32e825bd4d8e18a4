"""The agent API's round trip (create, report, read) checks its key inside the request's own
transaction: one transaction for a report or a read, the key looked up by its first statement,
the report's first observation scheduled by its own → OBSERVING update;
a revoked key is refused on each of them with nothing written; ``last_used_at`` is written at most
once a minute, by a transaction of its own after the request's, failed requests included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.orm import Session

from shared.db.audit import verify_chain
from shared.db.models import ApiKey, Operation, Transition
from shared.db.session import session_scope
from shared.db.tenants import revoke_api_key
from tests.integration.api.conftest import Api

pytestmark = pytest.mark.integration

INPUT = {"charge": "ch_123", "amount": 500, "currency": "usd"}
CREATE = {"contract": "stripe.refund.succeeded", "input": INPUT}


def _report(op_id: str) -> dict[str, Any]:
    return {"phase": "result", "http_status": 200, "result": {"id": f"re_{op_id[3:]}"}}


@contextmanager
def _transactions(engine: Engine) -> Iterator[list[list[str]]]:
    """The statements the app sends, grouped by transaction."""
    seen: list[list[str]] = []

    def begin(*_: object) -> None:
        seen.append([])

    def statement(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        seen[-1].append(sql)

    event.listen(engine, "begin", begin)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        yield seen
    finally:
        event.remove(engine, "begin", begin)
        event.remove(engine, "before_cursor_execute", statement)


def _last_used(api: Api, key_id: str) -> datetime | None:
    with Session(api.engine) as session:
        row = session.get(ApiKey, key_id)
        assert row is not None
        return row.last_used_at


def _set_last_used(api: Api, key_id: str, value: datetime) -> None:
    with Session(api.engine) as session, session.begin():
        session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=value))


def test_report_and_read_are_one_transaction_that_starts_with_the_key(pg_api: Api) -> None:
    headers = pg_api.a.headers()
    _set_last_used(pg_api, pg_api.a.agent_key_id, datetime.now(UTC))  # nothing to record
    engine: Engine = pg_api.app.state.engine
    with _transactions(engine) as created:
        answer = pg_api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert answer.status_code == 201, answer.text
    op_id = answer.json()["id"]
    with _transactions(engine) as reported:
        answer = pg_api.client.post(
            f"/v1/operations/{op_id}/action", json=_report(op_id), headers=headers
        )
    assert answer.status_code == 200, answer.text
    with _transactions(engine) as read:
        answer = pg_api.client.get(f"/v1/operations/{op_id}", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "OBSERVING"

    # The create: the key check (and the contract) first, the insert in a second transaction
    # (the input is checked against the contract's patterns between them, outside both).
    assert len(created) == 2
    assert "api_keys" in created[0][0]
    assert not any("api_keys" in sql for sql in created[1])
    with Session(pg_api.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        # The first observation, scheduled by the → OBSERVING update itself.
        assert op.fence == 1
        assert op.action_reported_at is not None
        assert op.next_observation_at == op.action_reported_at + timedelta(milliseconds=1000)
        assert op.slot_at == op.next_observation_at
        assert op.enqueued_at == op.action_reported_at
    # One UPDATE passes through ACTION_ACCEPTED to OBSERVING with the schedule; the audit chain
    # still records both steps (checked below).
    assert sum(sql.startswith("UPDATE operations") for sql in reported[0]) == 1
    for request in (reported, read):
        assert len(request) == 1, request
        assert "api_keys" in request[0][0]
        assert any("FROM operations" in sql for sql in request[0][1:])
        assert not any("UPDATE api_keys" in sql for sql in request[0])
    # What each request costs (bench/api.py --statements): the key; for the report the
    # correlation lock, the row, one update and the two scans for earlier events. The
    # operation's load says whether any event is linked to it: without one, neither the report
    # nor the read asks for its linked events.
    assert [len(statements) for statements in created] == [1, 1]
    assert len(reported[0]) == 6, reported[0]
    assert len(read[0]) == 2, read[0]
    assert not any(
        "operation_events" in sql for sql in reported[0] + read[0] if "EXISTS" not in sql
    )


def test_the_reports_one_update_leaves_both_steps_in_the_audit_chain(api: Api) -> None:
    """The report passes through ACTION_ACCEPTED in the UPDATE that writes OBSERVING: the chain
    holds the step into it and the step out of it, as two writes did, and still verifies."""
    headers = api.a.headers()
    answer = api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert answer.status_code == 201, answer.text
    op_id = answer.json()["id"]
    answer = api.client.post(f"/v1/operations/{op_id}/action", json=_report(op_id), headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "OBSERVING"
    with Session(api.engine) as session:
        rows = (
            session.execute(
                select(Transition).where(Transition.operation_id == op_id).order_by(Transition.seq)
            )
            .scalars()
            .all()
        )
        steps = [(r.from_state, r.to_state, r.verdict, r.reason, r.cause, r.details) for r in rows]
        assert steps == [
            (None, "CREATED", "PENDING", "awaiting_action_report", "created", None),
            (
                "CREATED",
                "ACTION_ACCEPTED",
                "PENDING",
                "action_accepted",
                "action_result",
                {"http_status": 200},
            ),
            (
                "ACTION_ACCEPTED",
                "OBSERVING",
                "PENDING",
                "awaiting_evidence",
                "observation_scheduled",
                None,
            ),
        ]
        assert [r.seq for r in rows] == [rows[0].seq, rows[0].seq + 1, rows[0].seq + 2]
        op = session.get(Operation, op_id)
        assert op is not None
        assert op.version == 3  # a version for each step, as two fenced writes gave
        assert op.subject_id == f"re_{op_id[3:]}"
        assert verify_chain(session, api.a.workspace_id) is None


def test_the_create_inserts_without_the_unit_of_work(api: Api) -> None:
    """The create's INSERT is one Core statement: no flush of the session (its bookkeeping was
    the insert's larger cost), with or without an ``Idempotency-Key``; a replay answers the
    same operation."""
    flushes: list[object] = []

    def flushed(session: Session, *_: object) -> None:
        flushes.append(session)

    event.listen(Session, "after_flush", flushed)
    try:
        plain = api.client.post("/v1/operations", json=CREATE, headers=api.a.headers())
        keyed = {**api.a.headers(), "Idempotency-Key": "create-once"}
        first = api.client.post("/v1/operations", json=CREATE, headers=keyed)
    finally:
        event.remove(Session, "after_flush", flushed)
    assert plain.status_code == 201, plain.text
    assert first.status_code == 201, first.text
    assert flushes == []
    again = api.client.post("/v1/operations", json=CREATE, headers=keyed)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    with Session(api.engine) as session:
        op = session.get(Operation, first.json()["id"])
        assert op is not None
        assert (op.idempotency_key, op.version, op.fence, op.rechecks, op.learned_keys) == (
            "create-once",
            1,
            0,
            0,
            {},
        )


def test_a_revoked_key_is_refused_on_create_report_and_read_and_writes_nothing(
    pg_api: Api,
) -> None:
    headers = pg_api.a.headers()
    answer = pg_api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert answer.status_code == 201, answer.text
    op_id = answer.json()["id"]
    with session_scope(pg_api.engine) as session:
        revoke_api_key(session, pg_api.a.agent_key_id, now=datetime.now(UTC))
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/operations", CREATE),
        ("POST", f"/v1/operations/{op_id}/action", _report(op_id)),
        ("GET", f"/v1/operations/{op_id}", None),
    ]
    for method, path, body in calls:
        refused = pg_api.client.request(method, path, json=body, headers=headers)
        assert refused.status_code == 401, (path, refused.text)
        assert refused.json()["detail"] == "the API key is unknown or revoked"
        assert refused.headers["WWW-Authenticate"] == 'Bearer realm="provely"'
    with Session(pg_api.engine) as session:
        count = select(func.count()).select_from(Operation)
        assert (
            session.execute(
                count.where(Operation.workspace_id == pg_api.a.workspace_id)
            ).scalar_one()
            == 1
        )
        op = session.get(Operation, op_id)
        assert op is not None
        assert op.state == "CREATED"
        assert op.action_reported_at is None


def test_the_round_trip_writes_last_use_once_a_minute_failed_requests_included(
    pg_api: Api,
) -> None:
    key_id, headers = pg_api.a.agent_key_id, pg_api.a.headers()
    stale = datetime.now(UTC) - timedelta(minutes=2)
    _set_last_used(pg_api, key_id, stale)
    missing = pg_api.client.get("/v1/operations/op_doesnotexist000000000000", headers=headers)
    assert missing.status_code == 404  # the key was good: a use, though the request failed
    first = _last_used(pg_api, key_id)
    assert first is not None
    assert first > stale + timedelta(minutes=1)

    answer = pg_api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert answer.status_code == 201, answer.text
    op_id = answer.json()["id"]
    reported = pg_api.client.post(
        f"/v1/operations/{op_id}/action", json=_report(op_id), headers=headers
    )
    assert reported.status_code == 200, reported.text
    assert pg_api.client.get(f"/v1/operations/{op_id}", headers=headers).status_code == 200
    assert _last_used(pg_api, key_id) == first  # within the minute: not written again

    for method, path, body in (
        ("POST", "/v1/operations", CREATE),
        ("POST", f"/v1/operations/{op_id}/action", _report(op_id)),  # 409: reported already
        ("GET", f"/v1/operations/{op_id}", None),
    ):
        _set_last_used(pg_api, key_id, stale)
        assert pg_api.client.request(method, path, json=body, headers=headers).status_code in (
            200,
            201,
            409,
        )
        later = _last_used(pg_api, key_id)
        assert later is not None
        assert later > stale + timedelta(minutes=1), path
