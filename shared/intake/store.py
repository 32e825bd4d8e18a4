"""Webhook intake behind the signature check: parse, store once, correlate, and name the wakes.

Owns what happens to a delivery once its signature holds (``shared.trust.signatures`` decides that):

1. :func:`parse_event` reads the event by the provider skill's ``event_shape`` (id, type, the
   event's own creation time, api version, object id, the correlation keys it carries).
   Malformed JSON or a missing id / type / time raises :class:`MalformedEvent`.
2. :func:`store_event` inserts it with ``INSERT … ON CONFLICT DO NOTHING`` on
   (workspace, provider, event id); a repeat only bumps ``events.duplicates``. The keys the event
   carries go to ``event_keys`` (indexed by name and value).
3. :func:`correlate_event` links the event to operations (``operation_events``):
   ``resource_id`` (strong) when the event's object id is an operation's subject id;
   ``idempotency_key`` (strong) when the event carries an operation id as its idempotency key —
   an operation that has no subject id yet learns it from such an event of the subject's type
   (``learned_keys[<identity key>]`` and ``subject_id``); ``fingerprint`` (weak) when every
   fingerprint key of the operation's contract matches, for operations not yet strongly
   correlated (no subject id). A weak link never verifies: the engine
   only decides once the subject is strongly correlated.
4. :func:`correlate_pending_events` does the same from the operation's side, for events that
   arrived before the operation could correlate (before its action report, or before it learned
   its subject id); meant for the action report and the observer.

Every strong link to an open operation is a wake (``shared.lifecycle.scheduling.wake_for_events``
in the same transaction: the operation's next observation is now; the caller dispatches the new
fences after commit). Links to final operations are kept too and returned as ``late``. Every
correlated event is also looked up in the watch of VERIFIED operations by the keys it carries,
linked or not (``shared.lifecycle.watch``): each watched operation it names gets a recheck,
dispatched with the wakes.

Events whose api version is not one of the contract's are stored and linked like any other; the
core's reduction (``shared.core.events.reduce_events``) sets them aside using
``events.api_version``, which :func:`event_record` hands over.

:func:`ingest_event` does steps 2 to 4 for one delivery. The webhook intake splits them: it
stores the deliveries that arrived together with :func:`store_many` (one statement) and answers;
a correlator then claims the stored events with :func:`correlate_backlog`, which links and wakes
them with :func:`correlate_stored` (set-based statements on PostgreSQL).

The caller owns the transaction; nothing here commits.

Errors::

    MalformedEvent       the verified body is not an event of the expected shape (400)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, lru_cache, partial
from typing import Any, Final, Protocol

from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, and_, delete, insert, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, load_only

from shared.core.contract import Contract
from shared.core.skill import EventShape
from shared.core.storable import unstorable
from shared.core.types import EventRecord
from shared.db.models import Event, EventBacklog, EventKey, Operation, OperationEvent
from shared.db.sql import driver_cursor, keyed_lookups, one_of
from shared.evidence.locks import PG_SHARED_LOCKS, evidence_lock_ids
from shared.lifecycle.scheduling import wake_for_events
from shared.lifecycle.watch import rechecks_for_events, request_rechecks
from shared.trust.signatures import VerifiedDelivery

__all__ = [
    "DEFAULT_SHAPES",
    "UNSTORABLE",
    "Delivery",
    "IntakeResult",
    "Link",
    "MalformedEvent",
    "ParsedEvent",
    "contract_of",
    "correlate_backlog",
    "correlate_event",
    "correlate_pending_events",
    "correlate_stored",
    "event_providers",
    "event_record",
    "event_shape_for",
    "fingerprint_key_names",
    "ingest_event",
    "lock_correlation",
    "parse_event",
    "store_event",
    "store_many",
]

log = logging.getLogger(__name__)

STRONG: Final = "strong"
WEAK: Final = "weak"
_MAX_ID = 255
_MAX_TYPE = 200
_MAX_VERSION = 64
_MAX_KEY_VALUE = 255
# Epoch seconds a provider timestamp may take: 2000-01-01 .. 2100-01-01.
_MIN_EPOCH, _MAX_EPOCH = 946_684_800, 4_102_444_800

DEFAULT_SHAPES: Mapping[str, EventShape] = {
    # Used when the provider's skill declares no event shape, by the connection's scheme.
    "stripe": EventShape(
        id="$event.id",
        type="$event.type",
        created="$event.created",
        api_version="$event.api_version",
        object="$event.data.object",
        object_id="$event.data.object.id",
        idempotency_key="$event.request.idempotency_key",
        correlation_keys={
            "object_id": "$event.data.object.id",
            "idempotency_key": "$event.request.idempotency_key",
        },
    ),
    "standard_webhooks": EventShape(
        id="$delivery.id",
        type="$event.type",
        created="$event.timestamp",
        object="$event.data",
        object_id="$event.data.id",
        correlation_keys={"object_id": "$event.data.id"},
    ),
    "github": EventShape(
        id="$delivery.id",
        type="$delivery.event_type",
        created="$delivery.received_at",
        object="$event",
        correlation_keys={},
    ),
}


UNSTORABLE = "unstorable"
"""The reason of a verified body that no table can hold (``shared.core.storable``)."""


class MalformedEvent(ValueError):
    """A verified body that is not an event of the expected shape; refused, stored nowhere."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    event_id: str
    type: str
    provider_timestamp: datetime
    body: dict[str, Any]
    api_version: str | None = None
    object_id: str | None = None
    idempotency_key: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Link:
    operation_id: str
    event_pk: int
    strategy: str
    assurance: str
    final: bool


@dataclass(slots=True)
class IntakeResult:
    """What one verified delivery did to the record (filled in the caller's transaction)."""

    event_pk: int | None
    duplicate: bool
    links: list[Link] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)  # operations that learned their subject
    wakes: list[tuple[str, int]] = field(default_factory=list)  # (operation id, fence)

    @property
    def late(self) -> list[str]:
        """Final operations that this event was linked to (late evidence)."""
        return sorted({link.operation_id for link in self.links if link.final})

    @property
    def to_wake(self) -> list[str]:
        """Open operations strongly correlated with the event (a weak link wakes nothing)."""
        return sorted(
            {
                link.operation_id
                for link in self.links
                if not link.final and link.assurance == STRONG
            }
        )


