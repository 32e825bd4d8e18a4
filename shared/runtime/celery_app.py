"""The Celery application every Provely process shares: queues, task names, broker settings.

Four tasks, on three queues so each service scales on its own:

- ``provely.observe`` (queue ``observe``): read every channel of one operation for one fence;
- ``provely.observe_many`` (queue ``observe``): the same for several ``[operation, fence]``
  pairs at once, each on a thread of its own (the wakes of one correlation, at most
  ``WAKES_PER_MESSAGE`` a message);
- ``provely.correlate`` (queue ``correlate``, served by the observer too): link the webhook
  events the intake stored with the operations they name, and wake those (no arguments: one
  run takes every pending event);
- ``provely.evaluate`` (queue ``verdict``): decide the operation and schedule what comes next.

Messages only wake workers; PostgreSQL is the record. Every scheduled observation also lives in
``operations.next_observation_at`` and the sweeper re-sends what a lost message left overdue,
so the broker may lose anything (a killed worker, a Redis restart) without losing an operation.
For the same reason messages are acknowledged late, rejected (requeued) when the worker process
running them dies, and prefetched one at a time; tasks are fenced, so a redelivery is harmless.

Broker: ``PROVELY_BROKER_URL`` (Redis in production). The embedded default is kombu's SQLAlchemy
transport on a SQLite file; its stock transport polls once a second and passes every transport
option to ``create_engine``, so this module registers a subclass under the ``sqla`` /
``sqlalchemy`` schemes that polls every ``EMBEDDED_POLLING_INTERVAL_S``, keeps the polling
option away from SQLAlchemy, and returns from a drain within one polling interval so that a
worker's blocking loop acknowledges finished tasks at once (see :class:`EmbeddedSqlaTransport`).
Only this process's kombu registry is touched.

On Redis, kombu's channel builds a new ``redis.Redis`` client (over its kept connection pool)
for every command it sends on its own, a publish among them; building one costs more than the
publish's round trip takes of CPU. :class:`RedisTransport` (the ``redis`` / ``rediss`` schemes)
keeps one client per channel and pool instead (see :class:`_RedisChannel`).

Task bodies live in ``services.observer.tasks`` and ``services.verdict.tasks``; the worker loads
them by name (``include``), and senders address tasks by name, so ``shared`` never imports a
service. Every message is built and sent by ``shared.lifecycle.messages`` (keyword payloads),
over :func:`send` and :func:`send_many` here; the names of tasks and queues are in
``shared.runtime.queues``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Celery
from kombu import Connection, Queue
from kombu import transport as kombu_transport
from kombu.transport import redis as kombu_redis
from kombu.transport import sqlalchemy as kombu_sqla
from kombu.transport.sqlalchemy import models as kombu_sqla_models
from kombu.utils.uuid import uuid
from sqlalchemy.exc import IntegrityError, OperationalError

from shared.runtime.datafiles import private_file, sqlite_file_of
from shared.runtime.queues import (
    CORRELATE_QUEUE,
    CORRELATE_TASK,
    EVALUATE_TASK,
    MAX_COUNTDOWN_S,
    OBSERVE_MANY_TASK,
    OBSERVE_QUEUE,
    OBSERVE_TASK,
    VERDICT_QUEUE,
    WAKES_PER_MESSAGE,
)
from shared.runtime.settings import Settings, get_settings

__all__ = [
    "CORRELATE_QUEUE",
    "CORRELATE_TASK",
    "EMBEDDED_POLLING_INTERVAL_S",
    "EVALUATE_TASK",
    "MAX_COUNTDOWN_S",
    "OBSERVE_MANY_TASK",
    "OBSERVE_QUEUE",
    "OBSERVE_TASK",
    "REDIS_VISIBILITY_TIMEOUT_S",
    "VERDICT_QUEUE",
    "WAKES_PER_MESSAGE",
    "EmbeddedSqlaTransport",
    "RedisTransport",
    "app",
    "configure",
    "prepare_embedded_broker",
    "send",
]

EMBEDDED_POLLING_INTERVAL_S = 0.1
"""How often an idle embedded worker looks for new messages in the SQLite broker."""

REDIS_VISIBILITY_TIMEOUT_S = 1800
"""Redis redelivers an unacknowledged message after this long. It must exceed the longest
countdown plus the longest task; lost messages are recovered much sooner by the sweeper."""


class _EmbeddedSqlaChannel(kombu_sqla.Channel):
    """kombu's SQLAlchemy channel, safe for processes that start together on a new broker file.

    kombu creates its tables and each queue's row on first use, each by a look and then an
    insert: two processes that start at once both find nothing, and the second insert fails
    (``table kombu_queue already exists``, ``UNIQUE constraint failed: kombu_queue.name``). The
    loser's publish or consumer failed with it, and the failed insert left its session unusable.
    Here a table or a queue that another process created meanwhile is taken as found.
    ``prepare_embedded_broker`` creates them all before the processes start, so this is only
    the defence of processes started some other way.
    """

    def _engine_from_config(self) -> Any:
        conninfo: Any = self.connection.client
        broker_file = sqlite_file_of(f"sqla+{conninfo.hostname or ''}")
        if broker_file is not None:
            private_file(broker_file)  # 0600 in a 0700 data dir (shared.runtime.datafiles)
        saved = conninfo.transport_options
        options = dict(saved)
        options.pop("polling_interval", None)
        options.pop("visibility_timeout", None)
        conninfo.transport_options = options
        try:
            engine = super()._engine_from_config()
        finally:
            conninfo.transport_options = saved
        # kombu creates the tables right after this returns; with them made here, it finds them.
        _create_broker_tables(engine)
        return engine

    def _get_or_create(self, queue: str) -> Any:
        parent: Any = super()  # the stubs know no more than the public channel
        try:
            return parent._get_or_create(queue)
        except IntegrityError:
            # Another process inserted the queue between this one's look and its insert.
            self.session.rollback()
            return parent._get_or_create(queue)


def _create_broker_tables(engine: Any, attempts: int = 3) -> None:
    for attempt in range(1, attempts + 1):
        try:
            kombu_sqla_models.metadata.create_all(engine)
            return
        except OperationalError as exc:
            # Another process created a table between this one's look and its CREATE.
            if "already exists" not in str(exc) or attempt == attempts:
                raise


class EmbeddedSqlaTransport(kombu_sqla.Transport):
    """kombu's SQLAlchemy transport, polling every 0.1 s instead of every second, and handing
    control back to the worker's loop after at most one polling interval.

    A polled transport has no event loop, so a Celery worker consumes it with its blocking loop
    (``celery.worker.loops.synloop``): ``drain_events(timeout=2.0)``, then the operations it
    deferred meanwhile, then again. Up to celery 5.6 the acknowledgements of finished tasks are
    among those deferred operations (``Consumer.call_soon``). With late acknowledgement and a
    prefetch of one message per pool process, a worker whose processes have each taken a
    message may take no other until it acknowledges one (``QoS.can_consume``), so its drain
    polls a queue it may not read from until the 2 s timeout, acknowledges, takes the next
    message, and waits 2 s again: about one message every two seconds however many wait
    (celery 5.7 runs these acknowledgements at once instead). Bounding each drain to one
    polling interval makes the deferred acknowledgements, and the prefetch increases Celery
    applies between drains (countdown messages), wait at most that long, on any celery version.
    A drain without a timeout still blocks until a message comes.
    """

    Channel = _EmbeddedSqlaChannel
    polling_interval = EMBEDDED_POLLING_INTERVAL_S

    # The stubs of kombu's two transport bases disagree on this signature; the virtual one's.
    def drain_events(  # type: ignore[override]
        self, connection: Any, timeout: float | None = None
    ) -> None:
        if timeout is not None:
            timeout = min(timeout, self.polling_interval)
        super().drain_events(connection, timeout=timeout)


_TRANSPORT_PATH = f"{__name__}:EmbeddedSqlaTransport"
kombu_transport.TRANSPORT_ALIASES["sqla"] = _TRANSPORT_PATH
kombu_transport.TRANSPORT_ALIASES["sqlalchemy"] = _TRANSPORT_PATH


class _RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, sending the commands it runs on its own (a publish, a queue's
    size, a binding) through one kept client instead of a new ``redis.Redis`` each time.

    Building a client copies its response callbacks into two new dicts (~0.25 ms of CPU, a
    quarter of a publish). The kept client is made over the channel's connection pool and
    made again when the channel has a new pool: kombu drops its pools after a fork (the
    child's pool is a new one) and when the channel closes. A ``redis.Redis`` takes a
    connection from its pool for each command, so it is safe across threads; the clients that
    hold a connection of their own (the consumer's, for BRPOP) are kombu's, untouched.
    """

    _kept_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        channel: Any = self  # the stubs know no more than the public channel
        pool = channel.pool
        kept = self._kept_client
        if kept is None or kept.connection_pool is not pool:
            kept = self._kept_client = channel._create_client()
        yield kept


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`_RedisChannel` (one kept client per channel)."""

    Channel = _RedisChannel


_REDIS_TRANSPORT_PATH = f"{__name__}:RedisTransport"
kombu_transport.TRANSPORT_ALIASES["redis"] = _REDIS_TRANSPORT_PATH
kombu_transport.TRANSPORT_ALIASES["rediss"] = _REDIS_TRANSPORT_PATH


def prepare_embedded_broker(broker_url: str) -> None:
    """Create the SQL broker's tables and Provely's queues in it (``sqla+…`` URLs; others are
    left alone). Run once before the processes that share the broker start, so that none of
    them creates either (``provely up`` and ``provely demo`` do). Idempotent."""
    if not broker_url.startswith(("sqla+", "sqlalchemy+")):
        return
    broker_file = sqlite_file_of(broker_url)
    if broker_file is not None:
        private_file(broker_file)  # 0600 in a 0700 data dir (shared.runtime.datafiles)
    with Connection(broker_url, transport_options=_transport_options(broker_url)) as connection:
        channel: Any = connection.channel()
        try:
            for name in (OBSERVE_QUEUE, CORRELATE_QUEUE, VERDICT_QUEUE):
                channel.queue_declare(queue=name)
        finally:
            # kombu's channel never closes its session: closed here, its connection goes back
            # to the pool that dispose() closes (Python 3.13 warns of one left to the collector).
            if channel._session is not None:
                channel._session.close()
            channel.close()
            # kombu keeps an engine per broker for the life of the process; this one is done.
            cached = kombu_sqla.Channel._engines.pop(str(connection.hostname), None)
            if cached is not None:
                cached[0].dispose()


def _transport_options(broker_url: str) -> dict[str, Any]:
    if broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        return {"visibility_timeout": REDIS_VISIBILITY_TIMEOUT_S}
    if broker_url.startswith(("sqla+", "sqlalchemy+")):
        options: dict[str, Any] = {"polling_interval": EMBEDDED_POLLING_INTERVAL_S}
        if "sqlite" in broker_url.split("://", 1)[0]:
            # Several processes share the file; wait for a writer instead of failing.
            options["connect_args"] = {"timeout": 30}
        return options
    return {}


_routes: dict[str, dict[str, Any]] = {}
"""The route of each task name sent so far (its queue, no declaration): emptied by
:func:`configure`, so a reconfigured app routes by its own settings."""


def _route(task_name: str) -> dict[str, Any]:
    """Where ``task_name`` goes, as ``send_task_message`` takes it: the app's router asked once
    per task name (the routes are the app's settings, fixed while it runs), and no queue
    declared (``declare=[]``: kombu copies and binds the queue and its exchange for every
    publish before finding it declared; the workers declare their queues when they start, and
    on Redis and the embedded broker a message to an undeclared queue is kept all the same)."""
    route = _routes.get(task_name)
    if route is None:
        route = _routes[task_name] = app.amqp.router.route({"declare": []}, task_name, (), {}, None)
    return route


def configure(celery: Celery, settings: Settings) -> None:
    """Point ``celery`` at the broker of ``settings`` (call before the first message is sent)."""
    broker_url = settings.resolved_broker_url()
    # Nothing is created here (it runs at import, in every process that imports the app): the
    # broker's SQLite file is made when the broker is first used (_Channel._engine_from_config).
    embedded = broker_url.startswith(("sqla+", "sqlalchemy+"))
    celery.conf.update(
        broker_url=broker_url,
        broker_transport_options=_transport_options(broker_url),
        # The SQLAlchemy transport has no fanout exchange, which remote control needs.
        worker_enable_remote_control=not embedded,
    )
    # Forget the pools made for a previous broker (tests reconfigure a live app). They are not
    # closed: kombu keeps them in a process-wide registry and hands them out again by URL.
    if getattr(celery, "_pool", None) is not None:
        celery._pool = None  # type: ignore[attr-defined]
    amqp = celery.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    _routes.clear()


def _create_app() -> Celery:
    celery = Celery(
        "provely",
        include=["services.observer.tasks", "services.verdict.tasks"],
    )
    celery.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        result_backend=None,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_default_queue=OBSERVE_QUEUE,
        task_queues=(Queue(OBSERVE_QUEUE), Queue(CORRELATE_QUEUE), Queue(VERDICT_QUEUE)),
        task_routes={
            OBSERVE_TASK: {"queue": OBSERVE_QUEUE},
            OBSERVE_MANY_TASK: {"queue": OBSERVE_QUEUE},
            CORRELATE_TASK: {"queue": CORRELATE_QUEUE},
            EVALUATE_TASK: {"queue": VERDICT_QUEUE},
        },
        task_create_missing_queues=False,
        enable_utc=True,
        timezone="UTC",
        # A task never runs long: a readback is bounded by the HTTP timeout.
        task_time_limit=300,
        task_soft_time_limit=240,
    )
    configure(celery, get_settings())
    return celery


app = _create_app()


def _shown(kwargs: dict[str, Any]) -> str:
    """What Celery would show of a message's keyword arguments: their repr, or {} for none.
    Given to Celery as ``kwargsrepr`` (with ``argsrepr`` "()"), which spares its ``saferepr``
    (~25 µs of the ~150 µs a message took)."""
    return repr(kwargs) if kwargs else "{}"


def send(task_name: str, kwargs: dict[str, Any], *, countdown_s: float = 0.0) -> None:
    """Send ``task_name`` by name (routed to its queue) with keyword arguments ``kwargs``; the
    caller has committed already. The transport of ``shared.lifecycle.messages``, which builds
    every message: send through that module, not this function.

    Built and published by Celery's message layer as :func:`send_many` does, with the route
    kept per task name (:func:`_route`), and with what ``send_task`` does for every message
    kept: a broker error raised as kombu's (``_reraise_as_library_errors``), the publish
    retried by the app's ``task_publish_retry`` and ``task_publish_retry_policy``, a countdown
    made an ETA. Left out is what no Provely message uses: the registry lookup, the options
    merged again, the parent's ids and trail (results are ignored), the result object and the
    reply queue. Through ``send_task`` a send to Redis cost 557 Python calls and ~106 µs of
    CPU besides the round trip, this way 454 and ~68."""
    countdown = max(0.0, countdown_s)
    amqp = app.amqp
    message = amqp.create_task_message(
        uuid(),
        task_name,
        (),
        kwargs,
        countdown if countdown > 0 else None,
        argsrepr="()",
        kwargsrepr=_shown(kwargs),
        ignore_result=True,
    )
    route = _route(task_name)
    with (
        app.producer_or_acquire() as producer,
        producer.connection._reraise_as_library_errors(),
    ):
        amqp.send_task_message(producer, task_name, message, **route)


SEND_BATCH = 500
"""Most messages one broker round trip carries in :func:`send_many`."""


def send_many(task_name: str, many_kwargs: Sequence[dict[str, Any]]) -> None:
    """Send one ``task_name`` message per entry of ``many_kwargs`` (its keyword arguments), due
    at once, through one producer; on Redis they go in pipelined round trips (kombu's publish
    batch) instead of one round trip each. A failure raises and may leave part of them sent:
    the caller's schedule in the database is the record, as for :func:`send`.

    The messages are built and published by Celery's message layer (``app.amqp``:
    ``create_task_message``, ``send_task_message``), which ``send_task`` calls too, with the
    route looked up once for all of them. ``send_task`` adds per message what these do not
    need: a registry lookup, options merged again, parent tracking, a result object, a reply
    queue for results that are ignored. Through ``send_task`` a message cost ~80 µs of CPU,
    this way ~46."""
    if not many_kwargs:
        return
    amqp = app.amqp
    route = _route(task_name)
    with app.producer_or_acquire() as producer, producer.batch(max_size=SEND_BATCH):
        for kwargs in many_kwargs:
            message = amqp.create_task_message(
                uuid(),
                task_name,
                (),
                kwargs,
                argsrepr="()",
                kwargsrepr=_shown(kwargs),
                ignore_result=True,
            )
            # retry=False: nothing goes out before the batch's flush, which raises
            amqp.send_task_message(producer, task_name, message, retry=False, **route)
