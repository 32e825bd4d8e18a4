"""The published page of a contract: Markdown written from the contract alone.

Data cells (ids, paths, operators, values, timings, sources) are formatted the same way on
every page so that a reader, or a test, can compare them; prose (meanings, descriptions,
reasons, intent, summary) is the contract's own. The two answers at the end are derived from
the contract: whether the action response alone can verify it, and what the timeout gives.
Pure: the hash, certification and skill title are passed in by the caller (the registry).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from shared.core.contract import (
    Channel,
    CompletionCondition,
    Contract,
    HttpVerifier,
    MatchRule,
    contract_hash,
)

__all__ = ["format_duration_ms", "format_value", "render_page"]

_TIMEOUT_VERDICT_HELP = {
    "UNVERIFIABLE": "Provely does not claim the effect failed, only that no deciding evidence came",
}


def render_page(
    contract: Contract,
    *,
    digest: str | None = None,
    certification: str | None = None,
    skill_title: str | None = None,
    skill_link: str | None = None,
) -> str:
    """The Markdown page of ``contract``.

    ``digest`` defaults to the contract's hash; ``certification`` to the contract's own (the
    registry passes ``unsigned`` for a skill whose signature failed and was allowed);
    ``skill_title`` to the provider name; ``skill_link`` to ``/verify/<provider>``.
    """
    c = contract
    digest = digest or contract_hash(c)
    cert = certification or c.certification
    title = skill_title or c.skill.provider.capitalize()
    link = skill_link or f"/verify/{c.skill.provider}"
    out: list[str] = [f"# {c.id} {c.version}", "", f"> {_inline(c.title)}", ""]
    if c.summary:
        out += [f"**{_inline(c.summary)}**", ""]

    out += ["## Identity", ""]
    out += _table(
        ("Fact", "Value"),
        [
            ("Contract id", _code(c.id)),
            ("Version", _code(c.version)),
            ("Hash", _code(digest[:16])),
            ("Completion level", _code(c.completion_level)),
            ("Certification", cert.capitalize()),
            ("Skill", f"[{title} {c.skill.version}]({link})"),
            (
                "Valid for provider API versions",
                ", ".join(_code(v) for v in c.provider_api_versions),
            ),
        ],
    )

    out += ["## Intent", "", _inline(c.intent), ""]

    if c.input:
        out += ["## Inputs", "", "What the agent declares when it creates the operation.", ""]
        out += _table(
            ("Input", "Type", "Required", "Constraint", "Description"),
            [
                (
                    _code(f"$input.{name}"),
                    spec.type,
                    "yes" if spec.required else "no",
                    _constraint(spec.minimum, spec.pattern),
                    _inline(spec.description) or "—",
                )
                for name, spec in c.input.items()
            ],
        )

    s = c.subject
    out += ["## Subject and action", ""]
    out += _table(
        ("Member", "Value"),
        [
            ("Subject type", _code(s.type)),
            ("Subject identity", f"{s.identity.key} = {_code(s.identity.expr)}"),
            ("Canonical effect", _code(s.canonical_effect)),
            (
                "Provider operation",
                _code(f"{s.provider_operation.method} {s.provider_operation.path}"),
            ),
            ("Idempotency", _idempotency(c)),
        ],
    )

    out += ["## Correlation", "", "How a piece of evidence is tied to this very operation.", ""]
    out += _table(
        ("Strategy", "Assurance", "Keys", "Required"),
        [
            (
                _code(st.strategy),
                st.assurance,
                "; ".join(f"{k.name} from {_code(k.expr)}" for k in st.keys),
                "yes" if st.required else "no",
            )
            for st in c.correlation
        ],
    )

    ev = c.evidence
    independent = (
        "one of them must observe the provider independently of the agent"
        if ev.independent_channel_required
        else "independence from the agent is not demanded"
    )
    out += [
        "## Evidence",
        "",
        f"Evidence must reach level {_code(ev.minimum_level)}, from at least "
        f"{ev.minimum_channels} channel{'s' if ev.minimum_channels != 1 else ''}; {independent}.",
        "",
    ]
    out += _table(
        ("Channel", "Level", "Independence", "Verifier", "Description"),
        [
            (_code(ch.name), ch.level, ch.independence, _code(ch.verifier), _inline(ch.description))
            for ch in c.channels
        ],
    )
    channel_rows = [
        (
            _code(ch.name),
            (f"provider {_code(ch.provider)}: " if ch.provider is not None else "")
            + (_readback_params(ch.http) if ch.http is not None else _webhook_params(ch)),
            _ms_or_dash(ch.typical_latency_ms),
            _ms_or_dash(ch.worst_case_ms),
            _ms_or_dash(ch.freshness_ms),
        )
        for ch in c.channels
    ]
    out += _table(("Channel", "Reads", "Typical latency", "Worst case", "Freshness"), channel_rows)

    out += [
        "## Completion conditions",
        "",
        "VERIFIED needs every one of these to hold on fresh evidence, and the evidence "
        "requirements above to be met.",
        "",
    ]
    out += _evidence_table(c.completion)

    if c.negative:
        out += [
            "## Negative conditions",
            "",
            "Checked first; the first one that holds gives CONTRADICTED with its class.",
            "",
        ]
        out += _table(
            ("Condition", "Class", "Reason", "Path", "Operator", "Expected"),
            [
                (
                    _code(n.id),
                    n.class_,
                    _inline(n.reason),
                    _code(n.path) + _gates(n.when),
                    _code(n.op.value),
                    _expected(n.value),
                )
                for n in c.negative
            ],
        )

    if c.verdict_map:
        out += [
            "## Verdict map",
            "",
            "Observed states that decide before the completion conditions do; the first rule "
            "that matches gives its verdict.",
            "",
        ]
        out += _table(
            ("Rule", "Match", "Verdict", "Reason"),
            [
                (
                    _code(r.id),
                    f"{_code(r.path)} {r.op.value} {_code(_operand(r.value))}" + _gates(r.when),
                    r.verdict,
                    _inline(r.reason),
                )
                for r in c.verdict_map
            ],
        )

    if c.rejection is not None:
        out += [
            "## A reported rejection",
            "",
            "When the agent reports that the provider refused the action, that is its word "
            "alone. The verdict is FAILED (`action_rejected`) only once all of these hold on "
            "fresh provider evidence, each channel read at least its typical latency after the "
            "report; until then it is PENDING and the action is never to be repeated.",
            "",
        ]
        out += _evidence_table(c.rejection.confirm)
        out += ["", _inline(c.rejection.reason), ""]

    t = c.timing
    out += ["## Timing", ""]
    out += _table(
        ("Timing member", "Value"),
        [
            ("Initial delay", f"{t.initial_delay_ms} ms"),
            ("Poll interval", f"{t.poll_interval_ms} ms"),
            ("Backoff", _backoff(c)),
            ("Maximum attempts", str(t.max_attempts)),
            ("Timeout", f"{t.timeout_ms} ms"),
            ("Stale read window", f"{t.stale_read_window_ms} ms"),
            ("On timeout", _on_timeout(c)),
        ],
    )

    if c.sources:
        out += ["## Sources", ""]
        out += [
            f"- {_code(src.ref)}: [{_inline(src.title)}]({src.url}), "
            f"retrieved {src.retrieved.isoformat()}"
            for src in c.sources
        ]
        out.append("")

    out += [
        "## What follows from the contract",
        "",
        f"### Can {c.id} be VERIFIED on the action response alone?",
        "",
        _action_alone_answer(c),
        "",
        "### What does the timeout give?",
        "",
        _timeout_answer(c),
        "",
    ]
    return "\n".join(out)


# --------------------------------------------------------------------------- derived answers


def _completion_channels(c: Contract) -> list[str]:
    seen: list[str] = []
    for cond in c.completion:
        if cond.evidence not in seen:
            seen.append(cond.evidence)
    return seen


def _action_alone_answer(c: Contract) -> str:
    channels = _completion_channels(c)
    reads_action_only = any(not cond.path.startswith("$observed.") for cond in c.completion)
    if c.evidence.minimum_level == "E1" and reads_action_only:
        return (
            "Yes, and that is a defect: its evidence level is E1, the action response itself. "
            "`provely contracts lint` refuses such a contract."
        )
    names = _and_list([_code(n) for n in channels]) or "no channel"
    return (
        f"No. What the provider answered to the action counts as E1 evidence, and this contract "
        f"asks for at least {c.evidence.minimum_level}. VERIFIED waits for its completion "
        f"conditions, which read {names}."
    )


def _timeout_answer(c: Contract) -> str:
    t = c.timing
    text = (
        f"When {format_duration_ms(t.timeout_ms)} pass without a final verdict, the operation "
        f"ends {t.on_timeout.verdict} with the reason {_code(t.on_timeout.reason)}."
    )
    note = _TIMEOUT_VERDICT_HELP.get(t.on_timeout.verdict)
    if note:
        text += f" {note}."
    if t.on_timeout.escalate == "human_review":
        text += " A person then reviews it (state HUMAN_REVIEW) and records the outcome."
    return text


# --------------------------------------------------------------------------- cell formats


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


def _operand(value: Any) -> str:
    """An operand in a match: an expression as written, a literal as compact JSON."""
    if isinstance(value, str) and value.startswith("$"):
        return value
    return _json(value)


def _gates(gates: Sequence[MatchRule]) -> str:
    """`` (judged once …)`` after a gated condition's path; empty without gates."""
    if not gates:
        return ""
    rules = " and ".join(f"{_code(g.path)} {g.op.value} {_code(_operand(g.value))}" for g in gates)
    return f" (judged once {rules})"


