"""Request and response bodies of the agent API (they are the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from services.ingress.models import RequestModel as _In
from services.ingress.models import ResponseModel as _Out

__all__ = [
    "ActionOut",
    "ActionReportIn",
    "ConditionOut",
    "ContractDetail",
    "ContractList",
    "ContractRef",
    "ContractSummary",
    "CorrelationOut",
    "CreateOperationIn",
    "EvidenceOut",
    "Health",
    "OperationList",
    "OperationListItem",
    "OperationOut",
    "RetryOut",
    "ReviewIn",
    "ReviewOut",
    "SubjectOut",
    "Timeline",
    "TimelineEntry",
]

_SEMVER = r"^\d+\.\d+\.\d+$"


class CreateOperationIn(_In):
    contract: str = Field(min_length=1, max_length=200, examples=["stripe.refund.succeeded"])
    contract_version: str | None = Field(
        default=None, pattern=_SEMVER, description="Default: the newest loaded version."
    )
    input: dict[str, Any] = Field(
        description="What the agent declares (`$input.*`): checked against the contract."
    )
    metadata: dict[str, Any] | None = Field(default=None, description="Kept, never evaluated.")


class ActionReportIn(_In):
    phase: Literal["started", "result", "error"]
    result: dict[str, Any] | None = Field(
        default=None, description="The provider's response body (phase `result`)."
    )
    http_status: int | None = Field(default=None, ge=100, le=599)
    error: dict[str, Any] | None = Field(
        default=None,
        description="The provider's error body, or what the agent saw (phase `error`).",
    )


class ReviewIn(_In):
    verdict: Literal["VERIFIED", "CONTRADICTED", "FAILED", "UNVERIFIABLE", "EXPIRED"]
    note: str = Field(min_length=1, max_length=4000)


class ContractRef(_Out):
    id: str
    version: str
    hash: str
    completion_level: str


class RetryOut(_Out):
    action: str = Field(description="`never` or `allowed_as_new_operation`.")
    verification: str = Field(description="`yes` or `no`.")
    decided_by: str = Field(description="`runtime`, `person` or `agent`.")
    stands_until: datetime | None = Field(
        default=None,
        description="With `allowed_as_new_operation`: the verdict is watched until then, and the "
        "advice stands only while nothing contradicts it — evidence that the effect happened "
        "after all, seen before then, supersedes the verdict (HUMAN_REVIEW, action `never`). "
        "After it the advice is settled.",
    )


class SubjectOut(_Out):
    type: str
    key: str
    id: str | None


class CorrelationOut(_Out):
    strategy: str
    assurance: str
    value: Any = None


class ConditionOut(_Out):
    id: str
    kind: str
    holds: bool | None
    observed: Any = None
    expected: Any = None
    note: str | None = None


class EvidenceOut(_Out):
    channel: str
    level: str
    status: str
    observed_at: datetime | None = None
    provider_timestamp: datetime | None = None
    fresh: bool | None = None
    used: bool | None = None


class ActionOut(_Out):
    phase: str | None
    http_status: int | None
    reported_at: datetime | None
    report_deadline: datetime | None = Field(
        description="When an unreported action makes the operation EXPIRED."
    )


class ReviewOut(_Out):
    verdict: str
    note: str
    reviewed_at: datetime
    reviewed_by: str = Field(description="The API key id of the reviewer.")
    receipt_id: str | None = Field(
        default=None,
        description="The signed receipt of the review (`GET /v1/receipts/{receipt_id}`); it "
        "supersedes the receipt it follows. Null for a review recorded before reviews had one.",
    )


class IgnoredEventOut(_Out):
    event_id: str
    type: str
    reason: str = Field(
        description="`api_version` (not among the contract's provider API versions), "
        "`before_operation` (older than the operation) or `type_unread` (no channel reads it)."
    )
    detail: str


class OperationOut(_Out):
    id: str
    workspace_id: str
    contract: ContractRef
    state: str
    verdict: str | None
    reason: str | None
    class_: str | None = Field(alias="class")
    final: bool
    completion_level: str = Field(
        description="What the contract proves: `succeeded` (the effect) or a step toward it "
        "such as `created` (the object exists), never presented as the effect itself."
    )
    claim: str = Field(description="What may be said now, in the contract's words.")
    safe_to_claim_complete: bool = Field(
        description="True only for VERIFIED at a completion level that names the effect itself."
    )
    watch_until: datetime | None = Field(
        default=None,
        description="VERIFIED, or FAILED allowing a new operation: late evidence is still "
        "watched for until then (a contradiction supersedes the receipt); after it the verdict "
        "is settled.",
    )
    retry: RetryOut
    explanation: str | None = None
    blocked_by: str | None = Field(
        default=None,
        description="Events linked to the operation that its contract cannot count, in a "
        "sentence (`3 events ignored: api_version 2025-03-31.basil is not among 2026-08-26`); "
        "null when none, and always null once VERIFIED.",
    )
    ignored_events: list[IgnoredEventOut] = Field(
        default_factory=list,
        description="Each linked event that counts for nothing here, and why (the timeline "
        "marks them too).",
    )
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
    input: dict[str, Any]
    metadata: dict[str, Any] | None = None


class OperationListItem(OperationOut):
    """An operation as a list page shows it: every field of the operation but ``input`` and
    ``metadata`` (up to ``PROVELY_OPERATION_FIELD_MAX_BYTES`` each), which only
    ``GET /v1/operations/{id}`` carries; so a page's size does not grow with what agents sent."""

    input: dict[str, Any] | None = Field(default=None, exclude=True)  # type: ignore[assignment]
    metadata: dict[str, Any] | None = Field(default=None, exclude=True)
    blocked_by: str | None = Field(default=None, exclude=True)
    ignored_events: list[IgnoredEventOut] = Field(default_factory=list, exclude=True)


class OperationList(_Out):
    data: list[OperationListItem] = Field(
        description="Without `input` and `metadata`: read an operation for them."
    )
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class TimelineEntry(_Out):
    kind: Literal["transition", "observation", "event"]
    at: datetime
    from_state: str | None = None
    to_state: str | None = None
    verdict: str | None = None
    reason: str | None = None
    cause: str | None = None
    seq: int | None = None
    channel: str | None = None
    status: str | None = None
    fence: int | None = None
    http_status: int | None = None
    digest: str | None = None
    provider_timestamp: datetime | None = None
    event_id: str | None = None
    type: str | None = None
    strategy: str | None = None
    assurance: str | None = None
    ignored: str | None = Field(
        default=None,
        description="Why this event counts for nothing in the operation (see `ignored_events`).",
    )
    escaped: list[str] | None = Field(
        default=None,
        description="Places of the event's stored copy escaped to be storable (a NUL, a lone "
        "surrogate, 1e999, too deep); the raw delivery is kept verbatim.",
    )


class Timeline(_Out):
    operation_id: str
    entries: list[TimelineEntry]


class ContractSummary(_Out):
    id: str
    version: str
    title: str
    completion_level: str
    certification: str
    provider: str
    hash: str
    custom: bool


class ContractList(_Out):
    data: list[ContractSummary]


class ContractDetail(ContractSummary):
    page: str = Field(description="The contract's rendered page (Markdown).")
    document: dict[str, Any]


class Health(_Out):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
