"""The rendered page of stripe.refund.succeeded carries every row of the published seed page.

The seed page is vendored beside this test (``fixtures/stripe.refund.succeeded-1.0.0.page.md``,
the page as it was published, byte for byte). Its Markdown tables and the render's are parsed;
every seed row (the hash row aside: the hash is of our own file) must appear in the render
table with the same header, found by its first cell, and every data column must be equal,
cell for cell.

Prose columns — Meaning, Description and Reason — are only required to be non-empty: the
project writes its own prose, so those sentences differ from the seed's on purpose (and a
test below makes sure they do). The render also has rows the seed lacks, such as the currency
conditions; that is fine.

Every shipped version is checked: 1.0.0 (the seed's contract), 1.1.0, which adds the
readback of the charge's refunds, and 1.2.0, which adds the refund's failure events and the
readbacks' monotone rules; each must keep every row of the seed (its Version row aside, which
names its own version).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.core.cells import format_duration_ms, format_value
from shared.core.render import render_page
from shared.trust.registry import SHIPPED_CONTRACTS_DIR, SHIPPED_KEYS_DIR, load_registry
from shared.trust.skills import load_trusted_keys

VERSIONS = ("1.0.0", "1.1.0", "1.2.0", "1.3.0")
SEED_PAGE = Path(__file__).parent / "fixtures" / "stripe.refund.succeeded-1.0.0.page.md"
PROSE_COLUMNS = {"Meaning", "Description", "Reason"}

Table = tuple[tuple[str, ...], list[tuple[str, ...]]]


def parse_tables(markdown: str) -> list[Table]:
    """Every pipe table: (header, rows), cells stripped, escaped pipes restored."""
    tables: list[Table] = []
    block: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if line.strip().startswith("|"):
            block.append(line.strip())
            continue
        if len(block) >= 2 and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", block[1]):
            rows = [_cells(row) for row in block]
            tables.append((rows[0], rows[2:]))
        block = []
    return tables


def _cells(row: str) -> tuple[str, ...]:
    inner = row[1:-1] if row.endswith("|") else row[1:]
    return tuple(c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner))


def _seed_text() -> str:
    return SEED_PAGE.read_text(encoding="utf-8")


def _render(version: str = "1.0.0") -> str:
    registry = load_registry(
        [SHIPPED_CONTRACTS_DIR],
        trusted_keys=load_trusted_keys([SHIPPED_KEYS_DIR]),
        allow_unsigned=False,
    )
    entry = registry.entry("stripe.refund.succeeded", version)
    return render_page(
        entry.contract,
        digest=entry.hash,
        certification=entry.certification,
        skill_title=entry.skill_title(),
    )


def test_seed_page_has_the_tables_this_test_relies_on() -> None:
    headers = [header for header, _ in parse_tables(_seed_text())]
    assert ("Fact", "Value") in headers
    assert ("Timing member", "Value") in headers
    assert ("Rule", "Match", "Verdict", "Reason") in headers
    assert len(headers) == 8


@pytest.mark.parametrize("version", VERSIONS)
def test_every_seed_row_is_in_the_render(version: str) -> None:
    seed_tables = parse_tables(_seed_text())
    render_tables = parse_tables(_render(version))
    checked = 0
    for header, seed_rows in seed_tables:
        candidates = [rows for h, rows in render_tables if h == header]
        assert candidates, f"the render has no table with header {header}"
        by_key = {row[0]: row for rows in candidates for row in rows}
        for seed_row in seed_rows:
            if seed_row[0] == "Hash":
                continue
            assert seed_row[0] in by_key, f"row {seed_row[0]} of table {header} is missing"
            row = by_key[seed_row[0]]
            assert len(row) == len(seed_row)
            for column, want, got in zip(header, seed_row, row, strict=True):
                if column in PROSE_COLUMNS:
                    assert got, f"{seed_row[0]}: empty {column}"
                elif seed_row[0] == "Version" and column == "Value":
                    assert got == f"`{version}`"
                else:
                    assert got == want, f"{seed_row[0]} / {column}: {got!r} != {want!r}"
            checked += 1
    assert checked >= 30  # identity, subject, correlation, channels, conditions, rules, timing


@pytest.mark.parametrize("version", VERSIONS)
def test_hash_row_shows_sixteen_hex_digits_of_our_hash(version: str) -> None:
    rows = dict(next(rows for h, rows in parse_tables(_render(version)) if h == ("Fact", "Value")))
    assert re.fullmatch(r"`[0-9a-f]{16}`", rows["Hash"])


@pytest.mark.parametrize("version", VERSIONS)
def test_prose_is_the_projects_own(version: str) -> None:
    """No Meaning / Description / Reason cell repeats the seed's sentence."""
    seed = parse_tables(_seed_text())
    render = parse_tables(_render(version))
    for header, seed_rows in seed:
        prose = [i for i, column in enumerate(header) if column in PROSE_COLUMNS]
        render_rows = {r[0]: r for h, rows in render if h == header for r in rows}
        for seed_row in seed_rows:
            for i in prose:
                assert render_rows[seed_row[0]][i] != seed_row[i]


