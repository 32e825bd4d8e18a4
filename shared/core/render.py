"""The published page of a contract, built once as a document and written as Markdown.

:func:`contract_document` builds the page (``shared.core.document``) from the contract alone;
:func:`render_page` writes it as Markdown, and the published HTML pages write the same document
(``services.ingress.pages``). Data cells (ids, paths, operators, values, timings, sources) are
formatted the same way on every page (``shared.core.cells``) so that a reader, or a test, can
compare them; prose (meanings, descriptions, reasons, intent, summary) is the contract's own.
The two answers at the end are derived from the contract: whether the action response alone
can verify it, and what the timeout gives.
Pure: the hash, certification and skill title are passed in by the caller (the registry).
"""

from __future__ import annotations

from shared.core.cells import (
    EVIDENCE_HEADER,
    and_list,
    backoff,
    code,
    constraint,
    event_log_params,
    evidence_rows,
    expected,
    format_duration_ms,
    gates,
    idempotency,
    inline,
    ms_or_dash,
    on_timeout,
    operand,
    readback_params,
    webhook_params,
)
from shared.core.contract import Channel, Contract, contract_hash
from shared.core.document import (
    Block,
    Bullets,
    Document,
    Heading,
    Paragraph,
    Quote,
    Strong,
    Table,
    to_markdown,
)

__all__ = ["contract_document", "render_page"]

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
    """The Markdown page of ``contract`` (see :func:`contract_document` for the arguments)."""
    return to_markdown(
        contract_document(
            contract,
            digest=digest,
            certification=certification,
            skill_title=skill_title,
            skill_link=skill_link,
        )
    )


def contract_document(
    contract: Contract,
    *,
    digest: str | None = None,
    certification: str | None = None,
    skill_title: str | None = None,
    skill_link: str | None = None,
) -> Document:
    """The page of ``contract`` as a document.

    ``digest`` defaults to the contract's hash; ``certification`` to the contract's own (the
    registry passes ``unsigned`` for a skill whose signature failed and was allowed);
    ``skill_title`` to the provider name; ``skill_link`` to ``/verify/<provider>``.
    """
    c = contract
    blocks: list[Block] = [Heading(1, f"{c.id} {c.version}"), Quote(inline(c.title))]
    if c.summary:
        blocks.append(Strong(inline(c.summary)))
    blocks += _identity(
        c,
        digest=digest or contract_hash(c),
        certification=certification or c.certification,
        skill_title=skill_title or c.skill.provider.capitalize(),
        skill_link=skill_link or f"/verify/{c.skill.provider}",
    )
    blocks += [Heading(2, "Intent"), Paragraph(inline(c.intent))]
    blocks += _inputs(c)
    blocks += _subject(c)
    blocks += _correlation(c)
    blocks += _evidence(c)
    blocks += _monotone_section(c)
    blocks += _completion(c)
    blocks += _negative(c)
    blocks += _verdict_map(c)
    blocks += _rejection(c)
    blocks += _timing(c)
    blocks += _sources(c)
    blocks += _answers(c)
    return Document(title=f"What does {c.id} prove?", blocks=tuple(blocks))


# --------------------------------------------------------------------------- sections


def _identity(
    c: Contract, *, digest: str, certification: str, skill_title: str, skill_link: str
) -> list[Block]:
    rows = (
        ("Contract id", code(c.id)),
        ("Version", code(c.version)),
        ("Hash", code(digest[:16])),
        ("Completion level", code(c.completion_level)),
        ("Certification", certification.capitalize()),
        ("Skill", f"[{skill_title} {c.skill.version}]({skill_link})"),
        ("Valid for provider API versions", ", ".join(code(v) for v in c.provider_api_versions)),
    )
    return [Heading(2, "Identity"), Table(("Fact", "Value"), rows)]


