"""correlation backlog: events are correlated by a worker after the intake has stored them

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("correlated_at", sa.DateTime(timezone=True), nullable=True))
    # Events stored before this revision were correlated when they were stored.
    op.execute("UPDATE events SET correlated_at = received_at")
    op.create_index(
        "ix_events_uncorrelated",
        "events",
        ["id"],
        unique=False,
        postgresql_where=sa.text("correlated_at IS NULL"),
        sqlite_where=sa.text("correlated_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_events_uncorrelated",
        table_name="events",
        postgresql_where=sa.text("correlated_at IS NULL"),
        sqlite_where=sa.text("correlated_at IS NULL"),
    )
    with op.batch_alter_table("events") as batch:
        batch.drop_column("correlated_at")
        batch.drop_column("idempotency_key")
