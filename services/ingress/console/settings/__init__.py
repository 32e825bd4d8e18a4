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

Modules: ``common`` (the admin-session check, the form reader and the answers the screens
share), ``keys``, ``connections``, ``contracts`` (one screen each, with its forms).
"""

from __future__ import annotations

from fastapi import APIRouter

from services.ingress.console.settings import connections, contracts, keys
from services.ingress.console.settings.common import AdminSessionRequired, refuse_non_admin

__all__ = ["API_OPERATIONS", "AdminSessionRequired", "refuse_non_admin", "router"]

router = APIRouter()
router.include_router(keys.router)
router.include_router(connections.router)
router.include_router(contracts.router)

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
