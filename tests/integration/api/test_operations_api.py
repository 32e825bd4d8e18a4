"""The agent API end to end over HTTP (TestClient), on PostgreSQL and on SQLite."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select

from services.ingress.app import create_app
from shared.core.types import OperationState
from shared.db.audit import verify_chain
from shared.db.models import Operation, Receipt, Transition
from shared.db.session import session_scope
from shared.db.tenants import revoke_api_key
from shared.lifecycle.operations import change_state
from shared.runtime.settings import Settings
from tests.integration.api.conftest import Api

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

REFUND = "stripe.refund.succeeded"
INPUT = {"charge": "ch_123", "amount": 500, "currency": "usd"}
PROBLEM = "application/problem+json"


def create(api: Api, *, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
    payload = {"contract": REFUND, "input": INPUT, **body}
    response = api.client.post("/v1/operations", json=payload, headers=headers or api.a.headers())
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def report(api: Api, op_id: str, body: dict[str, Any], *, expect: int = 200) -> dict[str, Any]:
    response = api.client.post(f"/v1/operations/{op_id}/action", json=body, headers=api.a.headers())
    assert response.status_code == expect, response.text
    data: dict[str, Any] = response.json()
    return data


def force_state(api: Api, op_id: str, steps: list[tuple[OperationState, str, str, bool]]) -> None:
    """Move an operation as the verdict worker would (through change_state)."""
    now = datetime.now(UTC)
    with session_scope(api.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        for state, verdict, reason, final in steps:
            assert change_state(
                session,
                op,
                receipt=final,
                to_state=state,
                verdict=verdict,
                reason=reason,
                verdict_class=None,
                final=final,
                decision={"verdict": verdict, "reason": reason, "conditions": [], "evidence": []},
                cause="test",
                now=now,
                settings=api.settings,
            )


def test_create_and_read_an_operation(api: Api) -> None:
    op = create(api, metadata={"ticket": "T-1"})
    assert op["state"] == "CREATED"
    assert op["verdict"] == "PENDING"
    assert op["final"] is False
    assert op["safe_to_claim_complete"] is False
    assert op["retry"] == {
        "action": "never",
        "verification": "no",
        "decided_by": "runtime",
        "stands_until": None,
    }
    assert op["contract"]["id"] == REFUND
    assert len(op["contract"]["hash"]) == 64
    assert op["workspace_id"] == api.a.workspace_id
    got = api.client.get(f"/v1/operations/{op['id']}", headers=api.a.headers())
    assert got.status_code == 200
    assert got.json()["id"] == op["id"]
    assert got.json()["metadata"] == {"ticket": "T-1"}
    # The action window is stored at creation: the sweeper expires unreported operations.
    created = datetime.fromisoformat(op["created_at"])
    deadline = datetime.fromisoformat(op["action"]["report_deadline"])
    assert deadline - created == timedelta(seconds=api.settings.action_window_seconds)


@pytest.mark.parametrize(
    ("input_", "field"),
    [
        ({"amount": 500, "currency": "usd"}, "input.charge"),
        ({"charge": "ch_1", "amount": "500", "currency": "usd"}, "input.amount"),
        ({"charge": "ch_1", "amount": 0, "currency": "usd"}, "input.amount"),
        ({"charge": "ch_1", "amount": True, "currency": "usd"}, "input.amount"),
        ({"charge": "ch_1", "amount": 500, "currency": "USD"}, "input.currency"),
        ({"charge": None, "amount": 500, "currency": "usd"}, "input.charge"),
    ],
)
def test_input_is_checked_against_the_contract(
    api: Api, input_: dict[str, Any], field: str
) -> None:
    response = api.client.post(
        "/v1/operations", json={"contract": REFUND, "input": input_}, headers=api.a.headers()
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert [e["field"] for e in response.json()["errors"]] == [field]
    assert field in response.json()["detail"]


def test_unknown_contract_and_version_are_422(api: Api) -> None:
    for body, field in (
        ({"contract": "stripe.nope", "input": INPUT}, "contract"),
        ({"contract": REFUND, "contract_version": "9.9.9", "input": INPUT}, "contract_version"),
    ):
        response = api.client.post("/v1/operations", json=body, headers=api.a.headers())
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == field


def test_idempotent_create(api: Api) -> None:
    headers = {**api.a.headers(), "Idempotency-Key": "order-42"}
    body = {"contract": REFUND, "input": INPUT}
    first = api.client.post("/v1/operations", json=body, headers=headers)
    again = api.client.post("/v1/operations", json=body, headers=headers)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = api.client.post(
        "/v1/operations", json={**body, "input": {**INPUT, "amount": 501}}, headers=headers
    )
    assert other.status_code == 409
    assert other.headers["content-type"] == PROBLEM
    # The same key in another workspace is another operation.
    elsewhere = api.client.post(
        "/v1/operations", json=body, headers={**api.b.headers(), "Idempotency-Key": "order-42"}
    )
    assert elsewhere.status_code == 201
    assert elsewhere.json()["id"] != first.json()["id"]
    with session_scope(api.engine) as session:
        count = session.execute(select(func.count()).select_from(Operation)).scalar_one()
    assert count == 2


def test_malformed_and_oversized_bodies(api: Api) -> None:
    headers = {**api.a.headers(), "Content-Type": "application/json"}
    bad = api.client.post("/v1/operations", content=b'{"contract": ', headers=headers)
    assert bad.status_code == 400
    assert bad.headers["content-type"] == PROBLEM
    limit = api.settings.api_max_body_bytes
    big = api.client.post("/v1/operations", content=b" " * (limit + 1), headers=headers)
    assert big.status_code == 413
    assert big.headers["content-type"] == PROBLEM

    def chunks() -> Iterator[bytes]:
        for _ in range(limit // 1024 + 10):
            yield b" " * 1024

    streamed = api.client.post("/v1/operations", content=chunks(), headers=headers)
    assert streamed.status_code == 413
    not_object = api.client.post("/v1/operations", json=[1, 2], headers=api.a.headers())
    assert not_object.status_code == 422


def test_action_result_starts_observation(api: Api) -> None:
    op = create(api)
    started = report(api, op["id"], {"phase": "started"})
    assert started["state"] == "ACTION_STARTED"
    result = {"id": "re_1", "object": "refund", "status": "pending", "amount": 500}
    observing = report(api, op["id"], {"phase": "result", "result": result, "http_status": 200})
    assert observing["state"] == "OBSERVING"
    assert observing["verdict"] == "PENDING"
    assert observing["subject"] == {"type": "stripe.refund", "key": "refund_id", "id": "re_1"}
    reported = datetime.fromisoformat(observing["action"]["reported_at"])
    due = datetime.fromisoformat(observing["next_observation_at"])
    assert due - reported == timedelta(milliseconds=1000)  # the contract's initial delay
    assert datetime.fromisoformat(observing["deadline"]) - reported == timedelta(days=7)
    assert {"strategy": "resource_id", "assurance": "strong", "value": "re_1"} in observing[
        "correlation"
    ]
    again = api.client.post(
        f"/v1/operations/{op['id']}/action",
        json={"phase": "result", "result": result, "http_status": 200},
        headers=api.a.headers(),
    )
    assert again.status_code == 409
    assert again.json()["state"] == "OBSERVING"
    with session_scope(api.engine) as session:
        causes = (
            session.execute(
                select(Transition.cause)
                .where(Transition.operation_id == op["id"])
                .order_by(Transition.seq)
            )
            .scalars()
            .all()
        )
        stored = session.get(Operation, op["id"])
        assert stored is not None
        assert stored.fence == 1
    assert causes == ["created", "action_started", "action_result", "observation_scheduled"]
    timeline = api.client.get(f"/v1/operations/{op['id']}/timeline", headers=api.a.headers())
    assert timeline.status_code == 200
    assert [e["cause"] for e in timeline.json()["entries"]] == causes


def test_action_error_is_observed_all_the_same(api: Api) -> None:
    op = create(api)
    out = report(
        api, op["id"], {"phase": "error", "http_status": 502, "error": {"message": "bad gateway"}}
    )
    assert out["state"] == "OBSERVING"
    assert out["subject"]["id"] is None
    assert out["next_observation_at"] is not None
    timeout = report(api, create(api)["id"], {"phase": "error", "http_status": None})
    assert timeout["state"] == "OBSERVING"


def test_a_reported_rejection_is_the_agents_word_and_keeps_observing(api: Api) -> None:
    """An error the Stripe skill reads as "not performed" is recorded (phase ``rejected``) and
    observed like any other: no verdict on the agent's word, and never a retry of the action."""
    op = create(api)
    error = {"error": {"type": "invalid_request_error", "message": "No such charge"}}
    out = report(api, op["id"], {"phase": "error", "http_status": 400, "error": error})
    assert out["state"] == "OBSERVING"
    assert out["verdict"] == "PENDING"
    assert out["final"] is False
    assert out["action"]["phase"] == "rejected"
    assert out["retry"]["action"] == "never"
    assert out["safe_to_claim_complete"] is False
    assert out["receipt_url"] is None
    assert out["next_observation_at"] is not None
    late = api.client.post(
        f"/v1/operations/{op['id']}/action",
        json={"phase": "result", "result": {"id": "re_9"}},
        headers=api.a.headers(),
    )
    assert late.status_code == 409
    assert late.json()["final"] is False


