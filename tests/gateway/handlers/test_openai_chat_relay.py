"""Chat Completions on an OpenAI-kind model is relayed (issue 30, contract item 3): the body
arrives as the client sent it with the model renamed, include_usage is always asked for and
billed from, a client gets the usage chunk only if it asked, and an error mid-stream is
`data: {"error": …}` then `data: [DONE]`, not billed. Driven with the official openai SDK and
validated against its types."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack)


@pytest.fixture
def client(lab: OpenAILab, e2e: Stack) -> openai.OpenAI:
    return openai.OpenAI(api_key=lab.key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)


def record(stack: Stack, request_id: str) -> Any:
    return wait_for(
        lambda: records_by_request(stack, [request_id]).get(request_id),
        what=f"the usage record of {request_id}",
    )


def test_fields_are_forwarded_and_the_model_renamed(lab: OpenAILab, client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=lab.model,
        messages=[{"role": "user", "content": "hello there"}],
        temperature=0.3,
        seed=7,
        stop=["###"],
        n=2,
        logprobs=True,
        response_format={"type": "json_object"},
        reasoning_effort="low",
        extra_body={"messages": [{"role": "user", "content": "answer in json"}]},
    )
    completion = raw.parse()
    ChatCompletion.model_validate(completion.model_dump())
    assert completion.model == lab.model
    assert len(completion.choices) == 2
    sent = lab.chat_requests()[-1]["body"]
    assert sent["model"] == lab.server_model
    for name, value in {
        "temperature": 0.3,
        "seed": 7,
        "stop": ["###"],
        "n": 2,
        "logprobs": True,
        "response_format": {"type": "json_object"},
        "reasoning_effort": "low",
    }.items():
        assert sent[name] == value, name
    assert "stream_options" not in sent  # not a stream
    assert sent["prompt_cache_key"].startswith("ezat-")  # derived from the session
    rec = record(lab.stack, raw.headers["x-request-id"])
    usage = completion.usage
    assert usage is not None
    cached = (usage.prompt_tokens_details.cached_tokens or 0) if usage.prompt_tokens_details else 0
    assert rec.input_tokens == usage.prompt_tokens - cached
    assert rec.cache_read_tokens == cached
    assert rec.output_tokens == usage.completion_tokens
    assert rec.model_id == lab.model and rec.api == "chat" and rec.cost_nano > 0


def test_a_client_prompt_cache_key_is_kept(lab: OpenAILab, client: openai.OpenAI) -> None:
    client.chat.completions.create(
        model=lab.model, messages=[{"role": "user", "content": "hi"}], prompt_cache_key="mine"
    )
    assert lab.chat_requests()[-1]["body"]["prompt_cache_key"] == "mine"


def test_ezats_own_models_list_is_not_sent_to_the_provider(
    lab: OpenAILab, client: openai.OpenAI
) -> None:
    """The body's `models` (EZAT's fallback list, docs/api.md) is the gateway's, not an OpenAI
    parameter: a strict provider (the simulator, as OpenAI) answers 400 to an unknown one."""
    completion = client.chat.completions.create(
        model=lab.model,
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"models": [lab.model]},
    )
    ChatCompletion.model_validate(completion.model_dump())
    sent = lab.chat_requests()[-1]["body"]
    assert "models" not in sent and sent["model"] == lab.server_model


@pytest.mark.parametrize("include_usage", [False, True])
def test_streams_bill_from_the_usage_chunk_the_client_may_not_see(
    lab: OpenAILab, client: openai.OpenAI, include_usage: bool
) -> None:
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    with client.chat.completions.with_streaming_response.create(
        model=lab.model,
        messages=[{"role": "user", "content": "tell me a story"}],
        stream=True,
        **extra,
    ) as response:
        request_id = response.headers["x-request-id"]
        chunks = [ChatCompletionChunk.model_validate(c.model_dump()) for c in response.parse()]
    sent = lab.chat_requests()[-1]["body"]
    assert sent["stream_options"] == {"include_usage": True}
    assert all(c.model == lab.model for c in chunks)
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == (1 if include_usage else 0)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    rec = record(lab.stack, request_id)
    assert rec.output_exact and rec.status == "ok" and rec.output_tokens > 0
    if include_usage:
        usage = usage_chunks[0].usage
        assert usage is not None
        assert rec.output_tokens == usage.completion_tokens
        assert rec.input_tokens + rec.cache_read_tokens == usage.prompt_tokens


def test_an_error_mid_stream_is_an_error_chunk_then_done_and_not_billed(
    lab: OpenAILab, e2e: Stack
) -> None:
    long = {"content": [{"type": "text", "text": "word " * 40}]}
    e2e.sim.script({"path": "chat_completions", "reply": long, "error_after_events": 3})
    with httpx.stream(
        "POST",
        e2e.url + "/openai/v1/chat/completions",
        headers={"authorization": f"Bearer {lab.key.secret}"},
        json={"model": lab.model, "messages": [{"role": "user", "content": "go"}], "stream": True},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        body = response.read().decode()
    events = [b for b in body.split("\n\n") if b.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert events[-2].startswith('data: {"error":'), events[-3:]
    # The request is logged, and no usage is billed for the failed generation.
    assert records_by_request(e2e, [request_id]) == {}


def test_the_providers_refusal_reaches_the_client(lab: OpenAILab, client: openai.OpenAI) -> None:
    # The simulator is as strict as OpenAI: an unknown field is the provider's 400, not EZAT's.
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=lab.model,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"no_such_field": 1},
        )
    assert "no_such_field" in str(raised.value)


def test_messages_must_be_there(lab: OpenAILab, client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=lab.model, messages=[])
    assert raised.value.body["param"] == "messages"  # type: ignore[index]
