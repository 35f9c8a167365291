"""All deployments failing, cooldowns as a preference (never a wall), and cooldowns shared across
gateway processes through Redis.

These tests make the serve-all deployment (`sim-a`) fail and cool down too, so they run against
their own gateway process with its own health board (and, with REDIS_URL, its own Redis
database): the stack's gateway, which every other test uses, never sees these failures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.routing import cooldown_key
from simulator.testing import SimulatorThread
from tests import services
from tests.support.routing_lab import Lab, lab_simulators, make_lab, user
from tests.support.stack import GatewayProcess, Stack, database_url, start_gateway
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

COOLDOWN_FAILURES = 3  # EZAT_COOLDOWN_FAILURES of the e2e gateways


def lab_redis_url() -> str:
    """The lab gateway's own Redis database (of the session's private server)."""
    return services.redis_url(services.REDIS_DB_LAB) if services.production_shape() else ""


def db_url(stack: Stack) -> str:
    from django.db import connection

    with stack.blocker.unblock():
        return database_url(connection.settings_dict)


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with lab_simulators(("x", "y")) as started:
        yield started


@pytest.fixture(scope="module")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    redis_url = lab_redis_url()
    if redis_url:
        import redis

        # Ids restart with every test database: stale limiter or cooldown keys must not apply.
        redis.Redis.from_url(redis_url).flushdb()
    process = start_gateway(db_url(stack), redis_url, tmp_path_factory.mktemp("routing-gw"))
    yield process
    process.stop()


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread], gateway: GatewayProcess) -> Lab:
    return make_lab(e2e, sims, gateways=(gateway.url,))


def ask(lab: Lab, url: str, api: str, session: str, text: str, *, stream: bool = False) -> str:
    if api == "messages":
        api_ = lab.anthropic(url, session=session)
        if stream:
            with api_.messages.stream(model=lab.model, max_tokens=16, messages=user(text)) as s:
                return s.get_final_text()
        reply = api_.messages.create(model=lab.model, max_tokens=16, messages=user(text))
        return reply.content[0].text  # type: ignore[union-attr]
    chat = lab.openai(url, session=session).chat.completions
    if stream:
        chunks = chat.create(model=lab.model, max_tokens=16, messages=user(text), stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    completion = chat.create(model=lab.model, max_tokens=16, messages=user(text))
    return completion.choices[0].message.content or ""


def served(lab: Lab) -> list[list[tuple[str, str]]]:
    """Per usage record (oldest first): (deployment label, outcome) of each attempt."""
    return [[(lab.label(a["deployment"]), a["outcome"]) for a in r.attempts] for r in lab.usage()]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", ["messages", "chat"])
def test_all_deployments_failing_gives_the_mapped_error(
    lab: Lab, gateway: GatewayProcess, api: str, stream: bool
) -> None:
    session = lab.header_session("x", "y")
    # Different errors, so the one returned is visibly the last attempt's (a serve-all one).
    lab.sims["x"].script({"status": 500, "match": lab.token})
    lab.sims["y"].script({"status": 503, "match": lab.token})
    for sim in lab.serve_all_sims().values():
        sim.script({"status": 529, "message": "scripted overload", "match": lab.token})
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as raised:
        ask(lab, gateway.url, api, session, f"{lab.token} all down", stream=stream)
    error: Any = raised.value
    body = error.body
    if api == "messages":
        assert error.status_code == 529
        assert isinstance(error, anthropic.OverloadedError)
        assert body["error"] == {"type": "overloaded_error", "message": "scripted overload"}
    else:
        assert error.status_code == 503
        assert (
            body["type"] == "service_unavailable_error" and body["message"] == "scripted overload"
        )
    # Each deployment tried exactly once; a failed request is not billed.
    for label in lab.all_sims():
        assert lab.received(label, lab.token) == 1, label
    assert lab.usage() == []


def cooling_logged(gateway: GatewayProcess) -> set[int]:
    ids = set()
    for line in gateway.log_path.read_text(errors="replace").splitlines():
        if '"deployment cooling down"' in line:
            ids.add(orjson.loads(line)["deployment_id"])
    return ids


def test_model_whose_every_deployment_is_cooling_still_answers(
    lab: Lab, gateway: GatewayProcess
) -> None:
    session = lab.header_session("x", "y")
    every = {d.id for d in [*lab.mine.values(), *lab.serve_all]}
    for sim in lab.all_sims().values():
        sim.script({"status": 529, "match": lab.token, "times": COOLDOWN_FAILURES})
    # Each request tries every deployment once, so after three every deployment has failed
    # three times in a row.
    for n in range(COOLDOWN_FAILURES):
        with pytest.raises(anthropic.OverloadedError):
            ask(lab, gateway.url, "messages", session, f"{lab.token} fail {n}")
    assert every <= cooling_logged(gateway)
    redis_url = lab_redis_url()
    if redis_url:
        import redis

        shared = redis.Redis.from_url(redis_url)
        assert all(shared.get(cooldown_key(d)) is not None for d in every)
    # Now everything is cooling: still served, by the session's own first choice.
    for api in ("messages", "chat"):
        assert ask(lab, gateway.url, api, session, f"{lab.token} still there").startswith(
            "Simulated reply to:"
        )
    assert served(lab) == [[("x", "ok")], [("x", "ok")]]


def test_cooldown_is_shared_across_processes_with_redis(
    stack: Stack, lab: Lab, gateway: GatewayProcess, tmp_path: Path
) -> None:
    redis_url = lab_redis_url()
    # A second process on the same database and (when configured) the same Redis.
    other = start_gateway(db_url(stack), redis_url, tmp_path)
    try:
        session = lab.header_session("x", "y")
        lab.sims["x"].script({"status": 529, "times": COOLDOWN_FAILURES})
        for n in range(COOLDOWN_FAILURES):
            ask(lab, gateway.url, "messages", session, f"{lab.token} fail over {n}")
        assert served(lab) == [[("x", "http_529"), ("y", "ok")]] * COOLDOWN_FAILURES
        # x is cooling in this process: the session goes straight to y.
        ask(lab, gateway.url, "messages", session, f"{lab.token} after")
        assert served(lab)[-1] == [("y", "ok")]
        # The other process routes this model (count_tokens is free and starts its cooldown
        # sync, done at most once a second), then serves the same session. The warm-up uses a
        # session that prefers y: an answer from x would (rightly) end x's cooldown everywhere.
        counted = httpx.post(
            other.url + "/v1/messages/count_tokens",
            headers={"x-api-key": lab.key.secret, "x-ezat-session": lab.header_session("y", "x")},
            json={"model": lab.model, "messages": user("warm up")},
        )
        assert counted.status_code == 200, counted.text
        time.sleep(1.2)
        ask(lab, other.url, "messages", session, f"{lab.token} elsewhere")
        if redis_url:
            # It learned the cooldown from Redis: x is avoided there too.
            assert served(lab)[-1] == [("y", "ok")]
            assert lab.received("x", lab.token) == COOLDOWN_FAILURES
            import redis

            ttl = redis.Redis.from_url(redis_url).ttl(cooldown_key(lab.mine["x"].id))
            assert 0 < ttl <= 31
        else:
            # Without Redis each process keeps its own health: the other one still prefers x.
            assert served(lab)[-1] == [("x", "ok")]
            assert lab.received("x", lab.token) == COOLDOWN_FAILURES + 1
    finally:
        other.stop()


def test_a_cooldown_set_by_one_node_holds_on_the_others_next_request(
    stack: Stack, lab: Lab, gateway: GatewayProcess, tmp_path: Path
) -> None:
    """Issue 31, item 9: node 2 had routed this model a moment before node 1 cooled x down;
    its very next request must avoid x (before: its background poll, at most once a second,
    ran after that request was routed, so the request went to x and failed over)."""
    redis_url = lab_redis_url()
    if not redis_url:
        pytest.skip("cooldowns are shared through Redis (production shape)")
    import redis

    shared = redis.Redis.from_url(redis_url)
    other = start_gateway(db_url(stack), redis_url, tmp_path)
    try:
        # Node 2 routes the model (a session that prefers y: x stays untouched) and so knows
        # x's state: healthy.
        ask(lab, other.url, "messages", lab.header_session("y", "x"), f"{lab.token} warm")
        assert served(lab) == [[("y", "ok")]]
        session = lab.header_session("x", "y")
        lab.sims["x"].script({"status": 529, "times": COOLDOWN_FAILURES})
        for n in range(COOLDOWN_FAILURES):
            ask(lab, gateway.url, "messages", session, f"{lab.token} fail over {n}")
        wait_for(
            lambda: shared.get(cooldown_key(lab.mine["x"].id)),
            what="node 1's cooldown of x in Redis",
        )
        ask(lab, other.url, "messages", session, f"{lab.token} on node 2")
        assert served(lab)[-1] == [("y", "ok")], served(lab)
        assert lab.received("x", lab.token) == COOLDOWN_FAILURES
    finally:
        other.stop()
