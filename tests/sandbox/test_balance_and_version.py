"""The sandbox serves the balance transactions its charges and refunds name, and the balance
(#33: ``balance_transaction`` ids led nowhere), and answers the ``Stripe-Version`` a client
asks for; its webhook endpoints list with the ``api_version`` they send."""

from __future__ import annotations

from typing import Any

import pytest
import stripe

from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox
from tests.sandbox.conftest import API_KEY, http

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_a_charge_and_its_refund_lead_to_their_balance_transactions(
    client: stripe.StripeClient, running: RunningSandbox, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 5000, "currency": "usd"})
    refund = client.v1.refunds.create(params={"charge": charge.id, "amount": 2000})
    assert isinstance(charge.balance_transaction, str)
    txn = client.v1.balance_transactions.retrieve(charge.balance_transaction)
    assert (txn.object, txn.type, txn.amount, txn.net, txn.source) == (
        "balance_transaction",
        "charge",
        5000,
        5000,
        charge.id,
    )
    assert isinstance(refund.balance_transaction, str)
    back = client.v1.balance_transactions.retrieve(refund.balance_transaction)
    assert (back.type, back.amount, back.status, back.source) == (
        "refund",
        -2000,
        "pending",
        refund.id,
    )
    balance = client.v1.balance.retrieve()
    assert [(f.currency, f.amount) for f in balance.available] == [("usd", 5000)]
    assert [(f.currency, f.amount) for f in balance.pending] == [("usd", -2000)]
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.balance_transactions.retrieve("txn_nope")
    assert err.value.http_status == 404


def test_a_succeeded_refund_moves_the_balance_and_a_failed_one_does_not(
    client: stripe.StripeClient, running: RunningSandbox, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 1000, "currency": "eur"})
    kept = client.v1.refunds.create(params={"charge": charge.id, "amount": 300})
    lost = client.v1.refunds.create(params={"charge": charge.id, "amount": 200})
    for refund, status in ((kept, "succeeded"), (lost, "failed")):
        answer = http.post(
            f"{running.base_url}/_sandbox/refunds/{refund.id}/status", json={"status": status}
        )
        assert answer.status_code == 200, answer.text
    balance = client.v1.balance.retrieve()
    assert [(f.currency, f.amount) for f in balance.available] == [("eur", 700)]
    assert [(f.currency, f.amount) for f in balance.pending] == [("eur", 0)]


@pytest.mark.parametrize("asked", ["2025-03-31.basil", "2024-06-20"])
def test_the_answer_carries_the_version_the_client_asks_for(
    running: RunningSandbox, control: SandboxControl, asked: str
) -> None:
    answer = http.get(f"{running.base_url}/v1/balance", headers={**AUTH, "Stripe-Version": asked})
    assert answer.status_code == 200
    assert answer.headers["stripe-version"] == asked
    plain = http.get(f"{running.base_url}/v1/balance", headers=AUTH)
    assert plain.headers["stripe-version"] == "2026-08-26"


def test_endpoints_list_with_the_version_they_send(
    client: stripe.StripeClient, control: SandboxControl
) -> None:
    pinned: Any = client.v1.webhook_endpoints.create(
        params={
            "url": "http://127.0.0.1:9/v1/events/stripe/ws_1",
            "enabled_events": ["*"],
            "api_version": "2025-03-31.basil",
        }
    )
    default: Any = client.v1.webhook_endpoints.create(
        params={"url": "http://127.0.0.1:9/v1/events/stripe/ws_2", "enabled_events": ["*"]}
    )
    listed = {e.id: e.api_version for e in client.v1.webhook_endpoints.list().data}
    assert listed == {pinned.id: "2025-03-31.basil", default.id: None}
