"""``/v1/console-users``: the people of a workspace who sign in to the console with an email
and a password instead of an admin key — list them, create one, disable one.

Creating a user answers the password the server generated for it, once (``Cache-Control:
no-store``); nobody chooses it: a generated password is never weak or reused, and it names its
user, so a sign-in checks exactly one hash whatever was typed (``shared.trust.passwords``).
Disabling a user revokes its live console sessions in the same transaction: its next page is
the sign-in page. A disabled user is kept (reviews name it) and cannot be enabled again:
create a new one. Another workspace's user id is answered 404, as an unknown one is.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from services.ingress.deps import AdminCaller, app_engine, now, transaction
from services.ingress.problems import ApiError, error_responses
from services.ingress.settings.models import (
    ConsoleUserCreated,
    ConsoleUserIn,
    ConsoleUserList,
    ConsoleUserOut,
)
from shared.db.console_users import (
    ConsoleUserExists,
    create_console_user,
    disable_console_user,
    list_console_users,
)
from shared.db.models import ConsoleUser
from shared.db.tenants import TenantError

__all__ = ["router", "user_out"]

router = APIRouter(prefix="/v1/console-users", tags=["settings"])

UserId = Annotated[str, Path(min_length=1, max_length=40, pattern=r"^cu_[A-Za-z0-9_-]+$")]


def user_out(row: ConsoleUser) -> ConsoleUserOut:
    return ConsoleUserOut(
        id=row.id,
        email=row.email,
        role="reviewer",
        created_at=row.created_at,
        last_sign_in_at=row.last_sign_in_at,
        disabled_at=row.disabled_at,
    )


@router.get(
    "",
    response_model=ConsoleUserList,
    responses=error_responses(401, 403),
    summary="List the workspace's console users",
    operation_id="list_console_users",
    description=(
        "Every console user of the workspace, disabled ones included, oldest first: id, email, "
        "role, and when each was created, last signed in and disabled. Never a password. "
        "Needs an admin key."
    ),
)
def list_users(request: Request, who: AdminCaller) -> ConsoleUserList:
    with transaction(app_engine(request)) as session:
        return ConsoleUserList(
            data=[user_out(row) for row in list_console_users(session, who.workspace_id)]
        )


@router.post(
    "",
    response_model=ConsoleUserCreated,
    status_code=201,
    responses=error_responses(401, 403, 409, 422),
    summary="Create a console user",
    operation_id="create_console_user",
    description=(
        "A new console user of the workspace: they sign in to `/console` with this email and "
        "the password in the answer, shown once (only a salted scrypt hash is stored). A "
        "console user reads operations and reviews them; managing the workspace needs an "
        "admin key. 409 `console-user-exists` when the email already has a user here. Needs "
        "an admin key."
    ),
)
def create_user(
    request: Request, response: Response, body: ConsoleUserIn, who: AdminCaller
) -> ConsoleUserCreated:
    with transaction(app_engine(request)) as session:
        try:
            row, password = create_console_user(
                session, who.workspace_id, email=body.email, now=now()
            )
        except ConsoleUserExists as exc:
            raise ApiError(409, "console-user-exists", str(exc)) from None
        except TenantError as exc:
            raise ApiError(422, "invalid-request", str(exc)) from None
        created = ConsoleUserCreated(**user_out(row).model_dump(), password=password)
    response.headers["Cache-Control"] = "no-store"
    return created


@router.delete(
    "/{user_id}",
    response_model=ConsoleUserOut,
    responses=error_responses(401, 403, 404),
    summary="Disable a console user",
    operation_id="disable_console_user",
    description=(
        "Disables the user and revokes its console sessions at once: its next request is "
        "sent to the sign-in page, and its password opens nothing. Disabling a disabled user "
        "changes nothing. Needs an admin key."
    ),
)
def disable_user(request: Request, user_id: UserId, who: AdminCaller) -> ConsoleUserOut:
    with transaction(app_engine(request)) as session:
        try:
            row = disable_console_user(session, who.workspace_id, user_id, now=now())
        except TenantError:
            raise ApiError(404, "not-found", f"no console user {user_id}") from None
        return user_out(row)
