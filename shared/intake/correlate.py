"""Correlating one event at a time, and one operation at a time.

:func:`correlate_event` links a newly stored event to every operation it correlates with, by
the rules of ``shared.intake.rules``: one query finds the candidates, ``match`` decides each;
an operation that learns its subject id from the event records it
(``learned_keys[<identity key>]`` and ``subject_id``) and links the events stored before that
name it. It serves databases other than PostgreSQL, and on PostgreSQL the events that may teach
an operation its subject id (``shared.intake.batch`` links the others set-based).

:func:`correlate_pending_events` does the same from the operation's side, for events that
arrived before the operation could correlate (before its action report, or before it learned
its subject id); meant for the action report and the observer. :func:`lock_correlation` orders
the two sides in a workspace.

The caller owns the transaction; nothing here commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, bindparam, or_, select, text, tuple_, update
from sqlalchemy.orm import Session, load_only

from shared.core.contract import Contract
from shared.db.models import Event, EventKey, Operation, OperationEvent
from shared.intake.contracts import contract_of, event_providers
from shared.intake.parse import ParsedEvent
from shared.intake.results import IntakeResult, Link
from shared.intake.rules import (
    STRONG,
    WEAK,
    Match,
    fingerprint_of,
    fingerprint_probe,
    idempotency_value,
    match,
    of_subject_type,
    operation_keys,
    subject_values,
)
from shared.intake.store import dialect_insert

__all__ = [
    "CORRELATION_LOCK_CLASS",
    "correlate_event",
    "correlate_pending_events",
    "lock_correlation",
]

log = logging.getLogger(__name__)


_PG_LINK = text(
    """
    INSERT INTO operation_events (operation_id, event_pk, workspace_id, strategy, assurance,
                                  created_at)
    VALUES (:operation_id, :event_pk, :workspace_id, :strategy, :assurance, :created_at)
    ON CONFLICT (operation_id, event_pk) DO NOTHING
    RETURNING event_pk
    """
)


def _link(
    session: Session,
    *,
    operation: Operation,
    event_pk: int,
    strategy: str,
    assurance: str,
    now: datetime,
) -> str | None:
    """Write the link: ``"new"``, ``"upgraded"`` when a weak link became strong (a weak link
    never replaces a strong one), None when nothing changed."""
    params = {
        "operation_id": operation.id,
        "event_pk": event_pk,
        "workspace_id": operation.workspace_id,
        "strategy": strategy,
        "assurance": assurance,
        "created_at": now,
    }
    if session.get_bind().dialect.name == "postgresql":
        created = session.execute(_PG_LINK, params).scalar_one_or_none()
    else:
        created = session.execute(
            dialect_insert(session, OperationEvent)
            .values(**params)
            .on_conflict_do_nothing(index_elements=["operation_id", "event_pk"])
            .returning(OperationEvent.event_pk)
        ).scalar_one_or_none()
    if created is not None:
        return "new"
    if assurance != STRONG:
        return None
    upgraded = session.execute(
        update(OperationEvent)
        .where(
            OperationEvent.operation_id == operation.id,
            OperationEvent.event_pk == event_pk,
            OperationEvent.assurance == WEAK,
        )
        .values(strategy=strategy, assurance=STRONG)
        .execution_options(synchronize_session=False)
    )
    return "upgraded" if upgraded.rowcount else None  # type: ignore[attr-defined]


def _learn_subject(
    session: Session, operation: Operation, contract: Contract, subject_id: str, now: datetime
) -> bool:
    """Record the subject id an operation learned from a strongly correlated event."""
    locked = session.execute(
        select(Operation).where(Operation.id == operation.id).with_for_update()
    ).scalar_one()
    if locked.subject_id is not None or locked.final:
        return False
    learned = dict(locked.learned_keys or {})
    learned[contract.subject.identity.key] = subject_id
    session.execute(
        update(Operation)
        .where(Operation.id == operation.id, Operation.subject_id.is_(None))
        .values(subject_id=subject_id, learned_keys=learned, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.refresh(operation)
    log.info(
        "operation %s learned its subject %s",
        operation.id,
        subject_id,
        extra={"operation_id": operation.id, "subject_id": subject_id},
    )
    return True


def _record_link(
    session: Session,
    result: IntakeResult,
    *,
    operation: Operation,
    event_pk: int,
    strategy: str,
    assurance: str,
    now: datetime,
    event_time: datetime,
) -> None:
    written = _link(
        session,
        operation=operation,
        event_pk=event_pk,
        strategy=strategy,
        assurance=assurance,
        now=now,
    )
    if written is not None:
        result.links.append(
            Link(
                operation.id,
                event_pk,
                strategy,
                assurance,
                operation.final,
                upgraded=written == "upgraded",
                older=event_time < operation.created_at,
            )
        )


# What correlation reads of an operation (the decision and other documents stay unloaded).
_CORRELATION_COLUMNS = (
    Operation.id,
    Operation.workspace_id,
    Operation.contract_id,
    Operation.contract_version,
    Operation.contract_hash,
    Operation.custom_contract_id,
    Operation.state,
    Operation.final,
    Operation.input,
    Operation.action_result,
    Operation.subject_id,
    Operation.learned_keys,
    Operation.created_at,
)


def correlate_event(
    session: Session,
    *,
    event_pk: int,
    workspace_id: str,
    provider: str,
    event: ParsedEvent,
    now: datetime,
    result: IntakeResult | None = None,
) -> IntakeResult:
    """Link a newly stored event (row ``event_pk``) to every operation it correlates with.

    One query finds the candidates: operations whose subject id is the event's object id,
    the operation whose id is the event's idempotency key, and open operations without a
    subject id whose fingerprint field matches (narrowed in SQL on one field, all fields
    compared here).
    """
    result = result or IntakeResult(event_pk=event_pk, duplicate=False)
    conditions: list[Any] = []
    if event.object_id is not None:
        conditions.append(Operation.subject_id == event.object_id)
    if event.idempotency_key is not None:
        conditions.append(Operation.id == event.idempotency_key)
    probe = fingerprint_probe(provider, event.keys)
    if probe is not None:
        conditions.append(
            and_(
                Operation.final.is_(False),
                Operation.subject_id.is_(None),
                Operation.input[probe].as_string() == event.keys[probe],
            )
        )
    if not conditions:
        return result
    candidates = session.execute(
        select(Operation)
        .options(load_only(*_CORRELATION_COLUMNS))
        .where(Operation.workspace_id == workspace_id, or_(*conditions))
        .order_by(Operation.id)
    ).scalars()
    weak: list[tuple[Operation, Match]] = []
    for op in list(candidates):
        contract = contract_of(session, op)
        if contract is None:
            continue
        keys = operation_keys(contract, op, final=op.final)
        found = match(event, provider, keys, fingerprinted=probe is not None)
        if found is None:
            continue
        if found.assurance == WEAK:
            weak.append((op, found))
            continue
        if found.learns:
            assert event.object_id is not None  # what the operation learns
            if _learn_subject(session, op, contract, event.object_id, now):
                result.learned.append(op.id)
                correlate_pending_events(session, op, now, result=result)
        _record_link(
            session,
            result,
            operation=op,
            event_pk=event_pk,
            strategy=found.strategy,
            assurance=found.assurance,
            now=now,
            event_time=event.provider_timestamp,
        )
    # Weak matches: open operations not yet strongly correlated (no subject id) whose every
    # fingerprint key equals the event's. An operation that knows its subject needs none (its
    # webhook channels find the charge's other events by key value).
    linked = {link.operation_id for link in result.links}
    for op, found in weak:
        if op.id not in linked:
            _record_link(
                session,
                result,
                operation=op,
                event_pk=event_pk,
                strategy=found.strategy,
                assurance=found.assurance,
                now=now,
                event_time=event.provider_timestamp,
            )
    return result


_EVENTS_WITH_KEYS = (
    select(Event)
    .where(
        Event.id.in_(
            select(EventKey.event_pk)
            .where(
                EventKey.workspace_id == bindparam("workspace_id"),
                EventKey.provider.in_(bindparam("providers", expanding=True)),
                tuple_(EventKey.name, EventKey.value).in_(bindparam("pairs", expanding=True)),
            )
            .distinct()
        )
    )
    .order_by(Event.provider_timestamp, Event.id)
)
"""Built once: every action report runs it up to three times, and building the two selects and
their cache key each time cost more CPU than the query."""


def _events_with_keys(
    session: Session,
    workspace_id: str,
    providers: Iterable[str],
    pairs: Iterable[tuple[str, str]],
) -> list[Event]:
    """The workspace's events of ``providers`` carrying any of the ``(name, value)`` pairs."""
    wanted = list(pairs)
    if not wanted:
        return []
    return list(
        session.execute(
            _EVENTS_WITH_KEYS,
            {"workspace_id": workspace_id, "providers": sorted(set(providers)), "pairs": wanted},
        ).scalars()
    )


