"""Webhook intake: ``POST /v1/events/{provider}/{workspace}`` (no API key).

Served by :class:`WebhookIntake`, a pure ASGI handler in front of the ingress app
(``services.ingress.app.IngressApp``): the busiest address of the service skips the framework's
middlewares and routing (its OpenAPI entry is :func:`openapi_path_item`). The path reads like
the house rule: read the raw body (bounded while reading) → load the workspace's connection →
verify the signature on the exact bytes → parse by the skill's event shape → store once with its
keys, marked not yet correlated (``shared.intake.store.store_many``) → commit → 200; a thread of the
process then sends one ``provely.correlate`` message for all the batches committed meanwhile
(at once after a quiet spell, at most one per ``MIN_SEND_INTERVAL_S`` under a stream).
Deliveries that arrive while earlier ones are being written share one transaction (group
commit, :class:`_Batcher`); each is answered only after that transaction commits.

Correlating the stored events with operations and waking those is an observer's work
(``shared.intake.correlator``, run by its ``provely.correlate`` task), after the answer: the
provider waits only for the durable insert. The marker is in PostgreSQL, so a lost message loses
nothing (the sweeper correlates what is still pending after its grace).

Answers (RFC 9457 problem+json for every refusal):

- 200 the event is stored (or was already: ``"duplicate": true``) and committed;
- 400 the signature does not hold, or the verified body is not an event (nothing is stored),
  or it is one no table can hold (a non-finite number, a NUL character or a lone surrogate
  anywhere, nesting past ``MAX_JSON_DEPTH``: reason ``unstorable``, logged once): a 4xx, so the
  provider does not retry what can never be stored;
- 404 no such workspace, or no connection to that provider — the same answer for both;
- 405 any other method;
- 413 the body is larger than ``settings.webhook_max_body_bytes`` (reading stops at the cap);
- 503 the database cannot be reached, or the connection's secrets cannot be opened (a wrong
  ``PROVELY_SECRET_KEY``): the provider retries later;
- 500 (problem+json, logged with its traceback) for anything unexpected.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from fastapi.responses import JSONResponse, Response
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import Engine, bindparam, select
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.problems import PROBLEM_JSON, problem_response
from shared.core.skill import EventShape
from shared.db.models import Connection
from shared.db.session import IDLE_PING_AFTER_S
from shared.intake.contracts import event_shape_for, fingerprint_key_names
from shared.intake.parse import UNSTORABLE, MalformedEvent, parse_event
from shared.intake.results import Delivery, IntakeResult
from shared.intake.store import store_many, store_many_async
from shared.runtime.settings import Settings, get_settings
from shared.trust.secrets import SecretError
from shared.trust.signatures import SignatureError, SignatureScheme, UnknownSchemeError, scheme_for

__all__ = [
    "EVENTS_PATH",
    "BodyTooLarge",
    "WebhookIntake",
    "correlation_requests",
    "openapi_path_item",
]

log = logging.getLogger(__name__)

_PROVIDER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_WORKSPACE = re.compile(r"^[A-Za-z0-9_\-]{1,40}$")


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""


class _NotFound(Exception):
    pass


class _Unavailable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Outcome:
    event_id: str
    result: IntakeResult


def _problem(status: int, kind: str, detail: str, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "5"} if status == 503 else None
    if status == 413:
        # Close the connection: the server then stops reading the rest of the body instead of
        # draining it (an endless chunked body ends here).
        headers = {"Connection": "close"}
    return problem_response(status, kind, detail, headers=headers, **extra)


def _not_found() -> JSONResponse:
    # One answer for an unknown workspace and an unknown provider: it must not say which.
    return _problem(404, "not-found", "no webhook endpoint at this address")


_SECRETS_CACHE: dict[tuple[bytes, str | None], tuple[str, ...]] = {}
_SECRETS_CACHE_SIZE = 1024


def _connection_secrets(stored: bytes, settings: Settings) -> tuple[str, ...]:
    """The connection's active webhook secrets (a Fernet-encrypted JSON list at rest).

    Decrypted values are kept in memory by ciphertext, so a rotation (new ciphertext) takes
    effect on the next delivery.
    """
    ciphertext = bytes(stored)
    key = (ciphertext, settings.secret_key)
    found = _SECRETS_CACHE.get(key)
    if found is not None:
        return found
    from shared.trust.secrets import decrypt_webhook_secrets

    secrets = tuple(v for v in decrypt_webhook_secrets(ciphertext, settings=settings) if v)
    if len(_SECRETS_CACHE) >= _SECRETS_CACHE_SIZE:
        _SECRETS_CACHE.clear()
    _SECRETS_CACHE[key] = secrets
    return secrets


@dataclass(frozen=True, slots=True)
class _Item:
    provider: str
    workspace: str
    body: bytes
    headers: Mapping[str, str]
    now: datetime


# Built once: building the statement costs more than running it.
_CONNECTION_OF = select(
    Connection.id,
    Connection.signature_scheme,
    Connection.signature_tolerance_seconds,
    Connection.webhook_secrets_enc,
).where(
    Connection.workspace_id == bindparam("workspace"),
    Connection.provider == bindparam("provider"),
)


# The same statement for the intake's own psycopg connections (PostgreSQL's SQL and psycopg's
# parameter style, rendered once).
_CONNECTION_OF_PG = str(_CONNECTION_OF.compile(dialect=psycopg_dialect()))  # type: ignore[no-untyped-call]

_BatchKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Verifier:
    """What checking a delivery to one connection takes, worked out once per batch."""

    scheme: SignatureScheme
    secrets: tuple[str, ...]
    tolerance_s: int
    shape: EventShape
    extra_keys: frozenset[str]

    @classmethod
    def of(cls, settings: Settings, provider: str, connection: Any | None) -> _Verifier:
        """For the connection of a workspace and provider (None: there is none); raises
        _NotFound or SecretError."""
        if connection is None:
            raise _NotFound
        try:
            scheme = scheme_for(connection.signature_scheme)
        except UnknownSchemeError:
            log.error("connection %s names an unknown signature scheme", connection.id)
            raise _NotFound from None
        return cls(
            scheme,
            _connection_secrets(connection.webhook_secrets_enc, settings),
            connection.signature_tolerance_seconds,
            event_shape_for(provider, scheme.name),
            fingerprint_key_names(provider),
        )

    def verified(self, item: _Item) -> Delivery:
        """Signature, then event shape; raises SignatureError or MalformedEvent."""
        delivery = self.scheme.verify(
            body=item.body,
            headers=item.headers,
            secrets=self.secrets,
            tolerance_s=self.tolerance_s,
            now=item.now,
        )
        event = parse_event(
            item.body,
            shape=self.shape,
            delivery=delivery,
            received_at=item.now,
            extra_keys=self.extra_keys,
        )
        return Delivery(item.workspace, item.provider, event, item.body, item.now)


_Answer = _Outcome | BaseException
_Checked = tuple[list[_Answer | None], list[tuple[int, Delivery]]]


def _batch_keys(items: list[_Item]) -> list[_BatchKey]:
    """The distinct (workspace, provider) pairs of a batch, in order of arrival."""
    return list(dict.fromkeys((item.workspace, item.provider) for item in items))


def _check(settings: Settings, items: list[_Item], connections: dict[_BatchKey, Any]) -> _Checked:
    """Verify each delivery of a batch: the refused ones get their answer (and will write
    nothing), the accepted ones go on to be stored."""
    verifiers: dict[_BatchKey, _Verifier | BaseException] = {}
    for (ws, prov), connection in connections.items():
        try:
            verifiers[(ws, prov)] = _Verifier.of(settings, prov, connection)
        except (_NotFound, SecretError) as refused:
            verifiers[(ws, prov)] = refused
    answers: list[_Answer | None] = [None] * len(items)
    accepted: list[tuple[int, Delivery]] = []
    for index, item in enumerate(items):
        verifier = verifiers[(item.workspace, item.provider)]
        if isinstance(verifier, BaseException):
            answers[index] = verifier
            continue
        try:
            accepted.append((index, verifier.verified(item)))
        except (SignatureError, MalformedEvent) as refused:
            answers[index] = refused
    return answers, accepted


def _answers(
    answers: list[_Answer | None],
    accepted: list[tuple[int, Delivery]],
    results: list[IntakeResult],
) -> list[_Answer]:
    """After the commit: the answers, and one correlation request when anything is new."""
    for (index, delivery), result in zip(accepted, results, strict=True):
        answers[index] = _Outcome(delivery.event.event_id, result)
    if any(r.event_pk is not None for r in results):
        correlation_requests.request()
    return [a if a is not None else RuntimeError("no answer") for a in answers]


def _ingest_batch(engine: Engine, settings: Settings, items: list[_Item]) -> list[_Answer]:
    """Runs in a worker thread (databases other than PostgreSQL): the deliveries that arrived
    together share one transaction, committed before the correlation is asked for and before
    any of them is answered. When the shared transaction fails, each is retried on its own."""
    try:
        with engine.begin() as db:
            connections = {
                (ws, prov): db.execute(
                    _CONNECTION_OF, {"workspace": ws, "provider": prov}
                ).one_or_none()
                for ws, prov in _batch_keys(items)
            }
            answers, accepted = _check(settings, items, connections)
            results = store_many(db, [d for _, d in accepted])
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [_ingest_one(engine, settings, item) for item in items]
    return _answers(answers, accepted, results)


def _ingest_one(engine: Engine, settings: Settings, item: _Item) -> _Answer:
    try:
        return _ingest_batch(engine, settings, [item])[0]
    except Exception as exc:
        return exc


async def _ingest_batch_pg(
    connections: _IntakeConnections, settings: Settings, items: list[_Item]
) -> list[_Answer]:
    """PostgreSQL: the same work on the event loop's own thread, on a psycopg asyncio
    connection in autocommit, so no worker thread competes with the loop for the interpreter
    and no ORM sits in between. Two round trips: the connection lookup, then the one statement
    that stores the batch (``store_many_async``), atomic and durable when it returns (a third
    only when the batch has repeats to count)."""
    try:
        async with connections.connection() as conn:
            async with conn.cursor(row_factory=namedtuple_row) as cursor:
                found: dict[_BatchKey, Any] = {}
                for ws, prov in _batch_keys(items):
                    await cursor.execute(_CONNECTION_OF_PG, {"workspace": ws, "provider": prov})
                    found[(ws, prov)] = await cursor.fetchone()
            answers, accepted = _check(settings, items, found)
            results = await store_many_async(conn, [d for _, d in accepted])
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [await _ingest_one_pg(connections, settings, item) for item in items]
    return _answers(answers, accepted, results)


async def _ingest_one_pg(
    connections: _IntakeConnections, settings: Settings, item: _Item
) -> _Answer:
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


MIN_SEND_INTERVAL_S = 0.1
"""Under a stream of batches, at most one correlate message per this many seconds."""


def _send_correlate() -> None:
    from shared.runtime.celery_app import CORRELATE_TASK, send

    send(CORRELATE_TASK, [])


class _CorrelationRequests:
    """Sends ``provely.correlate`` messages from a thread of its own, coalesced.

    A batch that stored new events calls :meth:`request` after its commit and is answered at
    once. The thread sends one message for every request made before the send began: whatever
    committed before a request is visible to the correlator that message starts, so no batch
    waits for the broker and a burst of batches costs one message. Sends are at least
    ``interval_s`` apart: a request after a quiet spell is sent at once, and under a stream of
    batches the next message waits for the interval, so the correlator takes the events of all
    the batches committed meanwhile in one transaction. (When the thread only waited after a
    send that a request had overlapped, it sent a message for most batches: 27 a second at 1,900
    deliveries a second, against 10 now, and correlating 70 events per transaction instead of
    190 cost the correlator about 50 µs more CPU per event, and its database about 40.) A failed
    send is logged; the sweeper correlates what is left pending.
    """

    def __init__(
        self,
        send: Callable[[], object] = _send_correlate,
        interval_s: float = MIN_SEND_INTERVAL_S,
    ) -> None:
        self._send = send
        self._interval_s = interval_s
        self._wanted = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        with self._lock:
            self._idle.clear()
            self._wanted.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="provely-correlate-requests", daemon=True
                )
                self._thread.start()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """True once every request made so far has had its message sent (or failed)."""
        return self._idle.wait(timeout_s)

    def _run(self) -> None:
        last = time.monotonic() - self._interval_s
        while True:
            self._wanted.wait()
            time.sleep(max(0.0, self._interval_s - (time.monotonic() - last)))
            with self._lock:
                self._wanted.clear()
            try:
                self._send()
            except Exception:
                log.warning("webhook intake: correlate message not sent", exc_info=True)
            # Counted from the end of the send: two sends are the interval apart wherever in
            # them one looks (from its start, a slow send let the next begin sooner after it).
            last = time.monotonic()
            with self._lock:
                if not self._wanted.is_set():
                    self._idle.set()


correlation_requests = _CorrelationRequests()


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
        self.pending: list[tuple[Engine, Settings, _Item, asyncio.Future[_Answer]]] = []
        self.running = 0

    async def submit(self, engine: Engine, settings: Settings, item: _Item) -> _Outcome:
        future: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
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
        batch: list[tuple[Engine, Settings, _Item, asyncio.Future[_Answer]]],
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


def _batcher() -> _Batcher:
    # One batcher per event loop (its futures belong to that loop).
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = _Batcher()
    return found


_METRICS: dict[tuple[str, ...], Any] = {}


def _metric(name: str, *labels: str) -> None:
    """Count on the named Prometheus counter (its labelled child is looked up once)."""
    key = (name, *labels)
    child = _METRICS.get(key)
    if child is None:
        from shared.runtime import observability

        child = _METRICS[key] = getattr(observability, name).labels(*labels)
    child.inc()


_KNOWN_PROVIDERS: dict[str, bool] = {}


def _provider_label(provider: str) -> str:
    """``provider`` when a loaded skill (or the generic ``http``) has that id, else ``unknown``:
    the address is the sender's to choose, and a label per made-up name would grow the metric
    without bound."""
    known = _KNOWN_PROVIDERS.get(provider)
    if known is None:
        from shared.trust.registry import RegistryError, get_registry

        try:
            known = provider == "http" or get_registry().skill(provider) is not None
        except RegistryError:
            known = False
        if len(_KNOWN_PROVIDERS) < 1024:
            _KNOWN_PROVIDERS[provider] = known
    return provider if known else "unknown"


def _refused(provider: str, reason: str) -> None:
    """Count one refused delivery (stored nowhere), whatever refused it."""
    _metric("EVENTS_REFUSED", _provider_label(provider), reason)


EVENTS_PATH = "/v1/events/{provider}/{workspace}"
_PATH = re.compile(r"^/v1/events/([^/]+)/([^/]+)$")


class WebhookIntake:
    """Pure ASGI wrapper that serves ``POST /v1/events/{provider}/{workspace}`` itself.

    Providers call this path far more often than anything else, so it is answered here, ahead
    of the framework's routing, dependency solving and middlewares (each of which costs more per
    request than the intake's own parsing). Every other path goes on to the wrapped app. The
    settings and the engine are the application's (``scope["app"].state``), as for a route.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _closing_connections(send))
            return
        match = _PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        provider, workspace = match.group(1), match.group(2)
        if scope["method"] != "POST":
            _refused(provider, "method_not_allowed")
            response: Response = problem_response(
                405, "method-not-allowed", "this address only takes POST",
                headers={"Allow": "POST"},
            )  # fmt: skip
        else:
            try:
                response = await _receive_event(scope, receive, provider, workspace)
            except Exception:
                log.exception("webhook intake: unexpected error")
                _refused(provider, "internal_error")
                response = _problem(500, "internal", "an internal error occurred")
        await response(scope, receive, send)