def _inputs(c: Contract) -> list[Block]:
    if not c.input:
        return []
    rows = tuple(
        (
            code(f"$input.{name}"),
            spec.type,
            "yes" if spec.required else "no",
            constraint(spec.minimum, spec.pattern),
            inline(spec.description) or "—",
        )
        for name, spec in c.input.items()
    )
    return [
        Heading(2, "Inputs"),
        Paragraph("What the agent declares when it creates the operation."),
        Table(("Input", "Type", "Required", "Constraint", "Description"), rows),
    ]


def _subject(c: Contract) -> list[Block]:
    s = c.subject
    rows = (
        ("Subject type", code(s.type)),
        ("Subject identity", f"{s.identity.key} = {code(s.identity.expr)}"),
        ("Canonical effect", code(s.canonical_effect)),
        ("Provider operation", code(f"{s.provider_operation.method} {s.provider_operation.path}")),
        ("Idempotency", idempotency(c)),
    )
    return [Heading(2, "Subject and action"), Table(("Member", "Value"), rows)]


def _correlation(c: Contract) -> list[Block]:
    rows = tuple(
        (
            code(st.strategy),
            st.assurance,
            "; ".join(f"{k.name} from {code(k.expr)}" for k in st.keys),
            "yes" if st.required else "no",
        )
        for st in c.correlation
    )
    return [
        Heading(2, "Correlation"),
        Paragraph("How a piece of evidence is tied to this very operation."),
        Table(("Strategy", "Assurance", "Keys", "Required"), rows),
    ]


def _evidence(c: Contract) -> list[Block]:
    ev = c.evidence
    independent = (
        "one of them must observe the provider independently of the agent"
        if ev.independent_channel_required
        else "independence from the agent is not demanded"
    )
    plural = "s" if ev.minimum_channels != 1 else ""
    channels = tuple(
        (code(ch.name), ch.level, ch.independence, code(ch.verifier), inline(ch.description))
        for ch in c.channels
    )
    reads = tuple(
        (
            code(ch.name),
            (f"provider {code(ch.provider)}: " if ch.provider is not None else "") + _reads(ch),
            ms_or_dash(ch.typical_latency_ms),
            ms_or_dash(ch.worst_case_ms),
            ms_or_dash(ch.freshness_ms),
        )
        for ch in c.channels
    )
    return [
        Heading(2, "Evidence"),
        Paragraph(
            f"Evidence must reach level {code(ev.minimum_level)}, from at least "
            f"{ev.minimum_channels} channel{plural}; {independent}."
        ),
        Table(("Channel", "Level", "Independence", "Verifier", "Description"), channels),
        Table(("Channel", "Reads", "Typical latency", "Worst case", "Freshness"), reads),
    ]


def _completion(c: Contract) -> list[Block]:
    return [
        Heading(2, "Completion conditions"),
        Paragraph(
            "VERIFIED needs every one of these to hold on fresh evidence, and the evidence "
            "requirements above to be met."
        ),
        Table(EVIDENCE_HEADER, evidence_rows(c.completion)),
    ]


def _negative(c: Contract) -> list[Block]:
    if not c.negative:
        return []
    rows = tuple(
        (
            code(n.id),
            n.class_,
            inline(n.reason),
            code(n.path) + gates(n.when),
            code(n.op.value),
            expected(n.value),
        )
        for n in c.negative
    )
    return [
        Heading(2, "Negative conditions"),
        Paragraph("Checked first; the first one that holds gives CONTRADICTED with its class."),
        Table(("Condition", "Class", "Reason", "Path", "Operator", "Expected"), rows),
    ]


def _verdict_map(c: Contract) -> list[Block]:
    if not c.verdict_map:
        return []
    rows = tuple(
        (
            code(r.id),
            f"{code(r.path)} {r.op.value} {code(operand(r.value))}" + gates(r.when),
            r.verdict
            + ("; after VERIFIED it supersedes the receipt" if r.supersedes_verified else ""),
            inline(r.reason),
        )
        for r in c.verdict_map
    )
    return [
        Heading(2, "Verdict map"),
        Paragraph(
            "Observed states that decide before the completion conditions do; the first rule "
            "that matches gives its verdict."
        ),
        Table(("Rule", "Match", "Verdict", "Reason"), rows),
    ]


