"""Static checks of contracts and skill manifests: parsed data in, a list of :class:`LintError` out.

The CLI (``provely contracts lint``), the registry and the HTTP API (``POST /v1/contracts``)
all report through these functions, so a mistake reads the same everywhere::

    contracts/x.yaml: stripe.refund.succeeded: channels[0].http.path: unknown root $foo

Schema errors (pydantic) come first, in the same format; when a document does not validate,
the semantic checks do not run, since they need the model. Pure: no I/O, no clock.

Checked on a contract:

- every expression names a known root: ``$input.<declared field>``, ``$action.result…``,
  ``$operation.id`` / ``$operation.created_at``, ``$correlation.<declared key>``,
  ``$observed.<declared channel>…``; ``$event…`` only inside a webhook channel's match rules;
- each completion condition's ``evidence`` is the channel its expressions read;
- operands are typed: ``in``/``not_in`` take a list; ``gt gte lt lte`` numbers or number
  expressions; ``time_after``/``time_before`` time expressions or ISO-8601 / epoch literals;
  ``exists`` no operand or a bool;
- a channel's own ``provider`` (optional; default the skill's) is a provider id;
- an http readback's ``query`` values are expressions a path could hold (never
  ``$observed``, never a boolean) or non-empty literals; ``paginate`` reads with GET, takes
  ``max_pages`` from 1 to 100 and leaves the cursor parameters to the pager;
- levels, channel verifiers and their parameters, evidence requirements that the completion
  conditions can actually meet, correlation assurance;
- timing: positive values, backoff maximum ≥ poll interval, stale window > 0,
  ``max_attempts`` ≥ 1, timeout > initial delay, an on-timeout verdict that claims nothing;
- unique ids (conditions, negative conditions and rules share one namespace; channels; keys);
- the verdict map never gives VERIFIED or EXPIRED;
- ``when`` gates of negative conditions and verdict-map rules are checked like conditions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from shared.core.contract import Contract, HttpVerifier, MatchRule, Operator
from shared.core.paths import dot_segments, template_within
from shared.core.patterns import PatternError, compile_pattern
from shared.core.skill import SkillManifest

__all__ = [
    "KNOWN_ROOTS",
    "RESERVED_REASONS",
    "LintError",
    "is_skill_manifest",
    "lint_contract",
    "lint_document",
    "lint_readback_paths",
    "lint_skill_manifest",
    "validate_contract",
    "validation_errors",
]

KNOWN_ROOTS = ("$input", "$action", "$operation", "$correlation", "$observed", "$event")
_LEVELS = ("E1", "E2", "E3", "E4")
_EXPR = re.compile(r"^\$[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_\-]+)*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ORDERED = {Operator.GT, Operator.GTE, Operator.LT, Operator.LTE}
_TIME = {Operator.TIME_AFTER, Operator.TIME_BEFORE}
_LIST = {Operator.IN, Operator.NOT_IN}
_CHANNEL_LEVEL = {"http": "E2", "webhook": "E3"}
_CURSOR_PARAMS = ("starting_after", "ending_before")

RESERVED_REASONS = frozenset(
    {
        "all_conditions_hold",
        "awaiting_correlation",
        "awaiting_evidence",
        "correlation_conflict",
        "evidence_requirements_not_met",
        "evidence_unavailable",
        "evidence_unavailable_before_timeout",
        "stale_reading",
        "action_accepted",
        "action_rejected",
        "awaiting_rejection_confirmation",
        "action_not_reported",
        "awaiting_action_report",
        "human_review_resolved",
    }
)
"""Reason ids the runtime gives itself; a condition or rule id may not take one over."""

_NOT_EVIDENCE = (
    "reads no $observed channel, so it could never decide: the agent and the action "
    "response are not evidence"
)

StaticType = Literal["number", "string", "boolean", "time", "id", "any"]


@dataclass(frozen=True, slots=True)
class LintError:
    """One finding: the file, the contract (or skill) it concerns, the field, what is wrong."""

    file: str
    subject: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.subject}: {self.field}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {
            "file": self.file,
            "contract": self.subject,
            "field": self.field,
            "message": self.message,
        }


# --------------------------------------------------------------------------- entry points


def is_skill_manifest(data: Any) -> bool:
    """A skill manifest names a provider and lists contracts; a contract has an ``id``."""
    return (
        isinstance(data, Mapping)
        and "id" not in data
        and "provider" in data
        and "contracts" in data
    )


def lint_document(data: Any, *, file: str) -> list[LintError]:
    """Lint one parsed file: a contract or (recognised by its keys) a skill manifest."""
    if is_skill_manifest(data):
        return lint_skill_manifest(data, file=file)
    _, errors = validate_contract(data, file=file)
    return errors


def validate_contract(data: Any, *, file: str) -> tuple[Contract | None, list[LintError]]:
    """Validate and lint a contract document; the model is returned only when it has no errors."""
    subject = _subject_of(data, "id")
    if not isinstance(data, Mapping):
        return None, [LintError(file, subject, "(document)", "expected a mapping of fields")]
    try:
        contract = Contract.model_validate(data)
    except ValidationError as exc:
        return None, validation_errors(exc, file=file, subject=subject)
    errors = lint_contract(contract, file=file)
    return (None if errors else contract), errors


def validation_errors(exc: ValidationError, *, file: str, subject: str) -> list[LintError]:
    """Pydantic's errors in the lint format, one per field, in document order."""
    seen: dict[str, LintError] = {}
    for err in exc.errors():
        field = _loc_to_field(err["loc"])
        if field in seen:
            continue
        seen[field] = LintError(file, subject, field, _pydantic_message(field, err))
    return list(seen.values())


