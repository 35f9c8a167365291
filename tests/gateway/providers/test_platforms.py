"""Claude on Bedrock and Vertex through the gateway, seen with the official SDKs.

Each test gets a fresh platforms lab (one model; an Anthropic, a Bedrock and a Vertex deployment,
each on its own simulator front) and a session that prefers the deployment under test. The
simulator fronts verify what the platforms verify: SigV4 with the configured secret, OAuth2
tokens they issued, URL shapes, `anthropic_version`, no `model`/`stream` where refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from simulator.testing import SimulatorThread
from tests.support.platforms_lab import PlatformLab, make_platform_lab, platform_simulators
from tests.support.routing_lab import user
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with platform_simulators() as started:
        yield started


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread]) -> PlatformLab:
    return make_platform_lab(e2e, sims)


def only(lab: PlatformLab, label: str) -> str:
    """A session whose order is `label` first, then the lab's other deployments."""
    return lab.header_session(label)


def last_call(lab: PlatformLab, label: str) -> dict[str, Any]:
    calls = lab.requests(label)
    assert calls, f"{label} received nothing"
    return calls[-1]


def answered_by(lab: PlatformLab) -> list[str]:
    return [lab.label(r.deployment) for r in lab.usage()]


def test_bedrock_json_and_stream_with_the_anthropic_sdk(lab: PlatformLab) -> None:
    client = lab.anthropic(session=only(lab, "bedrock"))
    reply = client.messages.create(model=lab.model, max_tokens=64, messages=user("hello bedrock"))
    assert reply.model == lab.model and reply.content[0].type == "text"
    call = last_call(lab, "bedrock")
    upstream_id = f"anthropic.{lab.model.split('/', 1)[1]}"
    assert call["path"] == f"/model/{upstream_id}/invoke"
    assert call["body"]["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in call["body"] and "stream" not in call["body"]
    assert call["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIA")
    assert "/us-east-1/bedrock/aws4_request" in call["headers"]["authorization"]
    assert "x-api-key" not in call["headers"]

    with client.messages.stream(
        model=lab.model, max_tokens=64, messages=user("stream bedrock")
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0
    call = last_call(lab, "bedrock")
    assert call["path"] == f"/model/{upstream_id}/invoke-with-response-stream"
    assert call["headers"].get("x-amzn-bedrock-accept") == "application/json"
    assert answered_by(lab) == ["bedrock", "bedrock"]
    [json_record, stream_record] = lab.usage()
    assert stream_record.output_tokens == final.usage.output_tokens
    assert json_record.input_tokens == reply.usage.input_tokens


def test_vertex_json_and_stream_with_the_openai_sdk(lab: PlatformLab) -> None:
    client = lab.openai(session=only(lab, "vertex"))
    done = client.chat.completions.create(
        model=lab.model, max_tokens=64, messages=user("hello vertex")
    )
    assert done.choices[0].message.content
    call = last_call(lab, "vertex")
    bare = lab.model.split("/", 1)[1]
    prefix = "/v1/projects/ezat-lab-project/locations/us-east5/publishers/anthropic/models/"
    assert call["path"] == f"{prefix}{bare}:rawPredict"
    assert call["body"]["anthropic_version"] == "vertex-2023-10-16"
    assert "model" not in call["body"]
    assert call["headers"]["authorization"].startswith("Bearer ya29.sim-")

    chunks = list(
        client.chat.completions.create(
            model=lab.model,
            max_tokens=64,
            messages=user("stream vertex"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage is not None
    call = last_call(lab, "vertex")
    assert call["path"] == f"{prefix}{bare}:streamRawPredict"
    assert call["body"]["stream"] is True
    assert answered_by(lab) == ["vertex", "vertex"]
    # One token for both calls: fetched once, then read from the cache.
    assert lab.sims["vertex"].platform_state()["tokens_issued"] == 1


@pytest.mark.parametrize("label", ["bedrock", "vertex"])
def test_count_tokens_on_each_platform(lab: PlatformLab, label: str) -> None:
    client = lab.anthropic(session=only(lab, label))
    counted = client.messages.count_tokens(model=lab.model, messages=user("count these tokens"))
    reference = lab.anthropic(session=only(lab, "anthropic")).messages.count_tokens(
        model=lab.model, messages=user("count these tokens")
    )
    assert counted.input_tokens == reference.input_tokens > 0
    call = last_call(lab, label)
    if label == "bedrock":
        assert call["path"].endswith("/count-tokens")
        assert "invokeModel" in call["body"]["input"]
    else:
        assert call["path"].endswith("/models/count-tokens:rawPredict")
        assert call["body"]["model"] == lab.model.split("/", 1)[1]


def test_the_same_request_is_billed_identically_on_all_three(lab: PlatformLab) -> None:
    costs = {}
    for label in ("anthropic", "bedrock", "vertex"):
        reply = lab.anthropic(session=only(lab, label)).messages.create(
            model=lab.model,
            max_tokens=64,
            system="You are billed the same everywhere.",
            messages=user("same request on every platform"),
        )
        assert reply.content[0].type == "text"
        record = lab.usage()[-1]
        assert lab.label(record.deployment) == label
        costs[label] = (
            record.input_tokens,
            record.output_tokens,
            record.cache_read_tokens,
            record.cost_nano,
        )
    assert costs["anthropic"] == costs["bedrock"] == costs["vertex"]
    assert costs["anthropic"][-1] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_bedrock_throttle_fails_over_to_vertex(lab: PlatformLab, stream: bool) -> None:
    session = lab.header_session("bedrock", "vertex")
    if stream:
        # Throttled inside the HTTP 200, as an exception frame before the first token.
        lab.sims["bedrock"].script({"error_after_events": 0, "type": "rate_limit_error"})
    else:
        lab.sims["bedrock"].script({"status": 429, "type": "rate_limit_error"})
    client = lab.anthropic(session=session)
    if stream:
        with client.messages.stream(
            model=lab.model, max_tokens=64, messages=user("throttled")
        ) as events:
            text = "".join(events.text_stream)
    else:
        reply = client.messages.create(model=lab.model, max_tokens=64, messages=user("throttled"))
        text = reply.content[0].text  # type: ignore[union-attr]
    assert text
    [record] = lab.usage()
    outcomes = [(lab.label(a["deployment"]), a["outcome"], a["status"]) for a in record.attempts]
    first = ("bedrock", "error_event", 429) if stream else ("bedrock", "http_429", 429)
    assert outcomes == [first, ("vertex", "ok", 200)]
    assert lab.label(record.deployment) == "vertex"


def test_a_broken_crc_before_the_first_token_fails_over(lab: PlatformLab) -> None:
    lab.sims["bedrock"].script({"bad_crc_after_events": 0})
    with lab.anthropic(session=lab.header_session("bedrock", "vertex")).messages.stream(
        model=lab.model, max_tokens=64, messages=user("bad frame")
    ) as events:
        assert "".join(events.text_stream)
    [record] = lab.usage()
    assert [(lab.label(a["deployment"]), a["outcome"]) for a in record.attempts] == [
        ("bedrock", "dropped"),
        ("vertex", "ok"),
    ]


def test_a_broken_crc_after_the_first_token_ends_the_stream_with_an_error(
    lab: PlatformLab,
) -> None:
    # Paced, so the broken frame arrives in a read of its own, after the first token went out.
    lab.sims["bedrock"].script({"bad_crc_after_events": 4, "event_delay": 0.05})
    client = lab.anthropic(session=only(lab, "bedrock"))
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        client.messages.stream(
            model=lab.model, max_tokens=64, messages=user("bad frame later")
        ) as events,
    ):
        for _ in events.text_stream:
            pass
    assert "the provider stream failed" in str(raised.value)
    # Nothing retried after the first token: the one attempt, on Bedrock.
    assert [r["path"].rsplit("/", 1)[-1] for r in lab.requests("bedrock")] == [
        "invoke-with-response-stream"
    ]
    assert lab.received("vertex", "bad frame later") == 0


def test_a_bad_signature_is_refused_and_fails_over(lab: PlatformLab) -> None:
    from catalog.models import Deployment

    with lab.stack.blocker.unblock():
        dep = Deployment.objects.get(name=lab.name("bedrock"))
        dep.set_secrets(
            {"aws_access_key_id": "AKIAEZATSIMULATOR001", "aws_secret_access_key": "wrong" * 8}
        )
        dep.save()
    # The gateway picks the change up with its next catalog poll.
    import time

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        reply = lab.openai(session=lab.header_session("bedrock", "vertex")).chat.completions.create(
            model=lab.model, max_tokens=16, messages=user("signed wrong")
        )
        assert reply.choices[0].message.content
        record = lab.usage()[-1]
        if record.attempts[0]["outcome"] == "http_403":
            break
    else:
        raise AssertionError("the gateway never sent the wrongly signed request")
    assert lab.label(record.deployment) == "vertex"
    refused = [r for r in lab.requests("bedrock") if r["status"] == "403"]
    assert refused


# -- signed thinking stays on the platform that signed it ------------------------------------

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def thinking_turn(client: anthropic.Anthropic, lab: PlatformLab, messages: list[Any]) -> Any:
    return client.messages.create(
        model=lab.model,
        max_tokens=2000,
        thinking={"type": "adaptive"},
        tools=[WEATHER],  # type: ignore[list-item]
        messages=messages,
    )


@pytest.mark.parametrize(
    ("signer", "preferred"),
    [
        ("anthropic", "bedrock"),
        ("bedrock", "anthropic"),
        ("bedrock", "vertex"),
        ("vertex", "bedrock"),
        ("vertex", "anthropic"),
        ("anthropic", "vertex"),
    ],
)
def test_a_tool_loop_with_signed_thinking_stays_on_its_platform(
    lab: PlatformLab, signer: str, preferred: str
) -> None:
    """Turn 1 is answered on `signer`; turn 2 comes with a session that prefers another platform
    (`preferred`) and must still go to `signer`, whose signature the others refuse."""
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    first = thinking_turn(lab.anthropic(session=lab.header_session(signer)), lab, messages)
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    call = first.content[1]
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "9°C"}],
        },
    ]
    with lab.anthropic(session=lab.header_session(preferred)).messages.stream(
        model=lab.model,
        max_tokens=2000,
        thinking={"type": "adaptive"},
        tools=[WEATHER],  # type: ignore[list-item]
        messages=messages,
    ) as events:
        second = events.get_final_message()
    assert second.content[-1].type == "text" and "9°C" in second.content[-1].text
    assert [lab.label(r.deployment) for r in lab.usage()] == [signer, signer]
    assert lab.received(preferred, "9°C") == 0


