"""``/console/sign-in`` and ``/console/sign-out``: a workspace's admin key, or a console
user's email and password, opens a session; signing out revokes it (see ``auth`` for the
cookie, the form tokens and the limits).

Both ways in share one limit (refused sign-ins per client address), and a refused user
sign-in says the same thing whatever was wrong (the email, the password, a disabled user),
after the same work (one scrypt derivation): the answer names no account."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from services.ingress.console.auth import (
    FORM_COOKIE,
    LIFETIME,
    SESSION_COOKIE,
    SIGN_IN_REFUSALS,
    SIGN_IN_WINDOW,
    client_of,
    csrf_ok,
    set_cookie,
    signed_in,
)
from services.ingress.console.render import html, secured
from services.ingress.deps import app_engine, now, transaction
from shared.db.console_sessions import (
    SignedIn,
    open_session,
    open_user_session,
    record_refused_sign_in,
    refused_sign_ins,
    revoke_session,
)

__all__ = ["router"]

router = APIRouter(prefix="/console", include_in_schema=False)

FORM_COOKIE_AGE_S = 3600


@dataclass(frozen=True, slots=True)
class _Attempt:
    status: int  # 303 signed in, 401 refused, 429 slowed
    token: str = ""


def _sign_in_form(request: Request, *, status_code: int = 200, error: str = "") -> Response:
    form_token = secrets.token_urlsafe(32)
    response = html("sign_in.html", status_code=status_code, form_token=form_token, error=error)
    set_cookie(request, response, FORM_COOKIE, form_token, max_age=FORM_COOKIE_AGE_S)
    return response


@router.get("")
def console_root() -> Response:
    return secured(RedirectResponse("/console/operations", status_code=303))


@router.get("/sign-in")
def sign_in_page(request: Request) -> Response:
    return _sign_in_form(request)


@dataclass(frozen=True, slots=True)
class _Credentials:
    key: str
    email: str
    password: str


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value[:500] if isinstance(value, str) else ""


def _open(
    session: Session, given: _Credentials, *, moment: datetime
) -> tuple[str, SignedIn] | None:
    """An admin key when one is given, else the email and password of a console user."""
    if given.key:
        return open_session(session, given.key, now=moment, lifetime=LIFETIME)
    return open_user_session(session, given.email, given.password, now=moment, lifetime=LIFETIME)


def _attempt(request: Request, given: _Credentials) -> _Attempt:
    client = client_of(request)
    moment = now()
    with transaction(app_engine(request)) as session:
        if refused_sign_ins(session, client, since=moment - SIGN_IN_WINDOW) >= SIGN_IN_REFUSALS:
            return _Attempt(429)
        opened = _open(session, given, moment=moment)
        if opened is None:
            record_refused_sign_in(session, client, now=moment)
            return _Attempt(401)
    return _Attempt(303, opened[0])


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await request.form()
    if not csrf_ok(request.cookies.get(FORM_COOKIE, ""), form.get("form_token")):
        return _sign_in_form(
            request, status_code=403, error="The form expired; sign in again from this page."
        )
    given = _Credentials(
        key=_field(form, "key").strip(),
        email=_field(form, "email"),
        password=_field(form, "password"),
    )
    attempt = await run_in_threadpool(_attempt, request, given)
    if attempt.status == 429:
        response = _sign_in_form(
            request,
            status_code=429,
            error="Too many refused sign-ins from this address; wait a minute.",
        )
        response.headers["Retry-After"] = str(int(SIGN_IN_WINDOW.total_seconds()))
        return response
    if attempt.status == 401:
        return _sign_in_form(
            request,
            status_code=401,
            error=REFUSED,
        )
    response = secured(RedirectResponse("/console/operations", status_code=303))
    set_cookie(
        request,
        response,
        SESSION_COOKIE,
        attempt.token,
        max_age=int(LIFETIME.total_seconds()),
    )
    response.delete_cookie(FORM_COOKIE, path="/console")
    return response


def _sign_out(request: Request, sent: object) -> bool:
    who = signed_in(request)
    if not csrf_ok(who.csrf, sent):
        return False
    with transaction(app_engine(request)) as session:
        revoke_session(session, who.session_id, now=now())
    return True


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    form = await request.form()
    if not await run_in_threadpool(_sign_out, request, form.get("csrf")):
        return html("message.html", status_code=403, title="Refused", message=CSRF_REFUSED)
    response = secured(RedirectResponse("/console/sign-in", status_code=303))
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response


REFUSED = (
    "Not signed in: the admin key, or the email and password, did not open a session of any "
    "workspace."
)
CSRF_REFUSED = "The form did not carry this session's token; reload the page and try again."