# ------------------------------------------------------------------------------------ parsing


_ABSENT = object()


def _walk(doc: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        # ``type(doc) is dict`` first: what JSON decodes to, without the ABC check
        if type(doc) is dict or isinstance(doc, Mapping):
            doc = doc.get(part, _ABSENT)
            if doc is _ABSENT:
                return None
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


@lru_cache(maxsize=1024)
def _expression(expr: str) -> tuple[str, tuple[str, ...]]:
    """An expression's root and path (``$event.data.object.id`` → ``$event``, its parts),
    split once: skills and contracts hold a few hundred at most."""
    root, _, rest = expr.partition(".")
    return root, tuple(rest.split(".")) if rest else ()


def _resolve(expr: str | None, body: Any, delivery: Mapping[str, Any]) -> Any:
    """``$event.a.b`` reads the body, ``$delivery.x`` what the signature check learned."""
    if not expr:
        return None
    root, parts = _expression(expr)
    if root == "$event":
        return _walk(body, parts)
    if root == "$delivery":
        return _walk(delivery, parts)
    return None


def _text(value: Any, limit: int) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        value = str(value)
    if isinstance(value, str) and 0 < len(value) <= limit:
        return value
    return None


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        if not _MIN_EPOCH <= value <= _MAX_EPOCH:
            return None
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        if value.isdigit():
            return _timestamp(int(value))
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


def parse_event(
    body: bytes,
    *,
    shape: EventShape,
    delivery: VerifiedDelivery,
    received_at: datetime,
    extra_keys: Iterable[str] = (),
) -> ParsedEvent:
    """Read a verified body by ``shape``. ``extra_keys`` are object fields kept as keys too.

    The provider timestamp is the event's own creation time (``shape.created``), never the
    signature's timestamp.
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedEvent("malformed_json", "the body is not valid JSON") from exc
    if not isinstance(doc, dict):
        raise MalformedEvent("malformed_event", "the body is not a JSON object")
    found = unstorable(doc)
    if found is not None:
        # NaN, a NUL character, a lone surrogate, too deep: no retry can ever store it.
        raise MalformedEvent(
            UNSTORABLE, f"the event cannot be stored: {found.field} {found.message}"
        )
    meta = {
        "id": delivery.delivery_id,
        "timestamp": delivery.timestamp,
        "event_type": delivery.event_type,
        "received_at": received_at,
    }
    event_id = _text(_resolve(shape.id, doc, meta), _MAX_ID)
    if event_id is None:
        raise MalformedEvent("missing_event_id", "the event carries no usable id")
    event_type = _text(_resolve(shape.type, doc, meta), _MAX_TYPE)
    if event_type is None:
        raise MalformedEvent("missing_event_type", "the event carries no usable type")
    created = _timestamp(_resolve(shape.created, doc, meta))
    if created is None:
        raise MalformedEvent("missing_event_time", "the event carries no usable creation time")
    api_version = _text(_resolve(shape.api_version, doc, meta), _MAX_VERSION)
    object_id = _text(_resolve(shape.object_id, doc, meta), _MAX_KEY_VALUE)
    idempotency_key = _text(_resolve(shape.idempotency_key, doc, meta), _MAX_KEY_VALUE)
    keys: dict[str, str] = {}
    for name, expr in shape.correlation_keys.items():
        value = _text(_resolve(expr, doc, meta), _MAX_KEY_VALUE)
        if value is not None:
            keys[name] = value
    obj = _resolve(shape.object, doc, meta)
    for name in extra_keys:
        if name not in keys and isinstance(obj, Mapping):
            value = _text(obj.get(name), _MAX_KEY_VALUE)
            if value is not None:
                keys[name] = value
    if object_id is not None:
        keys.setdefault("object_id", object_id)
    if idempotency_key is not None:
        keys.setdefault("idempotency_key", idempotency_key)
    return ParsedEvent(
        event_id=event_id,
        type=event_type,
        provider_timestamp=created,
        body=doc,
        api_version=api_version,
        object_id=object_id,
        idempotency_key=idempotency_key,
        keys=keys,
    )


@cache
def _registry_module() -> Any:
    from shared.trust import registry  # at first use: loading the registry module costs ~0.2 s

    return registry


def _registry() -> Any:
    return _registry_module().get_registry()


def event_shape_for(provider: str, scheme: str) -> EventShape:
    """The provider skill's event shape, else the default shape of the signature scheme."""
    skill = _registry().skill(provider)
    shape = skill.manifest.event_shape if skill is not None else None
    if shape is not None:
        return shape  # type: ignore[no-any-return]
    return DEFAULT_SHAPES.get(scheme, DEFAULT_SHAPES["stripe"])


def event_providers(contract: Contract) -> frozenset[str]:
    """Providers whose events may correlate with the contract's operations: the skill's, and
    the provider each webhook channel names (an app contract may read Stripe's events)."""
    return frozenset(
        {contract.skill.provider}
        | {ch.provider_of(contract) for ch in contract.channels if ch.verifier == "webhook"}
    )


def fingerprint_key_names(provider: str) -> frozenset[str]:
    """Names of the fingerprint keys the provider's shipped contracts correlate on."""
    registry = _registry()
    cached = _fingerprint_names.get(provider)
    if cached is not None and cached[0] is registry:
        return cached[1]
    names: set[str] = set()
    for entry in registry.entries():
        contract: Contract = entry.contract
        if provider not in event_providers(contract):
            continue
        for strategy in contract.correlation:
            if strategy.strategy == "fingerprint":
                names.update(key.name for key in strategy.keys)
    found = frozenset(names)
    _fingerprint_names[provider] = (registry, found)
    return found


# provider -> (the registry it was computed from, names); recomputed when the registry changes
_fingerprint_names: dict[str, tuple[Any, frozenset[str]]] = {}


# ------------------------------------------------------------------------------------ storing


def _insert(session: Session, table: Any) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise RuntimeError(f"unsupported database dialect {dialect}")


_PG_STORE = text(
    """
    WITH inserted AS (
        INSERT INTO events (workspace_id, provider, event_id, type, provider_timestamp,
                            api_version, object_id, idempotency_key, body, raw, digest,
                            duplicates, received_at)
        VALUES (:workspace_id, :provider, :event_id, :type, :provider_timestamp,
                :api_version, :object_id, :idempotency_key, CAST(:body AS JSON), :raw, :digest,
                0, :received_at)
        ON CONFLICT (workspace_id, provider, event_id) DO NOTHING
        RETURNING id
    ), keyed AS (
        INSERT INTO event_keys (event_pk, workspace_id, provider, name, value)
        SELECT inserted.id, :workspace_id, :provider, k.name, k.value
        FROM inserted, unnest(CAST(:names AS TEXT[]), CAST(:values AS TEXT[])) AS k(name, value)
    ), queued AS (
        INSERT INTO event_backlog (event_pk, received_at)
        SELECT inserted.id, :received_at FROM inserted
    )
    SELECT id FROM inserted
    """
)


def store_event(
    session: Session,
    *,
    workspace_id: str,
    provider: str,
    event: ParsedEvent,
    raw: bytes,
    now: datetime,
) -> int | None:
    """Insert the event once, not yet correlated; return its row id, or None when it was
    already stored.

    A repeat writes nothing but ``duplicates = duplicates + 1`` on the stored row.
    """
    stmt = (
        _insert(session, Event)
        .values(
            workspace_id=workspace_id,
            provider=provider,
            event_id=event.event_id,
            type=event.type,
            provider_timestamp=event.provider_timestamp,
            api_version=event.api_version,
            object_id=event.object_id,
            idempotency_key=event.idempotency_key,
            body=event.body,
            raw=raw,
            digest=hashlib.sha256(raw).hexdigest(),
            duplicates=0,
            received_at=now,
        )
        .on_conflict_do_nothing(index_elements=["workspace_id", "provider", "event_id"])
        .returning(Event.id)
    )
    keys = sorted(event.keys.items())
    if keys and session.get_bind().dialect.name == "postgresql":
        # The shared evidence locks of its keys, held until the caller commits.
        locks = evidence_lock_ids((workspace_id, provider, value) for _, value in keys)
        session.connection().exec_driver_sql(PG_SHARED_LOCKS, {"locks": locks})
        # One round trip: the event, and its keys only when the event row is new.
        found = session.execute(
            _PG_STORE,
            {
                "workspace_id": workspace_id,
                "provider": provider,
                "event_id": event.event_id,
                "type": event.type,
                "provider_timestamp": event.provider_timestamp,
                "api_version": event.api_version,
                "object_id": event.object_id,
                "idempotency_key": event.idempotency_key,
                "body": json.dumps(event.body, separators=(",", ":")),
                "raw": raw,
                "digest": hashlib.sha256(raw).hexdigest(),
                "received_at": now,
                "names": [name for name, _ in keys],
                "values": [value for _, value in keys],
            },
        ).scalar_one_or_none()
        event_pk = None if found is None else int(found)
    else:
        event_pk = session.execute(stmt).scalar_one_or_none()
        if event_pk is not None:
            session.execute(insert(EventBacklog).values(event_pk=event_pk, received_at=now))
        if event_pk is not None and keys:
            session.execute(
                insert(EventKey),
                [
                    {
                        "event_pk": event_pk,
                        "workspace_id": workspace_id,
                        "provider": provider,
                        "name": name,
                        "value": value,
                    }
                    for name, value in keys
                ],
            )
    if event_pk is None:
        session.execute(
            update(Event)
            .where(
                Event.workspace_id == workspace_id,
                Event.provider == provider,
                Event.event_id == event.event_id,
            )
            .values(duplicates=Event.duplicates + 1)
            .execution_options(synchronize_session=False)
        )
        return None
    return int(event_pk)


# -------------------------------------------------------------------------------- correlating


def _registry_contract(contract_hash: str) -> Contract | None:
    """A contract of the registry by its hash (None: a custom contract, or one no longer
    registered)."""
    entry = _registry().by_hash(contract_hash)
    return None if entry is None else entry.contract


def contract_of(session: Session, operation: Operation) -> Contract | None:
    """The contract an operation was created with (None when it can no longer be found)."""
    contract = _registry_contract(operation.contract_hash)
    if contract is not None:
        return contract
    from shared.lifecycle.contracts import ContractNotFound, contract_for

    try:
        return contract_for(session, operation)
    except ContractNotFound:
        log.warning(
            "operation %s: contract not found, not correlated",
            operation.id,
            extra={"operation_id": operation.id},
        )
        return None


_contract_memo: dict[tuple[int, str], tuple[Contract, Any]] = {}
"""What correlation derives from a contract, by contract object and what (contracts are
frozen; an entry holds its contract, so the id cannot be another's while the entry lives)."""


def _of_contract(contract: Contract, what: str, derive: Callable[[], Any]) -> Any:
    """``derive()`` for ``contract``, computed once per contract object."""
    memo = _contract_memo.get((id(contract), what))
    if memo is not None and memo[0] is contract:
        return memo[1]
    value = derive()
    if len(_contract_memo) >= 4096:  # custom contracts come and go: keep it bounded
        _contract_memo.clear()
    _contract_memo[(id(contract), what)] = (contract, value)
    return value


def _strategy_keys(contract: Contract, strategy: str) -> tuple[tuple[str, str], ...]:
    """(name, expression) of the keys of the contract's correlation strategy ``strategy``."""
    keys: tuple[tuple[str, str], ...] = _of_contract(
        contract,
        strategy,
        lambda: tuple(
            (key.name, key.expr)
            for s in contract.correlation
            if s.strategy == strategy
            for key in s.keys
        ),
    )
    return keys


class _OperationKeys(Protocol):
    """What the key helpers below read of an operation: an ``Operation``, or a row of
    ``_CORRELATION_COLUMNS`` (the batched correlation reads plain rows, not tracked objects)."""

    @property
    def id(self) -> str: ...
    @property
    def input(self) -> Any: ...
    @property
    def action_result(self) -> Any: ...
    @property
    def subject_id(self) -> str | None: ...
    @property
    def learned_keys(self) -> Any: ...


def _operation_value(operation: _OperationKeys, expr: str) -> str | None:
    """The value of a correlation key expression for an operation (``$operation.id``,
    ``$input.*``, ``$action.result.*``); None when unknown."""
    root, parts = _expression(expr)
    if expr == "$operation.id":
        return operation.id
    if root == "$input":
        return _text(_walk(operation.input or {}, parts), _MAX_KEY_VALUE)
    if root == "$action" and parts[:1] == ("result",):
        return _text(_walk(operation.action_result or {}, parts[1:]), _MAX_KEY_VALUE)
    return None


def _idempotency_value(contract: Contract, operation: _OperationKeys) -> str | None:
    for _name, expr in _strategy_keys(contract, "idempotency_key"):
        value = _operation_value(operation, expr)
        if value is not None:
            return value
    return None


def _fingerprint(contract: Contract, operation: _OperationKeys) -> dict[str, str] | None:
    keys = _strategy_keys(contract, "fingerprint")
    if not keys:
        return None
    values = {name: _operation_value(operation, expr) for name, expr in keys}
    if any(v is None for v in values.values()):
        return None
    return {k: v for k, v in values.items() if v is not None}


def _subject_values(operation: _OperationKeys, contract: Contract) -> set[str]:
    values = set()
    if operation.subject_id:
        values.add(operation.subject_id)
    learned = (operation.learned_keys or {}).get(contract.subject.identity.key)
    if isinstance(learned, str) and learned:
        values.add(learned)
    for name, expr in _strategy_keys(contract, "resource_id"):
        value = _operation_value(operation, expr) or _text(
            (operation.learned_keys or {}).get(name), _MAX_KEY_VALUE
        )
        if value is not None:
            values.add(value)
    return values


def _of_subject_type(contract: Contract, event_type: str) -> bool:
    """True when an event type names the subject's object (``refund.created`` for
    ``stripe.refund``)."""
    return event_type.split(".")[0] == contract.subject.type.split(".")[-1]


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
) -> bool:
    """Write the link; True when it is new, or a weak link became strong (a weak link never
    replaces a strong one)."""
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
            _insert(session, OperationEvent)
            .values(**params)
            .on_conflict_do_nothing(index_elements=["operation_id", "event_pk"])
            .returning(OperationEvent.event_pk)
        ).scalar_one_or_none()
    if created is not None:
        return True
    if assurance != STRONG:
        return False
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
    return bool(upgraded.rowcount)  # type: ignore[attr-defined]


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
) -> None:
    if _link(
        session,
        operation=operation,
        event_pk=event_pk,
        strategy=strategy,
        assurance=assurance,
        now=now,
    ):
        result.links.append(Link(operation.id, event_pk, strategy, assurance, operation.final))


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
    names = fingerprint_key_names(provider)
    fingerprinted = bool(names) and names <= set(event.keys)
    if fingerprinted:
        probe = min(names, key=lambda n: (event.keys[n].lstrip("-").isdigit(), n))
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
    weak: list[tuple[Operation, Contract]] = []
    for op in list(candidates):
        contract = contract_of(session, op)
        if contract is None or provider not in event_providers(contract):
            continue
        if event.idempotency_key is not None and event.idempotency_key == _idempotency_value(
            contract, op
        ):
            if (
                op.subject_id is None
                and event.object_id is not None
                and _of_subject_type(contract, event.type)
                and _learn_subject(session, op, contract, event.object_id, now)
            ):
                result.learned.append(op.id)
                correlate_pending_events(session, op, now, result=result)
            _record_link(
                session,
                result,
                operation=op,
                event_pk=event_pk,
                strategy="idempotency_key",
                assurance=STRONG,
                now=now,
            )
        elif event.object_id is not None and event.object_id in _subject_values(op, contract):
            _record_link(
                session,
                result,
                operation=op,
                event_pk=event_pk,
                strategy="resource_id",
                assurance=STRONG,
                now=now,
            )
        elif fingerprinted and op.subject_id is None and not op.final:
            weak.append((op, contract))
    # Weak candidates: open operations not yet strongly correlated (no subject id) whose every
    # fingerprint key equals the event's. An operation that knows its subject needs none (its
    # webhook channels find the charge's other events by key value).
    linked = {link.operation_id for link in result.links}
    for op, contract in weak:
        fingerprint = _fingerprint(contract, op)
        if (
            op.id not in linked
            and fingerprint
            and all(event.keys.get(k) == v for k, v in fingerprint.items())
        ):
            _record_link(
                session,
                result,
                operation=op,
                event_pk=event_pk,
                strategy="fingerprint",
                assurance=WEAK,
                now=now,
            )
    return result


