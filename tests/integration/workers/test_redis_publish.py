"""Publishing on Redis through the app's transport: one kept ``redis.Redis`` client per channel
and connection pool (``shared.runtime.celery_app.RedisTransport``), made again for a new pool,
safe across threads and in a forked child; every message still arrives."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection

from shared.runtime.celery_app import RedisTransport, configure
from shared.runtime.settings import Settings

pytestmark = pytest.mark.integration

QUEUE = "tests_publish"


@pytest.fixture
def connection(redis_url: str, tmp_path: Path) -> Iterator[Connection]:
    celery = Celery("t")
    configure(celery, Settings(broker_url=redis_url, data_dir=tmp_path))
    with celery.connection_for_write() as conn:
        assert isinstance(conn.transport, RedisTransport)
        yield conn
    redis.Redis.from_url(redis_url).delete(QUEUE)


@pytest.fixture
def clients_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]
    init = redis.Redis.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        made[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    return made


def _received(connection: Connection, count: int) -> list[int]:
    with connection.SimpleQueue(QUEUE) as queue:
        got = []
        for _ in range(count):
            message = queue.get(timeout=5)
            got.append(message.payload["n"])
            message.ack()
        return sorted(got)


def test_publishes_reuse_one_client_and_all_arrive(
    connection: Connection, clients_made: list[int]
) -> None:
    with connection.SimpleQueue(QUEUE) as queue:
        queue.put({"n": 0})
        made = clients_made[0]
        for n in range(1, 20):
            queue.put({"n": n})
        assert clients_made[0] == made  # no client per publish
        assert queue.qsize() == 20
    assert _received(connection, 20) == list(range(20))


def test_a_new_pool_gets_a_new_client(connection: Connection, clients_made: list[int]) -> None:
    channel: Any = connection.default_channel
    with channel.conn_or_acquire() as first:
        pass
    channel._after_fork()  # what kombu runs in a forked child: the pools are dropped
    with channel.conn_or_acquire() as second:
        assert second is not first
        assert second.connection_pool is channel.pool
    with channel.conn_or_acquire() as third:
        assert third is second
    connection.SimpleQueue(QUEUE).put({"n": 1})
    assert _received(connection, 1) == [1]


def test_threads_publishing_on_one_channel_lose_nothing(connection: Connection) -> None:
    producer = connection.Producer()
    connection.SimpleQueue(QUEUE).close()  # declared

    def publish(start: int) -> None:
        for n in range(start, start + 50):
            producer.publish({"n": n}, routing_key=QUEUE, serializer="json")

    threads = [threading.Thread(target=publish, args=(i * 50,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _received(connection, 200) == list(range(200))


def test_a_forked_child_publishes_through_its_own_connections(connection: Connection) -> None:
    with connection.SimpleQueue(QUEUE) as queue:
        queue.put({"n": 0})  # the parent's client and pool are made
        pid = os.fork()
        if pid == 0:  # the child: the inherited pool notices the fork and opens its own
            code = 1
            try:
                queue.put({"n": 1})
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        queue.put({"n": 2})  # the parent's connections still work
    assert _received(connection, 3) == [0, 1, 2]
