"""Truth over time: readings taken by a decision, the watch after VERIFIED, durable rechecks

- ``observations.fence`` may be NULL: a reading that a decision took itself, inside its own
  transaction (the webhook channels reduced over the events stored at decision time), belongs
  to no observation fence. The unique (operation, fence, channel) still fences the observers'
  readings; decision readings never conflict with them or with each other.
- ``operations.watch_until``: until when a VERIFIED operation stays watched (its event
  channels' longest worst-case latency after the verdict); NULL for any other operation.
- ``operations.rechecks``: rechecks of a VERIFIED operation that could not read yet (their
  backoff follows the contract's schedule).
- ``watch_keys``: what the event channels of a watched operation match on (workspace,
  provider, key value, event types), indexed by value, so a stored event finds the operations
  it may contradict in one index probe per key it carries. Rows end with the watch.

Operations verified before this revision are watched for three days from their decision (the
shipped contracts' longest event latency), by the events linked to them only: their key values
come from their contracts, which a migration does not load, so they get no ``watch_keys``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("observations") as batch:
        batch.alter_column("fence", existing_type=sa.Integer(), nullable=True)
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("watch_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("rechecks", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "watch_keys",
        sa.Column("operation_id", sa.String(40), primary_key=True),
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("event_types", sa.Text(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_watch_keys_lookup", "watch_keys", ["workspace_id", "provider", "value"])
    op.create_index("ix_watch_keys_until", "watch_keys", ["until"])
    verified = sa.table(
        "operations",
        sa.column("id", sa.String),
        sa.column("state", sa.String),
        sa.column("decided_at", sa.DateTime(timezone=True)),
        sa.column("watch_until", sa.DateTime(timezone=True)),
    )
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(verified.c.id, verified.c.decided_at).where(
            verified.c.state == "VERIFIED", verified.c.decided_at.is_not(None)
        )
    ).all()
    update = (
        verified.update()
        .where(verified.c.id == sa.bindparam("op_id"))
        .values(watch_until=sa.bindparam("until"))
    )
    for start in range(0, len(rows), 1000):  # by primary key, a thousand at a time
        chunk = rows[start : start + 1000]
        bind.execute(update, [{"op_id": i, "until": at + timedelta(days=3)} for i, at in chunk])


def downgrade() -> None:
    op.drop_index("ix_watch_keys_until", table_name="watch_keys")
    op.drop_index("ix_watch_keys_lookup", table_name="watch_keys")
    op.drop_table("watch_keys")
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("rechecks")
        batch.drop_column("watch_until")
    op.execute("DELETE FROM observations WHERE fence IS NULL")
    with op.batch_alter_table("observations") as batch:
        batch.alter_column("fence", existing_type=sa.Integer(), nullable=False)
