"""``evaluate(operation_id)``: decide an operation and schedule what comes next.

load → ``decide`` (the pure core) → write the state through ``change_state`` fenced by the
operation's version (the receipt is issued there when the verdict is final) → when still open,
schedule the next observation in the same transaction → after commit, send its message.

Scheduling rules (numbers from the contract's ``timing``):

- the next observation is scheduled only when the current fence has been observed; otherwise an
  observation is already pending (a wake or the sweeper moved the fence) and it will evaluate;
- observation ``n = attempts + 1`` waits ``next_observation_delay(timing, n)`` (plus jitter
  that only lengthens, from the settings) counted from the latest observation of the fence, so
  the recorded observation times follow the formula;
- a wake's reading before the schedule's slot (``operations.slot_at``) is extra: it does not
  count in ``attempts`` and the next observation is due at that slot again, so wakes never
  advance the backoff;
- past ``max_attempts`` no poll is scheduled: the operation stays open for callbacks (wakes)
  and for the deadline, which the sweeper applies; when the deadline is near enough for the
  broker to hold a countdown, an ``evaluate`` is also sent for that moment.

A lost race (another writer changed the version or the fence first) rolls the transaction back;
the caller re-reads and decides again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Engine, bindparam, func, select, update
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.orm import Session

from shared.core.context import build_context
from shared.core.contract import Contract, Timing
from shared.core.engine import deadline_of, decide, state_after
from shared.core.expressions import EvaluationContext
from shared.core.schedule import apply_jitter, next_observation_delay
from shared.core.types import (
    Decision,
    Observation,
    ObservationStatus,
    OperationState,
)
from shared.db.models import Observation as ObservationRow
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.db.sql import driver_cursor
from shared.evidence.view import refresh_webhook_readings
from shared.evidence.webhooks import evidence_keys
from shared.lifecycle import messages
from shared.lifecycle.contract_cache import cached_contract_for
from shared.lifecycle.late_evidence import needs_recheck, recheck_verified
from shared.lifecycle.operations import facts_for
from shared.lifecycle.scheduling import ScheduleConflict, counts_as_slot, schedule_observation
from shared.lifecycle.steps import apply_decision
from shared.lifecycle.watch import start_watch, watch_until, watched_after
from shared.runtime.settings import Settings

__all__ = [
    "EvaluateOutcome",
    "LostRace",
    "Plan",
    "dispatch",
    "evaluate_in_session",
    "evaluate_operation",
    "latest_observations",
]

log = logging.getLogger(__name__)

MAX_RACES = 8


class LostRace(RuntimeError):
    """Another writer changed the operation first; re-read and decide again."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send after the transaction commits."""

    observe_fence: int | None = None
    observe_countdown_s: float = 0.0
    evaluate_countdown_s: float | None = None


@dataclass(frozen=True, slots=True)
class EvaluateOutcome:
    decided: Decision | None
    plan: Plan


def _obs(row: Any) -> Observation:
    return Observation(
        channel=row.channel,
        observed_at=row.observed_at,
        status=ObservationStatus(row.status),
        value=row.value,
        provider_timestamp=row.provider_timestamp,
        digest=row.digest,
    )


def latest_observations(session: Session, operation_id: str) -> list[Observation]:
    """The latest observation of each channel (by observation time), as core values."""
    return [_obs(row) for row in _latest_rows(session, operation_id)]


_OBSERVATIONS = ObservationRow.__table__

# Built once: constructing this statement and its cache key costs more than running it.
_NEWEST = (
    select(_OBSERVATIONS.c.channel, func.max(_OBSERVATIONS.c.observed_at).label("at"))
    .where(_OBSERVATIONS.c.operation_id == bindparam("operation_id"))
    .group_by(_OBSERVATIONS.c.channel)
    .subquery()
)
_LATEST_ROWS = (
    select(
        _OBSERVATIONS.c.channel,
        _OBSERVATIONS.c.observed_at,
        _OBSERVATIONS.c.status,
        _OBSERVATIONS.c.value,
        _OBSERVATIONS.c.provider_timestamp,
        _OBSERVATIONS.c.digest,
        _OBSERVATIONS.c.fence,
    )
    .join(
        _NEWEST,
        (_OBSERVATIONS.c.channel == _NEWEST.c.channel)
        & (_OBSERVATIONS.c.observed_at == _NEWEST.c.at),
    )
    .where(_OBSERVATIONS.c.operation_id == bindparam("operation_id"))
    .order_by(_OBSERVATIONS.c.id)
)


# The operation, as session.get loads it in a new session (which builds its statement anew
# on every call).
_LOAD = select(Operation).where(Operation.id == bindparam("operation_id"))


