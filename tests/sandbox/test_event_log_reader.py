"""The ``event_log`` verifier's read of the sandbox's ``GET /v1/events``, as 1.3.0 asks for it.

stripe.refund.succeeded 1.3.0's ``refund_event_log`` reads ``/v1/events`` with
``created[gte]`` = the second the operation began (rounded down: an event made in that second
is listed even when it came before the operation, and left to the event channels' reductions),
``types[]`` = its refund event types, 100 a page, every page (``starting_after`` while
``has_more``), newest first, as Stripe lists its events.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import stripe

from services.observer.http_verifier import HttpTarget, read_http_list
from services.observer.jobs import declared_readback, event_log_job
from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox
from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.types import ObservationStatus, OperationFacts
from shared.trust.registry import get_registry
from tests.sandbox.conftest import http

AUTH = {"Authorization": "Bearer sk_test_provely_sandbox_tests"}


def _events(running: RunningSandbox, **params: str) -> list[dict[str, object]]:
    response = http.get(f"{running.base_url}/v1/events", params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def test_the_event_log_job_reads_every_page_of_the_operations_refund_events(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    contract: Contract = get_registry().get("stripe.refund.succeeded", "1.3.0")
    channel = contract.channel("refund_event_log")
    assert channel is not None
    assert channel.event_log is not None
    charge = client.v1.charges.create(params={"amount": 50_000, "currency": "usd"}).id
    client.v1.refunds.create(params={"charge": charge, "amount": 5})  # before: not listed
    control.advance(5)
    began = client.v1.charges.retrieve(charge).created + 5
    for amount in range(10, 17):
        client.v1.refunds.create(params={"charge": charge, "amount": amount})
    control.advance(60)  # every refund settles: a refund.updated each
    facts = OperationFacts(
        id="op_x",
        created_at=datetime.fromtimestamp(began, UTC).replace(microsecond=900_000),
        input={"charge": charge, "amount": 10, "currency": "usd"},
    )
    job = event_log_job(
        channel,
        contract,
        build_context(contract, facts),
        readback=declared_readback(channel, contract),
    )
    assert job.refused is None  # the skill declares /v1/events and its parameters
    assert job.query is not None
    assert f"created%5Bgte%5D={began}&" in job.query  # the operation's second, rounded down
    wanted = {"refund.created", "refund.updated", "refund.failed"}
    expected = [
        e["id"]
        for e in _events(running, limit="100", **{"created[gte]": str(began)})
        if e["type"] in wanted
    ]
    assert len(expected) >= 14  # seven refund.created, seven refund.updated
    target = HttpTarget(base_url=running.base_url, headers=AUTH, timeout_s=10)
    with httpx.Client() as session:
        reading = read_http_list(
            session,
            channel=job.channel,
            target=target,
            path=job.path or "",
            query=job.query.replace("limit=100", "limit=3"),  # several pages
            max_pages=job.max_pages or 1,
        )
    assert reading.status is ObservationStatus.OK, reading
    listed = reading.value["data"]
    assert [e["id"] for e in listed] == expected  # newest first, every page, once each
    assert {e["type"] for e in listed} <= wanted
    assert all(e["created"] >= began for e in listed)


def test_the_event_list_filters_by_types_and_created_like_stripe(
    running: RunningSandbox, client: stripe.StripeClient, control: SandboxControl
) -> None:
    charge = client.v1.charges.create(params={"amount": 5000, "currency": "usd"}).id
    control.advance(10)
    bound = client.v1.charges.retrieve(charge).created + 10
    refund = client.v1.refunds.create(params={"charge": charge, "amount": 100}).id
    both = _events(
        running,
        limit="100",
        **{"created[gte]": str(bound), "types[]": "refund.created"},
    )
    assert [e["type"] for e in both] == ["refund.created"]
    assert both[0]["data"]["object"]["id"] == refund  # type: ignore[index]
    # created[gte] keeps the bound's own second; gt leaves it out when nothing came later.
    assert _events(running, **{"created[gt]": str(bound + 3600)}) == []
    assert any(e["type"] == "charge.succeeded" for e in _events(running, limit="100"))
