"""CLI: workspaces, API keys, console users and provider connections (``workspace``,
``apikey``, ``console-user``, ``connection``).

Every command prints JSON on stdout. Errors are one line on stderr with exit code 1 (bad
request: unknown workspace, bad option) or 2 (the system is not ready: no secret key, database
unreachable or not migrated). Plain API keys and console users' passwords are printed once, at
creation; secrets never.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer

__all__ = ["register"]

workspace_group = typer.Typer(help="Workspaces (tenants).", no_args_is_help=True)
apikey_group = typer.Typer(help="API keys of a workspace.", no_args_is_help=True)
connection_group = typer.Typer(help="A workspace's provider connections.", no_args_is_help=True)
console_user_group = typer.Typer(
    help="People who sign in to a workspace's console with an email and a password.",
    no_args_is_help=True,
)

T = TypeVar("T")


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _print(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


@contextmanager
def _errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr and an exit code."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    from services.cli.system import NoSystemError
    from shared.db.tenants import TenantError
    from shared.trust.secrets import SecretError

    try:
        yield
    except NoSystemError as exc:
        raise _fail(str(exc), 2) from None
    except TenantError as exc:
        raise _fail(str(exc), 1) from None
    except SecretError as exc:
        raise _fail(str(exc), 2) from None
    except IntegrityError as exc:
        raise _fail(f"conflict in the database: {str(exc.orig).splitlines()[0]}", 1) from None
    except (OperationalError, ProgrammingError) as exc:
        first = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
        if "no such table" in first or "does not exist" in first:
            raise _fail(
                "the database schema is missing; run `provely db upgrade` first", 2
            ) from None
        raise _fail(f"database unavailable: {first}", 2) from None


def _run(work: Callable[[Any, Any], T]) -> T:
    """Run ``work(session, now)`` in one transaction against the configured database."""
    from datetime import UTC, datetime

    from services.cli.system import existing_database_url
    from shared.db.session import get_engine, session_scope
    from shared.trust.secrets import check_secret_key

    with _errors():
        url = existing_database_url()  # before the secret key: nothing is created elsewhere
        check_secret_key()
        with session_scope(get_engine(url)) as session:
            return work(session, datetime.now(UTC))


@workspace_group.command("create")
def workspace_create(
    name: str = typer.Argument(..., help="A name for people."),
    action_window: int | None = typer.Option(
        None,
        "--action-window",
        min=1,
        help="Seconds an operation waits for its action report before it is EXPIRED.",
    ),
) -> None:
    """Create a workspace; print its id and its first API key (admin scope, shown once)."""
    from shared.db.tenants import create_workspace

    def work(session: Any, now: Any) -> dict[str, Any]:
        ws, plain = create_workspace(session, name, now=now)
        ws.action_window_seconds = action_window
        return {"workspace_id": ws.id, "api_key": plain}

    _print(_run(work))


@apikey_group.command("create")
def apikey_create(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    scope: str = typer.Option("agent", "--scope", help="agent | admin"),
    name: str | None = typer.Option(None, "--name", help="A label for people."),
) -> None:
    """Create an API key; the plain key is printed once and never stored."""
    from shared.db.tenants import create_api_key

    def work(session: Any, now: Any) -> dict[str, Any]:
        row, plain = create_api_key(session, workspace, scope=scope, name=name, now=now)
        return {"key_id": row.id, "workspace_id": workspace, "scope": scope, "api_key": plain}

    _print(_run(work))


@apikey_group.command("list")
def apikey_list(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
) -> None:
    """List a workspace's keys (ids, prefixes, scopes, last use to the minute; never the
    keys)."""
    from services.cli.times import utc_text
    from shared.db.tenants import list_api_keys

    def work(session: Any, now: Any) -> list[dict[str, Any]]:
        return [
            {
                "key_id": row.id,
                "prefix": row.prefix,
                "scope": "admin" if "admin" in row.scopes.split(",") else "agent",
                "name": row.name,
                "created_at": utc_text(row.created_at),
                "last_used_at": utc_text(row.last_used_at) if row.last_used_at else None,
                "revoked_at": utc_text(row.revoked_at) if row.revoked_at else None,
            }
            for row in list_api_keys(session, workspace)
        ]

    _print(_run(work))


@apikey_group.command("revoke")
def apikey_revoke(
    key_id: str = typer.Argument(..., help="Key id (key_…)."),
    allow_last_admin: bool = typer.Option(
        False,
        "--allow-last-admin",
        help="Revoke it even if it is the workspace's last admin key (refused otherwise).",
    ),
) -> None:
    """Revoke a key; requests with it are refused at once."""
    from services.cli.times import utc_text
    from shared.db.tenants import revoke_api_key

    def work(session: Any, now: Any) -> dict[str, Any]:
        row = revoke_api_key(session, key_id, now=now, allow_last_admin=allow_last_admin)
        assert row.revoked_at is not None
        return {"key_id": row.id, "revoked_at": utc_text(row.revoked_at)}

    _print(_run(work))


def _console_user(row: Any) -> dict[str, Any]:
    from services.cli.times import utc_text

    return {
        "user_id": row.id,
        "workspace_id": row.workspace_id,
        "email": row.email,
        "created_at": utc_text(row.created_at),
        "last_sign_in_at": utc_text(row.last_sign_in_at) if row.last_sign_in_at else None,
        "disabled_at": utc_text(row.disabled_at) if row.disabled_at else None,
    }


@console_user_group.command("create")
def console_user_create(
    email: str = typer.Argument(..., help="The person's email, unique in the workspace."),
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
) -> None:
    """Create a console user; its generated password is printed once and never stored."""
    from shared.db.console_users import create_console_user

    def work(session: Any, now: Any) -> dict[str, Any]:
        row, password = create_console_user(session, workspace, email=email, now=now)
        return {**_console_user(row), "password": password}

    _print(_run(work))


@console_user_group.command("list")
def console_user_list(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
) -> None:
    """List a workspace's console users, disabled ones included (never a password)."""
    from shared.db.console_users import list_console_users

    def work(session: Any, now: Any) -> list[dict[str, Any]]:
        return [_console_user(row) for row in list_console_users(session, workspace)]

    _print(_run(work))