_PG_LATEST_ROWS = str(
    _LATEST_ROWS.compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
)
"""The same statement, compiled once for the driver: a decision reads it once or twice, and
SQLAlchemy's execution and result processing cost more Python calls than the statement."""


class _Reading(NamedTuple):
    """A latest reading as :data:`_LATEST_ROWS` selects it (times aware UTC)."""

    channel: str
    observed_at: datetime
    status: str
    value: Any
    provider_timestamp: datetime | None
    digest: str | None
    fence: int | None


def _latest_rows(session: Session, operation_id: str) -> list[Any]:
    """Rows (channel, observed_at, status, value, provider_timestamp, digest, fence)."""
    if session.get_bind().dialect.name != "postgresql":
        return list(session.execute(_LATEST_ROWS, {"operation_id": operation_id}).all())
    with driver_cursor(session) as cursor:
        rows = cursor.execute(_PG_LATEST_ROWS, {"operation_id": operation_id}).fetchall()
    # The driver gives times in the connection's time zone; the column type gives them in UTC.
    return [
        _Reading(
            channel,
            observed_at.astimezone(UTC),
            status,
            value,
            None if provider_timestamp is None else provider_timestamp.astimezone(UTC),
            digest,
            fence,
        )
        for channel, observed_at, status, value, provider_timestamp, digest, fence in rows
    ]


def _fence_observed_at(session: Session, op: Operation, latest: list[Any]) -> datetime | None:
    """When the current fence was observed (its latest reading), or None when it was not."""
    seen: list[datetime] = [row.observed_at for row in latest if row.fence == op.fence]
    if seen:
        return max(seen)
    return session.scalar(
        select(func.max(ObservationRow.observed_at)).where(
            ObservationRow.operation_id == op.id, ObservationRow.fence == op.fence
        )
    )


def evaluate_in_session(
    session: Session,
    op: Operation,
    *,
    now: datetime,
    settings: Settings,
    cause: str = "evaluation",
    draw: Callable[[], float] = random.random,
) -> EvaluateOutcome:
    """Decide ``op`` and write the result in the caller's transaction; raise LostRace."""
    if op.final:
        return EvaluateOutcome(None, Plan())
    contract = cached_contract_for(session, op)
    facts = facts_for(op)
    deadline = deadline_of(contract, facts)
    context = build_context(contract, facts)
    # The evidence locks first, before any row lock of this transaction (shared.evidence.locks).
    latest = _decision_rows(session, op, contract, context, now)
    decision = decide(contract, facts, [_obs(row) for row in latest], now)
    changes: dict[str, object] = {}
    if op.deadline is None:
        changes["deadline"] = deadline
    plan = Plan()
    watched = watched_after(decision, state_after(decision))
    if decision.final:
        changes["next_observation_at"] = None
        changes["enqueued_at"] = None
    watched_until = watch_until(contract, now) if watched else None
    if watched_until is not None:
        changes["watch_until"] = watched_until
    else:
        # Scheduled before the state is written: change_state appends to the workspace's
        # audit chain, which holds the workspace's lock until commit; keep that stretch short.
        plan = _schedule_next(
            session,
            op,
            timing=contract.timing,
            latest=latest,
            now=now,
            deadline=deadline,
            settings=settings,
            draw=draw,
        )
    if not apply_decision(
        session, op, decision, cause=cause, changes=changes, now=now, readings=latest
    ):
        raise LostRace(op.id)
    if watched_until is not None:
        start_watch(session, op, evidence_keys(op, contract, context), until=watched_until)
    _record_verdict(decision)
    return EvaluateOutcome(decision, plan)


def _decision_rows(
    session: Session, op: Operation, contract: Contract, context: EvaluationContext, now: datetime
) -> list[Any]:
    """The latest readings a decision is made on, its webhook channels reduced now over the
    events stored now, under the evidence locks (``shared.evidence.view``)."""
    latest = _latest_rows(session, op.id)
    if refresh_webhook_readings(session, op, contract, context, latest, clock=lambda: now):
        latest = _latest_rows(session, op.id)
    return latest


