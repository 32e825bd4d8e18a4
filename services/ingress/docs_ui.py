"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) served from the installed package, no CDN.

FastAPI's default pages load their JavaScript and CSS from a CDN, so they are blank on a machine
without internet access. The ``fastapi-offline`` distribution ships the same static files
(``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``, a favicon); they are
served under :data:`STATIC_PATH` and the pages reference nothing else: no web fonts, no
validator badge (``validatorUrl: null``).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS", "STATIC_PATH", "install_offline_docs"]

STATIC_PATH = "/static/docs"
ASSETS = Path(fastapi_offline.__file__).parent / "static"
_OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def install_offline_docs(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Add ``/docs``, ``/docs/oauth2-redirect``, ``/redoc`` and the static files to ``app``
    (built with ``docs_url=None, redoc_url=None``)."""
    app.mount(STATIC_PATH, StaticFiles(directory=ASSETS), name="docs-static")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} — API",
            oauth2_redirect_url=_OAUTH2_REDIRECT,
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(_OAUTH2_REDIRECT, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} — API reference",
            redoc_js_url=f"{STATIC_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_PATH}/favicon.png",
            with_google_fonts=False,
        )
