"""The floor of bench/wake.py: the wake chain's hops with no work in them.

Provely's wake runs: the intake stores a signed event (``POST /v1/events/…``, durable before the
200) and sends ``provely.correlate``; the correlator links it and wakes the operation
(``provely.observe_many``); the observer reads the refund back at the provider and sends
``provely.evaluate``; the verdict worker decides and writes VERIFIED; the agent reads it.

The bare chain has the same hops, on the same Celery app (Provely's configuration: late
acknowledgement, prefetch 1, JSON) and the same kind of worker processes, with nothing in them:

- ``POST /hook/{op_id}`` (uvicorn, like the ingress) inserts the body into a table, commits and
  sends ``bench.wake.correlate``;
- ``bench.wake.correlate`` (the observer-like worker) reads the row, marks the operation woken,
  commits and sends ``bench.wake.observe``;
- ``bench.wake.observe`` (same worker) reads the refund at the sandbox (``GET /v1/refunds/{id}``)
  and sends ``bench.wake.evaluate`` with its status;
- ``bench.wake.evaluate`` (the verdict-like worker) writes the status, commits;
- ``GET /ops/{op_id}`` reads it back.

No signature, no parsing beyond JSON, no correlation rules, no contract, no audit chain, no
receipt. ``PROVELY_BENCH_WAKE_DSN`` names the database (psycopg), ``PROVELY_BENCH_WAKE_SANDBOX``
the sandbox as ``url|api key``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx
import psycopg
from fastapi import FastAPI, HTTPException
from kombu import Queue
from psycopg.types.json import Jsonb

from shared.runtime.celery_app import app

__all__ = ["CORRELATE", "EVALUATE", "OBSERVE", "SCHEMA", "create_app"]

CORRELATE, OBSERVE, EVALUATE = "bench_wake_correlate", "bench_wake_observe", "bench_wake_evaluate"
SCHEMA = """
CREATE TABLE IF NOT EXISTS bare_wake_ops (
  id text PRIMARY KEY, refund_id text NOT NULL, state text NOT NULL, woken_at timestamptz
);
CREATE TABLE IF NOT EXISTS bare_wake_events (id bigserial PRIMARY KEY, op_id text NOT NULL,
  body jsonb NOT NULL, received_at timestamptz NOT NULL DEFAULT now());
"""

app.conf.task_queues = (*app.conf.task_queues, Queue(CORRELATE), Queue(OBSERVE), Queue(EVALUATE))
app.conf.task_routes = {
    **app.conf.task_routes,
    "bench.wake.correlate": {"queue": CORRELATE},
    "bench.wake.observe": {"queue": OBSERVE},
    "bench.wake.evaluate": {"queue": EVALUATE},
}
_state: dict[str, Any] = {}


def _db() -> psycopg.Connection[Any]:
    conn = _state.get("db")
    if conn is None:
        conn = _state["db"] = psycopg.connect(os.environ["PROVELY_BENCH_WAKE_DSN"])
    return conn  # type: ignore[no-any-return]


def _sandbox() -> httpx.Client:
    client = _state.get("sandbox")
    if client is None:
        url, key = os.environ["PROVELY_BENCH_WAKE_SANDBOX"].split("|", 1)
        client = _state["sandbox"] = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
    return client  # type: ignore[no-any-return]


@app.task(name="bench.wake.correlate", ignore_result=True)  # type: ignore[untyped-decorator]
def correlate(event_id: int) -> None:
    conn = _db()
    with conn.transaction():
        row = conn.execute(
            "SELECT op_id FROM bare_wake_events WHERE id = %s", (event_id,)
        ).fetchone()
        assert row is not None
        conn.execute("UPDATE bare_wake_ops SET woken_at = now() WHERE id = %s", (row[0],))
    app.send_task("bench.wake.observe", args=[row[0]])


@app.task(name="bench.wake.observe", ignore_result=True)  # type: ignore[untyped-decorator]
def observe(op_id: str) -> None:
    conn = _db()
    with conn.transaction():
        row = conn.execute("SELECT refund_id FROM bare_wake_ops WHERE id = %s", (op_id,)).fetchone()
    assert row is not None
    refund = _sandbox().get(f"/v1/refunds/{row[0]}").json()
    app.send_task("bench.wake.evaluate", args=[op_id, refund["status"]])


@app.task(name="bench.wake.evaluate", ignore_result=True)  # type: ignore[untyped-decorator]
def evaluate(op_id: str, status: str) -> None:
    conn = _db()
    state = "VERIFIED" if status == "succeeded" else "OBSERVING"
    with conn.transaction():
        conn.execute("UPDATE bare_wake_ops SET state = %s WHERE id = %s", (state, op_id))


def create_app() -> FastAPI:
    """The bare intake and read; one kept connection (the wakes are measured one at a time)."""
    web = FastAPI()
    conn = psycopg.connect(os.environ["PROVELY_BENCH_WAKE_DSN"])
    lock = threading.Lock()

    @web.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @web.post("/hook/{op_id}")
    def hook(op_id: str, body: dict[str, Any]) -> dict[str, bool]:
        with lock, conn.transaction():
            row = conn.execute(
                "INSERT INTO bare_wake_events (op_id, body) VALUES (%s, %s) RETURNING id",
                (op_id, Jsonb(body)),
            ).fetchone()
        assert row is not None
        app.send_task("bench.wake.correlate", args=[row[0]])
        return {"received": True}

    @web.get("/ops/{op_id}")
    def read(op_id: str) -> dict[str, str]:
        with lock, conn.transaction():
            row = conn.execute("SELECT state FROM bare_wake_ops WHERE id = %s", (op_id,)).fetchone()
        if row is None:
            raise HTTPException(404)
        return {"state": str(row[0])}

    return web