def test_render_has_the_extra_currency_rows_and_the_derived_answers() -> None:
    page = _render()
    assert "| `refund_currency_matches` |" in page
    assert "| `refund_currency_mismatch` |" in page
    assert "VERIFIED on the action response alone?" in page
    assert "`refund_readback` and `refund_succeeded_events`" in page
    assert "UNVERIFIABLE with the reason `evidence_unavailable_before_timeout`" in page
    assert "HUMAN_REVIEW" in page
    assert "604800000 ms (7 days)" in page


@pytest.mark.parametrize("version", VERSIONS)
def test_sources_list_every_seed_source(version: str) -> None:
    seed_sources = [line for line in _seed_text().splitlines() if line.startswith("- `stripe.")]
    page = _render(version).splitlines()
    assert len(seed_sources) == 9
    for line in seed_sources:
        assert line in page


@pytest.mark.parametrize(
    ("value", "shown"),
    [("succeeded", "succeeded"), (1, "1"), (["a", "b"], '["a","b"]'), (True, "true")],
)
def test_format_value(value: object, shown: str) -> None:
    assert format_value(value) == shown


@pytest.mark.parametrize(
    ("ms", "shown"),
    [(250, "250 ms"), (1000, "1000 ms (1 second)"), (604800000, "604800000 ms (7 days)")],
)
def test_format_duration(ms: int, shown: str) -> None:
    assert format_duration_ms(ms) == shown


def test_render_shows_the_certification_it_is_given() -> None:
    from shared.core.contract import Contract
    from tests.unit.contracts.helpers import contract_data

    contract = Contract.model_validate(contract_data())
    page = render_page(contract, certification="unsigned")
    assert "| Certification | Unsigned |" in page
    assert "| Skill | [Stripe 0.1.0](/verify/stripe) |" in page


def test_the_1_1_0_page_shows_the_listing_of_the_charge_and_its_conditions() -> None:
    tables = parse_tables(_render("1.1.0"))
    reads = {row[0]: row[1] for h, rows in tables if h[:2] == ("Channel", "Reads") for row in rows}
    assert reads["`charge_refunds`"] == (
        "`GET /v1/refunds` with `charge` = `$input.charge`, "
        "`created[gte]` = `$operation.created_at`, `limit` = `100`, "
        "every page read (`stripe_list`, at most 10 pages, more is an error)"
    )
    negative = {
        row[0]: row for h, rows in tables if h[:2] == ("Condition", "Class") for row in rows
    }
    assert negative["`duplicate_refund_by_readback`"][1] == "duplicate side effect"
    assert negative["`duplicate_refund_by_readback`"][3:] == (
        "`$observed.charge_refunds.count`",
        "`gt`",
        "`1`",
    )
    completion = {
        row[0]: row for h, rows in tables if h[:2] == ("Condition", "Meaning") for row in rows
    }
    assert completion["`single_refund_since_operation`"][2:] == (
        "`$observed.charge_refunds.count`",
        "`lte`",
        "`1`",
        "`charge_refunds`",
    )