def test_signed_thinking_is_not_sent_elsewhere_when_its_platform_cannot_answer(
    lab: PlatformLab,
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    first = thinking_turn(lab.anthropic(session=lab.header_session("bedrock")), lab, messages)
    call = first.content[1]
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    lab.sims["bedrock"].script({"status": 529, "type": "overloaded_error", "times": -1})
    client = lab.anthropic(session=lab.header_session("bedrock", "vertex"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        thinking_turn(client, lab, messages)
    assert raised.value.status_code == 503
    message = str(raised.value)
    assert "signed on bedrock" in message and "no other platform accepts" in message
    for other in ("vertex", "anthropic"):
        assert lab.received(other, "sunny") == 0


def test_a_chat_tool_loop_with_thinking_on_bedrock(lab: PlatformLab) -> None:
    client = lab.openai(session=only(lab, "bedrock"))
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": WEATHER["input_schema"],
        },
    }
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    with client.chat.completions.stream(
        model=lab.model,
        max_completion_tokens=2000,
        messages=messages,
        tools=[tool],  # type: ignore[list-item]
        reasoning_effort="medium",
    ) as events:
        first = events.get_final_completion()
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "9°C and clear"},
    ]
    second = client.chat.completions.create(
        model=lab.model,
        max_completion_tokens=2000,
        messages=messages,
        tools=[tool],  # type: ignore[list-item]
        reasoning_effort="medium",
    )
    assert second.choices[0].message.content == "Tool said: 9°C and clear"
    body = last_call(lab, "bedrock")["body"]
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "tool_use"]
    assert [lab.label(r.deployment) for r in lab.usage()] == ["bedrock", "bedrock"]


@pytest.mark.parametrize("label", ["bedrock", "vertex"])
def test_the_responses_api_on_each_platform(lab: PlatformLab, label: str) -> None:
    client = lab.openai(session=only(lab, label))
    done = client.responses.create(model=lab.model, input="hello responses", store=False)
    assert done.output_text and done.usage is not None and done.usage.output_tokens > 0
    with client.responses.stream(model=lab.model, input="stream responses", store=False) as events:
        final = events.get_final_response()
    assert final.output_text
    assert [lab.label(r.deployment) for r in lab.usage()] == [label, label]
