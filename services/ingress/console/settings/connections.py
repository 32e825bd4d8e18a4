"""The provider connections screen: set one, rotate its webhook secret with an overlap, check
the readback with the stored credential, the last refused deliveries and why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError

from services.ingress.api.deliveries import delivery_page
from services.ingress.console.auth import csrf_ok
from services.ingress.console.render import html
from services.ingress.console.settings.common import (
    PROVIDER,
    REFUSED_SHOWN,
    Form,
    Provider,
    admin_session,
    back,
    form_of,
    invalid,
    not_found,
    refused,
)
from services.ingress.deps import app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError
from services.ingress.settings.models import ConnectionIn, WebhookSecretIn
from shared.db.console_sessions import SignedIn
from shared.db.tenants import (
    TenantError,
)
from shared.intake.connection_check import NoConnection, check_findings, connection_facts
from shared.intake.endpoint_versions import ProviderUnreadable
from shared.lifecycle.connections import (
    configure_connection,
    connection_view,
    find_connection,
    list_connections,
    rotate_webhook_secret,
)
from shared.trust.secrets import SecretError

__all__ = ["router"]

router = APIRouter(prefix="/console/settings", include_in_schema=False)

# Provider connections


def _connections_page(
    request: Request,
    who: SignedIn,
    *,
    status_code: int = 200,
    error: str = "",
    check: dict[str, Any] | None = None,
) -> Response:
    settings = app_settings(request)
    with transaction(app_engine(request)) as session:
        try:
            found = [
                connection_view(row, settings=settings)
                for row in list_connections(session, who.workspace_id)
            ]
        except SecretError as exc:
            found, error, status_code = [], str(exc), 503
        refused = delivery_page(
            session,
            workspace_id=who.workspace_id,
            provider=None,
            outcome="refused",
            limit=REFUSED_SHOWN,
            after=None,
        )
    return html(
        "settings_connections.html",
        status_code=status_code,
        who=who,
        connections=found,
        refused=refused.data,
        error=error,
        check=check,
    )


@router.get("/connections")
def connections_page(request: Request) -> Response:
    return _connections_page(request, admin_session(request))


def _connection_body(form: Form) -> ConnectionIn:
    """The set form as the API's body: one webhook secret a line, empty fields not given."""
    given: dict[str, Any] = {
        "webhook_secrets": [s.strip() for s in form.get("webhook_secrets", "").splitlines()]
    }
    given["webhook_secrets"] = [s for s in given["webhook_secrets"] if s]
    for name in ("api_key", "base_url", "signature_scheme", "auth_header"):
        if form.get(name, "").strip():
            given[name] = form[name].strip()
    tolerance = form.get("signature_tolerance_seconds", "").strip()
    if tolerance:
        given["signature_tolerance_seconds"] = tolerance
    return ConnectionIn(**given)


def _set_connection(request: Request, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    provider = form.get("provider", "").strip()
    try:
        if not PROVIDER.match(provider) or len(provider) > 64:
            raise TenantError(f"provider {provider!r} is not a provider name (stripe, http…)")
        body = _connection_body(form)
        with transaction(app_engine(request)) as session:
            configure_connection(
                session,
                who.workspace_id,
                provider=provider,
                webhook_secrets=body.webhook_secrets,
                api_key=body.api_key,
                base_url=body.base_url,
                signature_scheme=body.signature_scheme,
                signature_tolerance_seconds=body.signature_tolerance_seconds,
                auth_header=body.auth_header,
                settings=app_settings(request),
                now=now(),
            )
    except (ValidationError, ApiError, TenantError, SecretError) as exc:
        return _connections_page(request, who, status_code=422, error=invalid(exc))
    return back("/console/settings/connections")


@router.post("/connections")
async def set_connection(request: Request) -> Response:
    return await run_in_threadpool(_set_connection, request, await form_of(request))


def _overlap_until(value: str) -> datetime | None:
    """The form's end of the overlap (``2026-12-04T09:00``, UTC) or None when empty."""
    if not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise TenantError(
            f"overlap until {value!r} is not a time (YYYY-MM-DDTHH:MM, UTC)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _rotate(request: Request, provider: str, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    try:
        body = WebhookSecretIn(
            secret=form.get("secret", "").strip(),
            overlap_until=_overlap_until(form.get("overlap_until", "")),
        )
        with transaction(app_engine(request)) as session:
            if find_connection(session, who.workspace_id, provider) is None:
                return not_found(who, f"No {provider} connection in this workspace.")
            rotate_webhook_secret(
                session,
                who.workspace_id,
                provider,
                secret=body.secret,
                overlap_until=body.overlap_until,
                settings=app_settings(request),
                now=now(),
            )
    except (ValidationError, ApiError, TenantError, SecretError) as exc:
        return _connections_page(request, who, status_code=422, error=invalid(exc))
    return back("/console/settings/connections")


@router.post("/connections/{provider}/webhook-secrets")
async def rotate(request: Request, provider: Provider) -> Response:
    return await run_in_threadpool(_rotate, request, provider, await form_of(request))


def _check(request: Request, provider: str, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    try:
        with transaction(app_engine(request)) as session:
            facts = connection_facts(
                session, who.workspace_id, provider, settings=app_settings(request)
            )
        found = check_findings(facts)
    except NoConnection:
        return not_found(who, f"No {provider} connection in this workspace.")
    except (ProviderUnreadable, SecretError) as exc:
        failed = {"provider": provider, "error": str(exc)}
        return _connections_page(request, who, status_code=502, check=failed)
    return _connections_page(request, who, check=found)


@router.post("/connections/{provider}/check")
async def check(request: Request, provider: Provider) -> Response:
    return await run_in_threadpool(_check, request, provider, await form_of(request))
