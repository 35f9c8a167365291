"""chat.completion.chunk SSE -> Anthropic stream events (gateway/providers/openai/stream.py).

Each mapping rule is a row; the assembled message is checked by the anthropic SDK's own stream
accumulator and `anthropic.types.Message`. Hypothesis properties: any split of the bytes gives
the same events, the events are always in Anthropic's order, and input + cache_read is the
provider's prompt_tokens.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocols.anthropic.sse import SSEEvent
from gateway.providers.openai.stream import (
    GATEWAY_SIGNATURE_PREFIX,
    ChatStreamDecoder,
    ChatStreamError,
)

ID = "chatcmpl-9"


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": ID,
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [choice],
        **extra,
    }


def usage_chunk(
    prompt: int = 10, completion: int = 5, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "id": ID,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    }


def sse(chunks: list[Any], done: bool = True, eol: bytes = b"\n") -> bytes:
    out = b""
    for c in chunks:
        data = c if isinstance(c, bytes) else orjson.dumps(c)
        out += b"data: " + data + eol + eol
    return out + (b"data: [DONE]" + eol + eol if done else b"")


def decoder(thinking: bool = False, names: dict[str, str] | None = None) -> ChatStreamDecoder:
    return ChatStreamDecoder(
        model="gpt-6-sol", tool_names=names or {}, thinking=thinking, input_estimate=42
    )


def run(chunks: list[Any], **kw: Any) -> list[SSEEvent]:
    return decoder(**kw).feed(sse(chunks))


def assemble(events: list[SSEEvent]) -> Message:
    snapshot = None
    bufs: dict[int, bytes] = {}
    for event in events:
        assert event.raw == b"event: " + event.name.encode() + b"\ndata: " + event.data + b"\n\n"
        data = event.json()
        assert data["type"] == event.name
        snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)  # type: ignore[arg-type]
    assert snapshot is not None
    return Message.model_validate(snapshot.to_dict())


def call(
    index: int, id_: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    tc: dict[str, Any] = {"index": index, "function": {}}
    if id_:
        tc["id"], tc["type"] = id_, "function"
    if name is not None:
        tc["function"]["name"] = name
    if args is not None:
        tc["function"]["arguments"] = args
    return {"tool_calls": [tc]}


TEXT = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
]

# (rule, chunks, decoder options, expected: stop_reason, content as plain dicts (signature checked apart))
STOPS = [
    ("stop -> end_turn", "stop", "end_turn"),
    ("length -> max_tokens", "length", "max_tokens"),
    ("tool_calls -> tool_use", "tool_calls", "tool_use"),
    ("function_call -> tool_use", "function_call", "tool_use"),
    ("content_filter -> refusal", "content_filter", "refusal"),
    ("unknown -> end_turn", "something_new", "end_turn"),
]


@pytest.mark.parametrize(("finish", "expected"), [s[1:] for s in STOPS], ids=[s[0] for s in STOPS])
def test_stop_reasons(finish: str, expected: str) -> None:
    message = assemble(run([*TEXT, chunk(finish=finish), usage_chunk()]))
    assert message.stop_reason == expected
    assert [b.model_dump() for b in message.content] == [
        {"type": "text", "text": "Hello", "citations": None}
    ]


def test_message_start_carries_the_id_model_and_estimate() -> None:
    first = run(TEXT)[0]
    assert first.name == "message_start"
    message = first.json()["message"]
    assert message["id"] == "msg_" + ID
    assert message["model"] == "gpt-6-sol"
    assert message["usage"] == {"input_tokens": 42, "output_tokens": 0}


CONTENT_CASES: list[tuple[str, list[Any], dict[str, Any], list[dict[str, Any]], str]] = [
    (
        "reasoning_content -> a signed thinking block when asked",
        [
            chunk({"reasoning_content": "Hmm, "}),
            chunk({"reasoning_content": "ok"}),
            chunk({"content": "Hi"}),
            chunk(finish="stop"),
        ],
        {"thinking": True},
        [{"type": "thinking", "thinking": "Hmm, ok"}, {"type": "text", "text": "Hi"}],
        "end_turn",
    ),
    (
        "reasoning (vLLM, Ollama) -> thinking too",
        [chunk({"reasoning": "Hmm"}), chunk({"content": "Hi"}), chunk(finish="stop")],
        {"thinking": True},
        [{"type": "thinking", "thinking": "Hmm"}, {"type": "text", "text": "Hi"}],
        "end_turn",
    ),
    (
        "both names with the same text are not doubled",
        [
            chunk({"reasoning": "Hmm", "reasoning_content": "Hmm"}),
            chunk({"content": "Hi"}),
            chunk(finish="stop"),
        ],
        {"thinking": True},
        [{"type": "thinking", "thinking": "Hmm"}, {"type": "text", "text": "Hi"}],
        "end_turn",
    ),
    (
        "reasoning dropped when thinking was not asked",
        [chunk({"reasoning_content": "Hmm"}), chunk({"content": "Hi"}), chunk(finish="stop")],
        {"thinking": False},
        [{"type": "text", "text": "Hi"}],
        "end_turn",
    ),
    (
        "parallel tool calls by index, ids kept, names mapped back, arguments streamed",
        [
            chunk({"content": "Let me"}),
            chunk(call(0, "call_a", "get", "")),
            chunk(call(0, args='{"q": ')),
            chunk(call(0, args='"x"}')),
            chunk(call(1, "call_b", "web_fetch_1a2b3c4d", '{"url": "u"}')),
            chunk(finish="tool_calls"),
        ],
        {"names": {"web_fetch_1a2b3c4d": "web.fetch"}},
        [
            {"type": "text", "text": "Let me"},
            {"type": "tool_use", "id": "call_a", "name": "get", "input": {"q": "x"}},
            {"type": "tool_use", "id": "call_b", "name": "web.fetch", "input": {"url": "u"}},
        ],
        "tool_use",
    ),
    (
        "stop with tool calls -> tool_use",
        [chunk(call(0, "call_a", "get", "{}")), chunk(finish="stop")],
        {},
        [{"type": "tool_use", "id": "call_a", "name": "get", "input": {}}],
        "tool_use",
    ),
    (
        "a name that comes after the first fragment is waited for",
        [
            chunk(call(0, "call_a", None, '{"a":')),
            chunk(call(0, None, "get", "1}")),
            chunk(finish="tool_calls"),
        ],
        {},
        [{"type": "tool_use", "id": "call_a", "name": "get", "input": {"a": 1}}],
        "tool_use",
    ),
    (
        "tool calls without an index: a new id is a new call",
        [
            chunk({"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": "{"}}]}),
            chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
            chunk(finish="tool_calls"),
        ],
        {},
        [
            {"type": "tool_use", "id": "c1", "name": "a", "input": {}},
            {"type": "tool_use", "id": "c2", "name": "b", "input": {}},
        ],
        "tool_use",
    ),
    (
        "invalid JSON arguments (a vLLM parser) -> _invalid_arguments, the stream goes on",
        [
            chunk(call(0, "call_a", "get", '{"q": ')),
            chunk(call(0, args="'x'}")),
            chunk(call(1, "call_b", "put", '{"ok": true}')),
            chunk(finish="tool_calls"),
        ],
        {},
        [
            {
                "type": "tool_use",
                "id": "call_a",
                "name": "get",
                "input": {"_invalid_arguments": "{\"q\": 'x'}"},
            },
            {"type": "tool_use", "id": "call_b", "name": "put", "input": {"ok": True}},
        ],
        "tool_use",
    ),
    (
        "arguments that are JSON but not an object -> _invalid_arguments",
        [chunk(call(0, "call_a", "get", "[1, 2]")), chunk(finish="tool_calls")],
        {},
        [
            {
                "type": "tool_use",
                "id": "call_a",
                "name": "get",
                "input": {"_invalid_arguments": "[1, 2]"},
            }
        ],
        "tool_use",
    ),
    (
        "arguments cut short by the output cap -> _invalid_arguments, stop max_tokens",
        [chunk(call(0, "call_a", "get", '{"path": "/tm')), chunk(finish="length")],
        {},
        [
            {
                "type": "tool_use",
                "id": "call_a",
                "name": "get",
                "input": {"_invalid_arguments": '{"path": "/tm'},
            }
        ],
        "max_tokens",
    ),
    (
        "no arguments at all -> input {}",
        [chunk(call(0, "call_a", "get", "")), chunk(finish="tool_calls")],
        {},
        [{"type": "tool_use", "id": "call_a", "name": "get", "input": {}}],
        "tool_use",
    ),
    (
        "refusal text -> a text block and stop_reason refusal",
        [chunk({"refusal": "I can't"}), chunk(finish="stop")],
        {},
        [{"type": "text", "text": "I can't"}],
        "refusal",
    ),
    (
        "choices other than the first are ignored",
        [
            {
                "id": ID,
                "choices": [
                    {"index": 1, "delta": {"content": "other"}},
                    {"index": 0, "delta": {"content": "mine"}},
                ],
            },
            chunk(finish="stop"),
        ],
        {},
        [{"type": "text", "text": "mine"}],
        "end_turn",
    ),
]


def _plain(message: Message) -> list[dict[str, Any]]:
    out = []
    for block in message.content:
        d = block.model_dump(exclude_none=True)
        if d["type"] == "thinking":
            assert d.pop("signature").startswith(GATEWAY_SIGNATURE_PREFIX)
        out.append(d)
    return out


@pytest.mark.parametrize(
    ("rule", "chunks", "opts", "content", "stop"), CONTENT_CASES, ids=[c[0] for c in CONTENT_CASES]
)
def test_content(
    rule: str, chunks: list[Any], opts: dict[str, Any], content: list[dict[str, Any]], stop: str
) -> None:
    message = assemble(run([*chunks, usage_chunk()], **opts))
    assert _plain(message) == content
    assert message.stop_reason == stop


@pytest.mark.parametrize(
    "fragments",
    [['{"q": ', '"x"}'], ['{"q": ', "'x'}"], ["[1,", "2]"], ['{"a": "\\u12']],
    ids=["valid", "invalid", "not an object", "cut in an escape"],
)
def test_tool_arguments_reach_the_client_as_one_parseable_delta(fragments: list[str]) -> None:
    # The SDKs parse each partial_json as it comes (anthropic's accumulate_event with jiter):
    # every fragment the client gets must keep the buffer valid JSON, so the arguments are sent
    # once, whole, at the end of the block.
    chunks = [chunk(call(0, "call_a", "get", fragments[0]))]
    chunks += [chunk(call(0, args=f)) for f in fragments[1:]]
    events = run([*chunks, chunk(finish="tool_calls"), usage_chunk()])
    partials = [
        e.json()["delta"]["partial_json"]
        for e in events
        if e.name == "content_block_delta" and e.json()["delta"]["type"] == "input_json_delta"
    ]
    assert len(partials) == 1
    assert isinstance(orjson.loads(partials[0]), dict)
    assert isinstance(assemble(events).content[0].input, dict)  # type: ignore[union-attr]


def test_the_signature_is_the_prefix_and_a_digest_of_the_text() -> None:
    def sig(text: str) -> str:
        m = assemble(run([chunk({"reasoning_content": text}), chunk(finish="stop")], thinking=True))
        return m.content[0].signature  # type: ignore[union-attr]

    assert sig("a") == sig("a") != sig("b")
    assert len(sig("a")) == len(GATEWAY_SIGNATURE_PREFIX) + 16


def test_dropped_reasoning_still_counts_as_output() -> None:
    d = decoder(thinking=False)
    d.feed(sse([chunk({"reasoning_content": "x" * 40}), chunk(finish="stop")]))
    assert d.output_chars == 40


USAGE_CASES = [
    ("cached subtracted from input", usage_chunk(1000, 50, cached=768), (232, 768, 50, 0)),
    ("reasoning -> output_tokens_details", usage_chunk(10, 50, reasoning=30), (10, 0, 50, 30)),
    ("cached over prompt is clamped", usage_chunk(10, 5, cached=20), (0, 10, 5, 0)),
    (
        "DeepSeek's prompt_cache_hit_tokens",
        {
            "id": ID,
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 3,
                "prompt_cache_hit_tokens": 60,
                "prompt_cache_miss_tokens": 40,
            },
        },
        (40, 60, 3, 0),
    ),
    (
        "Ollama: no details",
        {"id": ID, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
        (9, 0, 2, 0),
    ),
]


@pytest.mark.parametrize(
    ("rule", "usage", "expected"), USAGE_CASES, ids=[c[0] for c in USAGE_CASES]
)
def test_usage(rule: str, usage: dict[str, Any], expected: tuple[int, int, int, int]) -> None:
    d = decoder()
    events = d.feed(sse([*TEXT, chunk(finish="stop"), usage]))
    delta = next(e for e in events if e.name == "message_delta").json()
    u = delta["usage"]
    assert (
        u["input_tokens"],
        u["cache_read_input_tokens"],
        u["output_tokens"],
        u["output_tokens_details"]["thinking_tokens"],
    ) == expected
    assert u["cache_creation_input_tokens"] == 0
    assert d.usage_reported


def test_message_delta_waits_for_the_usage_chunk() -> None:
    d = decoder()
    first = d.feed(sse([*TEXT, chunk(finish="stop")], done=False))
    assert [e.name for e in first][-1] == "content_block_stop"
    second = d.feed(sse([usage_chunk(7, 3)], done=False))
    assert [e.name for e in second] == ["message_delta", "message_stop"]
    assert second[0].json()["usage"]["input_tokens"] == 7
    assert d.feed(b"data: [DONE]\n\n") == []


def test_usage_in_the_finish_chunk_ends_at_once() -> None:
    d = decoder()
    u = usage_chunk(8, 2)["usage"]
    events = d.feed(sse([*TEXT, chunk(finish="stop", usage=u)], done=False))
    assert [e.name for e in events][-2:] == ["message_delta", "message_stop"]
    assert d.ended


def test_no_usage_at_all_is_estimated_at_done() -> None:
    d = decoder()
    events = d.feed(sse([chunk({"content": "x" * 10}), chunk(finish="stop")]))
    u = events[-2].json()["usage"]
    assert (u["input_tokens"], u["output_tokens"]) == (42, 3)
    assert not d.usage_reported


def test_close_without_done() -> None:
    d = decoder()
    d.feed(sse([*TEXT, chunk(finish="stop")], done=False))
    assert [e.name for e in d.close()] == ["message_delta", "message_stop"]
    cut = decoder()
    cut.feed(sse(TEXT, done=False))
    with pytest.raises(ChatStreamError):
        cut.close()


def test_an_error_chunk_becomes_an_error_event() -> None:
    err = {
        "error": {
            "message": "Rate limit reached; key sk-proj-abcdef123456",
            "type": "rate_limit_exceeded",
            "code": "rate_limit_exceeded",
        }
    }
    events = run([*TEXT, err, chunk({"content": "late"})])
    assert events[-1].name == "error"
    data = events[-1].json()
    assert data["error"]["type"] == "rate_limit_error"
    assert "sk-proj" not in data["error"]["message"]
    assert all("late" not in e.data.decode() for e in events)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("server_error", "api_error"),
        ("overloaded", "overloaded_error"),
        ("invalid_request_error", "invalid_request_error"),
        (None, "api_error"),
    ],
)
def test_error_types(code: str | None, kind: str) -> None:
    events = run([{"error": {"message": "m", "type": code}}])
    assert events[0].json()["error"]["type"] == kind


@pytest.mark.parametrize("bad", [b"{not json", b"[1, 2]", b'"text"'])
def test_unreadable_chunks_raise_a_connection_error(bad: bytes) -> None:
    with pytest.raises(ChatStreamError) as caught:
        decoder().feed(sse([TEXT[0], bad]))
    assert isinstance(caught.value, ConnectionError)


def test_done_without_any_chunk_raises() -> None:
    with pytest.raises(ChatStreamError):
        decoder().feed(b"data: [DONE]\n\n")


def test_interleaved_tool_calls_raise() -> None:
    with pytest.raises(ChatStreamError):
        run(
            [
                chunk(call(0, "a", "x", "{")),
                chunk(call(1, "b", "y", "{}")),
                chunk(call(0, args="}")),
            ]
        )


def test_comments_and_crlf_and_bare_cr() -> None:
    chunks = [*TEXT, chunk(finish="stop"), usage_chunk()]
    plain = [e.raw for e in run(chunks)]
    for eol in (b"\r\n", b"\r"):
        raw = b": keep-alive" + eol + eol + sse(chunks, eol=eol)
        assert [e.raw for e in decoder().feed(raw)] == plain


# -- properties ----------------------------------------------------------------------------------


def _fragments(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


_piece = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6
)
_segment = st.one_of(
    st.tuples(st.just("text"), st.lists(_piece, min_size=1, max_size=3)),
    st.tuples(
        st.sampled_from(["reasoning", "reasoning_content"]),
        st.lists(_piece, min_size=1, max_size=3),
    ),
    st.tuples(
        st.just("tool"),
        st.builds(
            lambda obj, cuts: _fragments(orjson.dumps(obj).decode(), cuts),
            st.dictionaries(
                st.text(max_size=4),
                st.one_of(st.integers(-1000, 1000), st.text(max_size=4)),
                max_size=3,
            ),
            st.lists(st.integers(0, 40), max_size=4),
        ),
    ),
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int, bool]:
    segments = draw(st.lists(_segment, max_size=6))
    chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
    tool = 0
    for kind, pieces in segments:
        if kind == "tool":
            chunks.append(chunk(call(tool, f"call_{tool}", f"t{tool}", "")))
            chunks.extend(chunk(call(tool, args=p)) for p in pieces)
            tool += 1
        else:
            chunks.extend(chunk({kind: p}) for p in pieces)
    chunks.append(
        chunk(finish=draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"])))
    )
    prompt = draw(st.integers(0, 10**6))
    cached = draw(st.integers(0, prompt))
    placement = draw(st.sampled_from(["own", "finish", "none"]))
    u = usage_chunk(prompt, draw(st.integers(0, 10**5)), cached=cached)
    if placement == "own":
        chunks.append(u)
    elif placement == "finish":
        chunks[-1]["usage"] = u["usage"]
    return chunks, prompt, cached, placement != "none"


def _check_order(events: list[SSEEvent]) -> None:
    names = [e.name for e in events]
    assert names[0] == "message_start" and names.count("message_start") == 1
    assert names[-2:] == ["message_delta", "message_stop"] and names.count("message_stop") == 1
    open_index: int | None = None
    last = -1
    for event in events[1:-2]:
        data = event.json()
        if event.name == "content_block_start":
            assert open_index is None and data["index"] == last + 1
            open_index = last = data["index"]
        elif event.name == "content_block_delta":
            assert data["index"] == open_index
        elif event.name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
        else:
            raise AssertionError(f"unexpected {event.name} inside the message")
    assert open_index is None


@settings(max_examples=150, deadline=None)
@given(streams(), st.sampled_from([b"\n", b"\r\n", b"\r"]), st.booleans(), st.data())
def test_any_split_gives_the_same_valid_events(
    stream: tuple[list[dict[str, Any]], int, int, bool],
    eol: bytes,
    thinking: bool,
    data: st.DataObject,
) -> None:
    chunks, prompt, cached, has_usage = stream
    raw = sse(chunks, eol=eol)
    whole = decoder(thinking=thinking).feed(raw)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    split = decoder(thinking=thinking)
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    events = [e for piece in pieces for e in split.feed(piece)]
    assert [(e.name, e.raw) for e in events] == [(e.name, e.raw) for e in whole]
    _check_order(events)
    message = assemble(events)  # the SDK's accumulator and Message accept it
    usage = events[-2].json()["usage"]
    if has_usage:
        assert usage["input_tokens"] + usage["cache_read_input_tokens"] == prompt
        assert usage["cache_read_input_tokens"] == cached
    kinds = {b.type for b in message.content}
    assert thinking or "thinking" not in kinds


def test_a_crlf_split_across_reads_is_one_line_end() -> None:
    # A chunk's JSON over two data lines (SSE joins them with "\n", valid JSON whitespace),
    # the read cut between "\r" and "\n": read as two line ends it would end the event early.
    first = orjson.dumps(chunk({"content": "Hi"}))
    at = first.index(b",") + 1  # between two members, where a line break is whitespace
    raw = (
        b"data: "
        + first[:at]
        + b"\r\ndata: "
        + first[at:]
        + b"\r\n\r\n"
        + sse([chunk(finish="stop")])
    )
    cut = raw.index(b"\r\n") + 1
    d = decoder()
    events = d.feed(raw[:cut]) + d.feed(raw[cut:])
    assert [e.raw for e in events] == [
        e.raw for e in run([chunk({"content": "Hi"}), chunk(finish="stop")])
    ]
