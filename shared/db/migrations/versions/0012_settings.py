"""When each API key was last used (#36)

- ``api_keys.last_used_at``: the last time a request authenticated with the key, recorded at
  most once a minute per key (``shared.db.tenants.authenticate``); NULL for a key never used
  since this column exists.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 17:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")
