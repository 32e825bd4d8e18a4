"""The embedded broker (kombu's SQLAlchemy transport on SQLite) shared by processes that start
together: its tables and queues exist before they start, and a process that loses a race to
create one keeps working."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport.sqlalchemy import Channel as KombuSqlaChannel
from sqlalchemy import Engine, create_engine, event

from services.cli.embedded import EmbeddedSystem
from shared.runtime.celery_app import _transport_options, prepare_embedded_broker
from shared.runtime.celery_app import app as celery_app

QUEUES = {q.name for q in celery_app.conf.task_queues}
"""Every queue a worker consumes (``test_config`` pins the names)."""


def _url(path: Path) -> str:
    return f"sqla+sqlite:///{path}"


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as raw:  # closed: Python 3.13 warns of one left open
        return raw.execute(sql).fetchall()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "broker.db"
    yield path
    # kombu keeps one engine per URL for the life of the process; let this one go.
    cached = KombuSqlaChannel._engines.pop(f"sqlite:///{path}", None)
    if cached is not None:
        cached[0].dispose()


def test_up_creates_the_broker_tables_and_queues_before_the_services_start(
    tmp_path: Path, broker: Path
) -> None:
    EmbeddedSystem(data_dir=tmp_path).prepare()
    tables = {name for (name,) in _rows(broker, "SELECT name FROM sqlite_master")}
    assert {"kombu_queue", "kombu_message"} <= tables
    assert {name for (name,) in _rows(broker, "SELECT name FROM kombu_queue")} == QUEUES


def test_preparing_twice_changes_nothing_and_other_brokers_are_left_alone(broker: Path) -> None:
    prepare_embedded_broker(_url(broker))
    prepare_embedded_broker(_url(broker))
    assert sorted(_rows(broker, "SELECT name FROM kombu_queue")) == sorted((q,) for q in QUEUES)
    prepare_embedded_broker("redis://127.0.0.1:1/0")  # not an SQL broker: nothing to do


def test_a_queue_another_process_inserted_meanwhile_is_taken(broker: Path) -> None:
    url = _url(broker)
    with Connection(url, transport_options=_transport_options(url)) as connection:
        channel: Any = connection.channel()
        engine, _ = channel._open()
        raced: list[bool] = []

        @event.listens_for(engine, "before_cursor_execute")
        def other_process_first(*args: Any) -> None:
            # Between this process's look (no queue) and its insert, another one inserts it.
            if args[2].lstrip().startswith("INSERT INTO kombu_queue") and not raced:
                raced.append(True)
                with closing(sqlite3.connect(broker)) as raw, raw:  # committed, then closed
                    raw.execute("INSERT INTO kombu_queue (name) VALUES ('observe')")

        for n in range(3):  # the lost race leaves nothing behind for the next publish
            channel._put("observe", {"n": n})
        channel.close()
    assert raced == [True]
    assert _rows(broker, "SELECT count(*) FROM kombu_queue") == [(1,)]
    assert _rows(broker, "SELECT count(*) FROM kombu_message") == [(3,)]


def test_tables_another_process_created_meanwhile_are_taken(broker: Path) -> None:
    url = _url(broker)
    raced: list[bool] = []

    def other_process_first(*args: Any) -> None:
        # Between this process's look (no table) and its CREATE, another one creates them all.
        if args[2].lstrip().startswith("CREATE TABLE kombu_queue") and not raced:
            raced.append(True)
            other = create_engine(f"sqlite:///{broker}")
            try:
                from kombu.transport.sqlalchemy.models import metadata

                metadata.create_all(other)
            finally:
                other.dispose()

    event.listen(Engine, "before_cursor_execute", other_process_first)
    try:
        with Connection(url, transport_options=_transport_options(url)) as connection:
            queue = connection.SimpleQueue("observe")
            queue.put({"n": 1})
            assert queue.get(timeout=2).payload == {"n": 1}
            queue.close()
    finally:
        event.remove(Engine, "before_cursor_execute", other_process_first)
    assert raced == [True]


def _publish_at(url: str, start: float, results: Any) -> None:
    try:
        with Connection(url, transport_options=_transport_options(url)) as connection:
            channel: Any = connection.channel()
            while time.time() < start:
                pass
            channel._put("observe", {"pid": multiprocessing.current_process().pid})
            channel.close()
        results.put("ok")
    except Exception as exc:  # reported to the test, whatever it is
        results.put(f"{type(exc).__name__}: {exc}".splitlines()[0])


def test_processes_that_start_together_on_a_new_broker_all_publish(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    outcomes: list[str] = []
    for trial in range(5):
        path = tmp_path / f"broker-{trial}.db"
        results = context.Queue()
        start = time.time() + 0.5
        workers = [
            context.Process(target=_publish_at, args=(_url(path), start, results)) for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        outcomes += [results.get(timeout=5) for _ in workers]
        assert _rows(path, "SELECT count(*) FROM kombu_message") == [(4,)], outcomes
    assert outcomes == ["ok"] * 20


def test_the_embedded_children_get_no_shared_metrics_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four services cannot listen on one port: ``provely up`` would crash-loop on it."""
    monkeypatch.setenv("PROVELY_METRICS_PORT", "9100")
    env = EmbeddedSystem(data_dir=tmp_path).child_env()
    assert "PROVELY_METRICS_PORT" not in env
