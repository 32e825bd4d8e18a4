"""The contracts an operation may be bound to, and what the runtime knows of a provider's skill.

:func:`contract_for` is the exact contract an operation was created with, checked against its
hash; :func:`find_contract` and :func:`list_contracts` are the look-ups the API uses (shipped
contracts from the registry, then the workspace's own); :func:`provider_skill` is what the API
and the admin CLI need of a provider's skill (base URL, signature scheme, action rejections).

Errors::

    LookupError
    └── ContractNotFound        no such contract (or version) for this workspace
        └── ContractMismatch    the contract found no longer has the operation's hash
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.core.contract import Contract, contract_hash
from shared.db.models import CustomContract, Operation
from shared.trust.registry import get_registry

__all__ = [
    "ContractMismatch",
    "ContractNotFound",
    "ProviderSkill",
    "ResolvedContract",
    "contract_for",
    "find_contract",
    "list_contracts",
    "provider_skill",
    "shipped_contracts",
]


class ContractNotFound(LookupError):
    """No contract with this id (and version) is available to the workspace."""


class ContractMismatch(ContractNotFound):
    """The contract found under the operation's id and version has another hash."""


@dataclass(frozen=True, slots=True)
class ResolvedContract:
    contract: Contract
    hash: str
    custom_id: int | None = None  # custom_contracts.id when the workspace uploaded it
    certification: str | None = None  # overrides the file's (custom, unsigned)


@dataclass(frozen=True, slots=True)
class ProviderSkill:
    """What the API and the admin CLI need to know about a provider's skill."""

    provider: str
    default_base_url: str | None = None
    signature_scheme: str | None = None
    signature_tolerance_seconds: int | None = None
    readback_auth: str | None = None
    rate_limit_per_second: float | None = None
    # (http statuses, error types): a provider answer that means "the action was not performed"
    action_rejections: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = field(default=())

    def rejects(self, http_status: int | None, error: Mapping[str, Any] | None) -> bool:
        """True when this provider answer means the action was refused and not performed."""
        if http_status is None:
            return False
        error_type = _error_type(error)
        for statuses, types in self.action_rejections:
            if http_status in statuses and (not types or error_type in types):
                return True
        return False


def _error_type(error: Mapping[str, Any] | None) -> str | None:
    """The provider's error type: ``{"type": …}`` or Stripe's ``{"error": {"type": …}}``."""
    if not isinstance(error, Mapping):
        return None
    inner = error.get("error")
    if isinstance(inner, Mapping) and isinstance(inner.get("type"), str):
        return str(inner["type"])
    value = error.get("type")
    return value if isinstance(value, str) else None


def shipped_contracts() -> list[ResolvedContract]:
    """Every contract of the registry (``contracts/`` and the configured contract paths)."""
    return [
        ResolvedContract(e.contract, e.hash, None, e.certification)
        for e in get_registry().entries()
    ]


def provider_skill(provider: str) -> ProviderSkill | None:
    """The skill of ``provider`` (default base URL, signature scheme, action rejections)."""
    loaded = get_registry().skill(provider)
    if loaded is None:
        return None
    manifest = loaded.manifest
    return ProviderSkill(
        provider=provider,
        default_base_url=manifest.default_base_url,
        signature_scheme=manifest.signature.scheme if manifest.signature else None,
        signature_tolerance_seconds=(
            manifest.signature.tolerance_seconds if manifest.signature else None
        ),
        readback_auth=manifest.readback.auth if manifest.readback else None,
        rate_limit_per_second=(
            manifest.readback.rate_limit_per_second if manifest.readback else None
        ),
        action_rejections=tuple(
            (tuple(r.http_status), tuple(r.error_type)) for r in manifest.action_rejections
        ),
    )


_custom_cache: dict[tuple[int, str], ResolvedContract] = {}


def _custom(row: CustomContract) -> ResolvedContract:
    """A stored custom contract, parsed once per row (rows are never rewritten)."""
    key = (row.id, row.hash)
    found = _custom_cache.get(key)
    if found is None:
        contract = Contract.model_validate(row.document)
        found = ResolvedContract(contract, contract_hash(contract), row.id, "custom")
        if len(_custom_cache) > 1024:
            _custom_cache.clear()
        _custom_cache[key] = found
    return found


def _shipped(contract_id: str, version: str | None) -> list[ResolvedContract]:
    registry = get_registry()
    versions = registry.versions(contract_id)
    if version is not None:
        versions = [v for v in versions if v == version]
    found = []
    for v in versions:
        entry = registry.entry(contract_id, v)
        found.append(ResolvedContract(entry.contract, entry.hash, None, entry.certification))
    return found


def contract_for(session: Session, op: Operation) -> Contract:
    """The contract ``op`` was created with; raises ContractMismatch when its hash changed."""
    if op.custom_contract_id is not None:
        row = session.get(CustomContract, op.custom_contract_id)
        if row is None or row.workspace_id != op.workspace_id:
            raise ContractNotFound(f"custom contract {op.custom_contract_id} is gone")
        resolved = _custom(row)
    else:
        entry = get_registry().by_hash(op.contract_hash)
        if (
            entry is not None
            and entry.contract.id == op.contract_id
            and entry.contract.version == op.contract_version
        ):
            return entry.contract
        resolved = find_contract(session, op.workspace_id, op.contract_id, op.contract_version)
    if resolved.hash != op.contract_hash:
        raise ContractMismatch(
            f"{op.contract_id} {op.contract_version} has hash {resolved.hash[:16]}, "
            f"the operation was created with {op.contract_hash[:16]}"
        )
    return resolved.contract


def list_contracts(session: Session, workspace_id: str) -> list[ResolvedContract]:
    """Every contract the workspace may use: shipped ones, then its own; by id and version."""
    found = shipped_contracts()
    rows = session.execute(
        select(CustomContract).where(CustomContract.workspace_id == workspace_id)
    ).scalars()
    found.extend(_custom(row) for row in rows)
    found.sort(key=lambda r: (r.contract.id, r.contract.version_key))
    return found


def find_contract(
    session: Session, workspace_id: str, contract_id: str, version: str | None = None
) -> ResolvedContract:
    """The contract ``contract_id`` at ``version`` (default: the newest) for the workspace.

    A shipped contract id is looked up in the registry only: a workspace cannot shadow it
    (``POST /v1/contracts`` refuses shipped ids). Other ids are the workspace's own contracts.
    Raises ``shared.trust.registry.RegistryError`` when the shipped contracts cannot be loaded.
    """
    if get_registry().versions(contract_id):
        candidates = _shipped(contract_id, version)
    else:
        query = select(CustomContract).where(
            CustomContract.workspace_id == workspace_id,
            CustomContract.contract_id == contract_id,
        )
        if version is not None:
            query = query.where(CustomContract.version == version)
        candidates = [_custom(row) for row in session.execute(query).scalars()]
    if not candidates:
        wanted = contract_id if version is None else f"{contract_id} {version}"
        raise ContractNotFound(f"no contract {wanted}")
    return max(candidates, key=lambda r: r.contract.version_key)
