"""count_tokens on OpenAI-kind models (gateway/providers/openai/tokens.py), against the
published numbers of OpenAI's cookbook "How to count tokens with tiktoken"
(examples/How_to_count_tokens_with_tiktoken.ipynb) and OpenAI's image-cost examples."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import pytest

from catalog.media import PDF_PAGE_TEXT_TOKENS
from gateway.providers.openai.media_tokens import UNKNOWN_IMAGE_TOKENS, image_tokens
from gateway.providers.openai.request import UntranslatableRequest
from gateway.providers.openai.tokens import (
    _Counter,
    _encoding,
    count_input_tokens,
    encoding_name,
)
from tests.media_samples import b64, pdf

# tiktoken's ids (the cookbook's section 3 and 5; "hello world" is tiktoken's own test)
REFERENCE = [
    ("o200k_base", "tiktoken is great!", [83, 8251, 2488, 382, 2212, 0]),
    ("o200k_base", "antidisestablishmentarianism", [493, 129901, 376, 160388, 21203, 2367]),
    ("o200k_base", "2 + 2 = 4", [17, 659, 220, 17, 314, 220, 19]),
    ("o200k_base", "お誕生日おめでとう", [8930, 9697, 243, 128225, 8930, 17693, 4344, 48669]),
    ("o200k_base", "hello world", [24912, 2375]),
    ("cl100k_base", "antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
    ("cl100k_base", "hello world", [15339, 1917]),
]


@pytest.mark.parametrize(("encoding", "text", "ids"), REFERENCE)
def test_bpe_openai_gives_tiktokens_ids(encoding: str, text: str, ids: list[int]) -> None:
    assert _encoding(encoding).encode_ordinary(text) == ids


def test_the_cookbooks_message_example_counts_124_on_gpt_4o() -> None:
    messages = [
        {
            "role": "system",
            "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "New synergies will help drive top-line growth.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Things working well together will increase revenue.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Let's talk later when we're less busy about how to do better.",
        },
        {
            "role": "user",
            "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
        },
    ]
    counter = _Counter("gpt-4o")
    assert 3 + sum(counter.message(m) for m in messages) == 124


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {
            "type": "string",
            "description": "The unit of temperature to return",
            "enum": ["celsius", "fahrenheit"],
        },
    },
    "required": ["location"],
}


def test_the_cookbooks_tool_example_counts_101_through_a_messages_body() -> None:
    body = {
        "model": "gpt-4o",
        "system": "You are a helpful assistant that can answer to questions about the weather.",
        "messages": [{"role": "user", "content": "What's the weather like in San Francisco?"}],
        "tools": [
            {
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "input_schema": WEATHER_SCHEMA,
            }
        ],
    }
    assert count_input_tokens(body, "gpt-4o") == 101


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("openai/gpt-6-sol", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("llama3.1:8b", None),
        ("Qwen/Qwen3-Coder", None),
        ("deepseek-chat", None),
    ],
)
def test_encoding_names(model: str, encoding: str | None) -> None:
    assert encoding_name(model) == encoding


def body(content: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def test_other_models_are_estimated_at_3_5_bytes_per_token() -> None:
    # 3 per message + "user" (4 bytes -> 2) + 35 bytes (-> 10) + 3 priming
    assert count_input_tokens(body("x" * 35), "llama3") == 3 + 2 + 10 + 3


def test_gpt_counts_use_the_tokenizer() -> None:
    # 3 + "user" (1) + "hello world" (2) + 3
    assert count_input_tokens(body("hello world"), "gpt-6-sol") == 9


def test_special_token_text_is_counted_as_text() -> None:
    assert count_input_tokens(body("<|endoftext|>"), "gpt-4o") > 9


def _png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    raw = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1024, 1024), 765),
        ((2048, 4096), 1105),
        ((500, 500), 255),
        ((513, 500), 425),
        (None, UNKNOWN_IMAGE_TOKENS),
    ],
)
def test_image_rule(size: tuple[int, int] | None, tokens: int) -> None:
    assert image_tokens(size) == tokens


def test_images_are_read_from_their_header_or_counted_as_1024_square() -> None:
    text_only = count_input_tokens(body([{"type": "text", "text": "hi"}]), "gpt-4o")
    png = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _png(2048, 4096)},
    }
    url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert (
        count_input_tokens(body([{"type": "text", "text": "hi"}, png]), "gpt-4o")
        == text_only + 1105
    )
    assert (
        count_input_tokens(body([{"type": "text", "text": "hi"}, url]), "gpt-4o") == text_only + 765
    )
    assert (
        count_input_tokens(body([{"type": "text", "text": "hi"}, url]), "llama3")
        > count_input_tokens(body([{"type": "text", "text": "hi"}]), "llama3") + 700
    )


def test_tool_history_and_nested_schemas_count() -> None:
    history = body(
        [{"type": "tool_result", "tool_use_id": "t", "content": "sunny"}],
    )
    history["messages"].insert(
        0,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "get", "input": {"city": "Paris"}}],
        },
    )
    history["messages"].insert(0, {"role": "user", "content": "weather?"})
    assert (
        count_input_tokens(history, "gpt-4o") > count_input_tokens(body("weather?"), "gpt-4o") + 10
    )
    flat = {
        "name": "f",
        "input_schema": {"type": "object", "properties": {"a": {"type": "object"}}},
    }
    nested = {
        "name": "f",
        "input_schema": {
            "type": "object",
            "properties": {
                "a": {
                    "type": "object",
                    "properties": {
                        "deep": {"type": "string", "description": "a long description of a field"}
                    },
                }
            },
        },
    }
    assert (
        count_input_tokens(body("x", tools=[nested]), "gpt-4o")
        > count_input_tokens(body("x", tools=[flat]), "gpt-4o") + 5
    )


def test_an_untranslatable_body_is_refused_like_the_request() -> None:
    with pytest.raises(UntranslatableRequest):
        count_input_tokens(
            body("x", tools=[{"type": "web_search_20250305", "name": "web_search"}]), "gpt-4o"
        )


@pytest.mark.parametrize("pages", [1, 3])
def test_a_pdf_counts_a_letter_page_image_and_the_text_allowance_per_page(pages: int) -> None:
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(pages))},
    }
    with_pdf = body([document, {"type": "text", "text": "x"}])
    without = body([{"type": "text", "text": "x"}])
    added = count_input_tokens(with_pdf, "gpt-4o") - count_input_tokens(without, "gpt-4o")
    assert added == pages * (765 + PDF_PAGE_TEXT_TOKENS)
