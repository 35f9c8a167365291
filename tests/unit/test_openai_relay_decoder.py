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
