"""The API under test: one app per test on a migrated database (PostgreSQL and SQLite), two
workspaces with their keys, and a real broker (kombu's SQLAlchemy transport in a temp file)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from sqlalchemy import Engine

from services.ingress.app import create_app
from shared.db.session import session_scope
from shared.db.tenants import create_api_key, create_workspace
from shared.runtime.settings import Settings

with warnings.catch_warnings():
    # starlette's test client touches an alias anyio deprecates, at import only.
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient


@pytest.fixture(params=["postgresql", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """The migrated database of the test, on each backend."""
    name = "pg_engine" if request.param == "postgresql" else "sqlite_engine"
    result: Engine = request.getfixturevalue(name)
    return result


@dataclass
class Tenant:
    workspace_id: str
    admin_key: str
    agent_key: str
    agent_key_id: str

    def headers(self, *, admin: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key if admin else self.agent_key}"}


@dataclass
class Api:
    app: FastAPI
    client: TestClient
    settings: Settings
    engine: Engine
    backend: str
    a: Tenant
    b: Tenant


def make_tenant(engine: Engine, name: str, settings: Settings) -> Tenant:
    now = datetime.now(UTC)
    with session_scope(engine) as session:
        ws, admin = create_workspace(session, name, now=now)
        row, agent = create_api_key(session, ws.id, scope="agent", now=now)
        return Tenant(ws.id, admin, agent, row.id)


def build_api(engine: Engine, url: str, backend: str, tmp_path: Path) -> Api:
    settings = Settings(
        database_url=url,
        data_dir=tmp_path / "data",
        broker_url=f"sqla+sqlite:///{tmp_path / 'broker.db'}",
        secret_key=Fernet.generate_key().decode(),
        jitter_ratio=0.0,
    )
    app = create_app(settings)
    a = make_tenant(engine, "workspace a", settings)
    b = make_tenant(engine, "workspace b", settings)
    client = TestClient(app)
    return Api(app, client, settings, engine, backend, a, b)


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    """The app on PostgreSQL, then on SQLite."""
    if request.param == "postgresql":
        engine: Engine = request.getfixturevalue("pg_engine")
        url: str = request.getfixturevalue("migrated_postgres_url")
    else:
        engine = request.getfixturevalue("sqlite_engine")
        url = request.getfixturevalue("sqlite_url")
    built = build_api(engine, url, request.param, tmp_path)
    with built.client:
        yield built
    built.app.state.engine.dispose()


@pytest.fixture
def pg_api(pg_engine: Engine, migrated_postgres_url: str, tmp_path: Path) -> Iterator[Api]:
    """The app on PostgreSQL only (concurrency tests)."""
    built = build_api(pg_engine, migrated_postgres_url, "postgresql", tmp_path)
    with built.client:
        yield built
    built.app.state.engine.dispose()
