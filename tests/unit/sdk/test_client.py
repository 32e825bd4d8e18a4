"""The SDK's clients over ``httpx.MockTransport`` (the way httpx tests itself): retries of
Provely calls on 5xx and connection errors with the same idempotency key, problem documents
as exceptions with their field errors, a report whose answer was lost, and ``wait()`` that
only reads and answers PENDING at its timeout. Sync and async answer the same."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from provely_sdk import ApiError, AsyncProvely, NotFound, OperationOut, Provely, TransportError

from tests.unit.sdk.test_receipts import BODY, _key_entry, _sign

BASE = "http://provely.test"


def operation(**changes: Any) -> dict[str, Any]:
    op: dict[str, Any] = {
        "id": "op_1",
        "workspace_id": "ws_1",
        "contract": {"id": "stripe.refund.succeeded", "version": "1.1.0", "hash": "h",
                     "completion_level": "succeeded"},
        "state": "OBSERVING",
        "verdict": "PENDING",
        "reason": "awaiting_evidence",
        "class": None,
        "final": False,
        "completion_level": "succeeded",
        "claim": "nothing yet",
        "safe_to_claim_complete": False,
        "retry": {"action": "never", "verification": "no", "decided_by": "runtime"},
        "created_at": "2026-12-02T10:00:00Z",
        "updated_at": "2026-12-02T10:00:00Z",
        "attempts": 1,
        "next_observation_at": None,
        "deadline": None,
        "action": {"phase": "result", "http_status": 200, "reported_at": None,
                   "report_deadline": None},
        "subject": {"type": "stripe.refund", "key": "refund_id", "id": None},
        "correlation": [],
        "conditions": [],
        "evidence": [],
        "receipt_url": None,
        "input": {},
    }  # fmt: skip
    op.update(changes)
    return op


Handler = Callable[[httpx.Request], httpx.Response]


def both(handler: Handler, call: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Run ``call`` with a sync and an async client over the same handler."""
    sync = Provely(BASE, "pv_k", http_client=httpx.Client(transport=httpx.MockTransport(handler)),
                   sleep=lambda _s: None)  # fmt: skip

    async def no_sleep(_s: float) -> None:
        return None

    async def run_async() -> Any:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport) as http:
            client = AsyncProvely(BASE, "pv_k", http_client=http, sleep=no_sleep)
            return await call(client)

    return call(sync), asyncio.run(run_async())


def test_create_retries_5xx_and_connection_errors_with_the_same_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) % 3 == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(seen) % 3 == 2:
            return httpx.Response(503, json={"type": "x/unavailable", "title": "Unavailable",
                                             "status": 503})  # fmt: skip
        return httpx.Response(201, json=operation(state="CREATED", verdict=None))

    def create(client: Any) -> Any:
        return client.create_operation(contract="stripe.refund.succeeded", input={"amount": 1})

    sync_op, async_op = both(handler, create)
    assert isinstance(sync_op, OperationOut)
    assert sync_op == async_op
    keys = [r.headers["Idempotency-Key"] for r in seen]
    assert keys[0] == keys[1] == keys[2]
    assert keys[3] == keys[4] == keys[5]
    assert keys[0] != keys[3]  # each create has a key of its own
    assert all(r.headers["Authorization"] == "Bearer pv_k" for r in seen)
    assert json.loads(seen[0].content) == {"contract": "stripe.refund.succeeded",
                                           "input": {"amount": 1}}  # fmt: skip


def test_retries_end_with_the_last_error() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    sync = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(down)),
                   sleep=lambda _s: None, retries=2)  # fmt: skip
    with pytest.raises(TransportError, match="ReadTimeout"):
        sync.get_operation("op_1")


def test_problem_documents_are_exceptions_with_their_field_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("op_missing"):
            return httpx.Response(404, json={"type": "https://provely.dev/problems/not-found",
                                             "title": "Not Found", "status": 404,
                                             "detail": "no operation op_missing"})  # fmt: skip
        return httpx.Response(
            422,
            headers={"content-type": "application/problem+json"},
            json={"type": "https://provely.dev/problems/invalid-request", "title": "x",
                  "status": 422, "detail": "input.amount must be an integer",
                  "errors": [{"field": "input.amount", "message": "must be an integer"}]},
        )  # fmt: skip

    sync = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(ApiError) as caught:
        sync.create_operation(contract="c", input={"amount": "x"})
    assert caught.value.status == 422
    assert caught.value.kind == "invalid-request"
    assert [(e.field, e.message) for e in caught.value.errors] == [
        ("input.amount", "must be an integer")
    ]
    with pytest.raises(NotFound):
        sync.get_operation("op_missing")

    async def async_errors() -> tuple[ApiError, ApiError]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = AsyncProvely(BASE, "k", http_client=http)
            with pytest.raises(ApiError) as bad:
                await client.create_operation(contract="c", input={"amount": "x"})
            with pytest.raises(NotFound) as missing:
                await client.get_operation("op_missing")
            return bad.value, missing.value

    bad, missing = asyncio.run(async_errors())
    assert bad.errors == caught.value.errors
    assert missing.status == 404


