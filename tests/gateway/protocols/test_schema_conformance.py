"""Answers checked against the official SDKs' pydantic types, not against EZAT's expectations
(issue 32, item 2): a Responses failure carries a code of the schema's enum, every chunk of an
`include_usage` chat stream carries `"usage": null` until the usage chunk, and the Anthropic
model object carries `capabilities`."""

from __future__ import annotations

from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest
from pydantic import TypeAdapter

from catalog.pricing import Prices, PriceSchedule
from catalog.snapshot import ModelInfo
from gateway.handlers.models import anthropic_model
from gateway.protocols.openai_responses.outbound import error_code
from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import Rendering

from .openai_stream_helpers import (
    block_start,
    message_delta,
    parse_sse,
    start,
    stop,
    text_delta,
    translator,
)
from .test_responses_translators import parse

EVENT = TypeAdapter(openai.types.responses.ResponseStreamEvent)


def _responses(echo: dict[str, Any] | None = None) -> ResponsesStreamTranslator:
    return ResponsesStreamTranslator(
        Rendering(
            request_id="r",
            model_name="m",
            created_at=1,
            echo=echo or {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
            seal=None,
            summary=False,
            include_encrypted=False,
        )
    )


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (503, "overloaded", "server_error"),  # what issue 32 saw
        (504, "timeout", "server_error"),
        (502, None, "server_error"),
        (429, "rate_limit_exceeded", "rate_limit_exceeded"),
        (429, None, "rate_limit_exceeded"),
        (400, "invalid_image_url", "invalid_image_url"),
        (402, "insufficient_quota", "server_error"),
    ],
)
def test_a_stream_failure_carries_a_code_of_the_schema_enum(
    status: int, code: str | None, expected: str
) -> None:
    assert error_code(status, code) == expected
    events = parse(_responses().failure("went away", code, status))
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    for event in events:
        EVENT.validate_python(event)  # ResponseError.code is a Literal: "overloaded" fails
    failed = openai.types.responses.ResponseFailedEvent.model_validate(events[-1])
    assert failed.response.error is not None and failed.response.error.code == expected
    assert events[-2]["code"] == expected


def test_the_old_overloaded_code_is_what_the_sdk_type_rejects() -> None:
    """The check above would catch the bug: the schema refuses the code sent before."""
    events = parse(_responses().failure("x", "server_error", 503))
    events[-1]["response"]["error"]["code"] = "overloaded"
    with pytest.raises(ValueError, match="code"):
        openai.types.responses.ResponseFailedEvent.model_validate(events[-1])


UPSTREAM = [
    start(),
    block_start(0, {"type": "text", "text": ""}),
    text_delta(0, "Hel"),
    text_delta(0, "lo"),
    stop(0),
    message_delta("end_turn"),
    {"type": "message_stop"},
]


def test_every_include_usage_chunk_carries_usage_null_until_the_usage_chunk() -> None:
    t = translator(include_usage=True)
    chunks = parse_sse(b"".join(t.feed(e) for e in UPSTREAM) + t.usage_chunk())
    *content, last = chunks
    assert len(content) >= 3
    for chunk in content:
        assert "usage" in chunk and chunk["usage"] is None, chunk
        openai.types.chat.ChatCompletionChunk.model_validate(chunk)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 5
    openai.types.chat.ChatCompletionChunk.model_validate(last)


def test_without_include_usage_chunks_have_no_usage_key() -> None:
    t = translator(include_usage=False)
    chunks = parse_sse(b"".join(t.feed(e) for e in UPSTREAM) + t.usage_chunk())
    assert chunks and all("usage" not in c for c in chunks)


def _model(**changes: Any) -> ModelInfo:
    fields: dict[str, Any] = {
        "id": "anthropic/claude-x",
        "name": "Claude X",
        "aliases": (),
        "sampling": False,
        "prompt_caching": True,
        "vision": True,
        "pdf": False,
        "tools": True,
        "structured_outputs": True,
        "reasoning_efforts": ("low", "medium", "high", "xhigh", "max"),
        "max_output_tokens": 64_000,
        "context_window": 1_000_000,
        "pricing": PriceSchedule.flat(Prices(1, 1, 1, 1, 1)),
        "routes": (),
        "created_at": "2026-01-01T00:00:00Z",
        "thinking": "adaptive",
        "thinking_can_be_disabled": False,
    }
    fields.update(changes)
    return ModelInfo(**fields)


def test_the_anthropic_model_object_carries_capabilities_of_the_sdk_shape() -> None:
    info = anthropic.types.ModelInfo.model_validate(anthropic_model(_model()))
    caps = info.capabilities
    assert caps is not None  # optional in the Python SDK, always present in TypeScript's
    # model_validate ignores missing nested keys only where they are Optional: every required
    # key of ModelCapabilities and its parts is there.
    assert caps.image_input.supported and not caps.pdf_input.supported
    assert caps.effort.supported and caps.effort.max.supported
    assert caps.effort.xhigh is not None and caps.effort.xhigh.supported
    assert caps.thinking.types.adaptive.supported and not caps.thinking.types.enabled.supported
    assert not caps.thinking.types.disabled.supported
    assert not caps.server_tools.web_search.supported  # EZAT has no web search price
    assert not caps.batch.supported
    plain = anthropic.types.ModelInfo.model_validate(
        anthropic_model(_model(reasoning_efforts=(), thinking="none", vision=False))
    )
    assert plain.capabilities is not None
    assert not plain.capabilities.effort.supported and not plain.capabilities.thinking.supported
    assert plain.capabilities.thinking.types.disabled.supported
