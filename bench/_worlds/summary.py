"""The figures of many worlds: their summary (counts, failures with their timelines, classes) and
its printing."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import Any

from bench._worlds.outcome import Outcome

__all__ = ["FAILING", "print_summary", "summarize"]


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))  # nearest rank
    return ordered[rank]


def summarize(
    results: list[Outcome], duration_s: float, args: argparse.Namespace
) -> dict[str, Any]:
    late = [r for r in results if r.late is not None]
    waited = [r for r in late if r.waited_for_provider]
    supersede = [r.supersede_s for r in results if r.supersede_s is not None]
    late_refunds = [r for r in results if r.classes.get("late_refund") == "late_refund"]
    late_refunds_s = [
        r.late_refund_supersede_s for r in late_refunds if r.late_refund_supersede_s is not None
    ]
    collisions = [r for r in results if r.classes.get("collision") == "same_second"]
    per_class: dict[str, Counter[str]] = {}
    for r in results:
        for axis, value in r.classes.items():
            per_class.setdefault(axis, Counter())[value] += 1
    finals = Counter(f"{r.final_state}/{r.final_reason}" for r in results if not r.harness_error)
    truths = Counter(r.truth for r in results if not r.harness_error)

    def failures(name: str) -> list[dict[str, Any]]:
        return [
            {
                "world": r.index,
                "seed": r.seed,
                "op": r.op_id,
                "classes": r.classes,
                "what": getattr(r, name),
                "truth": r.truth,
                "final": f"{r.final_state} ({r.final_reason})",
                "late": r.late,
                "notes": r.notes,
                "timeline": r.timeline,
            }
            for r in results
            if getattr(r, name)
        ]

    return {
        "seed": args.seed,
        "worlds": len(results),
        "concurrency": args.concurrency,
        "poll_ms": args.poll_ms,
        "duration_s": round(duration_s, 1),
        "contract_versions": sorted({r.contract_version for r in results if r.contract_version}),
        "false_verified": sum(bool(r.false_verified) for r in results),
        "ignored_contradiction": sum(bool(r.ignored_contradiction) for r in results),
        "late_contradictions": len(late),
        "late_not_superseded_within_5s": sum(
            bool(r.late_failure) for r in late if not r.waited_for_provider
        ),
        "waited_for_provider": len(waited),
        "waited_for_provider_failures": sum(bool(r.late_failure) for r in waited),
        "waited_for_provider_not_within_5s_of_readable": sum(
            not (r.late or {}).get("within_5s_of_readable") for r in waited
        ),
        "waited_for_provider_times_s": [
            {
                "world": r.index,
                "ack_s": (r.late or {}).get("ack_s"),
                "readable_s": (r.late or {}).get("readable_s"),
                "human_review_s": (r.late or {}).get("human_review_s"),
            }
            for r in waited
        ],
        "lost_operations": sum(bool(r.lost) for r in results),
        "wrong_retry_advice": sum(bool(r.wrong_retry) for r in results),
        "late_refund_worlds": len(late_refunds),
        "failed_with_retry_standing": sum(bool(r.failed_standing) for r in results),
        "late_refund_supersede_s": {
            "count": len(late_refunds_s),
            "p50": _percentile(late_refunds_s, 50),
            "max": max(late_refunds_s) if late_refunds_s else None,
        },
        "collision_worlds": len(collisions),
        "collision_failures": sum(r.failed for r in collisions),
        "collision_false_verified": sum(bool(r.false_verified) for r in collisions),
        "collision_wrong_contradicted": sum(
            bool(r.unexpected) and r.final_state == "CONTRADICTED" for r in collisions
        ),
        "unexpected_verdicts": sum(bool(r.unexpected) for r in results),
        "harness_errors": sum(bool(r.harness_error) for r in results),
        "supersede_s": {
            "count": len(supersede),
            "p50": _percentile(supersede, 50),
            "p99": _percentile(supersede, 99),
            "max": max(supersede) if supersede else None,
        },
        "world_duration_s": {
            "p50": _percentile([r.duration_s for r in results], 50),
            "max": max((r.duration_s for r in results), default=None),
        },
        "classes": {axis: dict(sorted(c.items())) for axis, c in per_class.items()},
        "truths": dict(sorted(truths.items())),
        "final_states": dict(sorted(finals.items())),
        "notes": Counter(n.split(" (")[0] for r in results for n in r.notes).most_common(),
        "failures": {
            "false_verified": failures("false_verified"),
            "ignored_contradiction": failures("ignored_contradiction"),
            "late_not_superseded": failures("late_failure"),
            "lost": failures("lost"),
            "wrong_retry": failures("wrong_retry"),
            "failed_standing": failures("failed_standing"),
            "unexpected": failures("unexpected"),
            "harness_errors": [
                {"world": r.index, "seed": r.seed, "op": r.op_id, "error": r.harness_error}
                for r in results
                if r.harness_error
            ],
        },
    }


FAILING = (
    "false_verified",
    "ignored_contradiction",
    "late_not_superseded_within_5s",
    "waited_for_provider_failures",
    "lost_operations",
    "wrong_retry_advice",
    "failed_with_retry_standing",
    "unexpected_verdicts",
    "harness_errors",
)


def print_summary(summary: dict[str, Any]) -> None:
    s = summary
    sup = s["supersede_s"]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f} s"

    print(
        f"worlds run: {s['worlds']} (seed {s['seed']}, concurrency {s['concurrency']}, "
        f"poll every {s['poll_ms']} ms, contract {', '.join(s['contract_versions'])})"
    )
    print(
        f"duration: {s['duration_s']:.0f} s (a world: p50 {s['world_duration_s']['p50']} s, "
        f"max {s['world_duration_s']['max']} s)"
    )
    print(f"false VERIFIED: {s['false_verified']}")
    print(
        "other final verdicts decided after a second refund was acknowledged: "
        f"{s['ignored_contradiction']}"
    )
    print(
        f"late contradictions: {s['late_contradictions']}; not superseded within 5 s: "
        f"{s['late_not_superseded_within_5s']}"
    )
    print(
        f"waited for the provider: {s['waited_for_provider']}; not superseded within 5 s of "
        f"the first recheck try after it read again: {s['waited_for_provider_failures']} "
        f"(not within 5 s of the outage's end: "
        f"{s['waited_for_provider_not_within_5s_of_readable']})"
    )
    for w in s["waited_for_provider_times_s"]:
        print(
            f"  world {w['world']}: acknowledged {w['ack_s']} s, provider readable "
            f"{w['readable_s']} s, HUMAN_REVIEW visible {w['human_review_s']} s"
        )
    print(f"lost operations: {s['lost_operations']}")
    print(f"wrong retry advice: {s['wrong_retry_advice']}")
    lr = s["late_refund_supersede_s"]
    print(
        f"rejections followed by a late refund: {s['late_refund_worlds']}, FAILED with a retry "
        f"left standing: {s['failed_with_retry_standing']}, superseded in p50 {fmt(lr['p50'])} "
        f"max {fmt(lr['max'])}"
    )
    print(
        f"worlds colliding within one second: {s['collision_worlds']}, failed: "
        f"{s['collision_failures']} (false VERIFIED {s['collision_false_verified']}, "
        f"wrong CONTRADICTED {s['collision_wrong_contradicted']})"
    )
    print(f"unexpected verdicts: {s['unexpected_verdicts']}")
    print(f"harness errors: {s['harness_errors']}")
    print(
        f"supersede time (contradiction's 200 to HUMAN_REVIEW visible, n={sup['count']}): "
        f"p50 {fmt(sup['p50'])}, p99 {fmt(sup['p99'])}, max {fmt(sup['max'])}"
    )
    for axis, counts in s["classes"].items():
        print(f"{axis}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("truths: " + ", ".join(f"{k} {v}" for k, v in s["truths"].items()))
    print("final states: " + ", ".join(f"{k} {v}" for k, v in s["final_states"].items()))
    if s["notes"]:
        print("notes: " + ", ".join(f"{k} {v}" for k, v in s["notes"]))
    for name, rows in s["failures"].items():
        for row in rows:
            print(f"\n[{name}] world {row['world']} seed {row['seed']} op {row.get('op')}")
            for key in ("what", "error", "classes", "truth", "final", "late", "notes"):
                if row.get(key):
                    print(f"  {key}: {row[key]}")
            for line in row.get("timeline") or []:
                print(f"    {line}")
