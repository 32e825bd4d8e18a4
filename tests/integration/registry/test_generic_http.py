"""Generic ``http`` connections: set with the real CLI on PostgreSQL, read against real loopback
servers with the http verifier's rules (credential from the connection, no redirect followed,
size and time limits)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.observer.connections import readback_for
from services.observer.http_verifier import read_http
from shared.core.types import ObservationStatus
from shared.db.session import session_scope
from shared.runtime.settings import Settings, get_settings

pytestmark = pytest.mark.integration

runner = CliRunner()
MAX_BYTES = 4096
TIMEOUT_S = 1.0


@dataclass
class Recorder:
    """What a loopback server was asked: (path, headers) per request."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    redirect_to: str = ""


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up first (/slow outlives its timeout). Left unhandled, the
                # server thread prints a traceback to stderr seconds later, into whatever a
                # later test is capturing.
                pass

        def do_GET(self) -> None:
            recorder.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path.startswith("/entitlements/"):
                charge = self.path.rsplit("/", 1)[1]
                self._send(200, json.dumps({"charge": charge, "seats": 0}).encode())
            elif self.path == "/moved":
                self._send(302, b"{}", {"Location": recorder.redirect_to})
            elif self.path == "/big":
                self._send(200, json.dumps({"pad": "x" * (MAX_BYTES * 4)}).encode())
            elif self.path == "/slow":
                time.sleep(TIMEOUT_S * 3)
                self._send(200, b"{}")
            else:
                self._send(404, b'{"error": "no such thing"}')

    return Handler


@pytest.fixture
def servers() -> Iterator[tuple[tuple[str, Recorder], tuple[str, Recorder]]]:
    """Two loopback servers: the app the connection names, and another host."""
    started = []
    for _ in range(2):
        recorder = Recorder()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, f"http://127.0.0.1:{server.server_address[1]}", recorder))
    (_, app_url, app_rec), (_, other_url, other_rec) = started
    app_rec.redirect_to = f"{other_url}/entitlements/ch_elsewhere"
    yield (app_url, app_rec), (other_url, other_rec)
    for server, _, _ in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def settings(
    pg_engine: Engine, migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    monkeypatch.setenv("PROVELY_DATABASE_URL", migrated_postgres_url)
    monkeypatch.setenv("PROVELY_SECRET_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("PROVELY_HTTP_TIMEOUT_SECONDS", str(TIMEOUT_S))
    monkeypatch.setenv("PROVELY_HTTP_MAX_RESPONSE_BYTES", str(MAX_BYTES))
    get_settings.cache_clear()
    yield get_settings()
    monkeypatch.undo()
    get_settings.cache_clear()


def provely(*args: str) -> Any:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def connect(workspace: str, base_url: str, *extra: str) -> Any:
    return provely(
        "connection",
        "set",
        "--workspace",
        workspace,
        "--provider",
        "http",
        "--base-url",
        base_url,
        "--api-key",
        "app-secret-1",
        "--signature-scheme",
        "standard_webhooks",
        "--webhook-secret",
        "whsec_generic",
        *extra,
    )


def read(engine: Engine, settings: Settings, workspace: str, path: str) -> Any:
    with session_scope(engine) as session:
        readback = readback_for(session, workspace_id=workspace, provider="http", settings=settings)
    with httpx.Client(follow_redirects=False, trust_env=False) as client:
        return read_http(client, channel="entitlement_readback", target=readback.target, path=path)


def test_bearer_by_default_then_a_named_header(
    servers: tuple[tuple[str, Recorder], tuple[str, Recorder]],
    settings: Settings,
    pg_engine: Engine,
) -> None:
    (app_url, app_rec), _ = servers
    workspace = provely("workspace", "create", "generic")["workspace_id"]
    shown = connect(workspace, app_url)
    assert (shown["provider"], shown["auth"], shown["signature_scheme"]) == (
        "http",
        "bearer",
        "standard_webhooks",
    )
    assert shown["webhook_url_path"] == f"/v1/events/http/{workspace}"

    reading = read(pg_engine, settings, workspace, "/entitlements/ch_1")
    assert reading.status is ObservationStatus.OK
    assert reading.value == {"charge": "ch_1", "seats": 0}
    path, headers = app_rec.requests[-1]
    assert path == "/entitlements/ch_1"
    assert headers["authorization"] == "Bearer app-secret-1"

    connect(workspace, app_url, "--auth-header", "X-Api-Key")
    reading = read(pg_engine, settings, workspace, "/entitlements/ch_2")
    assert reading.status is ObservationStatus.OK
    _, headers = app_rec.requests[-1]
    assert headers["x-api-key"] == "app-secret-1"
    assert "authorization" not in headers


def test_no_redirect_off_the_host_and_the_limits(
    servers: tuple[tuple[str, Recorder], tuple[str, Recorder]],
    settings: Settings,
    pg_engine: Engine,
) -> None:
    (app_url, _), (_, other_rec) = servers
    workspace = provely("workspace", "create", "limits")["workspace_id"]
    connect(workspace, app_url)

    moved = read(pg_engine, settings, workspace, "/moved")
    assert moved.status is ObservationStatus.ERROR
    assert moved.error == "redirect_refused_302"
    assert other_rec.requests == []  # the credential never went to the other host

    big = read(pg_engine, settings, workspace, "/big")
    assert (big.status, big.error) == (ObservationStatus.ERROR, "too_large")

    started = time.monotonic()
    slow = read(pg_engine, settings, workspace, "/slow")
    assert slow.status is ObservationStatus.UNAVAILABLE
    assert slow.error == "timeout"
    assert time.monotonic() - started < TIMEOUT_S * 2.5

    missing = read(pg_engine, settings, workspace, "/nothing")
    assert missing.status is ObservationStatus.NOT_FOUND


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--signature-scheme", "hmac_custom"], "unknown signature scheme"),
        (["--base-url", "ftp://127.0.0.1/"], "not an http(s) URL"),
        (["--base-url", "http://"], "names no host"),
        (["--base-url", "https://user:pw@app.example/"], "names no host"),
        (["--auth-header", "Bad Header"], "cannot carry the credential"),
        (["--auth-header", "Host"], "cannot carry the credential"),
    ],
)
def test_bad_generic_connections_are_refused(
    settings: Settings, pg_engine: Engine, args: list[str], message: str
) -> None:
    workspace = provely("workspace", "create", "bad")["workspace_id"]
    base = {
        "--base-url": "http://127.0.0.1:9",
        "--signature-scheme": "github",
    }
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [item for pair in base.items() for item in pair]
    result = runner.invoke(
        cli,
        [
            "connection",
            "set",
            "--workspace",
            workspace,
            "--provider",
            "http",
            "--webhook-secret",
            "s",
            *flat,
        ],
    )
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output
