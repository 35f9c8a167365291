"""Shared helpers for the chat stream translator tests: event builders and an SSE reader."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocols.openai.stream import ChatStreamTranslator

ENVELOPE = {
    "id": "chatcmpl-req_1",
    "object": "chat.completion.chunk",
    "created": 1793318400,
    "model": "anthropic/claude-sonnet-5-5",
}


def translator(include_usage: bool = False, **overrides: Any) -> ChatStreamTranslator:
    args: dict[str, Any] = {
        "request_id": "req_1",
        "model_name": ENVELOPE["model"],
        "created": ENVELOPE["created"],
        "include_usage": include_usage,
    }
    args.update(overrides)
    return ChatStreamTranslator(**args)


def parse_sse(data: bytes) -> list[Any]:
    """Decode the bytes the way a strict SSE client would: only `data:` blocks and comments."""
    assert data == b"" or data.endswith(b"\n\n")
    out: list[Any] = []
    for block in data.split(b"\n\n")[:-1]:
        assert b"\n" not in block, block  # one line per event: never `id:`/`event:` lines
        if block.startswith(b":"):
            continue
        assert block.startswith(b"data: "), block
        payload = block[6:]
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


def feed_all(t: ChatStreamTranslator, events: list[dict[str, Any]]) -> list[Any]:
    return parse_sse(b"".join(t.feed(e) for e in events))


def deltas(chunks: list[Any]) -> list[tuple[dict[str, Any], str | None]]:
    return [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks]


# -- event builders ---------------------------------------------------------------------------


def start(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 1},
    }
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **payload: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": payload}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return delta(index, type="text_delta", text=text)


def json_delta(index: int, fragment: str) -> dict[str, Any]:
    return delta(index, type="input_json_delta", partial_json=fragment)


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, **usage: Any) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": 5, **usage},
    }


MESSAGE_STOP = {"type": "message_stop"}
PING = {"type": "ping"}
ROLE = {"role": "assistant", "content": ""}
