"""``--state``: the sandbox keeps charges, refunds, events and schedules across restarts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import stripe

from services.sandbox.errors import StateFileError
from services.sandbox.runner import run_sandbox
from services.sandbox.stripe import create_app
from tests.sandbox.conftest import http

KEY = "sk_test_persist"


def _client(base_url: str) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": base_url}, max_network_retries=0)


def test_state_survives_a_restart_in_process(tmp_path: Path) -> None:
    state = tmp_path / "sandbox.json"
    with run_sandbox(state_file=state, settle_ms=60_000) as sb:
        client = _client(sb.base_url)
        charge = client.v1.charges.create(params={"amount": 1200, "currency": "usd"})
        refund = client.v1.refunds.create(
            params={"charge": charge.id, "amount": 200}, options={"idempotency_key": "op_p1"}
        )
        sb.control.faults(duplicate=2)
    assert state.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["sandbox.json"]  # no temp file left behind
    json.loads(state.read_text())

    with run_sandbox(state_file=state, settle_ms=60_000) as sb:
        client = _client(sb.base_url)
        assert client.v1.charges.retrieve(charge.id).amount_refunded == 200
        assert client.v1.refunds.retrieve(refund.id).status == "pending"
        again = client.v1.refunds.create(
            params={"charge": charge.id, "amount": 200}, options={"idempotency_key": "op_p1"}
        )
        assert again.id == refund.id  # the idempotency record survived too
        assert sb.control.faults()["duplicate"] == 2
        assert len(client.v1.events.list().data) == 3
        sb.control.advance(60)  # the settlement scheduled before the restart still happens
        assert client.v1.refunds.retrieve(refund.id).status == "succeeded"


def test_an_unreadable_state_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "state.json"
    bad.write_text("{not json")
    with pytest.raises(StateFileError, match="not JSON"):
        create_app(state_file=bad)
    bad.write_text(json.dumps({"format": 99}))
    with pytest.raises(StateFileError, match="format"):
        create_app(state_file=bad)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_cli(port: int, state: Path, *flags: str) -> subprocess.Popen[bytes]:
    provely = Path(sys.executable).with_name("provely")
    process = subprocess.Popen(
        [
            str(provely),
            "sandbox",
            "stripe",
            "--port",
            str(port),
            "--state",
            str(state),
            "--settle-ms",
            "50",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            http.get(f"http://127.0.0.1:{port}/_sandbox/faults", timeout=1)
            return process
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                _, err = process.communicate()
                raise AssertionError(f"the sandbox did not start: {err.decode()}") from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def test_the_cli_serves_the_sandbox_and_its_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "cli-state.json"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    process = _start_cli(port, state, "--duplicate", "3")
    try:
        charge = _client(base).v1.charges.create(params={"amount": 300, "currency": "usd"})
    finally:
        _stop(process)
    flags = [
        "--drop",
        "charge.refunded",
        "--drop",
        "refund.failed",
        "--order",
        "reversed",
        "--clock-offset",
        "-30",
        "--api-version",
        "2020-08-27",
    ]
    process = _start_cli(port, state, *flags, "--outage-seconds", "20")
    try:
        with pytest.raises(stripe.APIError):  # the outage window from start
            _client(base).v1.charges.retrieve(charge.id)
        faults = http.get(f"{base}/_sandbox/faults").json()
        assert faults["duplicate"] == 3  # kept from the state file: not given this time
        assert faults["drop_types"] == ["charge.refunded", "refund.failed"]
        assert (faults["order"], faults["clock_offset_s"]) == ("reversed", -30)
        http.post(f"{base}/_sandbox/outage", json={"enabled": False})
        assert _client(base).v1.charges.retrieve(charge.id).amount == 300
        later = _client(base).v1.charges.create(params={"amount": 1, "currency": "usd"})
        assert later.created <= time.time() - 25
        assert _client(base).v1.events.list().data[0].api_version == "2020-08-27"
    finally:
        _stop(process)


def test_customers_survive_a_restart_and_an_older_state_file_still_loads(tmp_path: Path) -> None:
    state = tmp_path / "sandbox.json"
    with run_sandbox(state_file=state) as sb:
        customer = _client(sb.base_url).v1.customers.create(params={"name": "Kept"})
    with run_sandbox(state_file=state) as sb:
        assert _client(sb.base_url).v1.customers.retrieve(customer.id).name == "Kept"
    # A state file written before customers existed has no "customers" key.
    data = json.loads(state.read_text())
    del data["customers"]
    state.write_text(json.dumps(data))
    with run_sandbox(state_file=state) as sb:
        assert _client(sb.base_url).v1.customers.list().data == []
        assert sb.sandbox.charges == data["charges"]
