"""The sandbox's Stripe API through the official library and raw HTTP: objects, envelopes,
auth, idempotency, form encoding, lists, events, signed deliveries."""

from __future__ import annotations

import json
from typing import Any

import pytest
import stripe

from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox
from tests.sandbox.conftest import API_KEY, Receiver, http

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_library_creates_a_charge_and_a_refund_and_reads_them_back(
    client: stripe.StripeClient,
) -> None:
    charge = client.v1.charges.create(
        params={"amount": 5000, "currency": "USD", "metadata": {"seats": "5"}}
    )
    assert charge.id.startswith("ch_")
    assert (charge.object, charge.amount, charge.currency) == ("charge", 5000, "usd")
    assert charge.metadata.to_dict() == {"seats": "5"}
    assert isinstance(charge.created, int)

    refund = client.v1.refunds.create(params={"charge": charge.id, "amount": 2000})
    assert refund.id.startswith("re_")
    assert (refund.object, refund.status, refund.amount, refund.charge) == (
        "refund",
        "pending",
        2000,
        charge.id,
    )

    read = client.v1.refunds.retrieve(refund.id)
    assert (read.id, read.amount, read.currency) == (refund.id, 2000, "usd")
    charge = client.v1.charges.retrieve(charge.id)
    assert (charge.amount_refunded, charge.refunded) == (2000, False)

    listed = client.v1.refunds.list(params={"charge": charge.id})
    assert [r.id for r in listed.data] == [refund.id]

    # Without an amount the refund takes the whole remainder, and then nothing is left.
    rest = client.v1.refunds.create(params={"charge": charge.id})
    assert rest.amount == 3000
    assert client.v1.charges.retrieve(charge.id).refunded is True
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.create(params={"charge": charge.id, "amount": 1})
    assert err.value.code == "charge_already_refunded"


