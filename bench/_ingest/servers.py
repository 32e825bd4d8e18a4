"""The servers a run measures: uvicorn processes on loopback ports, started and waited for."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["free_port", "start_server", "uvicorn_argv"]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(argv, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited: {' '.join(argv)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("server did not start")


def uvicorn_argv(
    target: str, port: int, *, factory: bool, app_dir: str | None, workers: int = 1
) -> list[str]:
    argv = [sys.executable, "-m", "uvicorn", target]
    if factory:
        argv.append("--factory")
    if app_dir:
        argv += ["--app-dir", app_dir]
    return [
        *argv,
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
