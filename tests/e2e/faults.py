"""Faults on a running distributed system, and the checks that nothing was lost.

Shared by the slow end-to-end test (``tests/e2e/test_broker_restarts.py``) and the fault suite
(``bench/faults.py``). A :class:`FaultWorld` is a :class:`~tests.e2e.launcher.DistributedSystem`
whose broker is a :class:`~tests.servers.PrivateRedis` (and, for the suite, whose database
lives on a :class:`~tests.servers.PrivatePostgres`), started *without* an outside process
manager: a service that exits stays dead, unless ``provely serve`` itself restarts its worker.

Operations are played as an agent plays them (charge, operation, refund with the operation id
as idempotency key, action report) against a Stripe sandbox process; a call that meets a fault
(a transport error, a 5xx, a 429) is sent again, which is safe: the operation is created with an
``Idempotency-Key``, the refund with the operation id, and an action report that already went
through answers 409. Then :meth:`FaultWorld.check` reads PostgreSQL directly:

- lost: operations whose final verdict is not VERIFIED (or that are not final);
- double transitions: an operation with more than one transition into a final state, or whose
  transition rows do not form one chain (``provely audit verify``);
- acknowledged webhooks missing: deliveries the sandbox saw answered 2xx whose event is not
  stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

from services.cli.demo.scenarios.refund_contract import REFUND_CONTRACT, STANDARD_VERSION
from services.cli.demo.scenarios.system import Sandbox
from tests.e2e.launcher import DistributedSystem
from tests.servers import PrivatePostgres, PrivateRedis

__all__ = ["Check", "FaultWorld", "worker_child"]

FINAL_STATES = ("VERIFIED", "CONTRADICTED", "FAILED", "UNVERIFIABLE", "EXPIRED", "HUMAN_REVIEW")
RETRY_FOR_S = 120.0


def worker_child(parent_pid: int) -> int | None:
    """The Celery worker that ``provely serve observer|verdict`` (``parent_pid``) runs."""
    try:
        text = Path(f"/proc/{parent_pid}/task/{parent_pid}/children").read_text()
    except OSError:
        return None
    pids = [int(p) for p in text.split()]
    return pids[0] if pids else None


@dataclass
class Check:
    operations: int
    verified: int
    not_verified: dict[str, str]
    double_transitions: list[str]
    audit_ok: bool
    webhooks_acknowledged: int
    webhooks_missing: list[str]
    verdicts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            not self.not_verified
            and not self.double_transitions
            and self.audit_ok
            and not self.webhooks_missing
            and self.verified == self.operations
        )


@dataclass
class FaultWorld:
    system: DistributedSystem
    redis: PrivateRedis
    postgres: PrivatePostgres | None = None
    log: Callable[[str], None] = print
    workspace_id: str = ""
    api_key: str = ""
    sandbox: Sandbox | None = None
    op_ids: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    api_retries: int = 0
    worker_kills: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------------ setup
    def open_workspace(self) -> None:
        self.sandbox = self.system.new_sandbox()
        self.workspace_id, self.api_key = self.system.create_workspace("faults")
        response = httpx.post(
            f"{self.sandbox.base_url}/v1/webhook_endpoints",
            data={
                "url": f"{self.system.api_url}/v1/events/stripe/{self.workspace_id}",
                "enabled_events[]": "*",
            },
            headers={"Authorization": f"Bearer {self.sandbox.api_key}"},
            timeout=30,
        )
        response.raise_for_status()
        self.system.connect_stripe(
            self.workspace_id,
            webhook_secret=response.json()["secret"],
            api_key=self.sandbox.api_key,
            base_url=self.sandbox.base_url,
        )

    # ------------------------------------------------------------------ faults
    def serve_pid(self, role: str) -> int | None:
        assert self.system.supervisor is not None
        return self.system.supervisor.pid(role)

    def restart_redis(self) -> None:
        self.redis.restart(down_s=0.5)
        self.faults.append("redis restart (kill -9, start)")
        self.log(f"fault: Redis killed and started again ({self.redis.restarts})")

    def flush_redis(self) -> None:
        self.redis.flushall()
        self.faults.append("redis FLUSHALL")
        self.log("fault: Redis FLUSHALL")

    def restart_postgres(self) -> None:
        assert self.postgres is not None
        self.postgres.restart(down_s=1.0)
        self.faults.append("postgres crash (stop -m immediate) and start")
        self.log("fault: PostgreSQL crashed (immediate stop) and started again")

    def kill_worker(self, role: str) -> int:
        """kill -9 the Celery worker under ``provely serve ROLE``; its pid."""
        parent = self.serve_pid(role)
        assert parent is not None, f"provely serve {role} is not running"
        child = worker_child(parent)
        assert child is not None, f"provely serve {role} runs no worker child"
        os.kill(child, signal.SIGKILL)
        self.worker_kills[role] = self.worker_kills.get(role, 0) + 1
        self.faults.append(f"kill -9 of the {role} worker")
        self.log(f"fault: kill -9 of the {role} worker (pid {child})")
        return child

    def wait_worker_replaced(self, role: str, old: int, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            parent = self.serve_pid(role)
            child = worker_child(parent) if parent is not None else None
            if child is not None and child != old:
                return child
            time.sleep(0.2)
        raise AssertionError(f"the {role} worker was not restarted in {timeout_s:.0f} s")

    # ------------------------------------------------------------------ the agent
    async def _call(
        self, client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
    ) -> httpx.Response:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                response = await client.request(method, url, **kwargs)
                if response.status_code < 500 and response.status_code != 429:
                    return response
                problem = f"HTTP {response.status_code}"
            except httpx.TransportError as exc:
                problem = exc.__class__.__name__
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method} {url}: still {problem} after {RETRY_FOR_S:.0f} s")
            self.api_retries += 1
            await asyncio.sleep(0.5)

    async def one_operation(self, api: httpx.AsyncClient, stripe: httpx.AsyncClient) -> str:
        charge = await self._call(
            stripe,
            "POST",
            "/v1/charges",
            data={"amount": 5000, "currency": "usd", "source": "tok_visa"},
        )
        charge.raise_for_status()
        charge_id = charge.json()["id"]
        created = await self._call(
            api,
            "POST",
            "/v1/operations",
            json={
                "contract": REFUND_CONTRACT,
                "contract_version": STANDARD_VERSION,
                "input": {"charge": charge_id, "amount": 2000, "currency": "usd"},
            },
            headers={"Idempotency-Key": f"faults-{charge_id}"},
        )
        if created.status_code not in (200, 201):
            raise RuntimeError(f"operation refused: {created.status_code} {created.text[:200]}")
        op_id = str(created.json()["id"])
        self.op_ids.append(op_id)
        await self._report(api, op_id, {"phase": "started"})
        refund = await self._call(
            stripe,
            "POST",
            "/v1/refunds",
            data={"charge": charge_id, "amount": 2000},
            headers={"Idempotency-Key": op_id},
        )
        refund.raise_for_status()
        await self._report(
            api, op_id, {"phase": "result", "http_status": 200, "result": refund.json()}
        )
        return op_id

    async def _report(self, api: httpx.AsyncClient, op_id: str, body: dict[str, Any]) -> None:
        response = await self._call(api, "POST", f"/v1/operations/{op_id}/action", json=body)
        # 409: an earlier attempt of this report went through (its answer was lost to a fault).
        if response.status_code not in (200, 409):
            raise RuntimeError(f"report refused: {response.status_code} {response.text[:200]}")

    async def run_operations(
        self,
        count: int,
        *,
        concurrency: int,
        faults: Sequence[Callable[[], None]] = (),
        fault_every_s: float = 3.0,
        settle_timeout_s: float = 600.0,
    ) -> float:
        """Start ``count`` operations (``concurrency`` agents) while ``faults`` run one after
        another, ``fault_every_s`` apart, from the moment the first operations are open; then
        wait until every operation is final (or ``settle_timeout_s``). Returns the seconds
        from the first operation to the last final verdict."""
        assert self.sandbox is not None
        limits = httpx.Limits(max_keepalive_connections=0)
        api = httpx.AsyncClient(
            base_url=self.system.api_url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=30,
            limits=limits,
        )
        stripe = httpx.AsyncClient(
            base_url=self.sandbox.base_url,
            headers={"Authorization": f"Bearer {self.sandbox.api_key}"},
            timeout=30,
            limits=limits,
        )
        started = time.monotonic()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(count):
            queue.put_nowait(i)
        first_open = asyncio.Event()

        async def agent() -> None:
            while not queue.empty():
                queue.get_nowait()
                await self.one_operation(api, stripe)
                first_open.set()

        async def chaos() -> None:
            await first_open.wait()
            for fault in faults:
                await asyncio.sleep(fault_every_s)
                await asyncio.to_thread(fault)

        try:
            await asyncio.gather(chaos(), *(agent() for _ in range(concurrency)))
            self.log(f"{len(self.op_ids)} operations created and reported; waiting for verdicts")
            await self._wait_final(api, settle_timeout_s)
        finally:
            await api.aclose()
            await stripe.aclose()
        return time.monotonic() - started

    async def _wait_final(self, api: httpx.AsyncClient, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            open_ = self._open_count()
            if open_ == 0:
                return
            await asyncio.sleep(1.0)
        self.log(f"{self._open_count()} operations still open after {timeout_s:.0f} s")

    # ------------------------------------------------------------------ checks
    def _connect(self) -> psycopg.Connection[Any]:
        url = make_url(self.system.postgres_url).set(drivername="postgresql")
        return psycopg.connect(url.render_as_string(hide_password=False), connect_timeout=10)

    def _open_count(self) -> int:
        for _ in range(30):
            try:
                with self._connect() as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM operations WHERE workspace_id = %s AND NOT final",
                        (self.workspace_id,),
                    ).fetchone()
                    return int(row[0]) if row else 0
            except psycopg.OperationalError:
                time.sleep(1.0)
        raise RuntimeError("PostgreSQL did not come back")

    def check(self) -> Check:
        assert self.sandbox is not None
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, state, verdict, final FROM operations WHERE workspace_id = %s",
                (self.workspace_id,),
            ).fetchall()
            finals = conn.execute(
                "SELECT operation_id, count(*) FROM transitions WHERE workspace_id = %s "
                "AND to_state = ANY(%s) GROUP BY operation_id HAVING count(*) > 1",
                (self.workspace_id, list(FINAL_STATES)),
            ).fetchall()
            stored = {
                r[0]
                for r in conn.execute(
                    "SELECT event_id FROM events WHERE workspace_id = %s", (self.workspace_id,)
                ).fetchall()
            }
        verdicts: dict[str, int] = {}
        not_verified: dict[str, str] = {}
        for op_id, state, verdict, final in rows:
            key = f"{state}/{verdict}" if final else f"open {state}/{verdict}"
            verdicts[key] = verdicts.get(key, 0) + 1
            if not (final and state == "VERIFIED" and verdict == "VERIFIED"):
                not_verified[op_id] = key
        missing_ops = set(self.op_ids) - {r[0] for r in rows}
        for op_id in missing_ops:
            not_verified[op_id] = "no row"
        deliveries = httpx.get(
            f"{self.sandbox.base_url}/_sandbox/deliveries",
            headers={"Authorization": f"Bearer {self.sandbox.api_key}"},
            timeout=30,
        ).json()
        items = deliveries.get("data", deliveries) if isinstance(deliveries, dict) else deliveries
        acknowledged = {
            d["event_id"]
            for d in items
            if any(
                a.get("status_code") is not None and 200 <= int(a["status_code"]) < 300
                for a in d.get("attempts", ())
            )
        }
        try:
            audit = self.system.cli(["audit", "verify", "--workspace", self.workspace_id, "--json"])
        except RuntimeError as exc:  # exit 1: a broken chain
            self.log(f"audit: {exc}")
            audit_ok = False
        else:
            results = [json.loads(line) for line in audit.splitlines() if line.strip()]
            audit_ok = bool(results) and all(r.get("result") == "intact" for r in results)
        return Check(
            operations=len(set(self.op_ids)),
            verified=sum(1 for r in rows if r[3] and r[1] == "VERIFIED"),
            not_verified=not_verified,
            double_transitions=[str(r[0]) for r in finals],
            audit_ok=audit_ok,
            webhooks_acknowledged=len(acknowledged),
            webhooks_missing=sorted(acknowledged - stored),
            verdicts=verdicts,
        )
