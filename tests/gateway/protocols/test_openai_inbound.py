"""Chat request -> Messages request: message and content validation (table-driven).

Mapping of valid messages: test_openai_inbound_messages.py; other fields:
test_openai_inbound_params.py; json_schema checks: test_openai_inbound_schema.py; caching,
thinking with tools, properties: test_openai_inbound_extra.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from gateway.protocols.openai.inbound import ModelCaps
from gateway.protocols.openai.types import EFFORT_LEVELS

from .openai_helpers import CALL, CAPS, PDF, PNG, USER, assert_invalid, chat, deep, user

ASKS_1 = {"role": "assistant", "content": None, "tool_calls": [CALL]}


def answer(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


# (id, request, caps or None, expected param, message fragment)
ERRORS: list[tuple[str, Any, ModelCaps | None, str | None, str]] = [
    ("body-not-object", [], None, None, "JSON object"),
    ("messages-missing", {"model": "m"}, None, "messages", "non-empty array"),
    ("messages-empty", chat(messages=[]), None, "messages", "non-empty array"),
    ("messages-string", chat(messages="hi"), None, "messages", "non-empty array"),
    ("message-not-object", chat(messages=[1]), None, "messages[0]", "must be an object"),
    ("role-missing", chat(messages=[{"content": "x"}]), None, "messages[0].role", "one of"),
    (
        "role-unknown",
        chat(messages=[{"role": "bot", "content": "x"}]),
        None,
        "messages[0].role",
        "one of",
    ),
    (
        "role-function",
        chat(messages=[{"role": "function", "name": "f", "content": "x"}]),
        None,
        "messages[0].role",
        "legacy",
    ),
    (
        "only-system",
        chat(messages=[{"role": "system", "content": "x"}]),
        None,
        "messages",
        "messages: must contain at least one user message",
    ),
    (
        "only-system-and-developer",
        chat(messages=[{"role": "system", "content": "x"}, {"role": "developer", "content": "y"}]),
        None,
        "messages",
        "at least one user message",
    ),
    (
        "only-empty-assistant",
        chat(messages=[{"role": "assistant", "content": None}]),
        None,
        "messages",
        "at least one user message",
    ),
    (
        "user-content-null",
        chat(messages=[{"role": "user", "content": None}]),
        None,
        "messages[0].content",
        "string or an array",
    ),
    (
        "user-content-number",
        chat(messages=[{"role": "user", "content": 5}]),
        None,
        "messages[0].content",
        "string or an array",
    ),
    (
        "user-content-empty-string",
        chat(messages=[{"role": "user", "content": ""}]),
        None,
        "messages[0].content",
        "empty",
    ),
    ("user-content-empty-list", chat(messages=[user()]), None, "messages[0].content", "empty"),
    ("part-not-object", chat(messages=[user("x")]), None, "messages[0].content[0]", "object"),
    (
        "part-type-missing",
        chat(messages=[user({"text": "x"})]),
        None,
        "messages[0].content[0].type",
        "unknown",
    ),
    (
        "part-type-unknown",
        chat(messages=[user({"type": "text", "text": "a"}, {"type": "video"})]),
        None,
        "messages[0].content[1].type",
        "unknown",
    ),
    (
        "text-not-string",
        chat(messages=[user({"type": "text", "text": 3})]),
        None,
        "messages[0].content[0].text",
        "string",
    ),
    (
        "refusal-in-user",
        chat(messages=[user({"type": "refusal", "refusal": "no"})]),
        None,
        "messages[0].content[0].type",
        "not allowed in user",
    ),
    (
        "input-audio",
        chat(
            messages=[user({"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}})]
        ),
        None,
        "messages[0].content[0].type",
        "audio",
    ),
    (
        "image-in-assistant",
        chat(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [{"type": "image_url", "image_url": {"url": PNG}}],
                },
            ]
        ),
        None,
        "messages[1].content[0].type",
        "not allowed in assistant",
    ),
    (
        "image-in-system",
        chat(
            messages=[
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": PNG}}]},
                USER,
            ]
        ),
        None,
        "messages[0].content[0].type",
        "not allowed in system",
    ),
    (
        "image-bmp",
        chat(
            messages=[
                user({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}})
            ]
        ),
        None,
        "messages[0].content[0].image_url.url",
        "image/jpeg, image/png",
    ),
    (
        "image-jpg-alias",
        chat(
            messages=[
                user({"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j="}})
            ]
        ),
        None,
        "messages[0].content[0].image_url.url",
        "unsupported image type",
    ),
    (
        "image-not-base64",
        chat(messages=[user({"type": "image_url", "image_url": {"url": "data:image/png,abc"}})]),
        None,
        "messages[0].content[0].image_url.url",
        "base64",
    ),
    (
        "image-no-comma",
        chat(messages=[user({"type": "image_url", "image_url": {"url": "data:image/png;base64"}})]),
        None,
        "messages[0].content[0].image_url.url",
        "malformed",
    ),
    (
        "image-empty-data",
        chat(
            messages=[user({"type": "image_url", "image_url": {"url": "data:image/png;base64,"}})]
        ),
        None,
        "messages[0].content[0].image_url.url",
        "empty",
    ),
    (
        "image-ftp",
        chat(
            messages=[
                user(
                    {"type": "text", "text": "a"},
                    {"type": "image_url", "image_url": {"url": "ftp://x/y.png"}},
                )
            ]
        ),
        None,
        "messages[0].content[1].image_url.url",
        "http(s)",
    ),
    (
        "image-url-not-string",
        chat(messages=[user({"type": "image_url", "image_url": {"url": 5}})]),
        None,
        "messages[0].content[0].image_url.url",
        "string",
    ),
    (
        "image-url-missing",
        chat(messages=[user({"type": "image_url"})]),
        None,
        "messages[0].content[0].image_url",
        "string",
    ),
    (
        "image-without-vision",
        chat(messages=[user({"type": "image_url", "image_url": {"url": PNG}})]),
        replace(CAPS, vision=False),
        "messages[0].content[0]",
        "does not accept images",
    ),
    (
        "file-id",
        chat(messages=[user({"type": "file", "file": {"file_id": "file-abc"}})]),
        None,
        "messages[0].content[0].file.file_id",
        "no Files API",
    ),
    (
        "file-not-pdf",
        chat(
            messages=[user({"type": "file", "file": {"file_data": "data:text/plain;base64,aGk="}})]
        ),
        None,
        "messages[0].content[0].file.file_data",
        "PDF",
    ),
    (
        "file-raw-base64",
        chat(messages=[user({"type": "file", "file": {"file_data": "JVBERi0="}})]),
        None,
        "messages[0].content[0].file.file_data",
        "data URL",
    ),
    (
        "file-data-missing",
        chat(messages=[user({"type": "file", "file": {"filename": "a.pdf"}})]),
        None,
        "messages[0].content[0].file.file_data",
        "data URL",
    ),
    (
        "file-not-object",
        chat(messages=[user({"type": "file", "file": "x"})]),
        None,
        "messages[0].content[0].file",
        "object",
    ),
    (
        "file-without-pdf-cap",
        chat(messages=[user({"type": "file", "file": {"file_data": PDF}})]),
        replace(CAPS, pdf=False),
        "messages[0].content[0]",
        "PDF",
    ),
    (
        "tool-call-id-missing",
        chat(messages=[USER, {"role": "tool", "content": "x"}]),
        None,
        "messages[1].tool_call_id",
        "required",
    ),
    (
        "tool-content-number",
        chat(messages=[USER, {"role": "tool", "tool_call_id": "c", "content": 5}]),
        None,
        "messages[1].content",
        "text parts",
    ),
    (
        "tool-content-image",
        chat(
            messages=[
                USER,
                {
                    "role": "tool",
                    "tool_call_id": "c",
                    "content": [{"type": "image_url", "image_url": {"url": PNG}}],
                },
            ]
        ),
        None,
        "messages[1].content[0].type",
        "not allowed in tool",
    ),
    (
        "arguments-invalid-json",
        chat(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        CALL,
                        {**CALL, "id": "c2", "function": {"name": "f", "arguments": "{oops"}},
                    ],
                },
            ]
        ),
        None,
        "messages[1].tool_calls[1].function.arguments",
        "not valid JSON",
    ),
    (
        "arguments-json-array",
        chat(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}],
                },
            ]
        ),
        None,
        "messages[1].tool_calls[0].function.arguments",
        "JSON object",
    ),
    (
        "arguments-not-string",
        chat(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"a": 1}}}],
                },
            ]
        ),
        None,
        "messages[1].tool_calls[0].function.arguments",
        "string",
    ),
    (
        "arguments-too-deep",
        chat(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            **CALL,
                            "function": {
                                "name": "f",
                                "arguments": orjson.dumps(deep(150)).decode(),
                            },
                        }
                    ],
                },
            ]
        ),
        None,
        "messages[1].tool_calls[0].function.arguments",
        "deep",
    ),
    (
        "tool-calls-not-list",
        chat(messages=[USER, {"role": "assistant", "tool_calls": CALL}]),
        None,
        "messages[1].tool_calls",
        "array",
    ),
    (
        "tool-call-not-object",
        chat(messages=[USER, {"role": "assistant", "tool_calls": ["x"]}]),
        None,
        "messages[1].tool_calls[0]",
        "object",
    ),
    (
        "tool-call-id-missing-assistant",
        chat(messages=[USER, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]),
        None,
        "messages[1].tool_calls[0].id",
        "non-empty",
    ),
    (
        "tool-call-type-custom",
        chat(messages=[USER, {"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}]),
        None,
        "messages[1].tool_calls[0].type",
        "function",
    ),
    (
        "tool-call-function-missing",
        chat(messages=[USER, {"role": "assistant", "tool_calls": [{"id": "c"}]}]),
        None,
        "messages[1].tool_calls[0].function",
        "object",
    ),
    (
        "tool-call-name-missing",
        chat(
            messages=[
                USER,
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
            ]
        ),
        None,
        "messages[1].tool_calls[0].function.name",
        "non-empty",
    ),
    (
        "assistant-function-call",
        chat(
            messages=[
                USER,
                {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            ]
        ),
        None,
        "messages[1].function_call",
        "legacy",
    ),
    (
        "assistant-refusal-number",
        chat(messages=[USER, {"role": "assistant", "refusal": 1}]),
        None,
        "messages[1].refusal",
        "string",
    ),
    (
        "system-content-number",
        chat(messages=[{"role": "system", "content": 5}, USER]),
        None,
        "messages[0].content",
        "text parts",
    ),
    (
        "cache-control-string",
        chat(messages=[user({"type": "text", "text": "a", "cache_control": "yes"})]),
        None,
        "messages[0].content[0].cache_control",
        "ephemeral",
    ),
    (
        "cache-control-ttl-number",
        chat(
            messages=[
                user(
                    {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": 5}}
                )
            ]
        ),
        None,
        "messages[0].content[0].cache_control.ttl",
        "string",
    ),
    # Tool calls and tool messages must pair up (Anthropic would refuse with merged indexes).
    (
        "tool-result-without-any-call",
        chat(messages=[USER, {"role": "tool", "tool_call_id": "c9", "content": "x"}]),
        None,
        "messages[1].tool_call_id",
        "does not match a tool call",
    ),
    (
        "tool-result-unknown-id",
        chat(messages=[USER, ASKS_1, answer("call_1"), answer("zzz")]),
        None,
        "messages[3].tool_call_id",
        "'zzz' does not match",
    ),
    (
        "tool-result-after-text-only-assistant",
        chat(messages=[USER, {"role": "assistant", "content": "hm"}, answer("call_1")]),
        None,
        "messages[2].tool_call_id",
        "does not match",
    ),
    (
        "tool-call-unanswered",
        chat(
            messages=[
                USER,
                {"role": "assistant", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
                answer("call_1"),
                {"role": "user", "content": "next"},
            ]
        ),
        None,
        "messages[1].tool_calls[1].id",
        "'call_2' has no tool message",
    ),
    (
        "tool-call-followed-by-user-text",
        chat(messages=[USER, ASKS_1, {"role": "user", "content": "never mind"}]),
        None,
        "messages[1].tool_calls[0].id",
        "no tool message",
    ),
    (
        "empty-text-part-cache-control-still-validated",
        chat(
            messages=[
                user(
                    {"type": "text", "text": "", "cache_control": 1}, {"type": "text", "text": "a"}
                )
            ]
        ),
        None,
        "messages[0].content[0].cache_control",
        "ephemeral",
    ),
]


@pytest.mark.parametrize(
    ("request_body", "caps", "param", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in ERRORS],
)
def test_invalid_messages_name_the_field(
    request_body: Any, caps: ModelCaps | None, param: str | None, fragment: str
) -> None:
    assert_invalid(request_body, caps or CAPS, param, fragment)


def test_effort_levels_constant() -> None:
    assert EFFORT_LEVELS == ("none", "minimal", "low", "medium", "high", "xhigh", "max")
