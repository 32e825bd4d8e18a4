"""Regular expressions written by contract authors (an input's ``pattern``), compiled with RE2.

A pattern comes from a contract, and a custom contract comes from a tenant: compiled with
Python's ``re`` (a backtracking engine) a pattern such as ``^(a+)+$`` takes time exponential in
the length of the value it is matched against, and the value comes from an agent. RE2 (the
``google-re2`` bindings) matches in time linear in the value, whatever the pattern, and refuses
what it cannot match that way (backreferences, lookaround): lint reports those
(``shared.core.lint``), so no contract that loads holds one.

RE2's syntax is Python's for everything else a pattern for an input needs (classes,
quantifiers, anchors, groups, alternation); ``search`` semantics (anchor with ``^…$`` to match
the whole value).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

import re2

__all__ = ["PATTERN_MAX_MEMORY", "PatternError", "compile_pattern", "pattern_matches"]

PATTERN_MAX_MEMORY: Final = 8 << 20
"""Bytes RE2 may use for one compiled pattern (a pattern that needs more does not compile)."""


class PatternError(ValueError):
    """A pattern RE2 cannot compile (bad syntax, a backreference, lookaround, too large)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is raised (and reported by lint), not printed
    options.max_mem = PATTERN_MAX_MEMORY
    return options


@lru_cache(maxsize=512)
def compile_pattern(text: str) -> Any:
    """``text`` compiled by RE2; raises :class:`PatternError` with RE2's reason."""
    try:
        return re2.compile(text, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(str(reason)) from None
    except (TypeError, ValueError) as exc:  # e.g. a NUL character or a lone surrogate
        raise PatternError(str(exc)) from None


def pattern_matches(text: str, value: str) -> bool:
    """Whether ``value`` contains a match of ``text`` (``re.search`` semantics), in time linear
    in ``len(value)``; raises :class:`PatternError` for a pattern RE2 cannot compile."""
    try:
        return compile_pattern(text).search(value) is not None
    except UnicodeEncodeError:  # a lone surrogate: the API refuses such values before this
        return False
