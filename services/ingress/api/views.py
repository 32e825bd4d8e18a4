"""How stored rows are shown: the operation resource and its timeline."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from services.ingress.api.schemas import (
    ActionOut,
    ConditionOut,
    ContractRef,
    CorrelationOut,
    EvidenceOut,
    IgnoredEventOut,
    OperationListItem,
    OperationOut,
    RetryOut,
    ReviewOut,
    SubjectOut,
    Timeline,
    TimelineEntry,
)
from shared.core.claim import claim_for
from shared.core.context import correlation_keys
from shared.core.contract import Contract
from shared.core.ignored import IgnoredEvent, ignored_summary, why_ignored
from shared.core.retry import retry_guidance
from shared.core.shown import shown_expected, shown_value
from shared.core.types import OperationState, Verdict
from shared.db.models import Event, Observation, Operation, OperationEvent, Receipt, Transition
from shared.intake.store import event_record
from shared.lifecycle.contracts import ContractNotFound, contract_for
from shared.lifecycle.operations import facts_for
from shared.lifecycle.watch import WATCHED_STATES
from shared.trust.registry import RegistryError

__all__ = ["operation_view", "receipt_url", "timeline_view"]


def _contract(session: Session, op: Operation) -> Contract | None:
    try:
        return contract_for(session, op)
    except (ContractNotFound, RegistryError):
        return None


def _correlation(op: Operation, contract: Contract | None) -> list[CorrelationOut]:
    decision = op.decision or {}
    stored = decision.get("correlation")
    if isinstance(stored, list) and stored:
        return [
            CorrelationOut(
                strategy=str(item.get("strategy")),
                assurance=str(item.get("assurance")),
                value=item.get("value"),
            )
            for item in stored
            if isinstance(item, dict)
        ]
    if contract is None:
        return []
    known = correlation_keys(contract, facts_for(op))
    found: list[CorrelationOut] = []
    for strategy in contract.correlation:
        values = {k.name: known[k.name] for k in strategy.keys if k.name in known}
        if len(values) != len(strategy.keys):
            continue
        value: Any = next(iter(values.values())) if len(values) == 1 else values
        found.append(
            CorrelationOut(strategy=strategy.strategy, assurance=strategy.assurance, value=value)
        )
    return found


def _conditions(decision: dict[str, Any]) -> list[ConditionOut]:
    found: list[ConditionOut] = []
    for item in decision.get("conditions") or ():
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        holds = item.get("holds")
        found.append(
            ConditionOut(
                id=item["id"],
                kind=str(item.get("kind", "")),
                holds=holds if isinstance(holds, bool) else None,
                # Decisions stored before values were limited show the limit too.
                observed=shown_value(item.get("observed")),
                expected=shown_expected(item.get("expected")),
                note=item.get("note") if isinstance(item.get("note"), str) else None,
            )
        )
    return found


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _evidence(decision: dict[str, Any]) -> list[EvidenceOut]:
    found: list[EvidenceOut] = []
    for item in decision.get("evidence") or ():
        if not isinstance(item, dict):
            continue
        fresh, used = item.get("fresh"), item.get("used")
        found.append(
            EvidenceOut(
                channel=str(item.get("channel")),
                level=str(item.get("level")),
                status=str(item.get("status")),
                observed_at=_time(item.get("observed_at")),
                provider_timestamp=_time(item.get("provider_timestamp")),
                fresh=fresh if isinstance(fresh, bool) else None,
                used=used if isinstance(used, bool) else None,
            )
        )
    return found


def receipt_url(
    session: Session, op: Operation, *, current_receipts: Collection[str] | None = None
) -> str | None:
    """The address of the operation's current receipt; ``current_receipts``: the ids of the
    operations known to have one (a list page reads them in one query for all its rows)."""
    if not op.final:
        return None
    if current_receipts is not None:
        return f"/v1/operations/{op.id}/receipt" if op.id in current_receipts else None
    found = session.execute(
        select(Receipt.id).where(Receipt.operation_id == op.id, Receipt.current.is_(True)).limit(1)
    ).first()
    return f"/v1/operations/{op.id}/receipt" if found is not None else None


def _review(op: Operation) -> ReviewOut | None:
    review = op.review
    if not isinstance(review, dict):
        return None
    reviewed_at = _time(review.get("reviewed_at"))
    if reviewed_at is None:
        return None
    return ReviewOut(
        verdict=str(review.get("verdict")),
        note=str(review.get("note")),
        reviewed_at=reviewed_at,
        reviewed_by=str(review.get("reviewed_by")),
        receipt_id=review.get("receipt_id") if isinstance(review.get("receipt_id"), str) else None,
    )


_LINKED_EVENTS = (
    select(Event, OperationEvent)
    .join(OperationEvent, OperationEvent.event_pk == Event.id)
    .where(
        OperationEvent.operation_id == bindparam("operation_id"),
        Event.workspace_id == bindparam("workspace_id"),
    )
    .order_by(Event.provider_timestamp, Event.event_id)
)
"""Built once: every read and report of an operation runs it."""


def _linked_events(session: Session, op: Operation) -> list[tuple[Event, OperationEvent]]:
    rows = session.execute(
        _LINKED_EVENTS, {"operation_id": op.id, "workspace_id": op.workspace_id}
    ).all()
    return [(event, link) for event, link in rows]


def _ignored(contract: Contract | None, op: Operation, event: Event) -> IgnoredEvent | None:
    if contract is None:
        return None
    return why_ignored(contract, event=event_record(event), operation_created_at=op.created_at)


def _ignored_fields(
    session: Session, op: Operation, contract: Contract | None, *, linked_events: bool
) -> dict[str, Any]:
    """``blocked_by`` and ``ignored_events`` of the operation resource."""
    linked = _linked_events(session, op) if linked_events else []
    ignored = [found for event, _ in linked if (found := _ignored(contract, op, event)) is not None]
    blocked = None
    if op.state != OperationState.VERIFIED.value:
        blocked = ignored_summary(ignored, include_unread=False)
    return {
        "blocked_by": blocked,
        "ignored_events": [
            IgnoredEventOut(
                event_id=item.event_id, type=item.type, reason=item.reason, detail=item.detail
            )
            for item in ignored
        ],
    }


def operation_view(
    session: Session,
    op: Operation,
    *,
    listed: bool = False,
    inserted: bool = False,
    linked_events: bool = True,
    current_receipts: Collection[str] | None = None,
) -> OperationOut:
    """The operation resource of ``GET /v1/operations/{id}``; ``listed``: as a list page
    shows it (:class:`OperationListItem`, without ``input`` and ``metadata``); ``inserted``:
    the operation was inserted by this transaction, so no event is linked to it yet (no query
    for them); ``linked_events`` False: none was linked when this transaction read it
    (``services.ingress.api.lookup.load_operation_linked``) nor since, in it (no query
    either); ``current_receipts``: see :func:`receipt_url`."""
    contract = _contract(session, op)
    decision: dict[str, Any] = op.decision or {}
    verdict = op.verdict or Verdict.PENDING.value
    guidance = retry_guidance(verdict, op.reason, op.state)
    watched = op.watch_until if op.state in WATCHED_STATES else None
    review = _review(op)
    claim = claim_for(
        state=op.state,
        verdict=op.verdict,
        completion_level=op.completion_level,
        title=contract.title if contract else "",
        reviewed_verdict=review.verdict if review is not None else None,
    )
    subject_id = op.subject_id if op.subject_id is not None else decision.get("subject_id")
    explanation = decision.get("explanation")
    model = OperationListItem if listed else OperationOut
    bodies: dict[str, Any] = {}
    if not listed:
        bodies = {"input": op.input or {}, "metadata": op.metadata_}
        bodies.update(
            _ignored_fields(session, op, contract, linked_events=linked_events and not inserted)
        )
    return model(
        id=op.id,
        workspace_id=op.workspace_id,
        contract=ContractRef(
            id=op.contract_id,
            version=op.contract_version,
            hash=op.contract_hash,
            completion_level=op.completion_level,
        ),
        state=op.state,
        verdict=op.verdict,
        reason=op.reason,
        class_=op.verdict_class,
        final=op.final,
        completion_level=claim.completion_level,
        claim=claim.statement,
        safe_to_claim_complete=claim.safe_to_claim_complete,
        watch_until=watched,
        retry=RetryOut(
            action=guidance.action,
            verification=guidance.verification,
            decided_by=guidance.decided_by,
            stands_until=watched if guidance.action == "allowed_as_new_operation" else None,
        ),
        explanation=explanation if isinstance(explanation, str) else None,
        created_at=op.created_at,
        updated_at=op.updated_at,
        attempts=op.attempts,
        next_observation_at=None if op.final else op.next_observation_at,
        deadline=op.deadline,
        action=ActionOut(
            phase=op.action_phase,
            http_status=op.action_http_status,
            reported_at=op.action_reported_at,
            report_deadline=op.action_deadline,
        ),
        subject=SubjectOut(
            type=contract.subject.type if contract else "",
            key=contract.subject.identity.key if contract else "",
            id=None if subject_id is None else str(subject_id),
        ),
        correlation=_correlation(op, contract),
        conditions=_conditions(decision),
        evidence=_evidence(decision),
        receipt_url=receipt_url(session, op, current_receipts=current_receipts),
        review=review,
        **bodies,
    )


def timeline_view(session: Session, op: Operation) -> Timeline:
    """Transitions, observations and correlated events of ``op``, in time order."""
    entries: list[tuple[datetime, int, int, TimelineEntry]] = []
    for t in session.execute(
        select(Transition).where(Transition.operation_id == op.id).order_by(Transition.seq)
    ).scalars():
        entries.append(
            (
                t.created_at,
                0,
                t.seq,
                TimelineEntry(
                    kind="transition",
                    at=t.created_at,
                    from_state=t.from_state,
                    to_state=t.to_state,
                    verdict=t.verdict,
                    reason=t.reason,
                    cause=t.cause,
                    seq=t.seq,
                ),
            )
        )
    for o in session.execute(
        select(Observation)
        .where(Observation.operation_id == op.id)
        .order_by(Observation.observed_at, Observation.id)
    ).scalars():
        entries.append(
            (
                o.observed_at,
                1,
                o.id,
                TimelineEntry(
                    kind="observation",
                    at=o.observed_at,
                    channel=o.channel,
                    status=o.status,
                    fence=o.fence,
                    http_status=o.http_status,
                    digest=o.digest,
                    provider_timestamp=o.provider_timestamp,
                ),
            )
        )
    contract = _contract(session, op)
    for event, link in _linked_events(session, op):
        ignored = _ignored(contract, op, event)
        entries.append(
            (
                event.received_at,
                2,
                event.id,
                TimelineEntry(
                    kind="event",
                    at=event.received_at,
                    event_id=event.event_id,
                    type=event.type,
                    provider_timestamp=event.provider_timestamp,
                    digest=event.digest,
                    strategy=link.strategy,
                    assurance=link.assurance,
                    ignored=None if ignored is None else ignored.detail,
                    escaped=list(event.escaped) if event.escaped else None,
                ),
            )
        )
    entries.sort(key=lambda e: (e[0], e[1], e[2]))
    return Timeline(operation_id=op.id, entries=[e[3] for e in entries])
