"""Each channel reads through the connection of its own provider (observer, PostgreSQL, real
loopback servers).

A workspace contract reads the app (``http``, the skill's provider), a Stripe charge
(``provider: stripe``) and a ledger service the workspace has no connection for (its skill, a
signed one of this test's own, declares the ledger's path). One observation reads each channel
from its own base URL with its own credential, and records ``no_connection`` for the third
instead of borrowing another provider's connection.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select

from services.observer.observe import ObserveOutcome, Observer
from shared.db.models import Observation, Operation
from shared.db.session import session_scope
from shared.db.tenants import set_connection
from shared.runtime.ratelimit import bucket_for
from shared.trust.skills import generate_private_key, public_key_pem, sign_skill
from tests.integration.registry.conftest import Api
from tests.integration.registry.test_custom_contracts import EXAMPLE, custom_text

pytestmark = pytest.mark.integration


class Server:
    """A loopback JSON server that records the Authorization header of every request."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.seen: list[tuple[str, str | None]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                seen.append((self.path, self.headers.get("Authorization")))
                raw = json.dumps({**body, "path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def ledger_skill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed ``ledger`` skill that declares ``/ledger/{id}``, loaded beside the shipped ones
    (``pg_api``'s registry is cleared around the test)."""
    skill_dir = tmp_path / "skills" / "ledger"
    skill_dir.mkdir(parents=True)
    doc = yaml.safe_load(EXAMPLE.read_text("utf-8"))
    doc["id"] = "ledger.entry.recorded"
    doc["skill"] = {"provider": "ledger", "version": "0.1.0"}
    for channel in doc["channels"]:
        if channel["verifier"] == "http":
            channel["http"]["path"] = "/ledger/{$correlation.charge_id}"
    (skill_dir / "entry.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    manifest = {
        "provider": "ledger",
        "version": "0.1.0",
        "certification": doc["certification"],
        "title": "Ledger",
        "readback": {"paths": ["/ledger/{id}"]},
        "contracts": [{"file": "entry.yaml", "sha256": "0" * 64}],
    }
    (skill_dir / "skill.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    key = generate_private_key()
    sign_skill(skill_dir, key)
    public = tmp_path / "ledger.pub"
    public.write_bytes(public_key_pem(key.public_key()))
    monkeypatch.setenv("PROVELY_CONTRACT_PATHS", str(skill_dir.parent))
    monkeypatch.setenv("PROVELY_TRUSTED_PUBLISHER_KEYS", str(public))


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    app, stripe = Server({"seats": 0}), Server({"object": "charge", "amount_refunded": 5000})
    yield app, stripe
    app.close()
    stripe.close()


def three_provider_contract() -> str:
    doc = yaml.safe_load(custom_text("acme.entitlement.three_providers"))
    doc["channels"] += [
        {
            "name": "charge_readback",
            "level": "E2",
            "independence": "provider readback",
            "verifier": "http",
            "provider": "stripe",
            "description": "The charge at Stripe, through the workspace's Stripe connection.",
            "http": {"method": "GET", "path": "/v1/charges/{$correlation.charge_id}"},
        },
        {
            "name": "ledger_readback",
            "level": "E2",
            "independence": "ledger readback",
            "verifier": "http",
            "provider": "ledger",
            "description": "A ledger service this workspace has no connection for.",
            "http": {"method": "GET", "path": "/ledger/{$correlation.charge_id}"},
        },
    ]
    return json.dumps(doc, default=str)


@pytest.mark.usefixtures("ledger_skill")
def test_each_channel_uses_its_providers_connection(
    pg_api: Api, servers: tuple[Server, Server]
) -> None:
    app, stripe = servers
    now = datetime.now(UTC)
    with session_scope(pg_api.engine) as session:
        for provider, url, key in (("http", app.url, "app-key"), ("stripe", stripe.url, "sk_b")):
            set_connection(
                session,
                pg_api.a.workspace_id,
                provider=provider,
                webhook_secrets=["whsec_x"],
                api_key=key,
                base_url=url,
                signature_scheme="stripe",
                settings=pg_api.settings,
                now=now,
            )
    uploaded = pg_api.client.post(
        "/v1/contracts",
        content=three_provider_contract(),
        headers={**pg_api.a.admin(), "Content-Type": "application/json"},
    )
    assert uploaded.status_code == 201, uploaded.text
    created = pg_api.client.post(
        "/v1/operations",
        json={
            "contract": "acme.entitlement.three_providers",
            "input": {"charge": "ch_three1", "amount_refunded": 5000, "expected_seats": 0},
        },
        headers=pg_api.a.agent(),
    )
    assert created.status_code == 201, created.text
    op_id = created.json()["id"]
    for report in (
        {"phase": "started"},
        {
            "phase": "result",
            "result": {"id": "re_three1", "charge": "ch_three1"},
            "http_status": 200,
        },
    ):
        response = pg_api.client.post(
            f"/v1/operations/{op_id}/action", json=report, headers=pg_api.a.agent()
        )
        assert response.status_code == 200, response.text
    with session_scope(pg_api.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        fence = op.fence

    with httpx.Client(follow_redirects=False, trust_env=False) as client:
        observer = Observer(
            settings=pg_api.settings,
            engine=pg_api.engine,
            http=client,
            limiter=bucket_for(pg_api.settings),
            sleep=lambda _s: None,
            send_evaluate=lambda _id: None,
        )
        assert observer.observe(op_id, fence) is ObserveOutcome.OBSERVED

    assert app.seen == [("/entitlements/ch_three1", "Bearer app-key")]
    assert stripe.seen == [("/v1/charges/ch_three1", "Bearer sk_b")]
    with session_scope(pg_api.engine) as session:
        rows = {
            row.channel: row
            for row in session.execute(
                select(Observation).where(Observation.operation_id == op_id)
            ).scalars()
        }
    assert set(rows) == {
        "entitlement_readback",
        "charge_readback",
        "ledger_readback",
        "charge_refunded_events",
    }
    # A workspace contract's reading keeps what its conditions read: the app's answer also
    # held the path it was asked for, which no condition reads.
    assert (rows["entitlement_readback"].status, rows["entitlement_readback"].value) == (
        "ok",
        {"seats": 0},
    )
    assert rows["charge_readback"].status == "ok"
    assert rows["charge_readback"].value == {}  # read (stripe.seen), but no condition reads it
    assert (rows["ledger_readback"].status, rows["ledger_readback"].error) == (
        "error",
        "no_connection",
    )
    assert rows["charge_refunded_events"].status == "ok"
    assert rows["charge_refunded_events"].value["count"] == 0
