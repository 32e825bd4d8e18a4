"""The sandbox against what the official ``stripe`` library declares and calls.

The field check reads the library's own class annotations (``stripe.Charge.__annotations__``
and its bases), so a newer library that declares a new field makes this test name it. Fields
the library documents as sent only in special answers are left out, by the library's own
words: "Always true for a deleted object" (``deleted``) and "Only returned at creation"
(a webhook endpoint's ``secret``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

import pytest
import stripe
from stripe.checkout import Session

from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox
from tests.sandbox.conftest import API_KEY, Receiver, http

AUTH = {"Authorization": f"Bearer {API_KEY}"}
_SPECIAL = ("Always true for a deleted object", "Only returned at creation")


def _field_docs(cls: type) -> dict[str, str]:
    """Each annotated attribute of ``cls`` with the docstring the library writes under it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = ""
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                doc = str(following.value.value)
            docs[node.target.id] = doc
    return docs


def declared_fields(cls: type) -> set[str]:
    """The API fields the library declares for ``cls`` (annotations, inherited ones too)."""
    fields: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base.__module__.startswith("stripe") and "__annotations__" in vars(base):
            docs = _field_docs(base)
            for name in vars(base)["__annotations__"]:
                if not name.startswith("_") and name[0].islower():
                    fields[name] = docs.get(name, "")
    return {name for name, doc in fields.items() if not any(s in doc for s in _SPECIAL)}


def missing_fields(obj: Any, cls: type) -> list[str]:
    return sorted(name for name in declared_fields(cls) if name not in obj)


def test_the_declarations_are_read_from_the_library() -> None:
    # A guard against a reader that finds nothing (and so can never fail).
    assert {"amount", "captured", "billing_details", "refunds"} <= declared_fields(stripe.Charge)
    assert "pending_reason" in declared_fields(stripe.Refund)
    assert "deleted" not in declared_fields(stripe.Customer)
    assert "secret" not in declared_fields(stripe.WebhookEndpoint)
    assert len(declared_fields(Session)) > 50


def test_every_object_has_every_field_the_library_declares(
    client: stripe.StripeClient, control: SandboxControl, endpoint: Any, receiver: Receiver
) -> None:
    customer = client.v1.customers.create(params={"email": "a@example.test"})
    charge = client.v1.charges.create(
        params={"amount": 2000, "currency": "usd", "customer": customer.id}
    )
    refund = client.v1.refunds.create(params={"charge": charge.id, "amount": 500})
    intent = client.v1.payment_intents.create(params={"amount": 1200, "currency": "usd"})
    session = client.v1.checkout.sessions.create(
        params={
            "mode": "payment",
            "line_items": [{"price_data": {"currency": "usd", "unit_amount": 700}, "quantity": 1}],
        }
    )
    done = control.complete_session(session.id)
    control.flush()
    events = client.v1.events.list(params={"limit": 100}).data
    answers: list[tuple[str, Any, type]] = [
        ("charge", client.v1.charges.retrieve(charge.id), stripe.Charge),
        ("refund", client.v1.refunds.retrieve(refund.id), stripe.Refund),
        ("payment_intent", client.v1.payment_intents.retrieve(intent.id), stripe.PaymentIntent),
        (
            "completed intent",
            client.v1.payment_intents.retrieve(done["checkout_session"]["payment_intent"]),
            stripe.PaymentIntent,
        ),
        ("checkout session", client.v1.checkout.sessions.retrieve(session.id), Session),
        ("customer", client.v1.customers.retrieve(customer.id), stripe.Customer),
        ("event", events[0], stripe.Event),
        (
            "webhook endpoint",
            client.v1.webhook_endpoints.retrieve(endpoint.id),
            stripe.WebhookEndpoint,
        ),
        ("created refund", refund, stripe.Refund),
        ("created charge", charge, stripe.Charge),
    ]
    kinds = {"refund": stripe.Refund, "charge": stripe.Charge, "customer": stripe.Customer}
    for event in receiver.events():
        inner = event["data"]["object"]
        if inner["object"] in kinds:
            answers.append((f"{event['type']} data.object", inner, kinds[inner["object"]]))
    gaps = {name: missing_fields(obj, cls) for name, obj, cls in answers}
    assert {name: gap for name, gap in gaps.items() if gap} == {}
    # Read as attributes, as an application does: no AttributeError.
    read = client.v1.refunds.retrieve(refund.id)
    assert (read.pending_reason, read.description, read.customer) == (None, None, customer.id)
    assert client.v1.charges.retrieve(charge.id).billing_details.name is None


