"""The MCP server's tool surface as docs/agents.md states it: the same tools, annotations as
the table says, the wait bounded at 60 s in the schema the client sees, and the rules in the
description of every tool that records anything."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from services.mcp_server.server import MAX_WAIT_SECONDS, build_server

DOC = Path(__file__).resolve().parents[3] / "docs" / "agents.md"


def _documented() -> dict[str, str]:
    section = DOC.read_text("utf-8").split("## The MCP server", 1)[1]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_the_tools_are_the_documented_ones_with_their_annotations() -> None:
    tools = asyncio.run(build_server(api_url="http://127.0.0.1:9", api_key="k").list_tools())
    documented = _documented()
    assert {t.name for t in tools} == set(documented)
    for tool in tools:
        annotations = tool.annotations
        assert annotations is not None
        assert annotations.open_world_hint is False, tool.name  # never the provider
        claims = documented[tool.name]
        assert annotations.read_only_hint is (claims == "read-only"), tool.name
        if annotations.read_only_hint:
            assert annotations.idempotent_hint is True, tool.name
        else:
            assert annotations.destructive_hint is False, tool.name
            assert annotations.idempotent_hint is claims.startswith("idempotent"), tool.name
            assert "NEVER call the provider again" in (tool.description or ""), tool.name


def test_the_wait_is_bounded_in_the_schema_the_client_sees() -> None:
    tools = asyncio.run(build_server(api_url="http://127.0.0.1:9", api_key="k").list_tools())
    (wait,) = [t for t in tools if t.name == "wait_for_verdict"]
    timeout = wait.input_schema["properties"]["timeout_seconds"]
    assert timeout["maximum"] == MAX_WAIT_SECONDS == 60
    assert "at most 60" in (wait.description or "")


def test_the_prompt_walks_the_protocol_and_the_contract_pages_are_resources() -> None:
    server = build_server(api_url="http://127.0.0.1:9", api_key="k")

    async def read() -> tuple[list[str], str, list[str]]:
        prompts = [p.name for p in await server.list_prompts()]
        got = await server.get_prompt(
            "prove_stripe_refund", {"charge": "ch_1", "amount": "2000", "currency": "usd"}
        )
        text = "\n".join(m.content.text for m in got.messages)  # type: ignore[union-attr]
        templates = [t.uri_template for t in await server.list_resource_templates()]
        return prompts, text, templates

    prompts, text, templates = asyncio.run(read())
    assert prompts == ["prove_stripe_refund"]
    steps = ["create_operation", "Idempotency-Key", "report_action", "wait_for_verdict"]
    assert [text.index(step) for step in steps] == sorted(text.index(step) for step in steps)
    assert "do NOT refund again" in text
    assert '"charge": "ch_1", "amount": 2000' in text
    assert templates == ["provely://contracts/{contract_id}"]
