"""``provely up`` serves the whole system's metrics on ``PROVELY_METRICS_PORT``, as the
distributed services do (#33): before, it dropped the setting, so
``provely_events_refused_total{reason}`` could not be read on the embedded system."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from services.cli.spawn import free_port, provely_argv

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
