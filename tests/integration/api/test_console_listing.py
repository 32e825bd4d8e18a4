"""The console's operations list reads ``listing.summary_page``: the same rows, in the same
order, with the same cursors as the API's ``listing.list_page``, for every filter and page."""

from __future__ import annotations

import pytest

from services.ingress.api.listing import OperationFilters, list_page, summary_page
from shared.db.session import session_scope
from tests.integration.api.conftest import Api
from tests.integration.api.test_console import in_human_review
from tests.integration.api.test_operations_api import create

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "filters",
    [
        OperationFilters(),
        OperationFilters(state="HUMAN_REVIEW"),
        OperationFilters(needs_person=True),
        OperationFilters(contract="stripe.refund.succeeded", verdict="UNVERIFIABLE"),
    ],
)
def test_the_consoles_summary_page_lists_what_the_api_lists(
    api: Api, filters: OperationFilters
) -> None:
    for _ in range(5):
        create(api)
        in_human_review(api)
    create(api, headers=api.b.headers())
    with session_scope(api.engine) as session:
        cursors: list[str | None] = [None, None]
        for _ in range(4):
            full = list_page(
                session,
                workspace_id=api.a.workspace_id,
                filters=filters,
                limit=3,
                cursor=cursors[0],
            )
            lean = summary_page(
                session,
                workspace_id=api.a.workspace_id,
                filters=filters,
                limit=3,
                cursor=cursors[1],
            )
            assert [row.id for row in lean.rows] == [item.id for item in full.data]
            for row, item in zip(lean.rows, full.data, strict=True):
                assert (row.contract_id, row.contract_version) == (
                    item.contract.id,
                    item.contract.version,
                )
                assert (row.state, row.verdict, row.reason, row.final) == (
                    item.state,
                    item.verdict,
                    item.reason,
                    item.final,
                )
                assert (row.created_at, row.updated_at) == (item.created_at, item.updated_at)
            assert lean.next_cursor == full.next_cursor
            cursors = [full.next_cursor, lean.next_cursor]
            if full.next_cursor is None:
                break
