"""event backlog: the events waiting for correlation are rows of their own table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_backlog",
        sa.Column(
            "event_pk",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["event_pk"], ["events.id"], name=op.f("fk_event_backlog_event_pk_events")
        ),
        sa.PrimaryKeyConstraint("event_pk", name=op.f("pk_event_backlog")),
    )
    # The events still waiting when this revision runs keep waiting, in the new table.
    op.execute(
        "INSERT INTO event_backlog (event_pk, received_at) "
        "SELECT id, received_at FROM events WHERE correlated_at IS NULL"
    )
    op.drop_index(
        "ix_events_uncorrelated",
        table_name="events",
        postgresql_where=sa.text("correlated_at IS NULL"),
        sqlite_where=sa.text("correlated_at IS NULL"),
    )
    # Dropped in place (SQLite ≥ 3.35 and PostgreSQL alike): a batch migration would rebuild the
    # events table, which the tables referencing it forbid while foreign keys are enforced.
    op.execute("ALTER TABLE events DROP COLUMN correlated_at")


def downgrade() -> None:
    op.add_column("events", sa.Column("correlated_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE events SET correlated_at = received_at "
        "WHERE id NOT IN (SELECT event_pk FROM event_backlog)"
    )
    op.create_index(
        "ix_events_uncorrelated",
        "events",
        ["id"],
        unique=False,
        postgresql_where=sa.text("correlated_at IS NULL"),
        sqlite_where=sa.text("correlated_at IS NULL"),
    )
    op.drop_table("event_backlog")