def _expected(value: Any) -> str:
    if value is None:
        return "—"
    return _code(format_value(value))


def _idempotency(c: Contract) -> str:
    idem = c.subject.idempotency
    if idem is None:
        return "none"
    safe = "retry is safe" if idem.retry_safe else "retry is not safe"
    return f"{idem.key} through {_code(idem.header)}, {safe}"


def _backoff(c: Contract) -> str:
    b = c.timing.backoff
    if b.kind == "constant":
        return f"constant, max {b.max_ms} ms"
    factor = int(b.factor) if float(b.factor).is_integer() else b.factor
    return f"{b.kind} factor {factor}, max {b.max_ms} ms"


def _on_timeout(c: Contract) -> str:
    ot = c.timing.on_timeout
    text = f"{ot.verdict} ({_code(ot.reason)})"
    if ot.escalate == "human_review":
        text += ", escalated to a person"
    return text


def _constraint(minimum: int | None, pattern: str | None) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"≥ {minimum}")
    if pattern is not None:
        parts.append(f"matches {_code(pattern)}")
    return ", ".join(parts) or "—"


def _verifier_params(method: str, path: str) -> str:
    return _code(f"{method} {path}")


def _readback_params(http: HttpVerifier) -> str:
    """``GET path``, then the query parameters and the paging, when the readback has them."""
    text = _verifier_params(http.method, http.path)
    if http.query:
        text += " with " + ", ".join(
            f"{_code(name)} = {_code(format_value(http.query[name]))}"
            for name in sorted(http.query)
        )
    if http.paginate is not None:
        text += (
            f", every page read ({_code(http.paginate.style)}, "
            f"at most {http.paginate.max_pages} pages, more is an error)"
        )
    return text


def _webhook_params(ch: Channel) -> str:
    hook = ch.webhook
    if hook is None:
        return "—"
    text = "events " + ", ".join(_code(t) for t in hook.event_types)
    if hook.match:
        rules = "; ".join(
            f"{_code(m.path)} {m.op.value} {_code(_operand(m.value))}" for m in hook.match
        )
        text += f" where {rules}"
    text += (
        ", including events before the operation"
        if hook.include_before_operation
        else ", only since the operation"
    )
    return text


def _ms_or_dash(ms: int | None) -> str:
    return "—" if ms is None else format_duration_ms(ms)


def _and_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _inline(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _inline(text).replace("|", "\\|")


def _evidence_table(conditions: Sequence[CompletionCondition]) -> list[str]:
    """Conditions of the completion shape, one row each."""
    return _table(
        ("Condition", "Meaning", "Path", "Operator", "Expected", "Evidence"),
        [
            (
                _code(k.id),
                _inline(k.meaning),
                _code(k.path),
                _code(k.op.value),
                _expected(k.value),
                _code(k.evidence),
            )
            for k in conditions
        ],
    )


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    lines.append("")
    return lines
