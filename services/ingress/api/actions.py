"""What the agent API does to an operation's action: record the action report, and verify again.

Each function works in the caller's transaction and returns what must happen after commit
(the fence of an observation to dispatch). State changes go through
``shared.lifecycle.operations.change_state`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingress.api.lookup import state_conflict
from services.ingress.api.schemas import ActionReportIn
from services.ingress.problems import ApiError, FieldProblem
from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.expressions import UNKNOWN, resolve
from shared.core.retry import retry_guidance
from shared.core.types import ACTION_REJECTED_PHASE, OperationState, Verdict
from shared.db.models import Operation
from shared.intake.correlate import correlate_pending_events
from shared.intake.ignored import name_ignored
from shared.intake.results import IntakeResult
from shared.lifecycle.contracts import contract_for, provider_skill
from shared.lifecycle.operations import facts_for
from shared.lifecycle.scheduling import observation_schedule, wake
from shared.lifecycle.steps import accept_action, report_action_started, start_observing
from shared.runtime.settings import Settings

__all__ = ["Scheduled", "record_action", "request_verification"]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """An observation to dispatch after commit (``fence`` None: nothing to send), and the
    events linked now that cannot count, to be counted after commit (``ignored``)."""

    fence: int | None = None
    countdown_s: float = 0.0
    ignored: IntakeResult | None = None

    @property
    def linked(self) -> bool:
        """Whether the report linked events to the operation (or made a weak link strong)."""
        return self.ignored is not None and bool(self.ignored.links)


def _subject_id(contract: Contract, op: Operation) -> str | None:
    value = resolve(contract.subject.identity.expr, build_context(contract, facts_for(op)))
    if value is UNKNOWN or value is None or isinstance(value, dict | list):
        return None
    return str(value)


def _report_cause(report: ActionReportIn, changes: dict[str, Any]) -> str:
    if changes.get("action_phase") == ACTION_REJECTED_PHASE:
        return "action_rejection_reported"
    return "action_error" if report.phase == "error" else "observation_scheduled"


def _must_change(ok: bool, op: Operation) -> None:
    if not ok:
        raise state_conflict(
            op, "the operation changed while this report was recorded; read it again"
        )


def record_action(
    session: Session,
    op: Operation,
    report: ActionReportIn,
    *,
    settings: Settings,
    now: datetime,
) -> Scheduled:
    """Apply one action report; 409 when it comes twice or after the action was reported."""
    state = OperationState(op.state)
    if op.final:
        raise state_conflict(op, f"the operation is final ({op.state}); no report is accepted")
    if report.phase == "started":
        if state is not OperationState.CREATED:
            raise state_conflict(op, f"the action was already reported (state {op.state})")
        _must_change(report_action_started(session, op, now=now, settings=settings), op)
        return Scheduled()
    if state not in (OperationState.CREATED, OperationState.ACTION_STARTED):
        raise state_conflict(op, f"the action was already reported (state {op.state})")
    if report.phase == "result":
        if report.result is None:
            raise ApiError(
                422,
                "invalid-request",
                "phase result needs the provider's response in `result`",
                errors=[FieldProblem(field="result", message="is required for phase result")],
            )
        if report.http_status is not None and report.http_status >= 400:
            raise ApiError(
                422,
                "invalid-request",
                "an HTTP status of 400 or more is an error: report it with phase error",
                errors=[FieldProblem(field="http_status", message="must be below 400")],
            )
    contract = contract_for(session, op)
    base: dict[str, Any] = {
        "action_phase": report.phase,
        "action_result": report.result if report.phase == "result" else None,
        "action_error": report.error if report.phase == "error" else None,
        "action_http_status": report.http_status,
        "action_reported_at": now,
        "deadline": now + timedelta(milliseconds=contract.timing.timeout_ms),
    }
    if report.phase == "error":
        skill = provider_skill(contract.skill.provider)
        if skill is not None and skill.rejects(report.http_status, report.error):
            # The agent's word (E1): observed like any error until independent evidence
            # confirms that nothing was created (the contract's ``rejection`` section).
            base["action_phase"] = ACTION_REJECTED_PHASE
    delay_ms = contract.timing.initial_delay_ms
    # The first observation is scheduled by the → OBSERVING update itself: the row is locked
    # since it was loaded, so no other writer moves the fence before the commit.
    schedule = observation_schedule(op, delay_ms=delay_ms, now=now)
    if report.phase == "result":
        for key, value in base.items():
            set_committed_value(op, key, value)  # so the subject identity sees the result
        base["subject_id"] = _subject_id(contract, op)
        _must_change(
            accept_action(
                session,
                op,
                changes=base | schedule,
                http_status=report.http_status,
                cause="observation_scheduled",
                now=now,
                settings=settings,
            ),
            op,
        )
    else:
        _must_change(
            start_observing(
                session,
                op,
                cause=_report_cause(report, base),
                details={"http_status": report.http_status} if report.phase == "error" else None,
                changes=base | schedule,
                now=now,
                settings=settings,
            ),
            op,
        )
    # Events that arrived before this report (a refund.created carrying the operation id as its
    # idempotency key, say) are linked now, and an operation without a subject id learns it.
    linked = IntakeResult(event_pk=None, duplicate=False)
    correlate_pending_events(session, op, now, result=linked)
    name_ignored(session, [linked])
    return Scheduled(schedule["fence"], delay_ms / 1000.0, ignored=linked)


def request_verification(session: Session, op: Operation, *, now: datetime) -> Scheduled:
    """Observe now, where the retry table allows the agent to retry the verification."""
    guidance = retry_guidance(op.verdict or Verdict.PENDING.value, op.reason, op.state)
    if op.final or guidance.verification != "yes":
        raise state_conflict(
            op,
            "the retry table does not allow retrying the verification for "
            f"{op.verdict} ({op.reason}) in state {op.state}",
        )
    fence = wake(session, op.id, now=now)
    if fence is None:
        raise state_conflict(op, "the operation is not being observed")
    return Scheduled(fence, 0.0)