def _schedule_next(
    session: Session,
    op: Operation,
    *,
    timing: Timing,
    latest: list[Any],
    now: datetime,
    deadline: datetime,
    settings: Settings,
    draw: Callable[[], float],
) -> Plan:
    from shared.runtime.celery_app import MAX_COUNTDOWN_S

    until_deadline = (deadline - now).total_seconds()
    evaluate_at = until_deadline if 0 < until_deadline <= MAX_COUNTDOWN_S else None
    observed_at = _fence_observed_at(session, op, latest)
    if observed_at is None:
        # An observation of the current fence is still pending; it will evaluate again.
        return Plan(evaluate_countdown_s=evaluate_at)
    slot = op.slot_at
    if slot is not None and not counts_as_slot(slot, observed_at):
        # A wake's reading, before the schedule's slot: it was extra, and the slot stays.
        plan = _schedule(session, op, slot=slot, observed_at=observed_at, now=now)
        if slot > deadline:  # no reading after the deadline: the deadline itself decides
            return Plan(plan.observe_fence, plan.observe_countdown_s, evaluate_at)
        return plan
    delay = next_observation_delay(timing, op.attempts + 1)
    if delay is None:
        # Polling is over: open for callbacks until the deadline, which the sweeper applies.
        session.execute(
            update(Operation)
            .where(Operation.id == op.id, Operation.fence == op.fence)
            .values(next_observation_at=None, enqueued_at=None)
            .execution_options(synchronize_session=False)
        )
        return Plan(evaluate_countdown_s=evaluate_at)
    if settings.jitter_ratio > 0:
        delay = apply_jitter(delay, settings.jitter_ratio, draw())
    reference = min(now, observed_at)
    try:
        fence = schedule_observation(session, op, delay_ms=delay, now=reference)
    except ScheduleConflict as exc:
        raise LostRace(op.id) from exc
    due = reference + timedelta(milliseconds=delay)
    if due > deadline:
        # No reading after the deadline: the deadline itself decides.
        return Plan(
            observe_fence=fence,
            observe_countdown_s=max(0.0, (due - now).total_seconds()),
            evaluate_countdown_s=evaluate_at,
        )
    return Plan(observe_fence=fence, observe_countdown_s=max(0.0, (due - now).total_seconds()))


def _schedule(
    session: Session, op: Operation, *, slot: datetime, observed_at: datetime, now: datetime
) -> Plan:
    """The next observation at the schedule's ``slot`` again (after a woken reading)."""
    delay = max(0, (slot - observed_at) // timedelta(milliseconds=1))
    try:
        fence = schedule_observation(session, op, delay_ms=delay, now=observed_at)
    except ScheduleConflict as exc:
        raise LostRace(op.id) from exc
    return Plan(observe_fence=fence, observe_countdown_s=max(0.0, (slot - now).total_seconds()))


def _record_verdict(decision: Decision) -> None:
    try:
        from shared.runtime.metrics import record_verdict
    except Exception:  # metrics are optional
        return
    record_verdict(decision.verdict.value, decision.reason)


def dispatch(operation_id: str, plan: Plan) -> None:
    """Send the messages a committed plan asks for (failures are left to the sweeper)."""
    if plan.observe_fence is not None:
        messages.observe(operation_id, plan.observe_fence, countdown_s=plan.observe_countdown_s)
    if plan.evaluate_countdown_s is not None:
        try:
            messages.evaluate(operation_id, countdown_s=plan.evaluate_countdown_s)
        except Exception:
            log.warning(
                "deadline evaluate for %s not sent",
                operation_id,
                exc_info=True,
                extra={"operation_id": operation_id},
            )


def evaluate_operation(
    engine: Engine,
    operation_id: str,
    *,
    settings: Settings,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    draw: Callable[[], float] = random.random,
    send: Callable[[str, Plan], None] = dispatch,
) -> Decision | None:
    """The ``evaluate`` task body: decide, retrying on a lost race; None when nothing to do."""
    for _ in range(MAX_RACES):
        try:
            with session_scope(engine) as session:
                op = session.execute(_LOAD, {"operation_id": operation_id}).scalar_one_or_none()
                if op is not None and needs_recheck(op):
                    # A late event asked for one more reading of a watched VERIFIED operation.
                    now = clock()
                    contract = cached_contract_for(session, op)
                    context = build_context(contract, facts_for(op))
                    rows = _decision_rows(session, op, contract, context, now)
                    recheck_verified(
                        session, op, [_obs(row) for row in rows], now=now, settings=settings
                    )
                    return None
                if op is None or op.final:
                    return None
                if op.state not in (
                    OperationState.ACTION_ACCEPTED.value,
                    OperationState.OBSERVING.value,
                    OperationState.PENDING.value,
                ):
                    return None
                outcome = evaluate_in_session(
                    session, op, now=clock(), settings=settings, draw=draw
                )
        except LostRace:
            continue
        send(operation_id, outcome.plan)
        return outcome.decided
    log.warning(
        "evaluate of %s lost %d races in a row; the sweeper retries",
        operation_id,
        MAX_RACES,
        extra={"operation_id": operation_id},
    )
    return None
