"""The floor of bench/api.py: a bare FastAPI + psycopg app doing an agent's round trip's rows.

Same server (uvicorn, same flags), same client, same PostgreSQL and Redis as the Provely side;
none of Provely's work: no contract, no input schema, no state machine, no audit hash chain, no
receipt, no Celery. What it keeps is what any service recording a side effect must do:

- every request looks its API key up by hash (one indexed read);
- ``POST /v1/operations`` inserts the operation and one audit row, in one transaction;
- ``POST /v1/operations/{id}/action`` updates the row to OBSERVING with its next observation
  time, inserts two audit rows, commits, then pushes one message onto a Redis list (the wake a
  worker would take);
- ``GET /v1/operations/{id}`` reads the row back.

Connections come from a small pool of psycopg connections (``PROVELY_BENCH_POOL``, 10 — the
size of Provely's SQLAlchemy pool with its overflow), handed to sync endpoints that FastAPI runs
in its thread pool, as Provely's are. Run by bench/api.py:
``uvicorn --factory bench._api.bare:create_app``.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import redis
from fastapi import FastAPI, Header, HTTPException
from psycopg.types.json import Jsonb

__all__ = ["SCHEMA", "create_app", "prepare"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS bare_keys (
  key_hash text PRIMARY KEY, workspace_id text NOT NULL, revoked_at timestamptz
);
CREATE TABLE IF NOT EXISTS bare_operations (
  id text PRIMARY KEY, workspace_id text NOT NULL, contract text NOT NULL, input jsonb NOT NULL,
  state text NOT NULL, version int NOT NULL, created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL, next_observation_at timestamptz, action jsonb
);
CREATE INDEX IF NOT EXISTS bare_operations_due ON bare_operations (next_observation_at)
  WHERE next_observation_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS bare_audit (
  id bigserial PRIMARY KEY, operation_id text NOT NULL, from_state text, to_state text NOT NULL,
  at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS bare_audit_operation ON bare_audit (operation_id);
"""


def prepare(dsn: str, key: str) -> None:
    """Creates the tables and stores ``key``'s hash (the bench's agents use it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO bare_keys (key_hash, workspace_id) VALUES (%s, 'ws_bare') "
            "ON CONFLICT DO NOTHING",
            (hashlib.sha256(key.encode()).hexdigest(),),
        )


class _Pool:
    def __init__(self, dsn: str, size: int) -> None:
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(psycopg.connect(dsn))

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._idle.get()
        try:
            with conn.transaction():
                yield conn
        finally:
            self._idle.put(conn)


def create_app() -> FastAPI:
    dsn = os.environ["PROVELY_BENCH_BARE_DSN"]
    pool = _Pool(dsn, int(os.environ.get("PROVELY_BENCH_POOL", "10")))
    broker = redis.Redis.from_url(os.environ["PROVELY_BENCH_BARE_REDIS"])
    app = FastAPI()

    def workspace(conn: psycopg.Connection[Any], authorization: str | None) -> str:
        if not authorization or not authorization.startswith("Bearer "):
            raise HTTPException(401)
        digest = hashlib.sha256(authorization[7:].encode()).hexdigest()
        row = conn.execute(
            "SELECT workspace_id FROM bare_keys WHERE key_hash = %s AND revoked_at IS NULL",
            (digest,),
        ).fetchone()
        if row is None:
            raise HTTPException(401)
        return str(row[0])

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/operations", status_code=201)
    def create(body: dict[str, Any], authorization: str | None = Header(None)) -> dict[str, Any]:
        now = datetime.now(UTC)
        op_id = f"op_{secrets.token_hex(12)}"
        with pool.transaction() as conn:
            ws = workspace(conn, authorization)
            conn.execute(
                "INSERT INTO bare_operations (id, workspace_id, contract, input, state, version,"
                " created_at, updated_at) VALUES (%s, %s, %s, %s, 'CREATED', 1, %s, %s)",
                (op_id, ws, body["contract"], Jsonb(body["input"]), now, now),
            )
            conn.execute(
                "INSERT INTO bare_audit (operation_id, from_state, to_state, at)"
                " VALUES (%s, NULL, 'CREATED', %s)",
                (op_id, now),
            )
        return {"id": op_id, "state": "CREATED", "contract": body["contract"]}

    @app.post("/v1/operations/{op_id}/action")
    def action(
        op_id: str, body: dict[str, Any], authorization: str | None = Header(None)
    ) -> dict[str, Any]:
        now = datetime.now(UTC)
        with pool.transaction() as conn:
            ws = workspace(conn, authorization)
            row = conn.execute(
                "UPDATE bare_operations SET state = 'OBSERVING', version = version + 2,"
                " action = %s, updated_at = %s, next_observation_at = %s"
                " WHERE id = %s AND workspace_id = %s AND state = 'CREATED' RETURNING version",
                (Jsonb(body), now, now + timedelta(seconds=2), op_id, ws),
            ).fetchone()
            if row is None:
                raise HTTPException(409)
            conn.execute(
                "INSERT INTO bare_audit (operation_id, from_state, to_state, at)"
                " VALUES (%s, 'CREATED', 'ACTION_ACCEPTED', %s), (%s, 'ACTION_ACCEPTED',"
                " 'OBSERVING', %s)",
                (op_id, now, op_id, now),
            )
        broker.lpush("bare.observe", json.dumps({"operation_id": op_id}))
        return {"id": op_id, "state": "OBSERVING"}

    @app.get("/v1/operations/{op_id}")
    def read(op_id: str, authorization: str | None = Header(None)) -> dict[str, Any]:
        with pool.transaction() as conn:
            ws = workspace(conn, authorization)
            row = conn.execute(
                "SELECT id, state, contract, input, created_at, next_observation_at"
                " FROM bare_operations WHERE id = %s AND workspace_id = %s",
                (op_id, ws),
            ).fetchone()
        if row is None:
            raise HTTPException(404)
        return {
            "id": row[0],
            "state": row[1],
            "contract": row[2],
            "input": row[3],
            "created_at": row[4].isoformat(),
            "next_observation_at": row[5].isoformat() if row[5] else None,
        }

    return app
