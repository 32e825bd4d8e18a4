"""The semantic checks of a validated contract, section by section.

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
- ``when`` gates of negative conditions and verdict-map rules are checked like conditions;
- ``monotone`` only on readbacks (``keeps_items`` only on paged lists; ``stages`` with a dotted
  field and each value in one stage); ``supersedes_verified`` only on a rule that is not final
  by itself and whose path reads a webhook channel.

Expressions and operands are checked by ``shared.core.lint.operands``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from shared.core.contract import Channel, Contract, MatchRule, WebhookVerifier
from shared.core.lint.findings import LintError
from shared.core.lint.operands import ExpressionLinter, is_event_expr
from shared.core.patterns import PatternError, compile_pattern
from shared.core.verifiers import registered, verifier_named, verifier_of

__all__ = ["RESERVED_REASONS", "lint_contract"]


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiouh" else "a"


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
        "inconsistent_reading",
        "late_contradiction",
    }
)
"""Reason ids the runtime gives itself; a condition or rule id may not take one over."""

_NOT_EVIDENCE = (
    "reads no $observed channel, so it could never decide: the agent and the action "
    "response are not evidence"
)


def lint_contract(contract: Contract, *, file: str) -> list[LintError]:
    """Semantic checks of a validated contract (see the module docstring)."""
    return _ContractLinter(contract, file).run()


class _ContractLinter(ExpressionLinter):
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
        if len(set(self.c.provider_api_versions)) != len(self.c.provider_api_versions):
            self.err("provider_api_versions", "names a version twice")

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
            self._channel(where, ch)
            self._params(where, ch)
            self._monotone(where, ch)

    def _channel(self, where: str, ch: Channel) -> None:
        """A channel's name, provider, level, description and latencies."""
        if not re.match(r"^[a-z][a-z0-9_]*$", ch.name):
            self.err(f"{where}.name", "a channel name is lower-case letters, digits and _")
        if ch.provider is not None and not re.match(r"^[a-z][a-z0-9_]*$", ch.provider):
            self.err(
                f"{where}.provider",
                "a provider id is lower-case letters, digits and _ (as a skill names it)",
            )
        verifier = verifier_of(ch)
        if ch.level != verifier.level:
            self.err(
                f"{where}.level",
                f"{_article(verifier.name)} {verifier.name} channel observes at "
                f"{verifier.level}, not {ch.level}",
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

    def _webhook(self, where: str, webhook: WebhookVerifier) -> None:
        for _, dup in _duplicates(list(webhook.event_types)):
            self.err(f"{where}.event_types", f"{dup} is listed twice")
        for j, rule in enumerate(webhook.match):
            mwhere = f"{where}.match[{j}]"
            if not is_event_expr(rule.path):
                self.err(f"{mwhere}.path", "a match rule reads the event: $event.…")
            self._operands(mwhere, rule.path, rule.op, rule.value, in_match=True)

    def _conditions(self) -> None:
        """Completion conditions, negative conditions, verdict-map rules, rejection; their ids."""
        ids: list[tuple[str, str]] = []
        self._completion(ids)
        self._negative(ids)
        self._verdict_map(ids)
        self._rejection(ids)
        self._ids(ids)

    def _completion(self, ids: list[tuple[str, str]]) -> None:
        if not self.c.completion:
            self.err("completion", "declare at least one completion condition")
        read: dict[str, str] = {}
        for i, cond in enumerate(self.c.completion):
            where = f"completion[{i}]"
            ids.append((cond.id, f"{where}.id"))
            self._operands(where, cond.path, cond.op, cond.value)
            if not cond.meaning.strip():
                self.err(f"{where}.meaning", "say what the condition means")
            self._completion_evidence(
                where, cond.evidence, _observed_channels(cond.path, cond.value)
            )
            if cond.evidence in self.channels:
                read[cond.evidence] = self.channels[cond.evidence].level
        self._reachable(read)

    def _completion_evidence(self, where: str, evidence: str, channels: set[str]) -> None:
        """A completion condition's ``evidence`` is the declared channel its path reads."""
        if evidence not in self.channels:
            self.err(f"{where}.evidence", f"{evidence} is not a declared channel")
        elif not channels:
            self.err(
                f"{where}.evidence",
                f"the condition reads no channel; its path must read $observed.{evidence}.…",
            )
        elif evidence not in channels:
            self.err(
                f"{where}.evidence",
                f"{evidence} is not the channel the condition reads "
                f"({', '.join(sorted(channels))})",
            )

    def _negative(self, ids: list[tuple[str, str]]) -> None:
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

    def _verdict_map(self, ids: list[tuple[str, str]]) -> None:
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
            if rule.supersedes_verified:
                self._supersedes(where, rule.path, rule.verdict)

    def _rejection(self, ids: list[tuple[str, str]]) -> None:
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

    def _ids(self, ids: Sequence[tuple[str, str]]) -> None:
        """Conditions and rules share one namespace of ids, none a reason the runtime gives."""
        seen: set[str] = set()
        for ident, where in ids:
            if not re.match(r"^[a-z][a-z0-9_]*$", ident):
                self.err(where, "an id is lower-case letters, digits and _")
            if ident in RESERVED_REASONS:
                self.err(where, f"{ident} is a reason the runtime gives itself; choose another id")
            if ident in seen:
                self.err(where, f"id {ident} is used twice (conditions and rules share ids)")
            seen.add(ident)

    def _params(self, where: str, ch: Channel) -> None:
        """A channel carries its verifier's parameter block and no other verifier's."""
        verifier = verifier_of(ch)
        article = _article(verifier.name)
        if getattr(ch, verifier.params, None) is None:
            self.err(
                f"{where}.{verifier.params}",
                f"{article} {verifier.name} channel needs its {verifier.params} parameters",
            )
        for name in registered():
            other = verifier_named(name).params
            if other != verifier.params and getattr(ch, other, None) is not None:
                self.err(
                    f"{where}.{other}",
                    f"{article} {verifier.name} channel takes no {other} parameters",
                )
        if ch.http is not None:
            self._http_path(f"{where}.http.path", ch.http.path)
            self._http_query(f"{where}.http", ch.http)
        if ch.webhook is not None:
            self._webhook(f"{where}.webhook", ch.webhook)
        if ch.event_log is not None:
            for _, dup in _duplicates(list(ch.event_log.event_types)):
                self.err(f"{where}.event_log.event_types", f"{dup} is listed twice")

    def _monotone(self, where: str, ch: Channel) -> None:
        """``monotone`` judges readbacks only; each part must be able to say something."""
        rule = ch.monotone
        if rule is None:
            return
        if not verifier_of(ch).monotone:
            self.err(
                f"{where}.monotone",
                "only a readback can go backwards; event channels are ordered by provider time",
            )
        if not (rule.exists or rule.keeps_items or rule.stages is not None):
            self.err(f"{where}.monotone", "declare exists, keeps_items or stages")
        if rule.keeps_items and (ch.http is None or ch.http.paginate is None):
            self.err(
                f"{where}.monotone.keeps_items",
                "only a paged list readback (http.paginate) holds items",
            )
        stages = rule.stages
        if stages is not None:
            if not re.match(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", stages.field):
                self.err(
                    f"{where}.monotone.stages.field",
                    "a dotted field of the reading (letters, digits, _ and -), e.g. status",
                )
            values = [v for stage in stages.order for v in stage]
            if any(not stage for stage in stages.order):
                self.err(f"{where}.monotone.stages.order", "a stage lists at least one value")
            for _, dup in _duplicates(values):
                self.err(f"{where}.monotone.stages.order", f"{dup} is in two stages")

    def _supersedes(self, where: str, path: str, verdict: str) -> None:
        """A rule that supersedes a VERIFIED reads signed provider events with its path."""
        if verdict in ("FAILED", "CONTRADICTED"):
            self.err(
                f"{where}.supersedes_verified",
                f"a {verdict} rule is final and supersedes a VERIFIED already",
            )
        channel = next(iter(_observed_channels(path)), None)
        found = self.channels.get(channel) if channel is not None else None
        if found is None or not verifier_of(found).signed:
            self.err(
                f"{where}.supersedes_verified",
                "only a rule whose path reads a webhook channel (signed provider events) may "
                "supersede a VERIFIED on its own",
            )

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


def _observed_channels(*operands: Any) -> set[str]:
    found: set[str] = set()
    for operand in operands:
        if isinstance(operand, str) and operand.startswith("$observed."):
            found.add(operand.split(".")[1])
    return found


def _duplicates(items: Sequence[str]) -> list[tuple[int, str]]:
    """(index, item) of every repeat of an earlier item."""
    seen: set[str] = set()
    dups: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if item in seen:
            dups.append((i, item))
        seen.add(item)
    return dups
