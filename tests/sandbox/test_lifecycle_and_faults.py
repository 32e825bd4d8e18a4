"""Refund outcomes on the sandbox clock, and every fault on demand, observed from outside."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
import stripe

from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox, run_sandbox
from tests.sandbox.conftest import API_KEY, Receiver, http

SETTLE_S = 5.0  # the module sandbox runs with settle_ms=5000 (real time never catches up)


def _refund(client: stripe.StripeClient, outcome: str | None = None, amount: int = 1000) -> Any:
    charge = client.v1.charges.create(params={"amount": amount, "currency": "usd"})
    params: dict[str, Any] = {"charge": charge.id}
    if outcome is not None:
        params["metadata"] = {"sandbox_outcome": outcome}
    return client.v1.refunds.create(params=params)


def _refund_events(client: stripe.StripeClient, refund_id: str) -> list[tuple[str, str]]:
    events = client.v1.events.list(params={"limit": 100}).data
    return [
        (e.type, e.data.object.status)
        for e in reversed(events)
        if e.type.startswith("refund.") and e.data.object.id == refund_id
    ]


def _charge_refunded(client: stripe.StripeClient, charge_id: str) -> list[int]:
    events = client.v1.events.list(params={"type": "charge.refunded", "limit": 100}).data
    return [
        e.data.object.amount_refunded for e in reversed(events) if e.data.object.id == charge_id
    ]


@pytest.mark.parametrize(
    ("outcome", "after_one", "after_two", "events", "refunded_amounts"),
    [
        (
            "succeeded",
            "succeeded",
            "succeeded",
            [("refund.created", "pending"), ("refund.updated", "succeeded")],
            [1000],
        ),
        (
            "failed",
            "failed",
            "failed",
            [
                ("refund.created", "pending"),
                ("refund.updated", "failed"),
                ("refund.failed", "failed"),
            ],
            [1000, 0],
        ),
        (
            "canceled",
            "canceled",
            "canceled",
            [("refund.created", "pending"), ("refund.updated", "canceled")],
            [1000, 0],
        ),
        (
            "requires_action",
            "requires_action",
            "requires_action",
            [("refund.created", "pending"), ("refund.updated", "requires_action")],
            [1000],
        ),
        ("stuck_pending", "pending", "pending", [("refund.created", "pending")], [1000]),
        (
            "succeeded_then_failed",
            "succeeded",
            "failed",
            [
                ("refund.created", "pending"),
                ("refund.updated", "succeeded"),
                ("refund.updated", "failed"),
                ("refund.failed", "failed"),
            ],
            [1000, 0],
        ),
        (
            "unknown_status",
            "processing_unknown",
            "processing_unknown",
            [("refund.created", "pending"), ("refund.updated", "processing_unknown")],
            [1000],
        ),
    ],
)
def test_each_refund_outcome_by_metadata(
    client: stripe.StripeClient,
    control: SandboxControl,
    outcome: str,
    after_one: str,
    after_two: str,
    events: list[tuple[str, str]],
    refunded_amounts: list[int],
) -> None:
    refund = _refund(client, outcome)
    assert refund.status == "pending"
    assert client.v1.refunds.retrieve(refund.id).status == "pending"  # nothing moves on its own
    control.advance(SETTLE_S)
    assert client.v1.refunds.retrieve(refund.id).status == after_one
    control.advance(SETTLE_S)
    control.advance(3600)
    final = client.v1.refunds.retrieve(refund.id)
    assert final.status == after_two
    if after_two == "failed":
        assert final.failure_reason
    if after_two == "requires_action":
        assert final.next_action is not None
    assert _refund_events(client, refund.id) == events
    assert _charge_refunded(client, refund.charge) == refunded_amounts


def test_settlement_waits_for_settle_ms_on_the_sandbox_clock(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    refund = _refund(client)
    control.advance(SETTLE_S / 2)
    assert client.v1.refunds.retrieve(refund.id).status == "pending"
    control.advance(SETTLE_S / 2)
    assert client.v1.refunds.retrieve(refund.id).status == "succeeded"


def test_default_settlement_also_happens_in_real_time() -> None:
    with run_sandbox(settle_ms=50) as sb:
        client = stripe.StripeClient(
            sb.api_key, base_addresses={"api": sb.base_url}, max_network_retries=0
        )
        _settles_without_help(client)


def _settles_without_help(client: stripe.StripeClient) -> None:
    refund = _refund(client)
    deadline = time.monotonic() + 5
    while client.v1.refunds.retrieve(refund.id).status == "pending":
        assert time.monotonic() < deadline, "the refund never settled"
        time.sleep(0.05)
    assert client.v1.refunds.retrieve(refund.id).status == "succeeded"


def test_outcome_and_status_by_control_call(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    refund = _refund(client)
    assert control.set_outcome(refund.id, "failed")["sandbox_outcome"] == "failed"
    control.advance(SETTLE_S)
    assert client.v1.refunds.retrieve(refund.id).status == "failed"

    other = _refund(client, "stuck_pending")
    control.advance(60)
    assert client.v1.refunds.retrieve(other.id).status == "pending"
    forced = control.set_status(other.id, "succeeded")
    assert forced["status"] == "succeeded"
    assert _refund_events(client, other.id)[-1] == ("refund.updated", "succeeded")
    with pytest.raises(Exception, match="not pending"):
        control.set_outcome(other.id, "failed")
    with pytest.raises(Exception, match="Unknown outcome"):
        control.set_outcome(_refund(client).id, "exploded")


def test_default_outcome_fault_and_bad_outcome_metadata(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    control.faults(default_outcome="canceled")
    refund = _refund(client)
    control.advance(SETTLE_S)
    assert client.v1.refunds.retrieve(refund.id).status == "canceled"
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(client, "bogus")
    assert err.value.param == "metadata[sandbox_outcome]"


def test_duplicate_deliveries(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    control.faults(duplicate=3)
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    events = receiver.events()
    assert len(events) == 3
    assert len({e["id"] for e in events}) == 1
    bodies = {r["body"] for r in receiver.received}
    assert len(bodies) == 1  # byte-identical copies
    for copy in receiver.received:
        stripe.Webhook.construct_event(
            copy["body"], copy["headers"]["stripe-signature"], endpoint.secret
        )


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_reordered_deliveries_are_buffered_then_released_in_that_order(
    client: stripe.StripeClient,
    control: SandboxControl,
    receiver: Receiver,
    endpoint: Any,
    order: str,
) -> None:
    control.faults(order=order, shuffle_seed=7)
    for amount in range(1, 7):
        client.v1.charges.create(params={"amount": amount, "currency": "usd"})
    control.flush()
    assert receiver.received == []  # held back
    created_order = [e.id for e in reversed(client.v1.events.list().data)]
    released = control.release()
    assert len(released) == 6
    control.flush()
    got = [e["id"] for e in receiver.events()]
    expected = list(created_order)
    if order == "reversed":
        expected.reverse()
    else:
        random.Random(7).shuffle(expected)
        assert expected != created_order
    assert got == expected


def test_delayed_deliveries_wait_on_the_sandbox_clock(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    control.faults(delay_ms=60_000)
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    assert receiver.received == []
    control.advance(50)
    assert receiver.received == []
    control.advance(10)
    assert len(receiver.received) == 1


def test_dropped_event_types_are_never_delivered_but_exist(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    control.faults(drop_types=["charge.refunded"])
    _refund(client)
    control.advance(SETTLE_S)
    types = [e["type"] for e in receiver.events()]
    assert "charge.refunded" not in types
    assert types == ["charge.succeeded", "refund.created", "refund.updated"]
    assert len(client.v1.events.list(params={"type": "charge.refunded"}).data) == 1
    assert [d["status"] for d in control.deliveries(type="charge.refunded")] == ["dropped"]


def test_outage_window_answers_503_in_stripes_envelope(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.outage(seconds=30)
    response = http.get(
        f"{running.base_url}/v1/charges/{charge.id}",
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "api_error"
    with pytest.raises(stripe.APIError) as err:
        client.v1.charges.retrieve(charge.id)
    assert err.value.http_status == 503
    assert control.state()["clock"]["in_outage"] is True  # the control API stays up
    control.advance(30)
    assert client.v1.charges.retrieve(charge.id).id == charge.id
    control.outage(enabled=True)
    with pytest.raises(stripe.APIError):
        client.v1.charges.retrieve(charge.id)
    control.outage(enabled=False)
    assert client.v1.charges.retrieve(charge.id).id == charge.id


def test_api_version_fault_and_endpoint_api_version(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver
) -> None:
    control.faults(api_version="2019-02-19")
    plain = client.v1.webhook_endpoints.create(
        params={"url": receiver.url, "enabled_events": ["charge.succeeded"]}
    )
    pinned = client.v1.webhook_endpoints.create(
        params={
            "url": receiver.url + "?pinned=1",
            "enabled_events": ["charge.succeeded"],
            "api_version": "2024-06-20",
        }
    )
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    assert client.v1.events.list().data[0].api_version == "2019-02-19"
    control.flush()
    deliveries = control.deliveries()
    versions = {d["endpoint_id"]: json.loads(d["payload"])["api_version"] for d in deliveries}
    assert versions == {plain.id: "2019-02-19", pinned.id: "2024-06-20"}


def test_clock_offset_skews_timestamps_and_signatures(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    control.faults(clock_offset_s=-3600)
    charge = client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    assert abs(charge.created - (time.time() - 3600)) < 5
    control.flush()
    delivery = receiver.received[0]
    # An hour-old signature is refused by a receiver with the default 300 s tolerance...
    with pytest.raises(stripe.SignatureVerificationError, match="tolerance"):
        stripe.Webhook.construct_event(
            delivery["body"], delivery["headers"]["stripe-signature"], endpoint.secret
        )
    # ...yet it is a valid signature.
    stripe.Webhook.construct_event(
        delivery["body"], delivery["headers"]["stripe-signature"], endpoint.secret, tolerance=0
    )


def test_failed_deliveries_are_retried_with_backoff_and_attempts_are_visible(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    receiver.fail_next = 2
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    [delivery] = control.deliveries()
    assert delivery["status"] == "scheduled"
    assert [a["status_code"] for a in delivery["attempts"]] == [500]
    first_wait = delivery["next_attempt_at"]
    control.advance(10)  # retry_base_ms=10_000
    [delivery] = control.deliveries()
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500]
    assert delivery["next_attempt_at"] - first_wait >= 19  # the wait doubled
    control.advance(10)
    [delivery] = control.deliveries()
    assert len(delivery["attempts"]) == 2  # not yet
    control.advance(10)
    [delivery] = control.deliveries()
    assert delivery["status"] == "delivered"
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 200]
    assert len(receiver.received) == 3


def test_delivery_attempts_stop_after_the_maximum(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    receiver.fail_next = 100
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    for _ in range(4):
        control.advance(40)
    [delivery] = control.deliveries()
    assert delivery["status"] == "failed"
    assert len(delivery["attempts"]) == 4  # retry_max_attempts=4


def test_unreachable_endpoint_is_recorded_as_an_error(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client.v1.webhook_endpoints.create(
        params={"url": f"http://127.0.0.1:{port}/nothing", "enabled_events": ["*"]}
    )
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    [delivery] = control.deliveries()
    attempt = delivery["attempts"][0]
    assert attempt["status_code"] is None
    assert attempt["error"]


def test_resend_replays_the_same_event(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    event_id = receiver.events()[0]["id"]
    control.resend(event_id)
    control.flush()
    assert [e["id"] for e in receiver.events()] == [event_id, event_id]
    assert receiver.received[0]["body"] == receiver.received[1]["body"]


def test_advancing_time_does_not_age_or_date_signatures(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    control.advance(3 * 86400)
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    control.flush()
    header = receiver.received[0]["headers"]["stripe-signature"]
    t = int(header.split(",")[0].removeprefix("t="))
    assert abs(t - time.time()) < 5
    assert receiver.events()[0]["created"] >= time.time() + 3 * 86400 - 5  # provider clock moved


def test_fault_changes_are_validated_and_partial(
    running: RunningSandbox, control: SandboxControl
) -> None:
    assert control.faults(duplicate=2)["order"] == "in_order"
    assert control.faults(order="reversed")["duplicate"] == 2  # other faults stay
    for body in ({"duplicate": 0}, {"order": "sideways"}, {"nonsense": 1}, {"delay_ms": -1}):
        response = http.post(f"{running.base_url}/_sandbox/faults", json=body)
        assert response.status_code == 400, body
        assert response.json()["error"]["message"]
    assert http.post(f"{running.base_url}/_sandbox/faults", content=b"[1]").status_code == 400
    assert http.post(f"{running.base_url}/_sandbox/faults", content=b"{").status_code == 400
    assert control.faults()["duplicate"] == 2
    control.reset()
    assert control.faults()["duplicate"] == 1
