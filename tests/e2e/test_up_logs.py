"""``provely up`` logs as ``PROVELY_LOG_JSON`` says, like every service: JSON lines when it is
unset (its documented default, the one ``provely config show`` prints), console lines when it
is false. (``up`` used to log text unless the variable was set.)"""

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


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _ingress_lines(tmp_path: Path, log_json: str | None) -> list[str]:
    data, logs = tmp_path / "data", tmp_path / "logs"
    data.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PROVELY_DATA_DIR"] = str(data)
    if log_json is not None:
        env["PROVELY_LOG_JSON"] = log_json
    out = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(
        provely_argv("up", "--port", str(port), "--log-dir", str(logs)),
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.2)
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        out.close()
    lines = [line for line in (logs / "ingress.log").read_text().splitlines() if line.strip()]
    assert lines, (tmp_path / "up.log").read_text()
    return lines


def test_up_logs_json_by_default(tmp_path: Path) -> None:
    lines = _ingress_lines(tmp_path, None)
    assert all(_is_json_object(line) for line in lines), lines[:5]


def test_up_logs_console_lines_when_told(tmp_path: Path) -> None:
    lines = _ingress_lines(tmp_path, "false")
    assert not any(_is_json_object(line) for line in lines), lines[:5]
