"""How contract data reads in the cells and tables of a published page (``shared.core.render``).

Data cells (ids, paths, operators, values, timings, sources) are formatted the same way on
every page so that a reader, or a test, can compare them: code spans, compact JSON literals,
durations in milliseconds with their unit, Markdown tables with escaped cells.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from shared.core.contract import (
    Channel,
    CompletionCondition,
    Contract,
    EventLogVerifier,
    HttpVerifier,
    MatchRule,
)

__all__ = [
    "EVIDENCE_HEADER",
    "and_list",
    "backoff",
    "code",
    "constraint",
    "event_log_params",
    "evidence_rows",
    "evidence_table",
    "expected",
    "format_duration_ms",
    "format_value",
    "gates",
    "idempotency",
    "inline",
    "ms_or_dash",
    "on_timeout",
    "operand",
    "readback_params",
    "table",
    "webhook_params",
]


def format_value(value: Any) -> str:
    """A literal or expression as a page shows it in an Expected column: strings as written."""
    if isinstance(value, str):
        return value
    return _json(value)


def format_duration_ms(ms: int) -> str:
    """``604800000`` → ``604800000 ms (7 days)``; small values stay in milliseconds."""
    units = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))
    for size, name in units:
        if ms >= size and ms % size == 0:
            n = ms // size
            return f"{ms} ms ({n} {name}{'s' if n != 1 else ''})"
    return f"{ms} ms"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def operand(value: Any) -> str:
    """An operand in a match: an expression as written, a literal as compact JSON."""
    if isinstance(value, str) and value.startswith("$"):
        return value
    return _json(value)


def gates(gates: Sequence[MatchRule]) -> str:
    """`` (judged once …)`` after a gated condition's path; empty without gates."""
    if not gates:
        return ""
    rules = " and ".join(f"{code(g.path)} {g.op.value} {code(operand(g.value))}" for g in gates)
    return f" (judged once {rules})"


def expected(value: Any) -> str:
    if value is None:
        return "—"
    return code(format_value(value))


def idempotency(c: Contract) -> str:
    idem = c.subject.idempotency
    if idem is None:
        return "none"
    safe = "retry is safe" if idem.retry_safe else "retry is not safe"
    return f"{idem.key} through {code(idem.header)}, {safe}"


def backoff(c: Contract) -> str:
    b = c.timing.backoff
    if b.kind == "constant":
        return f"constant, max {b.max_ms} ms"
    factor = int(b.factor) if float(b.factor).is_integer() else b.factor
    return f"{b.kind} factor {factor}, max {b.max_ms} ms"


def on_timeout(c: Contract) -> str:
    ot = c.timing.on_timeout
    text = f"{ot.verdict} ({code(ot.reason)})"
    if ot.escalate == "human_review":
        text += ", escalated to a person"
    return text


def constraint(minimum: int | None, pattern: str | None) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"≥ {minimum}")
    if pattern is not None:
        parts.append(f"matches {code(pattern)}")
    return ", ".join(parts) or "—"


def _verifier_params(method: str, path: str) -> str:
    return code(f"{method} {path}")


def readback_params(http: HttpVerifier) -> str:
    """``GET path``, then the query parameters and the paging, when the readback has them."""
    text = _verifier_params(http.method, http.path)
    if http.query:
        text += " with " + ", ".join(
            f"{code(name)} = {code(format_value(http.query[name]))}" for name in sorted(http.query)
        )
    if http.paginate is not None:
        text += (
            f", every page read ({code(http.paginate.style)}, "
            f"at most {http.paginate.max_pages} pages, more is an error)"
        )
    return text


def event_log_params(log: EventLogVerifier) -> str:
    """An event-log channel's reads: the list, its bound, its types and its paging."""
    types = ", ".join(code(t) for t in log.event_types)
    return (
        f"{code('GET ' + log.path)}, events {types} created since the operation's second "
        f"({code('created[gte]')}), every page (at most {log.max_pages}); each event stored "
        "once by its id, as a delivery would be"
    )


def webhook_params(ch: Channel) -> str:
    hook = ch.webhook
    if hook is None:
        return "—"
    text = "events " + ", ".join(code(t) for t in hook.event_types)
    if hook.match:
        rules = "; ".join(
            f"{code(m.path)} {m.op.value} {code(operand(m.value))}" for m in hook.match
        )
        text += f" where {rules}"
    text += (
        ", including events before the operation"
        if hook.include_before_operation
        else ", only since the operation"
    )
    return text


def ms_or_dash(ms: int | None) -> str:
    return "—" if ms is None else format_duration_ms(ms)


def and_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def inline(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return inline(text).replace("|", "\\|")


EVIDENCE_HEADER = ("Condition", "Meaning", "Path", "Operator", "Expected", "Evidence")


def evidence_rows(conditions: Sequence[CompletionCondition]) -> tuple[tuple[str, ...], ...]:
    """Conditions of the completion shape, one row each (columns ``EVIDENCE_HEADER``)."""
    return tuple(
        (
            code(k.id),
            inline(k.meaning),
            code(k.path),
            code(k.op.value),
            expected(k.value),
            code(k.evidence),
        )
        for k in conditions
    )


def evidence_table(conditions: Sequence[CompletionCondition]) -> list[str]:
    """Conditions of the completion shape as Markdown table lines."""
    return table(EVIDENCE_HEADER, evidence_rows(conditions))


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    lines.append("")
    return lines
