"""``POST /v1/contracts``: a workspace uploads a contract of its own (certification ``custom``).

The body is the contract document, YAML or JSON as its ``Content-Type`` says. It is linted by
``shared.core.lint.document.validate_contract`` — the checks and the messages of ``provely
contracts lint`` — and, when clean, stored in ``custom_contracts`` for the caller's workspace
only. Other workspaces never see it (``GET /v1/contracts`` lists shipped contracts and the
caller's own) and cannot bind operations to it. An operation created on it keeps deciding with
exactly the stored document (``shared.lifecycle.contracts.contract_for`` checks the hash).

Answers:

- 201 stored (``Location: /v1/contracts/{id}?version=…``); 200 when the same id and version
  were already stored with the same content (a repeat is harmless);
- 400 a body that is not UTF-8 YAML/JSON (YAML anchors and aliases are refused: a contract never
  needs them and they can blow a small body up); 415 another media type; 413 a body larger than
  ``PROVELY_CONTRACT_MAX_BYTES`` (64 KiB; reading stops there);
- 422 a document that takes longer than ``PROVELY_CONTRACT_PARSE_TIMEOUT_SECONDS`` to parse and
  lint (``contract-too-complex``), or holds a value no table can hold (``unstorable-value``);
- 422 lint errors: ``errors`` lists ``{file, contract, field, message, line}``, ``file`` being
  ``<request>``, exactly what the CLI prints for the same document, and ``line`` the field's
  line in the body (``services.ingress.contract_lines``) so that a form can show it there; also
  an ``http`` channel whose path is not among the paths its provider's skill declares
  (``readback.paths``): with the workspace's stored credentials a contract reads only what the
  skill says its contracts read, never any GET of the provider; likewise a query parameter (or,
  for a parameter that names a resource such as Stripe's ``expand[]``, a value) the skill does
  not declare for that path (``readback.query``), named in the error;
- 409 the id and version exist with other content (raise the version), or the id is a shipped
  contract's (a workspace contract cannot shadow the registry);
- 403 the key is not an admin key of the workspace: contracts decide verdicts, so uploading one
  is an operator's act, not an agent's.

Parsing, lint and hashing are CPU work on what a tenant sent: they run in a worker thread
(``anyio.to_thread``), never on the event loop, so ``/healthz`` and the webhook intake answer
while a contract is read; the size bound keeps that work small and the time bound answers the
caller when it is not.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.to_thread
import yaml
from fastapi import APIRouter, Request, Response
from pydantic import Field
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.ingress.api.schemas import ContractSummary
from services.ingress.contract_lines import field_lines
from services.ingress.deps import AdminCaller, app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError, FieldProblem, error_responses, unstorable_problem
from shared.core.contract import Contract, contract_hash
from shared.core.lint.document import validate_contract
from shared.core.lint.findings import LintError
from shared.core.lint.skill import lint_readback_paths
from shared.core.queries import QueryDeclaration
from shared.core.storable import unstorable
from shared.db.models import CustomContract
from shared.trust.registry import RegistryError, get_registry

__all__ = [
    "JSON_TYPES",
    "REQUEST_FILE",
    "YAML_TYPES",
    "LintProblem",
    "lint_upload",
    "router",
    "store_contract",
]

router = APIRouter(prefix="/v1/contracts", tags=["contracts"])

REQUEST_FILE = "<request>"
"""The file name lint messages carry for an uploaded document."""

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
CUSTOM = "custom"


class LintProblem(FieldProblem):
    """One lint finding, as ``provely contracts lint`` reports it."""

    file: str = Field(description="Always `<request>` for an uploaded document.")
    contract: str = Field(description="The contract id as the document gives it (`?` if none).")
    line: int | None = Field(
        default=None,
        description="The field's line in the document sent (a missing field: the line of the "
        "nearest field above it); null for the whole document.",
    )


def _problem(err: LintError, lines: dict[str, int] | None = None) -> LintProblem:
    return LintProblem(
        file=err.file,
        contract=err.subject,
        field=err.field,
        message=err.message,
        line=(lines or {}).get(err.field),
    )


def _media_type(request: Request) -> str:
    raw = request.headers.get("content-type", "")
    return raw.split(";", 1)[0].strip().lower()


def _unreadable(message: str) -> ApiError:
    err = LintError(REQUEST_FILE, "?", "(document)", message)
    return ApiError(400, "malformed-contract", str(err), errors=[_problem(err)])


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when built


def _no_aliases(text: str) -> None:
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _unreadable("YAML anchors and aliases are not accepted in a contract")


def parse_body(body: bytes, media_type: str) -> Any:
    """The uploaded document as data; :class:`ApiError` 400/415 when it cannot be read."""
    is_json = media_type in JSON_TYPES or media_type.endswith("+json")
    if not is_json and media_type not in YAML_TYPES:
        accepted = ", ".join(sorted(JSON_TYPES | YAML_TYPES))
        raise ApiError(
            415,
            "unsupported-media-type",
            f"send the contract as YAML or JSON (Content-Type: {accepted})",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _unreadable("the body is not UTF-8 text") from None
    if not text.strip():
        raise _unreadable("the body is empty")
    if is_json:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise _unreadable(f"not valid JSON: line {exc.lineno}: {exc.msg}") from None
        except RecursionError:
            raise _unreadable("not valid JSON: nested too deeply") from None
    try:
        _no_aliases(text)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise _unreadable(f"not valid YAML: {where}{problem}") from None
    except RecursionError:
        raise _unreadable("not valid YAML: nested too deeply") from None


def _summary(contract: Contract, digest: str) -> ContractSummary:
    return ContractSummary(
        id=contract.id,
        version=contract.version,
        title=contract.title,
        completion_level=contract.completion_level,
        certification=CUSTOM,
        provider=contract.skill.provider,
        hash=digest,
        custom=True,
    )


def _shipped_ids() -> set[str]:
    try:
        return set(get_registry().ids())
    except RegistryError as exc:
        raise ApiError(503, "unavailable", "the contract registry cannot be loaded") from exc


def _stored(session: Session, workspace_id: str, contract: Contract) -> CustomContract | None:
    return session.execute(
        select(CustomContract).where(
            CustomContract.workspace_id == workspace_id,
            CustomContract.contract_id == contract.id,
            CustomContract.version == contract.version,
        )
    ).scalar_one_or_none()


def _conflict(row: CustomContract, digest: str) -> ApiError:
    return ApiError(
        409,
        "contract-conflict",
        f"{row.contract_id} {row.version} is already stored with other content (hash "
        f"{row.hash[:16]}, this one {digest[:16]}); give the changed contract a new version",
        stored_hash=row.hash,
    )


def store_contract(
    session: Session, workspace_id: str, contract: Contract
) -> tuple[CustomContract, bool]:
    """Store ``contract`` for the workspace; ``(row, new)``. Raises 409 on a conflict."""
    digest = contract_hash(contract)
    if contract.id in _shipped_ids():
        raise ApiError(
            409,
            "contract-id-taken",
            f"{contract.id} is the id of a shipped contract; a workspace contract needs an id "
            "of its own (for example with your company's prefix)",
        )
    existing = _stored(session, workspace_id, contract)
    if existing is None:
        row = CustomContract(
            workspace_id=workspace_id,
            contract_id=contract.id,
            version=contract.version,
            hash=digest,
            document=contract.document(),
            created_at=now(),
        )
        try:
            with session.begin_nested():
                session.add(row)
                session.flush()
            return row, True
        except IntegrityError:  # a concurrent upload of the same id and version won
            existing = _stored(session, workspace_id, contract)
            if existing is None:
                raise
    if existing.hash != digest:
        raise _conflict(existing, digest)
    return existing, False


def _outside_declared_paths(contract: Contract) -> list[LintError]:
    """Lint errors for the contract's readbacks outside its providers' ``readback.paths``: a
    workspace contract reads only what a loaded skill declares (a provider without a skill, or
    whose skill declares no paths, cannot be read by one)."""
    try:
        registry = get_registry()
    except RegistryError as exc:
        raise ApiError(503, "unavailable", "the contract registry cannot be loaded") from exc
    declared: dict[str, tuple[str, ...] | None] = {}
    queries: dict[str, QueryDeclaration | None] = {}
    for channel in contract.channels:
        if channel.http is None:
            continue
        provider = channel.provider_of(contract)
        skill = registry.skill(provider)
        readback = skill.manifest.readback if skill is not None else None
        declared[provider] = readback.paths if readback is not None else None
        queries[provider] = readback.query if readback is not None else None
    return lint_readback_paths(contract, declared, file=REQUEST_FILE, queries=queries)


def _lint(body: bytes, media_type: str) -> Contract:
    """The uploaded document parsed, checked storable and linted (in a worker thread)."""
    data = parse_body(body, media_type)
    found = unstorable(data)
    if found is not None:
        raise unstorable_problem(found)
    contract, errors = validate_contract(data, file=REQUEST_FILE)
    if contract is not None:
        errors = _outside_declared_paths(contract)
        if errors:
            contract = None
    if contract is None:
        shown = "; ".join(str(e) for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        lines = field_lines(body.decode("utf-8"), (e.field for e in errors))
        raise ApiError(
            422,
            "invalid-contract",
            f"the contract does not lint: {shown}{more}",
            errors=[_problem(e, lines) for e in errors],
        )
    return contract


async def lint_upload(body: bytes, media_type: str, *, timeout: float) -> Contract:
    """The uploaded document parsed and linted in a worker thread, within ``timeout`` seconds:
    what ``POST /v1/contracts`` and the console's upload form both do. Raises :class:`ApiError`
    (400, 415, 422 with ``errors`` carrying each finding's line)."""
    try:
        with anyio.fail_after(timeout):
            return await anyio.to_thread.run_sync(_lint, body, media_type, abandon_on_cancel=True)
    except TimeoutError:
        raise ApiError(
            422,
            "contract-too-complex",
            f"the contract did not parse and lint within {timeout:g} s "
            "(PROVELY_CONTRACT_PARSE_TIMEOUT_SECONDS); send a smaller document",
        ) from None


def _create(
    request: Request, workspace_id: str, contract: Contract
) -> tuple[ContractSummary, bool]:
    with transaction(app_engine(request)) as session:
        row, new = store_contract(session, workspace_id, contract)
        return _summary(contract, row.hash), new


async def _read_bounded(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` bytes."""
    too_large = ApiError(
        413,
        "body-too-large",
        f"a contract is at most {limit} bytes (PROVELY_CONTRACT_MAX_BYTES)",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk
        if len(buffer) > limit:
            raise too_large
    return bytes(buffer)


@router.post(
    "",
    status_code=201,
    response_model=ContractSummary,
    responses={
        200: {"model": ContractSummary, "description": "Already stored with the same content."},
        **error_responses(400, 401, 403, 409, 413, 415, 422),
    },
    summary="Upload a contract for this workspace only (YAML or JSON; certification custom)",
    operation_id="upload_contract",
    description=(
        "Store a contract (YAML or JSON) that only this workspace can use; it is linted first and "
        "its certification is `custom`. The same content again answers 200; another content under "
        "the same id and version is a 409. Needs an admin key."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/yaml": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    },
)
async def upload(request: Request, response: Response, who: AdminCaller) -> ContractSummary:
    settings = app_settings(request)
    body = await _read_bounded(request, settings.contract_max_bytes)
    contract = await lint_upload(
        body, _media_type(request), timeout=settings.contract_parse_timeout_seconds
    )
    summary, new = await run_in_threadpool(_create, request, who.workspace_id, contract)
    response.status_code = 201 if new else 200
    response.headers["Location"] = f"/v1/contracts/{summary.id}?version={summary.version}"
    return summary
