"""The pure stream translators on one upstream event sequence: the workload `bench.instructions`
runs under callgrind.

`python -m bench.instr_translators --events-file SHORT --events-file LONG --streams R` reads
upstream event sequences (written by the parent with `SHAPES`: the fake upstream's own bytes
for a text stream, a tool call's argument fragments for `tool`) and, for each sequence and each
API in `STREAMS` order, translates R streams of it with a fresh translator each, as the gateway
does per request. A `mark()` closes each section: under `--dump-before=getppid` callgrind
writes one count per section, so one process measures everything, after its start-up, and a
section holds nothing but the streams (construction, one `feed` per event, the final event).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from typing import Any

import orjson

from gateway.protocols.openai.stream import ChatStreamTranslator
from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import Rendering

MODEL = "anthropic/claude-sonnet-5-5"
REQUEST_ID = "01JBENCH0000000000000000000"
CREATED = 1764633600
# What the Responses handler echoes for the benchmark's request (bench.loadgen: model, input,
# max_output_tokens, stream, store: false); the shape `inbound._echo` builds.
ECHO: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": 64,
    "max_tool_calls": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": False,
    "temperature": None,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": None,
    "truncation": "disabled",
    "user": None,
}


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """The `data:` payloads of an SSE byte stream (chunked framing included), parsed."""
    events = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: "):
            events.append(orjson.loads(line[6:]))
    return events


def text_events(tokens: int) -> list[dict[str, Any]]:
    """The fake upstream's stream of `tokens` text deltas, as the gateway parses it."""
    # Imported here: the simulator it pulls in (aiohttp) would cost the measured child
    # ~1.5 G instructions of start-up; the child gets the events as a file instead.
    from bench.fake_upstream import Config, Replies

    replies = Replies(Config(events=tokens))
    body = orjson.dumps({"model": MODEL, "max_tokens": tokens, "stream": True, "messages": []})
    return parse_sse(b"".join(replies.stream_events(body)))


def tool_events(fragments: int) -> list[dict[str, Any]]:
    """One tool call whose arguments arrive in `fragments` input_json_delta events."""
    usage = {"input_tokens": 250, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"id": "msg_bench", "type": "message", "role": "assistant",
                        "model": "claude", "content": [], "stop_reason": None, "usage": usage},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_bench", "name": "lookup",
                              "input": {}},
        },
    ]  # fmt: skip
    events += [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '"k": 1, ' if i else '{"a": '},
        }
        for i in range(fragments)
    ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": fragments},
        },
        {"type": "message_stop"},
    ]
    return events


SHAPES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "text": text_events,
    "tool": tool_events,
}


def chat_stream(events: list[dict[str, Any]]) -> int:
    """One chat.completions stream, as gateway.handlers.chat drives it (usage chunk asked for)."""
    t = ChatStreamTranslator(
        request_id=REQUEST_ID, model_name=MODEL, created=CREATED, include_usage=True
    )
    size = 0
    for event in events:
        size += len(t.feed(event))
    return size + len(t.usage_chunk() + ChatStreamTranslator.DONE)


def responses_stream(events: list[dict[str, Any]]) -> int:
    """One Responses stream, as gateway.handlers.responses drives it (store: false)."""
    t = ResponsesStreamTranslator(
        Rendering(
            request_id=REQUEST_ID,
            model_name=MODEL,
            created_at=CREATED,
            echo=ECHO,
            seal=None,
            summary=False,
            include_encrypted=False,
        )
    )
    size = 0
    for event in events:
        size += len(t.feed(event))
    return size + len(t.final_event())


STREAMS: dict[str, Callable[[list[dict[str, Any]]], int]] = {
    "chat": chat_stream,
    "responses": responses_stream,
}


def mark() -> None:
    """A section boundary: callgrind runs with `--dump-before=getppid`, so each call closes one
    dump file (one section's instruction count) and starts the next."""
    os.getppid()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events-file",
        action="append",
        required=True,
        metavar="F",
        help="an upstream event sequence, a JSON list (repeat: short, long)",
    )
    parser.add_argument("--streams", type=int, required=True)
    args = parser.parse_args(argv)  # fmt: skip
    sequences = []
    for name in args.events_file:
        with open(name, "rb") as f:
            sequences.append(orjson.loads(f.read()))
    # One stream of each kind before the measured ones: first-call costs (lazy imports,
    # interned strings, orjson's caches) are not the per-stream cost.
    for events in sequences:
        for run in STREAMS.values():
            run(events)
    streams = range(args.streams)
    mark()  # dump 1: start-up and warm-up
    for events in sequences:
        for run in STREAMS.values():  # each sequence x API, in STREAMS order
            # Every section starts from the same collector state (an empty young generation):
            # otherwise when the collector runs depends on what ran before. Its own dump is
            # discarded; the streams' collections are in theirs, as they are in the gateway.
            gc.collect()
            mark()
            for _ in streams:
                run(events)
            mark()
    sys.stdout.write("ok\n")


if __name__ == "__main__":
    main()
