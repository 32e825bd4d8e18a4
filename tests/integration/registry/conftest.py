"""The API on the migrated PostgreSQL database with two workspaces, and a registry that a test
may extend (``PROVELY_CONTRACT_PATHS``) with the caches cleared around it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine

from services.ingress.app import create_app
from shared.db.session import session_scope
from shared.db.tenants import create_api_key, create_workspace
from shared.runtime.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient


@dataclass(frozen=True)
class Tenant:
    workspace_id: str
    admin_key: str
    agent_key: str

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def agent(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.agent_key}"}


@dataclass(frozen=True)
class Api:
    client: TestClient
    engine: Engine
    a: Tenant
    b: Tenant
    settings: Settings


def _tenant(engine: Engine, name: str) -> Tenant:
    now = datetime.now(UTC)
    with session_scope(engine) as session:
        ws, admin = create_workspace(session, name, now=now)
        _, agent = create_api_key(session, ws.id, scope="agent", now=now)
        return Tenant(ws.id, admin, agent)


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings and registry caches cleared before and after (both are read from the env)."""
    from shared.runtime.settings import get_settings
    from shared.trust.registry import get_registry

    get_settings.cache_clear()
    get_registry.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()
    get_registry.cache_clear()


@pytest.fixture
def pg_api(
    pg_engine: Engine, migrated_postgres_url: str, tmp_path: Path, fresh_registry: None
) -> Iterator[Api]:
    settings = Settings(
        database_url=migrated_postgres_url,
        data_dir=tmp_path / "data",
        broker_url=f"sqla+sqlite:///{tmp_path / 'broker.db'}",
        secret_key=Fernet.generate_key().decode(),
        jitter_ratio=0.0,
    )
    app = create_app(settings)
    api = Api(
        TestClient(app), pg_engine, _tenant(pg_engine, "a"), _tenant(pg_engine, "b"), settings
    )
    with api.client:
        yield api