def test_a_report_whose_answer_was_lost_reads_the_operation_instead_of_failing() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        posts = sum(c.startswith("POST") for c in calls)
        if request.method == "POST" and posts % 2 == 1:  # each client's first attempt
            raise httpx.RemoteProtocolError("server disconnected", request=request)
        if request.method == "POST":
            return httpx.Response(409, json={"type": "x/conflict", "title": "Conflict",
                                             "status": 409})  # fmt: skip
        return httpx.Response(200, json=operation())

    sync_op, async_op = both(handler, lambda c: c.report_result("op_1", result={"id": "re_1"}))
    assert sync_op.state == "OBSERVING"
    assert sync_op == async_op
    assert calls[:3] == ["POST /v1/operations/op_1/action"] * 2 + ["GET /v1/operations/op_1"]


def test_a_conflict_on_the_first_attempt_is_an_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"type": "x/conflict", "title": "Conflict", "status": 409,
                                         "detail": "the action was already reported"})  # fmt: skip

    sync = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(ApiError, match="already reported"):
        sync.report_timeout("op_1", message="no answer")


def test_wait_only_reads_backs_off_and_answers_pending_at_its_timeout() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json=operation())

    slept: list[float] = []
    sync = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)),
                   sleep=lambda s: (slept.append(s), __import__("time").sleep(s)))  # fmt: skip
    op = sync.wait("op_1", timeout=2.0)
    assert op.verdict == "PENDING"
    assert not op.final
    assert {r.method for r in requests} == {"GET"}
    assert slept[:2] == [0.5, 1.0]
    assert sum(slept) <= 2.0 + 1e-6
    assert "do not call the provider again" in op.guidance.lower()
    assert "op_1" in op.guidance
    assert not op.may_repeat_action


def test_wait_returns_at_once_when_final() -> None:
    final = operation(state="VERIFIED", verdict="VERIFIED", reason="all_conditions_hold",
                      final=True)  # fmt: skip
    count = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal count
        count += 1
        return httpx.Response(200, json=final)

    sync_op, async_op = both(handler, lambda c: c.wait("op_1", timeout=30))
    assert sync_op.verdict == async_op.verdict == "VERIFIED"
    assert count == 2


@pytest.mark.parametrize(
    ("verdict", "reason", "final", "action", "verification", "by", "words"),
    [
        ("PENDING", "awaiting_evidence", False, "never", "no", "runtime", "may still succeed"),
        ("UNVERIFIABLE", "evidence_unavailable", False, "never", "yes", "runtime",
         "verify again"),
        ("UNVERIFIABLE", "evidence_unavailable_before_timeout", True, "never", "no", "person",
         "A person decides"),
        ("EXPIRED", "action_not_reported", True, "never", "no", "person", "may have happened"),
        ("FAILED", "terminal_failure", True, "allowed_as_new_operation", "no", "agent",
         "NEW operation"),
    ],
)  # fmt: skip
def test_guidance_follows_the_served_retry_fields(
    verdict: str, reason: str, final: bool, action: str, verification: str, by: str, words: str
) -> None:
    op = OperationOut.model_validate(
        operation(verdict=verdict, reason=reason, final=final,
                  retry={"action": action, "verification": verification, "decided_by": by})
    )  # fmt: skip
    assert words in op.guidance
    repeat_forbidden = "Do not repeat the refund" in op.guidance
    assert repeat_forbidden == (action != "allowed_as_new_operation")


def test_guidance_says_a_watched_retry_advice_stands_only_until_contradicted() -> None:
    """A FAILED that allows a new operation is watched (``retry.stands_until``): the words say
    the advice may still be withdrawn; an open operation's ``blocked_by`` is said too."""
    watched = OperationOut.model_validate(
        operation(verdict="FAILED", reason="action_rejected", final=True,
                  retry={"action": "allowed_as_new_operation", "verification": "no",
                         "decided_by": "agent", "stands_until": "2026-12-05T12:00:00Z"})
    )  # fmt: skip
    assert "stands only while nothing contradicts it" in watched.guidance
    assert "2026-12-05T12:00:00+00:00" in watched.guidance
    blocked = OperationOut.model_validate(
        operation(verdict="PENDING", reason="awaiting_evidence", final=False,
                  blocked_by="3 events ignored: api_version 2025-03-31.basil is not among "
                  "2026-08-26")
    )  # fmt: skip
    assert "api_version 2025-03-31.basil" in blocked.guidance
    assert "Do not repeat the refund" in blocked.guidance


def test_receipt_keys_are_fetched_once_and_again_only_for_an_unknown_key() -> None:
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    published = [[_key_entry(first)], [_key_entry(second), _key_entry(first, status="retired")]]
    fetched: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/receipts/keys"
        fetched.append(1)
        return httpx.Response(200, json={"keys": published[min(len(fetched) - 1, 1)]})

    client = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    old = _sign(dict(BODY), first)
    assert client.verify_receipt(old).valid
    assert client.verify_receipt(old).valid
    assert len(fetched) == 1  # kept
    new = _sign(dict(BODY), second)  # a key made since: fetched once more
    check = client.verify_receipt(new)
    assert check.valid
    assert len(fetched) == 2
    assert client.verify_receipt(old).key_status == "retired"
    assert len(fetched) == 2


def test_an_id_is_one_path_segment_whatever_it_holds() -> None:
    paths: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path)
        return httpx.Response(
            404, json={"type": "x/not-found", "title": "Not Found", "status": 404}
        )

    client = Provely(BASE, "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(NotFound):
        client.get_operation("op_1/../receipts?x=1#y")
    assert paths == [b"/v1/operations/op_1%2F..%2Freceipts%3Fx%3D1%23y"]
