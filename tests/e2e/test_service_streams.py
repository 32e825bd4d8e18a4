"""What a service writes on its streams: one JSON object per line, nothing else (no Celery
banner, no plain-text warnings, no shutdown sentence), from start to a graceful stop; and its
metrics endpoint listens on loopback unless told otherwise, never on the API's port.

Real processes (``provely serve …``) on the embedded default (SQLite, kombu's SQLAlchemy
broker): nothing here needs a server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from services.cli.spawn import free_port, provely_argv

pytestmark = pytest.mark.e2e


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update({"PROVELY_DATA_DIR": str(data_dir), "PROVELY_LOG_JSON": "true"})
    return env


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp spells them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "the service exited"
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> tuple[str, str]:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    return out.decode(), err.decode()


def _assert_json_lines(name: str, text: str) -> list[dict[str, object]]:
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"{name} line {number} is not JSON: {line!r}")
        assert isinstance(record, dict), line
        assert {"timestamp", "level", "event"} <= record.keys(), line
        records.append(record)
    return records


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    subprocess.run(
        provely_argv("db", "upgrade"), env=_env(directory), check=True, capture_output=True
    )
    return directory


def test_a_worker_writes_only_json_lines_and_serves_metrics_on_loopback(data_dir: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        provely_argv("serve", "verdict", "--concurrency", "1", "--metrics-port", str(port)),
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait(f"http://127.0.0.1:{port}/metrics", process)
        assert _listening(port) == {"0100007F"}  # 127.0.0.1 only
        deadline = time.monotonic() + 30
        while not Path(data_dir / "broker.db").exists():  # the worker is consuming
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        out, err = _stop(process)
    assert process.returncode == 0, err[-3000:]
    _assert_json_lines("stdout", out)
    records = _assert_json_lines("stderr", err)
    events = [str(r["event"]) for r in records]
    assert "worker.starting" in events
    assert any("ready" in e for e in events), events  # Celery's own lines, as JSON
    assert any("shutdown" in e.lower() for e in events), events  # its shutdown sentence too
    assert "worker.stopped" in events


def test_the_ingress_writes_only_json_lines_and_keeps_metrics_off_the_api(
    data_dir: Path,
) -> None:
    api, metrics = free_port(), free_port()
    process = subprocess.Popen(
        provely_argv(
            "serve", "ingress", "--host", "127.0.0.1", "--port", str(api),
            "--metrics-port", str(metrics),
        ),
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait(f"http://127.0.0.1:{api}/healthz", process)
        # An undeclared query parameter is refused (#33); its value never reaches a log.
        assert httpx.get(f"http://127.0.0.1:{api}/healthz?token=t0k3n").status_code == 422
        assert httpx.get(f"http://127.0.0.1:{api}/metrics").status_code == 404
        scraped = httpx.get(f"http://127.0.0.1:{metrics}/metrics")
        assert 'provely_http_requests_total{handler="/healthz"' in scraped.text
        assert _listening(metrics) == {"0100007F"}
    finally:
        out, err = _stop(process)
    assert "t0k3n" not in out + err
    _assert_json_lines("stdout", out)
    records = _assert_json_lines("stderr", err)
    (access,) = [r for r in records if r["event"] == "http.request" and "query" in r]
    assert access["method"] == "GET"
    assert access["path"] == "/healthz"
    assert access["status"] == 422
    assert access["query"] == "token=***"
    assert isinstance(access["duration_ms"], float)
    assert access["request_id"]
