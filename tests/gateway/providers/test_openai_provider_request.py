"""Messages request -> Chat Completions request (gateway/providers/openai/request.py).

One table row per mapping rule: each row names the rule and the part of the chat body it
decides, so breaking the rule fails exactly that row. Then the refusals (each naming the
param), and a hypothesis property: no Anthropic-only key survives translation.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.media import PDF_PAGE_TEXT_TOKENS
from gateway.providers.openai.request import (
    ChatTarget,
    UntranslatableRequest,
    chat_tool_name,
    to_chat,
)
from tests import media_samples
from tests.media_samples import b64

GPT = ChatTarget(efforts=("none", "low", "medium", "high", "xhigh"), default_effort="medium")
O_SERIES = ChatTarget(efforts=("low", "medium", "high"))
MINIMAL = ChatTarget(efforts=("minimal", "low", "medium", "high"))
PLAIN = ChatTarget()
OLD = ChatTarget(max_tokens_param="max_tokens", prompt_cache_key="sess-1")

LONG = "mcp__a_very_long_server_name__and_an_even_longer_tool_name_that_goes_past_64"
DOTTED = "web.fetch"
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
CC = {"type": "ephemeral"}
PDF = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
PDF_URL = "data:application/pdf;base64,JVBERi0xLjQK"
TEXT_DOC = {"type": "text", "media_type": "text/plain", "data": "the notes"}


def user_blocks(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def body(**extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "gpt-6-sol",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    out.update(extra)
    return out


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "input_schema": {"type": "object", "properties": {}}, **extra}


# (rule, request body, target, key of the chat body, expected value)
CASES: list[tuple[str, dict[str, Any], ChatTarget, str, Any]] = [
    ("model kept", body(), PLAIN, "model", "gpt-6-sol"),
    (
        "system string -> first system message",
        body(system="be brief"),
        PLAIN,
        "messages",
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    ),
    (
        "system text blocks joined, cache_control stripped",
        body(
            system=[
                {"type": "text", "text": "a", "cache_control": CC},
                {"type": "text", "text": "b"},
            ]
        ),
        PLAIN,
        "messages",
        [{"role": "system", "content": "a\n\nb"}, {"role": "user", "content": "hi"}],
    ),
    (
        "user text blocks and base64 image -> parts with a data URL",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look", "cache_control": CC},
                        {"type": "image", "source": PNG},
                    ],
                }
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                ],
            }
        ],
    ),
    (
        "url image source -> image_url.url",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
                    ],
                }
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
            }
        ],
    ),
    (
        "tools -> functions, schema unchanged, cache_control stripped",
        body(
            tools=[
                {
                    "name": "get",
                    "description": "d",
                    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                    "cache_control": CC,
                }
            ]
        ),
        PLAIN,
        "tools",
        [
            {
                "type": "function",
                "function": {
                    "name": "get",
                    "description": "d",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
    ),
    (
        "custom tool type and strict carried (its object closed for OpenAI's strict mode)",
        body(tools=[tool("get", type="custom", strict=True)]),
        PLAIN,
        "tools",
        [
            {
                "type": "function",
                "function": {
                    "name": "get",
                    "parameters": {
                        "type": "object",
                        "properties": {},
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
            }
        ],
    ),
    (
        "tool_choice auto",
        body(tools=[tool("t")], tool_choice={"type": "auto"}),
        PLAIN,
        "tool_choice",
        "auto",
    ),
    (
        "tool_choice any -> required",
        body(tools=[tool("t")], tool_choice={"type": "any"}),
        PLAIN,
        "tool_choice",
        "required",
    ),
    (
        "tool_choice none",
        body(tools=[tool("t")], tool_choice={"type": "none"}),
        PLAIN,
        "tool_choice",
        "none",
    ),
    (
        "tool_choice tool -> named function",
        body(tools=[tool("t")], tool_choice={"type": "tool", "name": "t"}),
        PLAIN,
        "tool_choice",
        {"type": "function", "function": {"name": "t"}},
    ),
    (
        "tool_choice tool with a long name -> the shortened name",
        body(tools=[tool(LONG)], tool_choice={"type": "tool", "name": LONG}),
        PLAIN,
        "tool_choice",
        {"type": "function", "function": {"name": chat_tool_name(LONG)}},
    ),
    (
        "disable_parallel_tool_use -> parallel_tool_calls false",
        body(tools=[tool("t")], tool_choice={"type": "auto", "disable_parallel_tool_use": True}),
        PLAIN,
        "parallel_tool_calls",
        False,
    ),
    (
        "parallel_tool_calls never sent without tools",
        body(tool_choice={"type": "none", "disable_parallel_tool_use": True}),
        PLAIN,
        "parallel_tool_calls",
        None,
    ),
    (
        "assistant tool_use -> tool_calls with the id and JSON arguments; thinking dropped",
        body(
            messages=[
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "redacted_thinking", "data": "x"},
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "é"}},
                    ],
                },
            ]
        ),
        PLAIN,
        "messages",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get", "arguments": '{"q":"é"}'},
                    }
                ],
            },
        ],
    ),
    (
        "assistant turn of only thinking is not sent",
        body(
            messages=[
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "t", "signature": "s"}],
                },
                {"role": "user", "content": "b"},
            ]
        ),
        PLAIN,
        "messages",
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    ),
    (
        "tool_results first in order, then the rest of the turn; images after the tool messages",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "and then"},
                        {"type": "tool_result", "tool_use_id": "a", "content": "one"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "b",
                            "content": [
                                {"type": "text", "text": "two"},
                                {"type": "text", "text": "three"},
                                {"type": "image", "source": PNG},
                            ],
                            "cache_control": CC,
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "c",
                            "content": "bad",
                            "is_error": True,
                        },
                    ],
                }
            ]
        ),
        PLAIN,
        "messages",
        [
            {"role": "tool", "tool_call_id": "a", "content": "one"},
            {"role": "tool", "tool_call_id": "b", "content": "two\nthree"},
            {"role": "tool", "tool_call_id": "c", "content": "Error: bad"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                    {"type": "text", "text": "and then"},
                ],
            },
        ],
    ),
    (
        "a tool_result of only an image says where the image went",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a",
                            "content": [{"type": "image", "source": PNG}],
                        }
                    ],
                }
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "tool",
                "tool_call_id": "a",
                "content": "(the result is the image in the next user message)",
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    }
                ],
            },
        ],
    ),
    (
        "stop_sequences -> stop",
        body(stop_sequences=["\n\nHuman:", "END"]),
        PLAIN,
        "stop",
        ["\n\nHuman:", "END"],
    ),
    ("empty stop_sequences not sent", body(stop_sequences=[]), PLAIN, "stop", None),
    ("max_tokens -> max_completion_tokens", body(), PLAIN, "max_completion_tokens", 100),
    ("max_tokens -> max_tokens on older servers", body(), OLD, "max_tokens", 100),
    ("temperature carried", body(temperature=0.3), PLAIN, "temperature", 0.3),
    ("top_p carried", body(top_p=0.9), PLAIN, "top_p", 0.9),
    ("top_k dropped", body(top_k=5), PLAIN, "top_k", None),
    ("service_tier dropped", body(service_tier="auto"), PLAIN, "service_tier", None),
    (
        "metadata.user_id -> safety_identifier",
        body(metadata={"user_id": "u-1"}),
        PLAIN,
        "safety_identifier",
        "u-1",
    ),
    (
        "a user_id over 128 characters is sent as its SHA-256",
        body(metadata={"user_id": "u" * 129}),
        PLAIN,
        "safety_identifier",
        hashlib.sha256(b"u" * 129).hexdigest(),
    ),
    (
        "stream -> include_usage always",
        body(stream=True),
        PLAIN,
        "stream_options",
        {"include_usage": True},
    ),
    ("stream true kept", body(stream=True), PLAIN, "stream", True),
    ("no stream_options without stream", body(stream=False), PLAIN, "stream_options", None),
    ("target prompt_cache_key sent", body(), OLD, "prompt_cache_key", "sess-1"),
    (
        "the body's prompt_cache_key wins",
        body(prompt_cache_key="mine"),
        OLD,
        "prompt_cache_key",
        "mine",
    ),
    ("no prompt_cache_key by default", body(), PLAIN, "prompt_cache_key", None),
    # reasoning_effort
    (
        "effort wins when the model takes it",
        body(output_config={"effort": "high"}, thinking={"type": "enabled", "budget_tokens": 1024}),
        GPT,
        "reasoning_effort",
        "high",
    ),
    (
        "effort clamped to the nearest level",
        body(output_config={"effort": "max"}),
        O_SERIES,
        "reasoning_effort",
        "high",
    ),
    (
        "budget < 4096 -> low",
        body(thinking={"type": "enabled", "budget_tokens": 2048}),
        GPT,
        "reasoning_effort",
        "low",
    ),
    (
        "budget < 16384 -> medium",
        body(thinking={"type": "enabled", "budget_tokens": 10000}),
        GPT,
        "reasoning_effort",
        "medium",
    ),
    (
        "budget >= 16384 -> high",
        body(thinking={"type": "enabled", "budget_tokens": 32000}),
        GPT,
        "reasoning_effort",
        "high",
    ),
    (
        "budget bucket clamped to the model's levels",
        body(thinking={"type": "enabled", "budget_tokens": 1024}),
        ChatTarget(efforts=("medium", "high")),
        "reasoning_effort",
        "medium",
    ),
    (
        "disabled -> none where taken",
        body(thinking={"type": "disabled"}),
        GPT,
        "reasoning_effort",
        "none",
    ),
    (
        "disabled -> minimal where none is not taken",
        body(thinking={"type": "disabled"}),
        MINIMAL,
        "reasoning_effort",
        "minimal",
    ),
    (
        "disabled -> omitted otherwise",
        body(thinking={"type": "disabled"}),
        O_SERIES,
        "reasoning_effort",
        None,
    ),
    (
        "adaptive -> the default effort",
        body(thinking={"type": "adaptive"}),
        GPT,
        "reasoning_effort",
        "medium",
    ),
    (
        "never sent when the model takes no effort",
        body(
            thinking={"type": "enabled", "budget_tokens": 32000}, output_config={"effort": "high"}
        ),
        PLAIN,
        "reasoning_effort",
        None,
    ),
    ("nothing asked -> nothing sent", body(), GPT, "reasoning_effort", None),
    (
        "output_config.format -> response_format json_schema",
        body(output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}}),
        PLAIN,
        "response_format",
        {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": True},
        },
    ),
    (
        "a base64 PDF document is a file part with a data URL and its title as filename",
        body(messages=[user_blocks({"type": "document", "source": PDF, "title": "Q3 report.pdf"})]),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {"filename": "Q3 report.pdf", "file_data": PDF_URL},
                    }
                ],
            }
        ],
    ),
    (
        "a PDF whose title is no file name is named by its place among the documents",
        body(
            messages=[
                user_blocks(
                    {"type": "document", "source": PDF, "title": "../../etc/passwd"},
                    {"type": "document", "source": PDF},
                )
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {"type": "file", "file": {"filename": "document-1.pdf", "file_data": PDF_URL}},
                    {"type": "file", "file": {"filename": "document-2.pdf", "file_data": PDF_URL}},
                ],
            }
        ],
    ),
    (
        "a plain-text document is a text part, its title first",
        body(
            messages=[
                user_blocks(
                    {"type": "document", "source": TEXT_DOC, "title": "notes"},
                    {"type": "text", "text": "summarise"},
                )
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "notes\n\nthe notes"},
                    {"type": "text", "text": "summarise"},
                ],
            }
        ],
    ),
    (
        "a content document is its text and image parts",
        body(
            messages=[
                user_blocks(
                    {
                        "type": "document",
                        "source": {
                            "type": "content",
                            "content": [
                                {"type": "text", "text": "page one"},
                                {"type": "image", "source": PNG},
                            ],
                        },
                    }
                )
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "page one"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                ],
            }
        ],
    ),
    (
        "a PDF in a tool result (Claude Code reading a PDF) follows in a user message",
        body(
            messages=[
                user_blocks(
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": [{"type": "document", "source": PDF}],
                    }
                )
            ]
        ),
        PLAIN,
        "messages",
        [
            {
                "role": "tool",
                "tool_call_id": "a",
                "content": "(the result is the file in the next user message)",
            },
            {
                "role": "user",
                "content": [
                    {"type": "file", "file": {"filename": "document-1.pdf", "file_data": PDF_URL}}
                ],
            },
        ],
    ),
    (
        "a plain-text document in a tool result stays in the tool message",
        body(
            messages=[
                user_blocks(
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": [
                            {"type": "text", "text": "read:"},
                            {"type": "document", "source": TEXT_DOC},
                        ],
                    }
                )
            ]
        ),
        PLAIN,
        "messages",
        [{"role": "tool", "tool_call_id": "a", "content": "read:\nthe notes"}],
    ),
    (
        "context_management thinking edits accepted",
        body(context_management={"edits": [{"type": "clear_thinking_20251015"}]}),
        PLAIN,
        "context_management",
        None,
    ),
]


@pytest.mark.parametrize(
    ("rule", "request_body", "target", "key", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_mapping(
    rule: str, request_body: dict[str, Any], target: ChatTarget, key: str, expected: Any
) -> None:
    out = to_chat(request_body, target).body
    assert out.get(key) == expected


def test_long_and_invalid_tool_names_are_shortened_and_recorded() -> None:
    request = body(
        tools=[tool(LONG), tool(DOTTED), tool("ok_name")],
        messages=[
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": LONG, "input": {}}],
            },
        ],
    )
    out = to_chat(request, PLAIN)
    names = [t["function"]["name"] for t in out.body["tools"]]
    assert names[2] == "ok_name"
    for name in names[:2]:
        assert len(name) <= 64 and all(c.isalnum() or c in "_-" for c in name)
    assert out.tool_names == {names[0]: LONG, names[1]: DOTTED}
    assert out.body["messages"][1]["tool_calls"][0]["function"]["name"] == names[0]
    # deterministic: the same name on every turn
    assert (
        chat_tool_name(LONG)
        == names[0]
        == to_chat(request, PLAIN).body["tools"][0]["function"]["name"]
    )


def test_thinking_flag() -> None:
    assert to_chat(body(thinking={"type": "enabled", "budget_tokens": 2000}), PLAIN).thinking
    assert to_chat(body(thinking={"type": "adaptive"}), GPT).thinking
    assert not to_chat(body(thinking={"type": "disabled"}), GPT).thinking
    assert not to_chat(body(output_config={"effort": "high"}), GPT).thinking


def test_input_estimate_is_a_quarter_of_the_text_bytes() -> None:
    assert (
        to_chat(
            body(system="x" * 40, messages=[{"role": "user", "content": "y" * 60}]), PLAIN
        ).input_estimate
        == 25
    )


def test_input_estimate_adds_the_images_and_pdfs_tokens() -> None:
    """A stream cut before its usage is billed at this estimate: its media must count (a
    3-page PDF is ~11k tokens that the text alone would leave out)."""
    pages = media_samples.pdf(3)
    pdf_source = {"type": "base64", "media_type": "application/pdf", "data": b64(pages)}
    png = {"type": "base64", "media_type": "image/png", "data": b64(media_samples.png(1024, 1024))}
    result = {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": [{"type": "document", "source": pdf_source}],
    }
    blocks = [
        user_blocks(
            {"type": "text", "text": "y" * 60},
            {"type": "image", "source": png},
            {"type": "document", "source": pdf_source},
        ),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}],
        },
        user_blocks(result),
    ]
    estimate = to_chat(body(messages=blocks), PLAIN).input_estimate
    # the text, the tool call's arguments and the tool message saying where its file went
    text = 60 + len("{}") + len("(the result is the file in the next user message)")
    media = 765 + 2 * 3 * (765 + PDF_PAGE_TEXT_TOKENS)  # the image, then the PDF twice
    assert estimate == -(-text // 4) + media


REFUSED: list[tuple[dict[str, Any], str]] = [
    (body(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0.type"),
    (body(tools=[{"type": "bash_20250124", "name": "bash"}]), "tools.0.type"),
    (
        body(tools=[{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]),
        "tools.0.type",
    ),
    (body(tools=[tool("t", defer_loading=True)]), "tools.0.defer_loading"),
    (
        body(
            messages=[
                user_blocks(
                    {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
                )
            ]
        ),
        "messages.0.content.0.source.type",
    ),
    (
        body(
            messages=[user_blocks({"type": "document", "source": {"type": "file", "file_id": "f"}})]
        ),
        "messages.0.content.0.source.type",
    ),
    (
        body(
            messages=[
                user_blocks(
                    {"type": "document", "source": {**PDF, "media_type": "application/msword"}}
                )
            ]
        ),
        "messages.0.content.0.source.media_type",
    ),
    (
        body(
            messages=[
                user_blocks({"type": "document", "source": PDF, "citations": {"enabled": True}})
            ]
        ),
        "messages.0.content.0.citations",
    ),
    (
        body(
            messages=[
                user_blocks(
                    {
                        "type": "document",
                        "source": {"type": "content", "content": [{"type": "document"}]},
                    }
                )
            ]
        ),
        "messages.0.content.0.source.content.0.type",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "search_result"}],
                }
            ]
        ),
        "messages.0.content.1.type",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a",
                            "content": [{"type": "document"}],
                        }
                    ],
                }
            ]
        ),
        "messages.0.content.0.content.0.source",
    ),
    (
        body(messages=[{"role": "assistant", "content": [{"type": "server_tool_use"}]}]),
        "messages.0.content.0.type",
    ),
    (body(messages=[{"role": "tool", "content": "x"}]), "messages.0.role"),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                }
            ]
        ),
        "messages.0.content.0.source.type",
    ),
    (body(container="c"), "container"),
    (body(mcp_servers=[]), "mcp_servers"),
    (body(frobnicate=1), "frobnicate"),
    (body(system=[{"type": "image"}]), "system.0.type"),
    (body(thinking={"type": "sometimes"}), "thinking.type"),
    (body(tool_choice={"type": "maybe"}), "tool_choice.type"),
    (body(output_config={"format": {"type": "xml"}}), "output_config.format.type"),
    (
        body(context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}),
        "context_management.edits.0.type",
    ),
    (body(metadata={"tenant": "x"}), "metadata.tenant"),
]


@pytest.mark.parametrize(("request_body", "param"), REFUSED, ids=[p for _, p in REFUSED])
def test_refused_fields_name_the_param(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(UntranslatableRequest) as caught:
        to_chat(request_body, PLAIN)
    assert caught.value.param == param
    assert caught.value.message.startswith(param + ": ")


# -- property: no Anthropic-only key survives ----------------------------------------------------

ANTHROPIC_ONLY = {
    "cache_control",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "tool_use_id",
    "input_schema",
    "source",
    "stop_sequences",
    "top_k",
    "budget_tokens",
    "metadata",
}

_text = st.text(max_size=8)
_cache = st.sampled_from([{}, {"cache_control": CC}])
_text_block = st.builds(lambda t, c: {"type": "text", "text": t, **c}, _text, _cache)
_image_block = st.builds(lambda c: {"type": "image", "source": PNG, **c}, _cache)
_result = st.builds(
    lambda i, content, c, err: {
        "type": "tool_result",
        "tool_use_id": i,
        "content": content,
        "is_error": err,
        **c,
    },
    _text,
    st.one_of(_text, st.lists(st.one_of(_text_block, _image_block), max_size=3)),
    _cache,
    st.booleans(),
)
_tool_use = st.builds(
    lambda i, n, c: {"type": "tool_use", "id": i, "name": n, "input": {"k": n}, **c},
    _text,
    st.sampled_from(["get", LONG, DOTTED]),
    _cache,
)
_thinking = st.sampled_from(
    [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "redacted_thinking", "data": "d"},
    ]
)
_user = st.builds(
    lambda c: {"role": "user", "content": c},
    st.one_of(_text, st.lists(st.one_of(_text_block, _image_block, _result), max_size=4)),
)
_assistant = st.builds(
    lambda c: {"role": "assistant", "content": c},
    st.one_of(_text, st.lists(st.one_of(_text_block, _tool_use, _thinking), max_size=4)),
)
_tools = st.lists(
    st.builds(lambda n, c: {**tool(n), **c}, st.sampled_from(["get", LONG, DOTTED]), _cache),
    max_size=3,
    unique_by=lambda t: t["name"],
)
_bodies = st.builds(
    lambda msgs, tools, system, think, extra: body(
        messages=msgs, tools=tools, system=system, thinking=think, **extra
    ),
    st.lists(st.one_of(_user, _assistant), min_size=1, max_size=5),
    _tools,
    st.one_of(_text, st.lists(_text_block, max_size=2)),
    st.sampled_from(
        [{"type": "enabled", "budget_tokens": 5000}, {"type": "disabled"}, {"type": "adaptive"}]
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "top_k": st.integers(1, 5),
            "stop_sequences": st.lists(_text, max_size=2),
            "metadata": st.just({"user_id": "u"}),
            "stream": st.booleans(),
        },
    ),
)


def _keys(value: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("parameters", "arguments"):  # the client's own schemas and inputs
                continue
            found.append(key)
            found.extend(_keys(inner))
    elif isinstance(value, list):
        for inner in value:
            found.extend(_keys(inner))
    return found


@settings(max_examples=200, deadline=None)
@given(_bodies, st.sampled_from([PLAIN, GPT, O_SERIES, OLD]))
def test_translated_bodies_carry_no_anthropic_only_keys(
    request_body: dict[str, Any], target: ChatTarget
) -> None:
    out = to_chat(request_body, target).body
    assert not ANTHROPIC_ONLY & set(_keys(out))
    roles = {m["role"] for m in out["messages"]}
    assert roles <= {"system", "user", "assistant", "tool"}
    for message in out["messages"]:
        parts = message.get("content")
        if isinstance(parts, list):
            assert {p["type"] for p in parts} <= {"text", "image_url"}
    if request_body.get("stream"):
        assert out["stream_options"] == {"include_usage": True}


def test_a_system_message_inside_the_conversation_stays_in_place() -> None:
    """Claude Code sends a system message mid-conversation; the Claude path accepts it, so this
    one does too, as a Chat system message where it was."""
    sent = body(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "be terse"}]},
            {"role": "user", "content": "go on"},
        ]
    )
    roles = [(m["role"], m["content"]) for m in to_chat(sent, ChatTarget()).body["messages"]]
    assert roles == [("user", "hi"), ("system", "be terse"), ("user", "go on")]