def test_result_phase_needs_a_result(api: Api) -> None:
    op = create(api)
    missing = api.client.post(
        f"/v1/operations/{op['id']}/action", json={"phase": "result"}, headers=api.a.headers()
    )
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "result"
    bad_phase = api.client.post(
        f"/v1/operations/{op['id']}/action", json={"phase": "done"}, headers=api.a.headers()
    )
    assert bad_phase.status_code == 422


def test_verify_only_where_the_retry_table_allows(api: Api) -> None:
    op = create(api)
    report(api, op["id"], {"phase": "result", "result": {"id": "re_1"}, "http_status": 200})
    refused = api.client.post(f"/v1/operations/{op['id']}/verify", headers=api.a.headers())
    assert refused.status_code == 409  # PENDING: the runtime observes
    force_state(
        api, op["id"], [(OperationState.PENDING, "UNVERIFIABLE", "evidence_unavailable", False)]
    )
    before = datetime.now(UTC)
    accepted = api.client.post(f"/v1/operations/{op['id']}/verify", headers=api.a.headers())
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["retry"]["verification"] == "yes"
    due = datetime.fromisoformat(accepted.json()["next_observation_at"])
    assert before - timedelta(seconds=1) <= due <= datetime.now(UTC)
    with session_scope(api.engine) as session:
        stored = session.get(Operation, op["id"])
        assert stored is not None
        assert stored.fence == 2


