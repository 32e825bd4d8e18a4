"""``provely serve ingress --mcp``: the MCP server mounted in the ingress at ``/mcp`` (the rest
of the API unchanged), with its API-key and host checks, on the distributed system's database
and broker. An operation created through the mounted tools is the API's own."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from services.cli.spawn import free_port, provely_argv
from tests.e2e.launcher import DistributedSystem
from tests.e2e.mcp_clients import answer_of, open_client, text_of
from tests.e2e.sdk_world import World, new_world

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mounted(distributed: DistributedSystem) -> Iterator[str]:
    """A second ingress of the same system, with ``--mcp``; yields its base URL."""
    port = free_port()
    log = distributed.workdir / "logs" / f"ingress-mcp-{port}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            provely_argv("serve", "ingress", "--host", "127.0.0.1", "--port", str(port), "--mcp"),
            env=distributed.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def world(distributed: DistributedSystem) -> World:
    return new_world(distributed, "mcp-mounted")


async def _create_and_read(url: str, world: World) -> tuple[dict[str, object], str]:
    async with open_client(
        "http", api_url=url, api_key=world.api_key, http_url=f"{url}/mcp"
    ) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "wait_for_verdict" in names
        charge = await asyncio.to_thread(world.charge)
        created = answer_of(
            await client.call_tool(
                "create_operation",
                {
                    "contract": "stripe.refund.succeeded",
                    "input": {"charge": charge, "amount": 2000, "currency": "usd"},
                    "idempotency_key": f"mounted-{charge}",
                },
            )
        )
        missing = await client.call_tool("get_operation", {"operation_id": "op_nothing"})
        assert missing.is_error
        return created, text_of(missing)


def test_the_ingress_serves_the_mcp_server_at_mcp(mounted: str, world: World) -> None:
    created, missing = asyncio.run(_create_and_read(mounted, world))
    assert "404" in missing
    op_id = str(created["operation_id"])
    # The API of the same process (and of the system's own ingress) knows that operation.
    for base in (mounted, world.api_url):
        seen = httpx.get(
            f"{base}/v1/operations/{op_id}", headers={"Authorization": f"Bearer {world.api_key}"}
        )
        assert seen.status_code == 200
        assert seen.json()["state"] == "CREATED"
    assert httpx.post(f"{mounted}/mcp", json={}).status_code == 401
    foreign = httpx.post(
        f"{mounted}/mcp",
        headers={"Authorization": f"Bearer {world.api_key}", "Host": "evil.example"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert foreign.status_code in (400, 403, 421)
