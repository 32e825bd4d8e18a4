"""What the observer reads and writes of the record: its statements, built once, and the
operations, connections and observation rows made of (and for) their rows."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Table,
    and_,
    bindparam,
    case,
    exists,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from shared.db.models import Connection, Observation, Operation
from shared.evidence.readings import Reading
from shared.lifecycle.scheduling import OBSERVABLE_STATES, counts_as_slot
from shared.lifecycle.watch import WATCHED_STATES

__all__ = [
    "COUNT_ATTEMPT",
    "EXISTS",
    "INSERT_OBSERVATIONS",
    "PREPARE",
    "PREPARE_AND_CLAIM",
    "before_counting",
    "connection_of",
    "observation_row",
    "operation_of",
    "values_of",
]

_OPS = cast(Table, Operation.__table__)
_OBSERVATIONS = cast(Table, Observation.__table__)
_CONNECTIONS = cast(Table, Connection.__table__)

# What the observer reads of an operation: its checks, its contract's key and its facts. The
# statements below are built once (building them and their cache keys cost more than running
# them) and read Core rows; an Operation is made from a row only as a carrier of these values.
_OP_COLUMNS = tuple(
    _OPS.c[name]
    for name in (
        "id",
        "workspace_id",
        "contract_id",
        "contract_version",
        "contract_hash",
        "custom_contract_id",
        "state",
        "final",
        "fence",
        "next_observation_at",
        "subject_id",
        "created_at",
        "input",
        "action_result",
        "action_reported_at",
        "action_phase",
        "learned_keys",
        "deadline",
        "attempts",
        "slot_at",
    )
)
_CONNECTION_COLUMNS = tuple(
    _CONNECTIONS.c[name].label(f"conn_{name}")
    for name in (
        "id",
        "provider",
        "base_url",
        "api_key_enc",
        "auth_scheme",
        "auth_header",
        "rate_limit_per_second",
    )
)

# One round trip: the operation, whether this fence was read already, and the workspace's
# connections (one row each; a workspace has one connection per provider).
PREPARE = (
    select(
        *_OP_COLUMNS,
        exists()
        .where(
            _OBSERVATIONS.c.operation_id == _OPS.c.id,
            _OBSERVATIONS.c.fence == bindparam("message_fence"),
        )
        .label("seen"),
        *_CONNECTION_COLUMNS,
    )
    .select_from(_OPS.outerjoin(_CONNECTIONS, _CONNECTIONS.c.workspace_id == _OPS.c.workspace_id))
    .where(_OPS.c.id == bindparam("operation_id"))
)


def _one_of(column: Any, values: Iterable[str]) -> Any:
    """``column IN ('A', 'B')`` with the values written into the statement. An ``in_`` of a
    list is an expanding parameter, which SQLAlchemy renders into the SQL again for every
    execution; these are the code's own state names, so the statement's SQL is cached whole."""
    names = sorted(values)
    if not all(name.isidentifier() for name in names):
        raise ValueError(f"not a state name: {names!r}")
    return column.in_([literal_column(f"'{name}'") for name in names])


# An operation that may be observed: open and in an observable state, or watched (VERIFIED,
# FAILED) with a recheck scheduled (``needs_recheck``).
_OBSERVABLE = or_(
    and_(_OPS.c.final.is_(False), _one_of(_OPS.c.state, OBSERVABLE_STATES)),
    and_(
        _OPS.c.final.is_(True),
        _one_of(_OPS.c.state, WATCHED_STATES),
        _OPS.c.next_observation_at.is_not(None),
    ),
)

# PostgreSQL: PREPARE and the claim (``shared.lifecycle.scheduling.claim_reading``) in one
# statement, committed when it returns (autocommit). The claim is made only where PREPARE's
# checks pass (observable, this fence, not read yet), on the row's latest version: an update
# waits for a transaction that holds the row (a correlation) and checks again after it, so
# ``claimed`` is false when the fence moved or the operation closed meanwhile. The rest reads
# the statement's snapshot, as PREPARE alone did before its claim. The message's fence is bound
# as ``message_fence``: an UPDATE given a parameter named after a column also SETs that column.
_CLAIMED = (
    update(_OPS)
    .where(
        _OPS.c.id == bindparam("operation_id"),
        _OPS.c.fence == bindparam("message_fence"),
        _OBSERVABLE,
        ~exists().where(
            _OBSERVATIONS.c.operation_id == _OPS.c.id,
            _OBSERVATIONS.c.fence == bindparam("message_fence"),
        ),
    )
    .values(reading_fence=_OPS.c.fence)
    .returning(_OPS.c.id)
    .cte("claimed")
)
PREPARE_AND_CLAIM = PREPARE.add_columns(exists(select(_CLAIMED.c.id)).label("claimed"))

# Counts the observation and loads the operation in one statement, only while it may be
# observed (``_OBSERVABLE``). The row stays locked until the observations are stored.
COUNT_ATTEMPT = (
    update(_OPS)
    .where(_OPS.c.id == bindparam("operation_id"), _OBSERVABLE)
    # Only a reading of the schedule's slot counts; one a wake brought forward is extra
    # (``shared.lifecycle.scheduling.counts_as_slot``; ``read_before`` = now + tolerance).
    .values(
        attempts=_OPS.c.attempts
        + case(
            (
                or_(
                    _OPS.c.slot_at.is_(None),
                    _OPS.c.slot_at <= bindparam("read_before", type_=_OPS.c.slot_at.type),
                ),
                1,
            ),
            else_=0,
        )
    )
    .returning(*_OP_COLUMNS)
)
EXISTS = select(_OPS.c.id).where(_OPS.c.id == bindparam("operation_id"))
# With RETURNING, SQLAlchemy sends the rows as one multi-row INSERT (not one per row).
INSERT_OBSERVATIONS = insert(_OBSERVATIONS).returning(_OBSERVATIONS.c.id)


_ATTEMPTS = next(i for i, column in enumerate(_OP_COLUMNS) if column.key == "attempts")
_SLOT_AT = next(i for i, column in enumerate(_OP_COLUMNS) if column.key == "slot_at")


def operation_of(row: Any) -> Operation:
    """A detached Operation carrying the values of a row of ``_OP_COLUMNS``."""
    return Operation(**{column.key: row[i] for i, column in enumerate(_OP_COLUMNS)})


def values_of(row: Any) -> tuple[Any, ...]:
    """The ``_OP_COLUMNS`` values of a row (PREPARE's rows have more columns after them)."""
    return tuple(row)[: len(_OP_COLUMNS)]


def before_counting(row: Any, *, read_at: datetime) -> tuple[Any, ...]:
    """The values of a ``COUNT_ATTEMPT`` row as they were before it counted a reading made at
    ``read_at`` (``attempts`` less the one it added when the reading is the schedule's slot)."""
    values = values_of(row)
    if not counts_as_slot(values[_SLOT_AT], read_at):
        return values
    return (*values[:_ATTEMPTS], values[_ATTEMPTS] - 1, *values[_ATTEMPTS + 1 :])


def connection_of(row: Any) -> Connection | None:
    if row.conn_id is None:
        return None
    return Connection(
        id=row.conn_id,
        provider=row.conn_provider,
        base_url=row.conn_base_url,
        api_key_enc=row.conn_api_key_enc,
        auth_scheme=row.conn_auth_scheme,
        auth_header=row.conn_auth_header,
        rate_limit_per_second=row.conn_rate_limit_per_second,
    )


def observation_row(op: Operation, fence: int, reading: Reading) -> dict[str, Any]:
    return {
        "operation_id": op.id,
        "workspace_id": op.workspace_id,
        "fence": fence,
        "channel": reading.channel,
        "status": reading.status.value,
        "value": reading.value,
        "raw": reading.raw,
        "digest": reading.digest,
        "http_status": reading.http_status,
        "error": reading.error,
        "provider_timestamp": reading.provider_timestamp,
        "observed_at": reading.observed_at,
        "latency_ms": reading.latency_ms,
    }
