"""Answers of the MCP tools: an operation as fields plus its guidance in words, and an API
error as a tool error carrying the API's own problem."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from provely_sdk import ApiError, OperationOut, ProvelyError

__all__ = ["operation_answer", "tool_error"]


def operation_answer(op: OperationOut) -> dict[str, Any]:
    """What an LLM needs to act on: the guidance first, then the fields it derives from."""
    return {
        "guidance": op.guidance,
        "operation_id": op.id,
        "contract": op.contract.id,
        "contract_version": op.contract.version,
        "state": op.state,
        "verdict": op.verdict,
        "reason": op.reason,
        "final": op.final,
        "completion_level": op.completion_level,
        "claim": op.claim,
        "safe_to_claim_complete": op.safe_to_claim_complete,
        "retry": {
            "action": op.retry.action,
            "verification": op.retry.verification,
            "decided_by": op.retry.decided_by,
        },
        "may_repeat_action": op.may_repeat_action,
        "action_reported": op.action.phase,
    }


def tool_error(exc: ProvelyError) -> ToolError:
    """The API's refusal as a tool error: its status, kind, detail and invalid fields."""
    if isinstance(exc, ApiError):
        fields = "; ".join(f"{e.field}: {e.message}" for e in exc.errors)
        text = f"{exc.status} {exc.kind}: {exc.detail or exc.title}"
        return ToolError(text + (f" (invalid fields: {fields})" if fields else ""))
    return ToolError(f"Provely cannot be reached: {exc}")
