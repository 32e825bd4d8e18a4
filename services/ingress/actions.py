"""What the agent API does to operations: create, record the action report, review, verify.

Each function works in the caller's transaction and returns what must happen after commit
(the fence of an observation to dispatch). State changes go through
``shared.lifecycle.operations.change_state`` only.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingress.inputs import check_input
from services.ingress.problems import ApiError, FieldProblem
from services.ingress.schemas import ActionReportIn, CreateOperationIn, ReviewIn
from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.expressions import UNKNOWN, resolve
from shared.core.retry import retry_guidance
from shared.core.types import ACTION_REJECTED_PHASE, OperationState, Verdict
from shared.db.audit import append_transition
from shared.db.models import Operation, Workspace
from shared.db.tenants import new_id
from shared.intake.correlate import correlate_pending_events, lock_correlation
from shared.lifecycle.contracts import (
    ContractNotFound,
    ResolvedContract,
    contract_for,
    find_contract,
    provider_skill,
)
from shared.lifecycle.operations import change_state, facts_for
from shared.lifecycle.scheduling import schedule_observation, wake
from shared.runtime.settings import Settings

__all__ = [
    "AWAITING_ACTION",
    "Created",
    "Scheduled",
    "check_field_sizes",
    "check_operation_input",
    "create_operation",
    "load_operation",
    "prepare_operation",
    "record_action",
    "record_review",
    "request_verification",
]

AWAITING_ACTION = "awaiting_action_report"
_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")
AWAITING_EVIDENCE = "awaiting_evidence"


@dataclass(frozen=True, slots=True)
class Created:
    operation: Operation
    new: bool  # False: an earlier request with the same Idempotency-Key made it


@dataclass(frozen=True, slots=True)
class Scheduled:
    """An observation to dispatch after commit (``fence`` None: nothing to send)."""

    fence: int | None = None
    countdown_s: float = 0.0


def load_operation(
    session: Session, workspace_id: str, operation_id: str, *, for_update: bool = False
) -> Operation:
    """The workspace's operation, else 404 (another workspace's looks exactly like none)."""
    if not _ID.fullmatch(operation_id):
        raise ApiError(404, "not-found", f"no operation {operation_id}")
    query = select(Operation).where(
        Operation.id == operation_id, Operation.workspace_id == workspace_id
    )
    if for_update:
        # Before the row lock: a change that may teach the operation its keys must not
        # interleave with a correlator of the workspace (shared.intake.correlate.lock_correlation).
        lock_correlation(session, [workspace_id], shared=True)
        query = query.with_for_update()
    op = session.execute(query).scalar_one_or_none()
    if op is None:
        raise ApiError(404, "not-found", f"no operation {operation_id}")
    return op


def _request_hash(body: CreateOperationIn) -> str:
    document = json.dumps(
        body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), allow_nan=False
    )
    return hashlib.sha256(document.encode("ascii")).hexdigest()


def _replay(session: Session, workspace_id: str, key: str, digest: str) -> Operation | None:
    found = session.execute(
        select(Operation).where(
            Operation.workspace_id == workspace_id, Operation.idempotency_key == key
        )
    ).scalar_one_or_none()
    if found is None:
        return None
    if found.request_hash != digest:
        raise ApiError(
            409,
            "idempotency-key-reused",
            "this Idempotency-Key was used with another request body",
            operation_id=found.id,
        )
    return found


def _insert_once(
    session: Session, op: Operation, workspace_id: str, key: str, digest: str
) -> Operation | None:
    """Insert ``op``; when a concurrent request with the same key won, return its operation."""
    try:
        with session.begin_nested():
            session.add(op)
            session.flush()
    except IntegrityError:
        earlier = _replay(session, workspace_id, key, digest)
        if earlier is None:
            raise
        return earlier
    return None


def prepare_operation(
    session: Session,
    *,
    workspace_id: str,
    body: CreateOperationIn,
    idempotency_key: str | None,
) -> Operation | ResolvedContract:
    """The first, short transaction of a create: the earlier operation of a replayed
    ``Idempotency-Key``, else the contract the new operation binds (422 when there is none)."""
    if idempotency_key is not None:
        earlier = _replay(session, workspace_id, idempotency_key, _request_hash(body))
        if earlier is not None:
            return earlier
    try:
        return find_contract(session, workspace_id, body.contract, body.contract_version)
    except ContractNotFound as exc:
        field = "contract_version" if body.contract_version else "contract"
        raise ApiError(
            422,
            "unknown-contract",
            str(exc),
            errors=[FieldProblem(field=field, message=str(exc))],
        ) from None


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (how its limit is counted)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(text.encode("utf-8"))


def check_field_sizes(body: CreateOperationIn, settings: Settings) -> None:
    """422 naming ``input`` or ``metadata`` when either passes
    ``settings.operation_field_max_bytes``: every view of the operation carries them."""
    limit = settings.operation_field_max_bytes
    problems = [
        FieldProblem(
            field=name,
            message=f"is {size} bytes as JSON, more than the limit of {limit} "
            "(PROVELY_OPERATION_FIELD_MAX_BYTES)",
        )
        for name, value in (("input", body.input), ("metadata", body.metadata))
        if value is not None and (size := json_size(value)) > limit
    ]
    if problems:
        detail = "; ".join(f"{p.field} {p.message}" for p in problems)
        raise ApiError(422, "field-too-large", detail, errors=problems)


def check_operation_input(resolved: ResolvedContract, body: CreateOperationIn) -> None:
    """422 when the input does not satisfy the contract. Runs outside any transaction: it
    matches the contract's patterns (RE2, linear time) on what the agent sent."""
    problems = check_input(resolved.contract, body.input)
    if problems:
        detail = "; ".join(f"{p.field} {p.message}" for p in problems)
        raise ApiError(422, "invalid-input", detail, errors=problems)


