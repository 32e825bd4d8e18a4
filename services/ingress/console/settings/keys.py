"""The API keys screen: list them with scope and last use, create one with a scope (the plain
key shown once), revoke one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError

from services.ingress.console.auth import csrf_ok
from services.ingress.console.render import html
from services.ingress.console.settings.common import (
    Form,
    KeyId,
    admin_session,
    back,
    form_of,
    invalid,
    not_found,
    refused,
)
from services.ingress.deps import app_engine, now, transaction
from services.ingress.problems import ApiError
from services.ingress.settings.models import ApiKeyIn
from shared.db.console_sessions import SignedIn
from shared.db.models import ApiKey
from shared.db.tenants import (
    LastAdminKey,
    TenantError,
    create_api_key,
    list_api_keys,
    revoke_api_key,
)

__all__ = ["router"]

router = APIRouter(prefix="/console/settings", include_in_schema=False)

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
        return refused(who)
    try:
        body = ApiKeyIn(scope=form.get("scope", ""), name=form.get("name", "").strip() or None)
    except (ValidationError, ApiError) as exc:
        return _keys_page(request, who, status_code=422, error=invalid(exc))
    with transaction(app_engine(request)) as session:
        row, plain = create_api_key(
            session, who.workspace_id, scope=body.scope, name=body.name, now=now()
        )
        created = {"id": row.id, "scope": body.scope, "api_key": plain}
    return _keys_page(request, who, status_code=201, created=created)


@router.post("/keys")
async def create_key(request: Request) -> Response:
    return await run_in_threadpool(_create_key, request, await form_of(request))


def _revoke_key(request: Request, key_id: str, form: Form) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    try:
        with transaction(app_engine(request)) as session:
            revoke_api_key(session, key_id, now=now(), workspace_id=who.workspace_id)
    except LastAdminKey as exc:
        return _keys_page(request, who, status_code=409, error=str(exc))
    except TenantError:
        return not_found(who, f"No API key {key_id} in this workspace.")
    return back("/console/settings/keys")


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: KeyId) -> Response:
    return await run_in_threadpool(_revoke_key, request, key_id, await form_of(request))