def _events_with_keys(
    session: Session,
    workspace_id: str,
    providers: Iterable[str],
    pairs: Iterable[tuple[str, str]],
) -> list[Event]:
    clauses = [and_(EventKey.name == n, EventKey.value == v) for n, v in pairs]
    if not clauses:
        return []
    pks = (
        select(EventKey.event_pk)
        .where(
            EventKey.workspace_id == workspace_id,
            EventKey.provider.in_(sorted(set(providers))),
            or_(*clauses),
        )
        .distinct()
    )
    return list(
        session.execute(
            select(Event).where(Event.id.in_(pks)).order_by(Event.provider_timestamp, Event.id)
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
    idem = _idempotency_value(contract, operation)
    if idem is not None:
        for row in _events_with_keys(
            session, operation.workspace_id, providers, [("idempotency_key", idem)]
        ):
            if (
                operation.subject_id is None
                and row.object_id is not None
                and _of_subject_type(contract, row.type)
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
            )
    subjects = _subject_values(operation, contract)
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
            )
    fingerprint = _fingerprint(contract, operation)
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
                )
    return [link.event_pk for link in result.links[before:]]


def _keys_of(session: Session, event_pk: int) -> dict[str, str]:
    rows = session.execute(
        select(EventKey.name, EventKey.value).where(EventKey.event_pk == event_pk)
    ).all()
    return {name: value for name, value in rows}


