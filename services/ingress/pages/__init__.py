"""The published pages: every shipped contract and skill as a public web page, the definitions
their links reach, and a receipt check that runs in the browser.

Owns the ``/verify`` addresses of the ingress (no API key): the index, a skill's page, a
contract's page (newest or a given version), the definitions under ``/verify/terms/…``, the
receipt check at ``/verify/receipt`` and the pages' own assets under ``/verify/static/``.
A page is the document ``shared.core.render`` / ``shared.core.published`` build from the
registry's facts, written as HTML by :mod:`.html` (Jinja2, autoescaped) or, on
``Accept: text/markdown``, as Markdown; ``Accept: application/json`` gets the contract (or
skill) document itself (:mod:`.negotiation`). Only the registry's contracts are published,
never a workspace's uploads.

May import: ``shared.core``, ``shared.trust`` (the registry), FastAPI/Starlette and Jinja2;
never another service, and never the database (the pages need none).

Errors: an unknown provider, contract, version or page is :class:`PageNotFound`, answered as a
404 HTML page linking back to ``/verify`` (never a problem document, never a 500)::

    LookupError
    └── PageNotFound
"""

from services.ingress.pages.catalog import PageNotFound
from services.ingress.pages.routes import install_pages

__all__ = ["PageNotFound", "install_pages"]
