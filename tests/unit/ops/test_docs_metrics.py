"""docs/operations.md names only metrics and label values that exist.

The alerting rules in the page are parsed (the YAML block), and every selector of every
expression is checked against ``shared.runtime.metrics.LABEL_VALUES``: the metric is exported,
each label it matches on exists, and each value (each alternative of a ``=~"a|b"``) is one the
code gives where the values are a closed set. ``REFUSAL_REASONS`` is checked against the code
that refuses deliveries, so a new refusal reason cannot go uncounted in the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from shared.runtime.metrics import LABEL_VALUES, REFUSAL_REASONS

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "operations.md"
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
SELECTOR = re.compile(r"\b(provely_[a-z0-9_]+)(\{[^}]*\})?")
MATCHER = re.compile(r'([a-z0-9_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _rules() -> list[dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    groups = [yaml.safe_load(b) for b in blocks if "alert:" in b]
    assert groups, "docs/operations.md has no alerting rules block"
    return [rule for doc in groups for group in doc["groups"] for rule in group["rules"]]


def _metric(name: str) -> str | None:
    if name in LABEL_VALUES:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in LABEL_VALUES:
            return name.removesuffix(suffix)
    return None


def _problems(expr: str) -> list[str]:
    problems = []
    selectors = SELECTOR.findall(expr)
    if not selectors:
        problems.append(f"{expr!r} names no provely metric")
    for name, braces in selectors:
        metric = _metric(name)
        if metric is None:
            problems.append(f"{name} is not exported")
            continue
        labels = LABEL_VALUES[metric]
        for label, op, value in MATCHER.findall(braces or ""):
            if label == "le" and name.endswith("_bucket"):
                continue
            if label not in labels:
                problems.append(f"{metric} has no label {label}")
                continue
            known = labels[label]
            if known is None:
                continue  # an open set (a provider, a route template)
            wanted = value.split("|") if op in ("=~", "!~") else [value]
            unknown = [v for v in wanted if v not in known]
            if unknown:
                problems.append(f"{metric}{{{label}}} never takes {unknown}")
    return problems


def test_every_alert_names_existing_metrics_and_label_values() -> None:
    rules = _rules()
    assert len(rules) >= 4
    problems = [p for rule in rules for p in _problems(rule["expr"])]
    assert not problems, problems


def test_the_check_catches_a_label_value_that_does_not_exist() -> None:
    # The alert of the old page: "signature" was never a reason.
    assert _problems('rate(provely_events_refused_total{reason="signature"}[5m]) > 0')
    assert _problems('provely_operations{state=~"PENDING|STUCK"} > 0')
    assert _problems("provely_no_such_metric > 0")
    assert _problems('provely_tasks_total{queue="x"} > 0')
    assert not _problems('provely_operations{state="HUMAN_REVIEW"} > 0')


def test_the_reasons_table_lists_every_refusal_reason() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("Reasons of `provely_events_refused_total`", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"`([a-z0-9_]+)`", table))
    assert documented == set(REFUSAL_REASONS)


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("shared/trust/signatures.py", r'SignatureError\(\s*"([a-z0-9_]+)"'),
        ("shared/intake/parse.py", r'MalformedEvent\(\s*"([a-z0-9_]+)"'),
        ("services/ingress/intake/webhooks.py", r'_refused\(provider,\s*"([a-z0-9_]+)"\)'),
        ("services/ingress/intake/webhooks.py", r'\d{3}: "([a-z0-9_]+)"'),
    ],
)
def test_every_refusal_the_code_gives_is_a_known_reason(path: str, pattern: str) -> None:
    found = set(re.findall(pattern, (REPO / path).read_text(encoding="utf-8")))
    assert found, f"no refusal reason found in {path}: the pattern is out of date"
    assert found <= REFUSAL_REASONS, found - REFUSAL_REASONS


def test_the_metrics_table_and_the_registry_name_the_same_metrics() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("| metric | type | labels | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(provely_[a-z0-9_]+)` \| [a-z]+ \| ([^|]*) \|", table, re.MULTILINE)
    documented = {name: set(re.findall(r"`([a-z_]+)`", labels)) for name, labels in rows}
    assert documented == {name: set(labels) for name, labels in LABEL_VALUES.items()}


def test_the_registry_of_label_values_matches_the_exported_metrics() -> None:
    from prometheus_client import REGISTRY

    from services.ingress.access import _http_metrics

    _http_metrics()  # the HTTP metrics are made with the ingress's middleware
    collectors = REGISTRY._names_to_collectors  # name (and its _total, _bucket …) -> collector
    for name, labels in LABEL_VALUES.items():
        if name == "provely_operations":
            continue  # counted at scrape time by `provely serve metrics`, on its own registry
        collector = collectors.get(name)
        assert collector is not None, f"{name} is not registered"
        assert set(collector._labelnames) == set(labels), name
