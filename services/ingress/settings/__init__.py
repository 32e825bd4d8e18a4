"""The settings API: what an operator of a workspace manages, as endpoints the console and any
script call alike — API keys (``/v1/api-keys``), console users (``/v1/console-users``) and
provider connections (``/v1/connections``: set, rotate a webhook secret with an overlap, check
the readback).
Workspace contracts are listed, shown and uploaded under ``/v1/contracts``
(``services.ingress.api.contracts``, ``services.ingress.api.custom_contracts``); refused deliveries
are ``GET /v1/deliveries?outcome=refused``.

Every endpoint here needs a key with the ``admin`` scope (403 otherwise): keys and connections
decide who may act for the workspace and what counts as its evidence. Secrets go in and never
come out: a new API key is shown once, in the answer that creates it; webhook secrets and the
readback credential are stored encrypted and never echoed.

Modules:

- ``models``      request and response bodies (the OpenAPI schema)
- ``examples``    one example per body, written into the OpenAPI document by the routes
- ``api_keys``    ``GET/POST /v1/api-keys``, ``DELETE /v1/api-keys/{key_id}``
- ``console_users`` ``GET/POST /v1/console-users``, ``DELETE /v1/console-users/{user_id}``
- ``connections`` ``GET /v1/connections``, ``PUT /v1/connections/{provider}``,
                  ``POST …/webhook-secrets`` and ``POST …/check``

May import: ``services.ingress.deps`` and ``problems`` (the request plumbing and the problem
documents), ``shared`` below it; no other router of the ingress.

Errors: routes raise ``services.ingress.problems.ApiError`` only; what the layers below raise
(``TenantError`` and ``LastAdminKey`` of ``shared.db.tenants``, ``NoConnection`` and
``ProviderUnreadable`` of ``shared.intake``, ``SecretError``) is mapped to one where it is
caught: 404, 409, 422, 502 or 503.
"""

from __future__ import annotations

from fastapi import APIRouter

from services.ingress.settings import api_keys, connections, console_users

__all__ = ["ROUTERS"]

ROUTERS: tuple[APIRouter, ...] = (api_keys.router, console_users.router, connections.router)
