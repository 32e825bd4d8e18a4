"""An operation keeps deciding with the contract version it was created with (PostgreSQL rows).

Version 1.1.0 of a contract renames the seats condition; once it is loaded (a signed skill in
``PROVELY_CONTRACT_PATHS``, or a newer workspace upload), new operations take it, while the
operation created on 1.0.0 still resolves to 1.0.0 through ``contract_for`` — same hash — and
its decision names the 1.0.0 condition.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.core.engine import decide
from shared.core.types import Observation, ObservationStatus, Verdict
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.lifecycle.contracts import contract_for, find_contract
from shared.lifecycle.operations import facts_for
from shared.trust.registry import SHIPPED_CONTRACTS_DIR, get_registry
from shared.trust.skills import load_private_key, sign_skill, write_keypair
from tests.integration.registry.conftest import Api
from tests.integration.registry.test_custom_contracts import YAML, custom_text

pytestmark = pytest.mark.integration

EXAMPLES = SHIPPED_CONTRACTS_DIR / "examples"
RENAMED = "seats_still_granted"


def newer(text: str) -> str:
    """Version 1.1.0: the same rules, the stale-entitlement condition under another id."""
    assert "- id: entitlement_not_revoked" in text
    return text.replace("version: 1.0.0", "version: 1.1.0", 1).replace(
        "- id: entitlement_not_revoked", f"- id: {RENAMED}", 1
    )


def write_newer_skill(root: Path) -> tuple[Path, Path]:
    """A signed skill holding app.entitlement.revoked 1.1.0; returns (directory, public key)."""
    skill = root / "skill-1.1"
    skill.mkdir()
    (skill / "app.entitlement.revoked.yaml").write_text(
        newer((EXAMPLES / "app.entitlement.revoked.yaml").read_text("utf-8")), "utf-8"
    )
    (skill / "skill.yaml").write_text((EXAMPLES / "skill.yaml").read_text("utf-8"), "utf-8")
    private, public, _ = write_keypair(root / "publisher.key")
    sign_skill(skill, load_private_key(private))
    return skill, public


def stale_seats(op: Operation) -> list[Observation]:
    """Stripe's refund event is in and the app still grants 5 seats: fresh readings that
    contradict either version."""
    at = datetime.now(UTC)
    event = {
        "id": "evt_versions",
        "type": "charge.refunded",
        "data": {"object": {"id": op.input["charge"], "amount_refunded": 5000}},
    }
    reduced = {
        "events": [event],
        "count": 1,
        "latest": event,
        "earliest": event,
        "types": ["charge.refunded"],
        "duplicates_dropped": 0,
        "unsupported": 0,
    }
    return [
        Observation(
            channel="entitlement_readback",
            observed_at=at,
            status=ObservationStatus.OK,
            value={"charge": op.input["charge"], "seats": 5},
        ),
        Observation("charge_refunded_events", at, ObservationStatus.OK, reduced),
    ]


def create(api: Api, contract: str, version: str | None = None) -> str:
    body: dict[str, object] = {
        "contract": contract,
        "input": {"charge": "ch_versions1", "amount_refunded": 5000, "expected_seats": 0},
    }
    if version is not None:
        body["contract_version"] = version
    response = api.client.post("/v1/operations", json=body, headers=api.a.agent())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def reason_of(api: Api, operation_id: str) -> tuple[str, str, str]:
    with session_scope(api.engine) as session:
        op = session.get(Operation, operation_id)
        assert op is not None
        contract = contract_for(session, op)
        decision = decide(contract, facts_for(op), stale_seats(op), datetime.now(UTC))
        assert decision.verdict is Verdict.CONTRADICTED
        return contract.version, op.contract_hash, decision.reason


def test_shipped_operation_keeps_1_0_0_after_1_1_0_is_loaded(
    pg_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = create(pg_api, "app.entitlement.revoked")
    version, digest, reason = reason_of(pg_api, first)
    assert (version, reason) == ("1.0.0", "entitlement_not_revoked")

    skill, public = write_newer_skill(tmp_path)
    monkeypatch.setenv("PROVELY_CONTRACT_PATHS", str(skill))
    monkeypatch.setenv("PROVELY_TRUSTED_PUBLISHER_KEYS", str(public))
    from shared.runtime.settings import get_settings

    get_settings.cache_clear()
    get_registry.cache_clear()
    assert get_registry().versions("app.entitlement.revoked") == ["1.0.0", "1.1.0"]

    second = create(pg_api, "app.entitlement.revoked")
    pinned = create(pg_api, "app.entitlement.revoked", "1.0.0")
    assert reason_of(pg_api, second)[::2] == ("1.1.0", RENAMED)
    assert reason_of(pg_api, first) == (version, digest, reason)
    assert reason_of(pg_api, pinned) == (version, digest, reason)
    # What the API shows for the old operation is still 1.0.0.
    shown = pg_api.client.get(f"/v1/operations/{first}", headers=pg_api.a.agent()).json()
    assert (shown["contract"]["version"], shown["contract"]["hash"]) == ("1.0.0", digest)
    with session_scope(pg_api.engine) as session:
        newest = find_contract(session, pg_api.a.workspace_id, "app.entitlement.revoked")
        assert newest.contract.version == "1.1.0"


def test_custom_operation_keeps_1_0_0_after_1_1_0_is_uploaded(pg_api: Api) -> None:
    def post(text: str) -> None:
        response = pg_api.client.post(
            "/v1/contracts", content=text, headers={**pg_api.a.admin(), **YAML}
        )
        assert response.status_code == 201, response.text

    post(custom_text())
    first = create(pg_api, "acme.entitlement.revoked")
    before = reason_of(pg_api, first)
    assert (before[0], before[2]) == ("1.0.0", "entitlement_not_revoked")

    post(newer(custom_text()))
    second = create(pg_api, "acme.entitlement.revoked")
    assert reason_of(pg_api, second)[::2] == ("1.1.0", RENAMED)
    assert reason_of(pg_api, first) == before
