"""Anthropic Messages SSE encoding (protocol.md 1.7).

Every event carries an `event:` line equal to its JSON `type`; anthropic-python dispatches on
that name and silently drops data-only events, so it is not optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

PING = b'event: ping\ndata: {"type": "ping"}\n\n'
WORDS_PER_DELTA = 3
MIN_JSON_PIECES = 3


def encode(event: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error_type: str = "overloaded_error", message: str = "Overloaded") -> bytes:
    return encode("error", {"type": "error", "error": {"type": error_type, "message": message}})


def chunk_text(text: str) -> list[str]:
    """Split on word boundaries, a few words a piece; "".join(pieces) == text."""
    words = text.split(" ")
    pieces = [
        (" " if i else "") + " ".join(words[i : i + WORDS_PER_DELTA])
        for i in range(0, len(words), WORDS_PER_DELTA)
    ]
    if len(pieces) == 1 and len(text) >= 2:
        # Short replies still arrive in more than one delta, as real ones usually do.
        half = len(text) // 2
        pieces = [text[:half], text[half:]]
    return [p for p in pieces if p]


def chunk_json(raw: str) -> list[str]:
    """input_json_delta fragments: "" first (as the live API sends), then >= 3 pieces."""
    size = max(1, min(24, len(raw) // MIN_JSON_PIECES))
    return ["", *(raw[i : i + size] for i in range(0, len(raw), size))]


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return encode(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def block_events(index: int, block: Mapping[str, Any]) -> list[bytes]:
    btype = block.get("type")
    events: list[bytes] = []
    if btype == "text":
        start: Mapping[str, Any] = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in chunk_text(block.get("text", ""))]
    elif btype == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in chunk_text(block.get("thinking", ""))
        ]
        # The signature arrives once, just before the block stops.
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    elif btype in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        raw = orjson.dumps(block.get("input", {})).decode()
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in chunk_json(raw)]
    else:
        # redacted_thinking and server tool results have no delta type: sent whole.
        start, deltas = block, []
    events.append(
        encode(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    )
    events.extend(_delta(index, d) for d in deltas)
    events.append(encode("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def message_events(message: Mapping[str, Any]) -> list[bytes]:
    """All events of a complete stream for a finished message object."""
    usage = message["usage"]
    input_counts = {
        "input_tokens": usage["input_tokens"],
        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": usage["cache_read_input_tokens"],
    }
    start_usage = {
        **input_counts,
        "cache_creation": usage["cache_creation"],
        # A placeholder, as on the live API; the real count comes in message_delta.
        "output_tokens": 1,
        "service_tier": usage.get("service_tier", "standard"),
    }
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": start_usage,
    }
    events = [encode("message_start", {"type": "message_start", "message": start}), PING]
    for index, block in enumerate(message["content"]):
        events.extend(block_events(index, block))
    delta: dict[str, Any] = {
        "stop_reason": message["stop_reason"],
        "stop_sequence": message["stop_sequence"],
    }
    if message.get("stop_details") is not None:
        delta["stop_details"] = message["stop_details"]
    final_usage = {
        **input_counts,
        "output_tokens": usage["output_tokens"],
        "output_tokens_details": usage["output_tokens_details"],
    }
    events.append(
        encode("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage})
    )
    events.append(encode("message_stop", {"type": "message_stop"}))
    return events
