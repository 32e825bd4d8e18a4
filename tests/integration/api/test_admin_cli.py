"""The admin CLI as a user runs it: ``provely db upgrade``, workspaces, keys, connections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from shared.db.console_users import check_sign_in
from shared.db.migrate import head_revision
from shared.db.models import ApiKey, Connection
from shared.db.session import make_engine, session_scope
from shared.db.tenants import authenticate
from shared.runtime.settings import Settings
from shared.trust.secrets import decrypt, decrypt_webhook_secrets

pytestmark = pytest.mark.integration

PROVELY = str(Path(sys.executable).parent / "provely")


class Cli:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [PROVELY, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == expect, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)


def _cli(tmp_path: Path) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")} | {
        "PROVELY_DATA_DIR": str(tmp_path / "data"),
        "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
        "PROVELY_LOG_JSON": "false",
    }
    return Cli(env)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return _cli(tmp_path)


@pytest.fixture(scope="module")
def ready(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """A migrated embedded database with one workspace, shared by the error cases."""
    cli = _cli(tmp_path_factory.mktemp("cli"))
    cli.run("db", "upgrade")
    return cli, cli.json("workspace", "create", "acme")["workspace_id"]


def _settings(cli: Cli) -> Settings:
    return Settings(
        data_dir=Path(cli.env["PROVELY_DATA_DIR"]), secret_key=cli.env["PROVELY_SECRET_KEY"]
    )


def test_workspace_keys_and_connections(cli: Cli) -> None:
    missing = cli.run("workspace", "create", "acme", expect=2)
    assert "provely db upgrade" in missing.stderr
    cli.run("db", "upgrade")
    current = cli.run("db", "current").stdout
    head = head_revision()
    assert f"current: {head}" in current
    assert f"head: {head}" in current
    created = cli.json("workspace", "create", "acme")
    assert set(created) == {"workspace_id", "api_key"}
    ws, first_key = created["workspace_id"], created["api_key"]
    assert first_key.startswith("pv_")
    agent = cli.json("apikey", "create", "--workspace", ws)
    assert agent["scope"] == "agent"
    listed = cli.json("apikey", "list", "--workspace", ws)
    assert [k["scope"] for k in listed] == ["admin", "agent"]
    assert all("api_key" not in k for k in listed)
    # Times are spelt as the API spells them: UTC, ISO 8601, ending in Z (never +00:00).
    assert all(k["created_at"].endswith("Z") for k in listed), listed
    assert all(datetime.fromisoformat(k["created_at"]).tzinfo is not None for k in listed)
    settings = _settings(cli)
    engine = make_engine(settings.resolved_database_url())
    try:
        with session_scope(engine) as session:
            who = authenticate(session, first_key)
            assert who is not None
            assert who.admin
            assert who.workspace_id == ws
        revoked = cli.json("apikey", "revoke", agent["key_id"])
        assert revoked["revoked_at"].endswith("Z"), revoked
        with session_scope(engine) as session:
            assert authenticate(session, agent["api_key"]) is None
            stored = session.execute(select(ApiKey.key_hash)).scalars().all()
            assert agent["api_key"] not in stored
        conn = cli.json(
            "connection", "set", "--workspace", ws, "--provider", "stripe",
            "--webhook-secret", "whsec_one", "--webhook-secret", "whsec_two",
            "--api-key", "sk_test_1",
        )  # fmt: skip
        assert conn["base_url"] == "https://api.stripe.com"
        assert conn["signature_scheme"] == "stripe"
        assert conn["signature_tolerance_seconds"] == 300
        assert "whsec_one" not in json.dumps(conn)
        sandbox = cli.json(
            "connection", "set", "--workspace", ws, "--provider", "stripe",
            "--webhook-secret", "whsec_three", "--api-key", "sk_test_2",
            "--base-url", "http://127.0.0.1:12111/", "--signature-tolerance", "60",
        )  # fmt: skip
        assert sandbox["connection_id"] == conn["connection_id"]  # replaced, not duplicated
        assert sandbox["base_url"] == "http://127.0.0.1:12111"
        with session_scope(engine) as session:
            row = session.execute(select(Connection)).scalar_one()
            assert decrypt_webhook_secrets(row.webhook_secrets_enc, settings=settings) == [
                "whsec_three"
            ]
            assert row.api_key_enc is not None
            assert decrypt(row.api_key_enc, settings=settings) == b"sk_test_2"
            assert row.signature_tolerance_seconds == 60
    finally:
        engine.dispose()
    generic = cli.json(
        "connection", "set", "--workspace", ws, "--provider", "http",
        "--webhook-secret", "s3cr3t", "--api-key", "k", "--base-url", "https://app.example",
        "--signature-scheme", "standard_webhooks", "--auth-header", "X-Api-Key",
    )  # fmt: skip
    assert generic["auth"] == "X-Api-Key"


def test_the_last_admin_key_is_kept_and_a_webhook_secret_rotates(ready: tuple[Cli, str]) -> None:
    """#36: ``apikey revoke`` keeps a workspace's last admin key unless told; ``apikey list``
    shows each key's last use; ``connection rotate-secret`` keeps the secrets before the new
    one for the overlap asked."""
    cli, ws = ready
    admin = cli.json("apikey", "list", "--workspace", ws)[0]
    assert admin["scope"] == "admin"
    assert admin["last_used_at"] is None
    kept = cli.run("apikey", "revoke", admin["key_id"], expect=1)
    assert "last admin key" in kept.stderr
    assert len(kept.stderr.strip().splitlines()) == 1
    second = cli.json("apikey", "create", "--workspace", ws, "--scope", "admin")

    cli.json(
        "connection", "set", "--workspace", ws, "--provider", "stripe",
        "--webhook-secret", "whsec_first", "--base-url", "http://127.0.0.1:9",
    )  # fmt: skip
    rotated = cli.json(
        "connection", "rotate-secret", "--workspace", ws, "--webhook-secret", "whsec_second",
        "--overlap-hours", "2",
    )  # fmt: skip
    newest, old = rotated["webhook_secrets"]
    assert newest["until"] is None
    ends = datetime.fromisoformat(old["until"])
    assert timedelta(hours=1.9) < ends - datetime.now(UTC) <= timedelta(hours=2)
    assert "whsec_" not in json.dumps(rotated)
    engine = make_engine(_settings(cli).resolved_database_url())
    try:
        with session_scope(engine) as session:
            row = session.execute(select(Connection)).scalar_one()
            stored = decrypt_webhook_secrets(row.webhook_secrets_enc, settings=_settings(cli))
            assert stored == ["whsec_second", "whsec_first"]
    finally:
        engine.dispose()
    missing = cli.run(
        "connection", "rotate-secret", "--workspace", ws, "--provider", "http",
        "--webhook-secret", "x", expect=1,
    )  # fmt: skip
    assert "has no http connection" in missing.stderr

    assert cli.json("apikey", "revoke", admin["key_id"])["revoked_at"].endswith("Z")
    cli.run("apikey", "revoke", second["key_id"], expect=1)
    forced = cli.json("apikey", "revoke", second["key_id"], "--allow-last-admin")
    assert forced["revoked_at"].endswith("Z")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["apikey", "create", "--workspace", "ws_nope"], "no workspace ws_nope"),
        (["apikey", "revoke", "key_nope"], "no API key key_nope"),
        (["apikey", "create", "--workspace", "WS", "--scope", "root"], "unknown scope"),
        (
            ["connection", "set", "--workspace", "WS", "--provider", "http",
             "--webhook-secret", "s"],
            "--base-url",
        ),
        (
            ["connection", "set", "--workspace", "WS", "--provider", "stripe",
             "--webhook-secret", "s", "--signature-scheme", "rot13"],
            "unknown signature scheme",
        ),
        (
            ["connection", "set", "--workspace", "WS", "--provider", "stripe",
             "--webhook-secret", "s", "--base-url", "ftp://x"],
            "not an http(s) URL",
        ),
        (["workspace", "create", " "], "1 to 200 characters"),
    ],
)  # fmt: skip
def test_bad_requests_are_one_line_errors(
    ready: tuple[Cli, str], args: list[str], message: str
) -> None:
    cli, ws = ready
    done = cli.run(*[ws if a == "WS" else a for a in args], expect=1)
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_postgres_without_a_secret_key_refuses_to_start(
    cli: Cli, migrated_postgres_url: str
) -> None:
    env = {k: v for k, v in cli.env.items() if k != "PROVELY_SECRET_KEY"}
    env["PROVELY_DATABASE_URL"] = migrated_postgres_url
    done = Cli(env).run("workspace", "create", "acme", expect=2)
    assert "PROVELY_SECRET_KEY" in done.stderr


def test_console_users_from_the_command_line(ready: tuple[Cli, str]) -> None:
    """#36: ``provely console-user create|list|disable``; the password is printed once."""
    cli, ws = ready
    created = cli.json("console-user", "create", "Ana@Example.com", "--workspace", ws)
    assert created["email"] == "ana@example.com"
    assert created["password"].startswith(created["user_id"] + ".")
    engine = make_engine(_settings(cli).resolved_database_url())
    try:
        with session_scope(engine) as session:
            user = check_sign_in(
                session, "ana@example.com", created["password"], now=datetime.now(UTC)
            )
            assert user is not None
    finally:
        engine.dispose()
    listed = cli.json("console-user", "list", "--workspace", ws)
    assert [item["user_id"] for item in listed] == [created["user_id"]]
    assert all("password" not in item for item in listed)
    dup = cli.run("console-user", "create", "ana@example.com", "--workspace", ws, expect=1)
    assert "already has a console user" in dup.stderr
    bad = cli.run("console-user", "create", "not-an-email", "--workspace", ws, expect=1)
    assert "not an email address" in bad.stderr
    other = cli.run("console-user", "disable", created["user_id"], "--workspace", "ws_x", expect=1)
    assert "no console user" in other.stderr
    disabled = cli.json("console-user", "disable", created["user_id"], "--workspace", ws)
    assert disabled["disabled_at"].endswith("Z")
