"""The provider's webhook endpoints for a workspace and the API version each sends, against the
versions the registered contracts read (``provely connection set``, ``connection check`` and
``POST /v1/connections/{provider}/check``).

Stripe lists its endpoints (``GET /v1/webhook_endpoints``) with the ``api_version`` their events
are rendered in; ``null`` means the account's default version, which Stripe does not show: the
newest stored event's version stands for it when there is one.
"""

from __future__ import annotations

from typing import Any

import httpx

from shared.intake.contracts import read_api_versions

__all__ = ["ProviderUnreadable", "endpoint_findings"]


_LISTS_ENDPOINTS = {"stripe": "/v1/webhook_endpoints?limit=100"}
"""Providers whose API lists webhook endpoints with their API version, and where."""


class ProviderUnreadable(Exception):
    """The provider's endpoint list cannot be read (network, status, shape)."""


def _endpoints(
    client: httpx.Client, base_url: str, path: str, api_key: str | None
) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = client.get(base_url.rstrip("/") + path, headers=headers, timeout=5)
    except httpx.HTTPError as exc:
        raise ProviderUnreadable(f"cannot reach {base_url}: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        raise ProviderUnreadable(f"{base_url} answered {response.status_code} listing endpoints")
    try:
        data = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        raise ProviderUnreadable("the endpoint list is not the expected JSON") from None
    return [e for e in data if isinstance(e, dict)]


def endpoint_findings(
    *,
    provider: str,
    workspace_id: str,
    base_url: str,
    api_key: str | None,
    latest_version: str | None,
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """The provider's endpoints that deliver to this workspace, the version each sends, and a
    sentence for each whose events will not count. Raises ProviderUnreadable."""
    path = _LISTS_ENDPOINTS.get(provider)
    versions = read_api_versions(provider)
    if path is None:
        return {"endpoints": [], "problems": [], "note": f"{provider} does not list endpoints"}
    ours = f"/v1/events/{provider}/{workspace_id}"
    endpoints, problems = [], []
    if client is None:
        with httpx.Client() as own:
            listed = _endpoints(own, base_url, path, api_key)
    else:
        listed = _endpoints(client, base_url, path, api_key)
    for endpoint in listed:
        url = str(endpoint.get("url") or "")
        if not url.rstrip("/").endswith(ours):
            continue
        declared = endpoint.get("api_version")
        sends = declared if isinstance(declared, str) and declared else latest_version
        shown = sends or "the account's default version (unknown until an event arrives)"
        counts = sends is None or not versions or sends in versions
        endpoints.append(
            {"id": endpoint.get("id"), "url": url, "api_version": declared, "sends": shown}
        )
        if not counts:
            problems.append(
                f"endpoint {endpoint.get('id')} sends api_version {sends}, which is not among "
                f"{', '.join(versions)}: its events will not count (create it with "
                f"api_version={versions[0]})"
            )
    if not endpoints:
        problems.append(f"no {provider} endpoint delivers to {ours}")
    return {"contract_api_versions": versions, "endpoints": endpoints, "problems": problems}