# -------------------------------------------------------------------------------- the whole


def ingest_event(
    session: Session,
    *,
    workspace_id: str,
    provider: str,
    event: ParsedEvent,
    raw: bytes,
    now: datetime,
) -> IntakeResult:
    """Store a verified event once, correlate it, and wake the open operations it names.

    On a repeat delivery only the duplicate counter moves; nothing is correlated or woken.
    The caller commits, then dispatches ``result.wakes``.
    """
    event_pk = store_event(
        session, workspace_id=workspace_id, provider=provider, event=event, raw=raw, now=now
    )
    if event_pk is None:
        return IntakeResult(event_pk=None, duplicate=True)
    result = correlate_event(
        session,
        event_pk=event_pk,
        workspace_id=workspace_id,
        provider=provider,
        event=event,
        now=now,
    )
    result.event_pk = event_pk
    result.wakes = wake_for_events(session, result.to_wake, now=now)
    _recheck_watched(
        session,
        [(Delivery(workspace_id, provider, event, raw, now), result)],
        now,
    )
    _mark_correlated(session, [event_pk])
    return result


@dataclass(frozen=True, slots=True)
class Delivery:
    """One verified, parsed delivery for :func:`store_many`."""

    workspace_id: str
    provider: str
    event: ParsedEvent
    raw: bytes
    now: datetime


