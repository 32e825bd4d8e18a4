"""What the ingress records of each request: its id (echoed, carried into the Celery messages it
sends), one structured access line with the query's secrets redacted, and HTTP metrics by route
template — for the webhook intake as for the agent API. A real app, a real SQLite database and
a real broker (kombu's SQLAlchemy transport in a file)."""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY, generate_latest
from sqlalchemy import Engine

from shared.runtime.celery_hooks import REQUEST_ID_HEADER
from shared.runtime.logs import configure_logging
from tests.integration.api.conftest import Api, build_api

pytestmark = pytest.mark.integration

REFUND = "stripe.refund.succeeded"
INPUT = {"charge": "ch_123", "amount": 500, "currency": "usd"}


@pytest.fixture
def sqlite_api(sqlite_engine: Engine, sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    built = build_api(sqlite_engine, sqlite_url, "sqlite", tmp_path)
    with built.client:
        yield built
    built.app.state.engine.dispose()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging(level="INFO", json=True, stream=stream)
    try:
        yield stream
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()


def _records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def _access(stream: io.StringIO) -> list[dict[str, Any]]:
    return [r for r in _records(stream) if r.get("event") == "http.request"]


def test_every_response_echoes_the_request_id(sqlite_api: Api) -> None:
    client = sqlite_api.client
    answers = [
        client.get("/healthz"),
        client.get("/v1/operations"),  # 401 problem
        client.get("/no/such/address"),  # 404
        client.post("/v1/events/stripe/ws_nope", content=b"{}"),  # the intake's own 404
        client.get("/v1/events/stripe/ws_nope"),  # the intake's 405
        client.post("/v1/operations", json={"contract": 5}, headers=sqlite_api.a.headers()),
    ]
    ids = [answer.headers.get("x-request-id") for answer in answers]
    assert all(ids), [(a.status_code, a.headers) for a in answers]
    assert len(set(ids)) == len(ids)  # one of its own for each request
    mine = client.get("/healthz", headers={"X-Request-Id": "checkout-7.retry:2"})
    assert mine.headers["x-request-id"] == "checkout-7.retry:2"
    # An id that is not a sane token (spaces, quotes, too long) is replaced, never echoed.
    for bad in ('a b"c', "x" * 129):
        replaced = client.get("/healthz", headers={"X-Request-Id": bad})
        assert replaced.headers["x-request-id"] not in (bad, "")


def test_access_lines_are_fields_with_query_secrets_redacted(
    sqlite_api: Api, log_lines: io.StringIO
) -> None:
    client = sqlite_api.client
    client.get("/v1/operations?api_key=pv_leaked_1&limit=5&token=tok_leaked_2")
    client.post("/v1/events/stripe/ws_nope?key=whsec_leaked_3", content=b"{}")
    # What the server wrote (the test's own HTTP client logs the URL it called, as httpx does).
    server = [r for r in _records(log_lines) if r.get("logger") != "httpx"]
    text = json.dumps(server)
    for secret in ("pv_leaked_1", "tok_leaked_2", "whsec_leaked_3"):
        assert secret not in text
    api_line, intake_line = _access(log_lines)
    assert api_line["method"] == "GET"
    assert api_line["path"] == "/v1/operations"
    assert api_line["status"] == 401
    assert isinstance(api_line["duration_ms"], float)
    assert api_line["duration_ms"] >= 0
    assert api_line["query"] == "api_key=***&limit=5&token=***"
    assert api_line["request_id"]
    assert intake_line["path"] == "/v1/events/stripe/ws_nope"
    assert intake_line["status"] == 404
    assert intake_line["query"] == "key=***"


def test_the_request_id_travels_with_the_messages_the_request_sends(
    sqlite_api: Api, log_lines: io.StringIO, tmp_path: Path
) -> None:
    client = sqlite_api.client
    created = client.post(
        "/v1/operations", json={"contract": REFUND, "input": INPUT}, headers=sqlite_api.a.headers()
    )
    assert created.status_code == 201, created.text
    op_id = created.json()["id"]
    report = client.post(
        f"/v1/operations/{op_id}/action",
        json={"phase": "result", "http_status": 200, "result": {"id": "re_1", "object": "refund"}},
        headers={**sqlite_api.a.headers(), "X-Request-Id": "agent-run-42"},
    )
    assert report.status_code == 200, report.text
    # The action's access line names the operation as a field.
    (line,) = [r for r in _access(log_lines) if r["path"].endswith("/action")]
    assert line["operation_id"] == op_id
    assert line["request_id"] == "agent-run-42"
    # The observe message it sent, as the broker stores it, carries the request id.
    with sqlite3.connect(tmp_path / "broker.db") as db:
        payloads = [row[0] for row in db.execute("SELECT payload FROM kombu_message")]
    headers = [json.loads(p)["headers"] for p in payloads]
    observe = [
        h for h in headers if h.get("task") == "provely.observe" and op_id in h["kwargsrepr"]
    ]
    assert observe, headers
    assert all(h[REQUEST_ID_HEADER] == "agent-run-42" for h in observe)


def _sample(name: str, **labels: str) -> float:
    total = 0.0
    for line in generate_latest(REGISTRY).decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_http_metrics_by_route_template_and_every_refusal_counted(sqlite_api: Api) -> None:
    client = sqlite_api.client
    before = {
        "template": _sample(
            "provely_http_requests_total",
            handler="/v1/operations/{operation_id}",
            method="GET",
            status="404",
        ),
        "events": _sample(
            "provely_http_requests_total",
            handler="/v1/events/{provider}/{workspace}",
            method="POST",
            status="404",
        ),
        "unknown_endpoint": _sample(
            "provely_events_refused_total", provider="stripe", reason="unknown_endpoint"
        ),
        "made_up": _sample(
            "provely_events_refused_total", provider="unknown", reason="unknown_endpoint"
        ),
        "method": _sample(
            "provely_events_refused_total", provider="stripe", reason="method_not_allowed"
        ),
    }
    client.get("/v1/operations/op_doesnotexist", headers=sqlite_api.a.headers())
    client.post("/v1/events/stripe/ws_nope", content=b"{}")
    client.post("/v1/events/madeup/ws_nope", content=b"{}")
    client.get("/v1/events/stripe/ws_nope")
    assert (
        _sample(
            "provely_http_requests_total",
            handler="/v1/operations/{operation_id}",
            method="GET",
            status="404",
        )
        == before["template"] + 1
    )
    text = generate_latest(REGISTRY).decode()
    assert "op_doesnotexist" not in text  # a template, never the raw path
    assert "madeup" not in text  # a provider no skill has is "unknown"
    assert (
        _sample(
            "provely_http_requests_total",
            handler="/v1/events/{provider}/{workspace}",
            method="POST",
            status="404",
        )
        == before["events"] + 2
    )
    assert (
        _sample("provely_events_refused_total", provider="stripe", reason="unknown_endpoint")
        == before["unknown_endpoint"] + 1
    )
    assert (
        _sample("provely_events_refused_total", provider="unknown", reason="unknown_endpoint")
        == before["made_up"] + 1
    )
    assert (
        _sample("provely_events_refused_total", provider="stripe", reason="method_not_allowed")
        == before["method"] + 1
    )
    assert sqlite_api.client.get("/metrics").status_code == 404  # not on the API's port
