"""Per-app state shared by the middleware, the API handlers and the control API."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from simulator.cache import PromptCache
from simulator.clock import SimClock
from simulator.faults import FaultScript

# Called with a Messages request's body and its reply's usage before the reply is sent. For
# embedding only (a benchmark in the same process holds replies for as long as a model would
# take, and reads what each deployment's cache did).
Gate = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]

MAX_RECORDS = 2000


@dataclass(slots=True)
class RequestContext:
    """What the middleware learned about a request before the handler runs."""

    request_id: str
    raw: bytes = b""
    body: Any = None
    body_error: str | None = None
    record: dict[str, Any] | None = None
    # "dropped" when the connection was closed before any response byte.
    outcome: str | None = None


@dataclass(slots=True)
class SimState:
    api_key: str | None = None
    # The OpenAI front's key (Bearer / Azure api-key): the simulator's key on every platform.
    openai_key: str | None = None
    records: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))
    script: FaultScript = field(default_factory=FaultScript)
    clock: SimClock = field(default_factory=SimClock)
    cache: PromptCache = field(init=False)
    stats: Counter[tuple[str, str]] = field(default_factory=Counter)
    gate: Gate | None = None
    # The OpenAI front's stored Responses (id -> the conversation's items, output included), for
    # previous_response_id; oldest dropped first.
    stored_responses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _seq: int = 0
    # Ends every scripted pause in progress (POST /_sim/release): a test that holds streams
    # open lets them go when it is done, instead of guessing a pause long enough under load.
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.cache = PromptCache(clock=self.clock)

    def record(self, request: web.Request, ctx: RequestContext) -> dict[str, Any]:
        self._seq += 1
        headers: dict[str, str] = {}
        for key, value in request.headers.items():
            name = key.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        entry: dict[str, Any] = {
            "seq": self._seq,
            "time": time.time(),
            "request_id": ctx.request_id,
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": headers,
            "body": ctx.body,
            "status": None,
        }
        self.records.append(entry)
        return entry

    def count(self, path: str, status: str) -> None:
        self.stats[(path, status)] += 1

    def stats_view(self) -> dict[str, Any]:
        by_path: Counter[str] = Counter()
        by_status: Counter[str] = Counter()
        by_path_status: dict[str, dict[str, int]] = {}
        for (path, status), n in self.stats.items():
            by_path[path] += n
            by_status[status] += n
            by_path_status.setdefault(path, {})[status] = n
        return {
            "total": sum(by_path.values()),
            "by_path": dict(by_path),
            "by_status": dict(by_status),
            "by_path_status": by_path_status,
            "pending_faults": len(self.script),
            "cache_entries": len(self.cache),
            "clock": self.clock_view(),
        }

    def clock_view(self) -> dict[str, Any]:
        return {"now": self.clock(), "simulated": self.clock.simulated}

    async def pause(self, seconds: float) -> None:
        """A scripted pause: `seconds`, or until the pauses are released, whichever is first."""
        release = self._release
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await release.wait()

    def release_pauses(self) -> None:
        self._release.set()
        self._release = asyncio.Event()

    def reset(self) -> None:
        self.records.clear()
        self.script.clear()
        self.cache.clear()
        self.stored_responses.clear()
        self.clock.real()  # with the cache cleared, no entry outlives a step back in time
        self.stats.clear()


STATE = web.AppKey("ezat_simulator_state", SimState)
CONTEXT = web.RequestKey("ezat_simulator_context", RequestContext)
