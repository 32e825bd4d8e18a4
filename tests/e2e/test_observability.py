"""Metrics and logs of the distributed deployment, read after the scenarios ran through it."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime

import httpx
import pytest

from services.cli.demo.scenarios.running import run_scenarios
from services.cli.spawn import free_port
from shared.trust.signatures import STRIPE
from tests.e2e.launcher import DistributedSystem

pytestmark = pytest.mark.e2e


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_and_logs_follow_the_operations(distributed: DistributedSystem) -> None:
    (outcome,) = asyncio.run(run_scenarios(["refund"], distributed))
    assert outcome.ok, outcome
    op_id = str((outcome.operation or {})["id"])

    # Not on the public API port: the figures are the operator's.
    assert httpx.get(f"{distributed.api_url}/metrics", timeout=10).status_code == 404
    assert "/metrics" not in httpx.get(f"{distributed.api_url}/openapi.json").text
    ports = distributed.metrics_ports
    ingress = httpx.get(f"http://127.0.0.1:{ports['ingress']}/metrics", timeout=10)
    assert ingress.status_code == 200
    assert ingress.headers["content-type"].startswith("text/plain")
    text = ingress.text
    assert _value(text, "provely_events_received_total", provider="stripe") >= 1
    assert "provely_events_deduplicated_total" in text
    assert "provely_events_refused_total" in text
    # HTTP metrics by route template, never the raw path (no operation id in a label).
    assert (
        _value(
            text,
            "provely_http_requests_total",
            handler="/v1/operations/{operation_id}",
            method="GET",
            status="200",
        )
        >= 1
    ), text
    assert op_id not in text
    # The database-wide gauge comes from one exporter only, not from each ingress.
    assert "provely_operations{" not in text
    database = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10).text
    assert _value(database, "provely_operations", state="VERIFIED") >= 1

    # The webhook's wake (``provely.observe_many``) may verify the operation before the first
    # scheduled ``provely.observe`` is due; that message still runs (and is counted) when its
    # countdown ends, so the observer's figures are read until it has.
    observer_url = f"http://127.0.0.1:{distributed.metrics_ports['observer']}/metrics"
    deadline = time.monotonic() + 60
    observer = httpx.get(observer_url, timeout=10).text
    while (
        _value(observer, "provely_tasks_total", task="provely.observe") < 1
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
        observer = httpx.get(observer_url, timeout=10).text
    assert _value(observer, "provely_observation_latency_seconds_count") >= 1
    assert _value(observer, "provely_queue_lag_seconds_count", queue="observe") >= 1
    assert _value(observer, "provely_tasks_total", task="provely.observe") >= 1

    verdict = httpx.get(
        f"http://127.0.0.1:{distributed.metrics_ports['verdict']}/metrics", timeout=10
    ).text
    assert (
        _value(verdict, "provely_verdicts_total", verdict="VERIFIED", reason="all_conditions_hold")
        >= 1
    )
    assert _value(verdict, "provely_queue_lag_seconds_count", queue="verdict") >= 1
    assert _value(verdict, "provely_operation_transitions_total", state="VERIFIED") >= 1
    assert _value(text, "provely_operation_transitions_total", state="OBSERVING") >= 1

    # JSON logs: every line of every service is one JSON object (no banner, no plain text),
    # and every line of the verdict worker about this operation carries its id.
    for service in ("ingress", "observer", "verdict", "sweeper", "metrics"):
        for number, line in enumerate(
            (distributed.workdir / "logs" / f"{service}.log").read_text().splitlines(), 1
        ):
            try:
                assert isinstance(json.loads(line), dict)
            except (ValueError, AssertionError):
                pytest.fail(f"{service}.log line {number} is not a JSON object: {line!r}")
    lines = (distributed.workdir / "logs" / "verdict.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    mine = [r for r in records if r.get("operation_id") == op_id]
    assert mine, "no log line of the verdict worker names the operation"
    assert all({"timestamp", "level", "event"} <= r.keys() for r in mine)
    assert any(re.search(r"provely\.evaluate", str(r.get("task"))) for r in mine)

    # The request id of the action report travels with the work it caused: the observer's
    # reading (the request's observe message) and the verdict worker's decision (sent by it).
    def records(service: str) -> list[dict[str, object]]:
        text = (distributed.workdir / "logs" / f"{service}.log").read_text()
        return [json.loads(line) for line in text.splitlines()]

    reports = [
        r
        for r in records("ingress")
        if r.get("event") == "http.request" and r.get("path") == f"/v1/operations/{op_id}/action"
    ]
    assert reports
    assert all(r["operation_id"] == op_id for r in reports)
    request_ids = {r["request_id"] for r in reports}

    def caused(service: str) -> list[dict[str, object]]:
        """The service's lines for the operation that carry an action report's request id (the
        action's observe message is due a second after the report: it may run after the
        scenario ended, when a webhook already settled the operation)."""
        deadline = time.monotonic() + 20
        while True:
            found = [
                r
                for r in records(service)
                if r.get("operation_id") == op_id and r.get("request_id") in request_ids
            ]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    observed = caused("observer")
    assert observed, f"no observer line carries an action report's request id {request_ids}"
    # When that reading was the one that decided (not one that found the operation settled by
    # a webhook first), the evaluate it sent carries the request id on to the verdict worker.
    if any("succeeded" in str(r["event"]) and "'observed'" in str(r["event"]) for r in observed):
        assert caused("verdict"), f"no verdict line carries the request id {request_ids}"


def test_the_correlators_count_of_events_older_than_their_operation_is_served(
    distributed: DistributedSystem,
) -> None:
    """``before_operation`` is counted where the event is linked (the observer's correlator,
    or the sweeper after its grace), and read on that service's metrics port (#33)."""
    ws, key = distributed.create_workspace("older-events")
    secret = "whsec_older"
    distributed.connect_stripe(
        ws, webhook_secret=secret, api_key="sk_test_x", base_url=f"http://127.0.0.1:{free_port()}"
    )
    headers = {"Authorization": f"Bearer {key}"}
    api = distributed.api_url
    op = httpx.post(
        f"{api}/v1/operations",
        json={
            "contract": "stripe.refund.succeeded",
            "input": {"charge": "ch_o", "amount": 1000, "currency": "eur"},
        },
        headers=headers,
        timeout=10,
    ).json()
    refund = {"id": f"re_{op['id']}", "object": "refund"}
    report = httpx.post(
        f"{api}/v1/operations/{op['id']}/action",
        json={"phase": "result", "result": refund},
        headers=headers,
        timeout=10,
    )
    assert report.status_code == 200, report.text
    ports = distributed.metrics_ports

    def counted() -> float:
        return sum(
            _value(
                httpx.get(f"http://127.0.0.1:{ports[service]}/metrics", timeout=10).text,
                "provely_events_ignored_total",
                reason="before_operation",
            )
            for service in ("observer", "sweeper")
        )

    before = counted()
    old = int(datetime.fromisoformat(op["created_at"]).timestamp()) - 120
    body = json.dumps(
        {
            "id": f"evt_old_{op['id']}",
            "object": "event",
            "type": "refund.updated",
            "created": old,
            "api_version": "2026-08-26",
            "data": {"object": {**refund, "status": "succeeded"}},
        }
    ).encode()
    signed = STRIPE.sign(body=body, secrets=[secret], timestamp=int(time.time()))
    signed["Content-Type"] = "application/json"
    delivered = httpx.post(f"{api}/v1/events/stripe/{ws}", content=body, headers=signed, timeout=10)
    assert delivered.status_code == 200, delivered.text
    deadline = time.monotonic() + 60
    while counted() < before + 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert counted() == before + 1