def create_operation(
    session: Session,
    *,
    workspace_id: str,
    body: CreateOperationIn,
    resolved: ResolvedContract,
    idempotency_key: str | None,
    settings: Settings,
    now: datetime,
) -> Created:
    """Insert the operation on ``resolved`` (from :func:`prepare_operation`, its input checked
    by :func:`check_operation_input`), or return the one a concurrent replay made."""
    digest = _request_hash(body)
    if idempotency_key is not None:
        earlier = _replay(session, workspace_id, idempotency_key, digest)
        if earlier is not None:
            return Created(earlier, new=False)
    ws = session.get(Workspace, workspace_id)
    window = (ws.action_window_seconds if ws else None) or settings.action_window_seconds
    op = Operation(
        id=new_id("op"),
        workspace_id=workspace_id,
        contract_id=resolved.contract.id,
        contract_version=resolved.contract.version,
        contract_hash=resolved.hash,
        completion_level=resolved.contract.completion_level,
        custom_contract_id=resolved.custom_id,
        state=OperationState.CREATED.value,
        verdict=Verdict.PENDING.value,
        reason=AWAITING_ACTION,
        final=False,
        version=1,
        input=body.input,
        metadata_=body.metadata,
        idempotency_key=idempotency_key,
        request_hash=digest,
        learned_keys={},
        attempts=0,
        fence=0,
        action_deadline=now + timedelta(seconds=window),
        created_at=now,
        updated_at=now,
    )
    if idempotency_key is None:
        session.add(op)
        session.flush()
    else:
        earlier = _insert_once(session, op, workspace_id, idempotency_key, digest)
        if earlier is not None:
            return Created(earlier, new=False)
    append_transition(
        session,
        workspace_id=workspace_id,
        operation_id=op.id,
        from_state=None,
        to_state=op.state,
        verdict=op.verdict,
        reason=op.reason,
        cause="created",
        now=now,
    )
    return Created(op, new=True)


def _conflict(op: Operation, detail: str) -> ApiError:
    return ApiError(
        409,
        "state-conflict",
        detail,
        state=op.state,
        verdict=op.verdict,
        reason=op.reason,
        final=op.final,
    )


def _subject_id(contract: Contract, op: Operation) -> str | None:
    value = resolve(contract.subject.identity.expr, build_context(contract, facts_for(op)))
    if value is UNKNOWN or value is None or isinstance(value, dict | list):
        return None
    return str(value)


def _report_cause(report: ActionReportIn, changes: dict[str, Any]) -> str:
    if changes.get("action_phase") == ACTION_REJECTED_PHASE:
        return "action_rejection_reported"
    return "action_error" if report.phase == "error" else "observation_scheduled"


def _must_change(ok: bool, op: Operation) -> None:
    if not ok:
        raise _conflict(op, "the operation changed while this report was recorded; read it again")


