"""The contract of an operation, memoised per process for the workers.

``shared.lifecycle.contracts.contract_for`` loads the contract an operation was created with and
checks it against the operation's contract hash. The hash pins the content, so once checked the same
(workspace, contract id, version, custom row, hash) always names the same contract: workers keep
it in a small LRU instead of a database query and a model validation per task.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from shared.lifecycle.contracts import contract_for

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.core.contract import Contract
    from shared.db.models import Operation

__all__ = ["cached_contract_for", "clear_contract_cache"]

_SIZE = 256
_lock = threading.Lock()
_cache: OrderedDict[tuple[object, ...], Contract] = OrderedDict()


def cached_contract_for(session: Session, op: Operation) -> Contract:
    """``contract_for(session, op)``, answered from memory after the first checked load."""
    key = (op.workspace_id, op.contract_id, op.contract_version, op.custom_contract_id,
           op.contract_hash)  # fmt: skip
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    contract = contract_for(session, op)
    with _lock:
        _cache[key] = contract
        while len(_cache) > _SIZE:
            _cache.popitem(last=False)
    return contract


def clear_contract_cache() -> None:
    with _lock:
        _cache.clear()
