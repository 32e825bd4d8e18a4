"""``provely up``: the embedded system supervises its services, stops cleanly on Ctrl-C, and an
open operation survives the restart and carries on to its verdict."""

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
from services.sandbox.runner import run_sandbox

pytestmark = pytest.mark.e2e


def _children(pid: int) -> dict[str, int]:
    """The ``provely serve <service>`` children of ``pid``, by service."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid != pid or b"serve" not in cmdline:
            continue
        service = cmdline[cmdline.index(b"serve") + 1].decode()
        found[service] = int(entry.name)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and " Z " not in stat.read_text()


class Up:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
        self.env.update(
            {
                "PROVELY_DATA_DIR": str(data_dir),
                "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.5",
                "PROVELY_SWEEPER_GRACE_SECONDS": "2",
                "PROVELY_JITTER_RATIO": "0",
            }
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.data_dir / "up.log").open("ab")
        self.process = subprocess.Popen(
            provely_argv(
                "up",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                "--log-dir",
                str(self.data_dir / "logs"),
            ),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.log()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.2)
        while len(_children(self.process.pid)) < 4:  # the workers and the sweeper too
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return (self.data_dir / "up.log").read_text(errors="replace")[-4000:]

    def cli(self, *args: str) -> str:
        run = subprocess.run(
            provely_argv(*args), env=self.env, capture_output=True, text=True, check=False
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    def interrupt(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


def _wait(client: httpx.Client, op_id: str, until: object, timeout: float = 40) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        op = client.get(f"/v1/operations/{op_id}").json()
        if until(op):  # type: ignore[operator]
            return op  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, op
        time.sleep(0.2)


def test_up_supervises_stops_cleanly_and_resumes_open_operations(tmp_path: Path) -> None:
    up = Up(tmp_path / "data", free_port())
    up.data_dir.mkdir()
    with run_sandbox(settle_ms=600_000) as sandbox:
        up.start()
        assert up.process is not None
        stripe = httpx.Client(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {sandbox.api_key}"}
        )
        api = httpx.Client(base_url=up.url)
        try:
            created = json.loads(up.cli("workspace", "create", "up-test"))
            ws, key = created["workspace_id"], created["api_key"]
            api.headers["Authorization"] = f"Bearer {key}"
            endpoint = stripe.post(
                "/v1/webhook_endpoints",
                data={"url": f"{up.url}/v1/events/stripe/{ws}", "enabled_events[]": "*"},
            ).json()
            up.cli(
                "connection", "set", "--workspace", ws, "--provider", "stripe",
                "--webhook-secret", endpoint["secret"], "--api-key", sandbox.api_key,
                "--base-url", sandbox.base_url,
            )  # fmt: skip
            charge = stripe.post("/v1/charges", data={"amount": 5000, "currency": "usd"}).json()
            op = api.post(
                "/v1/operations",
                json={
                    "contract": "stripe.refund.succeeded",
                    "input": {"charge": charge["id"], "amount": 2000, "currency": "usd"},
                },
            ).json()
            refund = stripe.post(
                "/v1/refunds",
                data={"charge": charge["id"], "amount": 2000},
                headers={"Idempotency-Key": op["id"]},
            ).json()
            report = api.post(
                f"/v1/operations/{op['id']}/action",
                json={"phase": "result", "result": refund, "http_status": 200},
            )
            assert report.status_code == 200, report.text
            _wait(api, op["id"], lambda o: o["reason"] == "still_transitional")

            # A crashed service is restarted by the supervisor.
            before = _children(up.process.pid)
            os.kill(before["observer"], signal.SIGKILL)
            deadline = time.monotonic() + 30
            while _children(up.process.pid).get("observer") in (None, before["observer"]):
                assert time.monotonic() < deadline, up.log()
                time.sleep(0.2)

            # Ctrl-C stops every service, gracefully, and nothing is left behind.
            children = _children(up.process.pid)
            assert up.interrupt() == 0, up.log()
            assert not any(_alive(pid) for pid in children.values()), children
            assert "stopped" in up.log()
        finally:
            if up.process is not None and up.process.poll() is None:
                up.process.kill()
            api.close()
            stripe.close()

        # While it is down, the refund settles; the operation carries on after the restart.
        sandbox.control.advance(600)
        up.start()
        api = httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {key}"})
        try:
            still = api.get(f"/v1/operations/{op['id']}").json()
            assert still["final"] is False
            final = _wait(api, op["id"], lambda o: o["final"], timeout=60)
            assert final["verdict"] == "VERIFIED", final
            assert final["state"] == "VERIFIED"
        finally:
            api.close()
            assert up.interrupt() == 0, up.log()
