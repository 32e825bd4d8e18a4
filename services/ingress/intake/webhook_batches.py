"""Group commit: the deliveries that arrive while earlier ones are being written share one
transaction (:class:`_Batcher`); each is answered only after that transaction commits.

A batch is checked (``services.ingress.intake.webhook_checks``), then stored in one statement
(``shared.intake.store.store_many``): on PostgreSQL on the event loop's own thread, through the
intake's psycopg asyncio connections (:class:`_IntakeConnections`, one per batch in flight);
elsewhere in a worker thread, through the engine. When a batch's transaction fails, each of
its deliveries is retried on its own. After the commit, one correlation request
(``services.ingress.intake.correlate_messages``) covers the batch.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import Engine

from services.ingress.intake.correlate_messages import correlation_requests
from services.ingress.intake.webhook_checks import (
    CONNECTION_OF,
    CONNECTION_OF_PG,
    Answer,
    BatchKey,
    Item,
    Outcome,
    batch_keys,
    check_delivery,
)
from shared.db.session import IDLE_PING_AFTER_S
from shared.intake.refusals import record_refusals, record_refusals_async
from shared.intake.results import Delivery, IntakeResult
from shared.intake.store import store_many, store_many_async
from shared.runtime.settings import Settings

__all__ = [
    "APPLICATION_NAME",
    "CONNECT_TIMEOUT_S",
    "MAX_BATCH",
    "MAX_BATCHES_IN_FLIGHT",
    "close_intake_connections",
]

log = logging.getLogger(__name__)


def _answers(
    answers: list[Answer | None],
    accepted: list[tuple[int, Delivery]],
    results: list[IntakeResult],
) -> list[Answer]:
    """After the commit: the answers, and one correlation request when anything is new."""
    for (index, delivery), result in zip(accepted, results, strict=True):
        event = delivery.event
        answers[index] = Outcome(event.event_id, result, event.type, event.api_version)
    if any(r.event_pk is not None for r in results):
        correlation_requests.request()
    return [a if a is not None else RuntimeError("no answer") for a in answers]


def _ingest_batch(engine: Engine, settings: Settings, items: list[Item]) -> list[Answer]:
    """Runs in a worker thread (databases other than PostgreSQL): the deliveries that arrived
    together share one transaction, committed before the correlation is asked for and before
    any of them is answered. When the shared transaction fails, each is retried on its own."""
    try:
        with engine.begin() as db:
            connections = {
                (ws, prov): db.execute(
                    CONNECTION_OF, {"workspace": ws, "provider": prov}
                ).one_or_none()
                for ws, prov in batch_keys(items)
            }
            answers, accepted, refusals = check_delivery(settings, items, connections)
            results = store_many(db, [d for _, d in accepted])
            record_refusals(db, refusals)
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [_ingest_one(engine, settings, item) for item in items]
    return _answers(answers, accepted, results)


def _ingest_one(engine: Engine, settings: Settings, item: Item) -> Answer:
    try:
        return _ingest_batch(engine, settings, [item])[0]
    except Exception as exc:
        return exc


async def _ingest_batch_pg(
    connections: _IntakeConnections, settings: Settings, items: list[Item]
) -> list[Answer]:
    """PostgreSQL: the same work on the event loop's own thread, on a psycopg asyncio
    connection in autocommit, so no worker thread competes with the loop for the interpreter
    and no ORM sits in between. Two round trips: the connection lookup, then the one statement
    that stores the batch (``store_many_async``), atomic and durable when it returns (a third
    only when the batch has repeats to count)."""
    try:
        async with connections.connection() as conn:
            async with conn.cursor(row_factory=namedtuple_row) as cursor:
                found: dict[BatchKey, Any] = {}
                for ws, prov in batch_keys(items):
                    await cursor.execute(CONNECTION_OF_PG, {"workspace": ws, "provider": prov})
                    found[(ws, prov)] = await cursor.fetchone()
            answers, accepted, refusals = check_delivery(settings, items, found)
            results = await store_many_async(conn, [d for _, d in accepted])
            await record_refusals_async(conn, refusals)
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [await _ingest_one_pg(connections, settings, item) for item in items]
    return _answers(answers, accepted, results)


async def _ingest_one_pg(connections: _IntakeConnections, settings: Settings, item: Item) -> Answer:
    try:
        return (await _ingest_batch_pg(connections, settings, [item]))[0]
    except Exception as exc:
        return exc


CONNECT_TIMEOUT_S = 5
"""How long a new intake connection may take (a refused one fails at once)."""
APPLICATION_NAME = "provely-intake"
"""How the intake's connections show in ``pg_stat_activity``."""


