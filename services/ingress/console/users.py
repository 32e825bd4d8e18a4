"""``/console/settings/users``: the console users of the workspace — list, create, disable.

The screen of ``/v1/console-users`` (``services.ingress.settings.console_users``) for a person
signed in with an admin key; a console user's session gets a 403 page (users do not manage
users). Every form carries the session's CSRF token. A created user's password is in the
answer to the form only (every console answer is ``Cache-Control: no-store``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from services.ingress.console.auth import csrf_ok
from services.ingress.console.render import html, secured
from services.ingress.console.settings.common import admin_session, refused
from services.ingress.deps import app_engine, now, transaction
from shared.db.console_sessions import SignedIn
from shared.db.console_users import (
    ConsoleUserExists,
    create_console_user,
    disable_console_user,
    list_console_users,
)
from shared.db.models import ConsoleUser
from shared.db.tenants import TenantError

__all__ = ["API_OPERATIONS", "router"]

router = APIRouter(prefix="/console/settings/users", include_in_schema=False)

# Each console action and the API operation (OpenAPI ``operationId``) it does the same as.
API_OPERATIONS: dict[str, str] = {
    "users: list": "list_console_users",
    "users: create": "create_console_user",
    "users: disable": "disable_console_user",
}

UserId = Annotated[str, Path(max_length=40)]


def _refused(who: SignedIn, message: str, *, status_code: int = 403) -> Response:
    return html("message.html", status_code=status_code, who=who, title="Refused", message=message)


def _page(request: Request, who: SignedIn, *, status_code: int = 200, **extra: Any) -> Response:
    with transaction(app_engine(request)) as session:
        users = list(list_console_users(session, who.workspace_id))
    context: dict[str, Any] = {"error": "", "created": None, "password": "", **extra}
    return html("users.html", status_code=status_code, who=who, users=users, **context)


@router.get("")
def users_page(request: Request) -> Response:
    who = admin_session(request)
    return _page(request, who)


def _create(request: Request, form: dict[str, Any]) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    email = str(form.get("email") or "")[:300]
    created: ConsoleUser | None = None
    try:
        with transaction(app_engine(request)) as session:
            created, password = create_console_user(
                session, who.workspace_id, email=email, now=now()
            )
    except (ConsoleUserExists, TenantError) as exc:
        status = 409 if isinstance(exc, ConsoleUserExists) else 422
        return _page(request, who, status_code=status, error=str(exc))
    return _page(request, who, status_code=201, created=created, password=password)


@router.post("")
async def create_user(request: Request) -> Response:
    form = dict((await request.form()).items())
    return await run_in_threadpool(_create, request, form)


def _disable(request: Request, user_id: str, form: dict[str, Any]) -> Response:
    who = admin_session(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    try:
        with transaction(app_engine(request)) as session:
            disable_console_user(session, who.workspace_id, user_id, now=now())
    except TenantError:
        return _refused(who, f"No console user {user_id} in this workspace.", status_code=404)
    return secured(RedirectResponse("/console/settings/users", status_code=303))


@router.post("/{user_id}/disable")
async def disable_user(request: Request, user_id: UserId) -> Response:
    form = dict((await request.form()).items())
    return await run_in_threadpool(_disable, request, user_id, form)
