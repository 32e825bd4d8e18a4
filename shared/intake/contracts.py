"""What the intake reads of the registry: a provider's event shape, the contract an operation
was created with, the providers whose events may correlate with a contract, the names of the
fingerprint keys a provider's contracts correlate on, and why no registered contract can count
an event (:func:`uncounted_by_contracts`: its type, or its API version).

The registry module is loaded at first use (it costs about 0.2 s); what correlation derives
from a contract is computed once per contract object (:func:`derived_of_contract`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from sqlalchemy.orm import Session

from shared.core.contract import Contract
from shared.core.skill import EventShape
from shared.core.verifiers import verifier_of
from shared.db.models import Operation

__all__ = [
    "DEFAULT_SHAPES",
    "contract_of",
    "event_providers",
    "event_shape_for",
    "fingerprint_key_names",
    "read_api_versions",
    "uncounted_by_contracts",
]

log = logging.getLogger(__name__)

DEFAULT_SHAPES: Mapping[str, EventShape] = {
    # Used when the provider's skill declares no event shape, by the connection's scheme.
    "stripe": EventShape(
        id="$event.id",
        type="$event.type",
        created="$event.created",
        api_version="$event.api_version",
        object="$event.data.object",
        object_id="$event.data.object.id",
        idempotency_key="$event.request.idempotency_key",
        correlation_keys={
            "object_id": "$event.data.object.id",
            "idempotency_key": "$event.request.idempotency_key",
        },
    ),
    "standard_webhooks": EventShape(
        id="$delivery.id",
        type="$event.type",
        created="$event.timestamp",
        object="$event.data",
        object_id="$event.data.id",
        correlation_keys={"object_id": "$event.data.id"},
    ),
    "github": EventShape(
        id="$delivery.id",
        type="$delivery.event_type",
        created="$delivery.received_at",
        object="$event",
        correlation_keys={},
    ),
}


@cache
def _registry_module() -> Any:
    from shared.trust import registry  # at first use: loading the registry module costs ~0.2 s

    return registry


def _registry() -> Any:
    return _registry_module().get_registry()


def event_shape_for(provider: str, scheme: str) -> EventShape:
    """The provider skill's event shape, else the default shape of the signature scheme."""
    skill = _registry().skill(provider)
    shape = skill.manifest.event_shape if skill is not None else None
    if shape is not None:
        return shape  # type: ignore[no-any-return]
    return DEFAULT_SHAPES.get(scheme, DEFAULT_SHAPES["stripe"])


def event_providers(contract: Contract) -> frozenset[str]:
    """Providers whose events may correlate with the contract's operations: the skill's, and
    the provider each webhook channel names (an app contract may read Stripe's events)."""
    return frozenset(
        {contract.skill.provider}
        | {ch.provider_of(contract) for ch in contract.channels if verifier_of(ch).brings_events}
    )


def fingerprint_key_names(provider: str) -> frozenset[str]:
    """Names of the fingerprint keys the provider's shipped contracts correlate on."""
    registry = _registry()
    cached = _fingerprint_names.get(provider)
    if cached is not None and cached[0] is registry:
        return cached[1]
    names: set[str] = set()
    for entry in registry.entries():
        contract: Contract = entry.contract
        if provider not in event_providers(contract):
            continue
        for strategy in contract.correlation:
            if strategy.strategy == "fingerprint":
                names.update(key.name for key in strategy.keys)
    found = frozenset(names)
    _fingerprint_names[provider] = (registry, found)
    return found


# provider -> (the registry it was computed from, names); recomputed when the registry changes
_fingerprint_names: dict[str, tuple[Any, frozenset[str]]] = {}


def _readers(registry: Any, provider: str, event_type: str) -> list[Contract]:
    """The registered contracts with a webhook channel that reads ``event_type`` of
    ``provider``."""
    found = []
    for entry in registry.entries():
        contract: Contract = entry.contract
        for ch in contract.channels:
            webhook = ch.webhook
            if (
                webhook is not None
                and ch.provider_of(contract) == provider
                and event_type in webhook.event_types
            ):
                found.append(contract)
                break
    return found


def read_api_versions(provider: str) -> list[str]:
    """The API versions the registered contracts that read ``provider``'s events name, sorted
    (what an endpoint of that provider must send for its events to count)."""
    versions: set[str] = set()
    for entry in _registry().entries():
        contract: Contract = entry.contract
        if any(
            ch.webhook is not None and ch.provider_of(contract) == provider
            for ch in contract.channels
        ):
            versions.update(contract.provider_api_versions)
    return sorted(versions)


def uncounted_by_contracts(
    provider: str, event_type: str, api_version: str | None
) -> tuple[str, str] | None:
    """Why no registered contract can count an event of ``provider`` (``type_unread``: no
    channel reads its type; ``api_version``: every contract that reads it names other API
    versions), with a phrase that says it; ``None`` when one may. Computed once per registry
    and (provider, type, version)."""
    registry = _registry()
    key = (provider, event_type, api_version)
    cached = _uncounted.get(key)
    if cached is not None and cached[0] is registry:
        return cached[1]
    readers = _readers(registry, provider, event_type)
    found: tuple[str, str] | None = None
    if not readers:
        found = ("type_unread", f"no contract of {provider} reads {event_type}")
    elif all(
        c.provider_api_versions and api_version not in c.provider_api_versions for c in readers
    ):
        versions = sorted({v for c in readers for v in c.provider_api_versions})
        shown = api_version if api_version is not None else "(none)"
        found = ("api_version", f"api_version {shown} is not among {', '.join(versions)}")
    if len(_uncounted) >= 4096:
        _uncounted.clear()
    _uncounted[key] = (registry, found)
    return found


_uncounted: dict[tuple[str, str, str | None], tuple[Any, tuple[str, str] | None]] = {}


def registry_contract(contract_hash: str) -> Contract | None:
    """A contract of the registry by its hash (None: a custom contract, or one no longer
    registered)."""
    entry = _registry().by_hash(contract_hash)
    return None if entry is None else entry.contract


def contract_of(session: Session, operation: Operation) -> Contract | None:
    """The contract an operation was created with (None when it can no longer be found)."""
    contract = registry_contract(operation.contract_hash)
    if contract is not None:
        return contract
    from shared.lifecycle.contracts import ContractNotFound, contract_for

    try:
        return contract_for(session, operation)
    except ContractNotFound:
        log.warning(
            "operation %s: contract not found, not correlated",
            operation.id,
            extra={"operation_id": operation.id},
        )
        return None


_contract_memo: dict[tuple[int, str], tuple[Contract, Any]] = {}
"""What correlation derives from a contract, by contract object and what (contracts are
frozen; an entry holds its contract, so the id cannot be another's while the entry lives)."""


def derived_of_contract(contract: Contract, what: str, derive: Callable[[], Any]) -> Any:
    """``derive()`` for ``contract``, computed once per contract object."""
    memo = _contract_memo.get((id(contract), what))
    if memo is not None and memo[0] is contract:
        return memo[1]
    value = derive()
    if len(_contract_memo) >= 4096:  # custom contracts come and go: keep it bounded
        _contract_memo.clear()
    _contract_memo[(id(contract), what)] = (contract, value)
    return value
