"""The Responses API on an OpenAI-kind model, and fallbacks across providers (issue 30, contract
items 5 and 8): translated to chat through the internal dialect, billed at the price of the model
that answered."""

from __future__ import annotations

import anthropic
import openai
import pytest
from openai.types.responses import Response

from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

CLAUDE = "anthropic/claude-sonnet-5-5"


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack)


def test_responses_on_a_gpt_model(lab: OpenAILab, e2e: Stack) -> None:
    client = openai.OpenAI(api_key=lab.key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    response = client.responses.create(model=lab.model, input="hello", max_output_tokens=200)
    Response.model_validate(response.model_dump())
    assert response.model == lab.model and response.output_text
    assert lab.chat_requests()[-1]["body"]["model"] == lab.server_model
    streamed = client.responses.create(
        model=lab.model, input="hello again", max_output_tokens=200, stream=True
    )
    kinds = [event.type for event in streamed]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


def test_a_claude_request_falls_back_to_a_gpt_model_billed_at_its_price(
    lab: OpenAILab, e2e: Stack
) -> None:
    # Claude's deployment is overloaded on every attempt: the chain moves on to the GPT model.
    e2e.sim.script(*({"path": "messages", "status": 529} for _ in range(6)))
    client = anthropic.Anthropic(
        api_key=lab.key.secret,
        base_url=e2e.url,
        max_retries=0,
        default_headers={"x-ezat-fallback-models": lab.model},
    )
    raw = client.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    e2e.sim.clear_script()
    assert raw.headers["x-ezat-model"] == lab.model
    message = raw.parse()
    assert message.content
    request_id = raw.headers["x-request-id"]
    rec = wait_for(lambda: records_by_request(e2e, [request_id]).get(request_id))
    assert rec.model_id == lab.model and rec.requested_model == CLAUDE


def test_a_gpt_request_falls_back_to_claude_on_the_chat_api(lab: OpenAILab, e2e: Stack) -> None:
    # A chain that mixes providers goes the translated way; the GPT model's 503s move it on.
    e2e.sim.script(*({"path": "chat_completions", "status": 503} for _ in range(6)))
    client = openai.OpenAI(
        api_key=lab.key.secret,
        base_url=e2e.url + "/openai/v1",
        max_retries=0,
        default_headers={"x-ezat-fallback-models": CLAUDE},
    )
    raw = client.chat.completions.with_raw_response.create(
        model=lab.model, messages=[{"role": "user", "content": "hi"}], max_tokens=100
    )
    e2e.sim.clear_script()
    assert raw.headers["x-ezat-model"] == CLAUDE
    assert raw.parse().choices[0].message.content
