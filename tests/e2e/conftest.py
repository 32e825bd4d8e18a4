"""Fixtures of the end-to-end suite: the distributed system on real PostgreSQL and Redis.

The system gets a database and a Redis database index of its own and lives for this package
only: its sweeper and workers must never touch what other suites in the same session create.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from tests.e2e.launcher import DistributedSystem

CLAIM_KEY = "provely:e2e:claimed"


def _quiet_redis_db(redis_url: str) -> str:
    """The session's Redis URL, moved to a database index nobody is using right now.

    The broker's queues have fixed names, so two suites (or a benchmark) sharing a database
    index would consume each other's messages. Starting from the session's index, take the
    first empty one and mark it taken for the run (other suites pick theirs at random).
    """
    base, _, index = redis_url.rpartition("/")
    start = int(index)
    for offset in range(15):
        db = (start - 1 + offset) % 15 + 1
        client = redis.Redis.from_url(f"{base}/{db}")
        try:
            if client.dbsize() == 0 and client.set(CLAIM_KEY, "1", nx=True, ex=1800):
                return f"{base}/{db}"
        finally:
            client.close()
    return redis_url


@pytest.fixture(scope="package")
def e2e_database(postgres_url: str) -> Iterator[str]:
    """A database of the e2e suite's own, on the session's PostgreSQL server, dropped after."""
    url = make_url(postgres_url)
    name = f"provely_e2e_{secrets.token_hex(6)}"
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="package")
def distributed(
    e2e_database: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir: Path = tmp_path_factory.mktemp("e2e")
    broker = _quiet_redis_db(redis_url)
    system = DistributedSystem(postgres_url=e2e_database, redis_url=broker, workdir=workdir)
    try:
        system.start()
        yield system
    finally:
        system.stop()
        client = redis.Redis.from_url(broker)
        try:
            client.delete(CLAIM_KEY)
        finally:
            client.close()