_PG_STORE_MANY = """
    WITH locked AS (
        SELECT count(pg_advisory_xact_lock_shared(l)) AS n
        FROM unnest(CAST(%(locks)b AS BIGINT[])) AS l
    ), batch AS (
        SELECT t.* FROM locked, unnest(
            CAST(%(ws)b AS TEXT[]), CAST(%(prov)b AS TEXT[]), CAST(%(eid)b AS TEXT[]),
            CAST(%(typ)b AS TEXT[]), CAST(%(ts)b AS TIMESTAMPTZ[]), CAST(%(api)b AS TEXT[]),
            CAST(%(obj)b AS TEXT[]), CAST(%(idem)b AS TEXT[]), CAST(%(body)b AS TEXT[]),
            CAST(%(raw)b AS BYTEA[]), CAST(%(digest)b AS TEXT[]),
            CAST(%(recv)b AS TIMESTAMPTZ[]), CAST(%(n)b AS INT[])
        ) AS t(ws, prov, eid, typ, ts, api, obj, idem, body, raw, digest, recv, n)
    ), inserted AS (
        INSERT INTO events (workspace_id, provider, event_id, type, provider_timestamp,
                            api_version, object_id, idempotency_key, body, raw, digest,
                            duplicates, received_at)
        SELECT ws, prov, eid, typ, ts, api, obj, idem, CAST(body AS JSON), raw, digest, n - 1,
               recv
        FROM batch
        ORDER BY ws, prov, eid
        ON CONFLICT (workspace_id, provider, event_id) DO NOTHING
        RETURNING id, workspace_id, provider, event_id, received_at
    ), queued AS (
        INSERT INTO event_backlog (event_pk, received_at)
        SELECT id, received_at FROM inserted
    ), keyed AS (
        INSERT INTO event_keys (event_pk, workspace_id, provider, name, value)
        SELECT i.id, i.workspace_id, i.provider, k.name, k.value
        FROM inserted i
        JOIN unnest(CAST(%(k_ws)b AS TEXT[]), CAST(%(k_prov)b AS TEXT[]),
                    CAST(%(k_eid)b AS TEXT[]), CAST(%(k_name)b AS TEXT[]),
                    CAST(%(k_value)b AS TEXT[]))
             AS k(ws, prov, eid, name, value)
          ON k.ws = i.workspace_id AND k.prov = i.provider AND k.eid = i.event_id
    )
    SELECT id, workspace_id, provider, event_id FROM inserted
    """
"""One statement (one round trip, atomic even in autocommit): the batch's new events, their
keys and their places in the correlation backlog, under the shared evidence locks of their keys
(``shared.evidence.locks``: taken before any row is written, held until the statement commits).
Driver-level SQL with binary parameters
(``%(name)b``): psycopg sends the arrays as they are, where the text format would escape every
body and raw byte string. A new event starts with the repeats of its key in the batch as its
counter. Its keys are written only with an event row that is new, one per name (they are a
mapping): no conflict to check there. Nothing in it joins the events table: the plan psycopg
prepares after a few batches is kept while the table grows, and the conflict check goes through
the unique index whatever the statistics say."""
_PG_DUPLICATE = """
    UPDATE events SET duplicates = duplicates + %(n)s
    WHERE workspace_id = %(ws)s AND provider = %(prov)s AND event_id = %(eid)s
    """
"""A repeat's counter: one row by its unique key, sent for each repeat of a batch at once
(``executemany`` pipelines them). The row was committed before (or by a concurrent transaction
the insert waited for), so this statement's snapshot sees it."""
_PG_LINKS_MANY = """
    INSERT INTO operation_events (operation_id, event_pk, workspace_id, strategy, assurance,
                                  created_at)
    SELECT * FROM unnest(CAST(%(op)s AS TEXT[]), CAST(%(pk)s AS BIGINT[]), CAST(%(ws)s AS TEXT[]),
                         CAST(%(strategy)s AS TEXT[]), CAST(%(assurance)s AS TEXT[]),
                         CAST(%(at)s AS TIMESTAMPTZ[]))
    ON CONFLICT (operation_id, event_pk) DO NOTHING
    RETURNING operation_id, event_pk
    """
_PG_UPGRADE_MANY = """
    UPDATE operation_events SET strategy = u.strategy, assurance = 'strong'
    FROM unnest(CAST(%(op)s AS TEXT[]), CAST(%(pk)s AS BIGINT[]), CAST(%(strategy)s AS TEXT[]))
         AS u(op, pk, strategy)
    WHERE operation_events.operation_id = u.op AND operation_events.event_pk = u.pk
      AND operation_events.assurance = 'weak'
    RETURNING operation_events.operation_id, operation_events.event_pk
    """


def _mark_correlated(session: Session, event_pks: Sequence[int]) -> None:
    """The events leave the correlation backlog (the event rows themselves are not written)."""
    if event_pks:
        session.execute(
            delete(EventBacklog)
            .where(one_of(session, EventBacklog.event_pk, sorted(set(event_pks))))
            .execution_options(synchronize_session=False)
        )


