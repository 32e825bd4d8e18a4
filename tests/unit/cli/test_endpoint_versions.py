"""``provely connection set`` and ``connection check`` read the provider's webhook endpoints and
say which send an API version no contract reads (#33): an endpoint created on another Stripe
version left every operation PENDING with nothing saying why."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from shared.intake.endpoint_versions import ProviderUnreadable, endpoint_findings

WS = "ws_abc"


def client_listing(endpoints: list[dict[str, Any]], status: int = 200) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/webhook_endpoints"
        assert request.headers["authorization"] == "Bearer sk_test_x"
        return httpx.Response(status, json={"object": "list", "data": endpoints})

    return httpx.Client(transport=httpx.MockTransport(answer))


def endpoint(api_version: str | None, *, ws: str = WS) -> dict[str, Any]:
    return {
        "id": f"we_{api_version}",
        "url": f"https://provely.example/v1/events/stripe/{ws}",
        "api_version": api_version,
    }


def findings(endpoints: list[dict[str, Any]], latest: str | None = None) -> dict[str, Any]:
    return endpoint_findings(
        provider="stripe",
        workspace_id=WS,
        base_url="https://api.stripe.test",
        api_key="sk_test_x",
        latest_version=latest,
        client=client_listing(endpoints),
    )


def test_an_endpoint_on_another_version_is_named() -> None:
    found = findings([endpoint("2025-03-31.basil"), endpoint("2026-08-26", ws="ws_other")])
    assert found["contract_api_versions"] == ["2026-08-26"]
    assert [e["id"] for e in found["endpoints"]] == ["we_2025-03-31.basil"]
    assert found["problems"] == [
        "endpoint we_2025-03-31.basil sends api_version 2025-03-31.basil, which is not among "
        "2026-08-26: its events will not count (create it with api_version=2026-08-26)"
    ]


def test_an_endpoint_on_the_contract_version_is_fine() -> None:
    assert findings([endpoint("2026-08-26")])["problems"] == []


def test_the_account_default_is_read_from_the_newest_event_when_known() -> None:
    assert findings([endpoint(None)])["problems"] == []  # unknown: nothing to say yet
    late = findings([endpoint(None)], latest="2025-03-31.basil")
    assert len(late["problems"]) == 1
    assert "2025-03-31.basil" in late["problems"][0]


def test_no_endpoint_for_the_workspace_is_said() -> None:
    found = findings([endpoint("2026-08-26", ws="ws_other")])
    assert found["problems"] == [f"no stripe endpoint delivers to /v1/events/stripe/{WS}"]


@pytest.mark.parametrize("status", [401, 500])
def test_a_provider_that_cannot_be_read_raises(status: int) -> None:
    with pytest.raises(ProviderUnreadable, match=str(status)):
        endpoint_findings(
            provider="stripe",
            workspace_id=WS,
            base_url="https://api.stripe.test",
            api_key="sk_test_x",
            latest_version=None,
            client=client_listing([], status=status),
        )
