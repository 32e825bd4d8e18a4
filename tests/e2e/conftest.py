"""Fixtures of the end-to-end suite: the distributed system on real PostgreSQL and Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.launcher import DistributedSystem


@pytest.fixture(scope="session")
def distributed(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir: Path = tmp_path_factory.mktemp("e2e")
    system = DistributedSystem(postgres_url=postgres_url, redis_url=redis_url, workdir=workdir)
    try:
        system.start()
        yield system
    finally:
        system.stop()
