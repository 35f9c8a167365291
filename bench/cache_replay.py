"""One replay of the cache benchmark's workload through a gateway, in simulated time.

The replay is an event loop in simulated time. A request is sent at its start time and its
reply is held by the simulator until the answer's end time, so requests overlap as they would in
production; the next event waits until the gateway has routed the request (it reached a
simulator) or returned its answer. That makes every policy's run deterministic: the same seed
gives the same numbers (tests/bench/test_cache_bench.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import orjson

from bench.cache_metrics import Outcome
from bench.cache_runs import ARRIVAL_TIMEOUT, CHURNED, COOLDOWN_FAILURES, RunSpec
from bench.cache_upstreams import Arrival, Upstreams
from bench.cache_workload import Request, Workload


@dataclass(slots=True)
class RunResult:
    spec: RunSpec
    outcomes: list[Outcome]
    real_seconds: float
    gateway_cpu_s: float
    redis_commands: int | None
    window_real_s: float  # real seconds between the churn events (also measured in base runs)
    fault_hits: int
    cooldown_s: float
    unexpected: int
    notes: list[str]


class Replay:
    """The event loop of one run, in simulated time (see the module docstring)."""

    def __init__(
        self,
        workload: Workload,
        ups: Upstreams,
        http: aiohttp.ClientSession,
        gateway: str,
        key: str,
        *,
        churn: bool,
        cooldown_s: float,
    ) -> None:
        self.workload = workload
        self.ups = ups
        self.http = http
        self.gateway = gateway
        self.key = key
        self.churn = churn
        self.cooldown_s = cooldown_s
        self.outcomes: list[Outcome] = []
        self.notes: list[str] = []
        self._pending: dict[tuple[int, int], tuple[asyncio.Task[tuple[int, bytes]], Arrival]] = {}
        self.fault_at = self.recover_at = 0.0
        self.fault_wall = 0.0
        self.fault_hits = 0

    def events(self) -> list[tuple[float, int, int, str, Request | None]]:
        # At one instant: answers end first (a client sees them before it sends anything new),
        # then the churn events, then new requests; ties in the workload's own order.
        events: list[tuple[float, int, int, str, Request | None]] = []
        for seq, req in enumerate(self.workload.requests()):
            events.append((req.start, 2, seq, "start", req))
            events.append((req.end, 0, seq, "end", req))
        outage, back = self.workload.churn_window()
        events.append((outage, 1, 0, "fault", None))
        events.append((back, 1, 1, "recover", None))
        events.sort(key=lambda e: e[:3])
        return events

    async def run(self) -> None:
        for at, _, _, kind, req in self.events():
            self.ups.at(at)
            if kind == "start" and req is not None:
                await self._start(req)
            elif kind == "end" and req is not None:
                await self._end(req)
            elif kind == "fault":
                self.fault_at = time.monotonic()
                self.fault_wall = time.time()
                if self.churn:
                    self.ups.fault(CHURNED, {"status": 529, "times": -1})
            elif kind == "recover":
                self.recover_at = time.monotonic()
                if self.churn:
                    await self._recover()

    def _request(self, req: Request) -> tuple[str, bytes, dict[str, str]]:
        url = self.gateway + req.path
        headers = {"content-type": "application/json"}
        if req.conversation.app.api == "messages":
            headers |= {"x-api-key": self.key, "anthropic-version": "2023-06-01"}
        else:
            headers["authorization"] = f"Bearer {self.key}"
        return url, orjson.dumps(req.body()), headers

    async def _send(self, req: Request) -> tuple[int, bytes]:
        url, body, headers = self._request(req)
        async with self.http.post(url, data=body, headers=headers) as resp:
            return resp.status, await resp.read()

    async def _start(self, req: Request) -> None:
        key = (req.conversation.id, req.turn)
        arrival = self.ups.expect(key)
        task = asyncio.create_task(self._send(req))
        done, _ = await asyncio.wait(
            {arrival, task}, timeout=ARRIVAL_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if arrival in done:
            self._pending[key] = (task, arrival.result())
            return
        # Answered (or timed out) without reaching a simulator: an error of the gateway.
        self.ups.release(key)
        status, body = await task if task in done else (0, b"timeout")
        if not task.done():
            task.cancel()
        self.outcomes.append(
            Outcome(req.conversation.id, req.turn, req.start, None, status=status,
                    error=body[:300].decode(errors="replace") or "no answer")
        )  # fmt: skip

    async def _end(self, req: Request) -> None:
        key = (req.conversation.id, req.turn)
        pending = self._pending.pop(key, None)
        if pending is None:
            return  # it failed at its start
        task, arrived = pending
        self.ups.release(key)
        status, body = await task
        outcome = Outcome.from_usage(
            req.conversation.id, req.turn, req.start, arrived.deployment, arrived.usage
        )
        end_marker = b"[DONE]" if req.conversation.app.api == "chat" else b"message_stop"
        if status != 200 or (req.conversation.stream and end_marker not in body[-400:]):
            outcome = Outcome(
                req.conversation.id, req.turn, req.start, None, status=status,
                error=body[:300].decode(errors="replace") or f"HTTP {status}",
            )  # fmt: skip
        self.outcomes.append(outcome)

    async def _recover(self) -> None:
        """Clear the fault, then wait (real time) until the gateway's cooldown has run out, so
        the next request that prefers this deployment tries it and finds it healthy."""
        self.ups.clear_faults(CHURNED)
        hits = self.ups.fault_times(CHURNED)
        self.fault_hits = len(hits)
        if len(hits) != COOLDOWN_FAILURES:
            after = ", ".join(f"{t - self.fault_wall:.2f}" for t in hits)
            self.notes.append(f"fault hits, seconds after the outage began: {after}")
        if hits:
            wait = max(hits) + self.cooldown_s + 0.2 - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
