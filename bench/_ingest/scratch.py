"""The scratch database of a run: created and dropped on the server of ``--pg``, seeded with a
workspace whose Stripe connection has the webhook secret the bodies are signed with and the open
operations the events are of, and vacuumed between runs."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = [
    "SECRET",
    "Scratch",
    "create_database",
    "drop_database",
    "libpq_dsn",
    "seed",
    "vacuum",
]

SECRET = "whsec_bench_" + "5a" * 16


@dataclass
class Scratch:
    pg_admin: str
    name: str
    url: str
    redis_url: str


def create_database(pg_admin: str) -> Scratch:
    import psycopg

    name = f"provely_bench_{secrets.token_hex(4)}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    return Scratch(pg_admin, name, f"{base}/{name}", "")


def drop_database(scratch: Scratch) -> None:
    import psycopg

    with psycopg.connect(scratch.pg_admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{scratch.name}" WITH (FORCE)')


def seed(url: str, fernet_key: str, operations: int) -> tuple[str, list[str]]:
    """A workspace with a Stripe connection and ``operations`` open operations (subject ids)."""
    from sqlalchemy.orm import Session

    from shared.db.migrate import upgrade
    from shared.db.models import Operation
    from shared.db.session import make_engine
    from shared.db.tenants import create_workspace, new_id, set_connection
    from shared.runtime.settings import Settings
    from shared.trust.registry import get_registry

    upgrade(url)
    settings = Settings(database_url=url, secret_key=fernet_key)
    engine = make_engine(url)
    entry = get_registry().entry("stripe.refund.succeeded")
    now = datetime.now(UTC) - timedelta(minutes=1)
    subjects = [f"re_bench_{i:06d}" for i in range(operations)]
    with Session(engine) as session, session.begin():
        workspace, _ = create_workspace(session, "bench", now=now)
        set_connection(
            session,
            workspace.id,
            provider="stripe",
            webhook_secrets=[SECRET],
            api_key="sk_test_bench",
            base_url="http://127.0.0.1:9",
            signature_scheme="stripe",
            settings=settings,
            now=now,
        )
        for n, subject in enumerate(subjects):
            session.add(
                Operation(
                    id=new_id("op"),
                    workspace_id=workspace.id,
                    contract_id=entry.contract.id,
                    contract_version=entry.contract.version,
                    contract_hash=entry.hash,
                    completion_level=entry.contract.completion_level,
                    state="OBSERVING",
                    verdict="PENDING",
                    final=False,
                    version=1,
                    input={"charge": f"ch_bench_{n:06d}", "amount": 1000, "currency": "usd"},
                    action_phase="result",
                    action_result={"id": subject},
                    action_reported_at=now,
                    subject_id=subject,
                    learned_keys={},
                    attempts=0,
                    fence=1,
                    next_observation_at=now + timedelta(days=1),
                    deadline=now + timedelta(days=7),
                    created_at=now,
                    updated_at=now,
                )
            )
        workspace_id = workspace.id
    engine.dispose()
    return workspace_id, subjects


def libpq_dsn(url: str) -> str:
    """The scratch database's SQLAlchemy URL as psycopg connects to it."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def vacuum(url: str) -> None:
    """``VACUUM (ANALYZE)`` the scratch database between runs, untimed: what autovacuum (off on
    these machines) would have done meanwhile; without it every run inherits the dead row
    versions and stale statistics of the runs before."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