def test_charge_capture(
    client: stripe.StripeClient, receiver: Receiver, endpoint: Any, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 3000, "currency": "usd", "capture": False})
    assert (charge.captured, charge.amount_captured, charge.balance_transaction) == (False, 0, None)
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.create(params={"charge": charge.id})
    assert err.value.code == "charge_not_captured"
    captured = client.v1.charges.capture(charge.id, params={"amount": 2500})
    assert (captured.captured, captured.amount_captured) == (True, 2500)
    assert captured.balance_transaction.startswith("txn_")
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.charges.capture(charge.id)
    assert err.value.code == "charge_already_captured"
    # A refund can take what was captured, no more.
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.create(params={"charge": charge.id, "amount": 2600})
    assert client.v1.refunds.create(params={"charge": charge.id}).amount == 2500
    control.flush()
    assert "charge.captured" in [e["type"] for e in receiver.events()]


def test_customers_create_retrieve_update_list_delete(client: stripe.StripeClient) -> None:
    customer = client.v1.customers.create(
        params={"email": "jo@example.test", "name": "Jo", "metadata": {"plan": "pro"}}
    )
    assert customer.id.startswith("cus_")
    read = client.v1.customers.retrieve(customer.id)
    assert (read.email, read.name, read.metadata.to_dict(), read.balance) == (
        "jo@example.test",
        "Jo",
        {"plan": "pro"},
        0,
    )
    updated = client.v1.customers.update(customer.id, params={"name": "Joanna"})
    assert updated.name == "Joanna"
    listed = client.v1.customers.list(params={"email": "jo@example.test"})
    assert [c.id for c in listed.data] == [customer.id]
    deleted = client.v1.customers.delete(customer.id)
    assert deleted.deleted is True
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.customers.retrieve(customer.id)
    assert err.value.code == "resource_missing"


def test_payment_intent_create_confirm_retrieve(client: stripe.StripeClient) -> None:
    customer = client.v1.customers.create()
    intent = client.v1.payment_intents.create(
        params={"amount": 4200, "currency": "eur", "customer": customer.id}
    )
    assert (intent.status, intent.latest_charge) == ("requires_payment_method", None)
    assert intent.client_secret.startswith(intent.id + "_secret_")
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.confirm(intent.id)
    confirmed = client.v1.payment_intents.confirm(
        intent.id, params={"payment_method": "pm_card_visa"}
    )
    assert (confirmed.status, confirmed.amount_received) == ("succeeded", 4200)
    charge = client.v1.charges.retrieve(confirmed.latest_charge)
    assert (charge.payment_intent, charge.amount, charge.customer) == (intent.id, 4200, customer.id)
    # A refund of the intent's charge carries the intent, as Stripe's does.
    refund = client.v1.refunds.create(params={"charge": charge.id})
    assert refund.payment_intent == intent.id

    manual = client.v1.payment_intents.create(
        params={
            "amount": 1000,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "capture_method": "manual",
        }
    )
    assert (manual.status, manual.amount_capturable) == ("requires_capture", 1000)
    assert client.v1.charges.retrieve(manual.latest_charge).captured is False
    done = client.v1.payment_intents.capture(manual.id, params={"amount_to_capture": 800})
    assert (done.status, done.amount_received) == ("succeeded", 800)
    assert client.v1.charges.retrieve(manual.latest_charge).amount_captured == 800


