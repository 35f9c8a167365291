"""Upstream event sequences for the Responses stream translator's byte-for-byte tests, and the
function that renders one through the translator (what the golden file holds)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import Rendering

from .openai_stream_helpers import (
    MESSAGE_STOP,
    PING,
    block_start,
    delta,
    json_delta,
    message_delta,
    start,
    stop,
    text_delta,
)

ECHO = {
    "instructions": "be brief",
    "max_output_tokens": 64,
    "metadata": {"k": "v"},
    "reasoning": {"effort": "low", "summary": "auto"},
    "store": False,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
}


def seal(block: dict[str, Any]) -> str:
    return "sealed:" + orjson.dumps(block).decode()


def _thinking(index: int) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(index, type="thinking_delta", thinking="Let me "),
        delta(index, type="thinking_delta", thinking="think."),
        delta(index, type="signature_delta", signature="sig=="),
        stop(index),
    ]


_TEXT = [
    block_start(1, {"type": "text", "text": ""}),
    text_delta(1, "Hello"),
    text_delta(1, ', "world" ✓\n'),
    text_delta(1, ""),
    text_delta(1, "</script>\u2028"),
    stop(1),
]
_TOOL = [
    block_start(2, {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}),
    json_delta(2, ""),
    json_delta(2, '{"q": '),
    json_delta(2, '"x"}'),
    stop(2),
]

# name -> (upstream events, translator options, ending: "final" or "failure")
SCENARIOS: dict[str, tuple[list[dict[str, Any]], dict[str, Any], str]] = {
    "text": (
        [start(), PING, *_TEXT[:1], text_delta(1, "Hi"), stop(1), message_delta("end_turn"),
         MESSAGE_STOP],
        {},
        "final",
    ),
    "thinking_text_tool_summary_sealed": (
        [start(), *_thinking(0), *_TEXT, *_TOOL, message_delta("tool_use"), MESSAGE_STOP],
        {"summary": True, "include_encrypted": True, "seal": seal},
        "final",
    ),
    "thinking_hidden": (
        [start(), *_thinking(0), *_TEXT, message_delta("end_turn"), MESSAGE_STOP],
        {"summary": False, "include_encrypted": False, "seal": seal},
        "final",
    ),
    "incomplete": (
        [start({"input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 1}), *_TEXT,
         message_delta("max_tokens", output_tokens=64), MESSAGE_STOP],
        {},
        "final",
    ),
    "tool_input_whole_and_text_in_start": (
        [start(), block_start(0, {"type": "text", "text": "pre"}), text_delta(0, "x"), stop(0),
         block_start(1, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}), stop(1),
         message_delta("tool_use"), MESSAGE_STOP],
        {},
        "final",
    ),
    "no_message_start": ([*_TEXT, MESSAGE_STOP], {}, "final"),
    "failure_mid_stream": ([start(), *_TEXT[:3]], {}, "failure"),
}  # fmt: skip


def translator(**options: Any) -> ResponsesStreamTranslator:
    return ResponsesStreamTranslator(
        Rendering(
            request_id="01JREQ",
            model_name="anthropic/claude-sonnet-5-5",
            created_at=1764633600,
            echo=ECHO,
            seal=options.get("seal"),
            summary=options.get("summary", False),
            include_encrypted=options.get("include_encrypted", False),
        )
    )


def render(name: str) -> bytes:
    upstream, options, ending = SCENARIOS[name]
    t = translator(**options)
    out = b"".join(t.feed(event) for event in upstream)
    if ending == "failure":
        return out + t.failure("upstream went away", "server_error")
    return out + t.final_event()
