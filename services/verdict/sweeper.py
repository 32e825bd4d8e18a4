"""The sweeper: what keeps operations moving when messages are lost. Several may run at once.

Every ``sweeper_interval_seconds`` it claims rows with ``SELECT … FOR UPDATE SKIP LOCKED``
(PostgreSQL; SQLite serialises writers, a plain select suffices) and:

1. **re-sends overdue observations** — an open operation whose ``next_observation_at`` passed
   more than ``sweeper_grace_seconds`` ago and whose last message is at least as old: its
   message was lost (a killed worker, a Redis restart) or is stuck. The message carries the same
   fence, so it and a late original never make two readings (the second is dropped); when the
   fence was read already, the observer re-sends ``evaluate`` (that message may be the lost one);
2. **sends observations due soon that no message carries** — due times further away than the
   broker may hold a countdown were left without a message when they were scheduled;
3. **applies the deadline** — an open operation past its deadline is evaluated right here (the
   contract's on-timeout verdict; an escalated one goes to HUMAN_REVIEW), with no task needed;
4. **applies the action window** — an operation whose action was never reported by its
   ``action_deadline`` (else creation + the workspace's or the settings' window) is EXPIRED;
5. **correlates stored webhook events that no correlator took** — events still in the
   correlation backlog ``sweeper_grace_seconds`` after they were received (their
   ``provely.correlate`` message was lost) are linked and their operations woken right here;
6. **bounds the record of refused deliveries** — each workspace keeps its newest
   ``refused_deliveries_kept`` (``shared.intake.refusals``): anyone may make them.

Messages are sent only after the claiming transaction commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, and_, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from services.verdict.evaluate import LostRace, Plan, dispatch, evaluate_in_session
from shared.core.types import Decision, OperationState, Verdict
from shared.db.models import Operation, Workspace
from shared.db.session import get_engine, is_postgres, session_scope
from shared.intake.correlator import correlate_pending
from shared.intake.refusals import prune_refusals
from shared.lifecycle import messages
from shared.lifecycle.scheduling import OBSERVABLE_STATES
from shared.lifecycle.steps import expire
from shared.lifecycle.watch import WATCHED_STATES, end_expired_watches
from shared.runtime.settings import Settings, get_settings

__all__ = ["ACTION_NOT_REPORTED", "SweepReport", "Sweeper", "run_forever", "sweep_once"]

log = logging.getLogger(__name__)

ACTION_NOT_REPORTED = "action_not_reported"
BATCH = 500
_UNREPORTED_STATES = (OperationState.CREATED.value, OperationState.ACTION_STARTED.value)


@dataclass
class SweepReport:
    resent: int = 0
    sent_due: int = 0
    timed_out: int = 0
    expired: int = 0
    correlated: int = 0
    errors: int = 0
    watches_ended: int = 0
    refusals_pruned: int = 0
    dispatches: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.resent + self.sent_due + self.timed_out + self.expired + self.correlated


def _resend_now(due: datetime, enqueued_at: datetime | None, now: datetime) -> bool:
    """Back off exponentially: re-send an overdue message only when the time since the last
    send is at least how overdue it already was then. A backlog longer than the grace then
    gets a few duplicates (after 1, 2, 4, 8 … graces), not one per grace."""
    if enqueued_at is None or enqueued_at <= due:
        return True
    return enqueued_at - due <= now - enqueued_at


def _claim(engine: Engine, query: Select[tuple[Operation]]) -> Select[tuple[Operation]]:
    if is_postgres(engine):
        return query.with_for_update(skip_locked=True)
    return query


@dataclass
class Sweeper:
    engine: Engine
    settings: Settings
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    send_observe: Callable[[str, int, float], object] = field(
        default=lambda op_id, fence, countdown: messages.observe(
            op_id, fence, countdown_s=countdown
        )
    )
    send_plan: Callable[[str, Plan], None] = dispatch
    batch: int = BATCH

    def sweep_once(self) -> SweepReport:
        report = SweepReport()
        self._resend(report)
        self._deadlines(report)
        self._action_window(report)
        self._correlate(report)
        self._end_watches(report)
        self._prune_refusals(report)
        return report

    def _prune_refusals(self, report: SweepReport) -> None:
        with session_scope(self.engine) as session:
            report.refusals_pruned = prune_refusals(
                session, keep=self.settings.refused_deliveries_kept
            )

    def _end_watches(self, report: SweepReport) -> None:
        """Watches that ended leave the index (``shared.lifecycle.watch``): those verdicts are
        settled."""
        with session_scope(self.engine) as session:
            report.watches_ended = end_expired_watches(session, now=self.clock())

    # 1 + 2 ------------------------------------------------------------------------------
    def _resend(self, report: SweepReport) -> None:
        from shared.runtime.celery_app import MAX_COUNTDOWN_S

        now = self.clock()
        cutoff = now - timedelta(seconds=self.settings.sweeper_grace_seconds)
        soon = now + timedelta(
            seconds=min(MAX_COUNTDOWN_S, max(1.0, 2 * self.settings.sweeper_interval_seconds))
        )
        query = (
            select(Operation)
            .where(
                or_(
                    and_(Operation.final.is_(False), Operation.state.in_(OBSERVABLE_STATES)),
                    # A recheck of a watched VERIFIED or FAILED operation
                    # (shared.lifecycle.watch, shared.lifecycle.late_evidence).
                    Operation.state.in_(WATCHED_STATES),
                ),
                Operation.next_observation_at.is_not(None),
                or_(
                    and_(
                        Operation.next_observation_at <= cutoff,
                        or_(Operation.enqueued_at.is_(None), Operation.enqueued_at <= cutoff),
                    ),
                    and_(Operation.enqueued_at.is_(None), Operation.next_observation_at <= soon),
                ),
            )
            .order_by(Operation.next_observation_at)
            .limit(self.batch)
        )
        sends: list[tuple[str, int, float]] = []
        with session_scope(self.engine) as session:
            for op in session.execute(_claim(self.engine, query)).scalars():
                due = op.next_observation_at
                assert due is not None
                if due <= cutoff and not _resend_now(due, op.enqueued_at, now):
                    continue
                if due <= cutoff:
                    # Lost, or queued behind a backlog: the same fence again. A duplicate is
                    # dropped by the observer (and makes it re-send ``evaluate``, in case that
                    # message was the one lost); a new fence would make the queued message stale
                    # and, under a backlog longer than the grace, starve the operation.
                    op.enqueued_at = now
                    sends.append((op.id, op.fence, 0.0))
                    report.resent += 1
                else:
                    op.enqueued_at = now
                    sends.append((op.id, op.fence, max(0.0, (due - now).total_seconds())))
                    report.sent_due += 1
        for op_id, fence, countdown in sends:
            self.send_observe(op_id, fence, countdown)
        report.dispatches.extend(sends)

    # 3 ----------------------------------------------------------------------------------
    def _deadlines(self, report: SweepReport) -> None:
        now = self.clock()
        query = (
            select(Operation)
            .where(
                Operation.final.is_(False),
                Operation.state.in_(OBSERVABLE_STATES),
                Operation.deadline.is_not(None),
                Operation.deadline <= now,
            )
            .order_by(Operation.deadline)
            .limit(self.batch)
        )
        plans: list[tuple[str, Plan]] = []
        with session_scope(self.engine) as session:
            for op in session.execute(_claim(self.engine, query)).scalars():
                try:
                    with session.begin_nested():
                        outcome = evaluate_in_session(
                            session, op, now=now, settings=self.settings, cause="deadline"
                        )
                except LostRace:
                    session.expire(op)
                    continue
                except Exception:
                    log.exception(
                        "deadline of %s not applied", op.id, extra={"operation_id": op.id}
                    )
                    report.errors += 1
                    continue
                if outcome.decided is not None and outcome.decided.final:
                    report.timed_out += 1
                plans.append((op.id, outcome.plan))
        for op_id, plan in plans:
            self.send_plan(op_id, plan)

    # 4 ----------------------------------------------------------------------------------
    def _action_window(self, report: SweepReport) -> None:
        now = self.clock()
        query = (
            select(Operation)
            .where(
                Operation.final.is_(False),
                Operation.state.in_(_UNREPORTED_STATES),
                or_(
                    Operation.action_deadline <= now,
                    # Without a stored deadline: the shortest window prefilters, the
                    # workspace's own window decides below.
                    and_(
                        Operation.action_deadline.is_(None),
                        Operation.created_at <= now - self._shortest_window(),
                    ),
                ),
            )
            .order_by(Operation.created_at)
            .limit(self.batch)
        )
        with session_scope(self.engine) as session:
            windows: dict[str, timedelta] = {}
            for op in session.execute(_claim(self.engine, query)).scalars():
                limit = op.action_deadline
                if limit is None:
                    limit = op.created_at + self._window(session, op.workspace_id, windows)
                if limit > now:
                    continue
                try:
                    with session.begin_nested():
                        if self._expire(session, op, now):
                            report.expired += 1
                except Exception:
                    log.exception(
                        "action window of %s not applied", op.id, extra={"operation_id": op.id}
                    )
                    report.errors += 1

    # 5 ----------------------------------------------------------------------------------
    def _correlate(self, report: SweepReport) -> None:
        def send(op_id: str, fence: int, countdown: float) -> None:
            self.send_observe(op_id, fence, countdown)
            report.dispatches.append((op_id, fence, countdown))

        try:
            report.correlated += correlate_pending(
                self.engine,
                batch=self.batch,
                max_rounds=4,
                received_before=timedelta(seconds=self.settings.sweeper_grace_seconds),
                clock=self.clock,
                send_observe=send,
            )
        except Exception:
            log.exception("pending events not correlated")
            report.errors += 1

    def _shortest_window(self) -> timedelta:
        with session_scope(self.engine) as session:
            shortest = session.scalar(select(func.min(Workspace.action_window_seconds)))
        seconds = self.settings.action_window_seconds
        if shortest is not None:
            seconds = min(seconds, shortest)
        return timedelta(seconds=max(0, seconds))

    def _window(
        self, session: Session, workspace_id: str, cache: dict[str, timedelta]
    ) -> timedelta:
        if workspace_id not in cache:
            seconds = session.scalar(
                select(Workspace.action_window_seconds).where(Workspace.id == workspace_id)
            )
            cache[workspace_id] = timedelta(
                seconds=seconds if seconds is not None else self.settings.action_window_seconds
            )
        return cache[workspace_id]

    def _expire(self, session: Session, op: Operation, now: datetime) -> bool:
        decision = Decision(
            verdict=Verdict.EXPIRED,
            reason=ACTION_NOT_REPORTED,
            class_=None,
            final=True,
            conditions=(),
            evidence=(),
            explanation="The action was not reported within the action window.",
        )
        return expire(session, op, decision, now=now)


def sweep_once(engine: Engine | None = None, *, settings: Settings | None = None) -> SweepReport:
    """One pass of the sweeper with the process's engine and settings."""
    return Sweeper(engine or get_engine(), settings or get_settings()).sweep_once()


def run_forever(
    *,
    settings: Settings | None = None,
    interval_s: float | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Sweep every ``interval_s`` (default: the settings') until ``stop`` is set (or forever).

    A failing pass (database unreachable, broker down) is logged and retried next interval.
    """
    settings = settings or get_settings()
    interval = interval_s if interval_s is not None else settings.sweeper_interval_seconds
    stop = stop or threading.Event()
    sweeper = Sweeper(get_engine(settings.resolved_database_url()), settings)
    log.info("sweeper started (every %.2fs, grace %.2fs)", interval, settings.sweeper_grace_seconds)
    while not stop.is_set():
        started = time.monotonic()
        try:
            report = sweeper.sweep_once()
            if report.total:
                log.info(
                    "sweep: %d re-sent, %d sent due, %d timed out, %d expired, %d correlated",
                    report.resent,
                    report.sent_due,
                    report.timed_out,
                    report.expired,
                    report.correlated,
                )
        except Exception:
            log.exception("sweep failed; retrying next interval")
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
