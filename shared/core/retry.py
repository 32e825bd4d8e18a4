"""The frozen retry table: what an agent may retry after each verdict.

This module owns ``RETRY_TABLE`` (the retry table, as data) and :func:`retry_guidance`,
which the operation resource carries as ``retry: {action, verification}`` so that an agent
never derives it. Rules, checked in order:

- state HUMAN_REVIEW: nothing is retried, a person decides;
- PENDING: never retry the action; the runtime observes;
- VERIFIED: never retry anything;
- CONTRADICTED (any class): never; a person decides;
- FAILED (the provider reports a failure): the action may be retried as a new operation;
- UNVERIFIABLE ``evidence_unavailable``: never retry the action; the verification may be
  retried (the runtime does so itself);
- UNVERIFIABLE for any other reason (``evidence_unavailable_before_timeout``): a person decides;
- EXPIRED: never (the action may have run); a person decides.

A side-effecting action is never advised while the verdict is PENDING or UNVERIFIABLE.
"""

from __future__ import annotations

from typing import Final

from shared.core.types import OperationState, RetryGuidance, Verdict

__all__ = ["RETRY_TABLE", "RetryRow", "retry_guidance"]

RetryRow = tuple[Verdict | None, str | None, OperationState | None, RetryGuidance]

_PERSON: Final = RetryGuidance(action="never", verification="no", decided_by="person")

# (verdict or None = any, reason or None = any, state or None = any, guidance); first match wins.
RETRY_TABLE: Final[tuple[RetryRow, ...]] = (
    (None, None, OperationState.HUMAN_REVIEW, _PERSON),
    (Verdict.PENDING, None, None, RetryGuidance("never", "no", "runtime")),
    (Verdict.VERIFIED, None, None, RetryGuidance("never", "no", "runtime")),
    (Verdict.CONTRADICTED, None, None, _PERSON),
    (Verdict.FAILED, None, None, RetryGuidance("allowed_as_new_operation", "no", "agent")),
    (Verdict.UNVERIFIABLE, "evidence_unavailable", None, RetryGuidance("never", "yes", "runtime")),
    (Verdict.UNVERIFIABLE, None, None, _PERSON),
    (Verdict.EXPIRED, None, None, _PERSON),
)


def retry_guidance(
    verdict: Verdict | str, reason: str | None, state: OperationState | str | None = None
) -> RetryGuidance:
    """The retry table's answer for a verdict, its reason and the operation state."""
    verdict = Verdict(verdict)
    current = OperationState(state) if state is not None else None
    for row_verdict, row_reason, row_state, guidance in RETRY_TABLE:
        if row_verdict is not None and row_verdict is not verdict:
            continue
        if row_reason is not None and row_reason != reason:
            continue
        if row_state is not None and row_state is not current:
            continue
        return guidance
    raise AssertionError(f"retry table has no row for {verdict}")  # pragma: no cover
