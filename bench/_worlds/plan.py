"""The plan of a world: every draw from its own ``random.Random(f"{seed}:{k}")``, so world ``k``
can be replayed by itself."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Plan", "draw_plan"]


@dataclass(frozen=True)
class Plan:
    index: int
    seed: str
    outcome: str
    report: str
    second: str  # none | sandbox | posted
    when: str  # never | before | around | after
    contradiction_first: bool  # around: the contradiction before the settlement
    gap_s: float
    stuck_s: float
    duplicate: int
    order: str
    shuffle_seed: int
    release_every_s: float
    delay_ms: int
    drop_updated: bool
    outage_at_s: float | None
    outage_s: float
    drop_created: bool = False  # only with --drop-created
    late_refund_s: float | None = None  # rejected_nothing: the refund made after the FAILED
    collide: bool = False  # events of one second: a failure, or a second refund, with no gap
    read_lag_ms: int = 0  # provider read lag: readbacks show the refund as it was this long ago
    fail_after_verified: bool = False  # the refund fails once Provely showed it VERIFIED
    fail_after_s: float = 0.0  # ... this long after the VERIFIED was first seen
    backwards_at_failure: bool = False  # ... and from then on its reads lag 10 min (404)

    @property
    def final_status(self) -> str | None:
        """The agent refund's status at the end, as planned (None: no refund made)."""
        if self.report == "rejected_nothing":
            return "succeeded" if self.late_refund_s is not None else None
        if self.fail_after_verified:
            return "failed"
        return {
            "succeeded": "succeeded",
            "stuck_then_succeeded": "succeeded",
            "failed": "failed",
            "canceled": "canceled",
            "succeeded_then_failed": "failed",
        }[self.outcome]

    def classes(self) -> dict[str, str]:
        faults = []
        if self.duplicate > 1:
            faults.append(f"dup{self.duplicate}")
        if self.order != "in_order":
            faults.append(self.order)
        if self.delay_ms:
            faults.append("delay")
        if self.drop_updated:
            faults.append("drop_updated")
        if self.drop_created:
            faults.append("drop_created")
        late = "none"
        if self.fail_after_verified:
            late = "failed_after_verified" + ("+backwards" if self.backwards_at_failure else "")
        return {
            "outcome": self.outcome if self.report != "rejected_nothing" else "none",
            "report": self.report,
            "contradiction": f"{self.second}/{self.when}",
            "delivery": "+".join(faults) or "clean",
            "outage": "outage" if self.outage_at_s is not None else "no_outage",
            "late_refund": "late_refund" if self.late_refund_s is not None else "none",
            "collision": "same_second" if self.collide else "none",
            "read_lag": "lag" if self.read_lag_ms else "no_lag",
            "late_failure": late,
        }


def draw_plan(seed: int, index: int, *, drop_created_enabled: bool = False) -> Plan:
    """World ``index`` of ``seed``; ``drop_created_enabled`` (``--drop-created``): its
    ``drop_created`` draw holds (every refund.created dropped in 15 % of the worlds)."""
    rng = random.Random(f"{seed}:{index}")
    outcome = rng.choices(
        ["succeeded", "failed", "canceled", "stuck_then_succeeded", "succeeded_then_failed"],
        weights=[40, 12, 10, 18, 20],
    )[0]
    report = rng.choices(
        ["correct", "rejected_with_refund", "rejected_nothing"], weights=[76, 12, 12]
    )[0]
    second = rng.choices(["none", "sandbox", "posted"], weights=[36, 32, 32])[0]
    when = "never" if second == "none" else rng.choice(["before", "around", "after"])
    if when == "around" and report == "rejected_nothing":
        when = "before"  # nothing to settle
    contradiction_first = rng.random() < 0.5
    gap_s = {
        "never": 0.0,
        "before": rng.uniform(0.0, 1.5),
        "around": rng.uniform(0.0, 0.05),
        "after": rng.uniform(0.5, 5.0),
    }[when]
    stuck_s = rng.uniform(1.0, 4.0)
    duplicate = 1 if rng.random() < 0.5 else rng.randint(2, 5)
    order = rng.choices(["in_order", "reversed", "shuffled"], weights=[60, 20, 20])[0]
    shuffle_seed = rng.randrange(1 << 30)
    release_every_s = rng.uniform(0.2, 1.5)
    delay_ms = 0 if rng.random() < 0.5 else rng.randint(0, 300)
    drop_updated = rng.random() < 0.15
    outage = rng.random() < 0.2
    outage_at_s = rng.uniform(0.0, 6.0) if outage else None
    outage_s = rng.uniform(0.0, 10.0) if outage else 0.0
    drop_created = rng.random() < 0.15  # drawn after the others: they stay what they were
    # Provider read lag and a failure after success (#30), drawn after drop_created for the
    # same reason: worlds of an earlier seed keep every draw they had.
    read_lag_ms = 0 if rng.random() < 0.5 else rng.randint(500, 4000)
    fail_after = rng.random() < 0.35
    fail_after_s = rng.uniform(0.0, 3.0)
    backwards_at_failure = rng.random() < 0.5
    fail_after_verified = (
        fail_after
        and outcome in ("succeeded", "stuck_then_succeeded")
        and report == "correct"
        and second == "none"
    )
    # Drawn after those (#32). A rejection with nothing made is followed, in half of those
    # worlds, by the refund made after all under the operation's key (after its FAILED; alone on
    # its charge, its refund.created delivered). A fifth of the worlds collide within one second.
    late = report == "rejected_nothing" and rng.random() < 0.5
    late_refund_s = rng.uniform(0.5, 5.0) if late else None
    if late:
        second, when, drop_created = "none", "never", False
    collide = rng.random() < 0.2
    if collide and when == "before":
        gap_s = 0.0
    return Plan(
        index=index,
        seed=f"{seed}:{index}",
        outcome=outcome,
        report=report,
        second=second,
        when=when,
        contradiction_first=contradiction_first,
        gap_s=gap_s,
        stuck_s=stuck_s,
        duplicate=duplicate,
        order=order,
        shuffle_seed=shuffle_seed,
        release_every_s=release_every_s,
        delay_ms=delay_ms,
        drop_updated=drop_updated,
        outage_at_s=outage_at_s,
        outage_s=outage_s,
        drop_created=drop_created and drop_created_enabled,
        late_refund_s=late_refund_s,
        collide=collide,
        read_lag_ms=read_lag_ms,
        fail_after_verified=fail_after_verified,
        fail_after_s=fail_after_s if fail_after_verified else 0.0,
        backwards_at_failure=backwards_at_failure and fail_after_verified,
    )
