"""The ``/verify`` routes: index, skill, contract (newest or a version), definitions, receipt
check, assets, and the 404 page for every other address under ``/verify``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from services.ingress.pages.catalog import (
    PageNotFound,
    all_skills,
    contract_versions,
    find_skill,
    registry_digest,
)
from services.ingress.pages.html import render_document, render_template
from services.ingress.pages.negotiation import MEDIA_TYPES, Format, page_headers, preferred_format
from services.ingress.pages.terms import term_context
from shared.core.document import Document, to_markdown
from shared.core.published import (
    TERMS,
    PublishedContract,
    index_document,
    read_next,
    skill_document,
    versions_section,
)
from shared.core.render import contract_document

__all__ = ["install_pages", "router"]

STATIC = Path(__file__).parent / "static"
PAGES_REVISION = "1"
"""Part of every ETag: bump it when the templates change what a page says."""
FORMATS = (("Markdown", "text/markdown"), ("the JSON document", "application/json"))
_WRITTEN: dict[str, bytes] = {}
"""Pages already written, by ETag (bounded: emptied when it reaches ``_WRITTEN_MAX``)."""
_WRITTEN_MAX = 512

router = APIRouter(prefix="/verify", include_in_schema=False)

Name = Annotated[str, PathParam(max_length=200)]


def _etag(*parts: str) -> str:
    return f'"{registry_digest(PAGES_REVISION, *parts)}"'


def _not_modified(request: Request, etag: str) -> bool:
    sent = request.headers.get("if-none-match", "")
    return etag in [tag.strip() for tag in sent.split(",")] or sent.strip() == "*"


def _answer(
    request: Request,
    *,
    build: Callable[[], tuple[Document, Any]],
    keys: tuple[str, ...],
    contents: bool = False,
) -> Response:
    """The page in the format the Accept header prefers, with its ETag (304 when it matches).

    ``build`` makes the document and the JSON body; it runs only when this format of these
    ``keys`` (contract hashes, skill version, certification) was not written before: a page is
    a function of its keys, so its text is kept by ETag (:data:`_WRITTEN`).
    """
    fmt: Format = preferred_format(request.headers.get("accept"))
    etag = _etag(fmt, *keys)
    headers = page_headers(etag=etag)
    if _not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    body = _WRITTEN.get(etag)
    if body is None:
        document, json_body = build()
        body = _write(fmt, document, json_body, contents=contents).encode()
        if len(_WRITTEN) >= _WRITTEN_MAX:
            _WRITTEN.clear()
        _WRITTEN[etag] = body
    return Response(body, media_type=MEDIA_TYPES[fmt], headers=headers)


def _write(fmt: Format, document: Document, json_body: Any, *, contents: bool) -> str:
    if fmt == "markdown":
        return to_markdown(document)
    if fmt == "json":
        return json.dumps(json_body, ensure_ascii=False, sort_keys=True)
    return render_document(document, contents=contents, formats=FORMATS)


def _html(request: Request, body: str, *, status: int = 200) -> Response:
    etag = f'"{hashlib.sha256(body.encode()).hexdigest()[:32]}"'
    headers = page_headers(etag=etag if status == 200 else None)
    if status == 200 and _not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    return HTMLResponse(body, status_code=status, headers=headers)


@router.get("")
def index(request: Request) -> Response:
    skills = all_skills()
    keys = tuple(e.hash for s in skills for e in s.contracts)
    listing = {
        "skills": [
            {
                "provider": s.provider,
                "version": s.version,
                "address": f"/verify/{s.provider}",
                "contracts": [_listed(e) for e in s.contracts],
            }
            for s in skills
        ]
    }
    return _answer(request, build=lambda: (index_document(skills), listing), keys=keys)


def _listed(entry: PublishedContract) -> dict[str, str]:
    c = entry.contract
    return {
        "id": c.id,
        "version": c.version,
        "hash": entry.hash,
        "completion_level": c.completion_level,
        "address": f"/verify/{c.skill.provider}/{c.id}",
    }


@router.get("/receipt")
def receipt(request: Request) -> Response:
    return _html(request, render_template("receipt.html", title="Check a receipt"))


@router.get("/terms/{name}")
def term(request: Request, name: Name) -> Response:
    if name not in TERMS:
        raise PageNotFound(f"no definition page {name!r}")
    body = render_template(f"terms/{name}.html", title=TERMS[name], **term_context(name))
    return _html(request, body)


@router.get("/{provider}")
def skill(request: Request, provider: Name) -> Response:
    published = find_skill(provider)
    loaded = {
        "provider": published.provider,
        "version": published.version,
        "title": published.title,
        "certification": published.certification,
        "key_id": published.key_id,
        "signature_scheme": published.signature_scheme,
        "readback_paths": list(published.readback_paths),
        "contracts": [_listed(e) for e in published.contracts],
    }
    keys = (published.version, published.certification, *(e.hash for e in published.contracts))
    return _answer(request, build=lambda: (skill_document(published), loaded), keys=keys)


def _contract_page(
    request: Request, provider: str, contract_id: str, version: str | None
) -> Response:
    versions = contract_versions(provider, contract_id)
    chosen = versions[-1] if version is None else _version(versions, version)
    c = chosen.contract
    skill_title = provider.capitalize()
    siblings: list[Any] = []
    try:
        published = find_skill(provider)
        skill_title = published.title
        siblings = [e.contract for e in published.contracts]
    except PageNotFound:
        pass

    def build() -> tuple[Document, Any]:
        document = contract_document(
            c, digest=chosen.hash, certification=chosen.certification, skill_title=skill_title
        ).extended(
            *versions_section(versions, shown=c.version),
            *read_next(c, siblings, skill_title=skill_title),
        )
        return document, c.document()

    keys = (chosen.hash, chosen.certification, skill_title, *(v.hash for v in versions))
    return _answer(request, build=build, keys=keys, contents=True)


def _version(versions: list[PublishedContract], version: str) -> PublishedContract:
    for entry in versions:
        if entry.contract.version == version:
            return entry
    raise PageNotFound(f"no published version {version!r}")


@router.get("/{provider}/{contract_id}")
def contract(request: Request, provider: Name, contract_id: Name) -> Response:
    return _contract_page(request, provider, contract_id, None)


@router.get("/{provider}/{contract_id}/{version}")
def contract_version(
    request: Request, provider: Name, contract_id: Name, version: Name
) -> Response:
    return _contract_page(request, provider, contract_id, version)


@router.get("/{rest:path}")
def elsewhere(rest: str) -> Response:
    raise PageNotFound(f"no page at /verify/{rest}")


def _not_found(request: Request, exc: Exception) -> Response:
    body = render_template("not_found.html", title="No such page", reason=str(exc))
    return _html(request, body, status=404)


def install_pages(app: FastAPI) -> None:
    """Serve the pages on ``app``: assets first, then the routes, then the 404 page."""
    app.mount("/verify/static", StaticFiles(directory=STATIC), name="pages-static")
    app.include_router(router)
    app.add_exception_handler(PageNotFound, _not_found)
