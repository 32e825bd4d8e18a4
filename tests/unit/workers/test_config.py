"""The Celery app's delivery guarantees, broker options, readback auth and sweeper backoff."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery import Celery

from services.observer.connections import auth_headers
from services.verdict.sweeper import _resend_now
from shared.runtime.celery_app import (
    EVALUATE_TASK,
    OBSERVE_MANY_TASK,
    OBSERVE_TASK,
    EmbeddedSqlaTransport,
    app,
    configure,
)
from shared.runtime.settings import Settings


def test_delivery_is_late_acked_json_only_and_one_message_at_a_time() -> None:
    conf = app.conf
    assert conf.task_serializer == "json"
    assert list(conf.accept_content) == ["json"]
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_ignore_result is True
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is True
    assert conf.task_routes[OBSERVE_TASK] == {"queue": "observe"}
    assert conf.task_routes[OBSERVE_MANY_TASK] == {"queue": "observe"}
    assert conf.task_routes[EVALUATE_TASK] == {"queue": "verdict"}
    assert conf.task_routes["provely.correlate"] == {"queue": "correlate"}
    assert {q.name for q in conf.task_queues} == {"observe", "correlate", "verdict"}


def test_redis_broker_gets_a_visibility_timeout(tmp_path: Path) -> None:
    celery = Celery("t")
    configure(celery, Settings(broker_url="redis://127.0.0.1:6379/3", data_dir=tmp_path))
    assert celery.conf.broker_url == "redis://127.0.0.1:6379/3"
    assert celery.conf.broker_transport_options["visibility_timeout"] >= 600
    assert celery.conf.worker_enable_remote_control is True


def test_the_embedded_broker_polls_fast_and_keeps_the_option_from_sqlalchemy(
    tmp_path: Path,
) -> None:
    celery = Celery("t")
    configure(celery, Settings(data_dir=tmp_path))
    assert celery.conf.broker_url == f"sqla+sqlite:///{(tmp_path / 'broker.db').resolve()}"
    assert celery.conf.broker_transport_options["polling_interval"] <= 0.2
    assert celery.conf.worker_enable_remote_control is False
    with celery.connection_for_write() as conn:
        assert isinstance(conn.transport, EmbeddedSqlaTransport)
        queue = conn.SimpleQueue("unit")
        queue.put({"n": 1})
        assert queue.get(timeout=2).payload == {"n": 1}
        queue.close()


@pytest.mark.parametrize(
    ("scheme", "header", "expected"),
    [
        ("bearer", None, {"Authorization": "Bearer sk_1"}),
        ("basic", None, {"Authorization": "Basic " + base64.b64encode(b"sk_1:").decode()}),
        ("header", "X-Api-Key", {"X-Api-Key": "sk_1"}),
        ("none", None, {}),
    ],
)
def test_the_connection_key_is_presented_as_its_scheme_says(
    scheme: str, header: str | None, expected: dict[str, str]
) -> None:
    assert auth_headers(scheme, "sk_1", header) == expected


def test_no_key_no_header_and_unknown_schemes_are_refused() -> None:
    assert auth_headers("bearer", None) == {}
    with pytest.raises(ValueError, match="header name"):
        auth_headers("header", "sk_1", None)
    with pytest.raises(ValueError, match="unknown"):
        auth_headers("digest", "sk_1")


def test_overdue_resends_back_off_exponentially() -> None:
    due = datetime(2026, 1, 1, tzinfo=UTC)
    s = timedelta(seconds=1)
    assert _resend_now(due, None, due + 10 * s)
    assert _resend_now(due, due, due + 10 * s)  # sent when due, overdue now
    sent = due + 10 * s  # last sent 10 s after it was due
    assert not _resend_now(due, sent, sent + 9 * s)
    assert _resend_now(due, sent, sent + 10 * s)


def test_the_observer_worker_serves_every_observer_task() -> None:
    import services.observer.tasks  # noqa: F401  (what the worker loads through ``include``)

    assert "services.observer.tasks" in app.conf.include
    assert {OBSERVE_TASK, OBSERVE_MANY_TASK, "provely.correlate"} <= set(app.tasks)
