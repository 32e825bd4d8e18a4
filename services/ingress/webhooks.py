"""Webhook intake route: ``POST /v1/events/{provider}/{workspace}`` (no API key).

The route reads like the house rule: read the raw body (bounded while reading) → load the
workspace's connection → verify the signature on the exact bytes → parse by the skill's event
shape → store once with its keys, marked not yet correlated (``shared.intake.store_many``) →
commit → 200; a thread of the process then sends one ``provely.correlate`` message for all the
batches committed meanwhile. Deliveries that arrive while earlier ones are
being written share one transaction (group commit, :class:`_Batcher`); each is answered only
after that transaction commits.

Correlating the stored events with operations and waking those is an observer's work
(``services.observer.correlate``), after the answer: the provider waits only for the durable
insert. The marker is in PostgreSQL, so a lost message loses nothing (the sweeper correlates
what is still pending after its grace).

Answers (RFC 9457 problem+json for every refusal):

- 200 the event is stored (or was already: ``"duplicate": true``) and committed;
- 400 the signature does not hold, or the verified body is not an event (nothing is stored);
- 404 no such workspace, or no connection to that provider — the same answer for both;
- 413 the body is larger than ``settings.webhook_max_body_bytes`` (reading stops at the cap);
- 503 the database cannot be reached, or the connection's secrets cannot be opened (a wrong
  ``PROVELY_SECRET_KEY``): the provider retries later.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Connection as DbConnection
from sqlalchemy import Engine, bindparam, select
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from starlette.requests import ClientDisconnect

from services.ingress.problems import problem_response
from shared.db.models import Connection
from shared.intake import (
    Delivery,
    IntakeResult,
    MalformedEvent,
    event_shape_for,
    fingerprint_key_names,
    parse_event,
    store_many,
)
from shared.secrets import SecretError
from shared.settings import Settings, get_settings
from shared.signatures import SignatureError, UnknownSchemeError, scheme_for

__all__ = ["BodyTooLarge", "correlation_requests", "read_limited_body", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["events"])

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


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The raw body, read from the ASGI stream; raises BodyTooLarge as soon as it passes
    ``limit`` (the rest is never read, so an endless chunked body costs one chunk)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLarge
        except ValueError:
            pass
    buffer = bytearray()
    async for chunk in request.stream():
        if len(buffer) + len(chunk) > limit:
            raise BodyTooLarge
        buffer += chunk
    return bytes(buffer)


def _settings(request: Request) -> Settings:
    found = getattr(request.app.state, "settings", None)
    return found if isinstance(found, Settings) else get_settings()


def _engine(request: Request, settings: Settings) -> Engine:
    found = getattr(request.app.state, "engine", None)
    if isinstance(found, Engine):
        return found
    from shared.db.session import get_engine

    return get_engine(settings.resolved_database_url())


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
    from shared.secrets import decrypt_webhook_secrets

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


def _verified(
    db: DbConnection, settings: Settings, item: _Item, connections: dict[tuple[str, str], Any]
) -> Delivery:
    """Signature, then event shape; raises _NotFound, SignatureError or MalformedEvent."""
    key = (item.workspace, item.provider)
    if key not in connections:
        connections[key] = db.execute(
            _CONNECTION_OF, {"workspace": item.workspace, "provider": item.provider}
        ).one_or_none()
    connection = connections[key]
    if connection is None:
        raise _NotFound
    try:
        scheme = scheme_for(connection.signature_scheme)
    except UnknownSchemeError:
        log.error("connection %s names an unknown signature scheme", connection.id)
        raise _NotFound from None
    delivery = scheme.verify(
        body=item.body,
        headers=item.headers,
        secrets=_connection_secrets(connection.webhook_secrets_enc, settings),
        tolerance_s=connection.signature_tolerance_seconds,
        now=item.now,
    )
    event = parse_event(
        item.body,
        shape=event_shape_for(item.provider, scheme.name),
        delivery=delivery,
        received_at=item.now,
        extra_keys=fingerprint_key_names(item.provider),
    )
    return Delivery(item.workspace, item.provider, event, item.body, item.now)


_Answer = _Outcome | BaseException


def _store_batch(
    db: DbConnection, settings: Settings, items: list[_Item]
) -> tuple[list[_Answer | None], list[tuple[int, Delivery]], list[IntakeResult]]:
    """Verify the batch's deliveries and store the accepted ones through ``db``: the refused
    ones (their answers filled in) write nothing."""
    answers: list[_Answer | None] = [None] * len(items)
    connections: dict[tuple[str, str], Any] = {}
    accepted: list[tuple[int, Delivery]] = []
    for index, item in enumerate(items):
        try:
            accepted.append((index, _verified(db, settings, item, connections)))
        except (_NotFound, SignatureError, MalformedEvent, SecretError) as refused:
            answers[index] = refused
    return answers, accepted, store_many(db, [d for _, d in accepted])


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
            stored = _store_batch(db, settings, items)
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [_ingest_one(engine, settings, item) for item in items]
    return _answers(*stored)


def _ingest_one(engine: Engine, settings: Settings, item: _Item) -> _Answer:
    try:
        return _ingest_batch(engine, settings, [item])[0]
    except Exception as exc:
        return exc


async def _ingest_batch_async(
    engine: AsyncEngine, settings: Settings, items: list[_Item]
) -> list[_Answer]:
    """PostgreSQL: the same work on the event loop's own thread (psycopg's async connection;
    ``run_sync`` runs the batch's code between its database round trips), so no worker thread
    competes with the loop for the interpreter. The connection is in autocommit: the connection
    lookup and the one statement that stores the batch (``store_many``) are two round trips,
    with no BEGIN or COMMIT; the statement is atomic and durable when it returns."""
    try:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            stored = await conn.run_sync(_store_batch, settings, items)
    except Exception:
        if len(items) == 1:
            raise
        log.warning("webhook intake: a batch of %d failed; one by one now", len(items))
        return [await _ingest_one_async(engine, settings, item) for item in items]
    return _answers(*stored)


async def _ingest_one_async(engine: AsyncEngine, settings: Settings, item: _Item) -> _Answer:
    try:
        return (await _ingest_batch_async(engine, settings, [item]))[0]
    except Exception as exc:
        return exc


_async_engines: dict[int, tuple[Engine, AsyncEngine]] = {}


def _async_engine(engine: Engine) -> AsyncEngine:
    """The asyncio twin of ``engine`` (same database and pool settings), one per engine."""
    found = _async_engines.get(id(engine))
    if found is None or found[0] is not engine:
        twin = create_async_engine(
            engine.url, pool_size=MAX_BATCHES_IN_FLIGHT, max_overflow=MAX_BATCHES_IN_FLIGHT
        )
        found = _async_engines[id(engine)] = (engine, twin)
    return found[1]


MIN_SEND_INTERVAL_S = 0.025
"""Under a stream of batches, at most one correlate message per this many seconds."""


class _CorrelationRequests:
    """Sends ``provely.correlate`` messages from a thread of its own, coalesced.

    A batch that stored new events calls :meth:`request` after its commit and is answered at
    once. The thread sends one message for every request made before the send began: whatever
    committed before a request is visible to the correlator that message starts, so no batch
    waits for the broker and a burst of batches costs one message. A failed send is logged;
    the sweeper correlates what is left pending.
    """

    def __init__(self) -> None:
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
        from shared.celery_app import CORRELATE_TASK, send

        while True:
            self._wanted.wait()
            with self._lock:
                self._wanted.clear()
            started = time.monotonic()
            try:
                send(CORRELATE_TASK, [])
            except Exception:
                log.warning("webhook intake: correlate message not sent", exc_info=True)
            with self._lock:
                if not self._wanted.is_set():
                    self._idle.set()
                    continue
            # Busy: let the next requests gather (a send holds the interpreter for a while, and
            # the event loop serving the deliveries needs it more).
            time.sleep(max(0.0, MIN_SEND_INTERVAL_S - (time.monotonic() - started)))


correlation_requests = _CorrelationRequests()


MAX_BATCH = 64
"""Most deliveries one transaction carries."""
MAX_BATCHES_IN_FLIGHT = 2
"""Batches one process writes at once; deliveries arriving meanwhile wait for the next (two
keep the database busy while the loop prepares the next batch, and make batches larger than
more would)."""


class _Batcher:
    """Group commit: deliveries that arrive while earlier ones are being written go together.

    No timer: a delivery that finds a free slot is written at once (alone); deliveries that
    arrive while all slots are busy are written together when one frees up.
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

    def _start(self) -> None:
        while self.pending and self.running < MAX_BATCHES_IN_FLIGHT:
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
                answers = await _ingest_batch_async(_async_engine(engine), settings, items)
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


