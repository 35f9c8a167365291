"""The simulator's clock: the cache's TTLs on simulated time (so a benchmark's five-minute and
one-hour gaps take no real time), requests at one instant not seeing each other's writes, the
control API for it, and clearing faults without losing the cache."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import pytest
from aiohttp import web

from simulator.app import build_app
from simulator.cache import PromptCache
from simulator.clock import ClockError, SimClock
from simulator.state import STATE
from simulator.testing import SimulatorThread

API_KEY = "sk-sim-clock"
MODEL = "claude-sonnet-5-5"
SYSTEM = "You are a careful assistant. " * 200  # 5,800 chars = 1,450 tokens


def body(question: str, ttl: str | None = None) -> dict[str, Any]:
    cache_control: dict[str, Any] = {"type": "ephemeral"}
    if ttl:
        cache_control["ttl"] = ttl
    return {
        "model": MODEL,
        "max_tokens": 20,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": cache_control}],
        "messages": [{"role": "user", "content": question}],
    }


PREFIX = len(SYSTEM) // 4


@pytest.fixture
def clock_sim(sim: SimulatorThread, reset_sim: None) -> SimulatorThread:
    return sim


def test_clock_is_the_wall_clock_until_taken_over(clock_sim: SimulatorThread) -> None:
    first = httpx.get(f"{clock_sim.url}/_sim/clock").json()
    assert first["simulated"] is False
    later = clock_sim.advance_clock(10)
    assert later >= first["now"] + 10
    view = httpx.get(f"{clock_sim.url}/_sim/clock").json()
    assert view == {"now": later, "simulated": True}
    assert clock_sim.stats()["clock"] == view
    set_to = httpx.post(f"{clock_sim.url}/_sim/clock", json={"now": later + 5}).json()
    assert set_to == {"now": later + 5, "simulated": True}
    clock_sim.reset()
    assert httpx.get(f"{clock_sim.url}/_sim/clock").json()["simulated"] is False


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"advance": -1}, "advance: advance must be a non-negative"),
        ({"now": 0}, "now: now must not be before"),
        ({"advance": "5"}, "advance must be a number"),
        ({"advance": True}, "advance must be a number"),
        ({"now": 1, "advance": 1}, 'body must be {"advance"'),
        ({}, 'body must be {"advance"'),
        ({"advance": 1, "speed": 2}, "unknown field(s): speed"),
        ([1], 'body must be {"advance"'),
    ],
)
def test_clock_changes_are_checked(clock_sim: SimulatorThread, payload: Any, message: str) -> None:
    resp = httpx.post(f"{clock_sim.url}/_sim/clock", json=payload)
    assert resp.status_code == 400
    assert message in resp.json()["error"]


@pytest.mark.parametrize("raw", [b"nope", b'{"advance": 1e999}', b'{"advance": NaN}'])
def test_non_json_clock_values_are_refused(clock_sim: SimulatorThread, raw: bytes) -> None:
    bad = httpx.post(f"{clock_sim.url}/_sim/clock", content=raw)
    assert bad.status_code == 400
    assert bad.json()["error"] == "body must be JSON"


def test_five_minute_entry_expires_on_simulated_time(
    clock_sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    clock_sim.advance_clock(0)
    assert client.messages.create(**body("a")).usage.cache_creation_input_tokens == PREFIX
    clock_sim.advance_clock(299)
    assert client.messages.create(**body("b")).usage.cache_read_input_tokens == PREFIX
    clock_sim.advance_clock(299)  # the read refreshed the entry: still alive 598 s after writing
    assert client.messages.create(**body("c")).usage.cache_read_input_tokens == PREFIX
    clock_sim.advance_clock(301)
    missed = client.messages.create(**body("d")).usage
    assert missed.cache_read_input_tokens == 0
    assert missed.cache_creation_input_tokens == PREFIX


def test_one_hour_entry_outlives_five_minutes(
    clock_sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    clock_sim.advance_clock(0)
    client.messages.create(**body("a", ttl="1h"))
    clock_sim.advance_clock(3599)
    assert client.messages.create(**body("b", ttl="1h")).usage.cache_read_input_tokens == PREFIX
    clock_sim.advance_clock(3601)
    assert client.messages.create(**body("c", ttl="1h")).usage.cache_read_input_tokens == 0


def test_requests_at_one_instant_do_not_read_each_others_writes(
    clock_sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    clock_sim.advance_clock(0)
    first = client.messages.create(**body("a")).usage
    second = client.messages.create(**body("b")).usage
    # Both arrived at the same simulated instant: both pay the write, as concurrent requests do.
    assert first.cache_creation_input_tokens == second.cache_creation_input_tokens == PREFIX
    assert second.cache_read_input_tokens == 0
    clock_sim.advance_clock(0.001)
    assert client.messages.create(**body("c")).usage.cache_read_input_tokens == PREFIX


def test_clearing_the_script_keeps_the_cache(
    clock_sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    client.messages.create(**body("warm"))
    clock_sim.script({"status": 529, "times": -1})
    with pytest.raises(anthropic.APIStatusError):
        client.messages.create(**body("x"))
    assert clock_sim.clear_script() == 1
    assert httpx.get(f"{clock_sim.url}/_sim/script").json()["faults"] == []
    assert client.messages.create(**body("back")).usage.cache_read_input_tokens == PREFIX


def test_a_refresh_does_not_hide_an_entry_again() -> None:
    clock = SimClock()
    clock.advance(0)
    cache = PromptCache(clock=clock)
    assert cache.account(MODEL, body("a")).cache_creation == PREFIX
    clock.advance(1)
    assert cache.account(MODEL, body("b")).cache_read == PREFIX  # refreshes the entry
    # A second reader at that same instant still reads: the entry was written a second ago.
    assert cache.account(MODEL, body("c")).cache_read == PREFIX


def test_clock_never_goes_backwards() -> None:
    clock = SimClock()
    assert not clock.simulated
    now = clock.advance(0)
    assert clock.simulated
    with pytest.raises(ClockError):
        clock.set(now - 1)
    with pytest.raises(ClockError):
        clock.advance(-0.5)
    assert clock.advance(2.5) == now + 2.5


async def test_gate_sees_each_request_before_its_reply() -> None:
    """The in-process hook a benchmark uses to hold replies: body and accounting, then the
    reply goes out only when the gate returns."""
    app = build_app()
    seen: list[tuple[str, dict[str, Any]]] = []
    release = asyncio.Event()

    async def gate(payload: dict[str, Any], usage: dict[str, Any]) -> None:
        seen.append((payload["messages"][0]["content"], usage))
        await release.wait()

    app[STATE].gate = gate
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with httpx.AsyncClient() as http:
            pending = asyncio.create_task(
                http.post(f"http://127.0.0.1:{port}/v1/messages", json=body("held"))
            )
            for _ in range(500):
                if seen:
                    break
                await asyncio.sleep(0.01)
            assert [q for q, _ in seen] == ["held"]
            assert seen[0][1]["cache_creation_input_tokens"] == PREFIX
            assert seen[0][1]["output_tokens"] > 0
            assert not pending.done()
            release.set()
            reply = (await pending).json()
        assert reply["usage"]["cache_creation_input_tokens"] == PREFIX
    finally:
        await runner.cleanup()
