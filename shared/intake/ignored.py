"""New links whose event cannot count for its operation because it is older than the
operation (``shared.core.ignored.why_ignored``, reason ``before_operation``).

The intake counts what it can tell from an event alone (an API version no contract reads, a
type no channel reads: ``services.ingress.intake.webhooks``). An event older than an operation can
only be told once it is linked to that operation, so :func:`name_ignored` looks at the new
links of a correlation. Each link says whether its event is older than its operation
(``Link.older``, told where the link is made, from what is already in hand): only those cost a
query, and the operation's contract decides. It fills each result's ``ignored`` in the caller's
transaction;
:func:`count_ignored` counts them in ``provely_events_ignored_total`` after the commit. A link
is new once per (event, operation) (an upgrade of a weak link is not new), so correlating again
counts nothing twice.

The caller owns the transaction; nothing here commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.core.contract import Contract
from shared.core.ignored import BEFORE_OPERATION, why_ignored
from shared.core.types import EventRecord
from shared.db.models import Event, Operation
from shared.db.sql import one_of
from shared.intake.contracts import contract_of, registry_contract
from shared.intake.results import IntakeResult

__all__ = ["count_ignored", "name_ignored"]


def name_ignored(session: Session, results: Sequence[IntakeResult]) -> None:
    """Append ``(provider, "before_operation")`` to a result's ``ignored`` for each of its new
    links whose event is older than the operation for the operation's contract (links not
    ``older`` are not looked at)."""
    pairs = {
        (link.operation_id, link.event_pk): r
        for r in results
        for link in r.links
        if link.older and not link.upgraded
    }
    if not pairs:
        return
    rows = session.execute(
        select(
            Operation.id.label("operation_id"),
            Operation.created_at,
            Operation.contract_hash,
            Event.id.label("event_pk"),
            Event.provider,
            Event.event_id,
            Event.type,
            Event.provider_timestamp,
            Event.body,
            Event.api_version,
        ).where(
            one_of(session, Operation.id, sorted({op for op, _ in pairs})),
            one_of(session, Event.id, sorted({pk for _, pk in pairs})),
            # A superset of "an earlier whole second" (what the reduction compares).
            Event.provider_timestamp < Operation.created_at,
        )
    ).all()
    contracts: dict[str, Contract | None] = {}
    for row in rows:
        result = pairs.get((row.operation_id, row.event_pk))
        if result is None:
            continue
        if row.operation_id not in contracts:
            contracts[row.operation_id] = _contract(session, row.operation_id, row.contract_hash)
        contract = contracts[row.operation_id]
        if contract is None:
            continue
        event = EventRecord(
            event_id=row.event_id,
            type=row.type,
            provider_timestamp=row.provider_timestamp,
            body=row.body,
            api_version=row.api_version,
        )
        found = why_ignored(contract, event=event, operation_created_at=row.created_at)
        if found is not None and found.reason == BEFORE_OPERATION:
            result.ignored.append((row.provider, BEFORE_OPERATION))


def _contract(session: Session, operation_id: str, contract_hash: str) -> Contract | None:
    contract = registry_contract(contract_hash)
    if contract is not None:
        return contract
    op = session.get(Operation, operation_id)  # a custom contract
    return None if op is None else contract_of(session, op)


def count_ignored(results: Iterable[IntakeResult]) -> None:
    """Count the results' ``ignored`` in ``provely_events_ignored_total`` (after commit)."""
    # Imported when first counting, as every counter of the shared code is: a serving process
    # sets ``PROMETHEUS_MULTIPROC_DIR`` before ``prometheus_client`` is first imported.
    from shared.runtime.metrics import EVENTS_IGNORED

    for r in results:
        for provider, reason in r.ignored:
            EVENTS_IGNORED.labels(provider=provider, reason=reason).inc()
