"""Provider read lag (``services.sandbox.lag``): refund readbacks and lists served from the
state a refund had ``read_lag_ms`` ago, on a fake wall clock; and the control route."""

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


def _refunded(outcome: str = "succeeded_then_failed") -> tuple[Sandbox, FakeWall, str]:
    wall = FakeWall()
    sandbox = Sandbox(SandboxSettings(settle_ms=1000), wall=wall)
    charge = sandbox.create_charge({"amount": "100", "currency": "usd"}, CTX)
    refund = sandbox.create_refund(
        {"charge": charge["id"], "metadata": {"sandbox_outcome": outcome}}, CTX
    )
    return sandbox, wall, str(refund["id"])


def _listed(sandbox: Sandbox) -> list[tuple[str, str]]:
    return [(r["id"], r["status"]) for r in sandbox.readable_refunds()]


def _status(sandbox: Sandbox, ident: str) -> Any:
    try:
        return sandbox.read_refund(ident)["status"]
    except StripeError as exc:
        return exc.status


def test_without_lag_reads_are_current() -> None:
    sandbox, wall, ident = _refunded()
    wall.now += 1.0
    sandbox.settle_due()
    assert _status(sandbox, ident) == "succeeded"


def test_a_lagging_read_shows_the_older_state_and_not_found_before_it_existed() -> None:
    sandbox, wall, ident = _refunded()
    sandbox.faults.read_lag_ms = 1500
    assert _status(sandbox, ident) == 404  # created just now: the lagging view has not got it
    assert _listed(sandbox) == []
    wall.now += 1.0
    sandbox.settle_due()  # succeeded at +1 s
    assert sandbox.refunds[ident]["status"] == "succeeded"
    assert _status(sandbox, ident) == 404
    wall.now += 0.5  # +1.5 s: the view is at +0 s
    assert _status(sandbox, ident) == "pending"
    wall.now += 0.5  # +2 s: failed now; the view is at +0.5 s
    sandbox.settle_due()
    assert sandbox.refunds[ident]["status"] == "failed"
    assert _status(sandbox, ident) == "pending"
    wall.now += 1.0  # +3 s: the view is at +1.5 s
    assert _status(sandbox, ident) == "succeeded"
    assert _listed(sandbox) == [(ident, "succeeded")]
    wall.now += 1.0  # +4 s: the view is at +2.5 s
    assert _status(sandbox, ident) == "failed"


def test_a_lag_set_later_makes_the_reads_go_backwards() -> None:
    sandbox, wall, ident = _refunded()
    wall.now += 1.0
    sandbox.settle_due()
    assert _status(sandbox, ident) == "succeeded"
    assert sandbox.set_refund_read_lag(ident, 5000) == {"refund": ident, "read_lag_ms": 5000}
    assert _status(sandbox, ident) == 404
    assert _listed(sandbox) == []
    sandbox.set_refund_read_lag(ident, 0)
    assert _status(sandbox, ident) == "succeeded"


def test_the_lag_of_one_refund_leaves_the_others_current() -> None:
    sandbox, _, ident = _refunded()
    charge = sandbox.create_charge({"amount": "100", "currency": "usd"}, CTX)
    other = sandbox.create_refund({"charge": charge["id"]}, CTX)["id"]
    sandbox.set_refund_read_lag(ident, 1000)
    assert _status(sandbox, ident) == 404
    assert _status(sandbox, other) == "pending"
    with pytest.raises(StripeError):
        sandbox.set_refund_read_lag(ident, -1)
    with pytest.raises(StripeError):
        sandbox.set_refund_read_lag("re_missing", 10)


def test_reset_forgets_the_lags() -> None:
    sandbox, _, ident = _refunded()
    sandbox.set_refund_read_lag(ident, 1000)
    sandbox.reset()
    assert sandbox.refund_lags_ms == {}
    assert sandbox.refund_states == {}
