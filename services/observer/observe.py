"""``observe(operation_id, fence)``: read every channel of one operation once, for one fence.

load → drop when stale → claim the fence (on PostgreSQL the load and the claim are one
statement, ``PREPARE_AND_CLAIM``) → read (outside any transaction) → append
observations (a readback that goes backwards against the operation's earlier readings is
stored ``inconsistent``: ``shared.evidence.backwards``) → enqueue ``evaluate``. The task is
fenced and idempotent:

- the operation is gone, final or not observable → dropped;
- ``fence`` is not the operation's current fence → stale, dropped (a wake or a newer schedule
  superseded it), also when it moves before the claim (or the operation closes while the claim
  waits for its row: nothing is read either way);
- the fence was observed already (a redelivered message, a sweeper re-send) → no reading; an
  ``evaluate`` is sent again in case that was the lost message. The unique constraint on
  (operation, fence, channel) makes a concurrent duplicate lose at insert time;
- a readback that the provider's rate limit holds back waits for its token; a wait longer than
  ``MAX_INLINE_WAIT_S`` re-sends the same message for when the token is due instead.

The claim (``operations.reading_fence``, :func:`shared.lifecycle.scheduling.claim_reading`) is
committed before the first readback: a correlation that kept this message for the events it linked
(instead of waking the operation again) holds the row until it commits, so the readbacks come
after those events. Readbacks run outside any database transaction; webhook channels are
reduced inside the transaction that stores the observations, so events that arrived during the
readback count.

This module holds the task's work (:class:`Observer`) and its process-wide instance; what each
http channel reads is in ``services.observer.jobs``, the statements on the record in
``services.observer.statements``.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import httpx
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.observer.connections import Readback, readback_of
from services.observer.event_log import ingest_log
from services.observer.http_verifier import read_http, read_http_list
from services.observer.jobs import (
    HttpJob,
    declared_readback,
    event_log_job,
    http_job,
    kept_paths,
    kept_reading,
)
from services.observer.statements import (
    COUNT_ATTEMPT,
    EXISTS,
    INSERT_OBSERVATIONS,
    PREPARE,
    PREPARE_AND_CLAIM,
    before_counting,
    connection_of,
    observation_row,
    operation_of,
    values_of,
)
from shared.core.context import build_context
from shared.core.types import ObservationStatus
from shared.core.verifiers import verifier_of
from shared.core.verifiers.event_log import EVENT_LOG
from shared.core.verifiers.http import HTTP
from shared.db.models import Operation
from shared.db.session import (
    get_engine,
    is_postgres,
    read_connection,
    session_scope,
    single_statements,
)
from shared.evidence.backwards import mark_backwards
from shared.evidence.readings import Reading
from shared.evidence.webhooks import read_webhook
from shared.lifecycle import messages
from shared.lifecycle.contract_cache import cached_contract_for
from shared.lifecycle.late_evidence import needs_recheck
from shared.lifecycle.operations import facts_for
from shared.lifecycle.scheduling import (
    OBSERVABLE_STATES,
    OBSERVE_LEAD_S,
    SLOT_TOLERANCE,
    claim_reading,
)
from shared.runtime.logs import bind_operation
from shared.runtime.ratelimit import RateLimiter, bucket_for
from shared.runtime.settings import Settings, get_settings

__all__ = ["MAX_INLINE_WAIT_S", "ObserveOutcome", "Observer", "default_observer"]

log = logging.getLogger(__name__)

MAX_INLINE_WAIT_S = 20.0
"""The longest a task sleeps for a rate-limit token; a longer wait re-sends the message."""


class ObserveOutcome(StrEnum):
    OBSERVED = "observed"
    MISSING = "missing"
    CLOSED = "closed"  # final, or not in an observable state
    STALE = "stale"
    DUPLICATE = "duplicate"
    RATE_LIMITED = "rate_limited"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _send_evaluate(operation_id: str) -> None:
    messages.evaluate(operation_id)


def _resend_observe(operation_id: str, fence: int, countdown_s: float) -> None:
    messages.observe(operation_id, fence, countdown_s=countdown_s)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What an observe's load gives the rest of it: the jobs, each provider's readback, whether
    the fence is claimed already, and the operation as loaded (its values, and made of them)."""

    jobs: list[HttpJob]
    readbacks: dict[str, Readback | str]
    claimed: bool
    op: Operation
    values: tuple[Any, ...]