def lint_contract(contract: Contract, *, file: str) -> list[LintError]:
    """Semantic checks of a validated contract (see the module docstring)."""
    return _ContractLinter(contract, file).run()


def lint_readback_paths(
    contract: Contract,
    declared: Mapping[str, Sequence[str] | None],
    *,
    file: str,
    providers: Iterable[str] | None = None,
) -> list[LintError]:
    """Errors for the ``http`` channels of ``contract`` that read outside the paths their
    provider's skill declares (``declared``: provider → its skill's ``readback.paths``, None
    when the skill declares none). Only channels of ``providers`` are checked (default: every
    provider in ``declared``); a checked provider without declared paths reads nothing."""
    checked = set(declared if providers is None else providers)
    errors: list[LintError] = []
    for i, ch in enumerate(contract.channels):
        if ch.http is None:
            continue
        provider = ch.provider_of(contract)
        if provider not in checked:
            continue
        allowed = declared.get(provider)
        field = f"channels[{i}].http.path"
        if not allowed:
            errors.append(
                LintError(
                    file,
                    contract.id,
                    field,
                    f"no {provider} skill declares readback paths (readback.paths), so a "
                    f"contract cannot read {provider}",
                )
            )
        elif not template_within(ch.http.path, allowed):
            errors.append(
                LintError(
                    file,
                    contract.id,
                    field,
                    f"{ch.http.path} is not among the paths the {provider} skill declares "
                    f"(readback.paths: {', '.join(allowed)})",
                )
            )
    return errors


