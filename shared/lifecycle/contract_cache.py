"""The contract of an operation, memoised per process for the workers.

``shared.lifecycle.contracts.contract_for`` loads the contract an operation was created with and
checks it against the operation's contract hash. The hash pins the content, so once checked the same
(workspace, contract id, version, custom row, hash) always names the same contract: workers keep
it in a small LRU (``shared.runtime.bounded.Bounded``) instead of a database query and a model
validation per task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.lifecycle.contracts import contract_for
from shared.runtime.bounded import Bounded

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.core.contract import Contract
    from shared.db.models import Operation

__all__ = ["cached_contract_for", "clear_contract_cache"]

_SIZE = 256
_cache: Bounded[tuple[object, ...], Contract] = Bounded(_SIZE)


def cached_contract_for(session: Session, op: Operation) -> Contract:
    """``contract_for(session, op)``, answered from memory after the first checked load (a
    load that raises keeps nothing)."""
    key = (op.workspace_id, op.contract_id, op.contract_version, op.custom_contract_id,
           op.contract_hash)  # fmt: skip
    return _cache.get_or_make(key, lambda: contract_for(session, op))


def clear_contract_cache() -> None:
    _cache.clear()
