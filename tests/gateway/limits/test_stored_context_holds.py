"""Holds that see stored context (issue 31, item 1): a tiny Responses body naming a large stored
context through `previous_response_id` sends the whole context upstream, and its hold must cover
it. Before the fix the hold was the client's body bytes / 3, so 50 concurrent continuations of a
37k-token context were admitted against a $0.05 cap and billed 3.5× the cap.

Runs in both shapes: embedded (SQLite, in-process limits) and production (PostgreSQL + Redis,
the `DATABASE_URL`/`REDIS_URL` prefix of BRIEF_COMMON).
"""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import httpx
import pytest

from core.money import nano_to_usd, usd_to_nano
from tests.support.limits_billing_support import expected_cost_nano, product_prices
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

HAIKU = "anthropic/claude-haiku-4-5"  # no prompt caching: the whole context is billed as input
CAP_USD = Decimal("0.20")
# ~113k characters: ~28k tokens as the simulator (like the API) bills them (~$0.028), a
# ~38k-token hold at Haiku's dearest input price (~$0.075): a few fit under the cap, not 20.
CONTEXT = " ".join(f"fact{n} is stored" for n in range(6_000))
CONCURRENT = 20


def _capped_key_in(e2e: Stack, org_id: int) -> Key:
    """A second key of the org that stored the context: stored responses are per org."""
    from accounts.models import Organization
    from accounts.services import create_api_key

    with e2e.blocker.unblock():
        new = create_api_key(
            org=Organization.objects.get(pk=org_id),
            name="capped",
            rpm_limit=10_000,
            spend_cap_nano=usd_to_nano(CAP_USD),
        )
    return Key(secret=new.secret, org_id=org_id, key_id=new.key.pk)


def _store_context(e2e: Stack, seeder: Key) -> str:
    response = httpx.post(
        e2e.url + "/openai/v1/responses",
        headers={"authorization": f"Bearer {seeder.secret}"},
        json={"model": HAIKU, "input": CONTEXT, "max_output_tokens": 16, "store": True},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def _continue(e2e: Stack, key: Key, previous: str, tag: str, count: int) -> list[int]:
    async with httpx.AsyncClient(
        base_url=e2e.url, headers={"authorization": f"Bearer {key.secret}"}, timeout=60
    ) as client:

        async def one() -> int:
            response = await client.post(
                "/openai/v1/responses",
                json={
                    "model": HAIKU,
                    "input": f"go on {tag}",
                    "previous_response_id": previous,
                    "max_output_tokens": 16,
                    "store": False,
                },
            )
            assert response.status_code in (200, 402), response.text
            if response.status_code == 402:
                assert "spend cap" in response.text.lower(), response.text
            return response.status_code

        return list(await asyncio.gather(*(one() for _ in range(count))))


def test_concurrent_continuations_of_a_stored_context_never_overspend_the_cap(e2e: Stack) -> None:
    seeder = e2e.new_key(credit_usd="100")  # credit far above the cap: only the cap binds
    key = _capped_key_in(e2e, seeder.org_id)
    previous = _store_context(e2e, seeder)
    tag = uuid.uuid4().hex[:12]
    # Admitted requests stay in flight while the others are decided: each admission sees the
    # other holds (the audit's race).
    e2e.sim.script({"match": tag, "delay": 1.0, "times": -1})
    statuses = asyncio.run(_continue(e2e, key, previous, tag, CONCURRENT))
    assert 402 in statuses, statuses
    # Settled holds free the difference between hold and cost: continue until refused.
    while (status := asyncio.run(_continue(e2e, key, previous, tag, 1))[0]) == 200:
        statuses.append(status)
        assert len(statuses) < 60, "a $0.20 cap admitted far more continuations"
    answered = statuses.count(200)
    records = e2e.usage(api_key_id=key.key_id)
    assert len(records) == answered > 0
    for record in records:
        # The stored context was sent upstream and billed: it is what the hold must cover.
        assert record.input_tokens > 25_000, record.input_tokens
        assert record.cost_nano == expected_cost_nano(record, HAIKU)
    billed = sum(r.cost_nano for r in records)
    cap = usd_to_nano(CAP_USD)
    assert billed <= cap, f"billed ${nano_to_usd(billed)} against a ${CAP_USD} cap"
    # Not refused wholesale either: what is left under the cap is less than one more hold.
    # (The hold also covers the stored answer and the JSON around the text: a few % more.)
    one_hold = product_prices(HAIKU).max_input * (len(CONTEXT) * 105 // 100 // 3) // 1000
    assert cap - billed < one_hold


def test_an_inline_context_and_a_stored_one_are_held_alike(e2e: Stack) -> None:
    """The same text inline or by reference: a cap below one hold refuses both at once."""
    seeder = e2e.new_key(credit_usd="100")
    previous = _store_context(e2e, seeder)
    from accounts.models import Organization
    from accounts.services import create_api_key

    with e2e.blocker.unblock():
        new = create_api_key(
            org=Organization.objects.get(pk=seeder.org_id),
            name="tiny cap",
            spend_cap_nano=usd_to_nano(Decimal("0.02")),  # below the context's ~$0.08 hold
        )
    headers = {"authorization": f"Bearer {new.secret}"}
    base = {"model": HAIKU, "max_output_tokens": 16, "store": False}
    inline = httpx.post(
        e2e.url + "/openai/v1/responses",
        headers=headers,
        json={**base, "input": CONTEXT},
        timeout=60,
    )
    stored = httpx.post(
        e2e.url + "/openai/v1/responses",
        headers=headers,
        json={**base, "input": "go on", "previous_response_id": previous},
        timeout=60,
    )
    assert (inline.status_code, stored.status_code) == (402, 402), (inline.text, stored.text)
