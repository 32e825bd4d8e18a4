"""The distributed launcher of the end-to-end tests: every service a separate OS process.

PostgreSQL (the session's fresh database) is the record and Redis (a random db index) the
broker; the services are the production commands — ``provely serve ingress`` (uvicorn),
``provely serve observer``, ``provely serve verdict``, ``provely serve sweeper`` — and each
Stripe sandbox is a ``provely sandbox stripe`` process. It implements the scenario engine's
``System`` so the demo's scenarios run unchanged on it (one engine, two launchers).
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet

from services.cli.scenarios import DEFAULT_SANDBOX_OPTIONS, Sandbox, write_short_timing_skill
from services.cli.up import ChildSpec, Supervisor, free_port, provely_argv


class DistributedSystem:
    def __init__(self, *, postgres_url: str, redis_url: str, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.metrics_ports = {"observer": free_port(), "verdict": free_port()}
        self.env: dict[str, str] = {}
        self._postgres_url = postgres_url
        self._redis_url = redis_url
        self._sandboxes: list[subprocess.Popen[bytes]] = []
        self.supervisor: Supervisor | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        import os

        env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
        env.update(write_short_timing_skill(self.workdir / "demo-skill"))
        env.update(
            {
                "PROVELY_DATABASE_URL": self._postgres_url,
                "PROVELY_BROKER_URL": self._redis_url,
                "PROVELY_REDIS_URL": self._redis_url,
                "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
                "PROVELY_DATA_DIR": str(self.workdir / "data"),
                "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.5",
                "PROVELY_SWEEPER_GRACE_SECONDS": "2",
                "PROVELY_JITTER_RATIO": "0",
                "PROVELY_LOG_JSON": "true",
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def start(self) -> None:
        self.env = self._environment()
        self.cli(["db", "upgrade"])
        specs = [
            ChildSpec(
                "ingress",
                [
                    "serve",
                    "ingress",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                ],
            ),
            ChildSpec(
                "observer",
                [
                    "serve",
                    "observer",
                    "--concurrency",
                    "2",
                    "--metrics-port",
                    str(self.metrics_ports["observer"]),
                ],
            ),
            ChildSpec(
                "verdict",
                [
                    "serve",
                    "verdict",
                    "--concurrency",
                    "1",
                    "--metrics-port",
                    str(self.metrics_ports["verdict"]),
                ],
            ),
            ChildSpec("sweeper", ["serve", "sweeper"]),
        ]
        self.supervisor = Supervisor(
            specs, env=self.env, log_dir=self.workdir / "logs", echo=lambda _line: None
        )
        self.supervisor.start()
        deadline = time.monotonic() + 60
        while True:
            self.supervisor.poll()
            try:
                if httpx.get(f"{self.api_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the ingress did not start:\n" + self.log_tail())
            time.sleep(0.1)

    def wait_ready(self) -> None:
        """``start`` already waited for the API."""

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        for process in self._sandboxes:
            process.terminate()
        for process in self._sandboxes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    def cli(self, args: Any) -> str:
        run = subprocess.run(
            provely_argv(*args), env=self.env, capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            raise RuntimeError(f"provely {' '.join(args[:2])} failed: {run.stderr.strip()}")
        return run.stdout

    def create_workspace(self, name: str) -> tuple[str, str]:
        created = json.loads(self.cli(["workspace", "create", name]))
        return created["workspace_id"], created["api_key"]

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        self.cli(
            [
                "connection",
                "set",
                "--workspace",
                workspace_id,
                "--provider",
                "stripe",
                "--webhook-secret",
                webhook_secret,
                "--api-key",
                api_key,
                "--base-url",
                base_url,
            ]
        )

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")
        self.cli(
            [
                "connection",
                "set",
                "--workspace",
                workspace_id,
                "--provider",
                "http",
                "--webhook-secret",
                secret,
                "--base-url",
                base_url,
            ]
        )

    def new_sandbox(self) -> Sandbox:
        port = free_port()
        with (self.workdir / "logs" / f"sandbox-{port}.log").open("ab") as log:
            process = subprocess.Popen(
                provely_argv(
                    "sandbox",
                    "stripe",
                    "--port",
                    str(port),
                    "--settle-ms",
                    str(DEFAULT_SANDBOX_OPTIONS["settle_ms"]),
                ),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._sandboxes.append(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the sandbox did not start:\n" + self.log_tail()) from None
                time.sleep(0.05)
        return Sandbox(base_url=f"http://127.0.0.1:{port}")

    def log_tail(self, lines: int = 30) -> str:
        chunks = []
        for path in sorted((self.workdir / "logs").glob("*.log")):
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)