def test_expand_replaces_ids_with_objects(client: stripe.StripeClient) -> None:
    intent = client.v1.payment_intents.create(
        params={"amount": 900, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True}
    )
    charge_id = intent.latest_charge
    refund = client.v1.refunds.create(params={"charge": charge_id, "amount": 100})

    read = client.v1.refunds.retrieve(refund.id, params={"expand": ["charge"]})
    assert isinstance(read.charge, stripe.Charge)
    assert (read.charge.id, read.charge.amount_refunded) == (charge_id, 100)

    deep = client.v1.refunds.retrieve(refund.id, params={"expand": ["charge.payment_intent"]})
    assert isinstance(deep.charge.payment_intent, stripe.PaymentIntent)
    assert deep.charge.payment_intent.id == intent.id

    charge = client.v1.charges.retrieve(charge_id, params={"expand": ["refunds"]})
    assert [r.id for r in charge.refunds.data] == [refund.id]
    assert client.v1.charges.retrieve(charge_id).refunds is None

    expanded = client.v1.payment_intents.retrieve(intent.id, params={"expand": ["latest_charge"]})
    assert isinstance(expanded.latest_charge, stripe.Charge)

    listed = client.v1.refunds.list(params={"charge": charge_id, "expand": ["data.charge"]})
    assert listed.data[0].charge.id == charge_id

    created = client.v1.refunds.create(
        params={"charge": charge_id, "amount": 100, "expand": ["charge"]}
    )
    assert created.charge.amount_refunded == 200


def test_an_unexpandable_path_is_refused_before_anything_changes(
    client: stripe.StripeClient,
) -> None:
    charge = client.v1.charges.create(params={"amount": 900, "currency": "usd"})
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.create(params={"charge": charge.id, "expand": ["charge.nope"]})
    assert "cannot be expanded (charge.nope)" in str(err.value)
    assert client.v1.refunds.list(params={"charge": charge.id}).data == []
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.list(params={"expand": ["charge"]})  # on a list, paths start with data.


def test_search_answers_as_stripe_does(client: stripe.StripeClient) -> None:
    a = client.v1.charges.create(
        params={"amount": 1500, "currency": "usd", "metadata": {"order_id": "42"}}
    )
    b = client.v1.charges.create(
        params={"amount": 500, "currency": "eur", "metadata": {"order_id": "43"}}
    )
    found = client.v1.charges.search(params={"query": "metadata['order_id']:'42'"})
    assert found.object == "search_result"
    assert [c.id for c in found.data] == [a.id]
    assert (found.has_more, found.next_page) == (False, None)
    assert isinstance(found.data[0], stripe.Charge)

    both = client.v1.charges.search(params={"query": "amount>100 AND -currency:'gbp'"})
    assert [c.id for c in both.data] == [b.id, a.id]
    either = client.v1.charges.search(params={"query": 'currency:"eur" OR amount>=1500'})
    assert {c.id for c in either.data} == {a.id, b.id}

    first = client.v1.charges.search(params={"query": "status:'succeeded'", "limit": 1})
    assert (len(first.data), first.has_more) == (1, True)
    second = client.v1.charges.search(
        params={"query": "status:'succeeded'", "limit": 1, "page": first.next_page}
    )
    assert [c.id for c in second.data] == [a.id]
    every = list(
        client.v1.charges.search(
            params={"query": "status:'succeeded'", "limit": 1}
        ).auto_paging_iter()
    )
    assert [c.id for c in every] == [b.id, a.id]

    customer = client.v1.customers.create(params={"email": "sam@example.test", "name": "Sam"})
    assert [c.id for c in client.v1.customers.search(params={"query": "email~'sam@'"}).data] == [
        customer.id
    ]
    intent = client.v1.payment_intents.create(params={"amount": 777, "currency": "usd"})
    assert [
        p.id for p in client.v1.payment_intents.search(params={"query": "amount:777"}).data
    ] == [intent.id]

    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.charges.search(params={"query": "nonsense"})
    assert err.value.param == "query"
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.charges.search(params={"query": "amount>1 AND currency:'usd' OR status:'x'"})


def test_search_is_not_a_charge_id(running: RunningSandbox) -> None:
    answer = http.get(
        f"{running.base_url}/v1/charges/search", params={"query": "amount>0"}, headers=AUTH
    )
    assert answer.status_code == 200
    assert answer.json()["object"] == "search_result"
