"""Signed receipts for final verdicts: issuing, superseding, serving and checking them.

- :func:`issue_receipt` signs the receipt of an operation that just reached a final state. It
  runs inside :func:`shared.lifecycle.operations.change_state`'s transaction, so a final state and
  its receipt are written together or not at all. When the operation already has a current receipt,
  the new one names it in ``supersedes`` and the old row stops being current; its body and
  signature are never touched (safety rule 8).
- :func:`check_late_evidence` is what a worker calls when an operation that is already VERIFIED
  gets a new decision: evidence that contradicts it, and is newer than the evidence that
  verified it, moves the operation to HUMAN_REVIEW (cause ``late_contradiction``) and that
  transition issues the superseding receipt.
- :func:`recheck_verified` (called by the evaluation of a rechecked operation) is how that new
  evidence is read: an event that names a watched VERIFIED operation schedules one more reading
  of it (``shared.lifecycle.watch``), and the engine's answer over that reading goes to
  :func:`check_late_evidence`; a reading that could not be made is tried again.
- :func:`verify_receipt_document` checks a receipt document against a key ring, offline.

Errors::

    ReceiptError
    └── ReceiptNotIssuable      the operation is open, or has no final verdict
    ReceiptKeyError (shared.lifecycle.receipt_keys)   the signing key cannot be loaded
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Any, cast

from shared.core.contract import canonical_json
from shared.core.receipt import (
    ALGORITHM,
    MalformedReceipt,
    ReceiptContract,
    ReceiptEvidence,
    build_receipt_body,
    parse_receipt_document,
    receipt_document,
    signing_payload,
)
from shared.core.types import ConditionResult, Decision, OperationState, Verdict
from shared.lifecycle.receipt_keys import KeyRing, active_signing_key, sign_payload, verify_payload

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.orm import Session

    from shared.db.models import Operation, Receipt
    from shared.runtime.settings import Settings

__all__ = [
    "LATE_CONTRADICTION",
    "LATE_CONTRADICTION_CLASS",
    "CheckOutcome",
    "ReceiptError",
    "ReceiptNotIssuable",
    "Verification",
    "VerificationResult",
    "check_late_evidence",
    "current_receipt",
    "issue_receipt",
    "needs_recheck",
    "receipt_document_for",
    "recheck_verified",
    "verify_receipt_document",
]

LATE_CONTRADICTION = "late_contradiction"
LATE_CONTRADICTION_CLASS = "late contradicting evidence"

_CONTRADICTING = frozenset({Verdict.FAILED, Verdict.CONTRADICTED})


class ReceiptError(Exception):
    """Base of the errors this module raises on purpose."""


class ReceiptNotIssuable(ReceiptError):
    """A receipt was asked for an operation that is open or has no final verdict."""


def _new_receipt_id() -> str:
    return "rcpt_" + uuid.uuid4().hex


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, str) and value:
        try:
            return _utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def current_receipt(session: Session, operation_id: str) -> Receipt | None:
    """The operation's current receipt (None while it has none)."""
    from sqlalchemy import select

    from shared.db.models import Receipt

    return session.execute(
        select(Receipt)
        .where(Receipt.operation_id == operation_id, Receipt.current.is_(True))
        .order_by(Receipt.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()


def receipt_document_for(row: Receipt) -> dict[str, Any]:
    """The document served and exported for a stored receipt."""
    return receipt_document(row.body, signature=row.signature, key_id=row.key_id)


# ---------------------------------------------------------------------------------------------
# Issuing


def _conditions(decision: Mapping[str, Any]) -> list[ConditionResult]:
    found: list[ConditionResult] = []
    for item in decision.get("conditions") or ():
        if isinstance(item, Mapping) and isinstance(item.get("id"), str):
            holds = item.get("holds")
            found.append(
                ConditionResult(
                    id=item["id"],
                    kind=str(item.get("kind", "")),
                    holds=holds if isinstance(holds, bool) else None,
                    observed=item.get("observed"),
                    expected=item.get("expected"),
                )
            )
    return found


def _correlation(decision: Mapping[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for item in decision.get("correlation") or ():
        if isinstance(item, Mapping):
            strategy, assurance = item.get("strategy"), item.get("assurance")
        elif isinstance(item, list | tuple) and len(item) >= 2:
            strategy, assurance = item[0], item[1]
        else:
            continue
        if isinstance(strategy, str) and isinstance(assurance, str):
            found.append((strategy, assurance))
    return found


def _counted(entry: Mapping[str, Any]) -> bool:
    """Evidence a receipt lists: what decided, and every usable reading that was evaluated."""
    return bool(entry.get("used")) or (entry.get("status") == "ok" and bool(entry.get("fresh")))


_WEBHOOK_READINGS: Any = None


def _webhook_readings_statement() -> Any:
    """Built once: the observations (channel, time, value) of some channels of an operation."""
    global _WEBHOOK_READINGS
    if _WEBHOOK_READINGS is None:
        from sqlalchemy import bindparam, select

        from shared.db.models import Observation

        table = Observation.__table__
        _WEBHOOK_READINGS = (
            select(table.c.channel, table.c.observed_at, table.c.value)
            .where(
                table.c.operation_id == bindparam("operation_id"),
                table.c.channel.in_(bindparam("channels", expanding=True)),
            )
            .order_by(table.c.observed_at, table.c.id)
        )
    return _WEBHOOK_READINGS


def _bodies_by_reading(
    rows: Iterable[Any], wanted: Sequence[tuple[str, datetime | None]]
) -> dict[tuple[str, datetime | None], list[Any]]:
    """The event bodies of ``rows`` (channel, observed_at, value; by time, then id) that the
    wanted readings name; ``(channel, None)`` names the channel's latest reading."""
    found: dict[tuple[str, datetime | None], list[Any]] = {}
    for channel, observed_at, value in rows:
        bodies = value.get("events") if isinstance(value, Mapping) else None
        if not isinstance(bodies, list):
            continue
        if (channel, observed_at) in wanted:
            found[(channel, observed_at)] = bodies
        if (channel, None) in wanted:
            found[(channel, None)] = bodies  # no time given: the latest reading
    return found


def _from_latest(
    latest: Sequence[Any], wanted: Sequence[tuple[str, datetime | None]]
) -> dict[tuple[str, datetime | None], list[Any]] | None:
    """What :func:`_webhook_readings` answers, taken from the latest readings of each channel
    (the rows the decision was made from, ordered by id), or None when they cannot tell.

    Every stored reading of a channel at its latest time is among them, so a wanted reading at
    that time gets the same bodies; a reading at an earlier time, or a channel whose latest
    readings hold no events, needs the query."""
    newest: dict[str, datetime] = {}
    for row in latest:
        if row.channel not in newest or row.observed_at > newest[row.channel]:
            newest[row.channel] = row.observed_at
    channels = {channel for channel, _ in wanted}
    rows = [
        (row.channel, row.observed_at, row.value)
        for row in latest
        if row.channel in channels and row.observed_at == newest[row.channel]
    ]
    found = _bodies_by_reading(rows, wanted)
    for channel, observed_at in wanted:
        if observed_at is None:
            if (channel, None) not in found:
                return None
        elif observed_at != newest.get(channel):
            return None
    return found


def _webhook_readings(
    session: Session,
    operation: Operation,
    wanted: Sequence[tuple[str, datetime | None]],
    latest: Sequence[Any] | None = None,
) -> dict[tuple[str, datetime | None], list[Any]]:
    """The event bodies each wanted webhook reading counted, by (channel, observed_at)."""
    if not wanted:
        return {}
    if latest is not None:
        known = _from_latest(latest, wanted)
        if known is not None:
            return known
    rows = session.execute(
        _webhook_readings_statement(),
        {"operation_id": operation.id, "channels": sorted({channel for channel, _ in wanted})},
    ).all()
    return _bodies_by_reading(rows, wanted)


def _stored_events(
    session: Session, operation: Operation, bodies: Sequence[Any]
) -> dict[int, list[Any]]:
    """Stored events that may be the given bodies: those linked to the operation and those
    whose provider id the bodies name; keyed by a hash of their canonical JSON."""
    from sqlalchemy import or_, select

    from shared.db.models import Event, OperationEvent

    ids = sorted(
        {b["id"] for b in bodies if isinstance(b, Mapping) and isinstance(b.get("id"), str)}
    )
    linked = select(OperationEvent.event_pk).where(OperationEvent.operation_id == operation.id)
    events = session.execute(
        select(Event).where(
            Event.workspace_id == operation.workspace_id,
            or_(Event.id.in_(linked), Event.event_id.in_(ids)),
        )
    ).scalars()
    by_body: dict[int, list[Any]] = {}
    for event in events:
        by_body.setdefault(_body_key(event.body), []).append(event)
    return by_body


def _body_key(body: Any) -> int:
    try:
        return hash(canonical_json(body))
    except (TypeError, ValueError):
        return 0


def _evidence(
    session: Session,
    operation: Operation,
    decision: Mapping[str, Any],
    webhook: set[str],
    latest: Sequence[Any] | None = None,
) -> list[ReceiptEvidence]:
    """The receipt's evidence: readbacks by their digest, webhook readings expanded into one
    entry per stored event they counted (falling back to the reading's own digest when an
    event cannot be found). Two queries, whatever the number of channels."""
    entries = [e for e in decision.get("evidence") or () if isinstance(e, Mapping) and _counted(e)]
    wanted = [
        (str(e.get("channel")), _parse_time(e.get("observed_at")))
        for e in entries
        if str(e.get("channel")) in webhook
    ]
    readings = _webhook_readings(session, operation, wanted, latest)
    all_bodies = [b for bodies in readings.values() for b in bodies]
    stored = _stored_events(session, operation, all_bodies) if all_bodies else {}
    found: list[ReceiptEvidence] = []
    for entry in entries:
        channel, level = str(entry.get("channel")), str(entry.get("level"))
        observed_at = _parse_time(entry.get("observed_at"))
        bodies = readings.get((channel, observed_at)) if channel in webhook else None
        if bodies:
            matches = [
                next((e for e in stored.get(_body_key(b), []) if e.body == b), None) for b in bodies
            ]
            if all(m is not None for m in matches):
                found.extend(
                    ReceiptEvidence(
                        channel=channel,
                        level=level,
                        observed_at=m.received_at,
                        provider_timestamp=m.provider_timestamp,
                        digest=m.digest,
                    )
                    for m in matches
                    if m is not None
                )
                continue
        digest = entry.get("digest")
        found.append(
            ReceiptEvidence(
                channel=channel,
                level=level,
                observed_at=observed_at,
                provider_timestamp=_parse_time(entry.get("provider_timestamp")),
                digest=digest if isinstance(digest, str) else None,
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class _IssueStatements:
    # One read: the active signing key (key_id, has_private) joined with the operation's
    # current receipts (id; locked, oldest first). One row with NULLs when neither exists.
    current: Any
    insert: Any


_ISSUE: _IssueStatements | None = None


def _issue_statements() -> _IssueStatements:
    """Built once: constructing statements and their cache keys costs more than running them."""
    global _ISSUE
    if _ISSUE is None:
        from sqlalchemy import bindparam, insert, literal, select, true

        from shared.db.models import Receipt
        from shared.lifecycle.receipt_keys import active_key_columns

        table = cast("Table", Receipt.__table__)
        one = select(literal(1).label("one")).subquery("one")
        key = active_key_columns().subquery("active_key")
        current = (
            select(table.c.id, table.c.created_at)
            .where(table.c.operation_id == bindparam("operation_id"), table.c.current.is_(True))
            .with_for_update()
            .subquery("current_receipts")
        )
        _ISSUE = _IssueStatements(
            current=select(key.c.key_id, key.c.has_private, current.c.id)
            .select_from(one.outerjoin(key, true()).outerjoin(current, true()))
            .order_by(current.c.created_at),
            insert=insert(table),
        )
    return _ISSUE


def issue_receipt(
    session: Session,
    operation: Operation,
    *,
    now: datetime,
    settings: Settings | None = None,
    latest: Sequence[Any] | None = None,
) -> Receipt:
    """Sign and store the receipt of ``operation``'s final verdict (in the caller's transaction).

    Refuses an open operation (``ReceiptNotIssuable``). When the operation already has a current
    receipt, the new one supersedes it: the old row is kept as it was, only ``current`` drops.
    ``latest``: the latest readings the decision was made from, read in this transaction (rows
    with ``channel``, ``observed_at`` and ``value``, ordered by id); the webhook evidence is
    taken from them when they hold it, instead of read again.
    """
    from sqlalchemy import update
    from sqlalchemy.orm import make_transient_to_detached
    from sqlalchemy.orm.attributes import set_committed_value

    from shared.core.state_machine import is_final
    from shared.db.models import Receipt
    from shared.lifecycle.operations import contract_for

    verdict = operation.verdict
    if not operation.final or not is_final(operation.state):
        raise ReceiptNotIssuable(f"operation {operation.id} is open ({operation.state})")
    if verdict is None or verdict not in Verdict.__members__ or verdict == Verdict.PENDING:
        raise ReceiptNotIssuable(f"operation {operation.id} has no final verdict ({verdict})")

    session.flush()  # what autoflush would have sent before the reads below
    table = cast("Table", Receipt.__table__)
    statements = _issue_statements()
    read = session.execute(statements.current, {"operation_id": operation.id}).all()
    previous = [row.id for row in read if row.id is not None]
    active = None if read[0].key_id is None else (read[0].key_id, bool(read[0].has_private))
    contract = contract_for(session, operation)
    decision: Mapping[str, Any] = operation.decision or {}
    webhook = {c.name for c in contract.channels if c.verifier == "webhook"}
    evidence = _evidence(session, operation, decision, webhook, latest)
    decided_at = _utc(operation.decided_at or now)
    observed = [e.observed_at for e in evidence if e.observed_at is not None]
    valid_as_of = max(observed) if observed else decided_at
    receipt_id = _new_receipt_id()
    supersedes = previous[-1] if previous else None
    subject_id = operation.subject_id
    if subject_id is None:
        subject_id = decision.get("subject_id")
    body = build_receipt_body(
        receipt_id=receipt_id,
        operation_id=operation.id,
        workspace_id=operation.workspace_id,
        contract=ReceiptContract(
            id=operation.contract_id,
            version=operation.contract_version,
            hash=operation.contract_hash,
            completion_level=operation.completion_level,
        ),
        verdict=verdict,
        reason=operation.reason or "",
        class_=operation.verdict_class,
        decided_at=decided_at,
        valid_as_of=valid_as_of,
        subject={
            "type": contract.subject.type,
            "key": contract.subject.identity.key,
            "id": subject_id,
        },
        correlation=_correlation(decision),
        conditions=_conditions(decision),
        evidence=evidence,
        supersedes=supersedes,
        claimable=operation.state != OperationState.HUMAN_REVIEW,
        watch_until=(
            _utc(operation.watch_until)
            if operation.watch_until is not None and operation.state == OperationState.VERIFIED
            else None
        ),
    )
    key = active_signing_key(session, now=now, settings=settings, active=active)
    signature = sign_payload(key.private_key, signing_payload(body))
    if previous:
        # The old rows stop being current; their body and signature are never touched.
        session.execute(update(table).where(table.c.id.in_(previous)).values(current=False))
        for old_id in previous:
            loaded = session.identity_map.get(session.identity_key(Receipt, old_id))
            if loaded is not None:
                set_committed_value(loaded, "current", False)
    values = {
        "id": receipt_id,
        "operation_id": operation.id,
        "workspace_id": operation.workspace_id,
        "body": body,
        "signature": signature,
        "key_id": key.key_id,
        "supersedes": supersedes,
        "current": True,
        "created_at": now,
    }
    session.execute(statements.insert, values)
    # The stored row, as the session would hold it after a flush (no second INSERT).
    row = Receipt(**values)
    make_transient_to_detached(row)
    session.add(row)
    return row


# ---------------------------------------------------------------------------------------------
# Late contradicting evidence


def _latest(times: Sequence[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _is_newer(decision: Decision, receipt_body: Mapping[str, Any]) -> bool:
    """Is the contradicting evidence newer than the evidence that verified? Channel by channel.

    For each channel that decided the contradiction, compare it with the same channel's
    evidence in the receipt (clocks of different channels are never compared): provider time
    first — strictly older means an earlier state delivered late, which contradicts nothing
    (safety rule 5) — then, on equal or unknown provider times, the time it was read. The
    contradiction is newer when no deciding channel is older and at least one is newer. A
    channel the receipt did not cite is compared by reading time with its ``valid_as_of``.
    """
    deciding = [e for e in decision.evidence if e.used] or [
        e for e in decision.evidence if e.status == "ok" and e.fresh
    ]
    cited = [e for e in receipt_body.get("evidence") or () if isinstance(e, Mapping)]
    valid_as_of = _parse_time(receipt_body.get("valid_as_of"))
    newer = False
    for entry in deciding:
        same = [e for e in cited if e.get("channel") == entry.channel]
        seen = _parse_time(entry.observed_at)
        if not same:
            if seen is not None and valid_as_of is not None:
                if seen <= valid_as_of:
                    return False
                newer = True
            continue
        new_provider = _parse_time(entry.provider_timestamp)
        old_provider = _latest([_parse_time(e.get("provider_timestamp")) for e in same])
        if new_provider is not None and old_provider is not None:
            if new_provider < old_provider:
                return False
            if new_provider > old_provider:
                newer = True
                continue
        old_seen = _latest([_parse_time(e.get("observed_at")) for e in same])
        if seen is not None and old_seen is not None:
            if seen <= old_seen:
                return False
            newer = True
    return newer


class CheckOutcome(IntEnum):
    """What :func:`check_late_evidence` did."""

    NOT_APPLICABLE = 0  # not a VERIFIED operation, or the decision does not contradict it
    OLDER_EVIDENCE = 1  # contradicting evidence that predates the verifying evidence: ignored
    FLAGGED = 2  # moved to HUMAN_REVIEW; a superseding receipt was issued
    LOST_RACE = 3  # another writer changed the operation first; re-read and call again
    UNREAD = 4  # a recheck that could not read: its next try is scheduled


def check_late_evidence(
    session: Session,
    operation: Operation,
    decision: Decision,
    *,
    now: datetime,
    settings: Settings | None = None,
) -> tuple[CheckOutcome, Receipt | None]:
    """Handle a new decision for an operation that is already final.

    Only a VERIFIED operation can be contradicted late. When ``decision`` (the engine's answer
    over the evidence now stored) is a final FAILED or CONTRADICTED, and that evidence is newer
    than the evidence behind the current receipt, the operation goes VERIFIED → HUMAN_REVIEW
    with verdict CONTRADICTED, reason ``late_contradiction``; the transition records the
    engine's verdict and reason, and the receipt it issues supersedes the VERIFIED one (which
    stays valid for its ``valid_as_of``). Runs in the caller's transaction; returns the outcome
    and the new receipt when one was issued.
    """
    from shared.lifecycle.operations import change_state

    if operation.state != OperationState.VERIFIED or operation.verdict != Verdict.VERIFIED:
        return CheckOutcome.NOT_APPLICABLE, None
    if not decision.final or decision.verdict not in _CONTRADICTING:
        return CheckOutcome.NOT_APPLICABLE, None
    previous = current_receipt(session, operation.id)
    if previous is not None and not _is_newer(decision, previous.body):
        return CheckOutcome.OLDER_EVIDENCE, None
    details = {
        "evidence_verdict": decision.verdict.value,
        "evidence_reason": decision.reason,
        "evidence_class": decision.class_,
        "supersedes": previous.id if previous is not None else None,
    }
    changed = change_state(
        session,
        operation,
        to_state=OperationState.HUMAN_REVIEW,
        verdict=Verdict.CONTRADICTED.value,
        reason=LATE_CONTRADICTION,
        verdict_class=LATE_CONTRADICTION_CLASS,
        final=True,
        decision=decision,
        cause=LATE_CONTRADICTION,
        now=now,
        details=details,
        changes={"next_observation_at": None, "enqueued_at": None},
    )
    if not changed:
        return CheckOutcome.LOST_RACE, None
    receipt = current_receipt(session, operation.id)
    if receipt is None or (previous is not None and receipt.id == previous.id):
        receipt = issue_receipt(session, operation, now=now, settings=settings)
    return CheckOutcome.FLAGGED, receipt


# ---------------------------------------------------------------------------------------------
# Rechecking a watched VERIFIED operation
#
# A VERIFIED operation is no longer observed, but it is watched (``shared.lifecycle.watch``): an
# event that names it schedules one more observation (a new fence, due now). The observer reads an
# operation for which :func:`needs_recheck` holds even though it is final, and the evaluation of
# such an operation goes through :func:`recheck_verified`: the engine decides over the fresh
# readings and :func:`check_late_evidence` acts on the answer. A recheck that could not read
# (the provider unavailable, a timeout, a 429) is retried on the contract's schedule until it
# reads or the watch ends; the sweeper re-sends a recheck whose message was lost, as it does
# for any overdue observation.

_UNREAD = frozenset({"unavailable", "error"})


def needs_recheck(operation: Operation) -> bool:
    """A VERIFIED operation with an observation scheduled: a late event asked for a recheck."""
    return (
        operation.state == OperationState.VERIFIED
        and operation.final
        and operation.next_observation_at is not None
    )


def _retry_recheck(session: Session, operation: Operation, timing: Any, now: datetime) -> bool:
    """Schedule the next try of a recheck that could not read, on the contract's backoff, while
    the watch lasts; the observe message is sent after commit. False when the watch is over."""
    from sqlalchemy import event as orm_event
    from sqlalchemy import update

    from shared.core.schedule import recheck_delay
    from shared.db.models import Operation as OperationRow

    tries = (operation.rechecks or 0) + 1
    due = now + timedelta(milliseconds=recheck_delay(timing, tries))
    if operation.watch_until is None or due >= _utc(operation.watch_until):
        return False
    fence = session.execute(
        update(OperationRow)
        .where(
            OperationRow.id == operation.id,
            OperationRow.fence == operation.fence,
            OperationRow.state == OperationState.VERIFIED.value,
        )
        .values(
            fence=OperationRow.fence + 1, next_observation_at=due, enqueued_at=now, rechecks=tries
        )
        .returning(OperationRow.fence)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if fence is None:
        return True  # another recheck moved the fence on meanwhile: it owns the schedule
    operation_id, countdown = operation.id, (due - now).total_seconds()

    def dispatch(_session: Session) -> None:
        from shared.lifecycle.scheduling import dispatch_observe

        dispatch_observe(operation_id, fence, countdown_s=countdown)

    orm_event.listen(session, "after_commit", dispatch, once=True)
    return True


def recheck_verified(
    session: Session,
    operation: Operation,
    observations: Sequence[Any],
    *,
    now: datetime,
    settings: Settings | None = None,
) -> tuple[CheckOutcome, Receipt | None]:
    """Evaluate a rechecked VERIFIED operation over its latest ``observations`` (core values).

    Nothing happens until the reading of the operation's current fence is stored. A
    contradiction flags the operation (see :func:`check_late_evidence`). A reading that could
    not be made (a channel ``unavailable`` or ``error``) schedules the next try while the watch
    lasts (outcome ``UNREAD``); otherwise the recheck marker is cleared.
    """
    from sqlalchemy import select, update

    from shared.core.engine import decide
    from shared.db.models import Observation as ObservationRow
    from shared.db.models import Operation as OperationRow
    from shared.lifecycle.operations import contract_for, facts_for

    if not needs_recheck(operation):
        return CheckOutcome.NOT_APPLICABLE, None
    read = session.execute(
        select(ObservationRow.id)
        .where(
            ObservationRow.operation_id == operation.id,
            ObservationRow.fence == operation.fence,
        )
        .limit(1)
    ).first()
    if read is None:
        # The recheck reading is not stored yet (another message woke the evaluation): the
        # observe task of this fence evaluates again once it has read.
        return CheckOutcome.NOT_APPLICABLE, None
    contract = contract_for(session, operation)
    decision = decide(contract, facts_for(operation), observations, now)
    outcome, receipt = check_late_evidence(session, operation, decision, now=now, settings=settings)
    if outcome is CheckOutcome.FLAGGED:
        return outcome, receipt
    if any(e.status in _UNREAD for e in decision.evidence) and _retry_recheck(
        session, operation, contract.timing, now
    ):
        return CheckOutcome.UNREAD, None
    session.execute(
        update(OperationRow)
        .where(OperationRow.id == operation.id, OperationRow.fence == operation.fence)
        .values(next_observation_at=None, enqueued_at=None, rechecks=0)
        .execution_options(synchronize_session=False)
    )
    return outcome, receipt


# ---------------------------------------------------------------------------------------------
# Checking a receipt document offline


class Verification(IntEnum):
    """Exit codes of ``provely receipts verify``."""

    VALID = 0
    TAMPERED = 1
    UNCHECKABLE = 2


@dataclass(frozen=True, slots=True)
class VerificationResult:
    status: Verification
    reason: str
    receipt_id: str | None = None
    operation_id: str | None = None
    verdict: str | None = None
    key_id: str | None = None
    key_status: str | None = None
    supersedes: str | None = None
    completion_level: str | None = None
    safe_to_claim_complete: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "result": self.status.name.lower(),
            "exit_code": int(self.status),
            "reason": self.reason,
            "receipt_id": self.receipt_id,
            "operation_id": self.operation_id,
            "verdict": self.verdict,
            "key_id": self.key_id,
            "key_status": self.key_status,
            "supersedes": self.supersedes,
            "completion_level": self.completion_level,
            "safe_to_claim_complete": self.safe_to_claim_complete,
        }


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


def verify_receipt_document(data: bytes | str, keyring: KeyRing) -> VerificationResult:
    """Check a receipt document against ``keyring``: valid (0), tampered (1), cannot check (2).

    Order matters for the answer: the document must be readable and name a known key before the
    signature can say anything; only a signature that matches makes the body's content worth
    reading (its version).
    """
    try:
        document = parse_receipt_document(data)
    except MalformedReceipt as exc:
        return VerificationResult(Verification.UNCHECKABLE, f"malformed receipt: {exc}")
    if document.alg != ALGORITHM:
        return VerificationResult(
            Verification.UNCHECKABLE,
            f"unsupported signature algorithm {document.alg!r} (expected {ALGORITHM})",
            key_id=document.key_id,
        )
    key = keyring.get(document.key_id)
    if key is None:
        return VerificationResult(
            Verification.UNCHECKABLE,
            f"unknown key {document.key_id}: it is not in the key list",
            key_id=document.key_id,
        )
    body = document.body
    found = body.get("contract")
    contract: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    claim = body.get("safe_to_claim_complete")

    def result(status: Verification, reason: str) -> VerificationResult:
        return VerificationResult(
            status,
            reason,
            receipt_id=_text(body, "id"),
            operation_id=_text(body, "operation_id"),
            verdict=_text(body, "verdict"),
            key_id=key.key_id,
            key_status=key.status,
            supersedes=_text(body, "supersedes"),
            completion_level=_text(contract, "completion_level"),
            safe_to_claim_complete=claim if isinstance(claim, bool) else None,
        )

    try:
        # The version (inside the signed body) names the canonical form: 1 sorted json.dumps,
        # 2 RFC 8785. Changing it changes the signed bytes, so it cannot pick a weaker form.
        payload = signing_payload(body)
    except MalformedReceipt as exc:
        return result(Verification.UNCHECKABLE, f"cannot check: {exc}")
    if not verify_payload(key.public_key, payload, document.signature):
        return result(
            Verification.TAMPERED,
            f"tampered: the signature does not match the receipt under key {key.key_id}",
        )
    key_note = key.status
    if key.status == "retired" and key.retired_at:
        key_note = f"retired {key.retired_at}"
    summary = (
        f"valid: receipt {_text(body, 'id')} of {_text(body, 'operation_id')} "
        f"({_text(body, 'verdict')}) signed by key {key.key_id} ({key_note})"
    )
    if _text(body, "supersedes"):
        summary += f"; it supersedes {_text(body, 'supersedes')}"
    summary += (
        f"; completion level {_text(contract, 'completion_level')}, "
        f"safe_to_claim_complete={str(claim).lower()}"
    )
    return result(Verification.VALID, summary)