def _rejection(c: Contract) -> list[Block]:
    if c.rejection is None:
        return []
    return [
        Heading(2, "A reported rejection"),
        Paragraph(
            "When the agent reports that the provider refused the action, that is its word "
            "alone. The verdict is FAILED (`action_rejected`) only once all of these hold on "
            "fresh provider evidence, each channel read at least its typical latency after the "
            "report; until then it is PENDING and the action is never to be repeated."
        ),
        Table(EVIDENCE_HEADER, evidence_rows(c.rejection.confirm)),
        Paragraph(inline(c.rejection.reason), gap_before=True),
    ]


def _timing(c: Contract) -> list[Block]:
    t = c.timing
    rows = (
        ("Initial delay", f"{t.initial_delay_ms} ms"),
        ("Poll interval", f"{t.poll_interval_ms} ms"),
        ("Backoff", backoff(c)),
        ("Maximum attempts", str(t.max_attempts)),
        ("Timeout", f"{t.timeout_ms} ms"),
        ("Stale read window", f"{t.stale_read_window_ms} ms"),
        ("On timeout", on_timeout(c)),
    )
    return [Heading(2, "Timing"), Table(("Timing member", "Value"), rows)]


def _sources(c: Contract) -> list[Block]:
    if not c.sources:
        return []
    items = tuple(
        f"{code(src.ref)}: [{inline(src.title)}]({src.url}), retrieved {src.retrieved.isoformat()}"
        for src in c.sources
    )
    return [Heading(2, "Sources"), Bullets(items)]


def _answers(c: Contract) -> list[Block]:
    return [
        Heading(2, "What follows from the contract"),
        Heading(3, f"Can {c.id} be VERIFIED on the action response alone?"),
        Paragraph(_action_alone_answer(c)),
        Heading(3, "What does the timeout give?"),
        Paragraph(_timeout_answer(c)),
    ]


# --------------------------------------------------------------------------- readings backwards


def _monotone_section(c: Contract) -> list[Block]:
    rows: list[tuple[str, str]] = []
    for ch in c.channels:
        rule = ch.monotone
        if rule is None:
            continue
        if rule.exists:
            rows.append((code(ch.name), "once read, a not-found answer goes backwards"))
        if rule.keeps_items:
            rows.append((code(ch.name), "an item once listed (by id) stays listed"))
        if rule.stages is not None:
            order = " → ".join(" / ".join(code(v) for v in stage) for stage in rule.stages.order)
            rows.append((code(ch.name), f"{code(rule.stages.field)} only moves forward: {order}"))
    if not rows:
        return []
    return [
        Heading(2, "Readings that go backwards"),
        Paragraph(
            "A provider's reads can lag. A reading that goes backwards against an earlier reading "
            "of the same operation is recorded as inconsistent: it decides nothing and settles no "
            "recheck; the runtime reads again on the schedule below, and a person decides if no "
            "consistent reading comes."
        ),
        Table(("Channel", "Monotone rule"), tuple(rows)),
    ]


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
    names = and_list([code(n) for n in channels]) or "no channel"
    return (
        f"No. What the provider answered to the action counts as E1 evidence, and this contract "
        f"asks for at least {c.evidence.minimum_level}. VERIFIED waits for its completion "
        f"conditions, which read {names}."
    )


def _timeout_answer(c: Contract) -> str:
    t = c.timing
    text = (
        f"When {format_duration_ms(t.timeout_ms)} pass without a final verdict, the operation "
        f"ends {t.on_timeout.verdict} with the reason {code(t.on_timeout.reason)}."
    )
    note = _TIMEOUT_VERDICT_HELP.get(t.on_timeout.verdict)
    if note:
        text += f" {note}."
    if t.on_timeout.escalate == "human_review":
        text += " A person then reviews it (state HUMAN_REVIEW) and records the outcome."
    return text


def _reads(ch: Channel) -> str:
    """What a channel reads, from its parameter block."""
    if ch.http is not None:
        return readback_params(ch.http)
    if ch.event_log is not None:
        return event_log_params(ch.event_log)
    return webhook_params(ch)