@console_user_group.command("disable")
def console_user_disable(
    user_id: str = typer.Argument(..., help="User id (cu_…)."),
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
) -> None:
    """Disable a console user; its console sessions end at once."""
    from shared.db.console_users import disable_console_user

    def work(session: Any, now: Any) -> dict[str, Any]:
        return _console_user(disable_console_user(session, workspace, user_id, now=now))

    _print(_run(work))


@connection_group.command("set")
def connection_set(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    provider: str = typer.Option(..., "--provider", help="stripe, or http for a generic API."),
    webhook_secret: list[str] = typer.Option(
        ..., "--webhook-secret", help="Webhook signing secret; repeat during a rotation."
    ),
    api_key: str | None = typer.Option(None, "--api-key", help="Credential for readbacks."),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Provider base URL (default: the provider's own)."
    ),
    signature_tolerance: int | None = typer.Option(
        None, "--signature-tolerance", min=1, help="Seconds of clock skew accepted."
    ),
    signature_scheme: str | None = typer.Option(
        None, "--signature-scheme", help="stripe | standard_webhooks | github"
    ),
    auth_header: str | None = typer.Option(
        None, "--auth-header", help="Send the API key in this header instead of a bearer token."
    ),
    allow_private_network: bool = typer.Option(
        False,
        "--allow-private-network",
        help="Accept a base URL on a link-local or cloud metadata address (refused otherwise).",
    ),
) -> None:
    """Create or replace a workspace's connection to a provider (secrets encrypted at rest)."""
    from shared.lifecycle.connections import configure_connection

    if provider == "http" and not base_url:
        raise _fail("--provider http needs --base-url", 1)

    def work(session: Any, now: Any) -> dict[str, Any]:
        row = configure_connection(
            session,
            workspace,
            provider=provider,
            webhook_secrets=webhook_secret,
            api_key=api_key,
            base_url=base_url,
            signature_scheme=signature_scheme,
            signature_tolerance_seconds=signature_tolerance,
            auth_header=auth_header,
            allow_private_network=allow_private_network,
            now=now,
        )
        return {
            "connection_id": row.id,
            "workspace_id": row.workspace_id,
            "provider": row.provider,
            "base_url": row.base_url,
            "signature_scheme": row.signature_scheme,
            "signature_tolerance_seconds": row.signature_tolerance_seconds,
            "webhook_secrets": len(webhook_secret),
            "api_key_set": row.api_key_enc is not None,
            "auth": row.auth_header or "bearer",
            "webhook_url_path": f"/v1/events/{row.provider}/{row.workspace_id}",
        }

    saved = _run(work)
    saved["endpoints"] = _endpoint_check(provider, workspace, saved["base_url"], api_key)
    _print(saved)


@connection_group.command("rotate-secret")
def connection_rotate_secret(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    provider: str = typer.Option("stripe", "--provider", help="The connection's provider."),
    webhook_secret: str = typer.Option(
        ..., "--webhook-secret", help="The new signing secret (the provider's, after its roll)."
    ),
    overlap_hours: float = typer.Option(
        24.0,
        "--overlap-hours",
        min=0.0,
        max=720.0,
        help="Hours the secrets before it keep verifying (0: they stop at once).",
    ),
) -> None:
    """Add a webhook signing secret; the ones before it verify until the overlap ends."""
    from datetime import timedelta

    from services.cli.times import utc_text
    from shared.lifecycle.connections import connection_view, rotate_webhook_secret

    def work(session: Any, now: Any) -> dict[str, Any]:
        row = rotate_webhook_secret(
            session,
            workspace,
            provider,
            secret=webhook_secret,
            overlap_until=now + timedelta(hours=overlap_hours),
            now=now,
        )
        view = connection_view(row)
        return {
            "connection_id": row.id,
            "provider": row.provider,
            "webhook_secrets": [
                {"position": n, "until": utc_text(s.until) if s.until else None}
                for n, s in enumerate(view.webhook_secrets)
            ],
        }

    _print(_run(work))


def _endpoint_check(
    provider: str, workspace: str, base_url: str, api_key: str | None
) -> dict[str, Any]:
    """What the provider's endpoints for this workspace send, and what will not count (the
    connection is saved whatever this finds; ``provely connection check`` says more)."""
    from shared.intake.endpoint_versions import ProviderUnreadable, endpoint_findings

    try:
        found = endpoint_findings(
            provider=provider,
            workspace_id=workspace,
            base_url=base_url,
            api_key=api_key,
            latest_version=None,
        )
    except ProviderUnreadable as exc:
        return {"problems": [f"could not read the endpoints: {exc}"]}
    for problem in found["problems"]:
        typer.echo(f"warning: {problem}", err=True)
    return found


def register(app: typer.Typer) -> None:
    """Add the ``workspace``, ``apikey``, ``console-user`` and ``connection`` groups to the
    root app."""
    app.add_typer(workspace_group, name="workspace")
    app.add_typer(apikey_group, name="apikey")
    app.add_typer(console_user_group, name="console-user")
    app.add_typer(connection_group, name="connection")
