"""Fixtures every test layer shares: real PostgreSQL and Redis, isolated per test session.

Integration and end-to-end tests need the real services. When one is missing they fail with
a clear message (never skip) so CI cannot go green without them.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PG_HOST = os.environ.get("PROVELY_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("PROVELY_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("PROVELY_TEST_PG_USER", "postgres")
REDIS_HOST = os.environ.get("PROVELY_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("PROVELY_TEST_REDIS_PORT", "6379"))


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    if not _reachable(host, port):
        pytest.fail(
            f"{name} is not reachable on {host}:{port}; integration tests need it "
            "(start it as .ci/run does)",
            pytrace=False,
        )


@contextmanager
def scratch_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (its SQLAlchemy URL), dropped when the block ends."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    import psycopg

    name = f"provely_t_{secrets.token_hex(6)}"
    admin = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test session, dropped at the end."""
    with scratch_database() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database index of this session's own: claimed while empty, flushed at the end.

    Claimed like the distributed systems' indexes (``tests.e2e.launcher.claimed_redis_db``), so
    no other test process, and no system of this one, can take it while the session uses it.
    """
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    from tests.e2e.launcher import claimed_redis_db

    with claimed_redis_db(f"redis://{REDIS_HOST}:{REDIS_PORT}/0", owner="session") as url:
        yield url
