"""What may be said about an operation: its completion level and the claim it supports.

Safety rule 2: a lower completion level is never presented as terminal success. Every view of
an operation (the API resource, the receipt, the demo) takes its ``safe_to_claim_complete`` and
its ``claim`` from :func:`claim_for`, so they cannot disagree.

- A claim exists only for a VERIFIED verdict: the operation in state VERIFIED, or a person's
  review of a HUMAN_REVIEW that resolved it as VERIFIED. Its statement is the contract's title
  (what the contract proves, in its words).
- ``safe_to_claim_complete`` is true only for such a claim at a level that names the effect
  itself, not a step on the way to it (``created``, ``accepted`` … in
  :data:`shared.core.receipt.INTERMEDIATE_COMPLETION_LEVELS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.receipt import safe_to_claim_complete
from shared.core.types import OperationState, Verdict

__all__ = ["Claim", "claim_for"]


@dataclass(frozen=True, slots=True)
class Claim:
    completion_level: str
    safe_to_claim_complete: bool
    statement: str


def claim_for(
    *,
    state: str,
    verdict: str | None,
    completion_level: str,
    title: str,
    reviewed_verdict: str | None = None,
) -> Claim:
    """The claim an operation supports now (see the module docstring)."""
    verified = (verdict == Verdict.VERIFIED and state == OperationState.VERIFIED) or (
        state == OperationState.HUMAN_REVIEW and reviewed_verdict == Verdict.VERIFIED
    )
    if not verified:
        shown = verdict or Verdict.PENDING.value
        return Claim(
            completion_level,
            False,
            f"Nothing may be claimed yet: the verdict is {shown} (state {state}).",
        )
    complete = safe_to_claim_complete(Verdict.VERIFIED.value, completion_level)
    statement = title.strip()
    if not complete:
        statement = (
            f"{statement} This is the '{completion_level}' level: a step toward the effect, "
            "not the effect itself; do not report the effect as complete."
        )
    return Claim(completion_level, complete, statement)
