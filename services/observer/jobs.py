"""What one http channel of an operation reads: its path and query, filled from the operation's
facts, and the provider whose connection reads it.

A query parameter (or value) the provider's skill does not declare for the path
(``readback.query``, ``shared.core.queries``) is never sent: the job carries ``refused`` and
the reading is an ``error`` (``query_not_declared: …``). Lint refuses such a workspace contract
when it is uploaded; this catches one stored before the declaration existed.

A workspace contract's reading keeps only what its conditions read (``keep``,
``shared.core.kept``): :func:`kept_reading` trims the value, and the stored bytes and digest are
those of what is kept. The paths a workspace contract keeps are found once per contract
(:func:`kept_paths`, by the hash that pins its document), not for every observe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from urllib.parse import quote

from shared.core.contract import Channel, Contract, canonical_json
from shared.core.expressions import EvaluationContext
from shared.core.kept import keep_read, read_paths
from shared.core.queries import undeclared_query
from shared.core.skill import ReadbackSpec
from shared.core.templates import fill_path_template, fill_query
from shared.core.types import ObservationStatus
from shared.evidence.readings import Reading, digest_of
from shared.runtime.bounded import Bounded
from shared.trust.registry import get_registry

__all__ = [
    "HttpJob",
    "declared_readback",
    "event_log_job",
    "http_job",
    "kept_paths",
    "kept_reading",
]

_kept_paths: Bounded[str, dict[str, frozenset[tuple[str, ...]]]] = Bounded(256)


def kept_paths(contract: Contract, *, contract_hash: str) -> dict[str, frozenset[tuple[str, ...]]]:
    """``shared.core.kept.read_paths(contract)``, found once per ``contract_hash`` (the hash of
    the contract's document, which the paths are read from; the caller's contract is the one
    that hash pins). At most 256 contracts are kept; the answer is shared, read it only."""
    return _kept_paths.get_or_make(contract_hash, lambda: read_paths(contract))


def declared_readback(channel: Channel, contract: Contract) -> ReadbackSpec | None:
    """The readback declaration of the skill of ``channel``'s provider (None without one)."""
    skill = get_registry().skill(channel.provider_of(contract))
    return skill.manifest.readback if skill is not None else None


@dataclass(frozen=True, slots=True)
class HttpJob:
    channel: str
    path: str | None
    provider: str = ""  # the channel's provider, whose connection the readback uses
    query: str | None = ""  # the filled, encoded query string; None when a value is unknown
    max_pages: int | None = None  # a paged list (``paginate``): read every page, at most this
    refused: str | None = None  # why the readback is not sent (an undeclared query)
    keep: frozenset[tuple[str, ...]] | None = None  # the paths a reading keeps; None: all
    events: bool = False  # a provider's event list: its events go to the intake


def http_job(
    channel: Channel,
    contract: Contract,
    context: EvaluationContext,
    *,
    readback: ReadbackSpec | None = None,
    keep: frozenset[tuple[str, ...]] | None = None,
) -> HttpJob:
    """What one http channel reads for this operation: its path and query filled.

    ``readback`` is the provider's skill declaration; a query it does not allow is refused.
    A skill that declares no readback paths is not checked (it loads its own signed contracts
    as before, and no workspace contract can read its provider)."""
    http = channel.http
    provider = channel.provider_of(contract)
    if http is None:
        return HttpJob(channel.name, None, provider)
    undeclared = (
        undeclared_query(http.path, http.query, paths=readback.paths, declared=readback.query)
        if readback is not None and readback.paths is not None
        else []
    )
    return HttpJob(
        channel.name,
        fill_path_template(http.path, context),
        provider,
        query=fill_query(http.query, context),
        max_pages=http.paginate.max_pages if http.paginate is not None else None,
        refused=f"query_not_declared: {'; '.join(undeclared)}" if undeclared else None,
        keep=keep,
    )


def kept_reading(job: HttpJob, reading: Reading) -> Reading:
    """``reading`` with only ``job.keep`` of its value (bytes and digest of what is kept)."""
    if job.keep is None or reading.status is not ObservationStatus.OK:
        return reading
    value = keep_read(reading.value, job.keep)
    raw = canonical_json(value)
    return dataclasses.replace(reading, value=value, raw=raw, digest=digest_of(raw))


def event_log_job(
    channel: Channel,
    contract: Contract,
    context: EvaluationContext,
    *,
    readback: ReadbackSpec | None = None,
) -> HttpJob:
    """What an event-log channel reads for this operation: the provider's events of the
    channel's types created since the second the operation began (``created[gte]``, rounded
    down: the same second may hold events made just before it, which the event channels'
    reductions leave out), 100 a page, every page.

    The query is checked against the skill's declaration like a readback's."""
    log = channel.event_log
    provider = channel.provider_of(contract)
    if log is None:
        return HttpJob(channel.name, None, provider, events=True)
    since = fill_query({"created[gte]": "$operation.created_at"}, context)
    sent: dict[str, str | int] = {"created[gte]": "", "types[]": "", "limit": 100}
    undeclared = (
        undeclared_query(log.path, sent, paths=readback.paths, declared=readback.query)
        if readback is not None and readback.paths is not None
        else []
    )
    types = "&".join(f"{quote('types[]', safe='')}={quote(t, safe='')}" for t in log.event_types)
    return HttpJob(
        channel.name,
        log.path,
        provider,
        query=None if since is None else f"{since}&{types}&limit=100",
        max_pages=log.max_pages,
        refused=f"query_not_declared: {'; '.join(undeclared)}" if undeclared else None,
        events=True,
    )
