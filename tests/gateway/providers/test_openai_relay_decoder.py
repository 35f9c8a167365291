"""The relay decoder (gateway/providers/openai/relay.py): each provider chunk named in the
internal dialect, its own bytes kept for the client, whatever the reads' split."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.openai.relay import (
    DONE,
    ModelRename,
    RelayDecoder,
    RelayStreamError,
    rename_model,
)
from gateway.usage import UsageTracker


def chunk(**fields: object) -> bytes:
    return b"data: " + orjson.dumps({"id": "c1", "model": "gpt-x", **fields}) + b"\n\n"


ROLE = chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
HELLO = chunk(choices=[{"index": 0, "delta": {"content": "Hello"}}])
REASON = chunk(choices=[{"index": 0, "delta": {"reasoning_content": "hmm"}}])
CALL = chunk(
    choices=[{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]
)
FINISH = chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
USAGE = chunk(
    choices=[],
    usage={
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 2},
    },
)
STREAM = [ROLE, HELLO, REASON, CALL, FINISH, USAGE, DONE]


def names(data: bytes) -> list[str]:
    return [e.name for e in RelayDecoder(5).feed(data)]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([ROLE], ["message_start"]),  # a role-only first chunk is not content yet
        ([HELLO], ["message_start", "content_block_delta"]),
        ([ROLE, HELLO], ["message_start", "content_block_delta"]),
        ([ROLE, FINISH], ["message_start", "content_block_delta"]),
        ([ROLE, USAGE], ["message_start", "message_delta"]),
        ([ROLE, DONE], ["message_start", "message_stop"]),
        ([b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'], ["error"]),
    ],
)
def test_chunks_are_named_in_the_dialect(chunks: list[bytes], expected: list[str]) -> None:
    assert names(b"".join(chunks)) == expected


def test_each_chunk_goes_out_once_as_it_came() -> None:
    events = RelayDecoder(5).feed(b"".join(STREAM))
    assert b"".join(e.raw for e in events) == b"".join(STREAM)


def test_usage_is_normalised_and_the_tracker_bills_it_exactly() -> None:
    tracker = UsageTracker()
    for event in RelayDecoder(5).feed(b"".join(STREAM)):
        tracker.absorb(event.name, event.json())
    assert tracker.exact and tracker.stop_reason == "stop"
    assert tracker.usage["input_tokens"] == 36  # prompt − cached: cached input is not twice
    assert tracker.usage["cache_read_input_tokens"] == 64
    assert tracker.usage["output_tokens"] == 7
    assert tracker.output_chars == len("Hello") + len("hmm") + len("{}")


def test_a_cut_stream_keeps_the_input_estimate_and_counts_the_output() -> None:
    tracker = UsageTracker()
    for event in RelayDecoder(40).feed(ROLE + HELLO):
        tracker.absorb(event.name, event.json())
    assert not tracker.exact and tracker.usage["input_tokens"] == 40


def test_a_chunk_that_is_not_json_breaks_the_stream() -> None:
    with pytest.raises(RelayStreamError):
        RelayDecoder(1).feed(b"data: {nope\n\n")


def test_rename_model_covers_both_spacings() -> None:
    rename = ModelRename("a", "b")
    assert rename(b'{"model":"a"}') == b'{"model":"b"}'
    assert rename(b'{"model": "a"}') == b'{"model": "b"}'
    assert rename(b'data: {"model":"a"}\n\ndata: {"model":"a"}\n\n').count(b'"b"') == 2
    assert ModelRename("a", "a")(b'{"model":"a"}') == b'{"model":"a"}'
    assert rename_model(b'{"model": "a"}', b'"a"', b'"b"') == b'{"model": "b"}'  # one chunk


@given(st.lists(st.integers(min_value=0, max_value=len(b"".join(STREAM))), max_size=8))
def test_any_split_of_the_reads_gives_the_same_events(cuts: list[int]) -> None:
    data = b"".join(STREAM).replace(b"\n", b"\r\n")
    whole = [(e.name, e.json(), e.raw) for e in RelayDecoder(5).feed(data)]
    decoder, parts, start = RelayDecoder(5), [], 0
    for cut in sorted(cuts):
        parts.extend(decoder.feed(data[start:cut]))
        start = cut
    parts.extend(decoder.feed(data[start:]))
    assert [(e.name, e.json(), e.raw) for e in parts] == whole


# --- the template fast path: chunks that differ from the first text chunk only in their text ---

PLAIN = [chunk(choices=[{"index": 0, "delta": {"content": t}}]) for t in ("a b", "c", "", "dé")]


def test_plain_chunks_of_one_read_are_one_event_with_their_bytes() -> None:
    data = ROLE + HELLO + b"".join(PLAIN) + FINISH + DONE
    events = RelayDecoder(5).feed(data)
    assert [e.name for e in events] == [
        "message_start",
        "content_block_delta",  # HELLO, parsed: the template
        "content_block_delta",  # the four plain chunks, not parsed
        "content_block_delta",  # FINISH
        "message_stop",
    ]
    assert events[2].raw == b"".join(PLAIN)
    assert events[2].json()["delta"]["text"] == "a bcdé"
    assert b"".join(e.raw for e in events) == data


def test_a_paced_plain_chunk_is_one_event() -> None:
    decoder = RelayDecoder(5)
    decoder.feed(ROLE + HELLO)
    for plain, text in zip(PLAIN, ("a b", "c", "", "dé"), strict=True):
        (event,) = decoder.feed(plain)
        assert (event.name, event.raw, event.json()["delta"]["text"]) == (
            "content_block_delta",
            plain,
            text,
        )


@pytest.mark.parametrize(
    "bad",
    [
        HELLO.replace(b"Hello", b'He"llo'),  # a quote in the text: not JSON
        HELLO.replace(b'"Hello"}', b'"}'),  # the halves overlap
        HELLO.replace(b"Hello", b"He\x01llo"),  # a control character
        HELLO.replace(b"Hello", b"\xff"),  # not UTF-8
    ],
)
def test_a_chunk_of_the_template_shape_that_is_not_json_still_breaks_the_stream(
    bad: bytes,
) -> None:
    decoder = RelayDecoder(5)
    decoder.feed(ROLE + HELLO)
    with pytest.raises(RelayStreamError):
        decoder.feed(bad)
    with pytest.raises(RelayStreamError):
        RelayDecoder(5).feed(ROLE + HELLO + bad)


def _expected_chars(chunks: list[bytes]) -> int:
    """The oracle: the text each chunk's choices produced, read from the full parse."""
    total = 0
    for raw in chunks:
        for choice in orjson.loads(raw[6:]).get("choices") or []:
            delta = choice.get("delta") or {}
            total += len(delta.get("content") or "")
            if len(delta) > 2 or not delta.get("content"):
                total += len(delta.get("reasoning_content") or "")
                for call in delta.get("tool_calls") or ():
                    total += len(call["function"]["arguments"])
    return total


