"""Examples of the settings API's bodies: :data:`SUCCESS` and :data:`REQUESTS` by operation id,
merged into ``services.ingress.api.examples`` and written into the OpenAPI document after it is
generated (the document's tests validate each against its schema)."""

from __future__ import annotations

from typing import Any

__all__ = ["REQUESTS", "SUCCESS"]

_WS = "ws_01JDX4S0A1B2C3D4E5F6G7H8J9"

API_KEY: dict[str, Any] = {
    "id": "key_Q3vX9kLm2NpR7tYb4WcZ8dFh",
    "prefix": "pv_Xq7LmN",
    "scope": "agent",
    "name": "refund agent",
    "created_at": "2026-12-01T09:00:00.000000Z",
    "last_used_at": "2026-12-01T09:14:00.000000Z",
    "revoked_at": None,
}
API_KEY_CREATED: dict[str, Any] = {
    **API_KEY,
    "last_used_at": None,
    "api_key": "pv_Xq7LmNc2Vb8Kd4Rf1Tg6Yh3Ju9Ik0Ol5Pa7Sd2Fg4Hj",
}
API_KEY_IN: dict[str, Any] = {"scope": "agent", "name": "refund agent"}

CONNECTION: dict[str, Any] = {
    "id": "conn_T5rE2wQ9yU4iO7pA1sD6fG3h",
    "provider": "stripe",
    "base_url": "https://api.stripe.com",
    "signature_scheme": "stripe",
    "signature_tolerance_seconds": 300,
    "webhook_secrets": [
        {"position": 0, "until": None},
        {"position": 1, "until": "2026-12-02T09:00:00.000000Z"},
    ],
    "api_key_set": True,
    "auth": "bearer",
    "webhook_url_path": f"/v1/events/stripe/{_WS}",
    "created_at": "2026-11-20T10:00:00.000000Z",
    "updated_at": "2026-12-01T09:00:00.000000Z",
}
CONNECTION_IN: dict[str, Any] = {
    "webhook_secrets": ["whsec_3fG7hJ2kL9mN4pQ8rS1tV6wX"],
    "api_key": "rk_live_51Hx…",
}
WEBHOOK_SECRET_IN: dict[str, Any] = {
    "secret": "whsec_9aB4cD7eF2gH5jK8mN3pQ6rS",
    "overlap_until": "2026-12-02T09:00:00Z",
}
CONNECTION_CHECK: dict[str, Any] = {
    "provider": "stripe",
    "contract_api_versions": ["2026-08-26"],
    "endpoints": [
        {
            "id": "we_1QxYz3AbCdEfGhIj",
            "url": f"https://provely.example.com/v1/events/stripe/{_WS}",
            "api_version": "2025-03-31.basil",
            "sends": "2025-03-31.basil",
        }
    ],
    "ignored_events": {"api_version 2025-03-31.basil is not among 2026-08-26": 3},
    "refused_deliveries": {"no_matching_signature": 2},
    "problems": [
        "endpoint we_1QxYz3AbCdEfGhIj sends api_version 2025-03-31.basil, which is not among "
        "2026-08-26: its events will not count (create it with api_version=2026-08-26)",
        "3 stored events will not count: api_version 2025-03-31.basil is not among 2026-08-26",
        "2 deliveries refused: no_matching_signature",
    ],
    "note": None,
}

CONSOLE_USER: dict[str, Any] = {
    "id": "cu_M4nB8vC2xZ6lK1jH5gF9dS3a",
    "email": "ana@example.com",
    "role": "reviewer",
    "created_at": "2026-12-01T09:00:00.000000Z",
    "last_sign_in_at": "2026-12-01T09:20:00.000000Z",
    "disabled_at": None,
}
CONSOLE_USER_CREATED: dict[str, Any] = {
    **CONSOLE_USER,
    "last_sign_in_at": None,
    "password": "cu_M4nB8vC2xZ6lK1jH5gF9dS3a.Wq3eR7tY1uI5oP9aS2dF6gH0jK4lZ8xC",
}

REQUESTS: dict[str, dict[str, Any]] = {
    "create_api_key": {"application/json": API_KEY_IN},
    "set_connection": {"application/json": CONNECTION_IN},
    "rotate_webhook_secret": {"application/json": WEBHOOK_SECRET_IN},
    "create_console_user": {"application/json": {"email": "ana@example.com"}},
}
SUCCESS: dict[str, dict[str, Any]] = {
    "list_api_keys": {"200": {"data": [API_KEY]}},
    "create_api_key": {"201": API_KEY_CREATED},
    "revoke_api_key": {"200": {**API_KEY, "revoked_at": "2026-12-01T10:00:00.000000Z"}},
    "list_connections": {"200": {"data": [CONNECTION]}},
    "set_connection": {"200": CONNECTION},
    "rotate_webhook_secret": {"200": CONNECTION},
    "check_connection": {"200": CONNECTION_CHECK},
    "list_console_users": {"200": {"data": [CONSOLE_USER]}},
    "create_console_user": {"201": CONSOLE_USER_CREATED},
    "disable_console_user": {"200": {**CONSOLE_USER, "disabled_at": "2026-12-01T10:00:00.000000Z"}},
}
