"""The rest of the published pages, as documents: a contract's versions and what each adds,
the skill page, the index and the links a page ends with.

The addresses are the ones ``services.ingress.pages`` serves: ``/verify`` (index),
``/verify/<provider>`` (skill), ``/verify/<provider>/<contract>[/<version>]`` and the
definitions under ``/verify/terms/<name>``. Every sentence that names a fact reads it from the
contract or the skill; the rest is the project's own wording. Pure: the caller (the registry)
passes the contracts, hashes, key ids and certifications.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.core.cells import code, inline, ms_or_dash
from shared.core.contract import Contract
from shared.core.document import Block, Bullets, Document, Heading, Paragraph, Quote, Table
from shared.core.receipt import safe_to_claim_complete

__all__ = [
    "TERMS",
    "PublishedContract",
    "PublishedSkill",
    "contract_address",
    "index_document",
    "read_next",
    "skill_document",
    "versions_section",
]

TERMS: dict[str, str] = {
    "verdicts": "Verdicts and PENDING",
    "correlation": "Correlation",
    "retry": "The retry rules",
    "receipts": "What a receipt proves",
    "contracts": "What a completion contract contains",
}
"""The definition pages (``/verify/terms/<name>``) and their titles."""


@dataclass(frozen=True, slots=True)
class PublishedContract:
    """One version of a contract as the registry serves it."""

    contract: Contract
    hash: str
    certification: str


@dataclass(frozen=True, slots=True)
class PublishedSkill:
    """A provider's skill: its manifest's facts and the newest version of each contract."""

    provider: str
    title: str
    version: str
    certification: str
    key_id: str | None
    signature_scheme: str | None
    readback_paths: tuple[str, ...]
    contracts: tuple[PublishedContract, ...]


def contract_address(contract: Contract, version: str | None = None) -> str:
    base = f"/verify/{contract.skill.provider}/{contract.id}"
    return base if version is None else f"{base}/{version}"


def _added(older: Contract, newer: Contract) -> str:
    """What ``newer`` has that ``older`` lacks: channels, conditions, rules, inputs."""
    kinds = (
        ("channel", [ch.name for ch in older.channels], [ch.name for ch in newer.channels]),
        (
            "completion condition",
            [k.id for k in older.completion],
            [k.id for k in newer.completion],
        ),
        ("negative condition", [n.id for n in older.negative], [n.id for n in newer.negative]),
        ("verdict rule", [r.id for r in older.verdict_map], [r.id for r in newer.verdict_map]),
        ("input", list(older.input), list(newer.input)),
    )
    parts = []
    for kind, before, after in kinds:
        new = [name for name in after if name not in set(before)]
        if new:
            plural = "s" if len(new) != 1 else ""
            parts.append(f"{kind}{plural} " + ", ".join(code(name) for name in new))
    if older.rejection is None and newer.rejection is not None:
        parts.append("the confirmation of a reported rejection")
    monotone = [ch.name for ch in newer.channels if ch.monotone is not None]
    if monotone and not any(ch.monotone is not None for ch in older.channels):
        parts.append("monotone rules on " + ", ".join(code(n) for n in monotone))
    return "; ".join(parts) or "no new rule (wording, sources or timing)"


def versions_section(versions: Sequence[PublishedContract], *, shown: str) -> list[Block]:
    """Every version of one contract, oldest first, what each adds, and which is the newest."""
    ordered = list(versions)
    newest = ordered[-1].contract
    lead = (
        f"This is the newest version, {code(newest.version)}."
        if shown == newest.version
        else f"The newest version is [{newest.version}]({contract_address(newest)}); "
        f"this page shows {code(shown)}."
    )
    rows = []
    for i, entry in enumerate(ordered):
        c = entry.contract
        adds = "the first version" if i == 0 else _added(ordered[i - 1].contract, c)
        link = f"[{c.version}]({contract_address(c, c.version)})"
        rows.append((link, code(entry.hash[:16]), adds))
    return [
        Heading(2, "Versions"),
        Paragraph(lead),
        Table(("Version", "Hash", "What it adds"), tuple(rows)),
    ]


def read_next(contract: Contract, siblings: Sequence[Contract], *, skill_title: str) -> list[Block]:
    """The links a contract page ends with: its skill, the other contracts, the definitions."""
    items = [
        f"[The {skill_title} skill and its completion levels](/verify/{contract.skill.provider})"
    ]
    items += [
        f"[The {code(other.id)} contract]({contract_address(other)})"
        for other in siblings
        if other.id != contract.id
    ]
    items += _term_links()
    items.append("[Check a receipt in your browser](/verify/receipt)")
    return [Heading(2, "Read next"), Bullets(tuple(items))]


def _term_links() -> tuple[str, ...]:
    return tuple(f"[{title}](/verify/terms/{name})" for name, title in TERMS.items())


def _level_rows(skill: PublishedSkill) -> tuple[tuple[str, ...], ...]:
    rows = []
    for entry in skill.contracts:
        c = entry.contract
        claims = "yes" if safe_to_claim_complete("VERIFIED", c.completion_level) else "no"
        proves = inline(c.summary) if c.summary else inline(c.title)
        rows.append((code(c.completion_level), f"[{c.id}]({contract_address(c)})", proves, claims))
    return tuple(rows)


def _channel_rows(skill: PublishedSkill) -> tuple[tuple[str, ...], ...]:
    rows: dict[str, tuple[str, ...]] = {}
    users: dict[str, list[str]] = {}
    for entry in skill.contracts:
        for ch in entry.contract.channels:
            users.setdefault(ch.name, []).append(code(entry.contract.id))
            rows.setdefault(
                ch.name,
                (
                    code(ch.name),
                    ch.level,
                    ch.independence,
                    ms_or_dash(ch.typical_latency_ms),
                    ms_or_dash(ch.worst_case_ms),
                    ms_or_dash(ch.freshness_ms),
                ),
            )
    return tuple((*row, ", ".join(users[name])) for name, row in rows.items())


def skill_document(skill: PublishedSkill) -> Document:
    """The page of a provider's skill: levels, channels, signature, certification, key, paths."""
    identity = (
        ("Provider", code(skill.provider)),
        ("Skill version", code(skill.version)),
        ("Certification", skill.certification.capitalize()),
        ("Publisher key id", code(skill.key_id) if skill.key_id else "unsigned"),
        (
            "Webhook signature scheme",
            code(skill.signature_scheme) if skill.signature_scheme else "—",
        ),
    )
    lower = [
        code(e.contract.completion_level)
        for e in skill.contracts
        if not safe_to_claim_complete("VERIFIED", e.contract.completion_level)
    ]
    blocks: list[Block] = [
        Heading(1, f"{skill.title} skill {skill.version}"),
        Quote(f"What Provely can prove about side effects at {skill.title}, and how."),
        Heading(2, "Identity"),
        Table(("Fact", "Value"), identity),
        Heading(2, "Completion levels"),
        Paragraph(
            "Each completion level is a contract of its own, and each proves a different thing. "
            "A level is a promise, not a step: a receipt at one level says nothing of another."
        ),
        Table(
            ("Level", "Contract", "What it proves", "VERIFIED means the effect is complete"),
            _level_rows(skill),
        ),
    ]
    if lower:
        blocks.append(
            Paragraph(
                f"A VERIFIED receipt at level {', '.join(lower)} says `safe_to_claim_complete: "
                "false`: the provider holds the object, which is not yet the effect it stands "
                "for. No page, receipt or agent may present it as the effect done."
            )
        )
    blocks += [
        Heading(2, "Channels"),
        Paragraph("Where the evidence comes from, how fast it usually comes, and how late it may."),
        Table(
            (
                "Channel",
                "Level",
                "Independence",
                "Typical latency",
                "Worst case",
                "Freshness",
                "Used by",
            ),
            _channel_rows(skill),
        ),
        Heading(2, "Declared readback paths"),
        Paragraph("The only provider paths a readback of this skill may read."),
        Bullets(tuple(code(path) for path in skill.readback_paths) or ("none",)),
        Heading(2, "Read next"),
        Bullets((*_term_links(), "[Every published contract](/verify)")),
    ]
    return Document(title=f"The {skill.title} skill", blocks=tuple(blocks))


def index_document(skills: Sequence[PublishedSkill]) -> Document:
    """``/verify``: every skill and contract published, the definitions and the receipt check."""
    blocks: list[Block] = [
        Heading(1, "Published contracts"),
        Quote(
            "Every completion contract Provely ships, what it proves, and a receipt check "
            "that runs in your browser."
        ),
    ]
    for skill in skills:
        rows = tuple(
            (
                f"[{e.contract.id}]({contract_address(e.contract)})",
                code(e.contract.version),
                code(e.contract.completion_level),
                inline(e.contract.title),
            )
            for e in skill.contracts
        )
        blocks += [
            Heading(2, skill.title),
            Paragraph(f"[The {skill.title} skill {skill.version}](/verify/{skill.provider})"),
            Table(("Contract", "Newest version", "Level", "What it proves"), rows),
        ]
    blocks += [
        Heading(2, "Definitions"),
        Bullets(_term_links()),
        Heading(2, "Check a receipt"),
        Paragraph("[Paste a receipt and check its signature in your browser](/verify/receipt)."),
    ]
    return Document(title="Provely — published contracts", blocks=tuple(blocks))
