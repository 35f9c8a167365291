"""Holds that see media (issue 13, finding 1): the audit's two scenarios, production shape.

Images are billed by their pixels, not their bytes: a 560×560 black PNG is ~150 bytes and costs
400 tokens; the simulator bills them like the real API (simulator/media.py). Before the
fix the hold was `body bytes / 3`, so a small body carrying many images overspent the cap and
the balance; now the hold adds each image's and PDF page's worst case.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from core.money import nano_to_usd, usd_to_nano
from tests.media_samples import b64, png
from tests.support.limits_billing_support import expected_cost_nano, product_prices
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

HAIKU = "anthropic/claude-haiku-4-5"  # no prompt caching: every image is billed as input
SONNET = "anthropic/claude-sonnet-5-5"
LIMIT_USD = Decimal("0.05")


def _balance_nano(e2e: Stack, org_id: int) -> int:
    from accounts.models import Organization
    from billing.selectors import org_balance_nano

    with e2e.blocker.unblock():
        return org_balance_nano(Organization.objects.get(pk=org_id))


def _billed(e2e: Stack, key: Key) -> int:
    return sum(r.cost_nano for r in e2e.usage(org_id=key.org_id))


# --- (a) 100 concurrent requests with 20 images each -------------------------------------------
async def _burst(e2e: Stack, key: Key, tag: str, count: int) -> list[int]:
    client = openai.AsyncOpenAI(
        api_key=key.secret, base_url=e2e.url + "/openai/v1", max_retries=0, timeout=60
    )
    image = {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64(png(560, 560))}"},
    }
    content = [{"type": "text", "text": f"Describe these {tag}"}, *[image] * 20]

    async def one() -> int:
        try:
            await client.chat.completions.create(
                model=HAIKU,
                max_completion_tokens=16,
                messages=[{"role": "user", "content": content}],
            )
        except openai.APIStatusError as exc:
            return exc.status_code
        return 200

    async with client:
        return list(await asyncio.gather(*(one() for _ in range(count))))


def test_concurrent_image_requests_never_overspend_the_cap_or_the_balance(e2e: Stack) -> None:
    key = e2e.new_key(credit_usd=str(LIMIT_USD), cap_usd=str(LIMIT_USD))
    tag = uuid.uuid4().hex[:12]
    # Admitted requests stay in flight while the rest are decided: every admission sees the
    # other holds (the race the audit exploited).
    e2e.sim.script({"match": tag, "delay": 1.0, "times": -1})
    statuses = asyncio.run(_burst(e2e, key, tag, 100))
    assert set(statuses) <= {200, 402}, sorted(set(statuses))
    # Settled holds free the difference between hold and cost: spend on until refused.
    while (status := asyncio.run(_burst(e2e, key, tag, 1))[0]) == 200:
        statuses.append(status)
        assert len(statuses) < 200, "a $0.05 limit admitted far more requests"
    answered = statuses.count(200)
    records = e2e.usage(org_id=key.org_id)
    assert len(records) == answered > 0
    for record in records:
        # 20 images of ⌈560/28⌉² = 400 tokens each, billed as the simulator (like the API) does.
        assert record.input_tokens >= 20 * 400
        assert record.cost_nano == expected_cost_nano(record, HAIKU)
    billed = _billed(e2e, key)
    limit = usd_to_nano(LIMIT_USD)
    overspend = max(0, billed - limit)
    assert overspend == 0, f"billed ${nano_to_usd(billed)} against a ${LIMIT_USD} cap"
    # Reconciled into the ledger (what the Celery task runs), the balance is what is left: it
    # never went below zero, since every debit is one of these records.
    from billing.reconcile import reconcile_all

    with e2e.blocker.unblock():
        reconcile_all()
    balance = _balance_nano(e2e, key.org_id)
    assert balance == limit - billed >= 0
    # Not refused wholesale either: what is left could not cover one more request's hold
    # (input at the dearest input price, 2× the plain input price the answers were billed at).
    assert balance < 2.2 * (billed / answered)


# --- (b) one /v1/messages request with 100 image URL sources -------------------------------------
@pytest.fixture(scope="module")
def big_image_url() -> Iterator[str]:
    """A 3000×2000 PNG over HTTP (a few kB; the API resizes it to its model's maximum)."""
    body = png(3000, 2000)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/big.png"
    finally:
        server.shutdown()
        server.server_close()


def _hundred_url_images(url: str) -> list[dict[str, Any]]:
    # One URL a hundred times (an 8 KB body, like the audit's); the simulator fetches it once.
    images = [{"type": "image", "source": {"type": "url", "url": url}}] * 100
    return [{"role": "user", "content": [*images, {"type": "text", "text": "Compare them."}]}]


def test_a_hundred_image_urls_are_held_at_their_worst_case(e2e: Stack, big_image_url: str) -> None:
    messages = _hundred_url_images(big_image_url)
    # The audit's key: $0.05. Its 100 images cost far more, so the request is refused up front.
    small = e2e.new_key(credit_usd="100", cap_usd=str(LIMIT_USD))
    client = anthropic.Anthropic(api_key=small.secret, base_url=e2e.url, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.messages.create(model=SONNET, max_tokens=16, messages=messages)  # type: ignore[arg-type]
    assert refused.value.status_code == 402
    assert _billed(e2e, small) == 0  # overspend $0 (before the fix: ~$0.48 on a $0.05 cap)

    # With room for it, the request runs and its cost stays within its hold.
    hold_tokens = 100 * 4784  # the catalog's cap per image for this model, URLs unread
    prices = product_prices(SONNET)
    hold = -(-(hold_tokens * prices.max_input + 16 * prices.output) // 1000)
    roomy = e2e.new_key(credit_usd="100", cap_usd=str(nano_to_usd(hold + 10**8)))
    client = anthropic.Anthropic(api_key=roomy.secret, base_url=e2e.url, max_retries=0)
    reply = client.messages.create(model=SONNET, max_tokens=16, messages=messages)  # type: ignore[arg-type]
    # 3000×2000 resized within 2,576 px / 4,784 tokens: about 4,700 tokens an image.
    assert reply.usage.input_tokens > 100 * 4500
    (record,) = e2e.usage(org_id=roomy.org_id)
    assert record.cost_nano <= hold, (record.cost_nano, hold)
