"""``GET /v1/refunds`` with Stripe's filters and paging, and the http verifier reading it whole.

The listing that stripe.refund.* 1.1.0 reads (``charge_refunds``) is
``GET /v1/refunds?charge=…&created[gte]=…&limit=…`` followed with ``starting_after`` while
``has_more``: newest first, only the charge's refunds, only those created at or after the bound.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import stripe

from services.observer.http_verifier import HttpTarget, read_http_list
from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox
from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.templates import fill_query
from shared.core.types import ObservationStatus, OperationFacts
from shared.trust.registry import get_registry
from tests.sandbox.conftest import http

AUTH = {"Authorization": "Bearer sk_test_provely_sandbox_tests"}


def _list(running: RunningSandbox, **params: Any) -> dict[str, Any]:
    response = http.get(f"{running.base_url}/v1/refunds", params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _refunds(client: stripe.StripeClient, charge: str, n: int) -> list[str]:
    return [
        client.v1.refunds.create(params={"charge": charge, "amount": 10 + i}).id for i in range(n)
    ]


def test_the_listing_filters_by_charge_and_created_and_pages_newest_first(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 5000, "currency": "usd"}).id
    other = client.v1.charges.create(params={"amount": 5000, "currency": "usd"}).id
    old = _refunds(client, charge, 2)
    control.advance(30)
    bound = client.v1.charges.retrieve(charge).created + 30  # the sandbox clock, moved on
    new = _refunds(client, charge, 5)
    _refunds(client, other, 2)

    filters = {"charge": charge, "created[gte]": str(bound), "limit": "2"}
    first = _list(running, **filters)
    assert first["object"] == "list"
    assert first["has_more"] is True
    assert [r["id"] for r in first["data"]] == new[::-1][:2]
    second = _list(running, **filters, starting_after=first["data"][-1]["id"])
    assert [r["id"] for r in second["data"]] == new[::-1][2:4]
    assert second["has_more"] is True
    third = _list(running, **filters, starting_after=second["data"][-1]["id"])
    assert [r["id"] for r in third["data"]] == new[::-1][4:]
    assert third["has_more"] is False
    assert all(r["created"] >= bound and r["charge"] == charge for r in first["data"])

    # Without the bound every refund of the charge is listed; the other charge's never.
    everything = _list(running, charge=charge, limit="100")
    assert [r["id"] for r in everything["data"]] == (old + new)[::-1]
    assert everything["has_more"] is False
    # gt leaves out the bound's second itself, gte keeps it.
    assert _list(running, charge=charge, **{"created[gt]": str(bound)})["data"] == []
    assert len(_list(running, charge=charge, **{"created[lte]": str(bound - 1)})["data"]) == 2

    # The official library pages the same listing with the same filters.
    paged = client.v1.refunds.list(
        params={"charge": charge, "created": {"gte": bound}, "limit": 2}
    ).auto_paging_iter()
    assert [r.id for r in paged] == new[::-1]


def test_the_listing_refuses_what_stripe_refuses(running: RunningSandbox) -> None:
    for params, param in [
        ({"limit": "101"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"created[gte]": "soon"}, "created[gte]"),
        ({"created[after]": "1"}, "created[after]"),
        ({"chargee": "ch_1"}, "chargee"),
    ]:
        response = http.get(f"{running.base_url}/v1/refunds", params=params, headers=AUTH)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["error"]["param"] == param
    response = http.get(
        f"{running.base_url}/v1/refunds", params={"starting_after": "re_nothing"}, headers=AUTH
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "resource_missing"


def test_the_verifier_reads_the_1_1_0_listing_whole_from_the_sandbox(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    contract: Contract = get_registry().get("stripe.refund.succeeded", "1.1.0")
    channel = contract.channel("charge_refunds")
    assert channel is not None
    assert channel.http is not None
    assert channel.http.paginate is not None
    charge = client.v1.charges.create(params={"amount": 50_000, "currency": "usd"}).id
    _refunds(client, charge, 1)  # before the operation: not listed
    control.advance(5)
    began = client.v1.charges.retrieve(charge).created + 5
    since = _refunds(client, charge, 7)
    facts = OperationFacts(
        id="op_x",
        created_at=datetime.fromtimestamp(began, UTC).replace(microsecond=900_000),
        input={"charge": charge, "amount": 10, "currency": "usd"},
    )
    query = fill_query(channel.http.query, build_context(contract, facts))
    assert query is not None
    # limit=3 so seven refunds take three pages (the contract asks for 100 per page).
    query = query.replace("limit=100", "limit=3")
    target = HttpTarget(base_url=running.base_url, headers=AUTH, timeout_s=10)
    with httpx.Client() as session:
        reading = read_http_list(
            session,
            channel="charge_refunds",
            target=target,
            path=channel.http.path,
            query=query,
            max_pages=channel.http.paginate.max_pages,
        )
        assert reading.status is ObservationStatus.OK, reading
        assert reading.value["count"] == 7
        assert [r["id"] for r in reading.value["data"]] == since[::-1]
        assert reading.value["has_more"] is False
        too_few = read_http_list(
            session,
            channel="charge_refunds",
            target=target,
            path=channel.http.path,
            query=query,
            max_pages=2,
        )
    assert (too_few.status, too_few.error) == (ObservationStatus.ERROR, "too_many_pages")
