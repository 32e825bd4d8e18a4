"""Late evidence about a VERIFIED operation: the recheck it asks for, and the contradiction.

A VERIFIED operation is no longer observed, but it is watched (``shared.lifecycle.watch``): an
event that names it schedules one more observation (a new fence, due now). The observer reads
an operation for which :func:`needs_recheck` holds even though it is final, and the evaluation
of such an operation goes through :func:`recheck_verified`: the engine decides over the fresh
readings and :func:`check_late_evidence` acts on the answer. A recheck that could not read (the
provider unavailable, a timeout, a 429) is retried on the contract's schedule until it reads or
the watch ends; the sweeper re-sends a recheck whose message was lost, as it does for any
overdue observation.

:func:`check_late_evidence` is what a worker calls when an operation that is already VERIFIED
gets a new decision: evidence that contradicts it, and is newer than the evidence that verified
it, moves the operation to HUMAN_REVIEW (cause ``late_contradiction``) and that transition
issues the superseding receipt (``shared.lifecycle.receipts``). Evidence contradicts a VERIFIED
when the decision is a final FAILED or CONTRADICTED, or when a rule the contract marks
``supersedes_verified`` decided it (``Decision.supersedes``: a signed failure event of the
provider, newer than the success evidence, while a lagging readback still shows success).

A watched FAILED operation (one whose verdict allowed the action again, ``shared.lifecycle.watch``)
is rechecked the same way. Its advice stands only while nothing contradicts it: a recheck that
reads and no longer decides FAILED (a refund listed or announced under its idempotency key, a
readback that shows it succeeded) is evidence that the effect may have happened, and moves it to
HUMAN_REVIEW ``late_contradiction`` with a superseding receipt — the retry guidance becomes
``never``.

A recheck whose reading went backwards (an ``inconsistent`` observation,
``shared.evidence.backwards``) has not read the provider: it is retried like one that could not
read. When the watch ends on such a reading, the verdict is not settled by it: the operation
goes to a person (HUMAN_REVIEW, reason ``inconsistent_reading``, a superseding receipt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from shared.core.types import Decision, OperationState, Verdict
from shared.lifecycle import messages
from shared.lifecycle.receipt_evidence import as_utc, parse_time
from shared.lifecycle.receipts import current_receipt
from shared.lifecycle.scheduling import schedule_recheck
from shared.lifecycle.steps import (
    INCONSISTENT_AT_WATCH_END,
    LATE_CONTRADICTION,
    LATE_CONTRADICTION_CLASS,
    flag_late_contradiction,
    refer_inconsistent,
)
from shared.lifecycle.watch import WATCHED_STATES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import Operation, Receipt
    from shared.runtime.settings import Settings

__all__ = [
    "INCONSISTENT_AT_WATCH_END",
    "LATE_CONTRADICTION",
    "LATE_CONTRADICTION_CLASS",
    "CheckOutcome",
    "check_late_evidence",
    "needs_recheck",
    "recheck_verified",
]

_CONTRADICTING = frozenset({Verdict.FAILED, Verdict.CONTRADICTED})
_UNREAD = frozenset({"unavailable", "error", "inconsistent"})
_UNREAD_AFTER_FAILED = frozenset({"unavailable", "inconsistent"})


def _could_not_read(operation: Operation, decision: Decision) -> bool:
    """Whether a channel of the recheck could not be read, so that the recheck is tried again:
    ``unavailable``, ``error`` or ``inconsistent`` (a reading that went backwards) after
    VERIFIED; only ``unavailable`` (transient) or ``inconsistent`` after FAILED, whose readbacks
    may never resolve (a rejected action's refund has no id to read)."""
    unread = _UNREAD if operation.state == OperationState.VERIFIED else _UNREAD_AFTER_FAILED
    return any(e.status in unread for e in decision.evidence)


def _contradicts(operation: Operation, decision: Decision) -> bool:
    """Whether ``decision`` contradicts the operation's watched final verdict: a final FAILED or
    CONTRADICTED, or a ``supersedes_verified`` rule, against a VERIFIED; against a FAILED, any
    answer but FAILED made while every channel could be read (a provider outage proves nothing;
    that recheck is tried again)."""
    if operation.state == OperationState.VERIFIED and operation.verdict == Verdict.VERIFIED:
        return (decision.final and decision.verdict in _CONTRADICTING) or decision.supersedes
    if operation.state == OperationState.FAILED and operation.verdict == Verdict.FAILED:
        return decision.verdict is not Verdict.FAILED and not _could_not_read(operation, decision)
    return False


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
    valid_as_of = parse_time(receipt_body.get("valid_as_of"))
    newer = False
    for entry in deciding:
        same = [e for e in cited if e.get("channel") == entry.channel]
        seen = parse_time(entry.observed_at)
        if not same:
            if seen is not None and valid_as_of is not None:
                if seen <= valid_as_of:
                    return False
                newer = True
            continue
        new_provider = parse_time(entry.provider_timestamp)
        old_provider = _latest([parse_time(e.get("provider_timestamp")) for e in same])
        if new_provider is not None and old_provider is not None:
            if new_provider < old_provider:
                return False
            if new_provider > old_provider:
                newer = True
                continue
        old_seen = _latest([parse_time(e.get("observed_at")) for e in same])
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
    INCONSISTENT = 5  # the watch ended on a reading that went backwards: a person decides


def check_late_evidence(
    session: Session,
    operation: Operation,
    decision: Decision,
    *,
    now: datetime,
    settings: Settings | None = None,
) -> tuple[CheckOutcome, Receipt | None]:
    """Handle a new decision for an operation that is already final.

    Only a watched operation can be contradicted late: a VERIFIED one as described here, a
    FAILED one by any decision that is not FAILED (:func:`_contradicts`), with the same
    transition. When ``decision`` (the engine's answer
    over the evidence now stored) is a final FAILED or CONTRADICTED, and that evidence is newer
    than the evidence behind the current receipt, the operation goes VERIFIED → HUMAN_REVIEW
    with verdict CONTRADICTED, reason ``late_contradiction``; the transition records the
    engine's verdict and reason, and the receipt it issues supersedes the VERIFIED one (which
    stays valid for its ``valid_as_of``). Runs in the caller's transaction; returns the outcome
    and the new receipt when one was issued.
    """
    if not _contradicts(operation, decision):
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
    receipt = flag_late_contradiction(
        session, operation, decision, details=details, now=now, settings=settings
    )
    if receipt is None:
        return CheckOutcome.LOST_RACE, None
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


def needs_recheck(operation: Operation) -> bool:
    """A watched (VERIFIED or FAILED) operation with an observation scheduled: a late event
    asked for a recheck."""
    return (
        operation.state in WATCHED_STATES
        and operation.final
        and operation.next_observation_at is not None
    )


def _retry_recheck(session: Session, operation: Operation, timing: Any, now: datetime) -> bool:
    """Schedule the next try of a recheck that could not read, on the contract's backoff, while
    the watch lasts; the observe message is sent after commit. False when the watch is over."""
    from shared.core.schedule import recheck_delay

    tries = (operation.rechecks or 0) + 1
    due = now + timedelta(milliseconds=recheck_delay(timing, tries))
    if operation.watch_until is None or due >= as_utc(operation.watch_until):
        return False
    fence = schedule_recheck(session, operation, due=due, rechecks=tries, now=now)
    if fence is None:
        return True  # another recheck moved the fence on meanwhile: it owns the schedule
    operation_id, countdown = operation.id, (due - now).total_seconds()
    messages.after_commit(
        session, lambda: messages.observe(operation_id, fence, countdown_s=countdown)
    )
    return True


def _to_person(
    session: Session,
    operation: Operation,
    decision: Decision,
    *,
    now: datetime,
    settings: Settings | None,
) -> tuple[CheckOutcome, Receipt | None]:
    """The watch ended on a reading that went backwards: a person decides (HUMAN_REVIEW)."""
    previous = current_receipt(session, operation.id)
    receipt = refer_inconsistent(
        session,
        operation,
        decision,
        details={"supersedes": previous.id if previous is not None else None},
        now=now,
        settings=settings,
    )
    if receipt is None:
        return CheckOutcome.LOST_RACE, None
    return CheckOutcome.INCONSISTENT, receipt


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
    not be made (a channel ``unavailable`` or ``error``), or that went backwards
    (``inconsistent``), schedules the next try while the watch lasts (outcome ``UNREAD``); a
    watch that ends on an inconsistent reading goes to a person (``INCONSISTENT``); otherwise
    the recheck marker is cleared.
    """
    from sqlalchemy import select, update

    from shared.core.engine import decide
    from shared.db.models import Observation as ObservationRow
    from shared.db.models import Operation as OperationRow
    from shared.lifecycle.contract_cache import cached_contract_for
    from shared.lifecycle.operations import facts_for

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
    contract = cached_contract_for(session, operation)  # pinned by the operation's hash
    decision = decide(contract, facts_for(operation), observations, now)
    outcome, receipt = check_late_evidence(session, operation, decision, now=now, settings=settings)
    if outcome is CheckOutcome.FLAGGED:
        return outcome, receipt
    if _could_not_read(operation, decision) and _retry_recheck(
        session, operation, contract.timing, now
    ):
        return CheckOutcome.UNREAD, None
    if any(e.status == "inconsistent" for e in decision.evidence):
        return _to_person(session, operation, decision, now=now, settings=settings)
    session.execute(
        update(OperationRow)
        .where(OperationRow.id == operation.id, OperationRow.fence == operation.fence)
        .values(next_observation_at=None, enqueued_at=None, rechecks=0)
        .execution_options(synchronize_session=False)
    )
    return outcome, receipt
