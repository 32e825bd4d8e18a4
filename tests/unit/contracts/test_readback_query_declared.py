"""A readback's query stays inside what its skill declares (``readback.query``), and a workspace
contract's reading keeps only what its conditions read.

Before ``readback.query`` a query was never compared: ``expand[]=charge.customer`` on a declared
refund path made the stored reading hold the whole Customer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from services.observer.jobs import http_job, kept_reading
from shared.core.context import build_context
from shared.core.contract import Contract, canonical_json
from shared.core.kept import keep_read, read_paths
from shared.core.lint.skill import lint_readback_paths, lint_skill_manifest
from shared.core.queries import undeclared_query
from shared.core.skill import ReadbackSpec
from shared.core.types import ObservationStatus, OperationFacts
from shared.evidence.readings import Reading, digest_of
from tests.unit.contracts.helpers import STRIPE, SUCCEEDED, SUCCEEDED_1_1, contract_data, load_yaml

MANIFEST = load_yaml(STRIPE / "skill.yaml")
PATHS = tuple(MANIFEST["readback"]["paths"])
QUERY = MANIFEST["readback"]["query"]


def _with_query(query: dict[str, Any] | None = None, path: str | None = None) -> Contract:
    doc = contract_data(SUCCEEDED)
    http = doc["channels"][0]["http"]
    if query is not None:
        http["query"] = query
    if path is not None:
        http["path"] = path
    return Contract.model_validate(doc)


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ({"expand[]": "charge.customer"}, None),
        (None, "/v1/refunds/{$correlation.refund_id}?expand[]=charge.customer"),
        (None, "/v1/refunds/{$correlation.refund_id}?expand%5B%5D=charge.customer"),
        ({"expand[0]": "charge"}, None),
        ({"charge": "$input.charge"}, None),  # declared for the list, not for one refund
    ],
)
def test_a_workspace_contract_with_an_undeclared_query_parameter_is_refused(
    query: dict[str, Any] | None, path: str | None
) -> None:
    contract = _with_query(query, path)
    errors = lint_readback_paths(
        contract, {"stripe": PATHS}, file="<request>", queries={"stripe": QUERY}
    )
    assert [e.field for e in errors] == ["channels[0].http.query"]
    name = next(iter(query)) if query else "expand[]"
    assert f"query parameter {name!r} is not declared for /v1/refunds/{{id}}" in errors[0].message


def test_the_stripe_skill_declares_what_its_contracts_send_and_nothing_more() -> None:
    shipped = Contract.model_validate(contract_data(SUCCEEDED_1_1))
    assert (
        lint_readback_paths(shipped, {"stripe": PATHS}, file="x", queries={"stripe": QUERY}) == []
    )
    sent = {
        name
        for ch in shipped.channels
        if ch.http is not None and ch.http.path == "/v1/refunds"
        for name in ch.http.query
    }
    assert QUERY["/v1/refunds"] == dict.fromkeys(sorted(sent), "any")
    # Its own manifest lints clean with its contracts.
    files = {
        e["file"]: Contract.model_validate(load_yaml(STRIPE / e["file"]))
        for e in MANIFEST["contracts"]
    }
    assert lint_skill_manifest(MANIFEST, file="skill.yaml", contracts=files) == []


def test_a_parameter_that_names_a_resource_takes_only_its_declared_values() -> None:
    declared = {"/v1/refunds/{id}": {"expand[]": ["charge"]}}
    path = "/v1/refunds/{$correlation.refund_id}"
    assert undeclared_query(path, {"expand[]": "charge"}, paths=PATHS, declared=declared) == []
    for value in ("charge.customer", "$input.charge", 1):
        [problem] = undeclared_query(path, {"expand[]": value}, paths=PATHS, declared=declared)
        assert "may only be 'charge'" in problem
    [inline] = undeclared_query(
        f"{path}?expand[]={{$input.charge}}", {}, paths=PATHS, declared=declared
    )
    assert "may only be 'charge', not '$input.charge'" in inline


def test_a_skill_without_a_query_declaration_lets_no_path_take_a_query() -> None:
    contract = _with_query({"limit": 1})
    errors = lint_readback_paths(contract, {"stripe": PATHS}, file="x")
    assert [e.field for e in errors] == ["channels[0].http.query"]


def test_the_declaration_names_only_declared_paths_and_lists_values() -> None:
    with pytest.raises(ValidationError, match="not one of the readback paths"):
        ReadbackSpec.model_validate({"paths": ["/a"], "query": {"/b": {"x": "any"}}})
    with pytest.raises(ValidationError, match="lists no value"):
        ReadbackSpec.model_validate({"paths": ["/a"], "query": {"/a": {"x": []}}})
    with pytest.raises(ValidationError):
        ReadbackSpec.model_validate({"paths": ["/a"], "query": {"/a": {"x": "anything"}}})


def _facts() -> OperationFacts:
    return OperationFacts(
        id="op_1",
        created_at=datetime(2026, 9, 10, tzinfo=UTC),
        input={"charge": "ch_1", "amount": 500, "currency": "usd"},
        action_result={"id": "re_1", "object": "refund", "status": "pending"},
    )


def test_the_observer_refuses_to_send_an_undeclared_query() -> None:
    """A contract stored before the declaration: the job is refused, never sent."""
    contract = _with_query({"expand[]": "charge.customer"})
    context = build_context(contract, _facts())
    spec = ReadbackSpec.model_validate(MANIFEST["readback"])
    job = http_job(contract.channels[0], contract, context, readback=spec)
    assert job.refused is not None
    assert job.refused.startswith("query_not_declared: query parameter 'expand[]'")
    clean = _with_query()
    assert http_job(clean.channels[0], clean, context, readback=spec).refused is None


BILLING = {"email": "ada@example.com", "name": "Ada", "phone": "+1 555"}
REFUND = {
    "id": "re_1",
    "object": "refund",
    "status": "succeeded",
    "amount": 500,
    "currency": "usd",
    "charge": "ch_1",
    "created": 1,
    "metadata": {"billing": BILLING},  # nothing the conditions read
}


def test_a_workspace_contracts_reading_keeps_only_what_its_conditions_read() -> None:
    contract = _with_query()
    paths = read_paths(contract)
    assert ("status",) in paths["refund_readback"]
    kept = keep_read(REFUND, paths["refund_readback"])
    assert "ada@example.com" not in str(kept)
    assert kept["status"] == "succeeded"
    assert kept["amount"] == 500
    job = http_job(
        contract.channels[0],
        contract,
        build_context(contract, _facts()),
        keep=paths["refund_readback"],
    )
    raw = canonical_json(REFUND)
    reading = Reading(
        channel="refund_readback",
        status=ObservationStatus.OK,
        observed_at=datetime(2026, 9, 10, tzinfo=UTC),
        value=REFUND,
        raw=raw,
        digest=digest_of(raw),
    )
    stored = kept_reading(job, reading)
    assert stored.value == kept
    assert stored.raw is not None
    assert b"ada@example.com" not in stored.raw
    assert stored.digest == digest_of(canonical_json(kept))
    # A shipped contract's job keeps the reading whole.
    whole = http_job(contract.channels[0], contract, build_context(contract, _facts()))
    assert kept_reading(whole, reading) is reading


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ([("a",)], {"a": {"b": 1, "c": 2}}),
        ([("a", "b")], {"a": {"b": 1}}),
        ([("l", "1", "x")], {"l": [None, {"x": 3}]}),
        ([("l",)], {"l": [{"x": 1, "y": 2}, {"x": 3}]}),
        ([()], {"a": {"b": 1, "c": 2}, "l": [{"x": 1, "y": 2}, {"x": 3}], "s": "t"}),
        ([("s", "deeper"), ("missing",)], {"s": "t"}),
    ],
)
def test_keep_read(paths: list[tuple[str, ...]], expected: Any) -> None:
    value = {"a": {"b": 1, "c": 2}, "l": [{"x": 1, "y": 2}, {"x": 3}], "s": "t"}
    assert keep_read(value, paths) == expected


def test_the_kept_paths_are_found_once_per_contract_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.observer import jobs
    from shared.core.contract import contract_hash

    found: list[Contract] = []
    monkeypatch.setattr(jobs, "_kept_paths", type(jobs._kept_paths)(jobs._kept_paths.size))
    monkeypatch.setattr(jobs, "read_paths", lambda c: found.append(c) or read_paths(c))
    contract, other = _with_query(), _with_query(path=PATHS[-1])
    for _ in range(3):
        kept = jobs.kept_paths(contract, contract_hash=contract_hash(contract))
        assert kept == read_paths(contract)
    assert found == [contract]
    jobs.kept_paths(other, contract_hash=contract_hash(other))  # another document, its own
    assert found == [contract, other]
