"""The Responses stream translator's bytes: pinned to a golden rendering (made with the
translator before its per-event fast path and byte templates), every event the canonical
orjson rendering of itself, and the fast path for text deltas equal to the general path on any
event sequence (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .openai_stream_helpers import MESSAGE_STOP, block_start, start, stop, text_delta
from .responses_stream_scenarios import SCENARIOS, render, translator

GOLDEN = orjson.loads((Path(__file__).parent / "responses_stream_golden.json").read_bytes())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_stream_bytes_match_the_golden_rendering(name: str) -> None:
    assert render(name).decode() == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_event_is_the_canonical_rendering_of_its_payload(name: str) -> None:
    blocks = render(name).split(b"\n\n")
    assert blocks[-1] == b""
    for block in blocks[:-1]:
        event, data = block.split(b"\n")
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert event == b"event: " + payload["type"].encode()
        assert data == b"data: " + orjson.dumps(payload)


def test_golden_file_covers_every_scenario() -> None:
    assert sorted(GOLDEN) == sorted(SCENARIOS)


# Event values the fast path must either serve exactly as the general path does or leave to it:
# odd indexes (bool, float, missing, another block's), non-string and empty text, other delta
# types, a block started again at the open text block's index.
_index = st.sampled_from([0, 1, 2, True, 1.0, None, -1])
_text = st.one_of(st.text(max_size=6), st.none(), st.integers(0, 3))
_delta = st.builds(
    lambda i, kind, text: {"type": "content_block_delta", "index": i,
                           "delta": {"type": kind, "text": text, "partial_json": text}},
    _index, st.sampled_from(["text_delta", "input_json_delta", "thinking_delta"]), _text,
)  # fmt: skip
_start = st.builds(
    lambda i, kind: block_start(i, {"type": kind, "text": "", "id": "t", "name": "f"}),
    _index, st.sampled_from(["text", "tool_use"]),
)  # fmt: skip
_stop = st.builds(stop, _index)
_event = st.one_of(_delta, _delta, _start, _stop, st.builds(text_delta, _index, st.text()))


def _general(events: list[dict[str, Any]]) -> bytes:
    """The same translation with every delta through the general path (_on_delta)."""
    t = translator()
    out = b""
    for event in events:
        if event.get("type") == "content_block_delta":
            out += t._on_delta(event)
        else:
            out += t.feed(event)
    return out + t.final_event()


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=14))
def test_fast_path_equals_the_general_path(middle: list[dict[str, Any]]) -> None:
    events = [start(), block_start(0, {"type": "text", "text": ""}), *middle, MESSAGE_STOP]
    t = translator()
    fast = b"".join(t.feed(event) for event in events) + t.final_event()
    assert fast == _general(events)
