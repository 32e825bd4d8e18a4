"""The words the MCP server gives an LLM: the server's instructions, each tool's description
(with the rules it must keep) and the "prove a Stripe refund" prompt."""

from __future__ import annotations

__all__ = ["DESCRIPTIONS", "INSTRUCTIONS", "prove_refund_prompt"]

RULES = (
    "Rules: (1) create the operation BEFORE calling the provider and pass the operation id as "
    "the provider's idempotency key; (2) report what you saw, even a timeout (a timeout is not "
    "a failure); (3) PENDING is a normal answer: report the operation id and stop; (4) NEVER "
    "call the provider again for the same effect while the verdict is PENDING or UNVERIFIABLE, "
    "nor after VERIFIED, CONTRADICTED or EXPIRED — only FAILED allows a new attempt, as a new "
    "operation; (5) follow the `guidance` of every answer."
)

INSTRUCTIONS = (
    "Provely proves whether a side effect (a Stripe refund, say) really happened at the "
    "provider. These tools never act on the provider: they record what you did and tell you "
    "what is proven. " + RULES
)

DESCRIPTIONS = {
    "list_contracts": "List the completion contracts this workspace can prove "
    "(id, version, completion level). Read-only.",
    "describe_contract": "The rendered page of one contract: what it proves, every condition "
    "and timing rule. Read-only.",
    "create_operation": "Step 1 of proving an effect: create an operation bound to a contract "
    "BEFORE calling the provider. `input` is what you are about to ask the provider (for "
    "stripe.refund.succeeded: charge, amount, currency). `idempotency_key` is yours: the same "
    "key gives back the same operation, so a retry of this tool never makes a second one. "
    "Use the returned operation id as the provider's Idempotency-Key. " + RULES,
    "report_action": "Step 3: report what the provider answered, once. phase `result` with the "
    "provider's response body and http_status; phase `error` with the provider's error body and "
    "http_status; phase `timeout` when no answer came (the effect may still have happened: it "
    "is NOT a failure). The answer says what to do next. " + RULES,
    "get_operation": "Step 4: the verdict of an operation as it stands, with the retry "
    "guidance. PENDING is a normal answer. Read-only. " + RULES,
    "wait_for_verdict": "Wait up to `timeout_seconds` (at most 60) for an operation to reach a "
    "final verdict, then answer it as it stands — PENDING or UNVERIFIABLE included. It only "
    "reads. If the answer is not final: report the operation id and stop. " + RULES,
    "get_receipt": "The signed receipt of an operation's final verdict (none while it is "
    "open). Read-only.",
    "verify_receipt": "Check a receipt document offline against Provely's published receipt "
    "keys: valid, tampered or uncheckable. Read-only.",
}


def prove_refund_prompt(*, charge: str, amount: int, currency: str) -> str:
    """The protocol for one Stripe refund, step by step."""
    return (
        f"Refund {amount} {currency} of Stripe charge {charge}, and prove it with Provely.\n"
        "1. Call `create_operation` with contract `stripe.refund.succeeded`, input "
        f'{{"charge": "{charge}", "amount": {amount}, "currency": "{currency}"}} and an '
        "idempotency_key of your choosing (keep it: a retry uses the same one).\n"
        "2. Call Stripe's refund endpoint ONCE, with the operation id as its Idempotency-Key.\n"
        "3. Call `report_action`: phase `result` with Stripe's answer, `error` with its error, "
        "or `timeout` if no answer came (never call Stripe again to find out).\n"
        "4. Call `wait_for_verdict` (up to 60 s).\n"
        "5. Follow the answer's guidance. If it is not final, report the operation id and stop: "
        "do NOT refund again. If it is VERIFIED, say only what its `claim` says.\n" + RULES
    )
