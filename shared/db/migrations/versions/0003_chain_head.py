"""chain head: each workspace keeps its audit chain's last seq and hashes on its own row

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 15:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENESIS_HASH = "0" * 64


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(
            sa.Column("chain_seq", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column(
                "chain_hash", sa.String(length=64), server_default=GENESIS_HASH, nullable=False
            )
        )
        batch.add_column(
            sa.Column(
                "chain_prev_hash",
                sa.String(length=64),
                server_default=GENESIS_HASH,
                nullable=False,
            )
        )
    # The head of a chain written before this revision is its last row.
    op.execute(
        """
        UPDATE workspaces SET
            chain_seq = last.seq, chain_hash = last.hash, chain_prev_hash = last.prev_hash
        FROM (
            SELECT t.workspace_id, t.seq, t.hash, t.prev_hash FROM transitions t
            WHERE t.seq = (SELECT max(seq) FROM transitions m WHERE m.workspace_id = t.workspace_id)
        ) AS last
        WHERE workspaces.id = last.workspace_id
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("chain_prev_hash")
        batch.drop_column("chain_hash")
        batch.drop_column("chain_seq")
