"""Helpers for the limits and billing end-to-end tests (tests/gateway/limits/test_limits_billing_*.py, tests/billing/test_limits_billing_usage.py).

Expected costs are computed here from `catalog/data/models.json` with Decimal arithmetic, not
with `catalog.pricing`, so a wrong price conversion or rounding in the product cannot cancel out
in the assertion. Worst-case holds, on the other hand, are the product's own definition and come
from `catalog.pricing.worst_case_nano` (the brief: caps are chosen from the real hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path
from typing import Any

import httpx

from catalog.pricing import Prices, worst_case_nano
from simulator.testing import SimulatorThread
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
SONNET = "anthropic/claude-sonnet-5-5"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
CHAT = "/openai/v1/chat/completions"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


# --- catalog prices -------------------------------------------------------------------------
@cache
def _catalog() -> dict[str, dict[str, Any]]:
    data = json.loads((ROOT / "catalog/data/models.json").read_text())
    models = data["models"] if isinstance(data, dict) else data
    return {m["id"]: m for m in models}


def catalog_prices(model_id: str = SONNET) -> dict[str, Decimal]:
    """USD per million tokens, exactly as the catalog file states them."""
    return {k: Decimal(v) for k, v in _catalog()[model_id]["pricing"].items()}


def product_prices(model_id: str = SONNET) -> Prices:
    p = catalog_prices(model_id)
    return Prices.from_decimals(
        p["input"], p["output"], p["cacheRead"], p["cacheWrite5m"], p["cacheWrite1h"]
    )


def expected_cost_nano(record: Any, model_id: str = SONNET) -> int:
    """tokens × catalog price, in nano-USD, rounded once, half up."""
    p = catalog_prices(model_id)
    per_million = (  # Σ tokens × USD per million tokens = USD × 1e6
        record.input_tokens * p["input"]
        + record.output_tokens * p["output"]
        + record.cache_read_tokens * p["cacheRead"]
        + record.cache_write_5m_tokens * p["cacheWrite5m"]
        + record.cache_write_1h_tokens * p["cacheWrite1h"]
    )
    nano = per_million * 1000  # USD × 1e9
    return int(nano.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def hold_nano(body: bytes, max_tokens: int, model_id: str = SONNET) -> int:
    """The gateway's worst-case hold for this exact request body (see handlers.common)."""
    window = int(_catalog()[model_id]["contextWindow"])
    return worst_case_nano(min(len(body) // 3 + 1, window), max_tokens, product_prices(model_id))


def nano_to_usd_str(nano: int) -> str:
    return str(Decimal(nano) / Decimal(10**9))


# --- requests -------------------------------------------------------------------------------
def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def auth(secret: str, api: str = "messages", **extra: str) -> dict[str, str]:
    headers = {"content-type": "application/json", **extra}
    if api == "chat":
        headers["authorization"] = f"Bearer {secret}"
    else:
        headers["x-api-key"] = secret
    return headers


def messages_body(text: str, *, max_tokens: int = 16, stream: bool = False, **kw: Any) -> bytes:
    body: dict[str, Any] = {
        "model": "sonnet",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
        **kw,
    }
    if stream:
        body["stream"] = True
    return dumps(body)


def chat_body(text: str, *, max_tokens: int = 16, stream: bool = False, **kw: Any) -> bytes:
    body: dict[str, Any] = {
        "model": "sonnet",
        "max_completion_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
        **kw,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return dumps(body)


Call = tuple[str, dict[str, str], bytes]  # absolute URL, headers, body


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes
    url: str
    done_at: float  # monotonic, when the whole response had arrived

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_type(self) -> str:
        return str(self.json()["error"]["type"])


async def burst(
    calls: list[Call], *, timeout: float = 30, done: list[Reply] | None = None
) -> list[Reply]:
    """Fire every call at once (one connection each) and collect the replies in call order.

    `done`, when given, gets each reply as it arrives: a test watching from another thread sees
    which calls have been answered while the rest are still held upstream."""
    limits = httpx.Limits(max_connections=len(calls) + 5, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = asyncio.Event()

        async def one(url: str, headers: dict[str, str], body: bytes) -> Reply:
            await start.wait()
            response = await client.post(url, headers=headers, content=body)
            reply = Reply(
                response.status_code, response.headers, response.content, url, time.monotonic()
            )
            if done is not None:
                done.append(reply)  # list.append is atomic: safe to read from another thread
            return reply

        tasks = [asyncio.create_task(one(*call)) for call in calls]
        await asyncio.sleep(0)  # every task is now waiting on the event: release them together
        start.set()
        return list(await asyncio.gather(*tasks))


def run_burst(
    calls: list[Call], *, timeout: float = 30, done: list[Reply] | None = None
) -> list[Reply]:
    return asyncio.run(burst(calls, timeout=timeout, done=done))


def upstream_records_with(sim: SimulatorThread, marker: str) -> list[dict[str, Any]]:
    """The simulator's records of the requests whose body holds `marker`."""
    return [r for r in sim.requests() if marker in str(r["body"])]


def run_burst_held_upstream(
    sim: SimulatorThread, calls: list[Call], *, marker: str, admitted: int
) -> list[Reply]:
    """A burst whose admitted requests stay in flight until every other one is answered.

    The simulator pauses each request whose body holds `marker` after its first token; the
    pauses end once `admitted` of them are at the upstream and the other calls have all been
    refused. Every admission decision of the burst therefore sees the holds of the admitted
    requests: a condition, not a delay that a busy machine can outlast. More admissions than
    `admitted` fail the wait.

    The calls must be streams. A JSON answer has to arrive whole within the attempt's start
    deadline (3 s in the e2e stack), so a JSON request held longer would be abandoned and
    retried; a stream past its first token is committed to its deployment and simply waits."""
    assert all(b'"stream":true' in body for _, _, body in calls), "held bursts must stream"
    # Event 4 is the first token (message_start, content_block_start, ping, first delta).
    sim.script({"match": marker, "pause_after_events": 4, "pause": 600, "times": -1})
    answered: list[Reply] = []

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_burst, calls, timeout=120, done=answered)
        try:
            wait_for(
                lambda: (
                    len(upstream_records_with(sim, marker)) == admitted
                    and len(answered) == len(calls) - admitted
                ),
                what=f"{admitted} requests held upstream and {len(calls) - admitted} refused",
            )
        finally:
            sim.release()
        return running.result()


def post(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    return httpx.post(url, headers=headers, content=body, timeout=30)


# --- streams --------------------------------------------------------------------------------
def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) pairs from SSE lines; data-only events get the name ""."""
    name, data = "", ""
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif line == "" and data:
            yield name, data
            name, data = "", ""


# --- waiting ----------------------------------------------------------------------------------
def wait_for(check: Callable[[], Any], *, timeout: float = 60, what: str = "condition") -> Any:
    """Poll until `check()` is truthy (records written after a disconnect drain, for instance)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def fresh_minute(margin: float = 8.0) -> None:
    """RPM windows are UTC calendar minutes (Redis TIME, same host clock): a burst that
    straddled a boundary would legitimately admit more than the limit, so start it early in one."""
    into = time.time() % 60
    if into > 60 - margin:
        time.sleep(60 - into + 0.05)


def records_by_request(e2e: Stack, request_ids: list[str]) -> dict[str, Any]:
    return {r.request_id: r for r in e2e.usage(request_id__in=request_ids)}


def parse_reset(value: str) -> datetime:
    assert RFC3339.match(value), value
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


# --- a private model -------------------------------------------------------------------------
@dataclass
class PrivateModel:
    model_id: str
    sims: list[SimulatorThread]
    deployments: list[tuple[int, str]]  # (id, name), one per simulator, weight 1

    def session_preferring(self, first: int, then: int) -> str:
        """An `x-ezat-session` value under which deployment `first` ranks above `then` (the
        gateway's rendezvous order between two deployments does not depend on any other)."""
        from catalog.snapshot import DeploymentInfo, Route
        from gateway.routing import rendezvous_order

        routes = [
            Route(DeploymentInfo(i, n, "anthropic", "", "", 1, 100), self.model_id)
            for i, n in (self.deployments[first], self.deployments[then])
        ]
        for n in range(1000):
            header = f"billing-{uuid.uuid4().hex}-{n}"
            if rendezvous_order(routes, "h:" + header)[0].deployment.id == routes[0].deployment.id:
                return header
        raise AssertionError("no session found")


@contextlib.contextmanager
def private_model(e2e: Stack, count: int = 2) -> Iterator[PrivateModel]:
    """A fresh model on `count` fresh deployments (plus the stack's serve-all `sim-a`).

    Deployment health (failure counts, cooldowns) is keyed by deployment id and shared by the
    session: failing the stack's routed deployments would reorder other tests' sticky routes.
    """
    from django.db import transaction

    from catalog.models import Deployment, Model
    from catalog.services import copy_model, upsert_deployment

    token = uuid.uuid4().hex[:8]
    model_id = f"test/billing-{token}"
    sims = [SimulatorThread(api_key=f"sk-billing-{i}").start() for i in range(count)]
    names = [f"billing-{token}-{i}" for i in range(count)]
    try:
        with e2e.blocker.unblock(), transaction.atomic():
            copy_model(Model.objects.get(id=SONNET), model_id)
            deployments = [
                upsert_deployment(
                    name=name, base_url=sim.url, api_key=sim.api_key or "", model_ids=[model_id]
                )[0]
                for name, sim in zip(names, sims, strict=True)
            ]
        secret = e2e.new_key().secret
        wait_for(
            lambda: any(
                m["id"] == model_id
                for m in httpx.get(e2e.url + "/v1/models?limit=1000", headers={"x-api-key": secret})
                .json()
                .get("data", [])
            ),
            timeout=15,
            what=f"the gateway to load {model_id}",
        )
        yield PrivateModel(model_id, sims, [(d.id, d.name) for d in deployments])
    finally:
        with e2e.blocker.unblock():
            Deployment.objects.filter(name__in=names).update(enabled=False)
        for sim in sims:
            sim.stop()
