"""Model lookup and paging, tiered prices, price versions and the documented model rules, through
the running gateway with the official SDKs.

Expected costs are computed with Decimal from the provider's published figures written out here
(not from catalog.pricing), so a wrong tier, conversion or rounding cannot cancel out.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from catalog.pricing import Prices, worst_case_nano
from tests.support.limits_billing_support import nano_to_usd_str, wait_for
from tests.support.stack import ROOT, Key, Stack

pytestmark = pytest.mark.e2e

SONNET = "anthropic/claude-sonnet-5-5"
HAIKU = "anthropic/claude-haiku-5-5"
OPUS = "anthropic/claude-opus-5-5"
# Claude Haiku 5.5, USD per million tokens (https://platform.claude.com/docs/en/models/haiku-5-5/overview)
HAIKU_TIERS = {
    100_000: {"input": "0.10", "output": "0.50", "cacheRead": "0.01", "cacheWrite5m": "0.125"},
    None: {"input": "0.50", "output": "2.50", "cacheRead": "0.05", "cacheWrite5m": "0.625"},
}


def anthropic_client(e2e: Stack, key: Key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=e2e.url, api_key=key.secret, max_retries=0)


def openai_client(e2e: Stack, key: Key) -> openai.OpenAI:
    return openai.OpenAI(base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0)


def get(e2e: Stack, key: Key, path: str) -> httpx.Response:
    return httpx.get(e2e.url + path, headers={"x-api-key": key.secret}, timeout=30)


def messages_calls(e2e: Stack) -> list[dict[str, Any]]:
    return [r for r in e2e.sim.requests() if r["path"] == "/v1/messages"]


# -- lookup -----------------------------------------------------------------------------------


def test_models_retrieve_in_both_sdks_by_id_or_alias_any_case(e2e: Stack) -> None:
    key = e2e.new_key()
    api = anthropic_client(e2e, key)
    model = api.models.retrieve(SONNET)  # the SDK sends anthropic%2Fclaude-sonnet-5-5
    assert (model.id, model.type, model.display_name) == (SONNET, "model", "Claude Sonnet 5.5")
    assert (model.max_input_tokens, model.max_tokens) == (1_000_000, 128_000)
    assert api.models.retrieve("  Claude-Sonnet-5.5 ").id == SONNET
    assert api.models.retrieve("haiku").id == HAIKU
    with pytest.raises(anthropic.NotFoundError):
        api.models.retrieve("gpt-9")

    chat = openai_client(e2e, key)
    found = chat.models.retrieve(SONNET)
    assert (found.id, found.object, found.owned_by) == (SONNET, "model", "anthropic")
    assert chat.models.retrieve("opus").id == OPUS
    with pytest.raises(openai.NotFoundError) as missing:
        chat.models.retrieve("gpt-9")
    assert missing.value.code == "model_not_found"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/anthropic/claude-sonnet-5-5",
        "/v1/models/anthropic%2Fclaude-sonnet-5-5",
        "/v1/models/ANTHROPIC%2FCLAUDE-SONNET-5-5",
        "/v1/models/claude-sonnet-5-5/",
        "/openai/v1/models/anthropic/claude-sonnet-5-5",
        "/openai/v1/models/anthropic%2Fclaude-sonnet-5-5",
    ],
)
def test_lookup_takes_the_slash_raw_and_encoded(e2e: Stack, path: str) -> None:
    key = e2e.new_key()
    headers = {"x-api-key": key.secret, "authorization": f"Bearer {key.secret}"}
    response = httpx.get(e2e.url + path, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == SONNET


def test_lookup_needs_a_key_and_a_get(e2e: Stack) -> None:
    assert httpx.get(e2e.url + "/v1/models/sonnet").status_code == 401
    key = e2e.new_key()
    response = httpx.post(e2e.url + "/v1/models/sonnet", headers={"x-api-key": key.secret})
    assert response.status_code == 405


# -- paging -----------------------------------------------------------------------------------


def test_models_list_pages_like_anthropic(e2e: Stack) -> None:
    key = e2e.new_key()
    everything = get(e2e, key, "/v1/models?limit=1000").json()
    ids = [m["id"] for m in everything["data"]]
    assert everything["has_more"] is False and len(ids) >= 8
    assert ids[:2] == [OPUS, SONNET] and HAIKU in ids  # the catalog's order: newest first

    first = get(e2e, key, "/v1/models?limit=2").json()
    assert [m["id"] for m in first["data"]] == ids[:2]
    assert (first["first_id"], first["last_id"], first["has_more"]) == (ids[0], ids[1], True)

    walked, after = [], None
    while True:
        query = "?limit=3" + (f"&after_id={after}" if after else "")
        page = get(e2e, key, "/v1/models" + query).json()
        walked += [m["id"] for m in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert walked == ids

    back = get(e2e, key, f"/v1/models?limit=2&before_id={ids[4]}").json()
    assert [m["id"] for m in back["data"]] == ids[2:4] and back["has_more"] is True
    start = get(e2e, key, f"/v1/models?limit=5&before_id={ids[2]}").json()
    assert [m["id"] for m in start["data"]] == ids[:2] and start["has_more"] is False

    default = get(e2e, key, "/v1/models").json()
    assert len(default["data"]) == min(20, len(ids))
    # The SDK's auto-paging follows last_id → after_id.
    assert [m.id for m in anthropic_client(e2e, key).models.list(limit=3)] == ids


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("limit=2&limit=3", "limit"),
        ("after_id=gpt-9", "after_id"),
        ("before_id=gpt-9", "before_id"),
        (f"after_id={SONNET}&before_id={HAIKU}", "before_id"),
    ],
)
def test_bad_paging_params_are_400_naming_the_param(e2e: Stack, query: str, param: str) -> None:
    key = e2e.new_key()
    response = get(e2e, key, "/v1/models?" + query)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(param)


# -- tiered prices ----------------------------------------------------------------------------


def _expected_nano(record: Any, tier: dict[str, str]) -> int:
    usd_e6 = (
        record.input_tokens * Decimal(tier["input"])
        + record.output_tokens * Decimal(tier["output"])
        + record.cache_read_tokens * Decimal(tier["cacheRead"])
        + record.cache_write_5m_tokens * Decimal(tier["cacheWrite5m"])
    )
    return int((usd_e6 * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _haiku_body(text: str, max_tokens: int = 16) -> bytes:
    body = {
        "model": "claude-haiku-5-5",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    }
    return json.dumps(body).encode()


def _post(e2e: Stack, key: Key, body: bytes) -> httpx.Response:
    headers = {"x-api-key": key.secret, "content-type": "application/json"}
    return httpx.post(e2e.url + "/v1/messages", headers=headers, content=body, timeout=60)


def test_haiku_5_5_bills_each_request_at_the_tier_of_its_prompt(e2e: Stack) -> None:
    key = e2e.new_key()
    catalog = httpx.get(e2e.url + "/api/models").json()["data"]
    version = next(m["priceVersion"] for m in catalog if m["id"] == HAIKU)
    small = _post(e2e, key, _haiku_body("Summarise the tiers. " * 200))
    large = _post(e2e, key, _haiku_body("abcd" * 105_000))  # ~105k prompt tokens
    assert small.status_code == 200 and large.status_code == 200, (small.text, large.text)
    below, above = (e2e.usage(request_id=r.headers["x-request-id"])[0] for r in (small, large))
    for record, bound in ((below, 100_000), (above, None)):
        prompt = record.input_tokens + record.cache_read_tokens + record.cache_write_tokens
        assert (prompt <= 100_000) is (bound is not None)
        tier = {k: str(Decimal(v).normalize()) for k, v in HAIKU_TIERS[bound].items()}
        assert record.prices == {
            "upToPromptTokens": bound,
            **tier,
            "cacheWrite1h": "0.2" if bound else "1",
        }
        assert record.price_version == version
        assert record.cost_nano == _expected_nano(record, HAIKU_TIERS[bound])
    # The same prompt size at the other tier's prices would cost five times as much (or less).
    assert above.cost_nano == _expected_nano(above, HAIKU_TIERS[None])
    assert above.cost_nano != _expected_nano(above, HAIKU_TIERS[100_000])


def test_the_hold_uses_the_tier_of_the_worst_case(e2e: Stack) -> None:
    body = _haiku_body("abcd" * 105_000)
    estimate = len(body) // 3 + 1  # the gateway's upper bound on prompt tokens
    low, high = (
        Prices.from_decimals(*(Decimal(p) for p in prices))
        for prices in (
            ("0.10", "0.50", "0.01", "0.125", "0.20"),
            ("0.50", "2.50", "0.05", "0.625", "1"),
        )
    )
    hold_low, hold_high = (worst_case_nano(estimate, 16, p) for p in (low, high))
    cap = (hold_low + hold_high) // 2  # enough for a first-tier hold, not for the real one
    key = e2e.new_key(cap_usd=nano_to_usd_str(cap))
    refused = _post(e2e, key, body)
    assert refused.status_code == 402, refused.text
    assert _post(e2e, key, _haiku_body("a short prompt")).status_code == 200


# -- price versions ---------------------------------------------------------------------------


def _catalog_file(tmp: Path, model_id: str, input_price: str) -> Path:
    bundled = json.loads((ROOT / "catalog/data/models.json").read_text())
    entry = next(m for m in bundled["models"] if m["id"] == SONNET)
    entry = {**entry, "id": model_id, "name": model_id, "aliases": []}
    entry["pricing"] = {**entry["pricing"], "input": input_price}
    path = tmp / "operator-catalog.json"
    path.write_text(json.dumps({"models": [entry]}))
    return path


def test_a_price_change_mid_request_bills_the_version_it_was_admitted_with(
    e2e: Stack, tmp_path: Path
) -> None:
    from catalog.models import Model, PriceVersion
    from catalog.services import copy_model, load_catalog

    model_id = f"test/prices-{uuid.uuid4().hex[:8]}"
    with e2e.blocker.unblock():
        old = copy_model(Model.objects.get(id=SONNET), model_id).price_versions.get()
    key = e2e.new_key()
    wait_for(
        lambda: get(e2e, key, f"/v1/models/{model_id}").status_code == 200,
        timeout=20,
        what="the gateway to load the model",
    )
    marker = uuid.uuid4().hex
    # Streams, then stalls after its first events long enough for the new prices to arrive.
    e2e.sim.script({"match": marker, "pause_after_events": 3, "pause": 8})
    body = {
        "model": model_id,
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": f"Hello {marker}"}],
    }
    streamed: dict[str, Any] = {}
    first_event = threading.Event()

    def run() -> None:
        headers = {"x-api-key": key.secret, "content-type": "application/json"}
        with httpx.stream(
            "POST", e2e.url + "/v1/messages", headers=headers, json=body, timeout=60
        ) as response:
            streamed["request_id"] = response.headers["x-request-id"]
            streamed["lines"] = []
            for line in response.iter_lines():
                streamed["lines"].append(line)
                first_event.set()
        streamed["ended"] = time.monotonic()

    worker = threading.Thread(target=run)
    worker.start()
    assert first_event.wait(30), "the stream never started"

    with e2e.blocker.unblock():
        report = load_catalog(_catalog_file(tmp_path, model_id, "7"))
        new = PriceVersion.objects.filter(model_id=model_id).exclude(pk=old.pk).get()
    assert report.new_price_versions == 1 and report.created == 0

    def gateway_has_new_prices() -> bool:
        models = httpx.get(e2e.url + "/api/models").json()["data"]
        return any(m["id"] == model_id and m["priceVersion"] == new.pk for m in models)

    wait_for(gateway_has_new_prices, timeout=60, what="the gateway to load the new prices")
    seen = time.monotonic()
    worker.join(60)
    assert not worker.is_alive()
    assert streamed["ended"] > seen, "the request ended before the new prices were loaded"
    assert any("message_stop" in line for line in streamed["lines"])

    admitted_before = e2e.usage(request_id=streamed["request_id"])[0]
    assert admitted_before.price_version == old.pk
    assert admitted_before.prices["input"] == "2"
    assert admitted_before.cost_nano == _expected_nano(
        admitted_before, {"input": "2", "output": "10", "cacheRead": "0.2", "cacheWrite5m": "2.5"}
    )
    after = _post(e2e, key, json.dumps({**body, "stream": False}).encode())
    assert after.status_code == 200, after.text
    admitted_after = e2e.usage(request_id=after.headers["x-request-id"])[0]
    assert admitted_after.price_version == new.pk and admitted_after.prices["input"] == "7"


# -- documented model rules -------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize("model", [SONNET, OPUS])
@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_forced_tool_choice_is_400_on_models_that_refuse_it(
    e2e: Stack, model: str, tool_choice: Any
) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client(e2e, key).chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER],
            tool_choice=tool_choice,
        )
    assert raised.value.param == "tool_choice"
    assert model in raised.value.message and '"auto"' in raised.value.message
    assert messages_calls(e2e) == []
    # auto is what it says to use, and it works.
    done = openai_client(e2e, key).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER],
        tool_choice="auto",
    )
    assert done.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("model", "field", "needle"),
    [
        (SONNET, {"tool_choice": {"type": "any"}}, "forced tool use"),
        (OPUS, {"tool_choice": {"type": "tool", "name": "get_weather"}}, "forced tool use"),
        (OPUS, {"thinking": {"type": "disabled"}}, "cannot be turned off"),
    ],
)
def test_messages_api_refuses_what_the_model_refuses_before_going_upstream(
    e2e: Stack, model: str, field: dict[str, Any], needle: str
) -> None:
    key = e2e.new_key()
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(e2e, key).messages.create(
            model=model,
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[tool],
            **field,
        )
    assert model in raised.value.message and needle in raised.value.message
    assert messages_calls(e2e) == [] and e2e.usage(org_id=key.org_id) == []


@pytest.mark.parametrize(
    ("model", "effective", "sent"),
    [
        (OPUS, "low", {"effort": "low"}),  # thinking cannot be turned off: the lowest level
        (SONNET, "none", None),  # it can: no thinking is requested
    ],
)
def test_reasoning_effort_none(
    e2e: Stack, model: str, effective: str, sent: dict[str, str] | None
) -> None:
    key = e2e.new_key()
    raw = openai_client(e2e, key).chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Hello"}],
        reasoning_effort="none",
    )
    assert raw.headers["x-ezat-reasoning-effort"] == effective
    body = messages_calls(e2e)[-1]["body"]
    assert body.get("output_config") == sent
    assert ("thinking" in body) is (sent is not None)
