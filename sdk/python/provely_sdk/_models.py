"""Typed models of the API's answers (the OpenAPI document's schemas of the same names).

Unknown fields are kept (``extra="allow"``): a newer server adds fields without breaking an
older SDK; a field the SDK declares that the server no longer serves fails the drift test.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from provely_sdk._guidance import guidance

__all__ = [
    "ActionOut",
    "ConditionOut",
    "ContractDetail",
    "ContractRef",
    "ContractSummary",
    "CorrelationOut",
    "EvidenceOut",
    "IgnoredEventOut",
    "OperationOut",
    "RetryOut",
    "ReviewOut",
    "SubjectOut",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


class ContractRef(_Model):
    id: str
    version: str
    hash: str
    completion_level: str


class RetryOut(_Model):
    action: str
    """``never`` or ``allowed_as_new_operation``."""
    verification: str
    """``yes`` (ask Provely to verify again) or ``no``."""
    decided_by: str
    """``runtime``, ``person`` or ``agent``."""
    stands_until: datetime | None = None
    """With ``allowed_as_new_operation``: the verdict is watched until then, and the advice
    stands only while nothing contradicts it (evidence of the effect supersedes it)."""


class SubjectOut(_Model):
    type: str
    key: str
    id: str | None


class CorrelationOut(_Model):
    strategy: str
    assurance: str
    value: Any = None


class ConditionOut(_Model):
    id: str
    kind: str
    holds: bool | None
    observed: Any = None
    expected: Any = None
    note: str | None = None


class EvidenceOut(_Model):
    channel: str
    level: str
    status: str
    observed_at: datetime | None = None
    provider_timestamp: datetime | None = None
    fresh: bool | None = None
    used: bool | None = None


class IgnoredEventOut(_Model):
    """A linked event that the operation's contract cannot count, and why."""

    event_id: str
    type: str
    reason: str
    """``api_version``, ``before_operation`` or ``type_unread``."""
    detail: str


class ActionOut(_Model):
    phase: str | None
    http_status: int | None
    reported_at: datetime | None
    report_deadline: datetime | None


class ReviewOut(_Model):
    verdict: str
    note: str
    reviewed_at: datetime
    reviewed_by: str
    receipt_id: str | None = None


class OperationOut(_Model):
    """An operation as ``GET /v1/operations/{id}`` answers it."""

    id: str
    workspace_id: str
    contract: ContractRef
    state: str
    verdict: str | None
    reason: str | None
    class_: str | None = Field(alias="class")
    final: bool
    completion_level: str
    claim: str
    safe_to_claim_complete: bool
    watch_until: datetime | None = None
    retry: RetryOut
    explanation: str | None = None
    created_at: datetime
    updated_at: datetime
    attempts: int
    next_observation_at: datetime | None
    deadline: datetime | None
    action: ActionOut
    subject: SubjectOut
    correlation: list[CorrelationOut]
    conditions: list[ConditionOut]
    evidence: list[EvidenceOut]
    receipt_url: str | None
    review: ReviewOut | None = None
    blocked_by: str | None = None
    """Events linked to the operation that its contract cannot count, in a sentence."""
    ignored_events: list[IgnoredEventOut] = Field(default_factory=list)
    input: dict[str, Any]
    metadata: dict[str, Any] | None = None

    @property
    def may_repeat_action(self) -> bool:
        """True only when the API says a new attempt is allowed (as a new operation)."""
        return self.retry.action == "allowed_as_new_operation"

    @property
    def guidance(self) -> str:
        """What the verdict means and what to do now, in words (see ``_guidance``)."""
        return guidance(
            operation_id=self.id,
            contract_id=self.contract.id,
            verdict=self.verdict,
            reason=self.reason,
            final=self.final,
            retry_action=self.retry.action,
            retry_verification=self.retry.verification,
            decided_by=self.retry.decided_by,
            claim=self.claim,
            stands_until=self.retry.stands_until,
            blocked_by=self.blocked_by,
        )


class ContractSummary(_Model):
    id: str
    version: str
    title: str
    completion_level: str
    certification: str
    provider: str
    hash: str
    custom: bool


class ContractDetail(ContractSummary):
    page: str
    """The contract's rendered page (Markdown)."""
    document: dict[str, Any]
