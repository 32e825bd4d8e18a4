"""The published documents beyond the contract page: versions and what each adds, the skill's
completion levels, and the Markdown of the document model."""

from __future__ import annotations

from shared.core.document import Bullets, Document, Heading, Paragraph, Table, to_markdown
from shared.core.published import (
    PublishedContract,
    PublishedSkill,
    skill_document,
    versions_section,
)
from shared.trust.registry import get_registry

CONTRACT = "stripe.refund.succeeded"


def _versions() -> list[PublishedContract]:
    registry = get_registry()
    return [
        PublishedContract(registry.get(CONTRACT, v), registry.entry(CONTRACT, v).hash, "community")
        for v in registry.versions(CONTRACT)
    ]


def _rows(blocks: list[object] | tuple[object, ...], first: str) -> list[tuple[str, ...]]:
    tables = [b for b in blocks if isinstance(b, Table) and b.header[0] == first]
    assert len(tables) == 1
    return list(tables[0].rows)


def test_each_version_says_what_it_adds_and_the_page_names_the_newest() -> None:
    blocks = versions_section(_versions(), shown="1.0.0")
    rows = {row[0]: row[2] for row in _rows(blocks, "Version")}
    assert rows[f"[1.0.0](/verify/stripe/{CONTRACT}/1.0.0)"] == "the first version"
    added_11 = rows[f"[1.1.0](/verify/stripe/{CONTRACT}/1.1.0)"]
    assert "`charge_refunds`" in added_11
    assert "the confirmation of a reported rejection" in added_11
    added_12 = rows[f"[1.2.0](/verify/stripe/{CONTRACT}/1.2.0)"]
    assert "`refund_failure_events`" in added_12
    assert "`charge_refunds`" not in added_12.split(";")[0]  # 1.1.0 added it already
    assert "monotone rules" in added_12
    newest_version = _versions()[-1].contract.version
    lead = next(b for b in blocks if isinstance(b, Paragraph))
    assert lead.text.startswith(
        f"The newest version is [{newest_version}](/verify/stripe/{CONTRACT})"
    )
    newest = versions_section(_versions(), shown=newest_version)
    assert next(b for b in newest if isinstance(b, Paragraph)).text.startswith("This is the newest")


def test_the_skill_page_says_which_level_is_the_effect_done() -> None:
    registry = get_registry()
    contracts = tuple(
        PublishedContract(registry.get(cid), registry.entry(cid).hash, "community")
        for cid in ("stripe.refund.created", CONTRACT)
    )
    skill = PublishedSkill(
        provider="stripe",
        title="Stripe",
        version="0.1.0",
        certification="community",
        key_id="7fa4442cf88d4e16",
        signature_scheme="stripe",
        readback_paths=("/v1/refunds/{id}",),
        contracts=contracts,
    )
    document = skill_document(skill)
    levels = {row[0]: row for row in _rows(document.blocks, "Level")}
    assert levels["`created`"][3] == "no"
    assert levels["`succeeded`"][3] == "yes"
    assert levels["`created`"][1] == "[stripe.refund.created](/verify/stripe/stripe.refund.created)"
    text = to_markdown(document)
    assert "level `created` says `safe_to_claim_complete: false`" in text
    assert "| Publisher key id | `7fa4442cf88d4e16` |" in text
    assert "- `/v1/refunds/{id}`" in text


def test_the_markdown_writer_keeps_a_blank_line_between_blocks() -> None:
    document = Document(
        "t",
        (
            Heading(1, "Title"),
            Table(("a", "b"), (("x|y", "`z`"),)),
            Paragraph("after", gap_before=True),
            Bullets(("one", "two")),
        ),
    )
    assert to_markdown(document) == (
        "# Title\n\n| a | b |\n| --- | --- |\n| x\\|y | `z` |\n\n\nafter\n\n- one\n- two\n"
    )
