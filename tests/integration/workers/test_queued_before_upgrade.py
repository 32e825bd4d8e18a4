"""Messages queued by the previous release, in the positional form, still run after an upgrade:
real worker processes take ``provely.observe`` as ``[operation_id, fence]`` and
``provely.observe_many`` as ``[pairs]`` beside the keyword messages sent now."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.core.types import Verdict
from shared.db.session import session_scope
from shared.lifecycle.scheduling import wake
from shared.runtime import celery_app
from shared.runtime.queues import OBSERVE_MANY_TASK, OBSERVE_TASK
from tests.integration.workers.conftest import (
    Cluster,
    FakeProvider,
    create_operations,
    load_operation,
    make_tenant,
    observations_of,
    short_contract,
    wait_for,
)

pytestmark = pytest.mark.integration


def _send_positional(task: str, args: list[object]) -> None:
    """A message as the previous release sent it: positional arguments, no keywords."""
    celery_app.app.send_task(task, args=args)


def test_positional_observe_messages_from_before_an_upgrade_are_read(
    cluster: Cluster, provider: FakeProvider
) -> None:
    contract = short_contract(contract_id="tests.upgrade", initial_ms=60_000, timeout_ms=120_000)
    tenant = make_tenant(cluster, provider.url, contract, name="upgrade")
    provider.refund("re_upg1", charge="ch_upg1", status="pending")
    provider.refund("re_upg2", charge="ch_upg2", status="succeeded")
    made = create_operations(
        cluster,
        tenant,
        [("re_upg1", "ch_upg1", 1000), ("re_upg2", "ch_upg2", 1000)],
        dispatch=False,
    )
    (first, _), (second, _) = made
    assert observations_of(cluster, first) == []
    assert observations_of(cluster, second) == []

    with session_scope(cluster.engine) as session:
        fence = wake(session, first, now=datetime.now(UTC))
    assert fence is not None
    _send_positional(OBSERVE_TASK, [first, fence])
    wait_for(
        lambda: any(o.fence == fence for o in observations_of(cluster, first)),
        timeout=10,
        what="the observation of a positional observe message",
    )

    with session_scope(cluster.engine) as session:
        fence = wake(session, second, now=datetime.now(UTC))
    assert fence is not None
    _send_positional(OBSERVE_MANY_TASK, [[[second, fence]]])
    wait_for(
        lambda: any(o.fence == fence for o in observations_of(cluster, second)),
        timeout=10,
        what="the observation of a positional observe_many message",
    )
    # The reading was evaluated (the keyword evaluate the observer sends after it).
    wait_for(
        lambda: load_operation(cluster, second).verdict == Verdict.VERIFIED.value,
        timeout=10,
        what="the verdict after the reading",
    )
