"""A service that cannot start says why as a JSON log line: its streams carry nothing else."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from services.cli.spawn import provely_argv


def test_a_metrics_port_in_use_is_said_as_a_json_line_and_exits_2(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PROVELY_DATA_DIR"] = str(tmp_path / "data")
    try:
        run = subprocess.run(
            provely_argv("serve", "sweeper", "--metrics-port", str(port)),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        taken.close()
    assert run.returncode == 2
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line
    last = json.loads(lines[-1])
    assert last["level"] == "error"
    assert last["port"] == port
    assert "cannot serve metrics" in last["event"]