def record_action(
    session: Session,
    op: Operation,
    report: ActionReportIn,
    *,
    settings: Settings,
    now: datetime,
) -> Scheduled:
    """Apply one action report; 409 when it comes twice or after the action was reported."""
    state = OperationState(op.state)
    if op.final:
        raise _conflict(op, f"the operation is final ({op.state}); no report is accepted")
    if report.phase == "started":
        if state is not OperationState.CREATED:
            raise _conflict(op, f"the action was already reported (state {op.state})")
        _must_change(
            change_state(
                session,
                op,
                to_state=OperationState.ACTION_STARTED,
                verdict=Verdict.PENDING.value,
                reason=AWAITING_ACTION,
                verdict_class=None,
                final=False,
                decision=None,
                cause="action_started",
                now=now,
                changes={"action_phase": "started"},
                settings=settings,
            ),
            op,
        )
        return Scheduled()
    if state not in (OperationState.CREATED, OperationState.ACTION_STARTED):
        raise _conflict(op, f"the action was already reported (state {op.state})")
    if report.phase == "result":
        if report.result is None:
            raise ApiError(
                422,
                "invalid-request",
                "phase result needs the provider's response in `result`",
                errors=[FieldProblem(field="result", message="is required for phase result")],
            )
        if report.http_status is not None and report.http_status >= 400:
            raise ApiError(
                422,
                "invalid-request",
                "an HTTP status of 400 or more is an error: report it with phase error",
                errors=[FieldProblem(field="http_status", message="must be below 400")],
            )
    contract = contract_for(session, op)
    base: dict[str, Any] = {
        "action_phase": report.phase,
        "action_result": report.result if report.phase == "result" else None,
        "action_error": report.error if report.phase == "error" else None,
        "action_http_status": report.http_status,
        "action_reported_at": now,
        "deadline": now + timedelta(milliseconds=contract.timing.timeout_ms),
    }
    if report.phase == "error":
        skill = provider_skill(contract.skill.provider)
        if skill is not None and skill.rejects(report.http_status, report.error):
            # The agent's word (E1): observed like any error until independent evidence
            # confirms that nothing was created (the contract's ``rejection`` section).
            base["action_phase"] = ACTION_REJECTED_PHASE
    if report.phase == "result":
        for key, value in base.items():
            set_committed_value(op, key, value)  # so the subject identity sees the result
        base["subject_id"] = _subject_id(contract, op)
        _must_change(
            change_state(
                session,
                op,
                to_state=OperationState.ACTION_ACCEPTED,
                verdict=Verdict.PENDING.value,
                reason="action_accepted",
                verdict_class=None,
                final=False,
                decision=None,
                cause="action_result",
                now=now,
                details={"http_status": report.http_status},
                changes=base,
                settings=settings,
            ),
            op,
        )
        base = {}
    _must_change(
        change_state(
            session,
            op,
            to_state=OperationState.OBSERVING,
            verdict=Verdict.PENDING.value,
            reason=AWAITING_EVIDENCE,
            verdict_class=None,
            final=False,
            decision=None,
            cause=_report_cause(report, base),
            now=now,
            details={"http_status": report.http_status} if report.phase == "error" else None,
            changes=base or None,
            settings=settings,
        ),
        op,
    )
    # Events that arrived before this report (a refund.created carrying the operation id as its
    # idempotency key, say) are linked now, and an operation without a subject id learns it.
    correlate_pending_events(session, op, now)
    delay_ms = contract.timing.initial_delay_ms
    fence = schedule_observation(session, op, delay_ms=delay_ms, now=now)
    return Scheduled(fence, delay_ms / 1000.0)


def request_verification(session: Session, op: Operation, *, now: datetime) -> Scheduled:
    """Observe now, where the retry table allows the agent to retry the verification."""
    guidance = retry_guidance(op.verdict or Verdict.PENDING.value, op.reason, op.state)
    if op.final or guidance.verification != "yes":
        raise _conflict(
            op,
            "the retry table does not allow retrying the verification for "
            f"{op.verdict} ({op.reason}) in state {op.state}",
        )
    fence = wake(session, op.id, now=now)
    if fence is None:
        raise _conflict(op, "the operation is not being observed")
    return Scheduled(fence, 0.0)


def record_review(
    session: Session, op: Operation, review: ReviewIn, *, reviewer_key_id: str, now: datetime
) -> None:
    """Record a person's resolution of HUMAN_REVIEW: once, never overwritten."""
    if op.state != OperationState.HUMAN_REVIEW:
        raise _conflict(op, f"only an operation in HUMAN_REVIEW is reviewed (state {op.state})")
    if op.review is not None:
        raise _conflict(op, "the operation was already reviewed; a review is never overwritten")
    document = {
        "verdict": review.verdict,
        "note": review.note,
        "reviewed_at": now.isoformat(),
        "reviewed_by": reviewer_key_id,
    }
    result = session.execute(
        update(Operation)
        .where(
            Operation.id == op.id,
            Operation.version == op.version,
            Operation.review.is_(None),
        )
        .values(review=document, version=op.version + 1, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise _conflict(op, "the operation changed while the review was recorded; read it again")
    set_committed_value(op, "review", document)
    set_committed_value(op, "version", op.version + 1)
    set_committed_value(op, "updated_at", now)
    append_transition(
        session,
        workspace_id=op.workspace_id,
        operation_id=op.id,
        from_state=op.state,
        to_state=op.state,
        verdict=review.verdict,
        reason="human_review_resolved",
        cause="review",
        now=now,
        details={"note": review.note, "reviewed_by": reviewer_key_id},
    )
