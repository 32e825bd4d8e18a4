"""A workspace as its operator sets it up for a scenario: created, its webhook endpoint
registered at the sandbox, its Stripe connection stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial

import httpx

from services.cli.demo.scenarios.system import Sandbox, ScenarioFailed, System

__all__ = ["Workspace", "open_workspace"]


@dataclass
class Workspace:
    id: str
    api_key: str
    sandbox: Sandbox
    webhook_secret: str = ""  # the sandbox endpoint's whsec_ secret (to sign events in tests)


async def open_workspace(system: System, sandbox: Sandbox, name: str) -> Workspace:
    workspace_id, api_key = await asyncio.to_thread(system.create_workspace, name)
    async with httpx.AsyncClient(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=30.0,
    ) as stripe:
        response = await stripe.post(
            "/v1/webhook_endpoints",
            data={
                "url": f"{system.api_url}/v1/events/stripe/{workspace_id}",
                "enabled_events[]": "*",
            },
        )
    if response.status_code != 200:
        raise ScenarioFailed(f"cannot register the webhook endpoint: {response.text[:300]}")
    secret = str(response.json()["secret"])
    await asyncio.to_thread(
        partial(
            system.connect_stripe,
            workspace_id,
            webhook_secret=secret,
            api_key=sandbox.api_key,
            base_url=sandbox.base_url,
        )
    )
    return Workspace(workspace_id, api_key, sandbox, secret)
