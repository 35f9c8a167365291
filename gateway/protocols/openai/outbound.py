"""Anthropic Messages reply -> OpenAI chat.completion (pure: dict in, dict out)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "FINISH_REASONS",
    "finish_reason",
    "map_usage",
    "thinking_blocks_by_tool_id",
    "thinking_input_block",
    "translate_response",
]

# Anthropic stop_reason -> OpenAI finish_reason. pause_turn (a server-tool loop paused) ends the
# answer as far as the client can tell; model_context_window_exceeded is a truncation, so
# "length" (what LengthFinishReasonError in the openai SDK keys on). Unknown values -> "stop".
FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: object) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _count(value: object) -> int:
    return value if type(value) is int else 0


def map_usage(u: dict[str, Any]) -> dict[str, Any]:
    """Anthropic usage -> OpenAI usage.

    Anthropic's input_tokens is only the uncached remainder, while OpenAI's prompt_tokens counts
    all input, so both cache counters are added back in.
    """
    input_tokens = _count(u.get("input_tokens"))
    cache_read = _count(u.get("cache_read_input_tokens"))
    cache_write = _count(u.get("cache_creation_input_tokens"))
    output_tokens = _count(u.get("output_tokens"))
    details = u.get("output_tokens_details")
    thinking = _count(details.get("thinking_tokens")) if isinstance(details, dict) else 0
    prompt_tokens = input_tokens + cache_read + cache_write
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": prompt_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
        "completion_tokens_details": {"reasoning_tokens": thinking},
    }


def _arguments(tool_input: object) -> str:
    return orjson.dumps(tool_input if tool_input is not None else {}).decode()


def translate_response(
    msg: dict[str, Any], *, request_id: str, model_name: str, created: int
) -> dict[str, Any]:
    """Translate a non-streaming Messages reply; thinking is never returned to the client."""
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in msg.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": _arguments(block.get("input")),
                    },
                }
            )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage = msg.get("usage")
    return {
        "id": "chatcmpl-" + request_id,
        "object": "chat.completion",
        "created": created,
        "model": model_name,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(msg.get("stop_reason")),
            }
        ],
        "usage": map_usage(usage if isinstance(usage, dict) else {}),
    }


def thinking_input_block(block: dict[str, Any]) -> dict[str, Any] | None:
    """An output thinking block as the input block Anthropic wants replayed (None if not one)."""
    kind = block.get("type")
    if kind == "thinking":
        return {
            "type": "thinking",
            "thinking": block.get("thinking") or "",
            "signature": block.get("signature") or "",
        }
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data") or ""}
    return None


def thinking_blocks_by_tool_id(content: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Map each tool_use id of a reply to that reply's thinking blocks, in order.

    The OpenAI client never sees thinking, but Anthropic needs it back next to the tool results
    (see inbound.attach_thinking), so the gateway stores it under every tool call id of the turn.
    Empty when the reply has no thinking or no tool call.
    """
    thinking: list[dict[str, Any]] = []
    tool_ids: list[str] = []
    for block in content:
        if block.get("type") == "tool_use":
            tool_id = block.get("id")
            if isinstance(tool_id, str):
                tool_ids.append(tool_id)
        else:
            replay = thinking_input_block(block)
            if replay is not None:
                thinking.append(replay)
    if not thinking:
        return {}
    return {tool_id: list(thinking) for tool_id in tool_ids}