def _closing_connections(send: Send) -> Send:
    """The lifespan's ``send``, closing the intake's connections before shutdown completes."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "lifespan.shutdown.complete":
            await close_intake_connections()
        await send(message)

    return wrapped


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The raw body, read from the ASGI messages; raises BodyTooLarge as soon as it passes
    ``limit`` (the rest is never read, so an endless chunked body costs one chunk) and
    ClientDisconnect when the client goes away first."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                if int(value) > limit:
                    raise BodyTooLarge
            except ValueError:
                pass
            break
    buffer = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        if len(buffer) + len(chunk) > limit:
            raise BodyTooLarge
        buffer += chunk
        if not message.get("more_body", False):
            return bytes(buffer)


def _state(scope: Scope) -> tuple[Settings, Engine]:
    state = getattr(scope.get("app"), "state", None)
    settings = getattr(state, "settings", None)
    if not isinstance(settings, Settings):
        settings = get_settings()
    engine = getattr(state, "engine", None)
    if not isinstance(engine, Engine):
        from shared.db.session import get_engine

        engine = get_engine(settings.resolved_database_url())
    return settings, engine


class _Received(Response):
    """200 ``{"received": true, "event_id": …, "duplicate": …}``, rendered without a dict."""

    media_type = "application/json"

    def __init__(self, event_id: str, duplicate: bool) -> None:
        super().__init__(
            b'{"received":true,"event_id":'
            + json.dumps(event_id).encode()
            + (b',"duplicate":true}' if duplicate else b',"duplicate":false}')
        )


async def _receive_event(scope: Scope, receive: Receive, provider: str, workspace: str) -> Response:
    """One delivery; every answer but a 200 counts in ``provely_events_refused_total``."""
    response = await _answer_event(scope, receive, provider, workspace)
    if response.status_code != 200:
        reason = _REFUSAL_BY_STATUS.get(response.status_code)
        if reason is not None:
            _refused(provider, reason)
    return response


_REFUSAL_BY_STATUS = {404: "unknown_endpoint", 413: "body_too_large", 503: "unavailable"}
"""The reason of a refusal that is not the signature's or the body's (those name their own)."""


async def _answer_event(scope: Scope, receive: Receive, provider: str, workspace: str) -> Response:
    if not (_PROVIDER.match(provider) and _WORKSPACE.match(workspace)):
        return _not_found()
    settings, engine = _state(scope)
    try:
        body = await _read_body(scope, receive, settings.webhook_max_body_bytes)
    except BodyTooLarge:
        return _problem(
            413,
            "body-too-large",
            f"the body passes the limit of {settings.webhook_max_body_bytes} bytes",
        )
    except ClientDisconnect:
        _refused(provider, "client_disconnected")
        return _problem(400, "bad-request", "the client went away before the body was read")
    try:
        item = _Item(provider, workspace, body, Headers(scope=scope), datetime.now(UTC))
        outcome = await _batcher().submit(engine, settings, item)
    except _NotFound:
        return _not_found()
    except SignatureError as refused:
        _refused(provider, refused.reason)
        return _problem(400, "signature-refused", str(refused), reason=refused.reason)
    except MalformedEvent as malformed:
        _refused(provider, malformed.reason)
        if malformed.reason == UNSTORABLE:
            # Signed, so the provider sent it: refused with a 4xx it will not retry, once.
            log.warning(
                "webhook intake: refused a signed delivery to %s/%s that cannot be stored: %s",
                provider,
                workspace,
                malformed,
            )
        return _problem(400, "malformed-event", str(malformed), reason=malformed.reason)
    except (
        OperationalError,
        DisconnectionError,
        PoolTimeoutError,
        psycopg.OperationalError,
    ) as exc:
        log.warning("webhook intake: database unavailable: %s", exc.__class__.__name__)
        return _problem(503, "unavailable", "the event store cannot be reached")
    except DBAPIError as exc:
        if exc.connection_invalidated:
            return _problem(503, "unavailable", "the event store cannot be reached")
        raise
    except SecretError as exc:
        # The connection's secrets cannot be opened (wrong or missing PROVELY_SECRET_KEY): an
        # operator's problem; the provider retries later.
        log.error("webhook intake: cannot open the connection's secrets: %s", exc)
        return _problem(503, "unavailable", "the endpoint cannot check signatures now")
    _metric("EVENTS_RECEIVED", provider)
    if outcome.result.duplicate:
        _metric("EVENTS_DEDUPLICATED", provider)
    return _Received(outcome.event_id, outcome.result.duplicate)


def _problem_content() -> dict[str, Any]:
    return {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}


def openapi_path_item() -> dict[str, Any]:
    """The OpenAPI description of the intake (served by :class:`WebhookIntake`, which the
    framework's schema generator does not see)."""
    param = {"in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "post": {
            "tags": ["events"],
            "summary": "Receive a signed provider event",
            "description": (
                "No API key: the signature of the connection's scheme is checked on the exact "
                "bytes of the body before anything else. Answered only once the event is "
                "durably stored (or known already)."
            ),
            "operationId": "receive_event",
            "parameters": [
                {"name": "provider", **param, "description": "the connection's provider"},
                {"name": "workspace", **param, "description": "the workspace id"},
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {
                    "description": "stored (or already stored: `duplicate` is true)",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["received", "event_id", "duplicate"],
                                "properties": {
                                    "received": {"type": "boolean"},
                                    "event_id": {"type": "string"},
                                    "duplicate": {"type": "boolean"},
                                },
                            }
                        }
                    },
                },
                "400": {
                    "description": "signature refused, or not an event",
                    "content": _problem_content(),
                },
                "404": {"description": "unknown endpoint", "content": _problem_content()},
                "405": {"description": "only POST", "content": _problem_content()},
                "413": {"description": "body too large", "content": _problem_content()},
                "503": {
                    "description": "storage unavailable, retry later",
                    "content": _problem_content(),
                },
            },
        }
    }