_texts = st.text(max_size=6)
_chunks = st.one_of(
    _texts.map(lambda t: {"choices": [{"index": 0, "delta": {"content": t}}]}),
    _texts.map(lambda t: {"choices": [{"index": 0, "delta": {"reasoning_content": t}}]}),
    _texts.map(
        lambda t: {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": t}}]}}
            ]
        }
    ),
    _texts.map(lambda t: {"choices": [{"index": 1, "delta": {"content": t}}]}),  # n > 1
    _texts.map(lambda t: {"choices": [{"index": 0, "delta": {"content": t}, "logprobs": None}]}),
    _texts.map(lambda t: {"id": "other", "choices": [{"index": 0, "delta": {"content": t}}]}),
    _texts.map(lambda t: {"choices": [{"delta": {"content": t}, "finish_reason": "stop"}]}),
)


@given(
    st.lists(_chunks, max_size=12),
    st.sampled_from([b'"model":"gpt-x"', b'"model": "gpt-x"']),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=6),
)
def test_the_fast_path_gives_the_bytes_and_usage_of_the_full_parse(
    bodies: list[dict], model: bytes, cuts: list[int]
) -> None:
    chunks = [ROLE, HELLO] + [
        b"data: " + orjson.dumps({"id": "c1", "model": "gpt-x", **b}) + b"\n\n" for b in bodies
    ]
    chunks = [c.replace(b'"model":"gpt-x"', model) for c in chunks]
    data = b"".join([*chunks, USAGE, DONE])
    decoder, events, start = RelayDecoder(5), [], 0
    for cut in sorted(c for c in cuts if c < len(data)):
        events += decoder.feed(data[start:cut])
        start = cut
    events += decoder.feed(data[start:])
    assert b"".join(e.raw for e in events) == data
    tracker = UsageTracker()
    for event in events:
        tracker.absorb(event.name, event.json())
    assert tracker.output_chars == _expected_chars(chunks)
    assert tracker.exact and tracker.usage["output_tokens"] == 7
    finished = any(b.get("choices", [{}])[0].get("finish_reason") for b in bodies)
    assert tracker.stop_reason == ("stop" if finished else "")
    assert [e.name for e in events][-2:] == ["message_delta", "message_stop"]
