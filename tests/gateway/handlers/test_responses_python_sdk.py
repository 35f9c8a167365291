"""The Responses API through the official openai Python SDK (`responses.create`,
`responses.stream`, `responses.parse`): plain, stream, tool loop with reasoning, structured
output, wrong key and unknown model; what the client gets and what the simulator received."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel

from tests.support.chat_support import error_of, upstream, upstream_records
from tests.support.responses_support import SONNET, WEATHER_TOOL
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e


def client(e2e: Stack, key: Key | str) -> OpenAI:
    secret = key if isinstance(key, str) else key.secret
    return OpenAI(base_url=e2e.url + "/openai/v1", api_key=secret, max_retries=0)


def test_create_plain(e2e: Stack) -> None:
    key = e2e.new_key()
    raw = client(e2e, key).responses.with_raw_response.create(
        model=SONNET, input="Say hello", instructions="Be brief.", max_output_tokens=200
    )
    response = raw.parse()
    request_id = raw.headers["x-request-id"]
    assert raw.headers["request-id"] == request_id
    assert response.id == "resp_" + request_id
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == SONNET
    assert response.output_text == "Simulated reply to: Say hello"
    [message] = response.output
    assert message.type == "message" and message.content[0].annotations == []
    sent = upstream(e2e)
    assert sent["system"][0]["text"] == "Be brief."
    assert sent["max_tokens"] == 200
    usage = response.usage
    assert usage is not None
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    [record] = e2e.usage(request_id=request_id)
    assert record.api == "responses"
    assert (record.input_tokens + record.cache_read_tokens + record.cache_write_5m_tokens) == (
        usage.input_tokens
    )
    assert record.output_tokens == usage.output_tokens


def test_stream_helper_gets_the_final_response(e2e: Stack) -> None:
    key = e2e.new_key()
    deltas: list[str] = []
    with client(e2e, key).responses.stream(model=SONNET, input="Tell me a long answer") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert len(deltas) > 3
    assert "".join(deltas) == final.output_text
    assert final.output_text.startswith("Simulated long reply to: Tell me a long answer")
    assert final.status == "completed" and final.usage is not None
    [record] = e2e.usage(org_id=key.org_id)
    assert record.stream and record.output_tokens == final.usage.output_tokens
    # store defaults to true: the streamed response was stored before response.completed went out.
    stored = client(e2e, key).responses.retrieve(final.id)
    assert stored.output_text == final.output_text and stored.status == "completed"


def test_tool_loop_with_reasoning_is_stateless(e2e: Stack) -> None:
    """store: false + include encrypted_content: the thinking block travels with the client."""
    key = e2e.new_key()
    oai = client(e2e, key)
    common: dict[str, Any] = {
        "model": SONNET,
        "tools": [WEATHER_TOOL],
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
    }
    first = oai.responses.create(input="Weather in Oslo?", **common)
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "function_call"]
    reasoning, call = first.output
    assert reasoning.encrypted_content and reasoning.summary[0].text.startswith("Thinking about")
    assert json.loads(call.arguments) == {"city": "Oslo"}
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "9°C"})
    second = oai.responses.create(input=items, **common)
    assert second.output_text == "Tool said: 9°C"
    sent = upstream(e2e)
    assistant = sent["messages"][1]
    # The exact signed block came back first in the assistant turn (the simulator checks it).
    assert assistant["content"][0]["type"] == "thinking"
    assert assistant["content"][0]["signature"]
    assert sent["thinking"]["type"] == "adaptive"


def test_parse_with_pydantic(e2e: Stack) -> None:
    class City(BaseModel):
        city: str
        population: int

    key = e2e.new_key()
    parsed = client(e2e, key).responses.parse(
        model=SONNET, input="Largest city in Norway?", text_format=City
    )
    assert isinstance(parsed.output_parsed, City)
    fmt = upstream(e2e)["output_config"]["format"]
    assert fmt["type"] == "json_schema" and fmt["schema"]["additionalProperties"] is False


def test_wrong_key_is_401_and_unknown_model_404(e2e: Stack) -> None:
    with pytest.raises(openai.AuthenticationError) as raised:
        client(e2e, "ezat_sk_wrong").responses.create(model=SONNET, input="x")
    assert error_of(raised.value)["code"] == "invalid_api_key"
    key = e2e.new_key()
    with pytest.raises(openai.NotFoundError) as missing:
        client(e2e, key).responses.create(model="gpt-9", input="x")
    assert error_of(missing.value)["code"] == "model_not_found"
    assert upstream_records(e2e) == []
