"""Sticky routing through the official SDKs: one session, one deployment, for 20 turns, for each
of the three session sources; distinct sessions spread by weight.

Every lab deployment has its own simulator (its own prompt cache), so a conversation that stays
put reads its cache back from turn 2 on: that is what stickiness is for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from simulator.testing import SimulatorThread
from tests.support.routing_lab import Lab, lab_simulators, make_lab, user
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

TURNS = 20
CONVERSATIONS = 3
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with lab_simulators() as started:
        yield started


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread]) -> Lab:
    return make_lab(e2e, sims)


def served_by(lab: Lab, key: Key) -> list[str]:
    records = lab.usage(key)
    assert len(records) == TURNS, [r.status for r in records]
    return [r.deployment for r in records]


@pytest.mark.parametrize("api", ["messages", "chat"])
def test_header_session_sticks_for_20_turns(lab: Lab, api: str) -> None:
    for n in range(CONVERSATIONS):
        key = lab.stack.new_key()
        session = f"{lab.token}-conversation-{n}"
        anthropic_api = lab.anthropic(session=session, key=key)
        openai_api = lab.openai(session=session, key=key)
        for turn in range(TURNS):
            # A new first message every turn (and, on the OpenAI API, a new prompt_cache_key):
            # only the header ties these requests together, and it takes precedence.
            text = f"{lab.token} header {n}/{turn}"
            if api == "messages":
                anthropic_api.messages.create(model=lab.model, max_tokens=16, messages=user(text))
            else:
                openai_api.chat.completions.create(
                    model=lab.model,
                    max_tokens=16,
                    messages=user(text),
                    prompt_cache_key=f"{lab.token}-pck-{n}-{turn}",
                )
        assert len(set(served_by(lab, key))) == 1


def test_prompt_cache_key_sticks_for_20_turns(lab: Lab) -> None:
    for n in range(CONVERSATIONS):
        key = lab.stack.new_key()
        api = lab.openai(key=key)
        for turn in range(TURNS):
            api.chat.completions.create(
                model=lab.model,
                max_tokens=16,
                messages=user(f"{lab.token} pck {n}/{turn}"),
                prompt_cache_key=f"{lab.token}-tenant-{n}",
            )
        assert len(set(served_by(lab, key))) == 1


def _messages_turn(lab: Lab, key: Key, system: str, history: list[dict[str, Any]]) -> str:
    # The usual client pattern: a breakpoint on the system prompt and one on the newest message,
    # which moves every turn (so on turn 1 the first message carries it, later it does not).
    marked = [dict(m) for m in history]
    marked[-1] = {
        "role": "user",
        "content": [{"type": "text", "text": history[-1]["content"], "cache_control": EPHEMERAL}],
    }
    reply = lab.anthropic(key=key).messages.create(
        model=lab.model,
        max_tokens=16,
        system=[{"type": "text", "text": system, "cache_control": EPHEMERAL}],
        messages=marked,  # type: ignore[arg-type]
    )
    return reply.content[0].text  # type: ignore[union-attr]


def _chat_turn(lab: Lab, key: Key, system: str, history: list[dict[str, Any]]) -> str:
    # No breakpoints from the client: the gateway adds its automatic ones.
    completion = lab.openai(key=key).chat.completions.create(
        model=lab.model,
        max_tokens=16,
        messages=[{"role": "system", "content": system}, *history],  # type: ignore[list-item]
    )
    return completion.choices[0].message.content or ""


@pytest.mark.parametrize("api", ["messages", "chat"])
def test_conversation_hash_sticks_for_20_turns_and_reads_its_cache(lab: Lab, api: str) -> None:
    turn_fn = _messages_turn if api == "messages" else _chat_turn
    for n in range(CONVERSATIONS):
        key = lab.stack.new_key()
        system = f"You are assistant {n} of lab {lab.token}. " + "Answer briefly. " * 40
        history: list[dict[str, Any]] = user(f"Conversation {n}: hello")
        for turn in range(TURNS):
            answer = turn_fn(lab, key, system, history)
            history += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"turn {turn + 1}, go on"},
            ]
        records = lab.usage(key)
        assert len({r.deployment for r in records}) == 1, [r.deployment for r in records]
        # Same deployment, so the cached prefix is read back on every later turn.
        assert records[0].cache_read_tokens == 0
        assert all(r.cache_read_tokens > 0 for r in records[1:]), [
            r.cache_read_tokens for r in records
        ]


def test_sessions_spread_by_weight(e2e: Stack, sims: dict[str, SimulatorThread]) -> None:
    lab = make_lab(e2e, {"x": sims["x"], "y": sims["y"]}, weights={"x": 10, "y": 30})
    api = lab.anthropic()
    sessions = 300

    def one(n: int) -> None:
        # Distinct conversations without header or cache key: each is its own derived session.
        api.messages.create(
            model=lab.model, max_tokens=8, messages=user(f"{lab.token} distinct session {n}")
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(sessions)))
    counts = Counter(lab.label(r.deployment) for r in lab.usage())
    assert sum(counts.values()) == sessions
    serve_all = {d.name for d in lab.serve_all}
    assert set(counts) <= {"x", "y", *serve_all}, counts
    # The serve-all deployments (weight 1 each here) get a small share, or none while they cool.
    assert sum(counts[name] for name in serve_all) <= 0.08 * sessions, counts
    # x:y is 1:3 whatever the serve-all ones do (a weighted rendezvous runner-up is also
    # weight-proportional). With ≥ 270 sessions between x and y, ±0.08 is over 3 sd.
    share_y = counts["y"] / (counts["x"] + counts["y"])
    assert abs(share_y - 0.75) < 0.08, counts
