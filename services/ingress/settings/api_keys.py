"""``/v1/api-keys``: a workspace's API keys — list them (with when each was last used), create
one with a scope (the plain key is in that answer only), revoke one.

A revoked key is refused (401) from the next request on: every request looks its key up in the
database (``services.ingress.deps``), the ingress keeps no cache of keys. Revoking the
workspace's last active admin key is refused (409 ``last-admin-key``): through the API nobody
could manage the workspace after it (``provely apikey revoke --allow-last-admin`` on the
server can). A key may revoke itself while another admin key remains.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from services.ingress.deps import AdminCaller, app_engine, now, transaction
from services.ingress.problems import ApiError, error_responses
from services.ingress.settings.models import ApiKeyCreated, ApiKeyIn, ApiKeyList, ApiKeyOut
from shared.db.models import ApiKey
from shared.db.tenants import (
    LastAdminKey,
    TenantError,
    create_api_key,
    list_api_keys,
    revoke_api_key,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/api-keys", tags=["settings"])

KeyId = Annotated[str, Path(min_length=1, max_length=40, pattern=r"^key_[A-Za-z0-9_-]+$")]


def _out(row: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=row.id,
        prefix=row.prefix,
        scope="admin" if "admin" in row.scopes.split(",") else "agent",
        name=row.name,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


@router.get(
    "",
    response_model=ApiKeyList,
    responses=error_responses(401, 403),
    summary="List the workspace's API keys",
    operation_id="list_api_keys",
    description=(
        "Every key of the workspace, revoked ones included, oldest first: its id, prefix, "
        "scope, name, and when it was created, last used (at most a minute stale) and "
        "revoked. Never the key itself. Needs an admin key."
    ),
)
def list_keys(request: Request, who: AdminCaller) -> ApiKeyList:
    with transaction(app_engine(request)) as session:
        return ApiKeyList(data=[_out(row) for row in list_api_keys(session, who.workspace_id)])


@router.post(
    "",
    response_model=ApiKeyCreated,
    status_code=201,
    responses=error_responses(401, 403),
    summary="Create an API key",
    operation_id="create_api_key",
    description=(
        "A new key of the workspace with the scope asked (`agent` by default, or `admin`). "
        "The answer holds the plain key, once: only its hash is stored. Needs an admin key."
    ),
)
def create_key(
    request: Request, response: Response, body: ApiKeyIn, who: AdminCaller
) -> ApiKeyCreated:
    with transaction(app_engine(request)) as session:
        row, plain = create_api_key(
            session, who.workspace_id, scope=body.scope, name=body.name, now=now()
        )
        created = ApiKeyCreated(**_out(row).model_dump(), api_key=plain)
    response.headers["Cache-Control"] = "no-store"
    return created


@router.delete(
    "/{key_id}",
    response_model=ApiKeyOut,
    responses=error_responses(401, 403, 404, 409),
    summary="Revoke an API key",
    operation_id="revoke_api_key",
    description=(
        "Revokes the key: every request made with it from now on is answered 401. Revoking a "
        "revoked key changes nothing. The workspace's last active admin key is not revoked "
        "(409 `last-admin-key`): create another admin key first. Needs an admin key."
    ),
)
def revoke_key(request: Request, key_id: KeyId, who: AdminCaller) -> ApiKeyOut:
    with transaction(app_engine(request)) as session:
        try:
            row = revoke_api_key(session, key_id, now=now(), workspace_id=who.workspace_id)
        except LastAdminKey as exc:
            raise ApiError(409, "last-admin-key", str(exc)) from None
        except TenantError:
            raise ApiError(404, "not-found", f"no API key {key_id}") from None
        return _out(row)
