"""Console users through HTTP, on PostgreSQL and SQLite: an admin creates one (the password in
that answer only), the user signs in with email and password, sees the workspace's operations
and reviews one (the receipt names the user); disabling the user ends its sessions at once;
another workspace's users are out of reach; refused sign-ins name no account and are slowed."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

import shared.trust.passwords as passwords
from tests.integration.api.conftest import Api
from tests.integration.api.test_console import (
    csrf_of,
    in_human_review,
    sign_in,
    signed_in_client,
)
from tests.integration.api.test_operations_api import create

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

_FORM_TOKEN = re.compile(r'name="form_token" value="[^"]+"')


def new_user(api: Api, email: str = "ana@example.com", *, admin_key: str = "") -> dict[str, Any]:
    answer = api.client.post(
        "/v1/console-users",
        json={"email": email},
        headers={"Authorization": f"Bearer {admin_key or api.a.admin_key}"},
    )
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    created: dict[str, Any] = answer.json()
    return created


def user_sign_in(client: TestClient, email: str, password: str) -> Any:
    page = client.get("/console/sign-in")
    token = re.search(r'name="form_token" value="([^"]+)"', page.text)
    assert token is not None
    client.cookies.set("provely_console_form", token.group(1), path="/console")
    return client.post(
        "/console/sign-in",
        data={"form_token": token.group(1), "email": email, "password": password},
        follow_redirects=False,
    )


def test_a_user_an_admin_creates_signs_in_sees_operations_and_reviews(api: Api) -> None:
    op_id = in_human_review(api)
    user = new_user(api, "  Ana@Example.com ")
    assert user["email"] == "ana@example.com"
    assert user["role"] == "reviewer"
    assert user["password"].startswith(user["id"] + ".")
    listed = api.client.get("/v1/console-users", headers=api.a.headers(admin=True)).json()
    assert [item["id"] for item in listed["data"]] == [user["id"]]
    assert "password" not in listed["data"][0]
    assert listed["data"][0]["last_sign_in_at"] is None
    refused = api.client.get("/v1/console-users", headers=api.a.headers())  # an agent key
    assert refused.status_code == 403
    client = TestClient(api.app)
    answer = user_sign_in(client, "ANA@example.com", user["password"])
    assert answer.status_code == 303, answer.text
    page = client.get("/console/operations").text
    assert op_id in page
    assert "ana@example.com" in page
    assert 'id="nav-users"' not in page  # users do not manage users
    shown = client.get(f"/console/operations/{op_id}").text
    done = client.post(
        f"/console/operations/{op_id}/review",
        data={"csrf": csrf_of(shown), "verdict": "FAILED", "note": "no refund in the dashboard"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    receipt = api.client.get(f"/v1/operations/{op_id}/receipt", headers=api.a.headers()).json()
    assert receipt["receipt"]["review"]["reviewer"] == user["id"]
    got = api.client.get(f"/v1/operations/{op_id}", headers=api.a.headers()).json()
    assert got["review"]["reviewed_by"] == user["id"]
    listed = api.client.get("/v1/console-users", headers=api.a.headers(admin=True)).json()
    assert listed["data"][0]["last_sign_in_at"] is not None
    assert client.get("/console/settings/users").status_code == 403


def test_disabling_a_user_ends_its_sessions_at_once(api: Api) -> None:
    user = new_user(api)
    first, second = TestClient(api.app), TestClient(api.app)
    for client in (first, second):
        assert user_sign_in(client, user["email"], user["password"]).status_code == 303
        assert client.get("/console/operations").status_code == 200
    gone = api.client.delete(f"/v1/console-users/{user['id']}", headers=api.a.headers(admin=True))
    assert gone.status_code == 200, gone.text
    assert gone.json()["disabled_at"] is not None
    for client in (first, second):
        after = client.get("/console/operations", follow_redirects=False)
        assert after.status_code == 303
        assert after.headers["location"] == "/console/sign-in"
    assert user_sign_in(TestClient(api.app), user["email"], user["password"]).status_code == 401
    again = api.client.delete(f"/v1/console-users/{user['id']}", headers=api.a.headers(admin=True))
    assert again.json()["disabled_at"] == gone.json()["disabled_at"]


def test_the_users_screen_creates_and_disables_with_the_session_token(api: Api) -> None:
    admin = signed_in_client(api)
    page = admin.get("/console/settings/users")
    assert page.status_code == 200
    csrf = csrf_of(page.text)
    forged = admin.post("/console/settings/users", data={"email": "bo@example.com"})
    assert forged.status_code == 403
    made = admin.post("/console/settings/users", data={"email": "bo@example.com", "csrf": csrf})
    assert made.status_code == 201
    password = re.search(r'id="new-password">([^<]+)<', made.text)
    assert password is not None
    assert made.headers["cache-control"] == "no-store"
    assert password.group(1) not in admin.get("/console/settings/users").text  # shown once
    dup = admin.post("/console/settings/users", data={"email": "BO@example.com", "csrf": csrf})
    assert dup.status_code == 409
    bad = admin.post("/console/settings/users", data={"email": "not an email", "csrf": csrf})
    assert bad.status_code == 422
    user = TestClient(api.app)
    assert user_sign_in(user, "bo@example.com", password.group(1)).status_code == 303
    user_id = password.group(1).split(".")[0]
    path = f"/console/settings/users/{user_id}/disable"
    assert admin.post(path, data={}, follow_redirects=False).status_code == 403
    assert user.get("/console/operations").status_code == 200
    done = admin.post(path, data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert user.get("/console/operations", follow_redirects=False).status_code == 303


def test_another_workspace_and_its_users_are_out_of_reach(api: Api) -> None:
    theirs = create(api, headers=api.b.headers())["id"]
    user = new_user(api)
    headers_b = api.b.headers(admin=True)
    assert api.client.delete(f"/v1/console-users/{user['id']}", headers=headers_b).status_code == (
        404
    )
    assert api.client.get("/v1/console-users", headers=headers_b).json()["data"] == []
    client = TestClient(api.app)
    assert user_sign_in(client, user["email"], user["password"]).status_code == 303
    assert client.get(f"/console/operations/{theirs}").status_code == 404
    assert theirs not in client.get("/console/operations").text
    admin_b = signed_in_client(api, api.b.admin_key)
    csrf = csrf_of(admin_b.get("/console/settings/users").text)
    other = admin_b.post(
        f"/console/settings/users/{user['id']}/disable", data={"csrf": csrf}, follow_redirects=False
    )
    assert other.status_code == 404
    assert client.get("/console/operations").status_code == 200  # still signed in
    # The same email may have a user in each workspace; each password opens its own.
    theirs_user = new_user(api, user["email"], admin_key=api.b.admin_key)
    mine_again = TestClient(api.app)
    assert user_sign_in(mine_again, user["email"], theirs_user["password"]).status_code == 303
    assert api.b.workspace_id in mine_again.get("/console/operations").text


def test_a_wrong_password_and_an_unknown_email_answer_alike_after_one_derivation(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = new_user(api)
    disabled = new_user(api, "gone@example.com")
    api.client.delete(f"/v1/console-users/{disabled['id']}", headers=api.a.headers(admin=True))
    derived: list[int] = []
    real = passwords._derive

    def counted(password: str, *, salt: bytes, n: int, r: int, p: int) -> bytes:
        derived.append(n)
        return real(password, salt=salt, n=n, r=r, p=p)

    monkeypatch.setattr(passwords, "_derive", counted)
    attempts = {
        "wrong password": (user["email"], user["id"] + ".wrong"),
        "unknown email": ("nobody@example.com", user["password"]),
        "unknown user": ("nobody@example.com", "cu_nobody.x"),
        "no user in the password": (user["email"], "plain guess"),
        "disabled user": (disabled["email"], disabled["password"]),
    }
    bodies = {}
    for label, (email, password) in attempts.items():
        derived.clear()
        answer = user_sign_in(TestClient(api.app), email, password)
        assert answer.status_code == 401, label
        assert derived == [passwords.SCRYPT_N], label  # one derivation, whatever was wrong
        bodies[label] = _FORM_TOKEN.sub("", answer.text)
    assert len(set(bodies.values())) == 1


def test_twenty_wrong_passwords_in_a_minute_are_slowed(api: Api) -> None:
    user = new_user(api)
    client = TestClient(api.app)
    answers = [
        user_sign_in(client, user["email"], f"{user['id']}.wrong{i}").status_code for i in range(20)
    ]
    assert answers[:10] == [401] * 10
    assert answers[10:] == [429] * 10
    slowed = user_sign_in(client, user["email"], user["password"])  # even the right one waits
    assert slowed.status_code == 429
    assert slowed.headers["retry-after"] == "60"
    assert sign_in(client, api.a.admin_key).status_code == 429  # one limit for both ways in


def test_bad_requests_are_refused_clearly(api: Api) -> None:
    headers = api.a.headers(admin=True)
    for body in ({"email": "no-at-sign"}, {"email": ""}, {}, {"email": "a@b.c", "x": 1}):
        answer = api.client.post("/v1/console-users", json=body, headers=headers)
        assert answer.status_code == 422, body
        assert answer.headers["content-type"].startswith("application/problem+json")
    new_user(api, "dup@example.com")
    dup = api.client.post("/v1/console-users", json={"email": "DUP@example.com"}, headers=headers)
    assert dup.status_code == 409
    assert dup.json()["type"].endswith("console-user-exists")
    assert api.client.delete("/v1/console-users/nope", headers=headers).status_code == 422
    assert api.client.delete("/v1/console-users/cu_nope", headers=headers).status_code == 404


def test_a_console_user_reaches_no_settings_screen(api: Api) -> None:
    """A user's session reviews; keys, connections, contracts and users stay with admin keys."""
    user = new_user(api)
    client = TestClient(api.app)
    assert user_sign_in(client, user["email"], user["password"]).status_code == 303
    page = client.get("/console/operations").text
    assert 'id="nav-settings"' not in page
    for path in ("keys", "connections", "contracts", "users"):
        answer = client.get(f"/console/settings/{path}", follow_redirects=False)
        assert answer.status_code == 403, (path, answer.text)
        assert "admin key" in answer.text
    forged = client.post(
        "/console/settings/keys",
        data={"csrf": csrf_of(page), "scope": "admin", "name": "mine"},
        follow_redirects=False,
    )
    assert forged.status_code == 403
    keys = api.client.get("/v1/api-keys", headers=api.a.headers(admin=True)).json()["data"]
    assert "mine" not in [key["name"] for key in keys]
