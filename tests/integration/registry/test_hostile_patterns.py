"""A workspace contract's input pattern runs on RE2: a pattern that backtracks exponentially
under ``re`` answers a 1,000-character hostile input at once, on a real server that keeps
answering ``/healthz``; a pattern RE2 cannot compile is refused by lint at upload."""

from __future__ import annotations

import threading

import httpx
import pytest

from shared.trust.registry import SHIPPED_CONTRACTS_DIR
from tests.integration.api.live import LiveServer
from tests.integration.registry.conftest import Api

pytestmark = pytest.mark.integration

EXAMPLE = SHIPPED_CONTRACTS_DIR / "examples" / "app.entitlement.revoked.yaml"
YAML = {"Content-Type": "application/yaml"}


def with_pattern(pattern: str, contract_id: str = "acme.hostile.pattern") -> str:
    text = EXAMPLE.read_text("utf-8")
    text = text.replace("id: app.entitlement.revoked", f"id: {contract_id}", 1)
    text = text.replace("certification: example", "certification: custom", 1)
    assert 'pattern: "^ch_[A-Za-z0-9_]+$"' in text
    return text.replace('pattern: "^ch_[A-Za-z0-9_]+$"', f"pattern: '{pattern}'", 1)


def body(charge: str) -> dict[str, object]:
    return {
        "contract": "acme.hostile.pattern",
        "input": {"charge": charge, "amount_refunded": 1, "expected_seats": 0},
    }


@pytest.mark.timeout(120)  # with a backtracking engine the request would never end
def test_a_hostile_pattern_and_input_answer_and_healthz_goes_on(pg_api: Api) -> None:
    uploaded = pg_api.client.post(
        "/v1/contracts", content=with_pattern("^(a+)+$"), headers={**pg_api.a.admin(), **YAML}
    )
    assert uploaded.status_code == 201, uploaded.text
    app = pg_api.client.app
    with LiveServer(app) as server:  # type: ignore[arg-type]
        outcome: list[httpx.Response] = []
        done = threading.Event()

        def hostile() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for _ in range(20):
                    outcome.append(
                        client.post(
                            "/v1/operations", json=body("a" * 1000 + "!"), headers=pg_api.a.agent()
                        )
                    )
            done.set()

        thread = threading.Thread(target=hostile, daemon=True)
        thread.start()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not done.is_set():
                assert client.get("/healthz").status_code == 200
            thread.join()
            matching = client.post(
                "/v1/operations", json=body("a" * 1000), headers=pg_api.a.agent()
            )
    assert len(outcome) == 20
    for response in outcome:
        assert response.status_code == 422, response.text
        assert [e["field"] for e in response.json()["errors"]] == ["input.charge"]
    assert matching.status_code == 201, matching.text


@pytest.mark.parametrize("pattern", [r"^(ch)_\1$", "^(?=ch_)ch_.*$", "^(?<!x)ch_$"])
def test_lint_refuses_a_pattern_re2_cannot_compile(pg_api: Api, pattern: str) -> None:
    refused = pg_api.client.post(
        "/v1/contracts",
        content=with_pattern(pattern, "acme.backref.pattern"),
        headers={**pg_api.a.admin(), **YAML},
    )
    assert refused.status_code == 422, refused.text
    errors = refused.json()["errors"]
    assert [e["field"] for e in errors] == ["input.charge.pattern"]
    assert "RE2 cannot compile this pattern" in errors[0]["message"]
