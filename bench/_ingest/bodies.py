"""The deliveries ``wrk`` sends: distinct signed Stripe events, dealt to a file per wrk thread."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from bench._ingest.scratch import SECRET

__all__ = ["remove_bodies", "signed_bodies"]


def signed_bodies(path: Path, run: str, count: int, subjects: list[str], threads: int) -> None:
    """``count`` distinct signed refund.updated events, one per subject in turn, dealt to
    ``threads`` files (``<path>.0`` …), one for each wrk thread (see ``wrk.LUA``)."""
    from shared.trust.signatures import STRIPE

    t = int(time.time())
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(Path(f"{path}.{tid}").open("w")) for tid in range(threads)]
        for i in range(count):
            n = i % len(subjects)
            subject = subjects[n]
            body = json.dumps(
                {
                    "id": f"evt_{run}_{i:07d}",
                    "object": "event",
                    "type": "refund.updated",
                    "created": t,
                    "api_version": "2026-08-26",
                    "data": {
                        "object": {
                            "id": subject,
                            "object": "refund",
                            "amount": 1000,
                            "currency": "usd",
                            "charge": f"ch_bench_{n:06d}",
                            "status": "succeeded",
                            "created": t,
                        }
                    },
                    "request": {"id": None, "idempotency_key": None},
                },
                separators=(",", ":"),
            ).encode()
            header = STRIPE.sign(body=body, secrets=[SECRET], timestamp=t)["Stripe-Signature"]
            outs[i % threads].write(header + "\n" + body.decode() + "\n")


def remove_bodies(path: Path, threads: int) -> None:
    for tid in range(threads):
        Path(f"{path}.{tid}").unlink(missing_ok=True)