def store_many(db: Session | Connection, deliveries: Sequence[Delivery]) -> list[IntakeResult]:
    """Store the deliveries' events once each, with their keys, not yet correlated.

    ``db`` is a session or a connection (on PostgreSQL it may be in autocommit: the batch's new
    events are one statement, see ``_PG_STORE_MANY``). A repeat — of a stored event, or of an
    event earlier in the batch — only moves the stored row's duplicate counter and gets
    ``duplicate=True``. Nothing is linked or woken: :func:`correlate_stored` (inline) or
    :func:`correlate_backlog` (a worker, after commit) does that. :func:`store_many_async` is
    the same on a psycopg asyncio connection.
    """
    if not deliveries:
        return []
    if _dialect(db) != "postgresql":
        session = db if isinstance(db, Session) else Session(bind=db)
        results: list[IntakeResult] = []
        for d in deliveries:
            pk = store_event(
                session,
                workspace_id=d.workspace_id,
                provider=d.provider,
                event=d.event,
                raw=d.raw,
                now=d.now,
            )
            results.append(IntakeResult(event_pk=pk, duplicate=pk is None))
        return results
    plan = _StorePlan.of(deliveries)
    driver = _driver(db)
    rows = driver.exec_driver_sql(_PG_STORE_MANY, plan.params).all()
    stored = {(ws, prov, eid): int(pk) for pk, ws, prov, eid in rows}
    repeats = plan.repeats(stored)
    if repeats:
        driver.exec_driver_sql(_PG_DUPLICATE, repeats)
    return plan.results(stored)


async def store_many_async(conn: Any, deliveries: Sequence[Delivery]) -> list[IntakeResult]:
    """:func:`store_many` on PostgreSQL through a psycopg ``AsyncConnection`` in autocommit
    (the webhook intake's own connections): the same statements, no ORM in between."""
    if not deliveries:
        return []
    plan = _StorePlan.of(deliveries)
    async with conn.cursor() as cursor:
        await cursor.execute(_PG_STORE_MANY, plan.params)
        rows = await cursor.fetchall()
        stored = {(ws, prov, eid): int(pk) for pk, ws, prov, eid in rows}
        repeats = plan.repeats(stored)
        if repeats:
            await cursor.executemany(_PG_DUPLICATE, repeats)
    return plan.results(stored)


_Key = tuple[str, str, str]


def _json_text(d: Delivery) -> str:
    """The event's JSON text for the ``body`` column: the raw body itself when it is UTF-8
    without a byte order mark (it is the document the event was parsed from, and PostgreSQL's
    JSON parser refuses a mark), else the document written out again."""
    try:
        text = d.raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "\ufeff"
    if text.startswith("\ufeff"):
        return json.dumps(d.event.body, separators=(",", ":"))
    return text


@dataclass(frozen=True, slots=True)
class _StorePlan:
    """A batch ready for ``_PG_STORE_MANY``: each event key once (its first delivery is the one
    stored), how often the batch has it, and the statement's array parameters."""

    deliveries: Sequence[Delivery]
    first: dict[_Key, int]
    times: dict[_Key, int]
    params: dict[str, list[Any]]

    @classmethod
    def of(cls, deliveries: Sequence[Delivery]) -> _StorePlan:
        first: dict[_Key, int] = {}
        times: dict[_Key, int] = {}
        for index, d in enumerate(deliveries):
            key = (d.workspace_id, d.provider, d.event.event_id)
            first.setdefault(key, index)
            times[key] = times.get(key, 0) + 1
        new = [deliveries[i] for i in sorted(first.values())]
        key_rows = [
            (d.workspace_id, d.provider, d.event.event_id, name, value)
            for d in new
            for name, value in sorted(d.event.keys.items())
        ]
        params: dict[str, list[Any]] = {
            "ws": [d.workspace_id for d in new],
            "prov": [d.provider for d in new],
            "eid": [d.event.event_id for d in new],
            "typ": [d.event.type for d in new],
            "ts": [d.event.provider_timestamp for d in new],
            "api": [d.event.api_version for d in new],
            "obj": [d.event.object_id for d in new],
            "idem": [d.event.idempotency_key for d in new],
            "body": [_json_text(d) for d in new],
            "raw": [d.raw for d in new],
            "digest": [hashlib.sha256(d.raw).hexdigest() for d in new],
            "recv": [d.now for d in new],
            "n": [times[(d.workspace_id, d.provider, d.event.event_id)] for d in new],
            "k_ws": [k[0] for k in key_rows],
            "k_prov": [k[1] for k in key_rows],
            "k_eid": [k[2] for k in key_rows],
            "k_name": [k[3] for k in key_rows],
            "k_value": [k[4] for k in key_rows],
            "locks": evidence_lock_ids((k[0], k[1], k[4]) for k in key_rows),
        }
        return cls(deliveries, first, times, params)

    def repeats(self, stored: Mapping[_Key, int]) -> list[dict[str, Any]]:
        """``_PG_DUPLICATE``'s parameters for the keys the statement did not store (stored
        before, or by a concurrent transaction that committed meanwhile), in key order."""
        return [
            {"ws": k[0], "prov": k[1], "eid": k[2], "n": self.times[k]}
            for k in sorted(set(self.first) - set(stored))
        ]

    def results(self, stored: Mapping[_Key, int]) -> list[IntakeResult]:
        results = []
        for index, d in enumerate(self.deliveries):
            key = (d.workspace_id, d.provider, d.event.event_id)
            if self.first[key] == index and key in stored:
                results.append(IntakeResult(event_pk=stored[key], duplicate=False))
            else:
                results.append(IntakeResult(event_pk=None, duplicate=True))
        return results


def _driver(db: Session | Connection) -> Connection:
    return db if isinstance(db, Connection) else db.connection()


def _dialect(db: Session | Connection) -> str:
    return db.dialect.name if isinstance(db, Connection) else db.get_bind().dialect.name


@dataclass(slots=True)
class _Candidate:
    """An operation that may correlate (a row of ``_PG_CANDIDATES``), with what matching reads
    of it computed once."""

    op: Any
    contract: Contract
    providers: frozenset[str]
    idempotency: str | None
    subjects: frozenset[str]
    fingerprint: dict[str, str] | None


