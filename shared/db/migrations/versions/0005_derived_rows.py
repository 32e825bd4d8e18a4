"""event keys, backlog rows and links: no foreign keys, no index that repeats a unique one

The rows of ``event_keys``, ``event_backlog`` and ``operation_events`` are derived: the first two
are written by the statement that inserts their event (with the id it returns), the links by the
correlation, with ids it read in the same transaction; events and operations are never deleted.
Their foreign keys checked, and locked, the referenced row once per row written — four times per
event at the intake, twice per link — which cost more than a fifth of a delivery's end-to-end
work (``docs/benchmarks.md``, Ingest). ``ix_event_keys_event_pk`` and
``ix_operation_events_operation_id`` repeat the leading column of a unique constraint.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, constraint, column, referenced table)
_FOREIGN_KEYS = (
    ("event_keys", "fk_event_keys_event_pk_events", "event_pk", "events"),
    ("event_backlog", "fk_event_backlog_event_pk_events", "event_pk", "events"),
    ("operation_events", "fk_operation_events_event_pk_events", "event_pk", "events"),
    (
        "operation_events",
        "fk_operation_events_operation_id_operations",
        "operation_id",
        "operations",
    ),
)


def upgrade() -> None:
    # Batch operations: plain ALTER TABLE on PostgreSQL; on SQLite, which cannot drop a
    # constraint, the (child) table is copied without it.
    with op.batch_alter_table("event_keys") as batch:
        batch.drop_index("ix_event_keys_event_pk")
        batch.drop_constraint("fk_event_keys_event_pk_events", type_="foreignkey")
    with op.batch_alter_table("event_backlog") as batch:
        batch.drop_constraint("fk_event_backlog_event_pk_events", type_="foreignkey")
    with op.batch_alter_table("operation_events") as batch:
        batch.drop_index("ix_operation_events_operation_id")
        batch.drop_constraint("fk_operation_events_event_pk_events", type_="foreignkey")
        batch.drop_constraint("fk_operation_events_operation_id_operations", type_="foreignkey")


def downgrade() -> None:
    for table, name, column, referenced in _FOREIGN_KEYS:
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(name, referenced, [column], ["id"])
    with op.batch_alter_table("operation_events") as batch:
        batch.create_index("ix_operation_events_operation_id", ["operation_id"])
    with op.batch_alter_table("event_keys") as batch:
        batch.create_index("ix_event_keys_event_pk", ["event_pk"])
