"""``/v1/contracts``: the contracts a workspace may bind operations to, with their pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from services.ingress.api.schemas import ContractDetail, ContractList, ContractSummary
from services.ingress.deps import Caller, app_engine, transaction
from services.ingress.problems import ApiError, error_responses
from shared.core.render import render_page
from shared.lifecycle.contracts import (
    ContractNotFound,
    ResolvedContract,
    find_contract,
    list_contracts,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/contracts", tags=["contracts"])


def _summary(entry: ResolvedContract) -> ContractSummary:
    c = entry.contract
    return ContractSummary(
        id=c.id,
        version=c.version,
        title=c.title,
        completion_level=c.completion_level,
        certification=entry.certification or c.certification,
        provider=c.skill.provider,
        hash=entry.hash,
        custom=entry.custom_id is not None,
    )


@router.get(
    "",
    response_model=ContractList,
    responses=error_responses(401),
    summary="Contracts this workspace may use (shipped and its own)",
    operation_id="list_contracts",
    description=(
        "Every contract an operation of this workspace can be bound to: the shipped skills' "
        "contracts and the workspace's own uploads, with version, completion level and hash."
    ),
)
def list_all(request: Request, who: Caller) -> ContractList:
    with transaction(app_engine(request)) as session:
        entries = list_contracts(session, who.workspace_id)
    return ContractList(data=[_summary(e) for e in entries])


@router.get(
    "/{contract_id}",
    response_model=ContractDetail,
    responses=error_responses(401, 404),
    summary="One contract: its hash, its document and its rendered page",
    operation_id="get_contract",
    description=(
        "One contract (the newest version unless `version` is given): its canonical document, the "
        "sha256 hash operations and receipts cite, and its rendered Markdown page."
    ),
)
def get_one(
    request: Request,
    contract_id: Annotated[str, Path(max_length=200)],
    who: Caller,
    version: Annotated[str | None, Query(max_length=40, pattern=r"^\d+\.\d+\.\d+$")] = None,
) -> ContractDetail:
    with transaction(app_engine(request)) as session:
        try:
            entry = find_contract(session, who.workspace_id, contract_id, version)
        except ContractNotFound as exc:
            raise ApiError(404, "not-found", str(exc)) from None
    summary = _summary(entry)
    page = render_page(entry.contract, digest=entry.hash, certification=summary.certification)
    return ContractDetail(**summary.model_dump(), page=page, document=entry.contract.document())
