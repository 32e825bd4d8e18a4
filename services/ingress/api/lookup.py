"""An operation the agent API reads or changes: loaded for its workspace (with whether any event
is linked to it yet, so that a view of an operation without links spends no query on them), and
the 409 a change gets when the operation's state refuses it."""

from __future__ import annotations

import re

from sqlalchemy import bindparam, exists, select
from sqlalchemy.orm import Session

from services.ingress.problems import ApiError
from shared.db.models import Operation, OperationEvent
from shared.intake.correlate import lock_correlation

__all__ = ["load_operation", "load_operation_linked", "state_conflict"]

_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")

_OPERATION = select(
    Operation, exists().where(OperationEvent.operation_id == Operation.id).label("linked")
).where(
    Operation.id == bindparam("operation_id"),
    Operation.workspace_id == bindparam("workspace_id"),
)
_OPERATION_FOR_UPDATE = _OPERATION.with_for_update(of=Operation)
"""Built once: every report and read of an operation runs one of them."""


def load_operation(
    session: Session, workspace_id: str, operation_id: str, *, for_update: bool = False
) -> Operation:
    """The workspace's operation, else 404 (another workspace's looks exactly like none)."""
    return load_operation_linked(session, workspace_id, operation_id, for_update=for_update)[0]


def load_operation_linked(
    session: Session, workspace_id: str, operation_id: str, *, for_update: bool = False
) -> tuple[Operation, bool]:
    """:func:`load_operation`, and whether an event was linked to the operation when it was
    read (False: ``operation_view`` needs no query for its linked events)."""
    if not _ID.fullmatch(operation_id):
        raise ApiError(404, "not-found", f"no operation {operation_id}")
    query = _OPERATION
    if for_update:
        # Before the row lock: a change that may teach the operation its keys must not
        # interleave with a correlator of the workspace (shared.intake.correlate.lock_correlation).
        lock_correlation(session, [workspace_id], shared=True)
        query = _OPERATION_FOR_UPDATE
    row = session.execute(
        query, {"operation_id": operation_id, "workspace_id": workspace_id}
    ).one_or_none()
    if row is None:
        raise ApiError(404, "not-found", f"no operation {operation_id}")
    return row[0], bool(row[1])


def state_conflict(op: Operation, detail: str) -> ApiError:
    return ApiError(
        409,
        "state-conflict",
        detail,
        state=op.state,
        verdict=op.verdict,
        reason=op.reason,
        final=op.final,
    )
