"""The sandbox model on a fake wall clock: no server, exact times."""

from __future__ import annotations

from typing import Any

import pytest

from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.model import Sandbox
from services.sandbox.settings import SandboxSettings

CTX = RequestContext(request_id="req_test", idempotency_key="key_test")


class FakeWall:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _sandbox(**settings: Any) -> tuple[Sandbox, FakeWall]:
    wall = FakeWall()
    return Sandbox(SandboxSettings(**settings), wall=wall), wall


def test_settlement_happens_exactly_at_settle_ms() -> None:
    sandbox, wall = _sandbox(settle_ms=1500)
    charge = sandbox.create_charge({"amount": "100", "currency": "usd"}, CTX)
    refund = sandbox.create_refund({"charge": charge["id"]}, CTX)
    wall.now += 1.499
    assert sandbox.settle_due() == 0
    wall.now += 0.001
    assert sandbox.settle_due() == 1
    assert refund["status"] == "succeeded"
    types = [e["type"] for e in sandbox.events.values()]
    assert types == ["charge.succeeded", "refund.created", "charge.refunded", "refund.updated"]
    requests = [e["request"] for e in sandbox.events.values()]
    assert requests[:3] == [{"id": "req_test", "idempotency_key": "key_test"}] * 3
    assert requests[3] == {"id": None, "idempotency_key": None}


def test_retry_backoff_doubles_up_to_the_attempt_limit() -> None:
    sandbox, wall = _sandbox(retry_base_ms=1000, retry_max_attempts=4)
    sandbox.create_webhook_endpoint({"url": "http://127.0.0.1:9/x", "enabled_events": "*"}, CTX)
    sandbox.create_charge({"amount": "1", "currency": "usd"}, CTX)
    waits = []
    for _ in range(4):
        [delivery] = sandbox.due_deliveries()
        sandbox.record_attempt(delivery, status_code=503, error=None, duration_ms=1)
        if delivery["next_attempt_at"] is not None:
            waits.append(delivery["next_attempt_at"] - wall.now)
            wall.now = delivery["next_attempt_at"]
    assert waits == [1.0, 2.0, 4.0]
    assert delivery["status"] == "failed"
    assert sandbox.due_deliveries() == []


def test_refund_amount_rules() -> None:
    sandbox, _ = _sandbox()
    charge = sandbox.create_charge({"amount": "1000", "currency": "usd"}, CTX)
    sandbox.create_refund({"charge": charge["id"], "amount": "600"}, CTX)
    with pytest.raises(StripeError) as err:
        sandbox.create_refund({"charge": charge["id"], "amount": "401"}, CTX)
    assert (err.value.code, err.value.status) == ("amount_too_large", 400)
    rest = sandbox.create_refund({"charge": charge["id"]}, CTX)
    assert rest["amount"] == 400
    assert charge["refunded"] is True
    for params, code in (
        ({"charge": charge["id"], "amount": "0"}, "charge_already_refunded"),
        ({"charge": charge["id"], "reason": "bored"}, "charge_already_refunded"),
    ):
        with pytest.raises(StripeError) as err:
            sandbox.create_refund(params, CTX)
        assert err.value.code == code
    other = sandbox.create_charge({"amount": "10", "currency": "usd"}, CTX)
    for params, code in (
        ({"charge": other["id"], "amount": "0"}, "amount_too_small"),
        ({"charge": other["id"], "reason": "bored"}, "parameter_invalid_string"),
        ({"charge": other["id"], "metadata": {"k" * 41: "v"}}, "parameter_invalid_string"),
    ):
        with pytest.raises(StripeError) as err:
            sandbox.create_refund(params, CTX)
        assert err.value.code == code
    assert len(sandbox.refunds) == 2  # refused requests leave nothing behind


def test_dump_and_load_round_trip() -> None:
    sandbox, wall = _sandbox()
    charge = sandbox.create_charge({"amount": "10", "currency": "usd"}, CTX)
    sandbox.create_refund({"charge": charge["id"]}, CTX)
    sandbox.faults.duplicate = 3
    copy = Sandbox(SandboxSettings(), wall=wall)
    copy.load(sandbox.dump())
    assert copy.dump() == sandbox.dump()
    wall.now += 1
    assert copy.settle_due() == 1
