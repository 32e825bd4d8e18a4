"""The operators' console at ``/console``: server-rendered pages for the people of a workspace.

Owns: signing in with the workspace's admin key or as a console user an admin created (a
server-side session in a cookie, a CSRF token per session on every form, refused sign-ins
counted in the record and slowed), the operations list (filters, keyset paging, verdicts
refreshed by polling a small JSON answer), one operation as a timeline with its receipts, the
review queue, and, for admin-key sessions, the settings screens (API keys, provider connections,
workspace contracts, console users), each form an action of the settings API. Templates are in
``templates/`` and the CSS and plain JavaScript in ``static/``, shipped in the wheel; nothing is
loaded from elsewhere and nothing is built.

Modules:

- ``render``   the template environment and the headers every console answer carries (CSP…)
- ``auth``     the session cookie, the CSRF check, sign-in limits; ``SignInRequired``
- ``sign_in``  ``/console/sign-in`` and ``/console/sign-out``
- ``pages``    operations, one operation, the live JSON, the review queue and a review
- ``settings`` API keys, connections and workspace contracts; ``API_OPERATIONS`` names the
               API endpoint of each action
- ``users``    the console users of the workspace (admin-key sessions): list, create, disable

May import: the ingress's own views, listing and lookups (a page shows what the API shows, read
the same way), the contract upload's lint and store and the settings API's request models (a
form does what its endpoint does), ``shared.lifecycle``, ``shared.intake``'s connection check,
``shared.db`` and the runtime settings; never another service, and never the tables directly
where a view or a lifecycle function exists.

Errors::

    SignInRequired (auth)   no live session: answered with a redirect to the sign-in page
    ApiError 404           (services.ingress.problems) an operation of no workspace of the
                            session: answered as the console's own 404 page
    AdminSessionRequired   (settings) a settings page asked by a session an admin key did not
                            open (a console user's): answered 403
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from services.ingress.console.auth import SignInRequired, redirect_to_sign_in
from services.ingress.console.pages import router as pages_router
from services.ingress.console.render import STATIC
from services.ingress.console.settings import AdminSessionRequired, refuse_non_admin
from services.ingress.console.settings import router as settings_router
from services.ingress.console.sign_in import router as sign_in_router
from services.ingress.console.users import router as users_router

__all__ = ["install_console"]


def install_console(app: FastAPI) -> None:
    """Serve the console (its pages and static files) from ``app``."""
    app.include_router(sign_in_router)
    app.include_router(pages_router)
    app.include_router(settings_router)
    app.include_router(users_router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    app.add_exception_handler(SignInRequired, redirect_to_sign_in)
    app.add_exception_handler(AdminSessionRequired, refuse_non_admin)
