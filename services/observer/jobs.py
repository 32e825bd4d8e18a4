"""What one http channel of an operation reads: its path and query, filled from the operation's
facts, and the provider whose connection reads it."""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.contract import Channel, Contract
from shared.core.expressions import EvaluationContext
from shared.core.templates import fill_path_template, fill_query

__all__ = ["HttpJob", "http_job"]


@dataclass(frozen=True, slots=True)
class HttpJob:
    channel: str
    path: str | None
    provider: str = ""  # the channel's provider, whose connection the readback uses
    query: str | None = ""  # the filled, encoded query string; None when a value is unknown
    max_pages: int | None = None  # a paged list (``paginate``): read every page, at most this


def http_job(channel: Channel, contract: Contract, context: EvaluationContext) -> HttpJob:
    """What one http channel reads for this operation: its path and query filled."""
    http = channel.http
    if http is None:
        return HttpJob(channel.name, None, channel.provider_of(contract))
    return HttpJob(
        channel.name,
        fill_path_template(http.path, context),
        channel.provider_of(contract),
        query=fill_query(http.query, context),
        max_pages=http.paginate.max_pages if http.paginate is not None else None,
    )
