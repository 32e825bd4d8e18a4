"""Every lint rule, one mutation each: the rule fires, on the field it names, with its message.

The mutations start from the shipped ``stripe.refund.succeeded`` document (which lints clean) and
break exactly one thing, so a rule that stopped firing — or fired on another field — fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared.core.lint.document import lint_document
from shared.core.lint.skill import lint_skill_manifest
from tests.unit.contracts.helpers import STRIPE, contract_data, load_yaml

Mutation = Callable[[dict[str, Any]], None]


def _index(doc: dict[str, Any], section: str, ident: str) -> dict[str, Any]:
    key = "name" if section == "channels" else "id"
    for item in doc[section]:
        if item[key] == ident:
            return item  # type: ignore[no-any-return]
    raise AssertionError(f"{section} has no {ident}")


def _at(section: str, ident: str, **changes: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _index(doc, section, ident).update(changes)

    return mutate


def _doc(**changes: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc.update(changes)

    return mutate


def _timing(**changes: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        for key, value in changes.items():
            if key.startswith("backoff_"):
                doc["timing"]["backoff"][key.removeprefix("backoff_")] = value
            else:
                doc["timing"][key] = value

    return mutate


def _input(name: str, **spec: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc["input"].setdefault(name, {"type": "string"}).update(spec)

    return mutate


def _readback_path(path: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _index(doc, "channels", "refund_readback")["http"]["path"] = path

    return mutate


def _only_weak(doc: dict[str, Any]) -> None:
    doc["correlation"] = [c for c in doc["correlation"] if c["assurance"] == "weak"]


def _duplicate_source(doc: dict[str, Any]) -> None:
    doc["sources"].append(dict(doc["sources"][0]))


def _key_redeclared(doc: dict[str, Any]) -> None:
    strategy = next(c for c in doc["correlation"] if c["strategy"] == "idempotency_key")
    strategy["keys"][0]["name"] = "refund_id"


def _correlation_key_expr(doc: dict[str, Any]) -> None:
    doc["correlation"][0]["keys"][0]["expr"] = "refund"


def _duplicate_event_type(doc: dict[str, Any]) -> None:
    channel = _index(doc, "channels", "refund_succeeded_events")
    channel["webhook"]["event_types"] = ["refund.updated", "refund.updated"]


def _idempotency_header(doc: dict[str, Any]) -> None:
    doc["subject"]["idempotency"]["header"] = ""


def _subject_expr(doc: dict[str, Any]) -> None:
    doc["subject"]["identity"]["expr"] = "refund"


# (name, mutation, field prefix, words in the message)
RULES: list[tuple[str, Mutation, str, str]] = [
    ("contract id shape", _doc(id="Stripe Refund"), "id", "dotted lower-case"),
    ("api versions", _doc(provider_api_versions=[]), "provider_api_versions", "at least one"),
    ("input name", _input("Bad-Name"), "input", "plain identifier"),
    (
        "minimum of a string",
        _input("charge", minimum=1),
        "input.charge.minimum",
        "only numbers have a minimum",
    ),
    (
        "pattern of a number",
        _input("amount", pattern="x"),
        "input.amount.pattern",
        "only strings have a pattern",
    ),
    ("broken pattern", _input("currency", pattern="([a-z"), "input.currency.pattern", ""),
    (
        "backreference",
        _input("currency", pattern=r"^([a-z])\1$"),
        "input.currency.pattern",
        "RE2 cannot compile this pattern",
    ),
    (
        "lookahead",
        _input("currency", pattern=r"^(?=[a-z]{3}$)"),
        "input.currency.pattern",
        "backreferences and lookaround are not available",
    ),
    ("subject identity", _subject_expr, "subject.identity.expr", "must be an expression"),
    ("no correlation", _doc(correlation=[]), "correlation", "at least one correlation"),
    ("key expression", _correlation_key_expr, "correlation[0].keys[0].expr", "an expression"),
    ("key redeclared", _key_redeclared, "correlation", "declared twice differently"),
    ("weak only", _only_weak, "correlation", "weak correlation alone never decides"),
    ("idempotency header", _idempotency_header, "subject.idempotency.header", "idempotency"),
    (
        "channel description",
        _at("channels", "refund_readback", description=""),
        "channels[0].description",
        "describe what the channel reads",
    ),
    (
        "negative latency",
        _at("channels", "refund_readback", typical_latency_ms=-1),
        "channels[0].typical_latency_ms",
        "must not be negative",
    ),
    (
        "zero freshness",
        _at("channels", "refund_readback", freshness_ms=0),
        "channels[0].freshness_ms",
        "must be positive",
    ),
    (
        "worst case below typical",
        _at("channels", "refund_succeeded_events", worst_case_ms=1),
        "channels[1].worst_case_ms",
        "shorter than the typical latency",
    ),
    (
        "http channel with webhook parameters",
        _at("channels", "refund_readback", webhook={"event_types": ["refund.updated"]}),
        "channels[0].webhook",
        "takes no webhook parameters",
    ),
    (
        "webhook channel with http parameters",
        _at("channels", "refund_succeeded_events", http={"path": "/v1/x"}),
        "channels[1].http",
        "takes no http parameters",
    ),
    ("event type twice", _duplicate_event_type, "channels[1].webhook.event_types", "twice"),
    ("no completion", _doc(completion=[]), "completion", "at least one completion condition"),
    (
        "meaning",
        _at("completion", "refund_status_succeeded", meaning=""),
        "completion[0].meaning",
        "say what the condition means",
    ),
    (
        "negative reason",
        _at("negative", "refund_on_wrong_charge", reason=""),
        "negative[0].reason",
        "give the reason in words",
    ),
    (
        "verdict rule reason",
        _at("verdict_map", "terminal_failure", reason=""),
        "verdict_map[0].reason",
        "give the reason in words",
    ),
    (
        "condition id",
        _at("completion", "refund_status_succeeded", id="Status OK"),
        "completion[0]",
        "an id is lower-case",
    ),
    (
        "numbers compared with a string",
        _at("completion", "refund_status_succeeded", path="$input.charge", op="gt", value=1),
        "completion[0].path",
        "compares numbers",
    ),
    (
        "times compared with a string",
        _at(
            "completion",
            "refund_status_succeeded",
            path="$operation.id",
            op="time_after",
            value="$operation.created_at",
        ),
        "completion[0].path",
        "compares times",
    ),
    (
        "bare $input",
        _at("negative", "refund_on_wrong_charge", value="$input"),
        "negative[0].value",
        "an input is read as $input.<field>",
    ),
    (
        "bare $correlation",
        _at("completion", "refund_status_succeeded", value="$correlation"),
        "completion[0].value",
        "a key is read as $correlation.<key>",
    ),
    (
        "bare $observed",
        _at("negative", "refund_on_wrong_charge", value="$observed"),
        "negative[0].value",
        "name a channel",
    ),
    ("negative initial delay", _timing(initial_delay_ms=-1), "timing.initial_delay_ms", "negative"),
    ("backoff max", _timing(backoff_max_ms=0), "timing.backoff.max_ms", "must be positive"),
    ("backoff factor", _timing(backoff_factor=0.5), "timing.backoff.factor", "at least 1"),
    (
        "constant backoff factor",
        _timing(backoff_kind="constant", backoff_factor=2),
        "timing.backoff.factor",
        "a constant backoff has factor 1",
    ),
    (
        "on-timeout reason id",
        _timing(
            on_timeout={
                "verdict": "UNVERIFIABLE",
                "reason": "No Evidence",
                "escalate": "human_review",
            }
        ),
        "timing.on_timeout.reason",
        "a reason id is lower-case",
    ),
    ("source twice", _duplicate_source, "sources[", "is listed twice"),
    (
        "relative path",
        _readback_path("v1/refunds/{$correlation.refund_id}"),
        "channels[0].http",
        "/",
    ),
    (
        "unbalanced braces",
        _readback_path("/v1/refunds/{$correlation.refund_id"),
        "channels[0]",
        "{ }",
    ),
    ("literal placeholder", _readback_path("/v1/refunds/{refund}"), "channels[0]", "expression"),
    (
        "path reads observations",
        _readback_path("/v1/refunds/{$observed.refund_readback.id}"),
        "channels[0]",
        "cannot depend on observations",
    ),
    ("dot dot segment", _readback_path("/v1/refunds/../charges"), "channels[0]", ". or .."),
    ("dot segment", _readback_path("/v1/./refunds/{$correlation.refund_id}"), "channels[0]", ".."),
    ("encoded dot dot", _readback_path("/%2e%2E/admin"), "channels[0]", "percent-encoded"),
    ("leaves the base path", _readback_path("/../../x/{$input.charge}"), "channels[0]", ". or .."),
]


@pytest.mark.parametrize(("name", "mutation", "field", "words"), RULES, ids=[r[0] for r in RULES])
def test_lint_rule_fires_on_its_field(
    name: str, mutation: Mutation, field: str, words: str
) -> None:
    doc = contract_data()
    mutation(doc)
    errors = lint_document(doc, file="x.yaml")
    matching = [e for e in errors if e.field.startswith(field) and words in e.message]
    assert matching, f"{name}: expected {field!r} with {words!r}, got {[str(e) for e in errors]}"
    assert all(str(e).startswith("x.yaml: ") for e in errors)


def _manifest() -> dict[str, Any]:
    return load_yaml(STRIPE / "skill.yaml")  # type: ignore[no-any-return]


def test_skill_manifest_rules() -> None:
    manifest = _manifest()
    manifest["contracts"].append(dict(manifest["contracts"][0]))
    manifest["default_base_url"] = "ftp://api.example.com"
    fields = {(e.field, e.message) for e in lint_skill_manifest(manifest, file="skill.yaml")}
    listed_twice = [f for f, m in fields if m.endswith("is listed twice")]
    assert listed_twice
    assert listed_twice[0].endswith(".file")
    assert ("default_base_url", "must be an http(s) URL") in fields


def test_skill_manifest_is_recognised_by_lint_document() -> None:
    manifest = _manifest()
    manifest["default_base_url"] = "api.example.com"
    errors = lint_document(manifest, file="skill.yaml")
    assert [e.field for e in errors] == ["default_base_url"]


def test_a_skills_contracts_read_only_its_declared_paths() -> None:
    from shared.core.contract import Contract

    manifest = _manifest()
    assert manifest["readback"]["paths"]
    inside = Contract.model_validate(contract_data())
    entry = manifest["contracts"][0]["file"]
    assert lint_skill_manifest(manifest, file="skill.yaml", contracts={entry: inside}) == []
    doc = contract_data()
    _readback_path("/v1/balance_transactions/{$correlation.refund_id}")(doc)
    outside = Contract.model_validate(doc)
    errors = lint_skill_manifest(manifest, file="skill.yaml", contracts={entry: outside})
    assert [e.field for e in errors] == ["channels[0].http.path"]
    assert "not among the paths the stripe skill declares" in errors[0].message


def test_a_provider_without_declared_paths_cannot_be_read() -> None:
    from shared.core.contract import Contract
    from shared.core.lint.skill import lint_readback_paths

    contract = Contract.model_validate(contract_data())
    errors = lint_readback_paths(contract, {"stripe": None}, file="<request>")
    assert [e.field for e in errors] == ["channels[0].http.path"]
    assert "no stripe skill declares readback paths" in errors[0].message
    # Channels of other providers are left to their own skills.
    assert lint_readback_paths(contract, {"stripe": None}, file="x", providers=["http"]) == []
