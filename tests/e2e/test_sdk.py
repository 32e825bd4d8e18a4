"""Acceptance of the Python SDK (#34) on the distributed services and Stripe sandboxes:

- the Stripe helper proves a refund to VERIFIED, sync and async alike, with one refund at the
  sandbox each, and the receipts verify offline (a tampered one does not);
- given a Stripe timeout after the refund went through, the helper reports a timeout (not a
  failure) and the operation ends VERIFIED with exactly one refund;
- ``wait()`` on a stuck refund answers PENDING, and during a provider outage UNVERIFIABLE
  ``evidence_unavailable``, with guidance not to repeat the refund — and no refund is made;
- bad input is the API's own validation error; another workspace's operation is not found;
- the SDK's models match the served OpenAPI document.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest
import stripe
from provely_sdk import ApiError, AsyncProvely, NotFound, Provely
from provely_sdk._models import (
    ActionOut,
    ConditionOut,
    ContractDetail,
    ContractRef,
    ContractSummary,
    CorrelationOut,
    EvidenceOut,
    IgnoredEventOut,
    OperationOut,
    RetryOut,
    ReviewOut,
    SubjectOut,
)
from provely_sdk.stripe_refunds import refund_with_proof, refund_with_proof_async

from tests.e2e.launcher import DistributedSystem
from tests.e2e.sdk_world import SilentProxy, World, new_world

pytestmark = [
    pytest.mark.e2e,
    # stripe's async HTTPXClient posts bytes with data=, which httpx deprecates (not ours).
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]

REPEAT_FORBIDDEN = "Do not repeat the refund"


@pytest.fixture(scope="module")
def world(distributed: DistributedSystem) -> World:
    return new_world(distributed, "sdk")


def test_the_helper_proves_a_refund_sync_and_async_alike(world: World) -> None:
    charges = [world.charge(), world.charge()]
    with Provely(world.api_url, world.api_key) as provely:
        op = refund_with_proof(
            provely, world.stripe_client(), charge=charges[0], amount=2000, currency="usd"
        )
        assert op.action.phase == "result"
        sync_op = provely.wait(op.id, timeout=90)
        sync_receipt = provely.get_receipt(op.id) if sync_op.final else None

    async def run_async() -> tuple[Any, Any]:
        async_http = stripe.HTTPXClient(timeout=30)
        async with AsyncProvely(world.api_url, world.api_key) as provely:
            try:
                op = await refund_with_proof_async(
                    provely,
                    world.stripe_client(async_http=async_http),
                    charge=charges[1],
                    amount=2000,
                    currency="usd",
                )
            finally:
                await async_http.close_async()
            done = await provely.wait(op.id, timeout=90)
            receipt = await provely.get_receipt(done.id) if done.final else None
            check = await provely.verify_receipt(receipt) if receipt else None
            return done, check

    async_op, async_check = asyncio.run(run_async())
    shown = ("verdict", "reason", "final", "state", "safe_to_claim_complete", "completion_level")
    assert [getattr(sync_op, f) for f in shown] == [getattr(async_op, f) for f in shown]
    assert sync_op.verdict == "VERIFIED", sync_op.guidance
    assert sync_op.safe_to_claim_complete
    for charge in charges:
        assert len(world.refunds_of(charge)) == 1
    assert async_check is not None
    assert async_check.valid, async_check.reason
    with Provely(world.api_url, world.api_key) as provely:
        assert sync_receipt is not None
        check = provely.verify_receipt(sync_receipt)
        assert check.valid, check.reason
        tampered = copy.deepcopy(sync_receipt)
        tampered["receipt"]["verdict"] = "FAILED"
        assert provely.verify_receipt(tampered).status == "tampered"


def test_a_stripe_timeout_is_reported_as_one_and_the_refund_is_proven(world: World) -> None:
    charge = world.charge()
    proxy = SilentProxy(world.sandbox.base_url)
    with proxy.running(), Provely(world.api_url, world.api_key) as provely:
        client = world.stripe_client(base_url=proxy.url, timeout=1.0)
        op = refund_with_proof(provely, client, charge=charge, amount=2000, currency="usd")
    assert proxy.forwarded == [("POST", "/v1/refunds")]  # Stripe acted; its answer was lost
    assert op.action.phase == "error"
    assert op.action.http_status is None
    assert op.verdict != "FAILED"
    assert REPEAT_FORBIDDEN in op.guidance
    with Provely(world.api_url, world.api_key) as provely:
        done = provely.wait(op.id, timeout=90)
    assert done.verdict == "VERIFIED", done.guidance
    assert len(world.refunds_of(charge)) == 1


def test_wait_on_a_stuck_refund_answers_pending_and_makes_no_provider_call(
    distributed: DistributedSystem,
) -> None:
    stuck = new_world(distributed, "sdk-stuck")
    with stuck.control() as control:
        control.faults(default_outcome="stuck_pending")
    charge = stuck.charge()
    with Provely(stuck.api_url, stuck.api_key) as provely:
        op = refund_with_proof(
            provely, stuck.stripe_client(), charge=charge, amount=2000, currency="usd"
        )
        before = stuck.refunds_of(charge)
        waited = provely.wait(op.id, timeout=8)
    assert waited.verdict == "PENDING"
    assert not waited.final
    assert REPEAT_FORBIDDEN in waited.guidance
    assert f"Report operation {op.id} and stop" in waited.guidance
    assert waited.retry.action == "never"
    assert len(before) == 1
    assert [r["id"] for r in stuck.refunds_of(charge)] == [before[0]["id"]]  # none made


def test_wait_during_an_outage_answers_unverifiable_evidence_unavailable(
    distributed: DistributedSystem,
) -> None:
    down = new_world(distributed, "sdk-outage")
    charge = down.charge()
    with Provely(down.api_url, down.api_key) as provely:
        op = provely.create_operation(
            contract="stripe.refund.succeeded",
            input={"charge": charge, "amount": 2000, "currency": "usd"},
        )
        refund = down.stripe_client().v1.refunds.create(
            params={"charge": charge, "amount": 2000}, options={"idempotency_key": op.id}
        )
        with down.control() as control:
            control.outage(enabled=True)
        provely.report_result(op.id, result=refund.to_dict())
        waited = provely.wait(op.id, timeout=10)
        with down.control() as control:
            control.outage(enabled=False)
    assert (waited.verdict, waited.reason) == ("UNVERIFIABLE", "evidence_unavailable")
    assert not waited.final
    assert waited.retry.action == "never"
    assert REPEAT_FORBIDDEN in waited.guidance
    assert "verify again" in waited.guidance
    assert len(down.refunds_of(charge)) == 1


def test_bad_input_is_the_apis_validation_error_and_other_workspaces_are_invisible(
    world: World, distributed: DistributedSystem
) -> None:
    other = new_world(distributed, "sdk-other")
    with Provely(world.api_url, world.api_key) as provely:
        with pytest.raises(ApiError) as caught:
            provely.create_operation(
                contract="stripe.refund.succeeded",
                input={"charge": "ch_1", "amount": "a lot", "currency": "usd"},
            )
        mine = provely.create_operation(
            contract="stripe.refund.succeeded",
            input={"charge": world.charge(), "amount": 100, "currency": "usd"},
        )
    raw = httpx.post(
        f"{world.api_url}/v1/operations",
        headers={"Authorization": f"Bearer {world.api_key}"},
        json={
            "contract": "stripe.refund.succeeded",
            "input": {"charge": "ch_1", "amount": "a lot", "currency": "usd"},
        },
    )
    assert caught.value.status == raw.status_code == 422
    assert [e.model_dump() for e in caught.value.errors] == raw.json()["errors"]
    with Provely(other.api_url, other.api_key) as provely, pytest.raises(NotFound):
        provely.get_operation(mine.id)


SCHEMAS = {
    "OperationOut": OperationOut,
    "ContractRef": ContractRef,
    "RetryOut": RetryOut,
    "SubjectOut": SubjectOut,
    "CorrelationOut": CorrelationOut,
    "ConditionOut": ConditionOut,
    "EvidenceOut": EvidenceOut,
    "ActionOut": ActionOut,
    "ReviewOut": ReviewOut,
    "IgnoredEventOut": IgnoredEventOut,
    "ContractSummary": ContractSummary,
    "ContractDetail": ContractDetail,
}


def test_the_sdk_models_match_the_served_openapi_document(world: World) -> None:
    served = httpx.get(f"{world.api_url}/openapi.json").json()["components"]["schemas"]
    for name, model in SCHEMAS.items():
        schema = served[name]
        fields = {(f.alias or n): f for n, f in model.model_fields.items()}
        assert set(fields) == set(schema["properties"]), name
        required = {n for n, f in fields.items() if f.is_required()}
        assert required == set(schema.get("required", [])), name