class _IntakeConnections:
    """The intake's PostgreSQL connections on one event loop (psycopg asyncio, autocommit).

    Not a general pool, on purpose: the batcher runs at most ``MAX_BATCHES_IN_FLIGHT`` batches
    and each holds one connection, so no more exist, and nobody waits for one. When none is
    idle a connection is made there and then, so a database that refuses connections fails the
    batch at once (503, the provider retries) instead of making deliveries wait for a pool to
    reconnect. One that comes back broken or inside a transaction is closed; one idle for longer
    than the engine's ``IDLE_PING_AFTER_S`` is pinged before use, as the engine's pooled
    connections are (a database restart leaves such connections dead).
    """

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await self._take()
        healthy = False
        try:
            yield conn
            healthy = True
        finally:
            if (
                healthy
                and not conn.closed
                and conn.info.transaction_status == TransactionStatus.IDLE
                and len(self.idle) < MAX_BATCHES_IN_FLIGHT
            ):
                self.idle.append((conn, time.monotonic()))
            else:
                await conn.close()

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        while self.idle:
            conn, since = self.idle.pop()
            if conn.closed:
                continue
            if time.monotonic() - since <= IDLE_PING_AFTER_S:
                return conn
            try:
                await conn.execute("SELECT 1")
                return conn
            except psycopg.Error:
                await conn.close()
        return await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=APPLICATION_NAME,
        )

    def abandon(self) -> None:
        """Close the idle connections without their event loop (it is gone): libpq closes the
        socket, nothing is awaited."""
        for conn, _ in self.idle:
            conn.pgconn.finish()
        self.idle.clear()

    async def close(self) -> None:
        while self.idle:
            conn, _ = self.idle.pop()
            await conn.close()


@dataclass(slots=True)
class _LoopConnections:
    loop: weakref.ref[asyncio.AbstractEventLoop]
    by_engine: dict[int, tuple[Engine, _IntakeConnections]]

    def abandon(self) -> None:
        for _, connections in self.by_engine.values():
            connections.abandon()

    async def close(self) -> None:
        for _, connections in self.by_engine.values():
            await connections.close()


_intake_connections: dict[int, _LoopConnections] = {}
"""By event loop (its id, with a weak reference to tell a reused id apart)."""


def _connections_for(engine: Engine) -> _IntakeConnections:
    """The intake connections of this event loop to ``engine``'s database."""
    loop = asyncio.get_running_loop()
    entry = _intake_connections.get(id(loop))
    if entry is None or entry.loop() is not loop:
        _forget_finished_loops()
        entry = _intake_connections[id(loop)] = _LoopConnections(weakref.ref(loop), {})
    found = entry.by_engine.get(id(engine))
    if found is None or found[0] is not engine:
        conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        found = entry.by_engine[id(engine)] = (engine, _IntakeConnections(conninfo))
    return found[1]


def _forget_finished_loops() -> None:
    """Drop the connections of event loops that ended without a lifespan shutdown (a test
    client without its context, say)."""
    for key, entry in list(_intake_connections.items()):
        loop = entry.loop()
        if loop is None or loop.is_closed():
            del _intake_connections[key]
            entry.abandon()


@atexit.register
def _abandon_all() -> None:
    for entry in _intake_connections.values():
        entry.abandon()
    _intake_connections.clear()


async def close_intake_connections() -> None:
    """Close this event loop's intake connections (the app's lifespan shutdown)."""
    entry = _intake_connections.pop(id(asyncio.get_running_loop()), None)
    if entry is not None:
        await entry.close()


MAX_BATCH = 64
"""Most deliveries one transaction carries."""
MAX_BATCHES_IN_FLIGHT = 2
"""Batches one process writes at once. The second starts only when a full batch waits (see
:class:`_Batcher`)."""


class _Batcher:
    """Group commit: deliveries that arrive while earlier ones are being written go together.

    No timer: a delivery that finds nothing being written is written at once (alone);
    deliveries that arrive while a batch is being written wait for it and go together in the
    next. A second batch is written beside the first only when ``MAX_BATCH`` deliveries wait.
    Under a moderate load one batch at a time makes the batches twice as large, and much of a
    batch's cost does not grow with its size: two round trips for the event loop, and a
    statement and a commit for the database, whose backend spent 540 µs of CPU on a batch of
    four deliveries and 1,120 on one of sixteen. At the maximum, the second batch keeps the
    database busy while the loop answers the first. (``docs/benchmarks.md``, "Ingest", has the
    figures against two batches at any load.)
    """

    def __init__(self) -> None:
        self.pending: list[tuple[Engine, Settings, Item, asyncio.Future[Answer]]] = []
        self.running = 0

    async def submit(self, engine: Engine, settings: Settings, item: Item) -> Outcome:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending.append((engine, settings, item, future))
        self._start()
        answer = await future
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _may_start(self) -> bool:
        return bool(self.pending) and (
            self.running == 0
            or (self.running < MAX_BATCHES_IN_FLIGHT and len(self.pending) >= MAX_BATCH)
        )

    def _start(self) -> None:
        while self._may_start():
            engine, settings = self.pending[0][0], self.pending[0][1]
            batch = [p for p in self.pending[:MAX_BATCH] if p[0] is engine and p[1] is settings]
            taken = {id(p) for p in batch}
            self.pending = [p for p in self.pending if id(p) not in taken]
            self.running += 1
            task = asyncio.get_running_loop().create_task(self._run(engine, settings, batch))
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)

    async def _run(
        self,
        engine: Engine,
        settings: Settings,
        batch: list[tuple[Engine, Settings, Item, asyncio.Future[Answer]]],
    ) -> None:
        items = [p[2] for p in batch]
        try:
            if engine.dialect.name == "postgresql":
                answers = await _ingest_batch_pg(_connections_for(engine), settings, items)
            else:
                answers = await anyio.to_thread.run_sync(
                    partial(_ingest_batch, engine, settings, items)
                )
        except BaseException as exc:
            answers = [exc] * len(batch)
        finally:
            self.running -= 1
        for (_, _, _, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)
        self._start()


_tasks: set[asyncio.Task[None]] = set()
_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
    weakref.WeakKeyDictionary()
)


def process_batcher() -> _Batcher:
    # One batcher per event loop (its futures belong to that loop).
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = _Batcher()
    return found
