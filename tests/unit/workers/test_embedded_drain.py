"""The embedded broker hands control back to a Celery worker's blocking loop within one polling
interval, even when the worker may not take another message (its prefetch window is full).

The worker's loop (``celery.worker.loops.synloop``) drains with a 2 s timeout and only between
drains runs what it deferred, up to celery 5.6 the acknowledgements of finished tasks among them:
a drain that waits out those 2 s while no message may be taken is what starved the embedded
system under concurrency (one message every two seconds)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport.sqlalchemy import Channel as KombuSqlaChannel

from shared.runtime.celery_app import (
    EMBEDDED_POLLING_INTERVAL_S,
    _transport_options,
    prepare_embedded_broker,
)

CELERY_DRAIN_TIMEOUT_S = 2.0
"""The timeout ``synloop`` passes to every ``drain_events``."""


@pytest.fixture
def broker_url(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "broker.db"
    url = f"sqla+sqlite:///{path}"
    prepare_embedded_broker(url)
    yield url
    cached = KombuSqlaChannel._engines.pop(f"sqlite:///{path}", None)
    if cached is not None:
        cached[0].dispose()


def test_a_drain_with_a_full_prefetch_window_returns_within_a_polling_interval(
    broker_url: str,
) -> None:
    queue = Queue("drain-test", Exchange("drain-test"), routing_key="drain-test")
    received: list[Any] = []
    with Connection(broker_url, transport_options=_transport_options(broker_url)) as conn:
        channel = conn.channel()
        producer = Producer(channel)
        for n in range(2):
            producer.publish(
                {"n": n}, exchange=queue.exchange, routing_key="drain-test", declare=[queue]
            )
        consumer = Consumer(channel, [queue], callbacks=[lambda _body, m: received.append(m)])
        consumer.qos(prefetch_count=1)
        consumer.consume()

        conn.drain_events(timeout=CELERY_DRAIN_TIMEOUT_S)
        assert [m.payload for m in received] == [{"n": 0}]

        # One message taken and not acknowledged: none may be taken until it is. The drain
        # returns to the caller (who would acknowledge) instead of waiting out its timeout.
        started = time.monotonic()
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=CELERY_DRAIN_TIMEOUT_S)
        waited = time.monotonic() - started
        assert waited < CELERY_DRAIN_TIMEOUT_S / 2, waited
        assert waited >= EMBEDDED_POLLING_INTERVAL_S * 0.9, waited  # it polled, it did not spin

        received[0].ack()
        conn.drain_events(timeout=CELERY_DRAIN_TIMEOUT_S)
        assert [m.payload for m in received] == [{"n": 0}, {"n": 1}]
        received[1].ack()
        channel.close()


def test_a_drain_with_a_message_waiting_delivers_it(broker_url: str) -> None:
    queue = Queue("drain-test", Exchange("drain-test"), routing_key="drain-test")
    received: list[Any] = []
    with Connection(broker_url, transport_options=_transport_options(broker_url)) as conn:
        channel = conn.channel()
        consumer = Consumer(channel, [queue], callbacks=[lambda body, _m: received.append(body)])
        consumer.consume()
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=CELERY_DRAIN_TIMEOUT_S)  # nothing there yet
        Producer(channel).publish(
            {"n": 7}, exchange=queue.exchange, routing_key="drain-test", declare=[queue]
        )
        conn.drain_events(timeout=CELERY_DRAIN_TIMEOUT_S)
        assert received == [{"n": 7}]
        channel.close()
