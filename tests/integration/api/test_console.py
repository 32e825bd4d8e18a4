"""The console through HTTP, on PostgreSQL and SQLite: signing in and out, what a session can
reach, the CSRF token on every form, the limit on refused sign-ins, the list's filters, and a
review answered with a signed receipt that every checker accepts."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from provely_sdk.receipts import KeyRing as SdkKeyRing
from provely_sdk.receipts import verify_receipt as sdk_verify
from sqlalchemy import select

from services.cli.main import app as cli
from services.ingress.app import create_app
from services.ingress.console.render import CSP
from shared.core.receipt import document_bytes
from shared.core.types import OperationState
from shared.db.models import Receipt, Transition
from shared.db.session import session_scope
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import KeyRing
from tests.integration.api.conftest import Api
from tests.integration.api.test_operations_api import create, force_state, report

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

_FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def sign_in(client: TestClient, key: str) -> Any:
    page = client.get("/console/sign-in")
    token = _FORM_TOKEN.search(page.text)
    assert token is not None
    # As a browser would send it back (over plain HTTP the jar keeps back a Secure cookie).
    client.cookies.set("provely_console_form", token.group(1), path="/console")
    return client.post(
        "/console/sign-in",
        data={"form_token": token.group(1), "key": key},
        follow_redirects=False,
    )


def signed_in_client(api: Api, key: str | None = None) -> TestClient:
    client = TestClient(api.app)
    answer = sign_in(client, key or api.a.admin_key)
    assert answer.status_code == 303, answer.text
    return client


def cookie_flags(answer: Any) -> set[str]:
    """The attributes of the session cookie an answer sets (lower case)."""
    cookie = next(
        value
        for name, value in answer.headers.multi_items()
        if name == "set-cookie" and value.startswith("provely_console=")
    )
    return {part.strip().lower() for part in cookie.split(";")[1:]}


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None
    return found.group(1)


def in_human_review(api: Api) -> str:
    op = create(api)
    report(api, op["id"], {"phase": "result", "result": {"id": "re_1"}, "http_status": 200})
    force_state(
        api,
        op["id"],
        [
            (
                OperationState.HUMAN_REVIEW,
                "UNVERIFIABLE",
                "evidence_unavailable_before_timeout",
                True,
            )
        ],
    )
    return str(op["id"])


def test_sign_in_sets_a_strict_httponly_cookie_and_pages_carry_a_csp(api: Api) -> None:
    client = TestClient(api.app)
    assert client.get("/console/operations", follow_redirects=False).headers["location"] == (
        "/console/sign-in"
    )
    refused = sign_in(client, api.a.agent_key)  # an agent key opens nothing
    assert refused.status_code == 401
    answer = sign_in(client, api.a.admin_key)
    assert answer.status_code == 303
    flags = cookie_flags(answer)
    assert "httponly" in flags
    assert "samesite=strict" in flags
    assert "path=/console" in flags
    assert "secure" not in flags  # plain HTTP and no proxy said otherwise
    page = client.get("/console/operations")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert page.headers["x-frame-options"] == "DENY"


def test_the_cookie_is_secure_over_tls_or_behind_a_tls_proxy(api: Api) -> None:
    over_tls = TestClient(api.app, base_url="https://testserver")
    assert "secure" in cookie_flags(sign_in(over_tls, api.a.admin_key))
    behind = create_app(api.settings.model_copy(update={"console_behind_tls": True}))
    assert "secure" in cookie_flags(sign_in(TestClient(behind), api.a.admin_key))


def test_another_workspace_is_out_of_reach(api: Api) -> None:
    theirs = create(api, headers=api.b.headers())["id"]
    mine = create(api)["id"]
    client = signed_in_client(api)
    for op_id in (theirs, "op_does_not_exist"):
        page = client.get(f"/console/operations/{op_id}")
        assert page.status_code == 404
        assert "No operation" in page.text
    assert client.get(f"/console/operations/{mine}").status_code == 200
    listed = client.get("/console/operations").text
    assert mine in listed
    assert theirs not in listed
    live = client.get("/console/live", params={"ids": f"{theirs},{mine}"}).json()
    assert [op["id"] for op in live["operations"]] == [mine]
    csrf = csrf_of(client.get("/console/operations").text)
    review = client.post(
        f"/console/operations/{theirs}/review",
        data={"csrf": csrf, "verdict": "FAILED", "note": "not mine"},
        follow_redirects=False,
    )
    assert review.status_code == 404


def test_forms_without_the_session_token_are_refused(api: Api) -> None:
    op_id = in_human_review(api)
    client = signed_in_client(api)
    for data in (
        {"verdict": "VERIFIED", "note": "no token"},
        {"verdict": "VERIFIED", "note": "wrong token", "csrf": "x" * 43},
    ):
        refused = client.post(
            f"/console/operations/{op_id}/review", data=data, follow_redirects=False
        )
        assert refused.status_code == 403
    assert client.post("/console/sign-out", data={}, follow_redirects=False).status_code == 403
    assert client.get("/console/operations").status_code == 200  # still signed in
    got = api.client.get(f"/v1/operations/{op_id}", headers=api.a.headers()).json()
    assert got["review"] is None
    # The sign-in form, before any session, carries its own token (a double submit).
    stranger = TestClient(api.app)
    forged = stranger.post(
        "/console/sign-in", data={"key": api.a.admin_key}, follow_redirects=False
    )
    assert forged.status_code == 403


def test_sign_out_revokes_the_session(api: Api) -> None:
    client = signed_in_client(api)
    token = client.cookies.get("provely_console")
    assert token
    csrf = csrf_of(client.get("/console/operations").text)
    out = client.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    replay = TestClient(api.app, cookies={"provely_console": token})
    assert replay.get("/console/operations", follow_redirects=False).status_code == 303


def test_twenty_wrong_sign_ins_in_a_minute_are_slowed_in_every_process(api: Api) -> None:
    client = TestClient(api.app)
    other_process = TestClient(create_app(api.settings))  # another app on the same record
    answers = [
        sign_in(client if i % 2 else other_process, f"pv_wrong_{i}").status_code for i in range(20)
    ]
    assert answers[:10] == [401] * 10
    assert answers[10:] == [429] * 10
    slowed = sign_in(other_process, api.a.admin_key)  # even the right key waits
    assert slowed.status_code == 429
    assert slowed.headers["retry-after"] == "60"


def test_the_list_filters_and_pages_like_the_api(api: Api) -> None:
    waiting = in_human_review(api)
    ids = [create(api)["id"] for _ in range(3)]
    client = signed_in_client(api)
    page = client.get("/console/operations", params={"needs_person": "1"}).text
    assert waiting in page
    assert not any(op_id in page for op_id in ids)
    page = client.get("/console/operations", params={"state": "CREATED"}).text
    assert all(op_id in page for op_id in ids)
    assert waiting not in page
    page = client.get("/console/operations", params={"reason": "nope"}).text
    assert "No operation matches" in page
    assert (
        "No operation matches"
        not in client.get(
            "/console/operations", params={"until": "2999-01-01T00:00", "since": "2000-01-01"}
        ).text
    )
    assert (
        "No operation matches"
        in client.get("/console/operations", params={"since": "2999-01-01T00:00"}).text
    )
    for params in ({"state": "DONE"}, {"since": "yesterday"}, {"cursor": "garbage"}):
        bad = client.get("/console/operations", params=params)
        assert bad.status_code == 422, params
        assert 'id="error"' in bad.text


def _verify_everywhere(api: Api, document: dict[str, Any], tmp_path: Path) -> None:
    keys = api.client.get("/v1/receipts/keys").json()
    result = verify_receipt_document(document_bytes(document), KeyRing.from_document(keys))
    assert result.status == Verification.VALID, result.reason
    assert sdk_verify(document, SdkKeyRing.from_document(keys)).valid
    from typer.testing import CliRunner

    (tmp_path / "receipt.json").write_bytes(document_bytes(document))
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    ran = CliRunner().invoke(
        cli,
        [
            "receipts",
            "verify",
            str(tmp_path / "receipt.json"),
            "--keys",
            str(tmp_path / "keys.json"),
        ],
    )
    assert ran.exit_code == 0, ran.output


def test_a_review_from_the_console_is_answered_with_a_signed_receipt(
    api: Api, tmp_path: Path
) -> None:
    op_id = in_human_review(api)
    before = api.client.get(f"/v1/operations/{op_id}/receipt", headers=api.a.headers()).json()
    client = signed_in_client(api)
    page = client.get(f"/console/operations/{op_id}").text
    assert 'id="review-form"' in page
    assert "check in the browser" in page
    done = client.post(
        f"/console/operations/{op_id}/review",
        data={"csrf": csrf_of(page), "verdict": "VERIFIED", "note": "seen in the dashboard"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    current = api.client.get(f"/v1/operations/{op_id}/receipt", headers=api.a.headers()).json()
    body = current["receipt"]
    assert body["supersedes"] == before["receipt"]["id"]
    assert body["review"]["follows"] == before["receipt"]["id"]
    assert body["review"]["note"] == "seen in the dashboard"
    assert body["verdict"] == "VERIFIED"
    assert body["reason"] == "human_review_resolved"
    _verify_everywhere(api, current, tmp_path)
    # The receipt it follows is kept as it was, and still verifies.
    old = api.client.get(f"/v1/receipts/{before['receipt']['id']}", headers=api.a.headers()).json()
    assert old == before
    _verify_everywhere(api, old, tmp_path)
    got = api.client.get(f"/v1/operations/{op_id}", headers=api.a.headers()).json()
    assert got["verdict"] == "UNVERIFIABLE"  # the runtime's verdict is never rewritten
    assert got["review"]["receipt_id"] == body["id"]
    with session_scope(api.engine) as session:
        cause = session.execute(
            select(Transition.cause, Transition.details)
            .where(Transition.operation_id == op_id)
            .order_by(Transition.seq.desc())
            .limit(1)
        ).one()
        assert cause.cause == "review"
        assert cause.details["receipt_id"] == body["id"]
        assert session.execute(select(Receipt).where(Receipt.operation_id == op_id)).all()
    shown = client.get(f"/console/operations/{op_id}").text
    assert body["id"] in shown
    assert "seen in the dashboard" in shown
    again = client.post(
        f"/console/operations/{op_id}/review",
        data={"csrf": csrf_of(shown), "verdict": "FAILED", "note": "changed my mind"},
        follow_redirects=False,
    )
    assert again.status_code == 409


def test_the_api_review_of_a_contradiction_carries_its_receipt(api: Api, tmp_path: Path) -> None:
    op = create(api)
    report(api, op["id"], {"phase": "result", "result": {"id": "re_1"}, "http_status": 200})
    force_state(
        api, op["id"], [(OperationState.CONTRADICTED, "CONTRADICTED", "status_failed", True)]
    )
    path = f"/v1/operations/{op['id']}/review"
    done = api.client.post(
        path,
        json={"verdict": "CONTRADICTED", "note": "confirmed"},
        headers=api.a.headers(admin=True),
    )
    assert done.status_code == 200, done.text
    receipt_id = done.json()["review"]["receipt_id"]
    document = api.client.get(f"/v1/receipts/{receipt_id}", headers=api.a.headers()).json()
    assert document["receipt"]["safe_to_claim_complete"] is False
    _verify_everywhere(api, document, tmp_path)


def test_the_review_queue_puts_late_contradictions_first(api: Api) -> None:
    expired = create(api)["id"]
    force_state(api, expired, [(OperationState.EXPIRED, "UNVERIFIABLE", "no_action_report", True)])
    human = in_human_review(api)
    late = create(api)["id"]
    report(api, late, {"phase": "result", "result": {"id": "re_2"}, "http_status": 200})
    force_state(
        api,
        late,
        [
            (OperationState.VERIFIED, "VERIFIED", "all_conditions_hold", True),
            (OperationState.HUMAN_REVIEW, "CONTRADICTED", "late_contradiction", True),
        ],
    )
    client = signed_in_client(api)
    page = client.get("/console/review").text
    order = [page.index(op_id) for op_id in (late, human, expired)]
    assert order == sorted(order)


def test_provely_review_lists_the_queue_and_resolves_one(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from shared.runtime.settings import get_settings

    op_id = in_human_review(api)
    monkeypatch.setenv("PROVELY_DATABASE_URL", api.settings.resolved_database_url())
    monkeypatch.setenv("PROVELY_SECRET_KEY", api.settings.secret_key or "")
    monkeypatch.setenv("PROVELY_DATA_DIR", str(api.settings.data_dir))
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        ws = api.a.workspace_id

        def resolve(*args: str) -> Any:
            return runner.invoke(cli, ["review", "resolve", op_id, *args])

        listed = runner.invoke(cli, ["review", "list", "--workspace", ws, "--json"])
        assert listed.exit_code == 0, listed.output
        assert [item["id"] for item in json.loads(listed.stdout)["data"]] == [op_id]
        note = ["--note", "x", "--reviewer", "ana"]
        theirs = resolve("-w", api.b.workspace_id, "--verdict", "FAILED", *note)
        assert theirs.exit_code == 1
        bad = resolve("-w", ws, "--verdict", "MAYBE", *note)
        assert bad.exit_code == 2
        done = resolve(
            "-w",
            ws,
            "--json",
            "--verdict",
            "FAILED",
            "--note",
            "refund never left",
            "--reviewer",
            "ana",
        )
        assert done.exit_code == 0, done.output
        document = json.loads(done.stdout)
        assert document["receipt"]["review"]["reviewer"] == "cli:ana"
        _verify_everywhere(api, document, tmp_path)
        again = resolve("-w", ws, "--verdict", "FAILED", *note)
        assert again.exit_code == 1
        assert "never overwritten" in again.output
    finally:
        get_settings.cache_clear()
