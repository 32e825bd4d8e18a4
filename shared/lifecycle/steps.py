"""The named steps of an operation's life: every state change Provely makes is one of these.

Each step is one transaction's worth of work in the caller's transaction (the step never
commits): it moves the operation with ``shared.lifecycle.operations.change_state`` (fenced by
the operation's version) and says whether it issues a receipt. A step returns False (or None)
when another writer changed the operation first; nothing is written then and the caller re-reads
the operation and decides again.

- :func:`report_action_started` CREATED → ACTION_STARTED; no receipt (the action report);
- :func:`accept_action` CREATED or ACTION_STARTED → ACTION_ACCEPTED → OBSERVING; no receipt
  (the action report);
- :func:`start_observing` → OBSERVING once the action was reported; no receipt (the action
  report);
- :func:`apply_decision` an open state → the decision's state; the receipt when the decision is
  final (the verdict service);
- :func:`expire` CREATED or ACTION_STARTED → EXPIRED; a receipt (the sweeper's action window);
- :func:`flag_late_contradiction` VERIFIED or FAILED → HUMAN_REVIEW; the superseding receipt
  (a recheck, ``late_evidence``);
- :func:`refer_inconsistent` VERIFIED or FAILED → HUMAN_REVIEW; the superseding receipt (a
  recheck whose watch ended on a reading that went backwards, ``late_evidence``).

ACTION_ACCEPTED is never committed: :func:`accept_action` passes through it to OBSERVING in one
write of the row (both transitions in the audit chain). A person's review of an
operation in HUMAN_REVIEW records a transition without changing the state (the ingress's
``review``), so it is no step of this module.

Errors: ``IllegalTransition`` (``shared.core.state_machine``) when the lifecycle forbids the move;
the receipt's errors (``shared.lifecycle.receipts``) for a step that issues one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.core.engine import state_after
from shared.core.types import Decision, OperationState, Verdict
from shared.lifecycle.operations import Passage, change_state

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import Operation, Receipt
    from shared.runtime.settings import Settings

__all__ = [
    "AWAITING_ACTION",
    "AWAITING_EVIDENCE",
    "INCONSISTENT_AT_WATCH_END",
    "INCONSISTENT_READING",
    "LATE_CONTRADICTION",
    "LATE_CONTRADICTION_CLASS",
    "accept_action",
    "apply_decision",
    "expire",
    "flag_late_contradiction",
    "refer_inconsistent",
    "report_action_started",
    "start_observing",
]

AWAITING_ACTION = "awaiting_action_report"
"""The reason of an operation whose action was not reported yet."""
AWAITING_EVIDENCE = "awaiting_evidence"
"""The reason of an operation observed since its action was reported, before any decision."""
LATE_CONTRADICTION = "late_contradiction"
LATE_CONTRADICTION_CLASS = "late contradicting evidence"
INCONSISTENT_AT_WATCH_END = "inconsistent_at_watch_end"
"""The cause of the move to a person when a watch ends on a reading that went backwards."""
INCONSISTENT_READING = "inconsistent_reading"

_UNSCHEDULED = {"next_observation_at": None, "enqueued_at": None}
"""A final operation is observed no more (a recheck schedules it again while it is watched)."""


def report_action_started(
    session: Session, op: Operation, *, now: datetime, settings: Settings
) -> bool:
    """The agent says it is about to act: CREATED → ACTION_STARTED. No receipt."""
    return (
        change_state(
            session,
            op,
            receipt=False,
            to_state=OperationState.ACTION_STARTED,
            verdict=Verdict.PENDING.value,
            reason=AWAITING_ACTION,
            verdict_class=None,
            final=False,
            decision=None,
            cause="action_started",
            now=now,
            changes={"action_phase": "started"},
            settings=settings,
        )
        is not None
    )


def accept_action(
    session: Session,
    op: Operation,
    *,
    changes: Mapping[str, Any],
    http_status: int | None,
    cause: str,
    now: datetime,
    settings: Settings,
) -> bool:
    """The agent reports the provider's result: → ACTION_ACCEPTED (cause ``action_result``)
    → OBSERVING awaiting evidence (``cause``), with the report's columns and the first
    observation's schedule (``changes``). One UPDATE of the row: ACTION_ACCEPTED is never
    committed, so it is passed through rather than written, its transition still appended.
    No receipt."""
    accepted = Passage(
        state=OperationState.ACTION_ACCEPTED,
        verdict=Verdict.PENDING.value,
        reason="action_accepted",
        cause="action_result",
        details={"http_status": http_status},
    )
    return (
        change_state(
            session,
            op,
            receipt=False,
            to_state=OperationState.OBSERVING,
            verdict=Verdict.PENDING.value,
            reason=AWAITING_EVIDENCE,
            verdict_class=None,
            final=False,
            decision=None,
            cause=cause,
            now=now,
            changes=changes,
            settings=settings,
            through=accepted,
        )
        is not None
    )


def start_observing(
    session: Session,
    op: Operation,
    *,
    cause: str,
    details: dict[str, Any] | None,
    changes: Mapping[str, Any] | None,
    now: datetime,
    settings: Settings,
) -> bool:
    """The action was reported (a result, an error or a rejection): → OBSERVING, awaiting
    evidence; the caller schedules the first observation in the same transaction. No
    receipt."""
    return (
        change_state(
            session,
            op,
            receipt=False,
            to_state=OperationState.OBSERVING,
            verdict=Verdict.PENDING.value,
            reason=AWAITING_EVIDENCE,
            verdict_class=None,
            final=False,
            decision=None,
            cause=cause,
            now=now,
            details=details,
            changes=changes,
            settings=settings,
        )
        is not None
    )


def apply_decision(
    session: Session,
    op: Operation,
    decision: Decision,
    *,
    cause: str,
    changes: Mapping[str, Any],
    now: datetime,
    readings: Sequence[Any] | None,
) -> bool:
    """The engine decided an open operation: → the decision's state (``state_after``), with its
    verdict and the decision stored. Issues the receipt when the decision is final, from the
    ``readings`` it was made on (read in this transaction)."""
    return (
        change_state(
            session,
            op,
            receipt=decision.final,
            to_state=state_after(decision),
            verdict=decision.verdict.value,
            reason=decision.reason,
            verdict_class=decision.class_,
            final=decision.final,
            decision=decision,
            cause=cause,
            now=now,
            changes=changes,
            readings=readings,
        )
        is not None
    )


def expire(session: Session, op: Operation, decision: Decision, *, now: datetime) -> bool:
    """The action was not reported within the action window: → EXPIRED with ``decision``'s
    verdict and reason (cause ``action_window``), no longer scheduled. Issues the receipt."""
    return (
        change_state(
            session,
            op,
            receipt=True,
            to_state=OperationState.EXPIRED,
            verdict=decision.verdict.value,
            reason=decision.reason,
            verdict_class=decision.class_,
            final=True,
            decision=decision,
            cause="action_window",
            now=now,
            changes=_UNSCHEDULED,
        )
        is not None
    )


def flag_late_contradiction(
    session: Session,
    op: Operation,
    decision: Decision,
    *,
    details: dict[str, Any],
    now: datetime,
    settings: Settings | None,
) -> Receipt | None:
    """Evidence newer than a watched verdict's contradicts it: VERIFIED or FAILED →
    HUMAN_REVIEW, verdict CONTRADICTED, reason and cause ``late_contradiction``, the engine's
    answer kept in the transition's ``details``. Issues the receipt that supersedes the watched
    verdict's and returns it (None: another writer changed the operation first)."""
    changed = change_state(
        session,
        op,
        receipt=True,
        to_state=OperationState.HUMAN_REVIEW,
        verdict=Verdict.CONTRADICTED.value,
        reason=LATE_CONTRADICTION,
        verdict_class=LATE_CONTRADICTION_CLASS,
        final=True,
        decision=decision,
        cause=LATE_CONTRADICTION,
        now=now,
        details=details,
        changes=_UNSCHEDULED,
        settings=settings,
    )
    return None if changed is None else changed.receipt


def refer_inconsistent(
    session: Session,
    op: Operation,
    decision: Decision,
    *,
    details: dict[str, Any],
    now: datetime,
    settings: Settings | None,
) -> Receipt | None:
    """A watch ended on a reading that went backwards: VERIFIED or FAILED → HUMAN_REVIEW,
    verdict UNVERIFIABLE, reason ``inconsistent_reading`` (cause
    ``inconsistent_at_watch_end``): a person decides. Issues the superseding receipt and returns
    it (None: another writer changed the operation first)."""
    changed = change_state(
        session,
        op,
        receipt=True,
        to_state=OperationState.HUMAN_REVIEW,
        verdict=Verdict.UNVERIFIABLE.value,
        reason=INCONSISTENT_READING,
        verdict_class=None,
        final=True,
        decision=decision,
        cause=INCONSISTENT_AT_WATCH_END,
        now=now,
        details=details,
        changes=_UNSCHEDULED,
        settings=settings,
    )
    return None if changed is None else changed.receipt
