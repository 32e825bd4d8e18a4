"""The retry guidance of an operation, in words an agent (or an LLM) will follow.

The words are derived from the fields the API serves (``verdict``, ``reason``, ``final``,
``retry.action``, ``retry.verification``, ``retry.decided_by``, ``claim``), never from a table
of the SDK's own: the server decides, this only says it. Whenever ``retry.action`` is not
``allowed_as_new_operation``, the words say not to repeat the action.
"""

from __future__ import annotations

from datetime import datetime

__all__ = ["effect_name", "guidance"]

ALLOWED_AS_NEW = "allowed_as_new_operation"


def effect_name(contract_id: str) -> str:
    """``stripe.refund.succeeded`` → ``the refund``; anything else → ``the action``."""
    parts = contract_id.split(".")
    return f"the {parts[1]}" if len(parts) >= 3 and parts[1] else "the action"


def _verdict_words(verdict: str | None, reason: str | None, final: bool, effect: str) -> str:
    match verdict:
        case "PENDING" | None:
            return f"{effect} may still succeed; the evidence does not decide yet"
        case "VERIFIED":
            return "the contract holds on independent evidence"
        case "CONTRADICTED":
            return "the evidence shows something other than what was asked happened"
        case "FAILED":
            return "the provider reports that the effect failed"
        case "UNVERIFIABLE" if reason == "evidence_unavailable" and not final:
            return (
                f"the provider cannot be read right now; {effect} may have happened and may "
                "still succeed"
            )
        case "UNVERIFIABLE":
            return f"no evidence arrived before the deadline; {effect} may have happened"
        case "EXPIRED":
            return f"the action was never reported in time; {effect} may have happened"
        case _:
            return f"verdict {verdict}"


def guidance(
    *,
    operation_id: str,
    contract_id: str,
    verdict: str | None,
    reason: str | None,
    final: bool,
    retry_action: str,
    retry_verification: str,
    decided_by: str,
    claim: str,
    stands_until: datetime | None = None,
    blocked_by: str | None = None,
) -> str:
    """One paragraph: what the verdict means, whether the action may be repeated, what to do."""
    effect = effect_name(contract_id)
    head = f"{verdict or 'PENDING'}" + (f" ({reason})" if reason else "")
    words = [f"{head}: {_verdict_words(verdict, reason, final, effect)}."]
    if retry_action == ALLOWED_AS_NEW:
        words.append(
            f"{effect.capitalize()} may be attempted again, only as a NEW operation "
            "(create a new operation and use its id as the idempotency key)."
        )
        if stands_until is not None:
            words.append(
                f"This advice stands only while nothing contradicts it: Provely watches until "
                f"{stands_until.isoformat()}, and evidence that {effect} happened after all "
                "withdraws it (read the operation again before acting on it)."
            )
    else:
        words.append(f"Do not repeat {effect}: do not call the provider again for it.")
    if verdict == "VERIFIED":
        words.append(f"What may be claimed: {claim}")
    if retry_verification == "yes":
        words.append("Provely retries the verification itself; you may ask it to verify again.")
    elif decided_by == "person":
        words.append("A person decides what happens next.")
    elif not final:
        words.append("Provely keeps observing on its own.")
    if blocked_by and not final:
        words.append(f"Why it may not decide: {blocked_by}.")
    if not final:
        words.append(f"Report operation {operation_id} and stop; ask again later.")
    else:
        words.append(f"Operation {operation_id} is final; its receipt is signed.")
    return " ".join(words)
