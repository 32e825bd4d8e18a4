"""event keys and links keyed by what they are of: no surrogate ids

An event's key rows are one per name (the event's keys are a mapping), and a link is one per
operation and event; each table had a surrogate ``id`` with its sequence and index beside the
unique constraint that actually identifies the row. Every row the intake and the correlator
wrote paid for both indexes and the sequence, and the intake's key insert checked a conflict
that cannot happen. Now ``(event_pk, name)`` and ``(operation_id, event_pk)`` are the primary
keys, and nothing reads the ids (``docs/benchmarks.md``, Ingest).

Downgrading numbers the rows again and restores the unique constraints.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 01:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table, primary key columns now, the unique constraint they had (name, columns)
_TABLES = (
    (
        "event_keys",
        ["event_pk", "name"],
        ("uq_event_keys_event_pk_name_value", ["event_pk", "name", "value"]),
    ),
    (
        "operation_events",
        ["operation_id", "event_pk"],
        ("uq_operation_events_operation_id_event_pk", ["operation_id", "event_pk"]),
    ),
)


def upgrade() -> None:
    for table, key, (unique, _) in _TABLES:
        # PostgreSQL: ALTER TABLE in place. SQLite, which cannot change a primary key, copies
        # the table (batch mode).
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(unique, type_="unique")
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.drop_column("id")
            batch.create_primary_key(f"pk_{table}", key)


def downgrade() -> None:
    for table, key, (unique, columns) in _TABLES:
        if op.get_bind().dialect.name == "postgresql":
            # BIGSERIAL numbers the existing rows (in no particular order) from its sequence.
            op.execute(
                f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}, ADD COLUMN id BIGSERIAL, "
                f"ADD CONSTRAINT pk_{table} PRIMARY KEY (id), "
                f"ADD CONSTRAINT {unique} UNIQUE ({', '.join(columns)})"
            )
            continue
        # SQLite: an INTEGER PRIMARY KEY column numbers the rows the batch copies into it.
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.add_column(
                sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
                insert_before=key[0],
            )
            batch.create_primary_key(f"pk_{table}", ["id"])
            batch.create_unique_constraint(unique, columns)
