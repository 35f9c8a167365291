"""Properties of the chat stream translator, checked with hypothesis:

1. a realistic event sequence for any reply, accumulated the way openai-python's stream helper
   does (and by the SDK itself), equals translate_response of the same reply;
2. role, a tool call's id and function.name are sent exactly once.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from gateway.protocols.openai.outbound import thinking_blocks_by_tool_id, translate_response
from gateway.protocols.openai.stream import ChatStreamTranslator

from .openai_stream_helpers import (
    ENVELOPE,
    MESSAGE_STOP,
    PING,
    block_start,
    delta,
    json_delta,
    parse_sse,
    start,
    stop,
    text_delta,
    translator,
)

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=10,
)
BLOCK = st.one_of(
    st.builds(lambda text: {"type": "text", "text": text}, TEXT),
    st.builds(
        lambda name, tool_input: {"type": "tool_use", "name": name, "input": tool_input},
        st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
        st.dictionaries(TEXT, JSON_VALUE, max_size=4),
    ),
    st.builds(
        lambda text, sig: {"type": "thinking", "thinking": text, "signature": sig},
        TEXT,
        st.text("abcdef0123456789", min_size=1, max_size=12),
    ),
    st.builds(lambda data: {"type": "redacted_thinking", "data": data}, st.text("xyz", min_size=1)),
)
STOP_REASONS = st.sampled_from(
    [
        "end_turn",
        "stop_sequence",
        "pause_turn",
        "max_tokens",
        "tool_use",
        "refusal",
        "model_context_window_exceeded",
        "brand_new",
    ]
)
COUNT = st.integers(0, 10**6)


@st.composite
def replies(draw: st.DrawFn) -> dict[str, Any]:
    content = draw(st.lists(BLOCK, max_size=6))
    for i, block in enumerate(content):
        if block["type"] == "tool_use":
            block["id"] = f"toolu_{i:02d}"
    output = draw(COUNT)
    usage = {
        "input_tokens": draw(COUNT),
        "cache_creation_input_tokens": draw(COUNT),
        "cache_read_input_tokens": draw(COUNT),
        "cache_creation": {
            "ephemeral_5m_input_tokens": draw(COUNT),
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output,
        "output_tokens_details": {"thinking_tokens": draw(st.integers(0, output))},
    }
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": draw(STOP_REASONS),
        "stop_sequence": None,
        "usage": usage,
    }


def pieces(draw: st.DrawFn, text: str) -> list[str]:
    """Split text at random points (possibly producing empty pieces, as Anthropic may)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A reply and a realistic event sequence that produces it."""
    reply = draw(replies())
    usage = reply["usage"]
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens_details"}
    events: list[dict[str, Any]] = [start({**start_usage, "output_tokens": 1})]
    for i, block in enumerate(reply["content"]):
        kind = block["type"]
        if kind == "text":
            events.append(block_start(i, {"type": "text", "text": ""}))
            events.extend(text_delta(i, p) for p in pieces(draw, block["text"]))
        elif kind == "tool_use":
            events.append(block_start(i, {**block, "input": {}}))
            # Anthropic's first fragment is often "" (kept by pieces sometimes).
            arguments = orjson.dumps(block["input"]).decode()
            events.extend(json_delta(i, p) for p in pieces(draw, arguments))
        elif kind == "thinking":
            events.append(block_start(i, {"type": "thinking", "thinking": "", "signature": ""}))
            events.extend(
                delta(i, type="thinking_delta", thinking=p) for p in pieces(draw, block["thinking"])
            )
            events.append(delta(i, type="signature_delta", signature=block["signature"]))
        else:
            events.append(block_start(i, block))
        events.append(stop(i))
        if draw(st.booleans()):
            events.append(PING)
    final = {
        "output_tokens": usage["output_tokens"],
        "output_tokens_details": usage["output_tokens_details"],
    }
    if draw(st.booleans()):  # the live API repeats the input counters here
        final.update(start_usage)
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": reply["stop_reason"]}, "usage": final}
    )
    events.append(MESSAGE_STOP)
    return reply, events


def accumulate(chunks: list[Any]) -> dict[str, Any]:
    """What openai-python's stream helper does with deltas: strings are CONCATENATED, tool
    calls merged by index (lib/streaming/_deltas.py)."""
    message: dict[str, Any] = {}
    calls: list[dict[str, Any]] = []
    result: dict[str, Any] = {"finish_reason": None, "usage": None}
    for chunk in chunks:
        if not chunk["choices"]:
            result["usage"] = chunk["usage"]
            continue
        (choice,) = chunk["choices"]
        for key, value in choice["delta"].items():
            if key != "tool_calls":
                message[key] = message.get(key, "") + value
                continue
            for call in value:
                index = call["index"]
                assert index <= len(calls), "tool call indexes must be dense"
                if index == len(calls):
                    calls.append({"id": "", "type": "", "function": {"name": "", "arguments": ""}})
                entry = calls[index]
                entry["id"] += call.get("id", "")
                entry["type"] = call.get("type", entry["type"])
                assert "function" in call  # the SDK helper asserts this
                for field in ("name", "arguments"):
                    entry["function"][field] += call["function"].get(field, "")
        if choice["finish_reason"]:
            assert result["finish_reason"] is None, "one finish chunk"
            result["finish_reason"] = choice["finish_reason"]
    result.update(role=message.get("role"), content=message.get("content"), tool_calls=calls)
    return result


def run_stream(events: list[dict[str, Any]]) -> tuple[ChatStreamTranslator, bytes]:
    t = translator(include_usage=True)
    body = b"".join(t.feed(e) for e in events) + t.usage_chunk() + t.DONE
    return t, body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=event_streams())
def test_stream_accumulates_to_the_non_streaming_response(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    reply, events = case
    t, body = run_stream(events)
    parsed = parse_sse(body)
    assert parsed[-1] == "[DONE]"
    chunks = parsed[:-1]
    expected = translate_response(
        reply, request_id="req_1", model_name=ENVELOPE["model"], created=ENVELOPE["created"]
    )
    choice = expected["choices"][0]
    got = accumulate(chunks)
    assert got["role"] == "assistant"
    # The first chunk's content "" makes an empty streamed answer "", not null.
    assert (got["content"] or None) == (choice["message"]["content"] or None)
    assert got["tool_calls"] == choice["message"].get("tool_calls", [])
    assert got["finish_reason"] == choice["finish_reason"]
    assert got["usage"] == expected["usage"]
    assert t.finished and t.stop_reason == reply["stop_reason"]
    assert t.thinking_blocks_by_tool_id == thinking_blocks_by_tool_id(reply["content"])
    assert all({k: c[k] for k in ENVELOPE} == ENVELOPE for c in chunks)

    # The real SDK accumulator agrees (validates every chunk against its types, too).
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    snapshot = state.current_completion_snapshot
    sdk_message = snapshot.choices[0].message
    assert sdk_message.role == "assistant"
    assert (sdk_message.content or None) == (choice["message"]["content"] or None)
    sdk_calls = [
        {
            "id": c.id,
            "type": c.type,
            "function": {"name": c.function.name, "arguments": c.function.arguments},
        }
        for c in sdk_message.tool_calls or []
    ]
    assert sdk_calls == choice["message"].get("tool_calls", [])
    assert snapshot.choices[0].finish_reason == choice["finish_reason"]
    assert snapshot.usage is not None
    assert snapshot.usage.model_dump(exclude_none=True) == expected["usage"]


@settings(max_examples=200, deadline=None)
@given(case=event_streams())
def test_role_id_and_name_are_sent_once(case: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    reply, events = case
    chunks = parse_sse(run_stream(events)[1])[:-1]
    role_chunks = [c for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
    assert role_chunks == [chunks[0]]
    starts: dict[int, int] = {}
    for chunk in chunks:
        for call in (chunk["choices"] or [{"delta": {}}])[0]["delta"].get("tool_calls", []):
            if "id" in call or "name" in call["function"]:
                assert {"id", "type"} <= call.keys() and "name" in call["function"]
                starts[call["index"]] = starts.get(call["index"], 0) + 1
            else:
                assert call["index"] in starts, "arguments before the call's first delta"
    tool_ids = [b["id"] for b in reply["content"] if b["type"] == "tool_use"]
    assert starts == {i: 1 for i in range(len(tool_ids))}
