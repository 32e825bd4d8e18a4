"""The pure core of Provely: contracts, expressions, operators, the verdict engine and friends.

Nothing in this package performs I/O, reads a clock, draws a random number or reads the
environment: callers pass time, ids and randomness in. ``tests/unit/core/test_purity.py``
walks the imports to keep it that way.

Modules:

- ``contract``      the completion contract model, canonical JSON and its hash
- ``types``         value types the core takes and returns (observations, decisions, ...)
- ``expressions``   ``$root.a.b`` expressions, the ``UNKNOWN`` sentinel, evaluation contexts
- ``templates``     an http readback's path template and query string filled from expressions
- ``operators``     the three-valued operators of the contract language
- ``compiled``      a contract compiled for the engine (expressions parsed, channels indexed)
- ``context``       an operation's correlation keys and evaluation context
- ``engine``        ``decide`` (the verdict engine), ``state_after`` and ``deadline_of``
- ``reasons``       the reasons of an open decision and the sentences that explain them
- ``verifiers``     the verifier port: each verifier's traits and the registry (a package)
- ``events``        the webhook channel's reduction of stored provider events
- ``ignored``       why a stored event counts for nothing in an operation, said in a sentence
- ``schedule``      the wait before each observation, and jitter
- ``paths``         readback paths: dot segments, paths inside a skill's declared paths
- ``queries``       readback queries: the parameters a skill lets each readback path take
- ``shown``         what of an observed value a caller is shown (scalars; shapes of the rest)
- ``state_machine`` the operation lifecycle as an explicit transition table
- ``retry``         the frozen retry table
- ``claim``         what may be said about an operation: its completion level and claim
- ``receipt``       the receipt as data: its body, the signed bytes, the travelling document
- ``jcs``           RFC 8785 canonical JSON, the bytes a receipt signs
- ``storable``      what a JSON value must be for Provely to store it
- ``storable_copy`` a copy of a provider's JSON value every table holds, its escapes named
- ``patterns``      contract authors' regular expressions, compiled with RE2
- ``skill``         the skill manifest as data
- ``lint``          static checks of contracts and skill manifests (a package: ``findings``,
                    ``document``, ``contract``, ``operands``, ``skill``)
- ``render``        the published page of a contract, in Markdown
- ``cells``         how contract data reads in the page's cells and tables

Error tree (every error the core raises on purpose)::

    CoreError                         base of all core errors
    ├── ExpressionError (ValueError)  a malformed expression or path template
    ├── ChannelError (ValueError)     a channel used with the wrong verifier
    ├── ScheduleError (ValueError)    an observation number or jitter argument out of range
    └── IllegalTransition             a state change the lifecycle table does not allow

Contracts that do not validate raise ``pydantic.ValidationError`` from ``Contract.model_validate``.
A missing path is never an error: it evaluates to ``UNKNOWN``.
"""

from __future__ import annotations

__all__ = [
    "ChannelError",
    "CoreError",
    "ExpressionError",
    "IllegalTransition",
    "ScheduleError",
]


class CoreError(Exception):
    """Base class of every error the pure core raises on purpose."""


class ExpressionError(CoreError, ValueError):
    """An expression or a path template is malformed (not a missing value: that is UNKNOWN)."""


class ChannelError(CoreError, ValueError):
    """A channel was handed to a function made for another verifier."""


class ScheduleError(CoreError, ValueError):
    """An observation number or a jitter argument is out of range."""


class IllegalTransition(CoreError):
    """The operation lifecycle does not allow this state change."""

    def __init__(self, current: str, target: str) -> None:
        super().__init__(f"illegal transition {current} -> {target}")
        self.current = current
        self.target = target
