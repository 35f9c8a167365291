"""The Responses relay's stream reader (gateway/providers/openai/responses_relay.py): each
provider event named in the internal dialect, its own bytes kept for the client, the usage
normalised (cached tokens out of the input, reasoning inside the output), whatever the reads'
split."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.openai.relay import RelayStreamError
from gateway.providers.openai.responses_relay import (
    ResponsesRelayDecoder,
    failure_events,
    usage_of,
)
from gateway.usage import UsageTracker

USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 107,
}
RESPONSE = {"id": "resp_1", "object": "response", "model": "gpt-x", "output": [], "usage": None}


def event(kind: str, n: int, **fields: object) -> bytes:
    data = {"type": kind, "sequence_number": n, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
CREATED = event("response.created", 0, response=RESPONSE)
PROGRESS = event("response.in_progress", 1, response=RESPONSE)
ADDED = event("response.output_item.added", 2, output_index=0, item=ITEM)
DELTA = event("response.output_text.delta", 3, item_id="msg_1", delta="Hello", logprobs=[])
ARGS = event("response.function_call_arguments.delta", 4, item_id="fc_1", delta='{"a":1}')
TEXT_DONE = event("response.output_text.done", 5, item_id="msg_1", text="Hello")
COMPLETED = event("response.completed", 6, response={**RESPONSE, "usage": USAGE})
STREAM = [CREATED, PROGRESS, ADDED, DELTA, ARGS, TEXT_DONE, COMPLETED]


def names(chunks: list[bytes]) -> list[str]:
    decoder = ResponsesRelayDecoder(10)
    return [e.name for c in chunks for e in decoder.feed(c)]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (
            STREAM,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "ping",
                "message_delta",
                "message_stop",
            ],
        ),
        # A finished response with no output item still commits (never retried elsewhere).
        (
            [CREATED, COMPLETED],
            ["message_start", "content_block_start", "message_delta", "message_stop"],
        ),
        # Failed before any output: an error, so another deployment may answer.
        (
            [CREATED, event("response.failed", 1, response={**RESPONSE, "error": {"code": "x"}})],
            ["message_start", "error"],
        ),
        # Failed after output: the end, with the usage it reports (none here).
        (
            [CREATED, ADDED, event("response.failed", 3, response=RESPONSE)],
            ["message_start", "content_block_start", "message_stop"],
        ),
        ([event("error", 0, error={"type": "server_error", "message": "boom"})], ["error"]),
        ([event("error", 0, code="server_error", message="flat")], ["error"]),  # the spec's
        ([event("response.web_search_call.searching", 0, item_id="ws")], ["ping"]),
        (
            [event("response.incomplete", 0, response={**RESPONSE, "usage": USAGE})],
            ["content_block_start", "message_delta", "message_stop"],
        ),
    ],
)
def test_events_are_named_in_the_internal_dialect(chunks: list[bytes], expected: list[str]) -> None:
    assert names(chunks) == expected


def test_each_event_keeps_its_own_bytes_and_the_usage_is_normalised() -> None:
    decoder = ResponsesRelayDecoder(10)
    events = [e for c in STREAM for e in decoder.feed(c)]
    assert b"".join(e.raw for e in events) == b"".join(STREAM)
    tracker = UsageTracker()
    for e in events:
        tracker.absorb(e.name, e.json())
    assert tracker.exact and tracker.stop_reason == "end_turn"
    assert tracker.usage["input_tokens"] == 36  # 100 including 64 cached
    assert tracker.usage["cache_read_input_tokens"] == 64
    assert tracker.usage["output_tokens"] == 7
    assert tracker.usage["output_tokens_details"] == {"thinking_tokens": 2}
    assert tracker.output_chars == len("Hello") + len('{"a":1}')
    stop = events[-1].json()
    assert stop["status"] == "completed" and stop["response"]["usage"] == USAGE
    assert decoder.response == RESPONSE and decoder.sequence == 6


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (USAGE, (36, 64, 7, 2)),
        ({"input_tokens": 5, "output_tokens": 3}, (5, 0, 3, 0)),  # older servers: no details
        ({}, (0, 0, 0, 0)),
        # Nonsense never bills negative or more cached than sent, nor reasoning past output.
        (
            {
                "input_tokens": 3,
                "input_tokens_details": {"cached_tokens": 9},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 5},
            },
            (0, 3, 1, 1),
        ),
        ({"input_tokens": -4, "output_tokens": "7"}, (0, 0, 0, 0)),
    ],
)
def test_usage_table(usage: dict[str, object], expected: tuple[int, int, int, int]) -> None:
    out = usage_of(usage)
    got = (
        out["input_tokens"],
        out["cache_read_input_tokens"],
        out["output_tokens"],
        out["output_tokens_details"]["thinking_tokens"],
    )
    assert got == expected
    assert out["cache_creation_input_tokens"] == 0


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9))
def test_usage_keeps_every_input_token_once(
    prompt: int, cached: int, output: int, reasoning: int
) -> None:
    out = usage_of(
        {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning},
        }
    )
    assert out["input_tokens"] + out["cache_read_input_tokens"] == prompt
    assert out["input_tokens"] >= 0 and out["cache_read_input_tokens"] <= prompt
    assert out["output_tokens"] == output
    assert 0 <= out["output_tokens_details"]["thinking_tokens"] <= output


@given(st.lists(st.integers(1, 40), max_size=12), st.booleans())
def test_any_split_of_the_reads_gives_the_same_events(cuts: list[int], crlf: bool) -> None:
    wire = b"".join(STREAM)
    if crlf:
        wire = wire.replace(b"\n", b"\r\n")
    reads, at = [], 0
    for cut in cuts:
        reads.append(wire[at : at + cut])
        at += cut
    reads.append(wire[at:])
    decoder = ResponsesRelayDecoder(10)
    events = [e for r in reads for e in decoder.feed(r)]
    assert [e.name for e in events] == names(STREAM)
    assert b"".join(e.raw for e in events) == b"".join(STREAM)


def test_an_event_that_is_not_json_breaks_the_stream() -> None:
    with pytest.raises(RelayStreamError):
        ResponsesRelayDecoder(1).feed(b"event: x\ndata: {nope\n\n")
    with pytest.raises(RelayStreamError):
        ResponsesRelayDecoder(1).feed(b"data: [1]\n\n")


def test_failure_events_continue_the_numbering_and_parse_as_the_sdk_types() -> None:
    from openai.types.responses import ResponseErrorEvent, ResponseFailedEvent

    full = {
        **RESPONSE,
        "created_at": 1,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "status": "in_progress",
    }
    wire = failure_events(full, 6, "the provider stream failed", "server_error")
    blocks = [b for b in wire.split(b"\n\n") if b]
    datas = [orjson.loads(b.split(b"data: ", 1)[1]) for b in blocks]
    assert [d["sequence_number"] for d in datas] == [7, 8]
    error = ResponseErrorEvent.model_validate(datas[0])
    assert (error.code, error.message) == ("server_error", "the provider stream failed")
    failed = ResponseFailedEvent.model_validate(datas[1])
    assert failed.response.status == "failed" and failed.response.error is not None
    assert failed.response.model == "gpt-x" and failed.response.usage is None