def test_an_idempotent_retry_through_the_library_returns_the_same_refund(
    client: stripe.StripeClient, running: RunningSandbox
) -> None:
    charge = client.v1.charges.create(params={"amount": 1000, "currency": "eur"})
    options: Any = {"idempotency_key": "op_0001"}
    first = client.v1.refunds.create(params={"charge": charge.id, "amount": 400}, options=options)
    again = client.v1.refunds.create(params={"charge": charge.id, "amount": 400}, options=options)
    assert again.id == first.id
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.last_response.headers
    assert len(client.v1.refunds.list(params={"charge": charge.id}).data) == 1
    assert client.v1.charges.retrieve(charge.id).amount_refunded == 400

    with pytest.raises(stripe.IdempotencyError) as err:
        client.v1.refunds.create(params={"charge": charge.id, "amount": 500}, options=options)
    assert err.value.http_status == 400
    assert err.value.json_body["error"]["type"] == "idempotency_error"

    # The same key on another endpoint is also refused.
    response = http.post(
        f"{running.base_url}/v1/charges",
        headers={**AUTH, "Idempotency-Key": "op_0001"},
        data={"amount": "400", "currency": "eur"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "idempotency_error"


def test_secret_key_auth(running: RunningSandbox, control: SandboxControl) -> None:
    url = f"{running.base_url}/v1/charges"
    missing = http.get(url)
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "invalid_request_error"
    for bad in ("sk_live_abcdefghijkl", "pk_test_abcdef", "sk_test_"):
        response = http.get(url, headers={"Authorization": f"Bearer {bad}"})
        assert response.status_code == 401, bad
    assert http.get(url, headers={"Authorization": "Bearer sk_test_anything"}).status_code == 200
    assert http.get(url, auth=("sk_test_basic", "")).status_code == 200  # curl -u style
    with pytest.raises(stripe.AuthenticationError):
        stripe.StripeClient(
            "sk_live_nope", base_addresses={"api": running.base_url}, max_network_retries=0
        ).v1.charges.list()


def test_form_encoding_nested_metadata_and_bracket_arrays(
    running: RunningSandbox, control: SandboxControl, receiver: Receiver
) -> None:
    body = (
        f"url={receiver.url}&enabled_events[]=refund.created&enabled_events[]=charge.refunded"
        "&metadata[team]=billing&metadata[tier]=gold"
    )
    response = http.post(
        f"{running.base_url}/v1/webhook_endpoints",
        headers={**AUTH, "Content-Type": "application/x-www-form-urlencoded"},
        content=body,
    )
    assert response.status_code == 200, response.text
    endpoint = response.json()
    assert endpoint["enabled_events"] == ["refund.created", "charge.refunded"]
    assert endpoint["metadata"] == {"team": "billing", "tier": "gold"}
    assert endpoint["id"].startswith("we_")
    assert endpoint["secret"].startswith("whsec_")
    # The secret is shown once, at creation.
    shown = http.get(f"{running.base_url}/v1/webhook_endpoints/{endpoint['id']}", headers=AUTH)
    assert "secret" not in shown.json()


def test_error_envelopes_carry_type_code_message_and_param(
    running: RunningSandbox, client: stripe.StripeClient
) -> None:
    charge = client.v1.charges.create(params={"amount": 300, "currency": "usd"})
    cases: list[tuple[str, str, dict[str, str], int, str | None, str | None]] = [
        (
            "POST",
            "/v1/refunds",
            {"charge": charge.id, "amount": "301"},
            400,
            "amount_too_large",
            "amount",
        ),
        ("POST", "/v1/refunds", {"charge": "ch_missing"}, 404, "resource_missing", "charge"),
        ("POST", "/v1/refunds", {}, 400, "parameter_missing", "charge"),
        (
            "POST",
            "/v1/refunds",
            {"charge": charge.id, "amount": "x"},
            400,
            "parameter_invalid_integer",
            "amount",
        ),
        (
            "POST",
            "/v1/charges",
            {"amount": "5", "currency": "usd", "colour": "red"},
            400,
            "parameter_unknown",
            "colour",
        ),
        ("GET", "/v1/refunds/re_nothing", {}, 404, "resource_missing", "id"),
        ("GET", "/v1/nothing_here", {}, 404, None, None),
    ]
    for method, path, data, status, code, param in cases:
        response = http.request(
            method, f"{running.base_url}{path}", headers=AUTH, data=data or None
        )
        assert response.status_code == status, (path, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"]
        assert error.get("code") == code, path
        assert error.get("param") == param, path
        assert response.headers["Request-Id"].startswith("req_")
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.create(params={"charge": charge.id, "amount": 301})
    assert (err.value.code, err.value.param, err.value.http_status) == (
        "amount_too_large",
        "amount",
        400,
    )


def test_list_envelope_and_pagination(running: RunningSandbox, client: stripe.StripeClient) -> None:
    ids = [
        client.v1.charges.create(params={"amount": 100 + i, "currency": "usd"}).id for i in range(5)
    ]
    first = http.get(f"{running.base_url}/v1/charges", params={"limit": 2}, headers=AUTH).json()
    assert first["object"] == "list"
    assert first["url"] == "/v1/charges"
    assert first["has_more"] is True
    assert [c["id"] for c in first["data"]] == ids[::-1][:2]  # newest first
    seen = [c.id for c in client.v1.charges.list(params={"limit": 2}).auto_paging_iter()]
    assert seen == ids[::-1]
    before = client.v1.charges.list(params={"ending_before": ids[1], "limit": 2})
    assert [c.id for c in before.data] == [ids[3], ids[2]]
    assert before.has_more is True


def test_events_carry_request_and_api_version_and_filter_by_type_and_created(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 900, "currency": "usd"})
    refund = client.v1.refunds.create(
        params={"charge": charge.id, "amount": 300}, options={"idempotency_key": "op_ev_1"}
    )
    events = client.v1.events.list(params={"type": "refund.created"}).data
    assert len(events) == 1
    event = events[0]
    assert event.id.startswith("evt_")
    assert event.api_version == "2026-08-26"
    assert event.data.object.id == refund.id
    assert event.request.idempotency_key == "op_ev_1"
    assert event.request.id == refund.last_response.headers["Request-Id"]
    refunded = client.v1.events.list(params={"type": "charge.refunded"}).data[0]
    assert refunded.request.idempotency_key == "op_ev_1"
    assert refunded.data.object.amount_refunded == 300
    assert refunded.data.previous_attributes.amount_refunded == 0

    wildcard = client.v1.events.list(params={"type": "refund.*"}).data
    assert {e.type for e in wildcard} == {"refund.created"}

    created = event.created
    control.advance(120)
    client.v1.charges.create(params={"amount": 1, "currency": "usd"})
    later = client.v1.events.list(params={"created": {"gte": created + 60}}).data
    assert [e.type for e in later] == ["charge.succeeded", "refund.updated"]
    raw = http.get(
        f"{running.base_url}/v1/events",
        params={"type": "charge.succeeded", "created[gte]": str(created + 60)},
        headers=AUTH,
    ).json()
    assert len(raw["data"]) == 1
    # Settlement is the provider's own progress: no request caused it.
    assert later[1].request.id is None
    assert later[1].request.idempotency_key is None
    assert client.v1.events.retrieve(event.id).id == event.id


def test_a_delivery_verifies_with_construct_event_and_the_endpoint_secret(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    charge = client.v1.charges.create(params={"amount": 700, "currency": "usd"})
    control.flush()
    assert len(receiver.received) == 1
    delivery = receiver.received[0]
    assert delivery["headers"]["content-type"].startswith("application/json")
    assert delivery["headers"]["stripe-signature"].startswith("t=")
    event = stripe.Webhook.construct_event(
        delivery["body"], delivery["headers"]["stripe-signature"], endpoint.secret
    )
    assert event.type == "charge.succeeded"
    assert event.data.object.id == charge.id
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(
            delivery["body"], delivery["headers"]["stripe-signature"], "whsec_wrong"
        )
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(
            delivery["body"].replace("700", "701"),
            delivery["headers"]["stripe-signature"],
            endpoint.secret,
        )
    attempts = control.deliveries(event_id=event.id)
    assert [d["status"] for d in attempts] == ["delivered"]
    assert attempts[0]["attempts"][0]["status_code"] == 200


def test_only_subscribed_types_are_delivered_and_endpoints_can_be_managed(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver
) -> None:
    endpoint = client.v1.webhook_endpoints.create(
        params={"url": receiver.url, "enabled_events": ["charge.refunded"]}
    )
    charge = client.v1.charges.create(params={"amount": 700, "currency": "usd"})
    client.v1.refunds.create(params={"charge": charge.id})
    control.flush()
    assert [e["type"] for e in receiver.events()] == ["charge.refunded"]
    assert [e.id for e in client.v1.webhook_endpoints.list().data] == [endpoint.id]
    client.v1.webhook_endpoints.update(endpoint.id, params={"disabled": True})
    client.v1.refunds.create(
        params={"charge": client.v1.charges.create(params={"amount": 5, "currency": "usd"}).id}
    )
    control.flush()
    assert len(receiver.received) == 1
    deleted = client.v1.webhook_endpoints.delete(endpoint.id)
    assert deleted.deleted is True
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.webhook_endpoints.retrieve(endpoint.id)


def test_checkout_session_completes_into_a_charge(
    client: stripe.StripeClient, control: SandboxControl, receiver: Receiver, endpoint: Any
) -> None:
    session = client.v1.checkout.sessions.create(
        params={
            "mode": "payment",
            "line_items": [
                {
                    "price_data": {
                        "currency": "usd",
                        "unit_amount": 1000,
                        "product_data": {"name": "seat"},
                    },
                    "quantity": 5,
                }
            ],
            "metadata": {"seats": "5"},
            "success_url": "https://example.test/ok",
        }
    )
    assert (session.status, session.amount_total, session.payment_intent) == ("open", 5000, None)
    done = control.complete_session(session.id)
    assert done["checkout_session"]["status"] == "complete"
    intent = client.v1.payment_intents.retrieve(done["checkout_session"]["payment_intent"])
    charge = client.v1.charges.retrieve(intent.latest_charge)
    assert (charge.amount, charge.payment_intent, charge.metadata.to_dict()) == (
        5000,
        intent.id,
        {"seats": "5"},
    )
    control.flush()
    types = [e["type"] for e in receiver.events()]
    assert types == ["charge.succeeded", "checkout.session.completed"]
    completed = receiver.events()[1]["data"]["object"]
    assert completed["payment_status"] == "paid"
    assert completed["metadata"] == {"seats": "5"}


def test_refund_metadata_update_and_cancel_of_a_refund_that_requires_action(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 800, "currency": "usd"})
    refund = client.v1.refunds.create(
        params={"charge": charge.id, "metadata": {"sandbox_outcome": "requires_action"}}
    )
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.cancel(refund.id)
    control.advance(5)
    assert client.v1.refunds.retrieve(refund.id).status == "requires_action"
    updated = client.v1.refunds.update(refund.id, params={"metadata": {"note": "customer called"}})
    assert updated.metadata["note"] == "customer called"
    canceled = client.v1.refunds.cancel(refund.id)
    assert canceled.status == "canceled"
    assert client.v1.charges.retrieve(charge.id).amount_refunded == 0


def test_state_view_and_reset(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    client.v1.charges.create(params={"amount": 5, "currency": "usd"})
    state = control.state()
    assert len(state["charges"]) == 1
    assert state["settings"]["settle_ms"] == 5000
    control.reset()
    assert control.state()["charges"] == []
    response = http.post(f"{running.base_url}/_sandbox/advance", json={"seconds": -1})
    assert response.status_code == 400
    assert "seconds" in response.json()["error"]["message"]
    assert json.loads(http.get(f"{running.base_url}/_sandbox/outcomes").text)["outcomes"]