def lint_skill_manifest(
    data: Any,
    *,
    file: str,
    files: Mapping[str, bytes | None] | None = None,
    contracts: Mapping[str, Contract] | None = None,
) -> list[LintError]:
    """Check a skill manifest. With ``files`` (listed name → bytes, None when missing) the
    recorded sha256 of each contract file is compared; with ``contracts`` (listed name →
    parsed contract) each contract must name this skill's provider, version and certification.
    """
    subject = _skill_subject(data)
    if not isinstance(data, Mapping):
        return [LintError(file, subject, "(document)", "expected a mapping of fields")]
    try:
        manifest = SkillManifest.model_validate(data)
    except ValidationError as exc:
        return validation_errors(exc, file=file, subject=subject)
    errors: list[LintError] = []

    def err(field: str, message: str) -> None:
        errors.append(LintError(file, subject, field, message))

    seen: set[str] = set()
    for i, entry in enumerate(manifest.contracts):
        where = f"contracts[{i}]"
        if entry.file in seen:
            err(f"{where}.file", f"{entry.file} is listed twice")
        seen.add(entry.file)
        # No sha256 yet is not an error: a skill is written first and signed last (the
        # signature check refuses an unsigned skill when it is loaded).
        if files is not None:
            content = files.get(entry.file)
            if content is None:
                err(f"{where}.file", f"{entry.file} does not exist")
            elif entry.sha256 is not None and hashlib.sha256(content).hexdigest() != entry.sha256:
                err(
                    f"{where}.sha256",
                    f"{entry.file} changed since the skill was signed (sha256 differs)",
                )
        if contracts is not None and entry.file in contracts:
            c = contracts[entry.file]
            if (c.skill.provider, c.skill.version) != (manifest.provider, manifest.version):
                err(
                    f"{where}.file",
                    f"{entry.file} names skill {c.skill.provider} {c.skill.version}, "
                    f"not {manifest.provider} {manifest.version}",
                )
            if c.certification != manifest.certification:
                err(
                    f"{where}.file",
                    f"{entry.file} has certification {c.certification}, "
                    f"the skill {manifest.certification}",
                )
            declared = manifest.readback.paths if manifest.readback else None
            if declared is not None:
                errors.extend(lint_readback_paths(c, {manifest.provider: declared}, file=file))
    if manifest.event_shape is not None:
        shape = manifest.event_shape.model_dump()
        keys = shape.pop("correlation_keys")
        for name, expr in [
            *shape.items(),
            *((f"correlation_keys.{k}", v) for k, v in keys.items()),
        ]:
            if expr is not None and not _is_event_expr(expr):
                err(f"event_shape.{name}", f"must be a $event.… expression, got {expr!r}")
    if manifest.default_base_url is not None and not manifest.default_base_url.startswith(
        ("https://", "http://")
    ):
        err("default_base_url", "must be an http(s) URL")
    return errors


# --------------------------------------------------------------------------- the contract linter


