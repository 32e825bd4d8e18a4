"""Correlating a set of stored events at once: :func:`correlate_stored`.

On PostgreSQL one candidate query, one link insert (and one upgrade of weak links, when an event
was linked before from the operation's side) and one wake update serve the whole set, on the
driver, with plain rows; each event's links are decided by the rules of ``shared.intake.rules``
(:func:`~shared.intake.rules.match`), the same as :func:`shared.intake.correlate.correlate_event`
gives for each event in turn. An event that may teach an operation its subject id is
correlated on its own by ``correlate_event``, in the same transaction; so is every event on the
other databases. The operations' keys are derived once per operation and kept while its
documents do not change (:func:`_derived_with_registry_contract`).

The caller owns the transaction; nothing here commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from psycopg.rows import namedtuple_row
from sqlalchemy.orm import Session

from shared.core.contract import Contract
from shared.db.models import Operation
from shared.db.sql import driver_cursor
from shared.intake.contracts import contract_of, registry_contract
from shared.intake.correlate import correlate_event
from shared.intake.results import Delivery, IntakeResult, Link
from shared.intake.rules import (
    STRONG,
    OperationKeys,
    fingerprint_probe,
    fingerprinted,
    match,
    operation_keys,
)
from shared.intake.settle import settle

__all__ = ["correlate_stored"]


_PG_LINKS_MANY = """
    INSERT INTO operation_events (operation_id, event_pk, workspace_id, strategy, assurance,
                                  created_at)
    SELECT * FROM unnest(CAST(%(op)b AS TEXT[]), CAST(%(pk)b AS BIGINT[]), CAST(%(ws)b AS TEXT[]),
                         CAST(%(strategy)b AS TEXT[]), CAST(%(assurance)b AS TEXT[]),
                         CAST(%(at)b AS TIMESTAMPTZ[]))
    ON CONFLICT (operation_id, event_pk) DO NOTHING
    RETURNING operation_id, event_pk
    """
_PG_UPGRADE_MANY = """
    UPDATE operation_events SET strategy = u.strategy, assurance = 'strong'
    FROM unnest(CAST(%(op)b AS TEXT[]), CAST(%(pk)b AS BIGINT[]), CAST(%(strategy)b AS TEXT[]))
         AS u(op, pk, strategy)
    WHERE operation_events.operation_id = u.op AND operation_events.event_pk = u.pk
      AND operation_events.assurance = 'weak'
    RETURNING operation_events.operation_id, operation_events.event_pk
    """
"""The arrays of these statements and of ``_PG_CANDIDATES`` go as binary parameters
(``%(name)b``): psycopg writes each element as it is, where the text format searches every
element for what to quote."""


@dataclass(slots=True)
class _Candidate:
    """An operation that may correlate (a row of ``_PG_CANDIDATES``), with what matching reads
    of it computed once."""

    op: Any
    keys: OperationKeys


_PG_CANDIDATES = """
    SELECT id, workspace_id, contract_hash, subject_id, final, created_at,
           CAST(input AS TEXT) AS input_text, CAST(action_result AS TEXT) AS action_result_text,
           CAST(learned_keys AS TEXT) AS learned_keys_text
    FROM operations
    WHERE workspace_id = ANY(CAST(%(workspaces)b AS TEXT[])) AND ({matches})
    ORDER BY id
    """
"""The candidate operations of a batch (``_candidates`` fills in the matches). The documents as
stored (the ``json`` type keeps the text it was given): the derivation's cache compares them,
and they are decoded only when an operation's keys are derived anew."""


@dataclass(frozen=True, slots=True)
class _OperationDocs:
    """What the key helpers read of an operation (``_OperationKeys``), decoded."""

    id: str
    input: Any
    action_result: Any
    subject_id: str | None
    learned_keys: Any


def _json_of(stored: str | None) -> Any:
    return None if stored is None else json.loads(stored)


def _derive(
    contract: Contract,
    op_id: str,
    subject_id: str | None,
    final: bool,
    input_text: str | None,
    action_result_text: str | None,
    learned_keys_text: str | None,
) -> OperationKeys:
    """The keys of a candidate operation (``shared.intake.rules.operation_keys``), from its
    documents as stored."""
    docs = _OperationDocs(
        id=op_id,
        input=_json_of(input_text),
        action_result=_json_of(action_result_text),
        subject_id=subject_id,
        learned_keys=_json_of(learned_keys_text),
    )
    return operation_keys(contract, docs, final=final)


