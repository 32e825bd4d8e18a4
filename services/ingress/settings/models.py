"""Request and response bodies of the settings API (they are its OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from services.ingress.models import RequestModel as _In
from services.ingress.models import ResponseModel as _Out

__all__ = [
    "ApiKeyCreated",
    "ApiKeyIn",
    "ApiKeyList",
    "ApiKeyOut",
    "ConnectionCheck",
    "ConnectionIn",
    "ConnectionList",
    "ConnectionOut",
    "ConsoleUserCreated",
    "ConsoleUserIn",
    "ConsoleUserList",
    "ConsoleUserOut",
    "WebhookSecretIn",
    "WebhookSecretOut",
]

Scope = Literal["agent", "admin"]


class ApiKeyIn(_In):
    scope: Scope = Field(
        default="agent",
        description="`agent`: operations, contracts, receipts, deliveries. `admin`: that and "
        "the settings (keys, connections, contract uploads).",
    )
    name: str | None = Field(default=None, min_length=1, max_length=200)


class ApiKeyOut(_Out):
    id: str = Field(description="`key_…`; what `DELETE /v1/api-keys/{key_id}` takes.")
    prefix: str = Field(description="The key's first characters, to recognise it.")
    scope: Scope
    name: str | None
    created_at: datetime
    last_used_at: datetime | None = Field(
        description="The last request made with it, at most a minute stale; null: never used."
    )
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyOut):
    api_key: str = Field(description="The key itself: shown in this answer only, stored nowhere.")


class ApiKeyList(_Out):
    data: list[ApiKeyOut]


class ConnectionIn(_In):
    webhook_secrets: list[str] = Field(
        min_length=1,
        max_length=10,
        description="Signing secrets; a delivery signed with any of them is accepted. Replaces "
        "the stored ones (their overlap ends with them): rotate with `POST …/webhook-secrets`.",
    )
    api_key: str | None = Field(
        default=None, min_length=1, max_length=500, description="The credential for readbacks."
    )
    base_url: str | None = Field(
        default=None, max_length=500, description="Default: the provider skill's."
    )
    signature_scheme: Literal["stripe", "standard_webhooks", "github"] | None = Field(
        default=None, description="Default: the provider skill's."
    )
    signature_tolerance_seconds: int | None = Field(
        default=None, ge=1, le=86_400, description="Default: the provider skill's, else 300."
    )
    auth_header: str | None = Field(
        default=None,
        max_length=100,
        description="Send the credential in this header instead of `Authorization: Bearer`.",
    )


class WebhookSecretIn(_In):
    secret: str = Field(min_length=1, max_length=500, description="The new signing secret.")
    overlap_until: datetime | None = Field(
        default=None,
        description="When the secrets before it stop verifying (at most 30 days ahead; now or "
        "a time past: at once). Default: 24 hours from now.",
    )


class WebhookSecretOut(_Out):
    position: int = Field(description="0 is the newest.")
    until: datetime | None = Field(description="When it stops verifying; null: never.")


class ConnectionOut(_Out):
    id: str
    provider: str
    base_url: str
    signature_scheme: str
    signature_tolerance_seconds: int
    webhook_secrets: list[WebhookSecretOut] = Field(
        description="Never the secrets: how many there are and when each stops verifying."
    )
    api_key_set: bool
    auth: str = Field(description="`bearer`, or the header that carries the credential.")
    webhook_url_path: str = Field(description="Where the provider sends this workspace's events.")
    created_at: datetime
    updated_at: datetime


class ConnectionList(_Out):
    data: list[ConnectionOut]


class ConnectionCheck(_Out):
    provider: str
    contract_api_versions: list[str] = Field(
        default_factory=list, description="The API versions the registered contracts read."
    )
    endpoints: list[dict[str, Any]] = Field(
        description="The provider's webhook endpoints that deliver to this workspace."
    )
    ignored_events: dict[str, int] = Field(
        description="Stored events no contract can count, by why."
    )
    refused_deliveries: dict[str, int] = Field(description="Refused deliveries, by reason.")
    problems: list[str] = Field(description="One sentence per thing that will not count.")
    note: str | None = None


class ConsoleUserIn(_In):
    email: str = Field(
        min_length=3,
        max_length=254,
        pattern=r"^\s*[^@\s]{1,64}@[^@\s]+\.[^@\s]+\s*$",
        description="The person's email, unique in the workspace (compared in lower case); "
        "what they type to sign in.",
    )


class ConsoleUserOut(_Out):
    id: str = Field(description="`cu_…`; what `DELETE /v1/console-users/{user_id}` takes.")
    email: str
    role: Literal["reviewer"] = Field(
        description="What a console user may do: sign in, read operations, review them. "
        "Managing keys, connections, contracts and users needs an admin key."
    )
    created_at: datetime
    last_sign_in_at: datetime | None = Field(description="null: never signed in.")
    disabled_at: datetime | None = Field(description="null: may sign in.")


class ConsoleUserCreated(ConsoleUserOut):
    password: str = Field(
        description="The password the server generated: shown in this answer only, stored "
        "as a salted scrypt hash. Hand it to the person; an admin cannot read it again."
    )


class ConsoleUserList(_Out):
    data: list[ConsoleUserOut]