class _ContractLinter:
    def __init__(self, contract: Contract, file: str) -> None:
        self.c = contract
        self.file = file
        self.errors: list[LintError] = []
        self.channels = {ch.name: ch for ch in contract.channels}
        self.keys: dict[str, str] = {}
        for strategy in contract.correlation:
            for key in strategy.keys:
                self.keys.setdefault(key.name, key.expr)
        self.keys.setdefault(contract.subject.identity.key, contract.subject.identity.expr)

    def err(self, field: str, message: str) -> None:
        self.errors.append(LintError(self.file, self.c.id, field, message))

    def run(self) -> list[LintError]:
        self._identity()
        self._inputs()
        self._subject_and_correlation()
        self._evidence_and_channels()
        self._conditions()
        self._timing()
        self._sources()
        return self.errors

    # -- sections

    def _identity(self) -> None:
        if not re.match(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$", self.c.id):
            self.err("id", "must be dotted lower-case words such as provider.object.level")
        if not self.c.provider_api_versions:
            self.err("provider_api_versions", "name at least one provider API version")

    def _inputs(self) -> None:
        for name, spec in self.c.input.items():
            where = f"input.{name}"
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                self.err(where, "an input name is a plain identifier")
            if spec.minimum is not None and spec.type not in ("integer", "number"):
                self.err(f"{where}.minimum", f"only numbers have a minimum, not {spec.type}")
            if spec.pattern is not None:
                if spec.type != "string":
                    self.err(f"{where}.pattern", f"only strings have a pattern, not {spec.type}")
                try:
                    compile_pattern(spec.pattern)
                except PatternError as exc:
                    self.err(
                        f"{where}.pattern",
                        f"RE2 cannot compile this pattern ({exc}); patterns match in linear "
                        "time, so backreferences and lookaround are not available",
                    )

    def _subject_and_correlation(self) -> None:
        ident = self.c.subject.identity
        self._expr("subject.identity.expr", ident.expr)
        if not ident.expr.startswith("$"):
            self.err("subject.identity.expr", "must be an expression")
        if not self.c.correlation:
            self.err("correlation", "declare at least one correlation strategy")
        names: dict[str, str] = {}
        strong = False
        for i, strategy in enumerate(self.c.correlation):
            where = f"correlation[{i}]"
            expected = "weak" if strategy.strategy == "fingerprint" else "strong"
            if strategy.assurance != expected:
                self.err(
                    f"{where}.assurance",
                    f"a {strategy.strategy} correlation is {expected}, not {strategy.assurance}",
                )
            strong = strong or strategy.assurance == "strong"
            for j, key in enumerate(strategy.keys):
                kwhere = f"{where}.keys[{j}]"
                self._expr(f"{kwhere}.expr", key.expr)
                if not key.expr.startswith("$"):
                    self.err(f"{kwhere}.expr", "must be an expression")
                if key.name in names and names[key.name] != key.expr:
                    self.err(f"{kwhere}.name", f"key {key.name} is declared twice differently")
                names[key.name] = key.expr
                if key.name == ident.key and key.expr != ident.expr:
                    self.err(
                        f"{kwhere}.expr",
                        f"key {key.name} is the subject identity, whose expression is {ident.expr}",
                    )
        if self.c.correlation and not strong:
            self.err("correlation", "a weak correlation alone never decides: add a strong one")
        if ident.key not in {k.name for s in self.c.correlation for k in s.keys}:
            self.err(
                "subject.identity.key",
                f"{ident.key} is not a key of any correlation strategy",
            )
        idem = self.c.subject.idempotency
        if idem is not None and not idem.header.strip():
            self.err("subject.idempotency.header", "name the provider's idempotency header")

    def _evidence_and_channels(self) -> None:
        ev = self.c.evidence
        if ev.minimum_level == "E1":
            self.err(
                "evidence.minimum_level",
                "E1 is the action response, which never verifies: require E2 or higher",
            )
        names = [ch.name for ch in self.c.channels]
        for i, dup in _duplicates(names):
            self.err(f"channels[{i}].name", f"channel {dup} is declared twice")
        if not self.c.channels:
            self.err("channels", "declare at least one channel")
        for i, ch in enumerate(self.c.channels):
            where = f"channels[{i}]"
            if not re.match(r"^[a-z][a-z0-9_]*$", ch.name):
                self.err(f"{where}.name", "a channel name is lower-case letters, digits and _")
            if ch.provider is not None and not re.match(r"^[a-z][a-z0-9_]*$", ch.provider):
                self.err(
                    f"{where}.provider",
                    "a provider id is lower-case letters, digits and _ (as a skill names it)",
                )
            want = _CHANNEL_LEVEL[ch.verifier]
            if ch.level != want:
                self.err(
                    f"{where}.level",
                    f"an {ch.verifier} channel observes at {want}, not {ch.level}",
                )
            if not ch.description.strip():
                self.err(f"{where}.description", "describe what the channel reads")
            for attr in ("typical_latency_ms", "worst_case_ms"):
                value = getattr(ch, attr)
                if value is not None and value < 0:
                    self.err(f"{where}.{attr}", f"must not be negative, got {value}")
            if ch.freshness_ms is not None and ch.freshness_ms <= 0:
                self.err(f"{where}.freshness_ms", f"must be positive, got {ch.freshness_ms}")
            if (
                ch.typical_latency_ms is not None
                and ch.worst_case_ms is not None
                and ch.worst_case_ms < ch.typical_latency_ms
            ):
                self.err(f"{where}.worst_case_ms", "is shorter than the typical latency")
            if ch.verifier == "http":
                if ch.http is None:
                    self.err(f"{where}.http", "an http channel needs its http parameters")
                else:
                    self._http_path(f"{where}.http.path", ch.http.path)
                    self._http_query(f"{where}.http", ch.http)
                if ch.webhook is not None:
                    self.err(f"{where}.webhook", "an http channel takes no webhook parameters")
            else:
                if ch.webhook is None:
                    self.err(f"{where}.webhook", "a webhook channel needs its webhook parameters")
                else:
                    for _, dup in _duplicates(list(ch.webhook.event_types)):
                        self.err(f"{where}.webhook.event_types", f"{dup} is listed twice")
                    for j, rule in enumerate(ch.webhook.match):
                        mwhere = f"{where}.webhook.match[{j}]"
                        if not _is_event_expr(rule.path):
                            self.err(f"{mwhere}.path", "a match rule reads the event: $event.…")
                        self._operands(mwhere, rule.path, rule.op, rule.value, in_match=True)
                if ch.http is not None:
                    self.err(f"{where}.http", "a webhook channel takes no http parameters")

    def _conditions(self) -> None:
        ids: list[tuple[str, str]] = []
        if not self.c.completion:
            self.err("completion", "declare at least one completion condition")
        read: dict[str, str] = {}
        for i, cond in enumerate(self.c.completion):
            where = f"completion[{i}]"
            ids.append((cond.id, f"{where}.id"))
            self._operands(where, cond.path, cond.op, cond.value)
            if not cond.meaning.strip():
                self.err(f"{where}.meaning", "say what the condition means")
            channels = _observed_channels(cond.path, cond.value)
            if cond.evidence not in self.channels:
                self.err(f"{where}.evidence", f"{cond.evidence} is not a declared channel")
            elif not channels:
                self.err(
                    f"{where}.evidence",
                    f"the condition reads no channel; its path must read "
                    f"$observed.{cond.evidence}.…",
                )
            elif cond.evidence not in channels:
                self.err(
                    f"{where}.evidence",
                    f"{cond.evidence} is not the channel the condition reads "
                    f"({', '.join(sorted(channels))})",
                )
            if cond.evidence in self.channels:
                read[cond.evidence] = self.channels[cond.evidence].level
        self._reachable(read)
        for i, neg in enumerate(self.c.negative):
            where = f"negative[{i}]"
            ids.append((neg.id, f"{where}.id"))
            self._operands(where, neg.path, neg.op, neg.value)
            self._gates(where, neg.when)
            if not _observed_channels(neg.path, neg.value):
                self.err(f"{where}.path", _NOT_EVIDENCE)
            if not neg.class_.strip():
                self.err(f"{where}.class", "name the class of contradiction")
            if not neg.reason.strip():
                self.err(f"{where}.reason", "give the reason in words")
        for i, rule in enumerate(self.c.verdict_map):
            where = f"verdict_map[{i}]"
            ids.append((rule.id, f"{where}.id"))
            self._operands(where, rule.path, rule.op, rule.value)
            self._gates(where, rule.when)
            if not _observed_channels(rule.path, rule.value):
                self.err(f"{where}.path", _NOT_EVIDENCE)
            if rule.verdict in ("VERIFIED", "EXPIRED"):
                self.err(
                    f"{where}.verdict",
                    f"a verdict-map rule may not give {rule.verdict}: VERIFIED comes only from the "
                    "completion conditions, EXPIRED only from an unreported action",
                )
            if not rule.reason.strip():
                self.err(f"{where}.reason", "give the reason in words")
        for i, cond in enumerate(self.c.rejection.confirm if self.c.rejection else ()):
            where = f"rejection.confirm[{i}]"
            ids.append((cond.id, f"{where}.id"))
            self._operands(where, cond.path, cond.op, cond.value)
            channels = _observed_channels(cond.path, cond.value)
            if not channels:
                self.err(f"{where}.path", _NOT_EVIDENCE)
            for name in sorted(channels):
                found = self.channels.get(name)
                if found is not None and found.level == "E1":
                    self.err(
                        f"{where}.path",
                        f"{name} is E1: a rejection is confirmed only by independent evidence",
                    )
            if cond.evidence not in channels:
                self.err(
                    f"{where}.evidence",
                    f"{cond.evidence} is not the channel the condition reads",
                )
        if self.c.rejection is not None and not self.c.rejection.reason.strip():
            self.err("rejection.reason", "give the reason in words")
        seen: set[str] = set()
        for ident, where in ids:
            if not re.match(r"^[a-z][a-z0-9_]*$", ident):
                self.err(where, "an id is lower-case letters, digits and _")
            if ident in RESERVED_REASONS:
                self.err(where, f"{ident} is a reason the runtime gives itself; choose another id")
            if ident in seen:
                self.err(where, f"id {ident} is used twice (conditions and rules share ids)")
            seen.add(ident)

    def _gates(self, where: str, gates: Sequence[MatchRule]) -> None:
        """``when`` rules: well-typed operands over the same roots as conditions."""
        for j, gate in enumerate(gates):
            self._operands(f"{where}.when[{j}]", gate.path, gate.op, gate.value)

    def _reachable(self, read: Mapping[str, str]) -> None:
        """The completion conditions must be able to meet the evidence requirements."""
        if not read:
            return
        ev = self.c.evidence
        best = max(read.values())
        if best < ev.minimum_level:
            self.err(
                "evidence.minimum_level",
                f"the completion conditions read channels up to {best} only, "
                f"so {ev.minimum_level} can never be met",
            )
        if len(read) < ev.minimum_channels:
            self.err(
                "evidence.minimum_channels",
                f"the completion conditions read {len(read)} channel(s), "
                f"fewer than {ev.minimum_channels}",
            )

    def _timing(self) -> None:
        t = self.c.timing
        if t.initial_delay_ms < 0:
            self.err("timing.initial_delay_ms", f"must not be negative, got {t.initial_delay_ms}")
        for attr in ("poll_interval_ms", "timeout_ms", "stale_read_window_ms"):
            value = getattr(t, attr)
            if value <= 0:
                self.err(f"timing.{attr}", f"must be positive, got {value}")
        if t.max_attempts < 1:
            self.err("timing.max_attempts", f"must be at least 1, got {t.max_attempts}")
        if t.backoff.max_ms <= 0:
            self.err("timing.backoff.max_ms", f"must be positive, got {t.backoff.max_ms}")
        elif t.poll_interval_ms > 0 and t.backoff.max_ms < t.poll_interval_ms:
            self.err(
                "timing.backoff.max_ms",
                f"{t.backoff.max_ms} is below the poll interval {t.poll_interval_ms}",
            )
        if t.backoff.kind == "exponential" and t.backoff.factor < 1:
            self.err("timing.backoff.factor", f"must be at least 1, got {t.backoff.factor}")
        if t.backoff.kind == "constant" and t.backoff.factor != 1:
            self.err("timing.backoff.factor", "a constant backoff has factor 1")
        if t.timeout_ms > 0 and t.timeout_ms <= t.initial_delay_ms:
            self.err(
                "timing.timeout_ms",
                f"{t.timeout_ms} leaves no time after the initial delay {t.initial_delay_ms}",
            )
        if t.on_timeout.verdict != "UNVERIFIABLE":
            self.err(
                "timing.on_timeout.verdict",
                f"a timeout proves only that evidence did not arrive: UNVERIFIABLE, "
                f"not {t.on_timeout.verdict}",
            )
        if not re.match(r"^[a-z][a-z0-9_]*$", t.on_timeout.reason):
            self.err("timing.on_timeout.reason", "a reason id is lower-case letters, digits and _")

    def _sources(self) -> None:
        refs = [s.ref for s in self.c.sources]
        for i, dup in _duplicates(refs):
            self.err(f"sources[{i}].ref", f"{dup} is listed twice")
        for i, src in enumerate(self.c.sources):
            if not src.url.startswith(("https://", "http://")):
                self.err(f"sources[{i}].url", "must be an http(s) URL")

    # -- expressions and operands

    def _http_path(self, field: str, path: str) -> None:
        if not path.startswith("/"):
            self.err(field, "a readback path starts with /")
        if dot_segments(_PLACEHOLDER.sub("x", path)):
            self.err(
                field,
                "a readback path has no . or .. segment (also percent-encoded): it would read "
                "another resource, or leave the connection's base path",
            )
        rest = _PLACEHOLDER.sub("", path)
        if "{" in rest or "}" in rest:
            self.err(field, "unbalanced { } in the path template")
        for inner in _PLACEHOLDER.findall(path):
            if not inner.startswith("$"):
                self.err(field, f"placeholder {{{inner}}} must hold an expression")
                continue
            self._expr(field, inner)
            if inner.split(".")[0] == "$observed":
                self.err(field, f"a readback path cannot depend on observations ({inner})")

    def _http_query(self, field: str, http: HttpVerifier) -> None:
        """``query`` values are expressions the path could hold, or plain literals; ``paginate``
        reads a list with GET, within 1..100 pages, and owns its cursor parameters."""
        for name, value in http.query.items():
            qfield = f"{field}.query.{name}"
            if not name.strip() or name != name.strip():
                self.err(f"{field}.query", f"query parameter name {name!r} is empty or padded")
            if isinstance(value, str) and value.startswith("$"):
                self._expr(qfield, value)
                if value.split(".")[0] == "$observed":
                    self.err(qfield, f"a readback query cannot depend on observations ({value})")
                elif _EXPR.match(value) and self._type(value) == "boolean":
                    self.err(qfield, f"{value} is a boolean, which does not fill a query value")
            elif value == "":
                self.err(qfield, "an empty literal: leave the parameter out instead")
            if http.paginate is not None and name in _CURSOR_PARAMS:
                self.err(
                    qfield,
                    f"the pager sets the cursor itself ({http.paginate.style} pages with "
                    "starting_after); leave it out of the query",
                )
        if http.paginate is not None:
            pages = http.paginate.max_pages
            if not 1 <= pages <= 100:
                self.err(f"{field}.paginate.max_pages", f"must be from 1 to 100, got {pages}")
            if http.method != "GET":
                self.err(f"{field}.paginate", f"pages are read with GET, not {http.method}")

    def _operands(
        self, where: str, path: str, op: Operator, value: Any, *, in_match: bool = False
    ) -> None:
        if not isinstance(path, str) or not path.startswith("$"):
            self.err(f"{where}.path", "must be an expression ($…)")
        else:
            self._expr(f"{where}.path", path, in_match=in_match)
        if isinstance(value, str) and value.startswith("$"):
            self._expr(f"{where}.value", value, in_match=in_match)
        elif isinstance(value, list):
            for k, item in enumerate(value):
                if isinstance(item, str) and item.startswith("$"):
                    self._expr(f"{where}.value[{k}]", item, in_match=in_match)
        path_type = self._type(path) if isinstance(path, str) and path.startswith("$") else "any"
        vfield = f"{where}.value"
        if op in _LIST:
            if not isinstance(value, list):
                self.err(vfield, f"{op.value} takes a list of values")
        elif op in _ORDERED:
            if not self._numeric(value):
                self.err(vfield, f"{op.value} takes a number or a number expression, got {value!r}")
            if path_type not in ("number", "any"):
                self.err(f"{where}.path", f"{op.value} compares numbers; {path} is {path_type}")
        elif op in _TIME:
            if not self._timelike(value):
                self.err(vfield, f"{op.value} takes a time expression, got {value!r}")
            if path_type in ("boolean", "id"):
                self.err(f"{where}.path", f"{op.value} compares times; {path} is {path_type}")
        elif op is Operator.EXISTS and value is not None and not isinstance(value, bool):
            self.err(vfield, "exists takes no operand or true/false")

    def _numeric(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return True
        if isinstance(value, str) and value.startswith("$"):
            return self._type(value) in ("number", "any")
        return False

    def _timelike(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return True
        if isinstance(value, str):
            if value.startswith("$"):
                return self._type(value) in ("time", "number", "string", "any")
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return False
            return True
        return False

    def _type(self, expr: str, depth: int = 0) -> StaticType:
        parts = expr.split(".")
        root = parts[0]
        if root == "$input" and len(parts) == 2 and parts[1] in self.c.input:
            t = self.c.input[parts[1]].type
            return (
                "number"
                if t in ("integer", "number")
                else ("boolean" if t == "boolean" else "string")
            )
        if root == "$operation" and len(parts) == 2:
            return "time" if parts[1] == "created_at" else "id"
        if root == "$correlation" and len(parts) == 2 and parts[1] in self.keys and depth < 4:
            inner = self.keys[parts[1]]
            if inner.startswith("$"):
                return self._type(inner, depth + 1)
        return "any"

    def _expr(self, field: str, expr: str, *, in_match: bool = False) -> None:
        if not _EXPR.match(expr):
            root = expr.split(".")[0]
            if root in KNOWN_ROOTS:
                self.err(field, f"malformed expression {expr!r}")
            else:
                self.err(field, f"unknown root {root}")
            return
        parts = expr.split(".")
        root, rest = parts[0], parts[1:]
        if root == "$input":
            if len(rest) != 1:
                self.err(field, f"{expr}: an input is read as $input.<field>")
            elif rest[0] not in self.c.input:
                self.err(field, f"{expr}: input {rest[0]} is not declared in the input section")
        elif root == "$action":
            if not rest or rest[0] != "result":
                self.err(field, f"{expr}: the action is read as $action.result.…")
        elif root == "$operation":
            if len(rest) != 1 or rest[0] not in ("id", "created_at"):
                self.err(field, f"{expr}: the operation offers $operation.id and .created_at")
        elif root == "$correlation":
            if len(rest) != 1:
                self.err(field, f"{expr}: a key is read as $correlation.<key>")
            elif rest[0] not in self.keys:
                self.err(field, f"{expr}: correlation key {rest[0]} is not declared")
        elif root == "$observed":
            if not rest:
                self.err(field, f"{expr}: name a channel: $observed.<channel>.…")
            elif rest[0] not in self.channels:
                self.err(field, f"{expr}: channel {rest[0]} is not declared")
        elif root == "$event":
            if not in_match:
                self.err(
                    field, f"{expr}: $event is only valid inside a webhook channel's match rules"
                )
        else:
            self.err(field, f"unknown root {root}")


# --------------------------------------------------------------------------- helpers


def _observed_channels(*operands: Any) -> set[str]:
    found: set[str] = set()
    for operand in operands:
        if isinstance(operand, str) and operand.startswith("$observed."):
            found.add(operand.split(".")[1])
    return found


def _is_event_expr(expr: str) -> bool:
    return isinstance(expr, str) and expr.startswith("$event.") and bool(_EXPR.match(expr))


def _duplicates(items: Sequence[str]) -> list[tuple[int, str]]:
    """(index, item) of every repeat of an earlier item."""
    seen: set[str] = set()
    dups: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if item in seen:
            dups.append((i, item))
        seen.add(item)
    return dups


def _subject_of(data: Any, key: str) -> str:
    if isinstance(data, Mapping) and isinstance(data.get(key), str) and data[key]:
        return str(data[key])
    return "?"


def _skill_subject(data: Any) -> str:
    if isinstance(data, Mapping):
        provider = data.get("provider")
        version = data.get("version")
        if isinstance(provider, str) and isinstance(version, str):
            return f"skill {provider} {version}"
        if isinstance(provider, str):
            return f"skill {provider}"
    return "skill ?"


_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _loc_to_field(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        if part in _UNION_TAGS or not re.match(r"^[A-Za-z0-9_]+$", part):
            break  # a union member or validator tag, not a field name
        out += f".{part}" if out else part
    return out or "(document)"


def _pydantic_message(field: str, err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if field.endswith(".op") and kind in ("enum", "literal_error"):
        known = ", ".join(op.value for op in Operator)
        return f"unknown operator {value!r} (known: {known})"
    if field.endswith("level") and kind == "literal_error":
        return f"unknown level {value!r} (known: {', '.join(_LEVELS)})"
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return msg[:1].lower() + msg[1:]
