"""Stripe's search query language and ``expand[]`` paths, as pure functions (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from services.sandbox.errors import StripeError
from services.sandbox.expand import check_paths, expand_paths
from services.sandbox.search import SEARCH_FIELDS, search

CHARGES = SEARCH_FIELDS["charges"]


def _rows() -> list[dict[str, Any]]:
    return [
        {"_seq": 1, "id": "ch_a", "object": "charge", "amount": 1500, "currency": "usd",
         "status": "succeeded", "refunded": False, "customer": None,
         "metadata": {"order_id": "42", "note": "it's"}},
        {"_seq": 2, "id": "ch_b", "object": "charge", "amount": 500, "currency": "eur",
         "status": "succeeded", "refunded": True, "customer": "cus_1",
         "metadata": {"order_id": "43"}},
    ]  # fmt: skip


def _ids(query: str) -> list[str]:
    answer = search(
        _rows(), resource="charges", params={"query": query}, url="/v1/charges/search",
        render=lambda o: {k: v for k, v in o.items() if not k.startswith("_")},
    )  # fmt: skip
    return [o["id"] for o in answer["data"]]


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        ("amount:1500", ["ch_a"]),
        ("amount>=500", ["ch_b", "ch_a"]),
        ("amount<1000", ["ch_b"]),
        ("-currency:'usd'", ["ch_b"]),
        ('currency:"usd" OR refunded:"true"', ["ch_b", "ch_a"]),
        ("currency:'usd' AND refunded:'true'", []),
        ("refunded:'false'", ["ch_a"]),
        ("customer:null", ["ch_a"]),
        ("-customer:null", ["ch_b"]),
        ("metadata['order_id']:'43'", ["ch_b"]),
        ('metadata["note"]:"it\'s"', ["ch_a"]),
        (r"metadata['note']:'it\'s'", ["ch_a"]),
        ("status~'ucce'", ["ch_b", "ch_a"]),
        ("  amount>0   AND   status:'succeeded'  ", ["ch_b", "ch_a"]),
    ],
)
def test_queries(query: str, ids: list[str]) -> None:
    assert _ids(query) == ids


@pytest.mark.parametrize(
    "query",
    [
        "",
        "amount",
        "nope:'x'",
        "metadata:'x'",
        "amount:1 AND currency:'usd' OR status:'x'",
        "amount:1 currency:'usd'",
        "amount:1ANDcurrency:'usd'",
        "status~'ab'",
        "amount>'many'",
        " AND ".join(["amount>0"] * 11),
    ],
)
def test_bad_queries_are_a_400_on_query(query: str) -> None:
    with pytest.raises(StripeError) as err:
        _ids(query)
    assert err.value.status == 400
    assert err.value.param == "query"


@pytest.mark.parametrize(
    ("returns", "path"),
    [
        ("refund", "charge"),
        ("refund", "charge.payment_intent.latest_charge.customer"),
        ("charge", "refunds"),
        ("charge", "refunds.data.charge"),
        ("list:refund", "data.charge"),
        ("payment_intent", "latest_charge"),
        ("checkout.session", "line_items"),
    ],
)
def test_expandable_paths(returns: str, path: str) -> None:
    check_paths(returns, [path])


@pytest.mark.parametrize(
    ("returns", "path"),
    [
        ("refund", "nope"),
        ("refund", "charge.nope"),
        ("list:refund", "charge"),
        ("charge", "refunds.charge"),
        ("event", "data"),
        ("", "anything"),
        ("refund", "charge.payment_intent.latest_charge.payment_intent.latest_charge"),
    ],
)
def test_unexpandable_paths(returns: str, path: str) -> None:
    with pytest.raises(StripeError) as err:
        check_paths(returns, [path])
    assert (err.value.status, err.value.param) == (400, "expand")


def test_expand_parameter_forms() -> None:
    assert expand_paths(None) == []
    assert expand_paths("charge") == ["charge"]
    assert expand_paths({"0": "charge", "1": "payment_intent"}) == ["charge", "payment_intent"]
    with pytest.raises(StripeError):
        expand_paths({"a": "charge"})
