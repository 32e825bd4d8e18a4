"""``/v1/connections``: a workspace's provider connections — list them, set one, add a webhook
signing secret with an overlap, and check what the provider sends.

- ``PUT /v1/connections/{provider}`` creates or replaces the connection; what is not given is
  the provider skill's (``shared.lifecycle.connections.configure_connection``). A base URL on a
  link-local or metadata address is refused unless the server allows it
  (``PROVELY_ALLOW_PRIVATE_NETWORK``): an API caller never lifts that guard.
- ``POST …/webhook-secrets`` adds a secret; those before it keep verifying until
  ``overlap_until`` (24 hours by default), checked against each delivery's arrival by the
  intake, and stop after it.
- ``POST …/check`` reads the provider's webhook endpoints once with the stored credential (a
  list: it changes nothing there) and says what will not count, as ``provely connection
  check`` does; the database transaction is closed before the provider is read.

Secrets are never echoed: an answer says how many secrets there are and when each ends.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from services.ingress.deps import AdminCaller, app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError, error_responses
from services.ingress.settings.models import (
    ConnectionCheck,
    ConnectionIn,
    ConnectionList,
    ConnectionOut,
    WebhookSecretIn,
    WebhookSecretOut,
)
from shared.db.models import Connection
from shared.db.tenants import TenantError
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

router = APIRouter(prefix="/v1/connections", tags=["settings"])

Provider = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]


def _out(request: Request, row: Connection) -> ConnectionOut:
    try:
        view = connection_view(row, settings=app_settings(request))
    except SecretError as exc:
        raise ApiError(503, "unavailable", str(exc)) from None
    return ConnectionOut(
        id=view.id,
        provider=view.provider,
        base_url=view.base_url,
        signature_scheme=view.signature_scheme,
        signature_tolerance_seconds=view.signature_tolerance_seconds,
        webhook_secrets=[
            WebhookSecretOut(position=n, until=s.until) for n, s in enumerate(view.webhook_secrets)
        ],
        api_key_set=view.api_key_set,
        auth=view.auth,
        webhook_url_path=view.webhook_url_path,
        created_at=view.created_at,
        updated_at=view.updated_at,
    )


def _invalid(exc: TenantError) -> ApiError:
    return ApiError(422, "invalid-connection", str(exc))


@router.get(
    "",
    response_model=ConnectionList,
    responses=error_responses(401, 403),
    summary="List the workspace's provider connections",
    operation_id="list_connections",
    description=(
        "Each connection by provider: base URL, signature scheme and tolerance, its webhook "
        "secrets (never their values: how many, and when each stops verifying), whether a "
        "readback credential is set, and the address its webhooks go to. Needs an admin key."
    ),
)
def list_all(request: Request, who: AdminCaller) -> ConnectionList:
    with transaction(app_engine(request)) as session:
        return ConnectionList(
            data=[_out(request, r) for r in list_connections(session, who.workspace_id)]
        )


@router.put(
    "/{provider}",
    response_model=ConnectionOut,
    responses=error_responses(401, 403, 422),
    summary="Set a provider connection",
    operation_id="set_connection",
    description=(
        "Creates or replaces the workspace's connection to `provider` (`stripe`, or `http` for "
        "a generic API, which needs `base_url`). What is not given is the provider skill's. "
        "Secrets are stored encrypted and never returned. Needs an admin key."
    ),
)
def put(
    request: Request, provider: Provider, body: ConnectionIn, who: AdminCaller
) -> ConnectionOut:
    with transaction(app_engine(request)) as session:
        try:
            row = configure_connection(
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
        except TenantError as exc:
            raise _invalid(exc) from None
        return _out(request, row)


@router.post(
    "/{provider}/webhook-secrets",
    response_model=ConnectionOut,
    responses=error_responses(401, 403, 404, 422),
    summary="Rotate a connection's webhook secret, with an overlap",
    operation_id="rotate_webhook_secret",
    description=(
        "Adds a signing secret. The secrets before it keep verifying deliveries until "
        "`overlap_until` (default: 24 hours from now; at most 30 days; a time not after now ends "
        "them at once), "
        "then stop: a delivery signed with one of them that arrives later is refused "
        "(`no_matching_signature`). Needs an admin key."
    ),
)
def rotate(
    request: Request, provider: Provider, body: WebhookSecretIn, who: AdminCaller
) -> ConnectionOut:
    with transaction(app_engine(request)) as session:
        if find_connection(session, who.workspace_id, provider) is None:
            raise ApiError(404, "not-found", f"no {provider} connection in this workspace")
        try:
            row = rotate_webhook_secret(
                session,
                who.workspace_id,
                provider,
                secret=body.secret,
                overlap_until=body.overlap_until,
                settings=app_settings(request),
                now=now(),
            )
        except SecretError as exc:
            raise ApiError(503, "unavailable", str(exc)) from None
        except TenantError as exc:
            raise _invalid(exc) from None
        return _out(request, row)


@router.post(
    "/{provider}/check",
    response_model=ConnectionCheck,
    responses=error_responses(401, 403, 404, 502),
    summary="Check a connection: will what the provider sends count?",
    operation_id="check_connection",
    description=(
        "Reads the provider's webhook endpoints once with the stored credential (a list, which "
        "changes nothing at the provider), and says in `problems` what will not count: an "
        "endpoint on an API version no contract reads, none delivering to this workspace, "
        "stored events no contract counts, refused deliveries. 502 when the provider cannot "
        "be read (unreachable, or the credential refused). Needs an admin key."
    ),
)
def check(request: Request, provider: Provider, who: AdminCaller) -> ConnectionCheck:
    with transaction(app_engine(request)) as session:
        try:
            facts = connection_facts(
                session, who.workspace_id, provider, settings=app_settings(request)
            )
        except NoConnection:
            raise ApiError(
                404, "not-found", f"no {provider} connection in this workspace"
            ) from None
        except SecretError as exc:
            raise ApiError(503, "unavailable", str(exc)) from None
    try:
        found = check_findings(facts)
    except ProviderUnreadable as exc:
        raise ApiError(502, "provider-unreadable", str(exc)) from None
    del found["workspace_id"]
    return ConnectionCheck(**found)
