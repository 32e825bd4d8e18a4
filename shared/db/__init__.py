"""The record: SQLAlchemy models, engines and transactions, tenants, the audit chain and the
Alembic migrations.

Modules:

- ``models``     every table (PostgreSQL in production, SQLite embedded)
- ``session``    engines, ``session_scope`` (one transaction: commit or roll back), pools
- ``audit``      the hash-chained ``transitions`` rows, appended when a transaction commits
- ``sql``        statement pieces that run better on PostgreSQL and read the same elsewhere
- ``tenants``    workspaces, API keys and connections (secrets encrypted by ``shared.trust``)
- ``counts``     database-wide figures for the metrics gauges
- ``console_sessions``  console sign-ins: sessions (the token's sha256), refused sign-ins
- ``console_users``     console users: created with a generated password, checked, disabled
- ``migrate``    running the migrations in ``migrations/``

Errors: ``TenantError`` (``tenants``, a ValueError) — a bad admin request: unknown workspace
or key, bad scope, bad connection settings. Everything else is SQLAlchemy's own.

May import: ``shared.trust``, ``shared.runtime``, ``shared.core`` and libraries. Repositories
here never commit on their own: the caller's ``session_scope`` does.
"""
