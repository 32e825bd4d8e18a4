"""``provely up`` serves the whole system's metrics on ``PROVELY_METRICS_PORT``, as the
distributed services do (#33): before, it dropped the setting, so
``provely_events_refused_total{reason}`` could not be read on the embedded system."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from services.cli.spawn import free_port, provely_argv
from shared.trust.signatures import STRIPE

pytestmark = pytest.mark.e2e


def _scrape(url: str, wanted: str, process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 90
    text = ""
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-4000:]
        try:
            text = httpx.get(url, timeout=2).text
            if wanted in text:
                return text
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{wanted!r} not served; last scrape:\n{text[-3000:]}")


def test_up_serves_the_systems_metrics_on_the_metrics_port(tmp_path: Path) -> None:
    api_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update(
        {
            "PROVELY_DATA_DIR": str(tmp_path / "data"),
            "PROVELY_METRICS_PORT": str(metrics_port),
            "PROVELY_JITTER_RATIO": "0",
        }
    )
    log = tmp_path / "up.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            provely_argv("up", "--port", str(api_port)),
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        api = f"http://127.0.0.1:{api_port}"
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-4000:]
            try:
                if httpx.get(f"{api}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        # A refusal counted by the ingress child, read on the system's one metrics port.
        refused = httpx.post(f"{api}/v1/events/stripe/ws_nobody", content=b"{}", timeout=5)
        assert refused.status_code == 404
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        text = _scrape(url, 'reason="unknown_endpoint"', process, log)
        assert "provely_events_refused_total" in text
        assert "provely_operations" in text  # the database-wide gauges, from the same port
        assert httpx.get(f"{api}/metrics", timeout=5).status_code == 404  # never the API's port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _cli(env: dict[str, str], *args: str) -> str:
    run = subprocess.run(provely_argv(*args), env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_up_serves_the_correlators_count_of_events_older_than_their_operation(
    tmp_path: Path,
) -> None:
    """``before_operation`` is known only where an event is linked (the observer's correlator,
    a child of ``up``): its count reaches the system's metrics port too (#33)."""
    api_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update(
        {
            "PROVELY_DATA_DIR": str(tmp_path / "data"),
            "PROVELY_METRICS_PORT": str(metrics_port),
            "PROVELY_JITTER_RATIO": "0",
        }
    )
    log = tmp_path / "up.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            provely_argv("up", "--port", str(api_port)),
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        api = f"http://127.0.0.1:{api_port}"
        _scrape(f"{api}/healthz", "", process, log)
        created = json.loads(_cli(env, "workspace", "create", "metrics"))
        ws, key = created["workspace_id"], created["api_key"]
        secret = "whsec_metrics"
        _cli(
            env, "connection", "set", "--workspace", ws, "--provider", "stripe",
            "--webhook-secret", secret, "--api-key", "sk_test_x",
            "--base-url", f"http://127.0.0.1:{free_port()}",
        )  # fmt: skip
        headers = {"Authorization": f"Bearer {key}"}
        op = httpx.post(
            f"{api}/v1/operations",
            json={
                "contract": "stripe.refund.succeeded",
                "input": {"charge": "ch_m", "amount": 1000, "currency": "eur"},
            },
            headers=headers,
            timeout=10,
        ).json()
        report = httpx.post(
            f"{api}/v1/operations/{op['id']}/action",
            json={"phase": "result", "result": {"id": "re_m", "object": "refund"}},
            headers=headers,
            timeout=10,
        )
        assert report.status_code == 200, report.text
        old = int(datetime.fromisoformat(op["created_at"]).timestamp()) - 120
        body = json.dumps(
            {
                "id": "evt_m_old",
                "object": "event",
                "type": "refund.updated",
                "created": old,
                "api_version": "2026-08-26",
                "data": {"object": {"id": "re_m", "object": "refund", "status": "succeeded"}},
            }
        ).encode()
        signed = STRIPE.sign(body=body, secrets=[secret], timestamp=int(time.time()))
        signed["Content-Type"] = "application/json"
        delivered = httpx.post(
            f"{api}/v1/events/stripe/{ws}", content=body, headers=signed, timeout=10
        )
        assert delivered.status_code == 200, delivered.text
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        text = _scrape(url, 'reason="before_operation"', process, log)
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("provely_events_ignored_total") and "before_operation" in line
        )
        assert float(line.rsplit(" ", 1)[1]) == 1.0, line
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