def _metric(name: str, *labels: str) -> None:
    try:
        from shared import observability
    except ImportError:  # pragma: no cover - metrics are optional
        return
    getattr(observability, name).labels(*labels).inc()


@router.post(
    "/v1/events/{provider}/{workspace}",
    summary="Receive a signed provider event",
    responses={
        400: {"description": "signature refused, or not an event"},
        404: {"description": "unknown endpoint"},
        413: {"description": "body too large"},
        503: {"description": "storage unavailable, retry later"},
    },
)
async def receive_event(provider: str, workspace: str, request: Request) -> Response:
    if not (_PROVIDER.match(provider) and _WORKSPACE.match(workspace)):
        return _not_found()
    settings = _settings(request)
    try:
        body = await read_limited_body(request, settings.webhook_max_body_bytes)
    except BodyTooLarge:
        _metric("EVENTS_REFUSED", provider, "body_too_large")
        return _problem(
            413,
            "body-too-large",
            f"the body passes the limit of {settings.webhook_max_body_bytes} bytes",
        )
    except ClientDisconnect:
        return _problem(400, "bad-request", "the client went away before the body was read")
    now = datetime.now(UTC)
    try:
        item = _Item(provider, workspace, body, request.headers, now)
        outcome = await _batcher().submit(_engine(request, settings), settings, item)
    except _NotFound:
        return _not_found()
    except SignatureError as refused:
        _metric("EVENTS_REFUSED", provider, refused.reason)
        return _problem(400, "signature-refused", str(refused), reason=refused.reason)
    except MalformedEvent as malformed:
        _metric("EVENTS_REFUSED", provider, malformed.reason)
        return _problem(400, "malformed-event", str(malformed), reason=malformed.reason)
    except (OperationalError, DisconnectionError, PoolTimeoutError) as exc:
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
    return JSONResponse(
        {
            "received": True,
            "event_id": outcome.event_id,
            "duplicate": outcome.result.duplicate,
        }
    )