def _derived_from(op: Any) -> tuple[str, str | None, bool, str | None, str | None, str | None]:
    """What a candidate row's keys are derived from (:func:`_derive`'s arguments after the
    contract)."""
    return (
        op.id, op.subject_id, op.final,
        op.input_text, op.action_result_text, op.learned_keys_text,
    )  # fmt: skip


@lru_cache(maxsize=16_384)
def _derived_with_registry_contract(
    contract_hash: str,
    op_id: str,
    subject_id: str | None,
    final: bool,
    input_text: str | None,
    action_result_text: str | None,
    learned_keys_text: str | None,
) -> OperationKeys:
    """:func:`_derive` for an operation bound to a registry contract, kept by everything the
    keys are derived from: an operation whose keys did not change since the last batch that
    named it is not decoded and derived again, one whose keys changed has other arguments.
    (A custom contract is loaded through the session each time, and not kept here.)"""
    contract = registry_contract(contract_hash)
    assert contract is not None  # the caller found it by this hash
    return _derive(
        contract, op_id, subject_id, final, input_text, action_result_text, learned_keys_text
    )


def _candidates(
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]]
) -> list[_Candidate]:
    """PostgreSQL: one query for the operations any of the pending events may correlate with,
    on the driver (plain rows: building tracked objects, or compiling the statement, cost more
    than the query)."""
    params: dict[str, Any] = {"workspaces": sorted({d.workspace_id for d, _ in pending})}
    matches: list[str] = []
    objects = sorted({d.event.object_id for d, _ in pending if d.event.object_id})
    if objects:
        matches.append("subject_id = ANY(CAST(%(objects)b AS TEXT[]))")
        params["objects"] = objects
    idems = sorted({d.event.idempotency_key for d, _ in pending if d.event.idempotency_key})
    if idems:
        matches.append("id = ANY(CAST(%(idems)b AS TEXT[]))")
        params["idems"] = idems
    probes: dict[str, set[str]] = {}
    for d, _ in pending:
        probe = fingerprint_probe(d.provider, d.event.keys)
        if probe is not None:
            probes.setdefault(probe, set()).add(d.event.keys[probe])
    for n, (probe, probe_values) in enumerate(sorted(probes.items())):
        matches.append(
            f"(final IS FALSE AND subject_id IS NULL "
            f"AND input ->> %(probe_{n})s = ANY(CAST(%(probe_values_{n})b AS TEXT[])))"
        )
        params[f"probe_{n}"] = probe
        params[f"probe_values_{n}"] = sorted(probe_values)
    if not matches:
        return []
    with driver_cursor(session, namedtuple_row) as cursor:
        # All rows at once: iterating a result fetches one row per call.
        statement = _PG_CANDIDATES.format(matches=" OR ".join(matches))
        rows = cursor.execute(statement, params).fetchall()
    found: list[_Candidate] = []
    for op in rows:
        contract = registry_contract(op.contract_hash)
        if contract is None:  # a custom contract (or one no longer registered)
            loaded = session.get(Operation, op.id)
            contract = None if loaded is None else contract_of(session, loaded)
            if contract is None:
                continue
            keys = _derive(contract, *_derived_from(op))
        else:
            keys = _derived_with_registry_contract(op.contract_hash, *_derived_from(op))
        found.append(_Candidate(op, keys))
    return found


def correlate_stored(
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]], *, now: datetime
) -> None:
    """Correlate stored, not yet correlated events (each with the result its storing gave),
    wake the open operations they strongly correlate with, and mark them correlated.

    Fills each result's ``links``, ``learned`` and ``wakes``; the caller commits, then
    dispatches the wakes. On PostgreSQL one candidate query, one link insert and one wake
    update serve the whole batch; an event that may teach an operation its subject id (an
    idempotency-key match on an operation without one) is correlated on its own, in the same
    transaction. Same links as :func:`correlate_event` for each event in turn.
    """
    if not pending:
        return
    if session.get_bind().dialect.name == "postgresql":
        slow = _link_batch(session, pending, now)
    else:
        slow = list(pending)
    for d, r in slow:
        assert r.event_pk is not None
        correlate_event(
            session,
            event_pk=r.event_pk,
            workspace_id=d.workspace_id,
            provider=d.provider,
            event=d.event,
            now=now,
            result=r,
        )
    settle(session, pending, now=now)


