"""Chat request -> Messages request: prompt caching, thinking with tools, and properties."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.protocols.openai.inbound import (
    InvalidRequest,
    ModelCaps,
    TranslatedRequest,
    attach_thinking,
    disable_thinking,
    translate_request,
)
from gateway.protocols.openai.outbound import thinking_blocks_by_tool_id
from gateway.protocols.openai.types import EFFORT_LEVELS

from .openai_helpers import CALL, CAPS, PDF, PNG, TOOL, USER, chat, text, user

CACHING = replace(CAPS, prompt_caching=True)
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = {"role": "system", "content": "Be brief."}


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Paths of every cache_control marker in an Anthropic body."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "cache_control":
                    found.append(path)
                else:
                    walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(body, "")
    return found


# -- automatic prompt caching -----------------------------------------------------------------

# (id, request fields, caps, auto_cache, expected breakpoint paths)
AUTO_CACHE: list[tuple[str, dict[str, Any], ModelCaps, bool, list[str]]] = [
    (
        "system-and-newest-message",
        {"messages": [SYSTEM, USER, {"role": "assistant", "content": "a"}, USER]},
        CACHING,
        True,
        [".messages[2].content[0]", ".system[0]"],
    ),
    (
        "last-of-several-system-blocks",
        {
            "messages": [
                SYSTEM,
                {"role": "developer", "content": "Dev."},
                user(text("a"), text("b")),
            ]
        },
        CACHING,
        True,
        [".messages[0].content[1]", ".system[1]"],
    ),
    (
        "tools-when-no-system",
        {"messages": [USER], "tools": [TOOL, {"type": "function", "function": {"name": "g"}}]},
        CACHING,
        True,
        [".messages[0].content[0]", ".tools[1]"],
    ),
    (
        "system-wins-over-tools",
        {"messages": [SYSTEM, USER], "tools": [TOOL]},
        CACHING,
        True,
        [".messages[0].content[0]", ".system[0]"],
    ),
    (
        "only-message-without-prefix",
        {"messages": [USER]},
        CACHING,
        True,
        [".messages[0].content[0]"],
    ),
    (
        "tool-result-last",
        {
            "messages": [
                USER,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            ]
        },
        CACHING,
        True,
        [".messages[2].content[0]"],
    ),
    ("opted-out", {"messages": [SYSTEM, USER]}, CACHING, False, []),
    ("model-without-caching", {"messages": [SYSTEM, USER]}, CAPS, True, []),
]


@pytest.mark.parametrize(
    ("fields", "caps", "auto", "expected"), [pytest.param(*c[1:], id=c[0]) for c in AUTO_CACHE]
)
def test_automatic_breakpoints(
    fields: dict[str, Any], caps: ModelCaps, auto: bool, expected: list[str]
) -> None:
    body = translate_request(chat(**fields), caps, auto_cache=auto).body
    paths = breakpoints(body)
    assert sorted(paths) == sorted(expected)
    assert all(marker == EPHEMERAL for marker in _markers(body))


def _markers(body: dict[str, Any]) -> list[Any]:
    out: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "cache_control" in node:
                out.append(node["cache_control"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body)
    return out


def test_string_content_carries_the_breakpoint_as_a_text_block() -> None:
    body = translate_request(chat(messages=[USER]), CACHING).body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]


MARK = {"type": "ephemeral", "ttl": "1h"}

# (id, request fields with one caller breakpoint, where it must land)
CALLER_CACHE: list[tuple[str, dict[str, Any], str]] = [
    (
        "text-part",
        {"messages": [SYSTEM, user({**text("a"), "cache_control": MARK}, text("b"))]},
        ".messages[0].content[0]",
    ),
    (
        "system-part",
        {"messages": [{"role": "system", "content": [{**text("S"), "cache_control": MARK}]}, USER]},
        ".system[0]",
    ),
    (
        "image-part",
        {
            "messages": [
                user(
                    {"type": "image_url", "image_url": {"url": PNG}, "cache_control": MARK},
                    text("x"),
                )
            ]
        },
        ".messages[0].content[0]",
    ),
    (
        "file-part",
        {
            "messages": [
                user({"type": "file", "file": {"file_data": PDF}, "cache_control": MARK}, text("x"))
            ]
        },
        ".messages[0].content[0]",
    ),
    ("tool", {"tools": [{**TOOL, "cache_control": MARK}], "messages": [SYSTEM, USER]}, ".tools[0]"),
    (
        "tool-function",
        {
            "tools": [{"type": "function", "function": {"name": "f", "cache_control": MARK}}],
            "messages": [SYSTEM, USER],
        },
        ".tools[0]",
    ),
    (
        "tool-message-part",
        {
            "messages": [
                USER,
                {"role": "assistant", "tool_calls": [CALL]},
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "content": [{**text("r"), "cache_control": MARK}],
                },
                {"role": "user", "content": "more"},
            ]
        },
        ".messages[2].content[0].content[0]",
    ),
]


@pytest.mark.parametrize(
    ("fields", "where"), [pytest.param(f, w, id=i) for i, f, w in CALLER_CACHE]
)
def test_caller_breakpoints_are_kept_and_none_added(fields: dict[str, Any], where: str) -> None:
    body = translate_request(chat(**fields), CACHING).body
    assert breakpoints(body) == [where]
    assert _markers(body) == [MARK]
    # Without prompt caching upstream, the caller's markers are stripped.
    assert breakpoints(translate_request(chat(**fields), CAPS).body) == []


def test_marker_on_a_dropped_empty_text_part_still_counts() -> None:
    part = {**text(""), "cache_control": EPHEMERAL}
    body = translate_request(chat(messages=[SYSTEM, user(part, text("x"))]), CACHING).body
    assert breakpoints(body) == []


def test_more_than_four_caller_breakpoints_are_refused() -> None:
    parts = [{**text(str(i)), "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(InvalidRequest) as info:
        translate_request(chat(messages=[user(*parts)]), CACHING)
    assert info.value.param == "messages[0].content[4].cache_control"
    # Stripped anyway when the model has no caching, so no error there.
    translate_request(chat(messages=[user(*parts)]), CAPS)


# -- thinking with tools ----------------------------------------------------------------------

THINK = {"type": "thinking", "thinking": "Let me call f.", "signature": "sig-1"}
REDACTED = {"type": "redacted_thinking", "data": "opaque"}


def tool_conversation(*assistant_turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A request whose assistant turns make the given tool calls, each answered."""
    messages: list[dict[str, Any]] = [USER]
    for calls in assistant_turns:
        messages.append({"role": "assistant", "content": "Checking.", "tool_calls": calls})
        messages.extend({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls)
    return chat(messages=messages, tools=[TOOL], reasoning_effort="high")


def call(call_id: str) -> dict[str, Any]:
    return {**CALL, "id": call_id}


def test_tool_call_ids_needing_thinking() -> None:
    result = translate_request(tool_conversation([call("a"), call("b")], [call("c")]), CAPS)
    assert result.tool_call_ids_needing_thinking == ["a", "b", "c"]
    assert result.thinking is True


def test_attach_thinking_inserts_blocks_once_at_turn_start() -> None:
    result = translate_request(tool_conversation([call("a"), call("b")]), CAPS)
    stored = {"a": [THINK, REDACTED], "b": [THINK, REDACTED]}
    assert attach_thinking(result.body, stored, thinking_requested=True) is True
    turn = result.body["messages"][1]
    assert [b["type"] for b in turn["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert turn["content"][:2] == [THINK, REDACTED]
    # Calling it again changes nothing.
    before = orjson.dumps(result.body)
    assert attach_thinking(result.body, stored, thinking_requested=True) is True
    assert orjson.dumps(result.body) == before


# (id, stored ids, thinking requested, expected result)
ATTACH: list[tuple[str, list[str], bool, bool]] = [
    ("all-found", ["a", "c"], True, True),
    ("last-turn-missing", ["a"], True, False),
    ("last-turn-missing-thinking-off", ["a"], False, True),
    ("only-last-turn-found", ["c"], True, True),
    ("nothing-stored", [], True, False),
    ("found-via-second-call-id", ["b", "c"], True, True),
]


@pytest.mark.parametrize(
    ("stored_ids", "requested", "ok"), [pytest.param(*c[1:], id=c[0]) for c in ATTACH]
)
def test_attach_thinking_result(stored_ids: list[str], requested: bool, ok: bool) -> None:
    body = translate_request(tool_conversation([call("a"), call("b")], [call("c")]), CAPS).body
    assert attach_thinking(body, {i: [THINK] for i in stored_ids}, requested) is ok


def test_attach_thinking_without_tool_turns_is_ok() -> None:
    body = translate_request(chat(reasoning_effort="low"), CAPS).body
    assert attach_thinking(body, {}, thinking_requested=True) is True


def test_disable_thinking_keeps_effort() -> None:
    body = translate_request(tool_conversation([call("a")]), CAPS).body
    disable_thinking(body)
    assert "thinking" not in body
    assert body["output_config"] == {"effort": "high"}
    disable_thinking(body)  # idempotent


def test_reply_thinking_round_trips_into_the_next_request() -> None:
    reply_content = [
        THINK,
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    stored = thinking_blocks_by_tool_id(reply_content)
    request = chat(
        tools=[TOOL],
        reasoning_effort="medium",
        messages=[
            USER,
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "9°C"},
        ],
    )
    result = translate_request(request, CACHING)
    assert attach_thinking(result.body, stored, result.thinking)
    assert result.body["messages"][1]["content"] == reply_content
    # The newest message still carries the automatic breakpoint.
    assert result.body["messages"][2]["content"][-1]["cache_control"] == EPHEMERAL


# -- properties -------------------------------------------------------------------------------

SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | SAFE_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(SAFE_TEXT, children, max_size=3)
    ),
    max_leaves=12,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Plausible values, one time in 40 arbitrary JSON: rare enough that many requests pass
    validation and reach the mapping code, frequent enough to probe every check."""
    return st.integers(0, 39).flatmap(lambda i: JSON if i == 0 else strategy)


WORD = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
URLS = st.sampled_from(
    [PNG, PDF, "https://e.x/a.png", "data:image/bmp;base64,AA", "data:,", "ftp://x", "data:x"]
)
CACHE_MARK = st.sampled_from([EPHEMERAL, {"type": "ephemeral", "ttl": "1h"}, "bad"])
# Well-formed parts (with rare garbage), and loose dicts of part-like keys.
PART = st.one_of(
    st.builds(text, WORD),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": URLS})}
    ),
    st.fixed_dictionaries(
        {"type": st.just("file"), "file": st.fixed_dictionaries({"file_data": URLS})}
    ),
    st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "image_url", "file", "refusal", "input_audio"]))},
        optional={
            "text": JSON,
            "refusal": JSON,
            "image_url": JSON,
            "file": JSON,
            "cache_control": CACHE_MARK,
        },
    ),
).flatmap(
    lambda part: st.fixed_dictionaries({}, optional={"cache_control": CACHE_MARK}).map(
        lambda cc: {**part, **cc} if len(str(cc)) < 40 else part
    )
)
ARGUMENTS = st.sampled_from(["{}", '{"a": [1]}', "", "  ", "[", "1"]) | st.builds(
    lambda v: orjson.dumps({"v": v}).decode(), JSON
)
TOOL_CALL = st.fixed_dictionaries(
    {
        "id": maybe(st.sampled_from(["c1", "c2", "c3"])),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": maybe(st.sampled_from(["f", "g"]))}, optional={"arguments": maybe(ARGUMENTS)}
        ),
    },
)
CONTENT = maybe(WORD | st.lists(maybe(PART), min_size=1, max_size=3))
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": CONTENT}),
    st.fixed_dictionaries({"role": st.just("user"), "content": CONTENT}),
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "developer"]),
            "content": maybe(WORD | st.lists(st.builds(text, WORD), max_size=2)),
        }
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": maybe(st.none() | WORD),
            "tool_calls": maybe(st.lists(maybe(TOOL_CALL), max_size=2)),
            "refusal": maybe(st.none() | WORD),
        },
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": maybe(st.sampled_from(["c1", "c2"])),
            "content": maybe(WORD | st.lists(st.builds(text, WORD), max_size=2)),
        }
    ),
)
TOOLS = st.lists(
    maybe(
        st.fixed_dictionaries(
            {
                "type": maybe(st.just("function")),
                "function": maybe(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["f", "g", "h"])},
                        optional={
                            "parameters": maybe(
                                st.just({"type": "object", "properties": {"a": {"type": "string"}}})
                            ),
                            "description": maybe(WORD),
                            "strict": maybe(st.booleans()),
                            "cache_control": CACHE_MARK,
                        },
                    )
                ),
            },
            optional={"cache_control": CACHE_MARK},
        )
    ),
    max_size=3,
)
CLOSED_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": False}},
    "additionalProperties": False,
}
RESPONSE_FORMAT = st.sampled_from(
    [
        {"type": "text"},
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": CLOSED_SCHEMA}},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    ]
) | st.fixed_dictionaries(
    {"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries({"schema": JSON})}
)
CHAT = st.fixed_dictionaries(
    {"messages": maybe(st.lists(maybe(MESSAGE), min_size=1, max_size=6))},
    optional={
        "model": JSON,
        "stream": maybe(st.booleans()),
        "stream_options": maybe(st.fixed_dictionaries({"include_usage": maybe(st.booleans())})),
        "max_tokens": maybe(st.integers(1, 5000)),
        "max_completion_tokens": maybe(st.integers(1, 5000)),
        "stop": maybe(WORD | st.lists(WORD, max_size=4)),
        "tools": maybe(TOOLS),
        "tool_choice": maybe(
            st.sampled_from(
                ["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]
            )
        ),
        "parallel_tool_calls": maybe(st.booleans()),
        "reasoning_effort": maybe(st.sampled_from(EFFORT_LEVELS)),
        "temperature": maybe(st.floats(0, 2)),
        "top_p": maybe(st.floats(0, 1)),
        "response_format": maybe(RESPONSE_FORMAT),
        "prompt_cache_key": maybe(WORD),
        "n": maybe(st.just(1)),
        "logprobs": maybe(st.just(False)),
        "user": JSON,
        "seed": JSON,
    },
)
MOSTLY = st.sampled_from([True, True, True, False])
CAPS_ANY = st.builds(
    ModelCaps,
    canonical_id=st.just("m"),
    sampling=st.booleans(),
    prompt_caching=st.booleans(),
    vision=MOSTLY,
    pdf=MOSTLY,
    tools=MOSTLY,
    structured_outputs=MOSTLY,
    reasoning_efforts=st.lists(st.sampled_from(EFFORT_LEVELS), unique=True).map(
        lambda levels: tuple(lvl for lvl in EFFORT_LEVELS if lvl in levels)
    ),
    max_output_tokens=st.integers(1, 128000),
)


def check_invariants(result: TranslatedRequest, caps: ModelCaps) -> None:
    body = result.body
    orjson.dumps(body)  # serialisable, never too deep
    assert "model" not in body
    assert 1 <= body["max_tokens"] <= caps.max_output_tokens
    roles = [turn["role"] for turn in body["messages"]]
    assert roles and all(a != b for a, b in itertools.pairwise(roles))
    assert all(turn["content"] for turn in body["messages"])
    for turn in body["messages"]:
        kinds = [block["type"] for block in turn["content"]]
        # tool_results lead their turn.
        assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
    for previous, turn in itertools.pairwise(body["messages"]):
        asked = {b["id"] for b in previous["content"] if b["type"] == "tool_use"}
        answered = {b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"}
        assert asked == answered
    assert len(breakpoints(body)) <= 4
    assert ("thinking" in body) == result.thinking
    if not caps.sampling or result.thinking:
        assert "temperature" not in body and "top_p" not in body
    for ref in result.images:
        assert any(ref.block is block for turn in body["messages"] for block in turn["content"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=maybe(CHAT), caps=CAPS_ANY, auto=st.booleans())
def test_arbitrary_input_only_ever_raises_invalid_request(
    request: Any, caps: ModelCaps, auto: bool
) -> None:
    try:
        result = translate_request(request, caps, auto_cache=auto)
    except InvalidRequest as err:
        assert err.status == 400
        assert err.message
        if err.param is not None:
            assert err.message.startswith(err.param)
        return
    check_invariants(result, caps)