_PG_CANDIDATES = """
    SELECT id, workspace_id, contract_hash, subject_id, final,
           CAST(input AS TEXT) AS input_text, CAST(action_result AS TEXT) AS action_result_text,
           CAST(learned_keys AS TEXT) AS learned_keys_text
    FROM operations
    WHERE workspace_id = ANY(CAST(%(workspaces)s AS TEXT[])) AND ({matches})
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


_Derived = tuple[frozenset[str], str | None, frozenset[str], dict[str, str] | None]


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
) -> _Derived:
    """Providers, idempotency value, subject values and (an operation without a subject id,
    still open) fingerprint of a candidate operation, from its documents as stored."""
    docs = _OperationDocs(
        id=op_id,
        input=_json_of(input_text),
        action_result=_json_of(action_result_text),
        subject_id=subject_id,
        learned_keys=_json_of(learned_keys_text),
    )
    return (
        _of_contract(contract, "providers", partial(event_providers, contract)),
        _idempotency_value(contract, docs),
        frozenset(_subject_values(docs, contract)),
        _fingerprint(contract, docs) if subject_id is None and not final else None,
    )


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
) -> _Derived:
    """:func:`_derive` for an operation bound to a registry contract, kept by everything the
    keys are derived from: an operation whose keys did not change since the last batch that
    named it is not decoded and derived again, one whose keys changed has other arguments.
    (A custom contract is loaded through the session each time, and not kept here.)"""
    contract = _registry_contract(contract_hash)
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
        matches.append("subject_id = ANY(CAST(%(objects)s AS TEXT[]))")
        params["objects"] = objects
    idems = sorted({d.event.idempotency_key for d, _ in pending if d.event.idempotency_key})
    if idems:
        matches.append("id = ANY(CAST(%(idems)s AS TEXT[]))")
        params["idems"] = idems
    probes: dict[str, set[str]] = {}
    for d, _ in pending:
        names = fingerprint_key_names(d.provider)
        if names and names <= set(d.event.keys):
            probe = min(names, key=lambda n: (d.event.keys[n].lstrip("-").isdigit(), n))
            probes.setdefault(probe, set()).add(d.event.keys[probe])
    for n, (probe, probe_values) in enumerate(sorted(probes.items())):
        matches.append(
            f"(final IS FALSE AND subject_id IS NULL "
            f"AND input ->> %(probe_{n})s = ANY(CAST(%(probe_values_{n})s AS TEXT[])))"
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
        contract = _registry_contract(op.contract_hash)
        if contract is None:  # a custom contract (or one no longer registered)
            loaded = session.get(Operation, op.id)
            contract = None if loaded is None else contract_of(session, loaded)
            if contract is None:
                continue
            derived = _derive(contract, *_derived_from(op))
        else:
            derived = _derived_with_registry_contract(op.contract_hash, *_derived_from(op))
        found.append(_Candidate(op, contract, *derived))
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
    woken = dict(wake_for_events(session, {op for _, r in pending for op in r.to_wake}, now=now))
    for _, r in pending:
        r.wakes = [(op, woken[op]) for op in r.to_wake if op in woken]
    _recheck_watched(session, pending, now)
    _mark_correlated(session, [r.event_pk for _, r in pending if r.event_pk is not None])


def _recheck_watched(
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]], now: datetime
) -> None:
    """Schedule a recheck of every watched VERIFIED operation the events name by a key they
    carry (``shared.lifecycle.watch``); the fences join the first result's wakes (dispatched with
    the others after commit)."""
    named = set(
        rechecks_for_events(
            session,
            [(d.workspace_id, d.provider, d.event.type, d.event.keys.values()) for d, _ in pending],
            now=now,
        )
    )
    # A link to a final operation names it too (an operation verified before the watch keys
    # existed has a watch_until but no keys: migration 0008).
    named.update(link.operation_id for _, r in pending for link in r.links if link.final)
    if named:
        pending[0][1].wakes.extend(request_rechecks(session, named, now=now))


def _link_batch(
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
        if c.idempotency is not None:
            by_idempotency.setdefault((ws, c.idempotency), []).append(c)
        for value in c.subjects:
            by_subject.setdefault((ws, value), []).append(c)
        if c.fingerprint:
            items = tuple(sorted(c.fingerprint.items()))
            weak_by_print.setdefault((ws, items), []).append(c)
            print_names.add(tuple(name for name, _ in items))
    links: list[tuple[Any, int, str, str, IntakeResult]] = []
    slow: list[tuple[Delivery, IntakeResult]] = []
    for d, r in pending:
        event, pk, ws = d.event, r.event_pk, d.workspace_id
        assert pk is not None
        strong: dict[str, _Candidate] = {}
        if event.idempotency_key is not None:
            strong.update((c.op.id, c) for c in by_idempotency.get((ws, event.idempotency_key), ()))
        if event.object_id is not None:
            strong.update((c.op.id, c) for c in by_subject.get((ws, event.object_id), ()))
        matches: list[tuple[Any, str, str]] = []
        learns = False
        for op_id in sorted(strong):
            c = strong[op_id]
            if d.provider not in c.providers:
                continue
            if event.idempotency_key is not None and event.idempotency_key == c.idempotency:
                if (
                    c.op.subject_id is None
                    and event.object_id is not None
                    and _of_subject_type(c.contract, event.type)
                ):
                    learns = True
                matches.append((c.op, "idempotency_key", STRONG))
            else:
                matches.append((c.op, "resource_id", STRONG))
        if learns:
            slow.append((d, r))
            continue
        names = fingerprint_key_names(d.provider)
        if names and names <= set(event.keys):
            weak: dict[str, _Candidate] = {}
            for print_of in print_names:
                if all(name in event.keys for name in print_of):
                    items = tuple((name, event.keys[name]) for name in print_of)
                    weak.update((c.op.id, c) for c in weak_by_print.get((ws, items), ()))
            for op_id in sorted(weak):
                c = weak[op_id]
                if op_id not in strong and d.provider in c.providers:
                    matches.append((c.op, "fingerprint", WEAK))
        links.extend((op, pk, strategy, assurance, r) for op, strategy, assurance in matches)
    if links:
        params = {
            "op": [op.id for op, *_ in links],
            "pk": [pk for _, pk, *_ in links],
            "ws": [op.workspace_id for op, *_ in links],
            "strategy": [strategy for _, _, strategy, _, _ in links],
            "assurance": [assurance for _, _, _, assurance, _ in links],
            "at": [now for _ in links],
        }
        with driver_cursor(session) as cursor:  # plain statements, plain rows
            written = set(cursor.execute(_PG_LINKS_MANY, params).fetchall())
        # An event linked before (from the operation's side): a strong match upgrades a weak
        # link; anything else was there already and wakes nothing.
        again = [
            (op, pk, strategy)
            for op, pk, strategy, assurance, _ in links
            if assurance == STRONG and (op.id, pk) not in written
        ]
        if again:
            upgrade = {
                "op": [op.id for op, _, _ in again],
                "pk": [pk for _, pk, _ in again],
                "strategy": [strategy for _, _, strategy in again],
            }
            with driver_cursor(session) as cursor:
                written |= set(cursor.execute(_PG_UPGRADE_MANY, upgrade).fetchall())
        for op, pk, strategy, assurance, r in links:
            if (op.id, pk) not in written:
                continue
            r.links.append(Link(op.id, pk, strategy, assurance, op.final))
    return slow


_PG_CLAIM = """
    WITH claimed AS (
        SELECT event_pk FROM event_backlog {where}
        ORDER BY event_pk LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    )
    SELECT e.id, e.workspace_id, e.provider, e.event_id, e.type, e.provider_timestamp,
           e.api_version, e.object_id, e.idempotency_key, e.received_at, k.names, k.vals
    FROM claimed
    JOIN events e ON e.id = claimed.event_pk
    LEFT JOIN LATERAL (
        SELECT array_agg(name) AS names, array_agg(value) AS vals
        FROM event_keys WHERE event_keys.event_pk = e.id
    ) k ON TRUE
    ORDER BY e.id
    """
"""The backlog's oldest events no other correlator holds, locked, with what correlation reads of
them and their keys: one round trip, plain tuples. Neither the body (a JSON document to decode)
nor the raw bytes are read."""
_PG_CLAIM_ALL = _PG_CLAIM.format(where="")
_PG_CLAIM_BEFORE = _PG_CLAIM.format(where="WHERE received_at < %(before)s")

_Claimed = tuple[
    int, str, str, str, str, datetime, str | None, str | None, str | None, datetime,
    dict[str, str],
]  # fmt: skip


def _claim_pg(session: Session, limit: int, received_before: datetime | None) -> list[_Claimed]:
    params: dict[str, Any] = {"limit": limit, "before": received_before}
    statement = _PG_CLAIM_ALL if received_before is None else _PG_CLAIM_BEFORE
    with driver_cursor(session) as cursor:
        rows = cursor.execute(statement, params).fetchall()
    return [
        (
            int(pk),
            ws,
            prov,
            eid,
            typ,
            ts.astimezone(UTC),
            api,
            obj,
            idem,
            received.astimezone(UTC),
            dict(zip(names, vals, strict=True)) if names else {},
        )
        for pk, ws, prov, eid, typ, ts, api, obj, idem, received, names, vals in rows
    ]


def _claim(session: Session, limit: int, received_before: datetime | None) -> list[_Claimed]:
    """:func:`_claim_pg` through the ORM's tables, for the other databases (SQLite serialises
    writers: the claimed rows are this transaction's until it ends)."""
    db = session.connection()  # plain rows (no ORM loading)
    claim = select(EventBacklog.event_pk)
    if received_before is not None:
        claim = claim.where(EventBacklog.received_at < received_before)
    claimed = [int(pk) for pk in db.scalars(claim.order_by(EventBacklog.event_pk).limit(limit))]
    if not claimed:
        return []
    keys: dict[int, dict[str, str]] = {}
    for pk, name, value in db.execute(
        select(EventKey.event_pk, EventKey.name, EventKey.value).where(
            one_of(session, EventKey.event_pk, claimed)
        )
    ).all():
        keys.setdefault(int(pk), {})[name] = value
    query = select(
        Event.id,
        Event.workspace_id,
        Event.provider,
        Event.event_id,
        Event.type,
        Event.provider_timestamp,
        Event.api_version,
        Event.object_id,
        Event.idempotency_key,
        Event.received_at,
    ).where(one_of(session, Event.id, claimed))
    return [(*row, keys.get(row.id, {})) for row in db.execute(query.order_by(Event.id)).all()]


