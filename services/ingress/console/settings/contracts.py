"""The workspace contracts screen: list them, one contract's page, upload with each lint error
beside its line."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from services.ingress.api.custom_contracts import lint_upload, store_contract
from services.ingress.console.auth import csrf_ok
from services.ingress.console.render import html
from services.ingress.console.settings.common import (
    admin_session,
    back,
    form_of,
    not_found,
    refused,
)
from services.ingress.deps import app_engine, app_settings, transaction
from services.ingress.problems import ApiError
from shared.core.render import render_page
from shared.db.console_sessions import SignedIn
from shared.lifecycle.contracts import ContractNotFound, find_contract, list_contracts

__all__ = ["router"]

router = APIRouter(prefix="/console/settings", include_in_schema=False)

# Workspace contracts


def _contracts_page(
    request: Request,
    who: SignedIn,
    *,
    status_code: int = 200,
    error: str = "",
    sent: dict[str, Any] | None = None,
) -> Response:
    with transaction(app_engine(request)) as session:
        own = [e for e in list_contracts(session, who.workspace_id) if e.custom_id is not None]
    return html(
        "settings_contracts.html",
        status_code=status_code,
        who=who,
        contracts=own,
        error=error,
        sent=sent or {"format": "yaml", "document": "", "lines": [], "whole": []},
    )


@router.get("/contracts")
def contracts_page(request: Request) -> Response:
    return _contracts_page(request, admin_session(request))


def _lint_shown(document: str, fmt: str, exc: ApiError) -> dict[str, Any]:
    """The document sent, line by line, each lint error beside its line; errors of no line
    (the whole document) apart."""
    by_line: dict[int, list[str]] = {}
    whole: list[str] = []
    for err in exc.errors or []:
        line = getattr(err, "line", None)
        text = f"{err.field}: {err.message}"
        if isinstance(line, int):
            by_line.setdefault(line, []).append(text)
        else:
            whole.append(text)
    lines = [
        {"n": n, "text": text, "errors": by_line.get(n, [])}
        for n, text in enumerate(document.splitlines(), start=1)
    ]
    return {"format": fmt, "document": document, "lines": lines, "whole": whole}


def _store(request: Request, who: SignedIn, contract: Any) -> Response:
    with transaction(app_engine(request)) as session:
        row, _new = store_contract(session, who.workspace_id, contract)
        where = f"/console/settings/contracts/{row.contract_id}?version={row.version}"
    return back(where)


@router.post("/contracts")
async def upload_contract(request: Request) -> Response:
    form = await form_of(request)
    who = await run_in_threadpool(admin_session, request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return refused(who)
    document, fmt = form.get("document", ""), form.get("format", "yaml")
    media_type = "application/json" if fmt == "json" else "application/yaml"
    settings = app_settings(request)
    body = document.replace("\r\n", "\n").encode("utf-8")
    try:
        if len(body) > settings.contract_max_bytes:
            raise ApiError(
                413,
                "body-too-large",
                f"a contract is at most {settings.contract_max_bytes} bytes",
            )
        contract = await lint_upload(
            body, media_type, timeout=settings.contract_parse_timeout_seconds
        )
        return await run_in_threadpool(_store, request, who, contract)
    except ApiError as exc:
        sent = _lint_shown(body.decode("utf-8"), fmt, exc)
        return await run_in_threadpool(
            _contracts_page, request, who, status_code=exc.status, error=exc.detail, sent=sent
        )


def _contract(request: Request, contract_id: str, version: str | None) -> Response:
    who = admin_session(request)
    try:
        with transaction(app_engine(request)) as session:
            entry = find_contract(session, who.workspace_id, contract_id, version)
    except ContractNotFound as exc:
        return not_found(who, f"{str(exc).capitalize()} in this workspace.")
    certification = entry.certification or entry.contract.certification
    page = render_page(entry.contract, digest=entry.hash, certification=certification)
    return html("settings_contract.html", who=who, entry=entry, page=page)


@router.get("/contracts/{contract_id}")
async def contract_page(
    request: Request,
    contract_id: Annotated[str, Path(max_length=200)],
    version: Annotated[str, Query(max_length=40)] = "",
) -> Response:
    return await run_in_threadpool(_contract, request, contract_id, version or None)
