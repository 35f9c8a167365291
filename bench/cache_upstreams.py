"""The cache benchmark's deployments: N instances of the project's upstream simulator
(simulator), each a real HTTP server with its own prompt cache, all in this process on
one simulated clock.

Each simulator holds every reply until the benchmark releases it, at the simulated time its
answer would end: the gateway sees requests in flight for as long as a model would take (so
`least_busy` has something to count), and the replay stays deterministic. Through the gate the
benchmark also learns which deployment served each request and what its cache did -- the
simulator's own usage, the same numbers the gateway bills.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bench.cache_workload import parse_marker
from simulator.app import build_app
from simulator.cache import InputUsage, PromptCache
from simulator.clock import SimClock
from simulator.state import STATE, SimState

RequestKey = tuple[int, int]  # (conversation id, turn)
RECORDS = 64


@dataclass(frozen=True, slots=True)
class Arrival:
    deployment: int  # index of the simulator that answered
    usage: dict[str, Any]  # the reply's usage, as sent to the gateway


def _newest_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else None
    if isinstance(content, str):
        return content
    for block in content or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            return str(block["text"])
    return ""


class Upstreams:
    def __init__(self, count: int, api_key: str, host: str = "127.0.0.1") -> None:
        self.api_key = api_key
        self.host = host
        self.clock = SimClock()
        # Few records: each keeps its parsed body (~100 KB here); the benchmark only reads the
        # last fault hits, and a cooling deployment receives nothing after them.
        self.states = [
            SimState(api_key=api_key, clock=self.clock, records=deque(maxlen=RECORDS))
            for _ in range(count)
        ]
        self.ports: list[int] = []
        self._runners: list[web.AppRunner] = []
        self._arrivals: dict[RequestKey, asyncio.Future[Arrival]] = {}
        self._releases: dict[RequestKey, asyncio.Event] = {}
        self.unexpected = 0  # requests without a marker, or not expected (counted, answered)
        self.base = 0.0
        # Optional: every served request also replayed into one more cache, on the same clock
        # (what one deployment serving everything would have read: the ceiling).
        self.shadow: PromptCache | None = None
        self.shadow_usage: dict[RequestKey, InputUsage] = {}

    async def start(self) -> None:
        for index, state in enumerate(self.states):
            app = build_app(self.api_key)
            app[STATE] = state
            state.gate = self._gate_for(index)
            # No access log, short shutdown: these are the benchmark's, not a server to keep.
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, self.host, 0, backlog=1024)
            await site.start()
            self._runners.append(runner)
            self.ports.append(runner.addresses[0][1])

    async def stop(self) -> None:
        for event in self._releases.values():
            event.set()
        for runner in self._runners:
            await runner.cleanup()

    def urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.ports]

    def reset(self) -> None:
        """Empty caches, scripts and records; freeze the clock at a new base for a new run."""
        for state in self.states:
            state.reset()  # also puts the shared clock back on the wall clock
        self._arrivals.clear()
        self._releases.clear()
        self.unexpected = 0
        self.shadow = None
        self.shadow_usage = {}
        self.base = self.clock.advance(0)

    def at(self, seconds: float) -> None:
        """Simulated time: `seconds` into the run."""
        target = self.base + seconds
        if target > self.clock():
            self.clock.set(target)

    def expect(self, key: RequestKey) -> asyncio.Future[Arrival]:
        future: asyncio.Future[Arrival] = asyncio.get_running_loop().create_future()
        self._arrivals[key] = future
        self._releases[key] = asyncio.Event()
        return future

    def release(self, key: RequestKey) -> None:
        event = self._releases.pop(key, None)
        if event is not None:
            event.set()
        self._arrivals.pop(key, None)

    def _gate_for(self, index: int) -> Any:
        async def gate(body: dict[str, Any], usage: dict[str, Any]) -> None:
            key = parse_marker(_newest_user_text(body))
            future = self._arrivals.get(key) if key is not None else None
            if key is None or future is None or future.done():
                self.unexpected += 1
                return
            future.set_result(Arrival(index, usage))
            if self.shadow is not None:
                self.shadow_usage[key] = self.shadow.account(str(body.get("model")), body)
            await self._releases[key].wait()

        return gate

    def fault(self, index: int, spec: dict[str, Any]) -> None:
        """Script a fault on one deployment (the same FaultScript as POST /_sim/script)."""
        self.states[index].script.extend([spec])

    def clear_faults(self, index: int) -> None:
        self.states[index].script.clear()

    def fault_times(self, index: int) -> list[float]:
        """Wall-clock times of the requests a deployment answered with a scripted fault."""
        return [r["time"] for r in self.states[index].records if r.get("fault")]
