"""The Responses API on the wire: the exact streaming event sequence, failures in and before the
stream, bad input naming its param, input_tokens, and the key checked before the path."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.chat_support import upstream_records
from tests.support.responses_support import SONNET, WEATHER_TOOL, events, post, stream_raw
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_text_stream_event_sequence(e2e: Stack) -> None:
    key = e2e.new_key()
    raw = stream_raw(e2e, key, {"model": SONNET, "input": "Say hello"})
    assert raw.status == 200
    evs = events(raw)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    kinds = [e["type"] for e in evs]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 2
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert evs[0]["response"]["output"] == [] and evs[0]["response"]["status"] == "in_progress"
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    done = evs[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["text"] == text == "Simulated reply to: Say hello"
    assert done["usage"]["output_tokens"] > 0
    assert "[DONE]" not in raw.text


def test_reasoning_and_tool_call_stream_sequence(e2e: Stack) -> None:
    key = e2e.new_key()
    body: dict[str, Any] = {
        "model": SONNET,
        "input": "Weather in Oslo?",
        "tools": [WEATHER_TOOL],
        "reasoning": {"effort": "medium", "summary": "detailed"},
        "include": ["reasoning.encrypted_content"],
    }
    raw = stream_raw(e2e, key, body)
    evs = events(raw)
    kinds = [e["type"] for e in evs]
    summary = kinds.count("response.reasoning_summary_text.delta")
    args = kinds.count("response.function_call_arguments.delta")
    assert summary >= 1 and args >= 1
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        *["response.reasoning_summary_text.delta"] * summary,
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * args,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    reasoning_done = evs[kinds.index("response.output_item.done")]["item"]
    assert reasoning_done["encrypted_content"].startswith("ezr1.")
    call_done = evs[kinds.index("response.function_call_arguments.done")]
    assert call_done["name"] == "get_weather" and call_done["arguments"] == '{"city":"Oslo"}'
    final = evs[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["reasoning", "function_call"]
    assert [i["id"] for i in final] == [evs[2]["item"]["id"], call_done["item_id"]]
    assert final[0]["summary"][0]["text"].startswith("Thinking about")


def test_incomplete_at_max_output_tokens(e2e: Stack) -> None:
    key = e2e.new_key()
    out = post(e2e, key, {"model": SONNET, "input": "a long answer please", "max_output_tokens": 5})
    assert out.json()["status"] == "incomplete"
    assert out.json()["incomplete_details"] == {"reason": "max_output_tokens"}
    raw = stream_raw(e2e, key, {"model": SONNET, "input": "a long answer", "max_output_tokens": 5})
    last = events(raw)[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_failover_before_the_first_token_is_invisible(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sims["sim-b"].script({"status": 529})
    raw = stream_raw(e2e, key, {"model": "test/routed-ab", "input": "Say hello"})
    evs = events(raw)
    assert evs[0]["type"] == "response.created" and evs[-1]["type"] == "response.completed"
    assert sum(1 for e in evs if e["type"] == "response.created") == 1


def test_error_after_the_first_token_is_error_then_failed_and_billed_so_far(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"error_after_events": 6})
    raw = stream_raw(e2e, key, {"model": SONNET, "input": "Tell me a long answer"})
    evs = events(raw)
    assert [e["type"] for e in evs[-2:]] == ["error", "response.failed"]
    assert evs[-2]["message"] and evs[-1]["response"]["status"] == "failed"
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    (record,) = e2e.usage(org_id=key.org_id)  # the output so far (test_partial_streams.py)
    assert (record.status, record.output_exact) == ("stream_failed", False)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "computer_call", "id": "x"}]}, "input[0].type"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]},
            "input[0].call_id",
        ),
        (
            {
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "reasoning", "summary": [], "encrypted_content": "not-ours"},
                ]
            },
            "input[1].encrypted_content",
        ),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
            "input[0].content[0].file_id",
        ),
        ({"input": "x", "tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
        ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"input": "x", "reasoning": {"effort": "turbo"}}, "reasoning.effort"),
        ({"input": "x", "max_output_tokens": 10**9}, "max_output_tokens"),
    ],
)
def test_refused_fields_are_400_naming_the_param(
    e2e: Stack, body: dict[str, Any], param: str
) -> None:
    key = e2e.new_key()
    response = post(e2e, key, {"model": SONNET, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(param)
    assert upstream_records(e2e) == []


def test_input_tokens_is_free_and_counts_toward_rpm(e2e: Stack) -> None:
    key = e2e.new_key(rpm=2)
    body = {"model": SONNET, "input": "How many tokens is this?", "instructions": "Be brief."}
    first = post(e2e, key, body, path="/input_tokens")
    assert first.status_code == 200, first.text
    assert first.json()["object"] == "response.input_tokens"
    assert first.json()["input_tokens"] > 0
    assert post(e2e, key, body, path="/input_tokens").status_code == 200
    assert post(e2e, key, body, path="/input_tokens").status_code == 429
    assert e2e.usage(org_id=key.org_id) == []
    counted = [r for r in e2e.sim.requests() if r["path"] == "/v1/messages/count_tokens"]
    assert counted[-1]["body"]["system"][0]["text"] == "Be brief."


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/openai/v1/responses"),
        ("GET", "/openai/v1/responses/resp_123"),
        ("POST", "/openai/v1/no-such-thing"),
        ("GET", "/openai/v1/chat/completions"),
        ("POST", "/v1/no-such-thing"),
    ],
)
def test_a_wrong_key_is_401_on_every_path(e2e: Stack, method: str, path: str) -> None:
    response = httpx.request(
        method, e2e.url + path, headers={"authorization": "Bearer ezat_sk_wrong"}, timeout=30
    )
    assert response.status_code == 401
    key = e2e.new_key()
    known = httpx.request(
        method, e2e.url + path, headers={"authorization": f"Bearer {key.secret}"}, timeout=30
    )
    assert known.status_code in (400, 404, 405)


def test_keep_alives_during_an_upstream_pause_are_comments(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"pause_after_events": 6, "pause": 2.5})
    raw = stream_raw(e2e, key, {"model": SONNET, "input": "Tell me a long answer"})
    assert ": ping" in raw.lines
    evs = events(raw)
    assert evs[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))


def test_a_cancelled_stream_is_billed_for_what_was_produced(e2e: Stack) -> None:

    from openai import OpenAI

    key = e2e.new_key()
    # Slow enough that the gateway's 3 s drain ends before the upstream's final usage.
    e2e.sim.script({"event_delay": 0.2})
    oai = OpenAI(base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0)
    stream = oai.responses.create(model=SONNET, input="Tell me a long answer", stream=True)
    for n, _event in enumerate(stream):
        if n == 6:
            break
    stream.close()
    (record,) = wait_for(
        lambda: e2e.usage(org_id=key.org_id), 60, what="the usage record after the client closed"
    )
    assert record.api == "responses" and record.status == "client_disconnected"
    assert record.output_exact is False
    assert record.output_tokens > 0 and record.cost_nano > 0


def test_reasoning_effort_nearest_level_in_the_header(e2e: Stack) -> None:
    key = e2e.new_key()
    opus_46 = "anthropic/claude-opus-4-6"  # levels low, medium, high, max: no xhigh
    response = post(e2e, key, {"model": opus_46, "input": "x", "reasoning": {"effort": "xhigh"}})
    assert response.status_code == 200, response.text
    assert response.headers["x-ezat-reasoning-effort"] == "high"
    sent = upstream_records(e2e)[-1]["body"]
    assert sent["output_config"]["effort"] == "high"
    assert sent["thinking"] == {"type": "adaptive", "display": "omitted"}
