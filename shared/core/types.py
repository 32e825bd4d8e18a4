"""Value types the pure core takes and returns: observations, operation facts, decisions.

Nothing here reads a clock, a database or the environment; callers pass time and ids in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "ACTION_REJECTED_PHASE",
    "ConditionResult",
    "Decision",
    "EventRecord",
    "EvidenceUsed",
    "Observation",
    "ObservationStatus",
    "OperationFacts",
    "OperationState",
    "RetryGuidance",
    "Verdict",
]


class Verdict(StrEnum):
    PENDING = "PENDING"
    VERIFIED = "VERIFIED"
    CONTRADICTED = "CONTRADICTED"
    FAILED = "FAILED"
    UNVERIFIABLE = "UNVERIFIABLE"
    EXPIRED = "EXPIRED"


class OperationState(StrEnum):
    CREATED = "CREATED"
    ACTION_STARTED = "ACTION_STARTED"
    ACTION_ACCEPTED = "ACTION_ACCEPTED"
    OBSERVING = "OBSERVING"
    PENDING = "PENDING"
    VERIFIED = "VERIFIED"
    CONTRADICTED = "CONTRADICTED"
    FAILED = "FAILED"
    UNVERIFIABLE = "UNVERIFIABLE"
    EXPIRED = "EXPIRED"
    HUMAN_REVIEW = "HUMAN_REVIEW"


class ObservationStatus(StrEnum):
    OK = "ok"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    ERROR = "error"
    INCONSISTENT = "inconsistent"  # went backwards against earlier readings (``consistency``)


@dataclass(frozen=True, slots=True)
class Observation:
    """One reading of one channel at one time.

    For an ``http`` channel ``value`` is the parsed resource; for a ``webhook`` channel it is
    the reduction ``{events, count, latest, earliest, types, duplicates_dropped}``.
    """

    channel: str
    observed_at: datetime
    status: ObservationStatus
    value: Any = None
    provider_timestamp: datetime | None = None
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A stored, verified provider event, as the webhook reduction sees it."""

    event_id: str
    type: str
    provider_timestamp: datetime
    body: dict[str, Any]
    api_version: str | None = None
    received_at: datetime | None = None
    duplicates: int = 0


ACTION_REJECTED_PHASE = "rejected"
"""``action_phase`` of an error report that the provider's skill reads as "not performed"."""


@dataclass(frozen=True, slots=True)
class OperationFacts:
    """What the engine knows about one operation besides its observations.

    ``learned_keys`` are correlation keys learned after creation (a refund id carried by a
    ``refund.created`` event whose idempotency key is the operation id).
    """

    id: str
    created_at: datetime
    input: dict[str, Any]
    action_result: dict[str, Any] | None = None
    action_reported_at: datetime | None = None
    action_phase: str | None = None
    learned_keys: dict[str, Any] = field(default_factory=dict)
    deadline: datetime | None = None
    attempts: int = 0

    @property
    def action_rejected(self) -> bool:
        """The agent reported an error its provider's skill reads as "not performed" (E1)."""
        return self.action_phase == ACTION_REJECTED_PHASE


@dataclass(frozen=True, slots=True)
class ConditionResult:
    id: str
    kind: str  # "completion" | "negative" | "verdict_map"
    holds: bool | None
    observed: Any = None
    expected: Any = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class EvidenceUsed:
    channel: str
    level: str
    status: str
    observed_at: datetime | None
    provider_timestamp: datetime | None = None
    digest: str | None = None
    fresh: bool = True
    used: bool = False  # True when a condition that decided read this channel


@dataclass(frozen=True, slots=True)
class RetryGuidance:
    """The frozen retry table's answer: may the action or the verification be retried."""

    action: str  # "never" | "allowed_as_new_operation"
    verification: str  # "no" | "yes"
    decided_by: str  # "runtime" | "person" | "agent"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    class_: str | None
    final: bool
    conditions: tuple[ConditionResult, ...]
    evidence: tuple[EvidenceUsed, ...]
    correlation: tuple[tuple[str, str, Any], ...] = ()  # (strategy, assurance, value)
    subject_id: Any = None
    escalate: bool = False  # the on-timeout verdict goes to a person (state HUMAN_REVIEW)
    explanation: str | None = None  # the contract's prose for the reason, when it has one
    supersedes: bool = False  # a rule marked ``supersedes_verified`` decided it
