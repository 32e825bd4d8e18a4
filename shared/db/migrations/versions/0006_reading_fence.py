"""operations.reading_fence: the fence an observer has begun to read

An observer claims the fence of its ``observe`` message (``reading_fence = fence``) before it
reads the provider. A wake for a webhook event may then keep the ``observe`` message already due
for the current fence while no observer has claimed it: that reading starts after the event was
linked (``shared.lifecycle.scheduling.wake_for_events``). Before this column the correlator kept a
message only when it had been sent at least a second after the event arrived, comparing the clocks
of two processes.

Existing rows get ``reading_fence = fence``: a fence scheduled before the upgrade may be in the
middle of its reading, so the next event wakes such an operation (a new fence) rather than
keeping its message. The observer and the correlator are the same worker image; deploy them
together, after this migration.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("reading_fence", sa.Integer(), nullable=True))
    op.execute("UPDATE operations SET reading_fence = fence")


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("reading_fence")
