"""Model fallbacks ("Smart Routing", issue 20) through the official SDKs: the requested model
cannot answer, another model of the chain does; what the customer sees and what is billed.

Each test gets a fresh lab (tests/support/fallback_lab.py): model `a` (two deployments of its own),
model `b` (two of its own, prices of its own), model `c` (small, no vision), all three also served
by the stack's serve-all deployment.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import openai
import pytest

from catalog.pricing import Prices, TokenCounts, cost_nano
from simulator.testing import SimulatorThread
from tests.support.fallback_lab import (
    B_PRICES,
    FallbackLab,
    lab_simulators,
    make_fallback_lab,
    user,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

APIS = ("messages", "chat", "responses")


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with lab_simulators() as started:
        yield started


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread]) -> FallbackLab:
    return make_fallback_lab(e2e, sims)


def ask(
    lab: FallbackLab,
    api: str,
    *,
    stream: bool,
    model: str | None = None,
    fallbacks: list[str] | None = None,
    text: str = "Hello there",
    max_tokens: int = 64,
    **extra: Any,
) -> tuple[str, dict[str, str], str]:
    """One request through the SDK of `api`: (the model the answer names, its headers, its
    text). `fallbacks` go in the body's `models` on the OpenAI APIs and in the
    x-ezat-fallback-models header on /v1/messages."""
    model = model or lab.ids["a"]
    headers = {"x-ezat-fallback-models": ",".join(fallbacks)} if fallbacks is not None else {}
    if api == "messages":
        client = lab.anthropic(headers=headers)
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=max_tokens, messages=user(text), stream=stream, **extra
        )
        if not stream:
            reply = raw.parse()
            return reply.model, dict(raw.headers), reply.content[0].text  # type: ignore[union-attr]
        events = list(raw.parse())
        kinds = [e.type for e in events]
        assert kinds[0] == "message_start" and kinds.count("message_start") == 1
        assert kinds[-1] == "message_stop" and kinds.count("message_stop") == 1
        text_out = "".join(
            e.delta.text  # type: ignore[union-attr]
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )
        return events[0].message.model, dict(raw.headers), text_out  # type: ignore[union-attr]
    body = {"models": fallbacks} if fallbacks is not None else None
    client = lab.openai()
    if api == "chat":
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            max_completion_tokens=max_tokens,
            messages=user(text),  # type: ignore[arg-type]
            stream=stream,
            extra_body=body,
            **extra,
        )
        if not stream:
            completion = raw.parse()
            return completion.model, dict(raw.headers), completion.choices[0].message.content or ""
        chunks = list(raw.parse())
        names = {c.model for c in chunks}
        assert len(names) == 1, names  # every chunk names the same model
        text_out = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return names.pop(), dict(raw.headers), text_out
    raw = client.responses.with_raw_response.create(
        model=model,
        max_output_tokens=max_tokens,
        input=text,
        stream=stream,
        store=False,
        extra_body=body,
        **extra,
    )
    if not stream:
        response = raw.parse()
        return response.model, dict(raw.headers), response.output_text
    events = list(raw.parse())
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    final = events[-1].response  # type: ignore[union-attr]
    assert events[0].response.model == final.model  # type: ignore[union-attr]
    return final.model, dict(raw.headers), final.output_text


def b_cost(record: Any) -> int:
    tokens = TokenCounts(
        input=record.input_tokens,
        output=record.output_tokens,
        cache_read=record.cache_read_tokens,
        cache_write_5m=record.cache_write_5m_tokens,
        cache_write_1h=record.cache_write_1h_tokens,
    )
    return cost_nano(tokens, Prices.from_decimals(*B_PRICES.values()))


# -- the first model cannot answer: the second does ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_first_model_down_the_second_answers_and_bills(
    lab: FallbackLab, api: str, stream: bool
) -> None:
    a, b = lab.ids["a"], lab.ids["b"]
    lab.take_down("a")
    named, headers, text = ask(lab, api, stream=stream, fallbacks=[b])

    assert named == b  # the answering model's canonical id
    assert headers["x-ezat-model"] == b
    assert text
    # Every deployment of `a` was tried first (its two, and the serve-all one), then `b`.
    assert len(lab.received("a")) == 3
    assert len([r for r in lab.received("b") if r["status"] == "200"]) == 1

    [record] = lab.usage()
    assert (record.model_id, record.requested_model, record.model_name) == (b, a, a)
    assert record.price_version == lab.b_version
    assert record.prices["output"] == "33" and record.prices["input"] == "7"
    assert record.cost_nano == b_cost(record) > 0
    outcomes = [(x["model"], x["outcome"]) for x in record.attempts]
    assert outcomes[:3] == [(a, "http_500")] * 3
    assert outcomes[3:] == [(b, "ok")]


@pytest.mark.parametrize("api", APIS)
def test_the_requested_model_answering_keeps_the_name_as_sent(lab: FallbackLab, api: str) -> None:
    alias_like = lab.ids["a"].upper()  # any case resolves; the answer echoes what was sent
    named, headers, _ = ask(lab, api, stream=False, model=alias_like, fallbacks=[lab.ids["b"]])
    assert named == alias_like
    assert headers["x-ezat-model"] == lab.ids["a"]
    assert lab.received("b") == []
    [record] = lab.usage()
    assert (record.model_id, record.requested_model) == (lab.ids["a"], lab.ids["a"])


def test_without_fallbacks_the_model_down_is_an_error(lab: FallbackLab) -> None:
    lab.take_down("a")
    with pytest.raises(anthropic.InternalServerError):
        ask(lab, "messages", stream=False)
    assert lab.received("b") == [] and lab.usage() == []


# -- the caller's own error: never another model -----------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_a_400_from_the_first_model_is_not_retried_elsewhere(
    lab: FallbackLab, api: str, stream: bool
) -> None:
    lab.take_down("a", status=400, message="messages: the caller's mistake")
    error = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
    with pytest.raises(error) as caught:
        ask(lab, api, stream=stream, fallbacks=[lab.ids["b"]])
    assert "the caller's mistake" in str(caught.value)
    assert len(lab.received("a")) == 1  # not even another deployment of the same model
    assert lab.received("b") == []
    assert lab.usage() == []


# -- only models that can serve the request -----------------------------------------------------


def test_a_fallback_that_cannot_serve_the_request_is_skipped(lab: FallbackLab) -> None:
    """`c` has a 2,000-token output limit: with max_tokens 4,000 it is skipped, `b` answers."""
    a, b, c = lab.ids["a"], lab.ids["b"], lab.ids["c"]
    lab.take_down("a")
    named, headers, _ = ask(lab, "chat", stream=False, fallbacks=[c, b], max_tokens=4000)
    assert named == headers["x-ezat-model"] == b
    assert lab.received("c") == []
    [record] = lab.usage()
    assert record.model_id == b and record.requested_model == a
    [skipped] = [x for x in record.attempts if x["outcome"] == "skipped"]
    assert skipped["model"] == c and "output limit" in skipped["reason"]


def test_a_model_disabled_in_the_catalog_falls_back(lab: FallbackLab) -> None:
    import time

    import httpx

    from catalog.models import Model
    from catalog.services import bump_catalog_version

    a, b = lab.ids["a"], lab.ids["b"]
    with lab.stack.blocker.unblock():
        Model.objects.filter(id=a).update(enabled=False)
        bump_catalog_version()
    deadline = time.monotonic() + 60  # a loaded 2-core box
    lookup = f"{lab.stack.url}/v1/models/{a}"
    while httpx.get(lookup, headers={"x-api-key": lab.key.secret}).status_code != 404:
        assert time.monotonic() < deadline, "the gateway did not see the model disabled"
        time.sleep(0.1)
    named, headers, _ = ask(lab, "messages", stream=False, fallbacks=[b])
    assert named == headers["x-ezat-model"] == b
    [record] = lab.usage()
    assert (record.requested_model, record.model_id, record.model_name) == (a, b, a)
    assert record.attempts[0] == {
        "model": a,
        "outcome": "skipped",
        "reason": "disabled in the catalog",
    }
    assert lab.received("a") == []
    with pytest.raises(anthropic.NotFoundError):  # without a fallback: unknown, as before
        ask(lab, "messages", stream=False)


def test_a_defaulted_max_tokens_takes_the_fallbacks_own_default(lab: FallbackLab) -> None:
    a, c = lab.ids["a"], lab.ids["c"]
    lab.take_down("a")
    completion = lab.openai().chat.completions.create(
        model=a, messages=user("Hello"), extra_body={"models": [c]}
    )
    assert completion.model == c
    [served] = [r for r in lab.received("c") if r["status"] == "200"]
    assert served["body"]["max_tokens"] == 2000  # c's own limit (below the 32,000 default)


def test_images_never_go_to_a_model_without_vision(lab: FallbackLab) -> None:
    from tests.media_samples import b64, png

    a, c = lab.ids["a"], lab.ids["c"]
    lab.take_down("a")
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + b64(png(64, 64))},
                },
            ],
        }
    ]
    with pytest.raises(openai.InternalServerError):
        lab.openai().chat.completions.create(
            model=a, messages=messages, max_completion_tokens=64, extra_body={"models": [c]}
        )
    assert lab.received("c") == []


# -- signed thinking stays with the model that produced it ----------------------------------------

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_FN = {"type": "function", "function": {**WEATHER, "parameters": WEATHER["input_schema"]}}
WEATHER_RESP = {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}


def assert_barred(error: Exception, lab: FallbackLab) -> None:
    assert getattr(error, "status_code", None) == 503
    message = str(error)
    assert "signed thinking" in message and lab.ids["b"] in message
    assert lab.received("b") == []
    assert lab.usage() == []


def test_signed_thinking_tool_loop_is_not_moved_messages(lab: FallbackLab) -> None:
    a, b = lab.ids["a"], lab.ids["b"]
    client = lab.anthropic(headers={"x-ezat-fallback-models": b})
    question = user("Weather in Oslo? Use the tool.")
    first = client.messages.create(
        model=a, max_tokens=2000, messages=question, tools=[WEATHER], thinking={"type": "adaptive"}
    )
    assert [block.type for block in first.content] == ["thinking", "tool_use"]
    tool_use = first.content[1]
    lab.take_down("a")
    history = [
        *question,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "9°C"}],  # type: ignore[union-attr]
        },
    ]
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model=a,
            max_tokens=2000,
            messages=history,
            tools=[WEATHER],
            thinking={"type": "adaptive"},
        )
    assert caught.value.status_code == 503
    assert "signed thinking" in str(caught.value) and b in str(caught.value)
    assert lab.received("b") == []
    assert len(lab.usage()) == 1


def test_signed_thinking_tool_loop_is_not_moved_chat(lab: FallbackLab) -> None:
    a, b = lab.ids["a"], lab.ids["b"]
    client = lab.openai()
    messages: list[Any] = user("Weather in Oslo? Use the tool.")
    params = {"model": a, "tools": [WEATHER_FN], "reasoning_effort": "high"}
    first = client.chat.completions.create(
        messages=messages, max_completion_tokens=2000, extra_body={"models": [b]}, **params
    )
    assert first.model == a
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "9°C"},
    ]
    lab.take_down("a")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            messages=messages, max_completion_tokens=2000, extra_body={"models": [b]}, **params
        )
    assert caught.value.status_code == 503
    assert "signed thinking" in caught.value.message and b in caught.value.message
    assert lab.received("b") == []
    assert len(lab.usage()) == 1


def test_signed_thinking_tool_loop_is_not_moved_responses(lab: FallbackLab) -> None:
    a, b = lab.ids["a"], lab.ids["b"]
    turn = {
        "model": a,
        "tools": [WEATHER_RESP],
        "reasoning": {"effort": "high"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "models": [b],
    }
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    first = lab.post("/openai/v1/responses", {**turn, "input": items})
    assert first.status_code == 200, first.text
    out = first.json()["output"]
    assert [item["type"] for item in out] == ["reasoning", "function_call"]
    items += [*out, {"type": "function_call_output", "call_id": out[1]["call_id"], "output": "9°C"}]
    lab.take_down("a")
    second = lab.post("/openai/v1/responses", {**turn, "input": items})
    assert second.status_code == 503, second.text
    message = second.json()["error"]["message"]
    assert "signed thinking" in message and b in message
    assert lab.received("b") == []


def test_reasoning_a_fallback_sealed_continues_on_that_model(lab: FallbackLab) -> None:
    """Turn 1 was answered by `b` (a was down): its thinking is bound to `b`, so turn 2 goes
    to `b` again even though `a` is back (never `a` with `b`'s thinking)."""
    a, b = lab.ids["a"], lab.ids["b"]
    turn = {
        "model": a,
        "tools": [WEATHER_RESP],
        "reasoning": {"effort": "high"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "models": [b],
    }
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    lab.take_down("a")
    first = lab.post("/openai/v1/responses", {**turn, "input": items}).json()
    assert first["model"] == b
    out = first["output"]
    items += [*out, {"type": "function_call_output", "call_id": out[1]["call_id"], "output": "9°C"}]
    lab.bring_up("a")
    second = lab.post("/openai/v1/responses", {**turn, "input": items})
    assert second.status_code == 200, second.text
    assert second.json()["model"] == b
    assert second.headers["x-ezat-model"] == b
    assert lab.received("a") == []  # a was brought up with fresh records: never asked
    assert second.json()["output"][-1]["content"][0]["text"] == "Tool said: 9°C"


# -- money: the hold covers the dearest model of the chain -----------------------------------------


def test_a_cap_tight_key_is_held_for_the_dearest_model(lab: FallbackLab) -> None:
    """`b` costs $1,000 per million output tokens: 1,000 of them hold $1 where `a` holds ~$0.01.
    A key capped at $0.50 may ask `a` alone, but not `a` with `b` behind it."""
    from catalog.models import Model
    from catalog.schema import TierFigures
    from catalog.services import create_price_version

    a, b = lab.ids["a"], lab.ids["b"]
    dear = {**B_PRICES, "output": Decimal("1000")}
    with lab.stack.blocker.unblock():
        version = create_price_version(
            Model.objects.get(id=b), [TierFigures(None, dear)], source="e2e"
        )
    wait_until_priced(lab, b, version.pk)
    key = lab.stack.new_key(cap_usd="0.50")
    client = lab.anthropic(key=key, headers={"x-ezat-fallback-models": b})
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model=a, max_tokens=1000, messages=user("Hello"))
    assert caught.value.status_code == 402
    assert "spend cap" in str(caught.value)
    assert lab.received("a") == [] and lab.received("b") == []
    # The same request without the chain fits the cap, and so does an explicitly empty list.
    alone = lab.anthropic(key=key).messages.create(model=a, max_tokens=1000, messages=user("Hi"))
    assert alone.model == a
    off = lab.anthropic(key=key, headers={"x-ezat-fallback-models": ""})
    assert off.messages.create(model=a, max_tokens=1000, messages=user("Hi")).model == a


def wait_until_priced(lab: FallbackLab, model_id: str, version: int) -> None:
    import time

    import httpx

    deadline = time.monotonic() + 60  # a loaded 2-core box
    while time.monotonic() < deadline:
        models = httpx.get(lab.stack.url + "/api/models", timeout=5).json()["data"]
        # Served by the gateway's process from the same catalog snapshot the API paths use.
        if any(m["id"] == model_id and m["priceVersion"] == version for m in models):
            return
        time.sleep(0.1)
    raise AssertionError(f"{model_id} did not get price version {version}")


# -- the org's default policy -------------------------------------------------------------------


def test_the_org_policy_applies_and_the_request_list_wins(lab: FallbackLab) -> None:
    a, b, c = lab.ids["a"], lab.ids["b"], lab.ids["c"]
    lab.set_policy(a, [b])
    lab.take_down("a")
    assert ask(lab, "messages", stream=False)[0] == b  # no list sent: the org's
    assert ask(lab, "chat", stream=False, fallbacks=[c])[0] == c  # the request's list wins
    with pytest.raises(openai.InternalServerError):
        ask(lab, "chat", stream=False, fallbacks=[])  # an empty list: fallbacks off
    other = lab.stack.new_key()  # another org: the policy is not theirs
    with pytest.raises(anthropic.InternalServerError):
        lab.anthropic(key=other).messages.create(model=a, max_tokens=32, messages=user("Hi"))


# -- ezat/auto -------------------------------------------------------------------------------------


def test_ezat_auto_resolves_to_the_orgs_chain_with_both_sdks(lab: FallbackLab) -> None:
    a, b = lab.ids["a"], lab.ids["b"]
    lab.set_policy("ezat/auto", [a, b])
    reply = lab.anthropic().messages.with_raw_response.create(
        model="ezat/auto", max_tokens=32, messages=user("Hi")
    )
    assert reply.parse().model == a and reply.headers["x-ezat-model"] == a
    completion = lab.openai().chat.completions.with_raw_response.create(
        model="ezat/auto", max_completion_tokens=32, messages=user("Hi")
    )
    assert completion.parse().model == a and completion.headers["x-ezat-model"] == a
    lab.take_down("a")
    assert (
        lab.anthropic().messages.create(model="ezat/auto", max_tokens=32, messages=user("Hi")).model
        == b
    )
    chunks = list(
        lab.openai().chat.completions.create(
            model="ezat/auto", max_completion_tokens=32, messages=user("Hi"), stream=True
        )
    )
    assert {chunk.model for chunk in chunks} == {b}
    response = lab.openai().responses.create(model="ezat/auto", input="Hi", store=False)
    assert response.model == b
    records = lab.usage()
    assert [r.requested_model for r in records] == ["ezat/auto"] * 5
    assert [r.model_name for r in records] == ["ezat/auto"] * 5
    assert [r.model_id for r in records] == [a, a, b, b, b]
    # Listed with what its chain shares, by both APIs.
    assert "ezat/auto" in [m.id for m in lab.openai().models.list()]
    info = lab.anthropic().models.retrieve("ezat/auto")
    assert info.id == "ezat/auto" and info.max_tokens == 128000


def test_ezat_auto_defaults_to_the_catalogs_chain(lab: FallbackLab) -> None:
    reply = lab.openai().chat.completions.create(
        model="ezat/auto", max_completion_tokens=32, messages=user("Hi")
    )
    assert reply.model == "anthropic/claude-sonnet-5-5"  # the suggested chain's first model
    [record] = lab.usage()
    assert (record.requested_model, record.model_id) == ("ezat/auto", reply.model)


def test_ezat_auto_is_validated_against_what_its_chain_shares(lab: FallbackLab) -> None:
    """With `c` (2,000 output tokens) in the chain, ezat/auto takes at most 2,000."""
    lab.set_policy("ezat/auto", [lab.ids["a"], lab.ids["c"]])
    with pytest.raises(openai.BadRequestError) as caught:
        lab.openai().chat.completions.create(
            model="ezat/auto", max_completion_tokens=4000, messages=user("Hi")
        )
    assert caught.value.body["param"] == "max_completion_tokens"  # type: ignore[index]
    assert "2000" in caught.value.message


# -- bad lists ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("models", "param"),
    [
        (["anthropic/claude-sonnet-5", "no/such-model"], "models[1]"),
        (["anthropic/claude-sonnet-5"] * 2, "models[1]"),
        (
            [
                f"anthropic/claude-{m}"
                for m in ("opus-5", "sonnet-5", "haiku-5-5", "opus-4-6", "sonnet-4-6", "haiku-4-5")
            ],
            "models[5]",
        ),
        (["anthropic/claude-sonnet-5", 7], "models[1]"),
        (["claude-sonnet-5", "anthropic/claude-sonnet-5"], "models[1]"),  # alias + id: twice
        ("anthropic/claude-sonnet-5", "models"),
    ],
)
@pytest.mark.parametrize("path", ["/openai/v1/chat/completions", "/openai/v1/responses"])
def test_a_bad_models_list_is_a_400_naming_the_entry(
    lab: FallbackLab, path: str, models: Any, param: str
) -> None:
    body: dict[str, Any] = {"model": lab.ids["a"], "models": models}
    body.update({"messages": user("Hi")} if "chat" in path else {"input": "Hi"})
    response = lab.post(path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(param)
    assert lab.received("a") == [] and lab.usage() == []


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ("anthropic/claude-sonnet-5, no/such-model", "x-ezat-fallback-models[1]"),
        ("anthropic/claude-sonnet-5,anthropic/claude-sonnet-5", "x-ezat-fallback-models[1]"),
        ("anthropic/claude-sonnet-5,,anthropic/claude-opus-5", "x-ezat-fallback-models[1]"),
        (
            ",".join(
                f"anthropic/claude-{m}"
                for m in ("opus-5", "sonnet-5", "haiku-5-5", "opus-4-6", "sonnet-4-6", "haiku-4-5")
            ),
            "x-ezat-fallback-models[5]",
        ),
        ("ezat/auto", "x-ezat-fallback-models[0]"),
    ],
)
@pytest.mark.parametrize(
    "path", ["/v1/messages", "/openai/v1/chat/completions", "/openai/v1/responses"]
)
def test_a_bad_fallback_header_is_the_same_400(
    lab: FallbackLab, path: str, value: str, param: str
) -> None:
    body: dict[str, Any] = {"model": lab.ids["a"], "max_tokens": 32}
    body.update({"input": "Hi"} if "responses" in path else {"messages": user("Hi")})
    response = lab.post(path, body, **{"x-ezat-fallback-models": value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith(param)
    if "openai" in path:
        assert error["param"] == param
    assert lab.received("a") == [] and lab.usage() == []


# -- a stream that opened before its first token -----------------------------------------------


@pytest.mark.parametrize("with_fallbacks", [False, True])
@pytest.mark.parametrize("api", APIS)
def test_a_stream_opened_early_names_the_model_only_when_no_other_could_answer(
    lab: FallbackLab, api: str, with_fallbacks: bool
) -> None:
    """The first token comes after EZAT_STREAM_OPEN_AFTER (1.5 s in the e2e stack): keep-alives
    open the stream first. Its headers carry x-ezat-model only without fallbacks; with them
    the first event names the model."""
    a = lab.ids["a"]
    slow = {"delay": 2.2, "times": -1}
    for sim in lab.own_sims("a"):
        sim.script(slow)
    for sim in lab.serve_all_sims():
        sim.script({**slow, "match": f'"model":"{lab.upstream("a")}"'})
    fallbacks = [lab.ids["b"]] if with_fallbacks else None
    named, headers, text = ask(lab, api, stream=True, fallbacks=fallbacks)
    assert named == a and text
    if with_fallbacks:
        assert "x-ezat-model" not in headers
    else:
        assert headers["x-ezat-model"] == a


# -- the answering model's own reasoning level ---------------------------------------------------

OPUS_46 = "anthropic/claude-opus-4-6"  # levels low, medium, high, max: no xhigh


def test_the_effort_is_mapped_for_the_answering_model_chat(lab: FallbackLab) -> None:
    lab.take_down("a")
    raw = lab.openai().chat.completions.with_raw_response.create(
        model=lab.ids["a"],
        max_completion_tokens=2000,
        messages=user("Think about it"),
        reasoning_effort="xhigh",
        extra_body={"models": [OPUS_46]},
    )
    assert raw.parse().model == OPUS_46
    # xhigh sits between high and max: the tie goes to the lower level.
    assert raw.headers["x-ezat-reasoning-effort"] == "high"
    assert raw.headers["x-ezat-model"] == OPUS_46
    sent = [
        r["body"]
        for r in lab.stack.sim.requests()
        if isinstance(r.get("body"), dict) and r["body"].get("model") == "claude-opus-4-6"
    ]
    assert sent[-1]["output_config"]["effort"] == "high"


def test_the_effort_is_mapped_for_the_answering_model_messages(lab: FallbackLab) -> None:
    lab.take_down("a")
    raw = lab.anthropic(
        headers={"x-ezat-fallback-models": OPUS_46}
    ).messages.with_raw_response.create(
        model=lab.ids["a"],
        max_tokens=2000,
        messages=user("Think about it"),
        thinking={"type": "adaptive"},
        output_config={"effort": "xhigh"},
    )
    assert raw.parse().model == OPUS_46
    assert raw.headers["x-ezat-reasoning-effort"] == "high"
    sent = [
        r["body"]
        for r in lab.stack.sim.requests()
        if isinstance(r.get("body"), dict) and r["body"].get("model") == "claude-opus-4-6"
    ]
    assert sent[-1]["output_config"] == {"effort": "high"}
    # The requested model got the caller's level as sent.
    assert all(r["body"]["output_config"] == {"effort": "xhigh"} for r in lab.received("a"))


def test_thinking_a_fallback_produced_continues_on_that_model_chat(lab: FallbackLab) -> None:
    """The thinking kept for an OpenAI client's tool loop names the model that produced it: the
    next turn goes to `b` again though `a` is back, with `b`'s signed blocks."""
    a, b = lab.ids["a"], lab.ids["b"]
    client = lab.openai()
    messages: list[Any] = user("Weather in Oslo? Use the tool.")
    params = {"model": a, "tools": [WEATHER_FN], "reasoning_effort": "high"}
    lab.take_down("a")
    first = client.chat.completions.create(
        messages=messages, max_completion_tokens=2000, extra_body={"models": [b]}, **params
    )
    assert first.model == b
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "9°C"},
    ]
    lab.bring_up("a")
    second = client.chat.completions.with_raw_response.create(
        messages=messages, max_completion_tokens=2000, extra_body={"models": [b]}, **params
    )
    assert second.parse().model == b and second.headers["x-ezat-model"] == b
    assert second.parse().choices[0].message.content == "Tool said: 9°C"
    assert lab.received("a") == []
    [sent] = [
        r["body"]
        for r in lab.received("b")
        if r["body"]["messages"][-1]["role"] == "user" and len(r["body"]["messages"]) == 3
    ]
    assert [block["type"] for block in sent["messages"][1]["content"]] == ["thinking", "tool_use"]
