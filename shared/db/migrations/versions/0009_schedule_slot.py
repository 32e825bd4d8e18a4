"""operations.slot_at: the due time of the schedule's next slot, which a wake leaves alone

A wake (a callback that correlates with an open operation) moves the next observation to now.
Before this column it also advanced the polling backoff: the woken reading counted as the next
observation of the schedule, and the one after it waited the next, longer interval from the
wake. ``slot_at`` keeps the schedule's slot: ``schedule_observation`` writes it with the due
time, a wake does not touch it, a reading taken before it does not count as an observation of
the schedule (``operations.attempts``), and the next observation after such a reading is due at
the slot again.

Existing rows get ``slot_at = next_observation_at``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("slot_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE operations SET slot_at = next_observation_at")


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("slot_at")