def _link_batch(  # noqa: C901  # pay down: linking, reuse and refusal in one; a step each
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]], now: datetime
) -> list[tuple[Delivery, IntakeResult]]:
    """PostgreSQL: link the pending events with one candidate query and one link insert;
    return the events that may teach an operation its subject id (left to go one by one)."""
    candidates = _candidates(session, pending)
    # Indexes of the candidates by what an event can match them on (no event scans them all).
    by_idempotency: dict[tuple[str, str], list[_Candidate]] = {}
    by_subject: dict[tuple[str, str], list[_Candidate]] = {}
    weak_by_print: dict[tuple[str, tuple[tuple[str, str], ...]], list[_Candidate]] = {}
    print_names: set[tuple[str, ...]] = set()
    for c in candidates:
        ws = c.op.workspace_id
        if c.keys.idempotency is not None:
            by_idempotency.setdefault((ws, c.keys.idempotency), []).append(c)
        for value in c.keys.subjects:
            by_subject.setdefault((ws, value), []).append(c)
        if c.keys.fingerprint:
            items = tuple(sorted(c.keys.fingerprint.items()))
            weak_by_print.setdefault((ws, items), []).append(c)
            print_names.add(tuple(name for name, _ in items))
    links: list[tuple[Any, int, str, str, IntakeResult, datetime]] = []
    slow: list[tuple[Delivery, IntakeResult]] = []
    for d, r in pending:
        event, pk, ws = d.event, r.event_pk, d.workspace_id
        assert pk is not None
        strong: dict[str, _Candidate] = {}
        if event.idempotency_key is not None:
            strong.update((c.op.id, c) for c in by_idempotency.get((ws, event.idempotency_key), ()))
        if event.object_id is not None:
            strong.update((c.op.id, c) for c in by_subject.get((ws, event.object_id), ()))
        # The indexes only narrow: ``match`` decides, strong matches first, in id order.
        matches: list[tuple[Any, str, str]] = []
        learns = False
        printed = fingerprinted(d.provider, event.keys)
        for op_id in sorted(strong):
            c = strong[op_id]
            found = match(event, d.provider, c.keys, fingerprinted=printed)
            if found is not None:
                learns = learns or found.learns
                matches.append((c.op, found.strategy, found.assurance))
        if learns:
            slow.append((d, r))
            continue
        if printed:
            weak: dict[str, _Candidate] = {}
            for print_of in print_names:
                if all(name in event.keys for name in print_of):
                    items = tuple((name, event.keys[name]) for name in print_of)
                    weak.update((c.op.id, c) for c in weak_by_print.get((ws, items), ()))
            for op_id in sorted(weak):
                if op_id not in strong:
                    found = match(event, d.provider, weak[op_id].keys, fingerprinted=printed)
                    if found is not None:
                        matches.append((weak[op_id].op, found.strategy, found.assurance))
        links.extend(
            (op, pk, strategy, assurance, r, event.provider_timestamp)
            for op, strategy, assurance in matches
        )
    if links:
        params = {
            "op": [op.id for op, *_ in links],
            "pk": [pk for _, pk, *_ in links],
            "ws": [op.workspace_id for op, *_ in links],
            "strategy": [strategy for _, _, strategy, *_ in links],
            "assurance": [assurance for _, _, _, assurance, *_ in links],
            "at": [now for _ in links],
        }
        with driver_cursor(session) as cursor:  # plain statements, plain rows
            written = set(cursor.execute(_PG_LINKS_MANY, params).fetchall())
        # An event linked before (from the operation's side): a strong match upgrades a weak
        # link; anything else was there already and wakes nothing.
        upgraded: set[tuple[str, int]] = set()
        again = [
            (op, pk, strategy)
            for op, pk, strategy, assurance, *_ in links
            if assurance == STRONG and (op.id, pk) not in written
        ]
        if again:
            upgrade = {
                "op": [op.id for op, _, _ in again],
                "pk": [pk for _, pk, _ in again],
                "strategy": [strategy for _, _, strategy in again],
            }
            with driver_cursor(session) as cursor:
                upgraded = set(cursor.execute(_PG_UPGRADE_MANY, upgrade).fetchall())
        for op, pk, strategy, assurance, r, event_time in links:
            if (op.id, pk) in written or (op.id, pk) in upgraded:
                r.links.append(
                    Link(
                        op.id,
                        pk,
                        strategy,
                        assurance,
                        op.final,
                        upgraded=(op.id, pk) not in written,
                        older=event_time < op.created_at,
                    )
                )
    return slow
