"""The completion contract as data: a strict pydantic model, canonical JSON and its hash.

A contract is one promise about one effect. Every number, path and state that the runtime
uses lives here, never in code. Unknown fields are errors; the model is frozen.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_serializer,
)

from shared.core import ChannelError
from shared.core.verifiers import verifier_named

__all__ = [
    "Backoff",
    "Channel",
    "CompletionCondition",
    "Contract",
    "CorrelationKey",
    "CorrelationStrategy",
    "EventLogVerifier",
    "EvidenceRequirements",
    "HttpVerifier",
    "InputField",
    "MatchRule",
    "Monotone",
    "NegativeCondition",
    "OnTimeout",
    "Operator",
    "Paginate",
    "Rejection",
    "Skill",
    "Source",
    "Stages",
    "Subject",
    "Timing",
    "VerdictRule",
    "WebhookVerifier",
    "canonical_json",
    "contract_hash",
]


class Operator(StrEnum):
    """Three-valued comparison operators of the contract language."""

    EQ = "eq"
    NE = "ne"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    IN = "in"
    NOT_IN = "not_in"
    EXISTS = "exists"
    TIME_AFTER = "time_after"
    TIME_BEFORE = "time_before"


Level = Literal["E1", "E2", "E3", "E4"]
VerdictName = Literal["PENDING", "VERIFIED", "CONTRADICTED", "FAILED", "UNVERIFIABLE", "EXPIRED"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Skill(_Model):
    provider: StrictStr
    version: StrictStr


class InputField(_Model):
    """What the contract expects the agent to declare under ``$input.<name>``."""

    type: Literal["string", "integer", "number", "boolean"]
    description: StrictStr = ""
    required: StrictBool = True
    minimum: StrictInt | None = None
    pattern: StrictStr | None = None


class SubjectIdentity(_Model):
    key: StrictStr
    expr: StrictStr


class ProviderOperation(_Model):
    method: StrictStr
    path: StrictStr


class Idempotency(_Model):
    key: StrictStr
    header: StrictStr
    retry_safe: StrictBool


class Subject(_Model):
    type: StrictStr
    identity: SubjectIdentity
    canonical_effect: StrictStr
    provider_operation: ProviderOperation
    idempotency: Idempotency | None = None


class CorrelationKey(_Model):
    name: StrictStr
    expr: StrictStr


class CorrelationStrategy(_Model):
    strategy: Literal["resource_id", "idempotency_key", "fingerprint"]
    assurance: Literal["strong", "weak"]
    keys: tuple[CorrelationKey, ...] = Field(min_length=1)
    required: StrictBool = False


class EvidenceRequirements(_Model):
    minimum_level: Level
    independent_channel_required: StrictBool
    minimum_channels: StrictInt = Field(ge=1)


class Paginate(_Model):
    """How a list readback follows its pages. ``stripe_list``: while the page says
    ``has_more``, read the next one with ``starting_after=<id of the page's last item>``; more
    than ``max_pages`` pages make the reading an error (never a partial list)."""

    style: Literal["stripe_list"]
    max_pages: StrictInt = 10


QueryValue = StrictStr | StrictInt


class HttpVerifier(_Model):
    """A readback: the path template holds ``{$expr}`` placeholders, filled URL-encoded.

    ``query`` maps query parameter names to an expression or a literal, each filled like a
    placeholder (a time as whole epoch seconds, rounded down) and URL-encoded; ``paginate``
    reads every page of a list endpoint into one document.
    """

    method: Literal["GET"] = "GET"
    path: StrictStr
    query: dict[StrictStr, QueryValue] = Field(default_factory=dict)
    paginate: Paginate | None = None

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without a query or paging a readback serialises exactly as before these fields
        # existed, so the canonical JSON (and the hash) of such contracts did not change.
        data: dict[str, Any] = handler(self)
        if not data.get("query"):
            data.pop("query", None)
        if data.get("paginate") is None:
            data.pop("paginate", None)
        return data


class MatchRule(_Model):
    path: StrictStr
    op: Operator
    value: JsonValue = None


class WebhookVerifier(_Model):
    event_types: tuple[StrictStr, ...] = Field(min_length=1)
    match: tuple[MatchRule, ...] = ()
    include_before_operation: StrictBool = False


class EventLogVerifier(_Model):
    """The provider's event log: the list to read (a Stripe-style list, every page, at most
    ``max_pages``) and the event types to ask it for (``types[]``)."""

    path: StrictStr = Field(min_length=1)
    event_types: tuple[StrictStr, ...] = Field(min_length=1)
    max_pages: StrictInt = Field(default=10, ge=1, le=100)


class Stages(_Model):
    """A lifecycle the provider moves a field through, earliest stage first: a reading whose
    ``field`` (a dotted path in the reading) is in an earlier stage than an earlier reading of
    the same channel showed went backwards. Values in no stage are not judged."""

    field: StrictStr = Field(min_length=1)
    order: tuple[tuple[StrictStr, ...], ...] = Field(min_length=2)


class Monotone(_Model):
    """Where a readback only moves forward, so that a reading which goes backwards is known
    for a lagging read (``inconsistent``), never a decision:

    - ``exists``: once read, the resource keeps existing (a later not-found went backwards);
    - ``keeps_items``: an item a list reading held (by its ``id``) stays listed;
    - ``stages``: the provider's lifecycle of one field (see :class:`Stages`).
    """

    exists: StrictBool = False
    keeps_items: StrictBool = False
    stages: Stages | None = None

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("exists", "keeps_items"):
            if not data.get(key):
                data.pop(key, None)
        if data.get("stages") is None:
            data.pop("stages", None)
        return data


class Channel(_Model):
    """One way of observing. ``provider`` names the connection (readbacks) or the provider
    whose events (webhooks) the channel reads; without it, the contract's skill provider."""

    name: StrictStr
    level: Level
    independence: StrictStr
    verifier: StrictStr
    description: StrictStr
    provider: StrictStr | None = None
    typical_latency_ms: StrictInt | None = None
    worst_case_ms: StrictInt | None = None
    freshness_ms: StrictInt | None = None
    http: HttpVerifier | None = None
    webhook: WebhookVerifier | None = None
    event_log: EventLogVerifier | None = None
    monotone: Monotone | None = None

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str) -> str:
        try:
            verifier_named(value)
        except ChannelError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_serializer(mode="wrap")
    def _omit_default_provider(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A channel without its own provider (or without ``monotone``) serialises exactly as
        # before the field existed, so the canonical JSON (and the hash) did not change.
        data: dict[str, Any] = handler(self)
        if data.get("provider") is None:
            data.pop("provider", None)
        for key in ("monotone", "event_log"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def provider_of(self, contract: Contract) -> str:
        """The provider this channel observes: its own, else the contract's skill provider."""
        return self.provider or contract.skill.provider


class CompletionCondition(_Model):
    id: StrictStr
    meaning: StrictStr
    path: StrictStr
    op: Operator
    value: JsonValue = None
    evidence: StrictStr


def _omit_empty_when(data: dict[str, Any]) -> dict[str, Any]:
    # Without gates a condition serialises exactly as before ``when`` existed (same hash).
    if not data.get("when"):
        data.pop("when", None)
    return data


class NegativeCondition(_Model):
    """A contradiction. With ``when``, it is judged only once every gate rule holds (e.g. the
    provider's event that the observed system had to react to has been seen)."""

    id: StrictStr
    class_: StrictStr = Field(alias="class")
    reason: StrictStr
    path: StrictStr
    op: Operator
    value: JsonValue = None
    when: tuple[MatchRule, ...] = ()

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _omit_empty_when(handler(self))


class VerdictRule(_Model):
    """An observed state that decides; with ``when``, only once every gate rule holds.

    ``supersedes_verified``: when the rule holds on a recheck of a VERIFIED operation, on
    evidence of its ``path`` channel newer than the verifying evidence, the VERIFIED is
    superseded (late contradiction) even though the rule's own verdict is not final — a
    provider event that says the effect failed is signed evidence on its own.
    """

    id: StrictStr
    path: StrictStr
    op: Operator
    value: JsonValue = None
    verdict: VerdictName
    reason: StrictStr
    when: tuple[MatchRule, ...] = ()
    supersedes_verified: StrictBool = False

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = _omit_empty_when(handler(self))
        if not data.get("supersedes_verified"):
            data.pop("supersedes_verified", None)
        return data


class Rejection(_Model):
    """How a rejection the agent reports is confirmed (the agent is never evidence).

    An action error that the provider's skill reads as "not performed" is only the agent's
    word (E1). The operation keeps observing; it is FAILED (reason ``action_rejected``) once
    every ``confirm`` condition holds on fresh, independent evidence, each read at least its
    channel's ``typical_latency_ms`` after the report (an event still on its way is waited
    for). Until then it is PENDING; evidence of the effect judges it like any other.
    """

    confirm: tuple[CompletionCondition, ...] = Field(min_length=1)
    reason: StrictStr


class Backoff(_Model):
    kind: Literal["exponential", "constant"]
    factor: StrictFloat | StrictInt = 1
    max_ms: StrictInt


class OnTimeout(_Model):
    verdict: VerdictName
    reason: StrictStr
    escalate: Literal["human_review", "none"] = "none"


class Timing(_Model):
    initial_delay_ms: StrictInt
    poll_interval_ms: StrictInt
    backoff: Backoff
    max_attempts: StrictInt
    timeout_ms: StrictInt
    stale_read_window_ms: StrictInt
    on_timeout: OnTimeout


class Source(_Model):
    ref: StrictStr
    title: StrictStr
    url: StrictStr
    retrieved: Annotated[date, Field(strict=False)]


class Contract(_Model):
    id: StrictStr
    version: StrictStr
    completion_level: StrictStr
    certification: StrictStr
    skill: Skill
    provider_api_versions: tuple[StrictStr, ...]
    title: StrictStr
    summary: StrictStr = ""
    intent: StrictStr
    input: dict[str, InputField] = Field(default_factory=dict)
    subject: Subject
    correlation: tuple[CorrelationStrategy, ...]
    evidence: EvidenceRequirements
    channels: tuple[Channel, ...]
    completion: tuple[CompletionCondition, ...]
    negative: tuple[NegativeCondition, ...] = ()
    verdict_map: tuple[VerdictRule, ...] = ()
    timing: Timing
    sources: tuple[Source, ...] = ()
    rejection: Rejection | None = None

    @model_serializer(mode="wrap")
    def _omit_no_rejection(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A contract without a rejection section serialises exactly as before the field existed
        # (same canonical JSON, same hash).
        data: dict[str, Any] = handler(self)
        if data.get("rejection") is None:
            data.pop("rejection", None)
        return data

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError("version must be MAJOR.MINOR.PATCH")
        return value

    def channel(self, name: str) -> Channel | None:
        for channel in self.channels:
            if channel.name == name:
                return channel
        return None

    @property
    def version_key(self) -> tuple[int, int, int]:
        major, minor, patch = (int(p) for p in self.version.split("."))
        return (major, minor, patch)

    def document(self) -> dict[str, Any]:
        """The contract as plain JSON data (aliases applied), the basis of its hash."""
        return self.model_dump(mode="json", by_alias=True)


def canonical_json(data: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8, no NaN or infinities."""
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def contract_hash(contract: Contract) -> str:
    """sha256 over the canonical JSON of the contract; pages show the first 16 hex digits."""
    return hashlib.sha256(canonical_json(contract.document())).hexdigest()
