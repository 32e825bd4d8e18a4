"""The console's settings screens: API keys, provider connections, workspace contracts.

Each form is one action of the settings API, done by the same functions that endpoint calls
(``shared.db.tenants``, ``shared.lifecycle.connections``, ``shared.intake.connection_check``,
the contract lint and store of ``services.ingress.api.custom_contracts``), with its body checked
by the same request model. :data:`API_OPERATIONS` names, for every console action, the
``operation_id`` of that endpoint in the OpenAPI document (a test checks each one exists).

Every form carries the session's CSRF token and is refused (403) without it. Only a session
opened with an admin key reaches these pages (:func:`admin_session`; a console user's session,
which reviews but does not manage, is answered 403 by :func:`refuse_non_admin`), so whoever
reaches them may manage the workspace. Everything is read and written for the session's
workspace only: another workspace's key id or a provider with no connection here is the
console's 404 page. Bad input is answered with the page again and a sentence saying what is
wrong, never a 500.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from services.ingress.api.custom_contracts import lint_upload, store_contract
from services.ingress.api.deliveries import delivery_page
from services.ingress.console.auth import csrf_ok, signed_in
from services.ingress.console.render import html, secured
from services.ingress.deps import app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError
from services.ingress.settings.models import ApiKeyIn, ConnectionIn, WebhookSecretIn
from shared.core.render import render_page
from shared.db.console_sessions import SignedIn
from shared.db.models import ApiKey
from shared.db.tenants import (
    LastAdminKey,
    TenantError,
    create_api_key,
    list_api_keys,
    revoke_api_key,
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
from shared.lifecycle.contracts import ContractNotFound, find_contract, list_contracts
from shared.trust.secrets import SecretError

__all__ = ["API_OPERATIONS", "AdminSessionRequired", "refuse_non_admin", "router"]

router = APIRouter(prefix="/console/settings", include_in_schema=False)

API_OPERATIONS: dict[str, str] = {
    "keys: list": "list_api_keys",
    "keys: create": "create_api_key",
    "keys: revoke": "revoke_api_key",
    "connections: list": "list_connections",
    "connections: set": "set_connection",
    "connections: rotate the webhook secret": "rotate_webhook_secret",
    "connections: check": "check_connection",
    "connections: refused deliveries": "list_deliveries",
    "contracts: list": "list_contracts",
    "contracts: one contract's page": "get_contract",
    "contracts: upload": "upload_contract",
}
"""Each console action and the ``operation_id`` of the API endpoint that does the same."""

REFUSED_SHOWN = 20
PROVIDER = re.compile(r"^[a-z][a-z0-9_]*$")
KeyId = Annotated[str, Path(max_length=40)]
Provider = Annotated[str, Path(max_length=64)]
Form = dict[str, str]
CSRF_REFUSED = "The form did not carry this session's token; reload the page and try again."
ADMINS_ONLY = "Settings are managed with an admin key's session; a console user reviews only."


class AdminSessionRequired(Exception):
    """A console session that was not opened with an admin key asked for a settings page."""

    def __init__(self, who: SignedIn) -> None:
        super().__init__(ADMINS_ONLY)
        self.who = who


def admin_session(request: Request) -> SignedIn:
    """The request's console session when an admin key opened it; raises otherwise."""
    who = signed_in(request)
    if not who.admin:
        raise AdminSessionRequired(who)
    return who


async def refuse_non_admin(request: Request, exc: Exception) -> Response:
    """The 403 page of a settings request from a session that may not manage the workspace."""
    who = exc.who if isinstance(exc, AdminSessionRequired) else signed_in(request)
    return html("message.html", status_code=403, who=who, title="Refused", message=ADMINS_ONLY)


async def _form(request: Request) -> Form:
    return {k: v for k, v in (await request.form()).items() if isinstance(v, str)}


def _refused(who: SignedIn) -> Response:
    return html("message.html", status_code=403, who=who, title="Refused", message=CSRF_REFUSED)