def correlate_backlog(
    session: Session,
    *,
    now: datetime,
    limit: int = 256,
    received_before: datetime | None = None,
) -> list[IntakeResult]:
    """Claim up to ``limit`` stored events that no correlator has matched yet (oldest first;
    only those received before ``received_before`` when given) and :func:`correlate_stored`
    them. The events wait as rows of the backlog table (``event_backlog``), which the
    correlation deletes. On PostgreSQL those rows are claimed with ``FOR UPDATE SKIP LOCKED``,
    so correlators running at once never take the same event; the event rows are neither locked
    nor written, so a transaction that links a claimed event from the operation's side never
    waits for the claim (it holds the workspace's correlation lock the claimer is about to wait
    for). The caller commits, then dispatches the wakes.
    """
    keyed_lookups(session)  # plans that hold without statistics (``shared.db.sql``)
    if session.get_bind().dialect.name == "postgresql":
        rows = _claim_pg(session, limit, received_before)
    else:
        rows = _claim(session, limit, received_before)
    if not rows:
        return []
    # No action report of these workspaces is between its key scan and its commit from here on
    # (and the statements below see the reports that committed while this waited). What was
    # read above cannot change: an event and its keys are written once, by one statement.
    lock_correlation(session, {row[1] for row in rows}, shared=False)
    pending = [
        (
            Delivery(
                ws,
                prov,
                ParsedEvent(
                    event_id=eid,
                    type=typ,
                    provider_timestamp=ts,
                    body={},  # not read by correlation (see above)
                    api_version=api,
                    object_id=obj,
                    idempotency_key=idem,
                    keys=keys,
                ),
                b"",
                received,
            ),
            IntakeResult(event_pk=pk, duplicate=False),
        )
        for pk, ws, prov, eid, typ, ts, api, obj, idem, received, keys in rows
    ]
    correlate_stored(session, pending, now=now)
    return [r for _, r in pending]


# ------------------------------------------------------------------------------ for readers


def event_record(row: Event) -> EventRecord:
    """The core's view of a stored event (what ``reduce_events`` takes)."""
    return EventRecord(
        event_id=row.event_id,
        type=row.type,
        provider_timestamp=row.provider_timestamp,
        body=row.body,
        api_version=row.api_version,
        received_at=row.received_at,
        duplicates=row.duplicates,
    )
