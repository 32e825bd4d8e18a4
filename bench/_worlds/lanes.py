"""Lanes: a sandbox process and a workspace each, whose webhook endpoint is the relay; a lane runs
one world at a time, so its sandbox-wide faults are never shared."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from bench._worlds.harness import HarnessError
from services.cli.demo.scenarios.system import Sandbox, System
from services.cli.demo.scenarios.workspace import Workspace

__all__ = ["Lane", "open_lane"]


@dataclass
class Lane:
    number: int
    workspace: Workspace


async def open_lane(system: System, relay_url: str, number: int) -> Lane:
    sandbox: Sandbox = await asyncio.to_thread(system.new_sandbox)
    workspace_id, api_key = await asyncio.to_thread(system.create_workspace, f"worlds-{number}")
    async with httpx.AsyncClient(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=30.0,
    ) as stripe:
        response = await stripe.post(
            "/v1/webhook_endpoints",
            data={"url": f"{relay_url}/{workspace_id}", "enabled_events[]": "*"},
        )
    if response.status_code != 200:
        raise HarnessError(f"cannot register the webhook endpoint: {response.text[:300]}")
    secret = str(response.json()["secret"])
    await asyncio.to_thread(
        lambda: system.connect_stripe(
            workspace_id, webhook_secret=secret, api_key=sandbox.api_key, base_url=sandbox.base_url
        )
    )
    return Lane(number, Workspace(workspace_id, api_key, sandbox, secret))
