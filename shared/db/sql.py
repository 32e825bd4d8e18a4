"""Statement pieces that read the same on every backend but run better on PostgreSQL.

:func:`one_of` is ``column IN (values)``. SQLAlchemy expands an ``IN`` list into one
parameter per value, so each list length is a different statement: compiled again on the
client, parsed and planned again by PostgreSQL. On PostgreSQL the list is one array parameter
instead (``column = ANY(:values)``): one statement text whatever the length, which the client
caches and psycopg prepares on the server after a few runs.

Plans of key lookups must not depend on statistics. A prepared statement may run on a generic
plan, made once and kept until the table's statistics change; and a table that was never
analyzed (autovacuum off, or not yet run) gives the planner only its size and default
selectivities, by which a list of 256 keys may look like a tenth of the table, and a sequential
scan cheaper than the index. Seen in the correlator: the keys of 256 events read by scanning
330,000 rows (30 ms) instead of 1,000 index entries. A transaction made of key lookups on
growing tables calls :func:`keyed_lookups` first.

:func:`driver_cursor` is for the statements a hot path runs many times per second on
PostgreSQL: plain psycopg statements under the session's transaction, with plain rows, where
SQLAlchemy's statement compilation and result processing cost more than the statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import ColumnElement, any_, bindparam, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

__all__ = ["driver_cursor", "keyed_lookups", "one_of"]


def one_of(session: Session, column: Any, values: Iterable[Any]) -> ColumnElement[bool]:
    """``column IN values`` for the backend ``session`` is bound to."""
    listed = list(values)
    if session.get_bind().dialect.name == "postgresql":
        array = bindparam(None, listed, type_=postgresql.ARRAY(column.type))
        return cast(ColumnElement[bool], column == any_(array))
    return cast(ColumnElement[bool], column.in_(listed))


def keyed_lookups(session: Session) -> None:
    """PostgreSQL: until the current transaction ends, plan each statement for its own
    parameters and the tables as they are (``plan_cache_mode``), and scan a whole table only
    where no index serves (``enable_seqscan``): see the module's note."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text(
                "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), "
                "set_config('enable_seqscan', 'off', true)"
            )
        )


def driver_cursor(session: Session, row_factory: Any = None) -> Any:
    """PostgreSQL: a cursor of the psycopg connection under the session's current transaction
    (its statements are neither compiled nor seen by the session's ORM); tuples as rows, or
    what ``row_factory`` makes."""
    driver = session.connection().connection.driver_connection
    assert driver is not None  # a connection checked out for the transaction
    if row_factory is None:
        return driver.cursor()
    return driver.cursor(row_factory=row_factory)
