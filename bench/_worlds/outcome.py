"""What the harness measured in one world, and the final states a world's truth allows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Outcome", "allowed"]


@dataclass
class Outcome:
    """What the harness measured in one world (times are seconds from the world's start)."""

    index: int
    seed: str
    classes: dict[str, str]
    plan: dict[str, Any]
    op_id: str = ""
    charge: str = ""
    contract_version: str = ""
    harness_error: str | None = None
    truth: str = ""
    agent_status: str | None = None
    other_refunds: int = 0
    final_state: str = ""
    final_reason: str | None = None
    accepted: list[str] = field(default_factory=list)
    false_verified: list[str] = field(default_factory=list)
    ignored_contradiction: str | None = None
    late: dict[str, Any] | None = None
    late_failure: str | None = None
    waited_for_provider: bool = False
    lost: str | None = None
    unexpected: str | None = None
    wrong_retry: str | None = None
    failed_standing: str | None = None  # a late refund under the key, the FAILED still stands
    late_refund_supersede_s: float | None = None  # late refund made → HUMAN_REVIEW seen
    supersede_s: float | None = None
    duration_s: float = 0.0
    timeline: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.harness_error
            or self.false_verified
            or self.ignored_contradiction
            or self.late_failure
            or self.lost
            or self.wrong_retry
            or self.failed_standing
            or self.unexpected
        )


def allowed(status: str | None, contradiction: bool, drop_updated: bool) -> tuple[set[str], bool]:
    """Final states a truth allows, and whether a non-final PENDING is allowed: ``status`` is
    the agent refund's (None: none made), ``contradiction`` a second refund or its event."""
    if status is None:
        if contradiction:  # another refund on the charge: no confirmation that nothing was made
            return {"CONTRADICTED", "HUMAN_REVIEW"}, True
        return {"FAILED"}, False
    if contradiction:
        return {"CONTRADICTED", "HUMAN_REVIEW"} | (
            {"FAILED"} if status == "failed" else set()
        ), False
    if status == "succeeded":
        return {"VERIFIED"}, drop_updated  # the contract needs a refund.updated
    if status == "failed":
        return {"FAILED", "HUMAN_REVIEW"}, False  # HUMAN_REVIEW: it had succeeded first
    if status == "canceled":
        return {"CONTRADICTED"}, False
    return set(), True  # still pending