def test_review_is_admin_only_once_and_only_in_human_review(api: Api) -> None:
    op = create(api)
    body = {"verdict": "VERIFIED", "note": "checked the dashboard"}
    path = f"/v1/operations/{op['id']}/review"
    not_yet = api.client.post(path, json=body, headers=api.a.headers(admin=True))
    assert not_yet.status_code == 409
    report(api, op["id"], {"phase": "result", "result": {"id": "re_1"}, "http_status": 200})
    force_state(
        api,
        op["id"],
        [
            (
                OperationState.HUMAN_REVIEW,
                "UNVERIFIABLE",
                "evidence_unavailable_before_timeout",
                True,
            )
        ],
    )
    agent = api.client.post(path, json=body, headers=api.a.headers())
    assert agent.status_code == 403
    done = api.client.post(path, json=body, headers=api.a.headers(admin=True))
    assert done.status_code == 200, done.text
    assert done.json()["review"]["verdict"] == "VERIFIED"
    assert done.json()["review"]["note"] == "checked the dashboard"
    assert done.json()["verdict"] == "UNVERIFIABLE"  # the final verdict is never rewritten
    again = api.client.post(
        path,
        json={"verdict": "FAILED", "note": "changed my mind"},
        headers=api.a.headers(admin=True),
    )
    assert again.status_code == 409
    got = api.client.get(f"/v1/operations/{op['id']}", headers=api.a.headers()).json()
    assert got["review"]["verdict"] == "VERIFIED"
    assert got["retry"]["decided_by"] == "person"


def test_list_filters_and_cursor_pagination(api: Api) -> None:
    ids = [create(api)["id"] for _ in range(5)]
    report(api, ids[0], {"phase": "started"})
    create(api, headers=api.b.headers())
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/operations", params=params, headers=api.a.headers())
        assert page.status_code == 200
        seen.extend(op["id"] for op in page.json()["data"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))
    started = api.client.get(
        "/v1/operations", params={"state": "ACTION_STARTED"}, headers=api.a.headers()
    )
    assert [op["id"] for op in started.json()["data"]] == [ids[0]]
    by_contract = api.client.get(
        "/v1/operations", params={"contract": "stripe.refund.created"}, headers=api.a.headers()
    )
    assert by_contract.json()["data"] == []
    for params in ({"cursor": "garbage"}, {"state": "DONE"}, {"limit": 0}):
        bad = api.client.get("/v1/operations", params=params, headers=api.a.headers())
        assert bad.status_code == 422, params
        assert bad.headers["content-type"] == PROBLEM


def test_contracts(api: Api) -> None:
    listed = api.client.get("/v1/contracts", headers=api.a.headers())
    assert listed.status_code == 200
    ids = {c["id"] for c in listed.json()["data"]}
    assert {"stripe.refund.succeeded", "stripe.refund.created"} <= ids
    one = api.client.get(f"/v1/contracts/{REFUND}", headers=api.a.headers())
    assert one.status_code == 200
    assert one.json()["hash"][:16] in one.json()["page"]
    assert one.json()["document"]["id"] == REFUND
    assert api.client.get("/v1/contracts/nope", headers=api.a.headers()).status_code == 404


