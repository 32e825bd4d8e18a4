"""Facts the definition pages read from the code rather than restate: the retry table and the
operation states."""

from __future__ import annotations

from typing import Any

from shared.core.retry import RETRY_TABLE
from shared.core.types import OperationState, Verdict

__all__ = ["retry_rows", "term_context"]

_ACTION = {"never": "never", "allowed_as_new_operation": "as a new operation"}
_DECIDER = {"runtime": "the runtime", "person": "a person", "agent": "the agent"}


def retry_rows() -> list[tuple[str, ...]]:
    """The frozen retry table, one row per rule, first match first: verdict, reason, state,
    may the action be retried, may the verification, who decides."""
    return [
        (
            str(verdict) if verdict is not None else "any",
            reason or "any",
            str(state) if state is not None else "any",
            _ACTION.get(guidance.action, guidance.action),
            "yes" if guidance.verification == "yes" else "no",
            _DECIDER.get(guidance.decided_by, guidance.decided_by),
        )
        for verdict, reason, state, guidance in RETRY_TABLE
    ]


def term_context(name: str) -> dict[str, Any]:
    """What the template of the definition ``name`` needs beyond its own text."""
    if name == "retry":
        return {"rows": retry_rows()}
    if name == "verdicts":
        return {"verdicts": [str(v) for v in Verdict], "states": [str(s) for s in OperationState]}
    return {}
