"""``provely sandbox stripe`` as a user runs it: live lines while it serves, and the ``trigger``
and ``resend`` subcommands against it (real processes, the real entry point)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import stripe

from tests.sandbox.conftest import API_KEY, Receiver

PROVELY = str(Path(sys.executable).with_name("provely"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, fragment: str, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if fragment in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no live line with {fragment!r} in {self.lines}")


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    port = _free_port()
    process = subprocess.Popen(
        [PROVELY, "sandbox", "stripe", "--port", str(port), "--settle-ms", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    handle: Served | None = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/_sandbox/outcomes", timeout=1)
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("provely sandbox stripe did not start") from None
                time.sleep(0.1)
        handle = Served(process, url)
        yield handle
    finally:
        process.terminate()
        process.wait(timeout=20)
        if handle is not None:
            handle._reader.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture
def hook(served: Served, receiver_server: Receiver) -> Receiver:
    httpx.post(f"{served.url}/_sandbox/reset", json={}, timeout=10)
    receiver_server.reset()
    client = stripe.StripeClient(API_KEY, base_addresses={"api": served.url})
    client.v1.webhook_endpoints.create(params={"url": receiver_server.url, "enabled_events": ["*"]})
    return receiver_server


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROVELY, "sandbox", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_trigger_creates_the_objects_and_delivers_with_live_lines(
    served: Served, hook: Receiver
) -> None:
    done = cli("trigger", "refund.updated", "--url", served.url)
    assert done.returncode == 0, done.stderr
    assert "created charge ch_" in done.stdout
    assert "created refund re_" in done.stdout
    assert "trigger succeeded: refund.updated" in done.stdout
    updated = [
        line.split()[-1] for line in done.stdout.splitlines() if "event refund.updated" in line
    ]
    assert updated
    assert updated[0].startswith("evt_")
    # Delivered before the command returned (it flushes), to the registered endpoint.
    types = [e["type"] for e in hook.events()]
    assert {"charge.succeeded", "refund.created", "refund.updated"} <= set(types)
    # The server printed a line per request and one per delivery attempt.
    served.wait_for("<-- [200] POST /v1/charges")
    served.wait_for("<-- [200] POST /v1/refunds")
    line = served.wait_for(f"--> refund.updated {updated[0]} [200]")
    assert line.endswith(hook.url)
    served.wait_for("--> refund.created evt_")


def test_resend_delivers_the_same_event_again(served: Served, hook: Receiver) -> None:
    assert cli("trigger", "charge.refunded", "--url", served.url).returncode == 0
    refunded = next(e for e in hook.events() if e["type"] == "charge.refunded")
    before = len(hook.received)
    done = cli("resend", refunded["id"], "--url", served.url)
    assert done.returncode == 0, done.stderr
    assert f"resent {refunded['id']}" in done.stdout
    assert "[200]" in done.stdout
    copies = [r["body"] for r in hook.received if refunded["id"] in r["body"]]
    assert len(copies) == 2
    assert copies[0] == copies[1]  # the same bytes: a replay
    assert any(refunded["id"] in r["body"] for r in hook.received[before:])
    assert sum(f"--> charge.refunded {refunded['id']} [200]" in x for x in served.lines) >= 2


def test_errors_exit_2_with_a_message(served: Served) -> None:
    unknown = cli("resend", "evt_nope", "--url", served.url)
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert "No such event: 'evt_nope'" in unknown.stderr
    served.wait_for("<-- [404] POST /_sandbox/events/evt_nope/resend")
    no_fixture = cli("trigger", "invoice.paid", "--url", served.url)
    assert no_fixture.returncode == 2
    assert "no fixture for 'invoice.paid'; one of: " in no_fixture.stderr
    down = f"http://127.0.0.1:{_free_port()}"
    for args in (("trigger", "refund.created"), ("resend", "evt_x")):
        result = cli(*args, "--url", down)
        assert result.returncode == 2, args
        assert "cannot reach the sandbox" in result.stderr
        assert "Traceback" not in result.stderr


def test_quiet_prints_nothing_while_serving(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [PROVELY, "sandbox", "stripe", "--port", str(port), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/_sandbox/outcomes", timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=20)
    assert out == ""
