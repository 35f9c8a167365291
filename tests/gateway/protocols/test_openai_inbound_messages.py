"""Chat request -> Messages request: mapping of valid messages and content parts."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocols.openai.inbound import translate_request

from .openai_helpers import CALL, CAPS, PDF, PNG, USER, chat, text, translate, user

# (id, messages, expected system or None, expected Anthropic messages)
MESSAGES: list[tuple[str, list[Any], list[Any] | None, list[Any]]] = [
    ("user-string", [USER], None, [{"role": "user", "content": [text("hi")]}]),
    (
        "user-parts",
        [user(text("a"), text("b"))],
        None,
        [{"role": "user", "content": [text("a"), text("b")]}],
    ),
    (
        "empty-text-parts-dropped",
        [user(text(""), text("b"))],
        None,
        [{"role": "user", "content": [text("b")]}],
    ),
    (
        "user-name-ignored",
        [{"role": "user", "name": "bob", "content": "hi"}],
        None,
        [{"role": "user", "content": [text("hi")]}],
    ),
    (
        "system-string",
        [{"role": "system", "content": "Be brief."}, USER],
        [text("Be brief.")],
        [{"role": "user", "content": [text("hi")]}],
    ),
    (
        "developer-is-system",
        [{"role": "developer", "content": "Dev."}, USER],
        [text("Dev.")],
        [{"role": "user", "content": [text("hi")]}],
    ),
    (
        "system-parts-and-hoisting",
        [
            {"role": "system", "content": [text("A"), text("")]},
            USER,
            {"role": "developer", "content": "B"},
        ],
        [text("A"), text("B")],
        [{"role": "user", "content": [text("hi")]}],
    ),
    (
        "empty-system-skipped",
        [{"role": "system", "content": ""}, USER],
        None,
        [{"role": "user", "content": [text("hi")]}],
    ),
    (
        "consecutive-users-merged",
        [USER, {"role": "user", "content": "again"}],
        None,
        [{"role": "user", "content": [text("hi"), text("again")]}],
    ),
    (
        "system-between-users-merges-them",
        [USER, {"role": "system", "content": "S"}, {"role": "user", "content": "x"}],
        [text("S")],
        [{"role": "user", "content": [text("hi"), text("x")]}],
    ),
    (
        "assistant-text",
        [USER, {"role": "assistant", "content": "yo"}],
        None,
        [{"role": "user", "content": [text("hi")]}, {"role": "assistant", "content": [text("yo")]}],
    ),
    (
        "assistant-refusal-part",
        [USER, {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
        None,
        [{"role": "user", "content": [text("hi")]}, {"role": "assistant", "content": [text("no")]}],
    ),
    (
        "assistant-refusal-field",
        [USER, {"role": "assistant", "content": None, "refusal": "I can't."}],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {"role": "assistant", "content": [text("I can't.")]},
        ],
    ),
    (
        "assistant-sdk-nulls",
        [
            USER,
            {
                "role": "assistant",
                "content": "a",
                "refusal": None,
                "function_call": None,
                "audio": None,
                "tool_calls": None,
                "annotations": [],
            },
        ],
        None,
        [{"role": "user", "content": [text("hi")]}, {"role": "assistant", "content": [text("a")]}],
    ),
    (
        "empty-assistant-skipped",
        [USER, {"role": "assistant", "content": ""}, {"role": "user", "content": "x"}],
        None,
        [{"role": "user", "content": [text("hi"), text("x")]}],
    ),
    (
        "consecutive-assistants-merged",
        [USER, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {"role": "assistant", "content": [text("a"), text("b")]},
        ],
    ),
    (
        "tool-calls-after-text",
        [
            USER,
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"city": "Oslo"}'},
                    },
                    {"id": "c2", "function": {"name": "g", "arguments": ""}},
                    {"id": "c3", "type": "function", "function": {"name": "h", "arguments": " \n"}},
                    {"id": "c4", "type": "function", "function": {"name": "k"}},
                ],
            },
        ],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {
                "role": "assistant",
                "content": [
                    text("Let me look."),
                    {"type": "tool_use", "id": "c1", "name": "f", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
                    {"type": "tool_use", "id": "c3", "name": "h", "input": {}},
                    {"type": "tool_use", "id": "c4", "name": "k", "input": {}},
                ],
            },
        ],
    ),
    (
        "tool-results-merged-into-one-user-turn",
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "9°C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [text("a"), text("b")]},
        ],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_1", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "call_2", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "9°C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": [text("a"), text("b")],
                    },
                ],
            },
        ],
    ),
    (
        "system-between-call-and-result-is-hoisted",
        [
            USER,
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "system", "content": "S"},
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ],
        [text("S")],
        [
            {"role": "user", "content": [text("hi")]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "ok"}],
            },
        ],
    ),
    (
        "trailing-assistant-tool-call-is-a-prefill",
        [USER, {"role": "assistant", "tool_calls": [CALL]}],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}],
            },
        ],
    ),
    (
        "tool-results-come-before-user-text",
        [
            USER,
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "user", "content": "and also"},
            {"role": "tool", "tool_call_id": "call_1", "content": ""},
        ],
        None,
        [
            {"role": "user", "content": [text("hi")]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1"}, text("and also")],
            },
        ],
    ),
]


@pytest.mark.parametrize(
    ("messages", "system", "expected"), [pytest.param(*c[1:], id=c[0]) for c in MESSAGES]
)
def test_messages(messages: list[Any], system: list[Any] | None, expected: list[Any]) -> None:
    body = translate(messages=messages)
    assert body.get("system") == system
    assert body["messages"] == expected
    assert "model" not in body


IMAGE_PARTS = [
    (
        "data-url",
        {"url": PNG, "detail": "high"},
        {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    ),
    (
        "data-url-upper-case-type",
        {"url": "DATA:IMAGE/WEBP;BASE64,UklGRiQAAABXRUJQVlA4IA=="},
        {"type": "base64", "media_type": "image/webp", "data": "UklGRiQAAABXRUJQVlA4IA=="},
    ),
    (
        "jpeg",
        {"url": "data:image/jpeg;base64,/9j/"},
        {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
    ),
    (
        "gif",
        {"url": "data:image/gif;base64,R0lGODlh"},
        {"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"},
    ),
]


@pytest.mark.parametrize(
    ("spec", "source"), [pytest.param(s, src, id=i) for i, s, src in IMAGE_PARTS]
)
def test_inline_images(spec: dict[str, Any], source: dict[str, Any]) -> None:
    result = translate_request(
        chat(messages=[user({"type": "image_url", "image_url": spec})]), CAPS
    )
    assert result.body["messages"][0]["content"] == [{"type": "image", "source": source}]
    assert result.images == []


def test_http_images_are_placeholders_with_refs() -> None:
    parts = [
        text("What is in these?"),
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "low"}},
        {"type": "image_url", "image_url": "HTTP://example.com/b.png"},
    ]
    result = translate_request(
        chat(messages=[USER, {"role": "assistant", "content": "?"}, user(*parts)]), CAPS
    )
    content = result.body["messages"][2]["content"]
    assert content[1] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.com/a.jpg"},
    }
    assert [(r.param, r.url) for r in result.images] == [
        ("messages[2].content[1].image_url.url", "https://example.com/a.jpg"),
        ("messages[2].content[2].image_url", "HTTP://example.com/b.png"),
    ]
    # The ref's block IS the body's block, so the gateway can swap the source in place.
    assert result.images[0].block is content[1]
    assert result.images[1].block is content[2]


def test_pdf_file_part() -> None:
    part = {"type": "file", "file": {"file_data": PDF, "filename": "a.pdf", "file_id": None}}
    body = translate(messages=[user(text("Summarise"), part)])
    assert body["messages"][0]["content"][1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
    }
