"""The sweeper's two scans read only what is due: two partial indexes

Every pass of the sweeper (``services.verdict.sweeper``) looks for scheduled observations that
are due or overdue and for open operations past their deadline. Neither query had an index it
could range over, so each pass read a share of the table that grows with every operation ever
made (``bench/scale.py``, 20,000 operations: the deadline step scanned the whole table, 50 ms;
the schedule step read all of ``ix_operations_due``, 198 buffers, because that index leads with
``final`` and the step also takes watched operations, which are final):

- ``ix_operations_scheduled`` on ``next_observation_at``, over the rows that have one (open
  operations and watched ones with a recheck): the schedule step reads the due ones in order
  and stops. It replaces ``ix_operations_due`` (``final, next_observation_at``), which nothing
  else reads;
- ``ix_operations_open_deadline`` on ``deadline``, over the open operations that have one: the
  deadline step reads those past it, oldest first.

On PostgreSQL the indexes are built and dropped ``CONCURRENTLY`` (outside the migration's
transaction): a table of a million operations keeps taking writes meanwhile.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEDULED = sa.text("next_observation_at IS NOT NULL")
OPEN_DEADLINE = sa.text("final IS false AND deadline IS NOT NULL")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_operations_scheduled",
            "operations",
            ["next_observation_at"],
            postgresql_where=SCHEDULED,
            sqlite_where=SCHEDULED,
            postgresql_concurrently=True,
        )
        op.create_index(
            "ix_operations_open_deadline",
            "operations",
            ["deadline"],
            postgresql_where=OPEN_DEADLINE,
            sqlite_where=OPEN_DEADLINE,
            postgresql_concurrently=True,
        )
        op.drop_index("ix_operations_due", table_name="operations", postgresql_concurrently=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_operations_due",
            "operations",
            ["final", "next_observation_at"],
            postgresql_concurrently=True,
        )
        op.drop_index(
            "ix_operations_open_deadline", table_name="operations", postgresql_concurrently=True
        )
        op.drop_index(
            "ix_operations_scheduled", table_name="operations", postgresql_concurrently=True
        )