def test_health(api: Api) -> None:
    assert api.client.get("/healthz").json()["status"] == "ok"
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}
    assert "/v1/operations" in api.client.get("/openapi.json").json()["paths"]


def test_authentication(api: Api) -> None:
    assert api.client.get("/v1/operations").status_code == 401
    wrong = api.client.get("/v1/operations", headers={"Authorization": "Bearer pv_nope"})
    assert wrong.status_code == 401
    assert wrong.headers["content-type"] == PROBLEM
    assert api.client.get("/v1/operations", headers=api.a.headers()).status_code == 200
    with session_scope(api.engine) as session:
        revoke_api_key(session, api.a.agent_key_id, now=datetime.now(UTC))
    revoked = api.client.get("/v1/operations", headers=api.a.headers())
    assert revoked.status_code == 401


def test_another_workspace_looks_like_nothing(api: Api) -> None:
    theirs = create(api, headers=api.b.headers())["id"]
    report_b = api.client.post(
        f"/v1/operations/{theirs}/action",
        json={"phase": "result", "result": {"id": "re_b"}},
        headers=api.b.headers(),
    )
    assert report_b.status_code == 200
    missing = "op_doesnotexist000000000000"
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/v1/operations/{id}", None),
        ("GET", "/v1/operations/{id}/timeline", None),
        ("GET", "/v1/operations/{id}/receipt", None),
        ("POST", "/v1/operations/{id}/action", {"phase": "started"}),
        ("POST", "/v1/operations/{id}/verify", None),
        ("POST", "/v1/operations/{id}/review", {"verdict": "FAILED", "note": "x"}),
    ]
    for method, template, body in calls:
        answers = []
        for op_id in (theirs, missing):
            response = api.client.request(
                method,
                template.format(id=op_id),
                json=body,
                headers=api.a.headers(admin=True),
            )
            assert response.status_code == 404, (template, response.text)
            data = response.json()
            answers.append(
                (data["type"], data["title"], data["detail"].replace(op_id, "ID"), len(data))
            )
        assert answers[0] == answers[1], template
    listed = api.client.get("/v1/operations", headers=api.a.headers()).json()["data"]
    assert theirs not in {op["id"] for op in listed}
    with session_scope(api.engine) as session:
        untouched = session.get(Operation, theirs)
        assert untouched is not None
        assert untouched.state == "OBSERVING"
        assert session.execute(select(func.count()).select_from(Receipt)).scalar_one() == 0


def test_unreachable_database_and_broker_answer_503_not_500(tmp_path: Path) -> None:
    from tests.integration.api.live import free_port

    closed = free_port()  # nothing listens there once the probe socket is closed
    settings = Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{closed}/nowhere",
        broker_url=f"redis://127.0.0.1:{closed}/0",
        data_dir=tmp_path,
        secret_key=Fernet.generate_key().decode(),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"].startswith("unreachable")
        assert ready.json()["checks"]["broker"].startswith("unreachable")
        down = client.get("/v1/operations", headers={"Authorization": "Bearer pv_whatever"})
        assert down.status_code == 503
        assert down.headers["content-type"] == PROBLEM


def test_the_audit_chain_holds_after_api_traffic(api: Api) -> None:
    op = create(api)
    report(api, op["id"], {"phase": "started"})
    report(api, op["id"], {"phase": "result", "result": {"id": "re_1"}, "http_status": 200})
    error = {"error": {"type": "invalid_request_error"}}
    report(api, create(api)["id"], {"phase": "error", "http_status": 400, "error": error})
    with session_scope(api.engine) as session:
        assert verify_chain(session, api.a.workspace_id) is None
        seqs = (
            session.execute(
                select(Transition.seq)
                .where(Transition.workspace_id == api.a.workspace_id)
                .order_by(Transition.seq)
            )
            .scalars()
            .all()
        )
    assert seqs == list(range(1, len(seqs) + 1))
    # created, started, accepted, observing; created, failed
    assert len(seqs) == 6


def test_an_operation_whose_contract_changed_is_409_not_500(api: Api) -> None:
    op = create(api)
    with session_scope(api.engine) as session:
        stored = session.get(Operation, op["id"])
        assert stored is not None
        stored.contract_hash = "0" * 64  # as if the contract file had changed since
    answer = api.client.post(
        f"/v1/operations/{op['id']}/action",
        json={"phase": "result", "result": {"id": "re_1"}},
        headers=api.a.headers(),
    )
    assert answer.status_code == 409
    assert answer.json()["type"].endswith("/contract-unavailable")
    assert api.client.get(f"/v1/operations/{op['id']}", headers=api.a.headers()).status_code == 200