CORRELATION_LOCK_CLASS: Final = 1_886_547_830
"""First key of the PostgreSQL advisory locks that order correlation per workspace."""


def lock_correlation(session: Session, workspace_ids: Iterable[str], *, shared: bool) -> None:
    """Order the two sides of correlation in a workspace (PostgreSQL; SQLite serialises
    writers). A transaction that teaches an operation its keys holds the lock shared from
    before it locks the operation's row until it commits; a correlator takes it exclusively
    before it looks for candidates. Without it, an event stored while an action report is in
    flight could be missed by both: the report's scan ran before the event was stored, the
    correlator's candidate query before the report committed. Locks are taken in workspace
    order, the advisory lock always before any row lock."""
    if session.get_bind().dialect.name != "postgresql":
        return
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    for workspace_id in sorted(set(workspace_ids)):
        session.execute(
            text(f"SELECT {function}(:kind, hashtext(:workspace))"),
            {"kind": CORRELATION_LOCK_CLASS, "workspace": workspace_id},
        )


def correlate_pending_events(
    session: Session, operation: Operation, now: datetime, *, result: IntakeResult | None = None
) -> list[int]:
    """Link the events already stored that correlate with ``operation``; return new links.

    Call it whenever an operation learns keys (action report with a result id, an error or
    timeout report, after learning a subject id): events that arrived before then are matched
    now. When a stored event of the subject's type carries the operation id as its idempotency
    key and the operation has no subject id yet, the operation learns it here. Idempotent.
    The caller holds :func:`lock_correlation` (shared) for the workspace since before it locked
    the operation's row.
    """
    contract = contract_of(session, operation)
    if contract is None:
        return []
    providers = event_providers(contract)
    result = result if result is not None else IntakeResult(event_pk=None, duplicate=False)
    before = len(result.links)
    idem = idempotency_value(contract, operation)
    if idem is not None:
        for row in _events_with_keys(
            session, operation.workspace_id, providers, [("idempotency_key", idem)]
        ):
            if (
                operation.subject_id is None
                and row.object_id is not None
                and of_subject_type(contract, row.type)
                and _learn_subject(session, operation, contract, row.object_id, now)
            ):
                result.learned.append(operation.id)
            _record_link(
                session,
                result,
                operation=operation,
                event_pk=row.id,
                strategy="idempotency_key",
                assurance=STRONG,
                now=now,
                event_time=row.provider_timestamp,
            )
    subjects = subject_values(operation, contract)
    if subjects:
        for row in _events_with_keys(
            session,
            operation.workspace_id,
            providers,
            [("object_id", value) for value in sorted(subjects)],
        ):
            _record_link(
                session,
                result,
                operation=operation,
                event_pk=row.id,
                strategy="resource_id",
                assurance=STRONG,
                now=now,
                event_time=row.provider_timestamp,
            )
    fingerprint = fingerprint_of(contract, operation)
    if fingerprint and not operation.final and operation.subject_id is None:
        for row in _events_with_keys(
            session, operation.workspace_id, providers, sorted(fingerprint.items())
        ):
            keys = _keys_of(session, row.id)
            if all(keys.get(k) == v for k, v in fingerprint.items()):
                _record_link(
                    session,
                    result,
                    operation=operation,
                    event_pk=row.id,
                    strategy="fingerprint",
                    assurance=WEAK,
                    now=now,
                    event_time=row.provider_timestamp,
                )
    return [link.event_pk for link in result.links[before:]]


def _keys_of(session: Session, event_pk: int) -> dict[str, str]:
    rows = session.execute(
        select(EventKey.name, EventKey.value).where(EventKey.event_pk == event_pk)
    ).all()
    return {name: value for name, value in rows}
