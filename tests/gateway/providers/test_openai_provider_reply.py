"""chat.completion -> Anthropic Message (gateway/providers/openai/reply.py), validated against
`anthropic.types.Message`; one row per rule."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message

from gateway.providers.openai.mapping import GATEWAY_SIGNATURE_PREFIX
from gateway.providers.openai.reply import INVALID_ARGUMENTS, UnreadableReply, to_message

USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 80,
    "total_tokens": 1280,
    "prompt_tokens_details": {"cached_tokens": 1024},
    "completion_tokens_details": {"reasoning_tokens": 60},
}


def reply(
    message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = USAGE
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-x",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def translate(
    r: dict[str, Any], thinking: bool = False, names: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    out = to_message(r, model="gpt-6-sol", tool_names=names or {}, thinking=thinking, **kw)
    Message.model_validate(out)
    return out


def tool_call(i: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}


def strip_signatures(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for block in content:
        if block["type"] == "thinking":
            assert block["signature"].startswith(GATEWAY_SIGNATURE_PREFIX)
            block = {k: v for k, v in block.items() if k != "signature"}
        out.append(block)
    return out


CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], str]] = [
    ("text", reply({"content": "Hi"}), {}, [{"type": "text", "text": "Hi"}], "end_turn"),
    (
        "length -> max_tokens",
        reply({"content": "Hi"}, "length"),
        {},
        [{"type": "text", "text": "Hi"}],
        "max_tokens",
    ),
    ("content_filter -> refusal", reply({"content": ""}, "content_filter"), {}, [], "refusal"),
    (
        "refusal field -> text and refusal",
        reply({"content": None, "refusal": "No."}),
        {},
        [{"type": "text", "text": "No."}],
        "refusal",
    ),
    (
        "thinking first, then text, then tool_use (names mapped back, ids kept)",
        reply(
            {
                "content": "Calling",
                "reasoning_content": "plan",
                "tool_calls": [tool_call("call_1", "f_1a2b", '{"a": 1}')],
            },
            "tool_calls",
        ),
        {"thinking": True, "names": {"f_1a2b": "f.x"}},
        [
            {"type": "thinking", "thinking": "plan"},
            {"type": "text", "text": "Calling"},
            {"type": "tool_use", "id": "call_1", "name": "f.x", "input": {"a": 1}},
        ],
        "tool_use",
    ),
    (
        "reasoning (vLLM) read too",
        reply({"content": "x", "reasoning": "r"}),
        {"thinking": True},
        [{"type": "thinking", "thinking": "r"}, {"type": "text", "text": "x"}],
        "end_turn",
    ),
    (
        "reasoning dropped when not asked",
        reply({"content": "x", "reasoning_content": "r"}),
        {},
        [{"type": "text", "text": "x"}],
        "end_turn",
    ),
    (
        "stop with tool calls -> tool_use",
        reply({"content": None, "tool_calls": [tool_call("c", "f", "{}")]}),
        {},
        [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
        "tool_use",
    ),
    (
        "broken arguments kept as text",
        reply({"tool_calls": [tool_call("c", "f", '{"a": ')]}, "tool_calls"),
        {},
        [{"type": "tool_use", "id": "c", "name": "f", "input": {INVALID_ARGUMENTS: '{"a": '}}],
        "tool_use",
    ),
    (
        "empty arguments -> {}",
        reply({"tool_calls": [tool_call("c", "f", "")]}, "tool_calls"),
        {},
        [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
        "tool_use",
    ),
    (
        "content parts joined",
        reply({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        {},
        [{"type": "text", "text": "ab"}],
        "end_turn",
    ),
]


@pytest.mark.parametrize(("rule", "r", "opts", "content", "stop"), CASES, ids=[c[0] for c in CASES])
def test_mapping(
    rule: str, r: dict[str, Any], opts: dict[str, Any], content: list[dict[str, Any]], stop: str
) -> None:
    out = translate(r, **opts)
    assert strip_signatures(out["content"]) == content
    assert out["stop_reason"] == stop
    assert out["id"] == "msg_chatcmpl-1" and out["model"] == "gpt-6-sol"


def test_usage() -> None:
    usage = translate(reply({"content": "x"}))["usage"]
    assert usage == {
        "input_tokens": 176,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1024,
        "output_tokens": 80,
        "output_tokens_details": {"thinking_tokens": 60},
    }


def test_a_reply_without_usage_is_estimated() -> None:
    usage = translate(reply({"content": "x" * 20}, usage=None), input_estimate=9)["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (9, 5)


def test_the_same_thinking_gets_the_same_signature() -> None:
    a = translate(reply({"content": "x", "reasoning_content": "r"}), thinking=True)["content"][0]
    b = translate(reply({"content": "y", "reasoning_content": "r"}), thinking=True)["content"][0]
    assert a["signature"] == b["signature"]


@pytest.mark.parametrize(
    "bad", [{"id": "x", "choices": []}, {"error": {"message": "m"}}, {"choices": [{"index": 0}]}]
)
def test_replies_without_an_answer_raise(bad: dict[str, Any]) -> None:
    with pytest.raises(UnreadableReply) as caught:
        to_message(bad, model="m", tool_names={}, thinking=False)
    assert isinstance(caught.value, ValueError)
