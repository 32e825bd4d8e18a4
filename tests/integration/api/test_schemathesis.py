"""Property-based run of every operation in /openapi.json (schemathesis, against a live uvicorn
on loopback): no server error, and every response conforms to the documented status, content
type, headers and schema."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.integration.api.conftest import Api
from tests.integration.api.live import LiveServer

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import schemathesis
    from schemathesis.checks import ALL_CHECKS
    from schemathesis.experimental import OPEN_API_3_1

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 20
BUDGET_S = 60


def _more(self: Any) -> bool:
    """``many.more()`` as hypothesis-jsonschema calls it, over the iterator API of newer
    Hypothesis releases (same steps as ``many._iterate``)."""
    if self._depth is None:
        self._depth = self.data.depth
    if self._in_element:
        self._finish_element()
    if not self._decide():
        self._closed = True
        return False
    self.count += 1
    self._in_element = True
    self._rejected = False
    return True


@pytest.fixture
def jsonschema_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis.internal.conjecture import utils

    if not hasattr(utils.many, "more"):
        monkeypatch.setattr(utils.many, "more", _more, raising=False)


@pytest.mark.usefixtures("jsonschema_generation")
def test_openapi_contract_holds_for_every_operation(api: Api) -> None:
    """On PostgreSQL and on SQLite."""
    pg_api = api
    OPEN_API_3_1.enable()
    with LiveServer(pg_api.app) as server:
        failures, count = _run_all(pg_api, server.url)
    assert count >= 10
    assert failures == [], "\n\n".join(failures)


def _run_all(pg_api: Api, base_url: str) -> tuple[list[str], int]:
    schema = schemathesis.from_uri(f"{base_url}/openapi.json", base_url=base_url)
    headers = pg_api.a.headers(admin=True)
    # So that list and read endpoints answer with real data, not only empty pages.
    created = pg_api.client.post(
        "/v1/operations",
        json={
            "contract": "stripe.refund.succeeded",
            "input": {"charge": "ch_1", "amount": 5, "currency": "usd"},
        },
        headers=headers,
    )
    assert created.status_code == 201
    failures: list[str] = []
    calls: list[int] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    started = time.monotonic()
    for operation in operations:

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            response = case.call_and_validate(headers=headers, checks=ALL_CHECKS)
            calls.append(response.status_code)

        try:
            run()
        except Exception as exc:
            failures.append(f"{operation.verbose_name}: {exc}")
        if time.monotonic() - started > BUDGET_S:
            failures.append(f"the run took longer than {BUDGET_S} s")
            break
    # Each operation got real traffic, not only a schema load.
    if len(calls) < len(operations) * 5:
        failures.append(f"only {len(calls)} calls for {len(operations)} operations")
    return failures, len(operations)