@dataclass
class Observer:
    """The observe task's collaborators, injected (tests pass their own client and clock)."""

    settings: Settings
    engine: Engine
    http: httpx.Client
    limiter: RateLimiter
    clock: Callable[[], datetime] = _utcnow
    sleep: Callable[[float], object] = field(default=lambda s: threading.Event().wait(s))
    send_evaluate: Callable[[str], None] = _send_evaluate
    resend_observe: Callable[[str, int, float], None] = _resend_observe
    send_observe_now: Callable[[Sequence[tuple[str, int]]], object] = messages.observe_many
    _readers: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _readers_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def observe(self, operation_id: str, fence: int) -> ObserveOutcome:
        prepared = self._prepare(operation_id, fence)
        if prepared is ObserveOutcome.DUPLICATE:
            return self._already_observed(operation_id)
        if isinstance(prepared, ObserveOutcome):
            return prepared
        jobs, readbacks, due = prepared.jobs, prepared.readbacks, prepared.op.next_observation_at
        if not prepared.claimed:
            # One statement, committed when it returns (the claim is committed before any
            # readback).
            with single_statements(self.engine) as connection:
                if not claim_reading(connection, operation_id, fence):
                    return ObserveOutcome.STALE  # woken or rescheduled since it was read
        if due is not None:
            early = (due - self.clock()).total_seconds()
            if 0 < early <= OBSERVE_LEAD_S + 0.05:
                self.sleep(early)
        readings: list[Reading] = []
        for job in jobs:
            readback = readbacks.get(job.provider, "no_connection")
            if job.refused is not None:
                readings.append(self._failed(job.channel, job.refused))
            elif job.path is None:
                readings.append(self._failed(job.channel, "path_unresolved"))
            elif job.query is None:
                readings.append(self._failed(job.channel, "query_unresolved"))
            elif isinstance(readback, str):
                readings.append(self._failed(job.channel, readback))
            else:
                if readback.rate_per_s:
                    wait = self.limiter.reserve(readback.bucket_key, rate_per_s=readback.rate_per_s)
                    if wait > MAX_INLINE_WAIT_S:
                        self.resend_observe(operation_id, fence, wait)
                        return ObserveOutcome.RATE_LIMITED
                    if wait > 0:
                        self.sleep(wait)
                readings.append(kept_reading(job, self._read(job, job.path, job.query, readback)))
        if any(job.events for job in jobs):
            readings = self._ingest_logs(operation_id, readings)
        try:
            outcome = self._store(operation_id, fence, readings, loaded=prepared)
        except IntegrityError:
            return ObserveOutcome.DUPLICATE  # a concurrent delivery stored it and evaluates
        if outcome is ObserveOutcome.OBSERVED:
            self.send_evaluate(operation_id)
        return outcome

    def observe_many(self, pairs: Sequence[tuple[str, int]]) -> list[ObserveOutcome]:
        """:meth:`observe` for each ``(operation_id, fence)``, each on a thread of its own, so
        that no reading waits for another's; the outcomes in the order of ``pairs``. Every pair
        is observed even when one raises; the first error is raised after all of them ran (the
        sweeper re-sends what it left overdue, as for one ``observe``)."""
        if len(pairs) <= 1:
            return [self._observe_logged(operation_id, fence) for operation_id, fence in pairs]
        pool = self._reading_threads()
        # Each thread runs in a copy of the task's log context (its task and request id), with
        # the operation it reads bound on top.
        futures = [
            pool.submit(contextvars.copy_context().run, self._observe_logged, op_id, fence)
            for op_id, fence in pairs
        ]
        wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _observe_logged(self, operation_id: str, fence: int) -> ObserveOutcome:
        """:meth:`observe`, every log line naming ``operation_id`` (as one ``observe`` task's)."""
        with bind_operation(operation_id):
            return self.observe(operation_id, fence)

    def _reading_threads(self) -> ThreadPoolExecutor:
        """The threads of :meth:`observe_many`, made on first use and kept (making 16 threads
        for each message cost ~1.1 ms of CPU, against ~0.2 ms for kept ones)."""
        from shared.runtime.celery_app import WAKES_PER_MESSAGE

        with self._readers_lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(WAKES_PER_MESSAGE, thread_name_prefix="observe")
            return self._readers

    def close(self) -> None:
        """Release the HTTP connections and the reading threads."""
        self.http.close()
        with self._readers_lock:
            if self._readers is not None:
                self._readers.shutdown(wait=False)
                self._readers = None

    def _read(self, job: HttpJob, path: str, query: str, readback: Readback) -> Reading:
        if job.max_pages is None:
            return read_http(
                self.http,
                channel=job.channel,
                target=readback.target,
                path=path,
                clock=self.clock,
                query=query,
            )

        def pace() -> str | None:
            # Every page after the first takes its own token of the connection's rate limit.
            if not readback.rate_per_s:
                return None
            wait = self.limiter.reserve(readback.bucket_key, rate_per_s=readback.rate_per_s)
            if wait > MAX_INLINE_WAIT_S:
                return "rate_limited"
            if wait > 0:
                self.sleep(wait)
            return None

        return read_http_list(
            self.http,
            channel=job.channel,
            target=readback.target,
            path=path,
            query=query,
            max_pages=job.max_pages,
            clock=self.clock,
            before_page=pace,
        )

    def _already_observed(self, operation_id: str) -> ObserveOutcome:
        # The current fence was read already: this is a redelivery or a sweeper re-send. The
        # evaluate that followed the reading may be the message that was lost; evaluating again
        # is harmless (it decides the same and schedules only when nothing is pending).
        self.send_evaluate(operation_id)
        return ObserveOutcome.DUPLICATE

    def _failed(self, channel: str, error: str) -> Reading:
        return Reading(
            channel=channel, status=ObservationStatus.ERROR, observed_at=self.clock(), error=error
        )

    def _prepare(self, operation_id: str, fence: int) -> ObserveOutcome | _Prepared:
        """The jobs, the connections' readbacks and the due time of ``fence``, and whether the
        fence is claimed already: on PostgreSQL the load claims it in the same statement
        (``PREPARE_AND_CLAIM``, committed when it returns), elsewhere the caller claims it."""
        claims = is_postgres(self.engine)
        with (
            single_statements(self.engine) if claims else read_connection(self.engine) as connection
        ):
            rows = connection.execute(
                PREPARE_AND_CLAIM if claims else PREPARE,
                {"operation_id": operation_id, "message_fence": fence},
            ).all()
            if not rows:
                return ObserveOutcome.MISSING
            op = operation_of(rows[0])
            already_read = rows[0].seen
            if (op.final or op.state not in OBSERVABLE_STATES) and not needs_recheck(op):
                return ObserveOutcome.CLOSED
            if op.fence != fence:
                return ObserveOutcome.STALE
            if already_read:
                return ObserveOutcome.DUPLICATE
            if claims and not rows[0].claimed:
                return ObserveOutcome.STALE  # woken, rescheduled or closed since it was read
            # A session only for a contract the process has not loaded yet.
            contract = cached_contract_for(Session(bind=connection), op)
        context = build_context(contract, facts_for(op))
        # A workspace contract's readings keep only what its conditions read.
        kept = (
            kept_paths(contract, contract_hash=op.contract_hash)
            if op.custom_contract_id is not None
            else None
        )
        jobs = [
            http_job(
                channel,
                contract,
                context,
                readback=declared_readback(channel, contract),
                keep=kept.get(channel.name, frozenset()) if kept is not None else None,
            )
            if verifier_of(channel) is HTTP
            else event_log_job(
                channel, contract, context, readback=declared_readback(channel, contract)
            )
            for channel in contract.channels
            if verifier_of(channel).polled
        ]
        # Each channel reads through the connection of its own provider (a contract may
        # read the user's app over http and a payment provider's events at once).
        connections = {c.provider: c for c in map(connection_of, rows) if c is not None}
        readbacks: dict[str, Readback | str] = {}
        for provider in sorted({job.provider for job in jobs if job.path is not None}):
            found = connections.get(provider)
            if found is None:
                readbacks[provider] = "no_connection"
                continue
            try:
                readbacks[provider] = readback_of(found, provider=provider, settings=self.settings)
            except Exception as exc:  # an undecryptable key: recorded, never raised
                log.warning("connection of %s unusable: %s", op.workspace_id, exc)
                readbacks[provider] = "connection_unusable"
        return _Prepared(
            jobs=jobs, readbacks=readbacks, claimed=claims, op=op, values=values_of(rows[0])
        )

    def _store(
        self, operation_id: str, fence: int, readings: list[Reading], *, loaded: _Prepared
    ) -> ObserveOutcome:
        with session_scope(self.engine) as session:
            # The Core statements run on the transaction's connection: through the session they
            # paid its ORM dispatch (bind lookup, autoflush, compile-state) for nothing, as
            # nothing here is an ORM object the session tracks.
            connection = session.connection()
            read_at = self.clock()
            row = connection.execute(
                COUNT_ATTEMPT,
                {"operation_id": operation_id, "read_before": read_at + SLOT_TOLERANCE},
            ).first()
            if row is None:
                # Nothing was written: the operation is gone, or closed since it was read.
                found = connection.execute(EXISTS, {"operation_id": operation_id}).first()
                return ObserveOutcome.CLOSED if found is not None else ObserveOutcome.MISSING
            # The facts as they were before this observation counted: the load's operation
            # when none changed since (one Operation built fewer), else one of their own.
            values = before_counting(row, read_at=read_at)
            op = loaded.op if values == loaded.values else operation_of(values)
            contract = cached_contract_for(session, op)
            context = build_context(contract, facts_for(op))
            for channel in contract.channels:
                if verifier_of(channel).reduces_events:
                    readings.append(
                        read_webhook(
                            session,
                            op,
                            contract=contract,
                            channel=channel,
                            context=context,
                            clock=self.clock,
                        )
                    )
            readings = mark_backwards(
                session, operation_id=operation_id, contract=contract, readings=readings
            )
            if readings:
                connection.execute(
                    INSERT_OBSERVATIONS,
                    [observation_row(op, fence, reading) for reading in readings],
                )
            _record_metrics(
                readings, contract_channels={c.name: c.verifier for c in contract.channels}
            )
        return ObserveOutcome.OBSERVED

    def _ingest_logs(self, operation_id: str, readings: list[Reading]) -> list[Reading]:
        """Event-log readings handed to the intake (``services.observer.event_log``) in a
        transaction of their own, committed before the observations are stored: the webhook
        channels reduced then count their events, and the intake's shared evidence locks are
        taken before any row lock, in the order a decision takes them (``shared.evidence.locks``).
        The other operations the new events named are woken after the commit."""
        woken: list[tuple[str, int]] = []
        with session_scope(self.engine) as session:
            op = session.get(Operation, operation_id)
            if op is None:
                return readings
            contract = cached_contract_for(session, op)
            logs = {c.name: c for c in contract.channels if verifier_of(c) is EVENT_LOG}
            kept = [self._ingested(session, op, contract, logs, r, woken) for r in readings]
        if woken:
            self.send_observe_now(sorted(set(woken)))
        return kept

    def _ingested(
        self,
        session: Session,
        op: Operation,
        contract: Any,
        logs: dict[str, Any],
        reading: Reading,
        woken: list[tuple[str, int]],
    ) -> Reading:
        channel = logs.get(reading.channel)
        if channel is None:
            return reading
        done = ingest_log(
            session, op, provider=channel.provider_of(contract), reading=reading, now=self.clock()
        )
        woken.extend(done.wakes)
        return done.reading


def _record_metrics(readings: list[Reading], *, contract_channels: dict[str, str]) -> None:
    try:
        from shared.runtime.metrics import OBSERVATION_LATENCY
    except Exception:  # metrics are optional
        return
    for reading in readings:
        if reading.latency_ms is None:
            continue
        OBSERVATION_LATENCY.labels(
            channel=reading.channel,
            verifier=contract_channels.get(reading.channel, "unknown"),
            status=reading.status.value,
        ).observe(reading.latency_ms / 1000.0)


_default: Observer | None = None
_default_lock = threading.Lock()


def default_observer() -> Observer:
    """The process-wide observer built from the settings (one HTTP connection pool)."""
    global _default
    with _default_lock:
        if _default is None:
            settings = get_settings()
            _default = Observer(
                settings=settings,
                engine=get_engine(),
                http=httpx.Client(
                    timeout=httpx.Timeout(settings.http_timeout_seconds),
                    follow_redirects=False,
                    trust_env=False,
                ),
                limiter=bucket_for(settings),
            )
        return _default


def reset_default_observer() -> None:
    """Forget the process-wide observer (after a fork, or in tests)."""
    global _default
    with _default_lock:
        if _default is not None:
            _default.close()
        _default = None
