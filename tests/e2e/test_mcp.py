"""Acceptance of ``provely mcp`` (#34), driven by the ``mcp`` SDK's own client over stdio and
over streamable HTTP, against the distributed services and Stripe sandboxes: the tools are
listed with honest annotations; a refund is proven to VERIFIED and its receipt verifies; a
stuck refund's answer is PENDING and its text says not to repeat the refund; bad input is a
tool error carrying the API's field errors (not a crash); another workspace's operation is not
found; over HTTP a request without an API key is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.e2e.launcher import DistributedSystem
from tests.e2e.mcp_clients import answer_of, http_server, open_client, text_of
from tests.e2e.sdk_world import World, new_world

pytestmark = pytest.mark.e2e

TOOLS = {
    "list_contracts": True,
    "describe_contract": True,
    "create_operation": False,
    "report_action": False,
    "get_operation": True,
    "wait_for_verdict": True,
    "get_receipt": True,
    "verify_receipt": True,
}  # name: read-only


@pytest.fixture(scope="module")
def worlds(distributed: DistributedSystem) -> dict[str, World]:
    made = {"main": new_world(distributed, "mcp"), "other": new_world(distributed, "mcp-other")}
    stuck = new_world(distributed, "mcp-stuck")
    with stuck.control() as control:
        control.faults(default_outcome="stuck_pending")
    made["stuck"] = stuck
    return made


@pytest.fixture(scope="module")
def http_url(distributed: DistributedSystem, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("mcp") / "mcp-http.log"
    with http_server(distributed.api_url, log) as url:
        yield url


def _refund(world: World, charge: str, op_id: str) -> dict[str, Any]:
    refund = world.stripe_client().v1.refunds.create(
        params={"charge": charge, "amount": 2000}, options={"idempotency_key": op_id}
    )
    return dict(refund.to_dict())


async def _scenario(transport: str, worlds: dict[str, World], http_url: str) -> None:
    main, other, stuck = worlds["main"], worlds["other"], worlds["stuck"]
    async with open_client(
        transport, api_url=main.api_url, api_key=main.api_key, http_url=http_url
    ) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == set(TOOLS)
        for name, read_only in TOOLS.items():
            annotations = listed[name].annotations
            assert annotations is not None
            assert annotations.read_only_hint is read_only, name
            assert annotations.open_world_hint is False, name
            assert "never" in (listed[name].description or "").lower() or read_only, name
        contracts = answer_of(await client.call_tool("list_contracts", {}))
        assert "stripe.refund.succeeded" in str(contracts)
        page = await client.call_tool(
            "describe_contract", {"contract_id": "stripe.refund.succeeded"}
        )
        assert "refund" in text_of(page).lower()

        # A refund, proven to VERIFIED.
        charge = await asyncio.to_thread(main.charge)
        created = answer_of(
            await client.call_tool(
                "create_operation",
                {
                    "contract": "stripe.refund.succeeded",
                    "input": {"charge": charge, "amount": 2000, "currency": "usd"},
                    "idempotency_key": f"mcp-{transport}-{charge}",
                },
            )
        )
        op_id = created["operation_id"]
        refund = await asyncio.to_thread(_refund, main, charge, op_id)
        reported = answer_of(
            await client.call_tool(
                "report_action",
                {"operation_id": op_id, "phase": "result", "body": refund, "http_status": 200},
            )
        )
        assert "Do not repeat the refund" in reported["guidance"]
        done: dict[str, Any] = {}
        for _ in range(4):
            done = answer_of(
                await client.call_tool(
                    "wait_for_verdict", {"operation_id": op_id, "timeout_seconds": 30}
                )
            )
            if done["final"]:
                break
        assert done["verdict"] == "VERIFIED", done
        receipt = answer_of(await client.call_tool("get_receipt", {"operation_id": op_id}))
        checked = answer_of(await client.call_tool("verify_receipt", {"receipt": receipt}))
        assert checked["result"] == "valid", checked
        receipt["receipt"]["verdict"] = "FAILED"
        checked = answer_of(await client.call_tool("verify_receipt", {"receipt": receipt}))
        assert checked["result"] == "tampered", checked
        assert len(await asyncio.to_thread(main.refunds_of, charge)) == 1

        # Bad input: the API's own validation error, as a tool error; the server lives on.
        bad = await client.call_tool(
            "create_operation",
            {
                "contract": "stripe.refund.succeeded",
                "input": {"charge": charge, "amount": "a lot", "currency": "usd"},
                "idempotency_key": "bad-input",
            },
        )
        assert bad.is_error
        assert "422" in text_of(bad)
        assert "input.amount" in text_of(bad)
        too_long = await client.call_tool(
            "wait_for_verdict", {"operation_id": op_id, "timeout_seconds": 3600}
        )
        assert too_long.is_error
        assert "timeout_seconds" in text_of(too_long)
        assert answer_of(await client.call_tool("get_operation", {"operation_id": op_id}))

    # Another workspace does not see it.
    async with open_client(
        transport, api_url=other.api_url, api_key=other.api_key, http_url=http_url
    ) as client:
        unseen = await client.call_tool("get_operation", {"operation_id": op_id})
        assert unseen.is_error
        assert "404" in text_of(unseen)

    # A stuck refund: PENDING, and the answer says not to refund again.
    async with open_client(
        transport, api_url=stuck.api_url, api_key=stuck.api_key, http_url=http_url
    ) as client:
        charge = await asyncio.to_thread(stuck.charge)
        created = answer_of(
            await client.call_tool(
                "create_operation",
                {
                    "contract": "stripe.refund.succeeded",
                    "input": {"charge": charge, "amount": 2000, "currency": "usd"},
                    "idempotency_key": f"stuck-{transport}-{charge}",
                },
            )
        )
        refund = await asyncio.to_thread(_refund, stuck, charge, created["operation_id"])
        await client.call_tool(
            "report_action",
            {"operation_id": created["operation_id"], "phase": "result", "body": refund},
        )
        pending = await client.call_tool(
            "wait_for_verdict", {"operation_id": created["operation_id"], "timeout_seconds": 6}
        )
        text = text_of(pending)
        assert answer_of(pending)["verdict"] == "PENDING"
        assert "Do not repeat the refund" in text
        assert f"Report operation {created['operation_id']} and stop" in text
        assert len(await asyncio.to_thread(stuck.refunds_of, charge)) == 1


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_provely_mcp_proves_a_refund_and_keeps_the_rules(
    transport: str, worlds: dict[str, World], http_url: str
) -> None:
    asyncio.run(_scenario(transport, worlds, http_url))


def test_over_http_a_request_without_an_api_key_is_refused(http_url: str) -> None:
    response = httpx.post(http_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"


def test_over_http_a_foreign_host_header_is_refused(
    http_url: str, worlds: dict[str, World]
) -> None:
    response = httpx.post(
        http_url,
        headers={"Authorization": f"Bearer {worlds['main'].api_key}", "Host": "evil.example"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert response.status_code in (400, 403, 421)
