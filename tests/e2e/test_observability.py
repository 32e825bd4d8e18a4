"""Metrics and logs of the distributed deployment, read after the scenarios ran through it."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from services.cli.scenarios import run_scenarios
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

    ingress = httpx.get(f"{distributed.api_url}/metrics", timeout=10)
    assert ingress.status_code == 200
    assert ingress.headers["content-type"].startswith("text/plain")
    text = ingress.text
    assert _value(text, "provely_operations", state="VERIFIED") >= 1
    assert _value(text, "provely_events_received_total", provider="stripe") >= 1
    assert "provely_events_deduplicated_total" in text
    assert "provely_events_refused_total" in text
    assert "/metrics" not in httpx.get(f"{distributed.api_url}/openapi.json").text

    observer = httpx.get(
        f"http://127.0.0.1:{distributed.metrics_ports['observer']}/metrics", timeout=10
    ).text
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

    # JSON logs: every line of the verdict worker about this operation carries its id.
    lines = (distributed.workdir / "logs" / "verdict.log").read_text().splitlines()
    records = []
    for line in lines:
        if line.startswith("{"):
            records.append(json.loads(line))
    mine = [r for r in records if r.get("operation_id") == op_id]
    assert mine, "no log line of the verdict worker names the operation"
    assert all({"timestamp", "level", "event"} <= r.keys() for r in mine)
    assert any(re.search(r"provely\.evaluate", str(r.get("task"))) for r in mine)
