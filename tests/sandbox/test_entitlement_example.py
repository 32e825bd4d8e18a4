"""Seed 003's sequence against the example app: grant on checkout, revoke on refund, replay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import stripe

from examples.entitlement_app import create_app
from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox, run_app
from tests.sandbox.conftest import http


@pytest.fixture(params=[False, True], ids=["correct_app", "refund_ignoring_app"])
def app_url(
    request: pytest.FixtureRequest, running: RunningSandbox, control: SandboxControl
) -> Iterator[tuple[str, Any]]:
    app = create_app(
        api_key=running.api_key, api_base=running.base_url, ignore_refunds=request.param
    )
    with run_app(app) as url:
        yield url, app


def _seats(url: str, charge_id: str) -> int:
    response = http.get(f"{url}/entitlements/{charge_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["charge"] == charge_id
    return int(body["seats"])


def test_grant_full_refund_replay_and_partial_refund(
    app_url: tuple[str, Any], running: RunningSandbox, control: SandboxControl
) -> None:
    url, app = app_url
    buggy = app.state.config.ignore_refunds
    client = stripe.StripeClient(
        running.api_key, base_addresses={"api": running.base_url}, max_network_retries=0
    )
    endpoint = client.v1.webhook_endpoints.create(
        params={
            "url": f"{url}/webhooks/stripe",
            "enabled_events": ["checkout.session.completed", "charge.refunded"],
        }
    )
    app.state.config.webhook_secret = endpoint.secret

    # A real charge exists, and checkout.session.completed grants 5 seats on it.
    paid = control.complete_checkout(amount=5000, quantity=5, metadata={"seats": "5"})
    charge_id = paid["charge"]["id"]
    control.flush()
    assert _seats(url, charge_id) == 5

    # A full refund of that very charge: charge.refunded arrives, seats drop to 0.
    client.v1.refunds.create(params={"charge": charge_id})
    delivered = [d for d in control.delivered(type="charge.refunded") if d["status"] == "delivered"]
    assert len(delivered) == 1
    assert _seats(url, charge_id) == (5 if buggy else 0)

    # The same delivery replayed: nothing changes.
    control.resend(delivered[0]["event_id"])
    replays = control.delivered(type="charge.refunded")
    assert [d["status"] for d in replays] == ["delivered", "delivered"]
    assert _seats(url, charge_id) == (5 if buggy else 0)

    # A partial refund of a second purchase leaves what the remaining amount pays for.
    second = control.complete_checkout(amount=5000, quantity=5, metadata={"seats": "5"})
    second_id = second["charge"]["id"]
    control.flush()
    assert _seats(url, second_id) == 5
    client.v1.refunds.create(params={"charge": second_id, "amount": 2000})
    control.flush()
    assert _seats(url, second_id) == (5 if buggy else 3)
    client.v1.refunds.create(params={"charge": second_id, "amount": 500})
    control.flush()
    assert _seats(url, second_id) == (5 if buggy else 2)  # 2500 left pays for 2.5 seats → 2

    # A refund that fails gives the money (and the seats) back.
    client.v1.refunds.create(
        params={"charge": second_id, "amount": 1000, "metadata": {"sandbox_outcome": "failed"}}
    )
    control.flush()
    assert _seats(url, second_id) == (5 if buggy else 1)
    control.advance(5)
    assert _seats(url, second_id) == (5 if buggy else 2)


def test_the_app_refuses_a_badly_signed_delivery(
    app_url: tuple[str, Any], running: RunningSandbox, control: SandboxControl
) -> None:
    url, app = app_url
    app.state.config.webhook_secret = "whsec_expected"
    client = stripe.StripeClient(
        running.api_key, base_addresses={"api": running.base_url}, max_network_retries=0
    )
    client.v1.webhook_endpoints.create(
        params={"url": f"{url}/webhooks/stripe", "enabled_events": ["*"]}
    )
    paid = control.complete_checkout(amount=1000, metadata={"seats": "1"})
    [delivery, *_] = control.delivered(type="checkout.session.completed")
    assert delivery["attempts"][0]["status_code"] == 400
    assert http.get(f"{url}/entitlements/{paid['charge']['id']}").status_code == 404


def test_refund_delivered_before_the_grant_still_ends_at_zero(
    app_url: tuple[str, Any], running: RunningSandbox, control: SandboxControl
) -> None:
    url, app = app_url
    client = stripe.StripeClient(
        running.api_key, base_addresses={"api": running.base_url}, max_network_retries=0
    )
    endpoint = client.v1.webhook_endpoints.create(
        params={
            "url": f"{url}/webhooks/stripe",
            "enabled_events": ["checkout.session.completed", "charge.refunded"],
        }
    )
    app.state.config.webhook_secret = endpoint.secret
    control.faults(order="reversed", duplicate=2)
    paid = control.complete_checkout(amount=3000, quantity=3, metadata={"seats": "3"})
    client.v1.refunds.create(params={"charge": paid["charge"]["id"]})
    released = control.release()
    assert len(released) == 4
    rows = control.delivered()
    arrival = [d["event_type"] for d in rows]  # listed in release (= sending) order
    assert arrival[0] == "charge.refunded"
    assert all(d["status"] == "delivered" for d in rows)
    expected = 3 if app.state.config.ignore_refunds else 0
    assert _seats(url, paid["charge"]["id"]) == expected


@pytest.mark.parametrize("order", ["in_order", "reversed"])
def test_two_refunds_of_one_second_leave_what_the_total_pays_for(
    order: str, running: RunningSandbox, control: SandboxControl
) -> None:
    """Two refunds of 2000 made back to back on a charge of 5000 for 5 seats: Stripe stamps
    both charge.refunded in one second; in either delivery order the app ends at 1 seat."""
    app = create_app(api_key=running.api_key, api_base=running.base_url)
    client = stripe.StripeClient(
        running.api_key, base_addresses={"api": running.base_url}, max_network_retries=0
    )
    with run_app(app) as url:
        endpoint = client.v1.webhook_endpoints.create(
            params={
                "url": f"{url}/webhooks/stripe",
                "enabled_events": ["checkout.session.completed", "charge.refunded"],
            }
        )
        app.state.config.webhook_secret = endpoint.secret
        for _ in range(5):  # until both refunds fall in one second
            paid = control.complete_checkout(amount=5000, quantity=5, metadata={"seats": "5"})
            charge_id = paid["charge"]["id"]
            control.flush()
            assert _seats(url, charge_id) == 5
            control.faults(order=order)
            client.v1.refunds.create(params={"charge": charge_id, "amount": 2000})
            client.v1.refunds.create(params={"charge": charge_id, "amount": 2000})
            control.release()
            control.faults(order="in_order")
            events = [
                e
                for e in client.v1.events.list(params={"type": "charge.refunded"}).data
                if e.data.object["id"] == charge_id
            ]
            assert len(events) == 2
            if events[0].created == events[1].created:
                break
        else:
            pytest.fail("the two refunds never fell in one second")
        rows = [d for d in control.delivered(type="charge.refunded") if d["status"] == "delivered"]
        assert len([d for d in rows if d["event_id"] in {e.id for e in events}]) == 2
        assert _seats(url, charge_id) == 1  # 1000 of 5000 left pays for 1 seat
