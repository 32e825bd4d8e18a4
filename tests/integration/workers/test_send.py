"""``send``: one message through Celery's message layer with its route kept per task name.

What it puts on the broker is what ``app.send_task`` put there (same queue, headers, body and
ETA for a countdown) on Redis and on the embedded SQLite broker, but for the fields of results
no Provely task keeps; a broker that cannot be reached still raises; a reconfigured app routes
by its own settings; and a send costs at most the Python calls this path takes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.exceptions import OperationalError
from kombu.transport.sqlalchemy import Channel as KombuSqlaChannel

from shared.runtime import celery_app
from shared.runtime.celery_app import (
    EVALUATE_TASK,
    OBSERVE_TASK,
    VERDICT_QUEUE,
    _transport_options,
    app,
    configure,
    prepare_embedded_broker,
    send,
)
from shared.runtime.celery_hooks import install_celery_hooks
from shared.runtime.settings import Settings, get_settings

pytestmark = pytest.mark.integration

KWARGS = {"operation_id": "op_send"}

RESULT_FIELDS = {"id", "root_id", "ignore_result"}
"""Headers that differ between the two paths: the task id (new each message), the root id (the
task id when there is no parent) and whether the result is ignored (every Provely task ignores
it, ``task_ignore_result``, whatever the header says)."""

SENT_AT = "provely_sent_at"
"""The header the publishing hook stamps with the send time (``shared.runtime.celery_hooks``)."""

SEND_CALLS_AT_MOST = 490
"""Python calls one warm ``send`` to Redis makes with the process's publishing hook connected
(474 measured; 454 without it); through ``send_task`` 557 and 577."""


@pytest.fixture(autouse=True)
def _publishing_hook() -> None:
    """Every process that sends has the hook connected (``provely serve``, the ingress); so do
    these tests, whichever test of the session connected it first, if any."""
    install_celery_hooks()


@pytest.fixture(params=["redis", "sqlite"])
def broker_url(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[str]:
    if request.param == "redis":
        url = redis_url
    else:
        url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
        prepare_embedded_broker(url)
    configure(app, Settings(broker_url=url, data_dir=tmp_path))
    try:
        _drained(url)
        yield url
    finally:
        _drained(url)
        configure(app, get_settings())
        cached = KombuSqlaChannel._engines.pop(f"sqlite:///{tmp_path / 'broker.db'}", None)
        if cached is not None:
            cached[0].dispose()


def _drained(url: str) -> list[Any]:
    """Every message waiting in the verdict queue, taken off it."""
    taken = []
    with Connection(url, transport_options=_transport_options(url)) as connection:
        channel: Any = connection.channel()
        try:
            while (message := channel.basic_get(VERDICT_QUEUE, no_ack=True)) is not None:
                taken.append(message)
        finally:
            if getattr(channel, "_session", None) is not None:
                channel._session.close()
            channel.close()
    return taken


def _eta(message: Any) -> datetime:
    return datetime.fromisoformat(message.headers["eta"])


@pytest.mark.parametrize("countdown_s", [0.0, 30.0])
def test_send_puts_the_message_send_task_did_on_the_broker(
    broker_url: str, countdown_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.send_task(
        EVALUATE_TASK,
        kwargs=KWARGS,
        countdown=countdown_s or None,
        argsrepr="()",
        kwargsrepr=repr(KWARGS),
        declare=[],
    )
    [before] = _drained(broker_url)

    def refused(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("send goes through the message layer, not send_task")

    monkeypatch.setattr(app, "send_task", refused)
    sent_at = datetime.now(UTC)
    send(EVALUATE_TASK, KWARGS, countdown_s=countdown_s)
    [after] = _drained(broker_url)

    assert after.body == before.body
    assert after.content_type == before.content_type == "application/json"
    assert after.delivery_info["routing_key"] == before.delivery_info["routing_key"]
    differ = RESULT_FIELDS | {"eta", SENT_AT}
    assert {k: v for k, v in after.headers.items() if k not in differ} == {
        k: v for k, v in before.headers.items() if k not in differ
    }
    assert before.headers[SENT_AT] <= after.headers[SENT_AT]  # the hook ran on both paths
    assert after.headers["root_id"] == after.headers["id"]
    assert after.properties["correlation_id"] == after.headers["id"]
    if countdown_s:
        due = sent_at + timedelta(seconds=countdown_s)
        assert timedelta(0) <= _eta(after) - due < timedelta(seconds=2)
        assert abs(_eta(after) - _eta(before)) < timedelta(seconds=5)
    else:
        assert after.headers["eta"] is before.headers["eta"] is None


def test_a_negative_countdown_is_due_at_once(broker_url: str) -> None:
    send(EVALUATE_TASK, KWARGS, countdown_s=-5.0)
    [message] = _drained(broker_url)
    assert message.headers["eta"] is None


def test_the_route_is_asked_once_per_task_name_and_again_after_configure(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(broker_url=redis_url, data_dir=tmp_path)
    configure(app, settings)
    try:
        asked: list[str] = []
        route = app.amqp.router.route

        def counting(options: Any, name: str, *args: Any) -> Any:
            asked.append(name)
            return route(options, name, *args)

        monkeypatch.setattr(app.amqp.router, "route", counting)
        for _ in range(3):
            send(EVALUATE_TASK, KWARGS)
        send(OBSERVE_TASK, {"operation_id": "op_send", "fence": 1})
        assert asked == [EVALUATE_TASK, OBSERVE_TASK]
        configure(app, settings)
        send(EVALUATE_TASK, KWARGS)
        assert asked == [EVALUATE_TASK, OBSERVE_TASK, EVALUATE_TASK]
    finally:
        _drained(redis_url)
        configure(app, get_settings())
    assert celery_app._routes == {}


def test_a_broker_that_cannot_be_reached_raises_after_the_publish_retries(
    tmp_path: Path,
) -> None:
    configure(app, Settings(broker_url="redis://127.0.0.1:1/0", data_dir=tmp_path))
    try:
        with pytest.raises(OperationalError):
            send(EVALUATE_TASK, KWARGS)
    finally:
        configure(app, get_settings())


def test_a_send_to_redis_stays_within_its_python_calls(redis_url: str, tmp_path: Path) -> None:
    configure(app, Settings(broker_url=redis_url, data_dir=tmp_path))
    try:
        for _ in range(5):
            send(EVALUATE_TASK, KWARGS)  # connection, pools and route made
        calls = [0]

        def count(_frame: Any, event: str, _arg: Any) -> None:
            if event in ("call", "c_call"):
                calls[0] += 1

        sys.setprofile(count)
        try:
            for _ in range(20):
                send(EVALUATE_TASK, KWARGS)
        finally:
            sys.setprofile(None)
        assert calls[0] / 20 <= SEND_CALLS_AT_MOST
    finally:
        _drained(redis_url)
        configure(app, get_settings())
