"""The tools, resources and prompt of ``provely mcp`` (:func:`build_server`).

Every tool calls Provely's HTTP API through ``provely_sdk.AsyncProvely`` with the caller's
workspace API key: over streamable HTTP, the request's ``Authorization: Bearer`` key (the
server holds none of its own); over stdio, the key it was started with. The API validates
every input exactly as it does for HTTP clients, and its refusals come back as tool errors.
Annotations are honest: the reads are read-only and idempotent; ``create_operation`` is
idempotent by its required ``idempotency_key``; ``report_action`` is neither. No tool talks
to a provider (``openWorldHint`` is false everywhere).
"""

# No `from __future__ import annotations`: the MCP SDK reads these signatures at run time
# (the Context parameter and the argument schemas).

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from provely_sdk import AsyncProvely, KeyRing, ProvelyError, verify_receipt
from pydantic import Field

from services.mcp_server.answers import operation_answer, tool_error
from services.mcp_server.texts import DESCRIPTIONS, INSTRUCTIONS, prove_refund_prompt

__all__ = ["MAX_WAIT_SECONDS", "build_server"]

MAX_WAIT_SECONDS = 60.0

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
CREATE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
REPORT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

OperationId = Annotated[str, Field(min_length=1, max_length=64, description="op_…")]


def _bearer(ctx: Context) -> str | None:
    try:
        request = ctx.request_context.request
    except ValueError:
        return None
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    value = str(headers.get("authorization", ""))
    scheme, _, key = value.partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


# pay down (C901): every tool a closure; one function each
def build_server(*, api_url: str, api_key: str | None) -> MCPServer:  # noqa: C901
    """The MCP server over the API at ``api_url``; ``api_key`` for stdio (None over HTTP,
    where each request brings its own)."""
    keys: list[KeyRing] = []

    def key_of(ctx: Context) -> str:
        found = _bearer(ctx) or api_key
        if not found:
            raise ToolError("401 unauthenticated: send the workspace API key as a Bearer token")
        return found

    @asynccontextmanager
    async def client(ctx: Context) -> AsyncIterator[AsyncProvely]:
        async with AsyncProvely(api_url, key_of(ctx)) as provely:
            try:
                yield provely
            except ProvelyError as exc:
                raise tool_error(exc) from exc

    server: MCPServer = MCPServer("provely", instructions=INSTRUCTIONS, version="0.1.0")

    @server.tool(description=DESCRIPTIONS["list_contracts"], annotations=READ)
    async def list_contracts(ctx: Context) -> list[dict[str, Any]]:
        async with client(ctx) as provely:
            found = await provely.list_contracts()
        return [c.model_dump(include={"id", "version", "title", "completion_level"}) for c in found]

    @server.tool(description=DESCRIPTIONS["describe_contract"], annotations=READ)
    async def describe_contract(
        contract_id: Annotated[str, Field(min_length=1, max_length=200)],
        ctx: Context,
        version: str | None = None,
    ) -> str:
        async with client(ctx) as provely:
            return (await provely.get_contract(contract_id, version=version)).page

    @server.tool(description=DESCRIPTIONS["create_operation"], annotations=CREATE)
    async def create_operation(
        contract: str,
        input: dict[str, Any],
        idempotency_key: Annotated[str, Field(min_length=1, max_length=255)],
        ctx: Context,
        contract_version: str | None = None,
    ) -> dict[str, Any]:
        async with client(ctx) as provely:
            op = await provely.create_operation(
                contract=contract,
                input=input,
                contract_version=contract_version,
                idempotency_key=idempotency_key,
            )
        return operation_answer(op)

    @server.tool(description=DESCRIPTIONS["report_action"], annotations=REPORT)
    async def report_action(
        operation_id: OperationId,
        phase: Literal["result", "error", "timeout"],
        ctx: Context,
        body: dict[str, Any] | None = None,
        http_status: int | None = None,
    ) -> dict[str, Any]:
        async with client(ctx) as provely:
            if phase == "result":
                op = await provely.report_result(
                    operation_id, result=body or {}, http_status=http_status or 200
                )
            elif phase == "error":
                op = await provely.report_error(
                    operation_id, error=body or {}, http_status=http_status
                )
            else:
                op = await provely.report_timeout(
                    operation_id, message=str((body or {}).get("message", "no answer"))
                )
        return operation_answer(op)

    @server.tool(description=DESCRIPTIONS["get_operation"], annotations=READ)
    async def get_operation(operation_id: OperationId, ctx: Context) -> dict[str, Any]:
        async with client(ctx) as provely:
            return operation_answer(await provely.get_operation(operation_id))

    @server.tool(description=DESCRIPTIONS["wait_for_verdict"], annotations=READ)
    async def wait_for_verdict(
        operation_id: OperationId,
        ctx: Context,
        timeout_seconds: Annotated[float, Field(ge=0, le=MAX_WAIT_SECONDS)] = 30.0,
    ) -> dict[str, Any]:
        async with client(ctx) as provely:
            return operation_answer(await provely.wait(operation_id, timeout=timeout_seconds))

    @server.tool(description=DESCRIPTIONS["get_receipt"], annotations=READ)
    async def get_receipt(operation_id: OperationId, ctx: Context) -> dict[str, Any]:
        async with client(ctx) as provely:
            return await provely.get_receipt(operation_id)

    @server.tool(
        name="verify_receipt", description=DESCRIPTIONS["verify_receipt"], annotations=READ
    )
    async def verify_receipt_tool(receipt: dict[str, Any], ctx: Context) -> dict[str, Any]:
        async with client(ctx) as provely:
            if not keys:
                keys.append(await provely.receipt_keys())
            check = verify_receipt(receipt, keys[0])
            if check.unknown_key:
                keys[0] = await provely.receipt_keys(refresh=True)
                check = verify_receipt(receipt, keys[0])
        return {"result": check.status, "valid": check.valid, "reason": check.reason}

    @server.resource(
        "provely://contracts/{contract_id}",
        name="contract_page",
        description="The rendered page of a completion contract (Markdown).",
        mime_type="text/markdown",
    )
    async def contract_page(contract_id: str, ctx: Context) -> str:
        try:
            async with client(ctx) as provely:
                return (await provely.get_contract(contract_id)).page
        except ToolError as exc:
            raise ResourceError(str(exc)) from exc

    @server.prompt(name="prove_stripe_refund", description="Prove a Stripe refund, step by step.")
    def prove_stripe_refund(charge: str, amount: int, currency: str = "usd") -> str:
        return prove_refund_prompt(charge=charge, amount=amount, currency=currency)

    return server