def _not_found(who: SignedIn, message: str) -> Response:
    return html("message.html", status_code=404, who=who, title="Not found", message=message)


def _invalid(exc: ValidationError | ApiError) -> str:
    """One sentence from a request model's refusal: each field and what is wrong with it."""
    if isinstance(exc, ApiError):
        return exc.detail
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}" for e in exc.errors()
    )


def _back(path: str) -> Response:
    return secured(RedirectResponse(path, status_code=303))


# API keys


def _key_row(row: ApiKey, who: SignedIn) -> dict[str, Any]:
    return {
        "row": row,
        "scope": "admin" if "admin" in row.scopes.split(",") else "agent",
        "yours": row.id == who.key_id,
    }


def _keys_page(
    request: Request,
    who: SignedIn,
    *,
    status_code: int = 200,
    error: str = "",
    created: dict[str, Any] | None = None,
) -> Response:
    with transaction(app_engine(request)) as session:
        keys = [_key_row(row, who) for row in list_api_keys(session, who.workspace_id)]
    return html(
        "settings_keys.html",
        status_code=status_code,
        who=who,
        keys=keys,
        error=error,
        created=created,
    )


@router.get("/keys")
def keys_page(request: Request) -> Response:
    return _keys_page(request, admin_session(request))


def _create_key(request: Request, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return _refused(who)
    try:
        body = ApiKeyIn(scope=form.get("scope", ""), name=form.get("name", "").strip() or None)
    except (ValidationError, ApiError) as exc:
        return _keys_page(request, who, status_code=422, error=_invalid(exc))
    with transaction(app_engine(request)) as session:
        row, plain = create_api_key(
            session, who.workspace_id, scope=body.scope, name=body.name, now=now()
        )
        created = {"id": row.id, "scope": body.scope, "api_key": plain}
    return _keys_page(request, who, status_code=201, created=created)


@router.post("/keys")
async def create_key(request: Request) -> Response:
    return await run_in_threadpool(_create_key, request, await _form(request))


def _revoke_key(request: Request, key_id: str, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return _refused(who)
    try:
        with transaction(app_engine(request)) as session:
            revoke_api_key(session, key_id, now=now(), workspace_id=who.workspace_id)
    except LastAdminKey as exc:
        return _keys_page(request, who, status_code=409, error=str(exc))
    except TenantError:
        return _not_found(who, f"No API key {key_id} in this workspace.")
    return _back("/console/settings/keys")


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: KeyId) -> Response:
    return await run_in_threadpool(_revoke_key, request, key_id, await _form(request))


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
        return _refused(who)
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
        message = str(exc) if isinstance(exc, TenantError | SecretError) else _invalid(exc)
        return _connections_page(request, who, status_code=422, error=message)
    return _back("/console/settings/connections")


@router.post("/connections")
async def set_connection(request: Request) -> Response:
    return await run_in_threadpool(_set_connection, request, await _form(request))


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
        return _refused(who)
    try:
        body = WebhookSecretIn(
            secret=form.get("secret", "").strip(),
            overlap_until=_overlap_until(form.get("overlap_until", "")),
        )
        with transaction(app_engine(request)) as session:
            if find_connection(session, who.workspace_id, provider) is None:
                return _not_found(who, f"No {provider} connection in this workspace.")
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
        message = str(exc) if isinstance(exc, TenantError | SecretError) else _invalid(exc)
        return _connections_page(request, who, status_code=422, error=message)
    return _back("/console/settings/connections")


@router.post("/connections/{provider}/webhook-secrets")
async def rotate(request: Request, provider: Provider) -> Response:
    return await run_in_threadpool(_rotate, request, provider, await _form(request))


def _check(request: Request, provider: str, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return _refused(who)
    try:
        with transaction(app_engine(request)) as session:
            facts = connection_facts(
                session, who.workspace_id, provider, settings=app_settings(request)
            )
        found = check_findings(facts)
    except NoConnection:
        return _not_found(who, f"No {provider} connection in this workspace.")
    except (ProviderUnreadable, SecretError) as exc:
        failed = {"provider": provider, "error": str(exc)}
        return _connections_page(request, who, status_code=502, check=failed)
    return _connections_page(request, who, check=found)


@router.post("/connections/{provider}/check")
async def check(request: Request, provider: Provider) -> Response:
    return await run_in_threadpool(_check, request, provider, await _form(request))


# Workspace contracts


def _contracts_page(
    request: Request,
    who: SignedIn,
    *,
    status_code: int = 200,
    error: str = "",
    sent: dict[str, Any] | None = None,
) -> Response:
    with transaction(app_engine(request)) as session:
        own = [e for e in list_contracts(session, who.workspace_id) if e.custom_id is not None]
    return html(
        "settings_contracts.html",
        status_code=status_code,
        who=who,
        contracts=own,
        error=error,
        sent=sent or {"format": "yaml", "document": "", "lines": [], "whole": []},
    )


@router.get("/contracts")
def contracts_page(request: Request) -> Response:
    return _contracts_page(request, admin_session(request))


def _lint_shown(document: str, fmt: str, exc: ApiError) -> dict[str, Any]:
    """The document sent, line by line, each lint error beside its line; errors of no line
    (the whole document) apart."""
    by_line: dict[int, list[str]] = {}
    whole: list[str] = []
    for err in exc.errors or []:
        line = getattr(err, "line", None)
        text = f"{err.field}: {err.message}"
        if isinstance(line, int):
            by_line.setdefault(line, []).append(text)
        else:
            whole.append(text)
    lines = [
        {"n": n, "text": text, "errors": by_line.get(n, [])}
        for n, text in enumerate(document.splitlines(), start=1)
    ]
    return {"format": fmt, "document": document, "lines": lines, "whole": whole}


def _store(request: Request, who: SignedIn, contract: Any) -> Response:
    with transaction(app_engine(request)) as session:
        row, _new = store_contract(session, who.workspace_id, contract)
        where = f"/console/settings/contracts/{row.contract_id}?version={row.version}"
    return _back(where)


@router.post("/contracts")
async def upload_contract(request: Request) -> Response:
    form = await _form(request)
    who = await run_in_threadpool(admin_session, request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return _refused(who)
    document, fmt = form.get("document", ""), form.get("format", "yaml")
    media_type = "application/json" if fmt == "json" else "application/yaml"
    settings = app_settings(request)
    body = document.replace("\r\n", "\n").encode("utf-8")
    try:
        if len(body) > settings.contract_max_bytes:
            raise ApiError(
                413,
                "body-too-large",
                f"a contract is at most {settings.contract_max_bytes} bytes",
            )
        contract = await lint_upload(
            body, media_type, timeout=settings.contract_parse_timeout_seconds
        )
        return await run_in_threadpool(_store, request, who, contract)
    except ApiError as exc:
        sent = _lint_shown(body.decode("utf-8"), fmt, exc)
        return await run_in_threadpool(
            _contracts_page, request, who, status_code=exc.status, error=exc.detail, sent=sent
        )


def _contract(request: Request, contract_id: str, version: str | None) -> Response:
    who = admin_session(request)
    try:
        with transaction(app_engine(request)) as session:
            entry = find_contract(session, who.workspace_id, contract_id, version)
    except ContractNotFound as exc:
        return _not_found(who, f"{str(exc).capitalize()} in this workspace.")
    certification = entry.certification or entry.contract.certification
    page = render_page(entry.contract, digest=entry.hash, certification=certification)
    return html("settings_contract.html", who=who, entry=entry, page=page)


@router.get("/contracts/{contract_id}")
async def contract_page(
    request: Request,
    contract_id: Annotated[str, Path(max_length=200)],
    version: Annotated[str, Query(max_length=40)] = "",
) -> Response:
    return await run_in_threadpool(_contract, request, contract_id, version or None)
