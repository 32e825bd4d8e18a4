"""Who is signed in to the console, and whether a form really comes from the console.

- The session cookie (``provely_console``) holds a random token; the record keeps its sha256
  (``shared.db.console_sessions``). It is HttpOnly, SameSite=Strict, scoped to ``/console``,
  and Secure when the request came over TLS or ``PROVELY_CONSOLE_BEHIND_TLS`` says a proxy
  terminates TLS in front of the ingress.
- Every form carries the session's CSRF token, compared in constant time on every POST. The
  sign-in form, before any session exists, carries a token that must equal the one in a
  short-lived cookie of its own (a double submit).
- Refused sign-ins are counted per client address in the record; past ``SIGN_IN_REFUSALS``
  in ``SIGN_IN_WINDOW`` every sign-in of that client is answered 429 with ``Retry-After``
  until the window has passed, whatever key it sends.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from services.ingress.console.render import secured
from services.ingress.deps import app_engine, app_settings, now, transaction
from shared.db.console_sessions import SignedIn, read_session

__all__ = [
    "FORM_COOKIE",
    "LIFETIME",
    "SESSION_COOKIE",
    "SIGN_IN_REFUSALS",
    "SIGN_IN_WINDOW",
    "SignInRequired",
    "client_of",
    "csrf_ok",
    "redirect_to_sign_in",
    "set_cookie",
    "signed_in",
]

SESSION_COOKIE = "provely_console"
FORM_COOKIE = "provely_console_form"
COOKIE_PATH = "/console"
LIFETIME = timedelta(hours=12)
SIGN_IN_WINDOW = timedelta(minutes=1)
SIGN_IN_REFUSALS = 10


class SignInRequired(Exception):
    """No live console session: the person is sent to the sign-in page."""


async def redirect_to_sign_in(request: Request, exc: Exception) -> Response:
    return secured(RedirectResponse("/console/sign-in", status_code=303))


def _secure(request: Request) -> bool:
    return request.url.scheme == "https" or app_settings(request).console_behind_tls


def set_cookie(
    request: Request, response: Response, name: str, value: str, *, max_age: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def signed_in(request: Request) -> SignedIn:
    """The request's live session; ``SignInRequired`` when there is none."""
    token = request.cookies.get(SESSION_COOKIE, "")
    if not token:
        raise SignInRequired
    with transaction(app_engine(request)) as session:
        found = read_session(session, token, now=now())
    if found is None:
        raise SignInRequired
    return found


def csrf_ok(expected: str, sent: object) -> bool:
    """Whether a form's token is the expected one (constant time)."""
    return (
        isinstance(sent, str)
        and bool(expected)
        and secrets.compare_digest(expected.encode(), sent.encode())
    )


def client_of(request: Request) -> str:
    """The address refused sign-ins are counted against."""
    return request.client.host if request.client is not None else "unknown"
