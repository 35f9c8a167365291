"""Capacity: a full deployment is skipped; when every deployment of a model is full the caller
gets 529 `overloaded_error` (/v1) or 503 (/openai/v1) with `retry-after`, and no upstream sees it.

Slots are held by streams that pause right after their first token (no start deadline applies
once a stream is committed) until the test releases them (`/_sim/release`): nothing depends on
how fast a loaded machine fills the slots. The serve-all deployment also serves the lab's model, so its slots
are filled too, by as many paused streams as it has slots: nothing in the catalog is changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from simulator.testing import SimulatorThread
from tests.support.routing_lab import Lab, lab_simulators, make_lab, user
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

# An upper bound only: the holds end when the test releases them.
HOLD_SECONDS = 600.0
DEADLINE = 120.0  # for each wait on a condition (tests/waiting.py)
MAX_HELD = 300  # sanity bound on the serve-all slots this test is willing to fill


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with lab_simulators(("x", "y")) as started:
        yield started


def paused_stream(
    lab: Lab, session: str, marker: str, secret: str | None = None
) -> tuple[int, str]:
    """A stream that holds its slot: the simulator pauses after the first content delta."""
    with httpx.stream(
        "POST",
        lab.stack.url + "/v1/messages",
        headers={"x-api-key": secret or lab.key.secret, "x-ezat-session": session},
        json={"model": lab.model, "max_tokens": 16, "stream": True, "messages": user(marker)},
        timeout=HOLD_SECONDS,
    ) as response:
        return response.status_code, response.read().decode()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    wait_for(condition, DEADLINE, what=what)


def _release(lab: Lab) -> None:
    for sim in lab.all_sims().values():
        sim.release()


@contextlib.contextmanager
def _released(lab: Lab) -> Iterator[None]:
    """Whatever happens, the held streams end (else the pool waits out HOLD_SECONDS)."""
    try:
        yield
    finally:
        _release(lab)


def test_full_deployment_skipped_and_all_full_is_overloaded(
    e2e: Stack, sims: dict[str, SimulatorThread]
) -> None:
    lab = make_lab(e2e, sims, max_concurrency={"x": 1, "y": 1})
    xy = lab.header_session("x", "y")
    yx = lab.header_session("y", "x")
    serve_all = lab.serve_all_sims()
    held = sum(d.max_concurrency for d in lab.serve_all)
    assert held <= MAX_HELD
    pause = {"pause_after_events": 4, "pause": HOLD_SECONDS}
    first = pause
    lab.sims["x"].script({**first, "match": f"{lab.token} hold-x"})
    lab.sims["y"].script({**first, "match": f"{lab.token} hold-y"})
    for sim in serve_all.values():
        sim.script({**pause, "match": f"{lab.token} hold-all", "times": held})

    # One org alone may not fill a deployment (the fair share rule keeps headroom for others):
    # a second org's holds take the rest, so the serve-all deployments end up full for all.
    other = e2e.new_key().secret
    with ThreadPoolExecutor(2 * held + 2) as pool, _released(lab):
        hold_x = pool.submit(paused_stream, lab, xy, f"{lab.token} hold-x")
        wait_until(lambda: lab.received("x", "hold-x") == 1, "x to be busy")

        # x is full: a session preferring x is admitted on y instead, x never sees it.
        api = lab.anthropic(session=xy)
        api.messages.create(model=lab.model, max_tokens=8, messages=user(f"{lab.token} skip"))
        assert lab.label(lab.usage()[-1].deployment) == "y"
        assert lab.received("x", "skip") == 0
        # Failing over into a full deployment skips it too, and the attempts say so.
        lab.sims["y"].script({"status": 529, "match": f"{lab.token} via-full"})
        lab.anthropic(session=yx).messages.create(
            model=lab.model, max_tokens=8, messages=user(f"{lab.token} via-full")
        )
        outcomes = [(lab.label(a["deployment"]), a["outcome"]) for a in lab.usage()[-1].attempts]
        assert outcomes[:2] == [("y", "http_529"), ("x", "full")]
        assert outcomes[2][0] in serve_all and outcomes[2][1] == "ok" and len(outcomes) == 3

        hold_y = pool.submit(paused_stream, lab, xy, f"{lab.token} hold-y")
        wait_until(lambda: lab.received("y", "hold-y") == 1, "y to be busy")
        holds: list[Future[tuple[int, str]]] = [
            pool.submit(paused_stream, lab, xy, f"{lab.token} hold-all", None if i % 2 else other)
            for i in range(2 * held)
        ]

        def serve_all_full() -> bool:
            # A slot may have been left held by another test (it expires with its lease), so
            # a hold refused as over capacity (or over its org's share) counts as settled too.
            arrived = sum(lab.received(name, "hold-all") for name in serve_all)
            refused = sum(1 for h in holds if h.done() and h.result()[0] in (429, 529))
            return arrived + refused == 2 * held

        wait_until(serve_all_full, "the serve-all deployments to be full")

        with pytest.raises(anthropic.APIStatusError) as overloaded:
            lab.anthropic(session=xy).messages.create(
                model=lab.model, max_tokens=8, messages=user(f"{lab.token} probe")
            )
        assert overloaded.value.status_code == 529
        assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        assert int(overloaded.value.response.headers["retry-after"]) >= 1
        with pytest.raises(openai.APIStatusError) as unavailable:
            lab.openai(session=xy).chat.completions.create(
                model=lab.model, max_tokens=8, messages=user(f"{lab.token} probe")
            )
        assert unavailable.value.status_code == 503
        assert int(unavailable.value.response.headers["retry-after"]) >= 1
        for label in lab.all_sims():
            assert lab.received(label, "probe") == 0, label

        _release(lab)
        results = [hold_x.result(), hold_y.result(), *(h.result() for h in holds)]
    # Every hold was admitted and streamed to the end, except any refused as over capacity.
    assert all(status in (200, 429, 529) for status, _ in results)
    assert hold_x.result()[0] == hold_y.result()[0] == 200
    assert all(
        body.rstrip().endswith('data: {"type":"message_stop"}')
        for status, body in results
        if status == 200
    )
