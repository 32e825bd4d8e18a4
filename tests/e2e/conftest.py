"""Fixtures of the end-to-end suite: the distributed system on real PostgreSQL and Redis.

The system gets a database and a Redis database index of its own (see
:func:`tests.e2e.launcher.running_system`) and lives for this package only: its sweeper and
workers must never touch what other suites in the same session create.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.launcher import DistributedSystem, running_system


@pytest.fixture(scope="package")
def distributed(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir = tmp_path_factory.mktemp("e2e")
    with running_system(postgres_url, redis_url, workdir, name="e2e") as system:
        yield system
