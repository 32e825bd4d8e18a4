"""What the settings screens share: the admin-session check and its 403 page, the form
reader, the refusal, not-found and invalid-input answers."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from services.ingress.console.auth import signed_in
from services.ingress.console.render import html, secured
from services.ingress.problems import ApiError
from shared.db.console_sessions import SignedIn
from shared.db.tenants import TenantError
from shared.trust.secrets import SecretError

__all__ = [
    "ADMINS_ONLY",
    "CSRF_REFUSED",
    "PROVIDER",
    "REFUSED_SHOWN",
    "AdminSessionRequired",
    "Form",
    "KeyId",
    "Provider",
    "admin_session",
    "back",
    "form_of",
    "invalid",
    "not_found",
    "refuse_non_admin",
    "refused",
]

REFUSED_SHOWN = 20
PROVIDER = re.compile(r"^[a-z][a-z0-9_]*$")
KeyId = Annotated[str, Path(max_length=40)]
Provider = Annotated[str, Path(max_length=64)]
Form = dict[str, str]
CSRF_REFUSED = "The form did not carry this session's token; reload the page and try again."
ADMINS_ONLY = "Settings are managed with an admin key's session; a console user reviews only."


class AdminSessionRequired(Exception):
    """A console session that was not opened with an admin key asked for a settings page."""

    def __init__(self, who: SignedIn) -> None:
        super().__init__(ADMINS_ONLY)
        self.who = who


def admin_session(request: Request) -> SignedIn:
    """The request's console session when an admin key opened it; raises otherwise."""
    who = signed_in(request)
    if not who.admin:
        raise AdminSessionRequired(who)
    return who


async def refuse_non_admin(request: Request, exc: Exception) -> Response:
    """The 403 page of a settings request from a session that may not manage the workspace."""
    who = exc.who if isinstance(exc, AdminSessionRequired) else signed_in(request)
    return html("message.html", status_code=403, who=who, title="Refused", message=ADMINS_ONLY)


async def form_of(request: Request) -> Form:
    return {k: v for k, v in (await request.form()).items() if isinstance(v, str)}


def refused(who: SignedIn) -> Response:
    return html("message.html", status_code=403, who=who, title="Refused", message=CSRF_REFUSED)


def not_found(who: SignedIn, message: str) -> Response:
    return html("message.html", status_code=404, who=who, title="Not found", message=message)


def invalid(exc: ValidationError | ApiError | TenantError | SecretError) -> str:
    """One sentence from a refusal: a request model's (each field and what is wrong with it),
    an API error's detail, or what the workspace's records or secrets refused."""
    if isinstance(exc, TenantError | SecretError):
        return str(exc)
    if isinstance(exc, ApiError):
        return exc.detail
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}" for e in exc.errors()
    )


def back(path: str) -> Response:
    return secured(RedirectResponse(path, status_code=303))
