"""providers.md §7 pitfalls on the Messages -> Chat Completions translation (docs/providers.md,
"Pitfalls, and what EZAT does"): tool names OpenAI refuses (item 10) round-trip through the
request, the JSON reply and the stream; strict tools (item 9) go out strict only with a schema
OpenAI's strict mode takes, checked against the simulator's copy of OpenAI's rule."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.providers.openai.reply import to_message
from gateway.providers.openai.request import (
    ChatTarget,
    UntranslatableRequest,
    chat_tool_name,
    to_chat,
)
from gateway.providers.openai.stream import ChatStreamDecoder
from gateway.providers.openai.strict import strict_parameters
from simulator.openai_strict import strict_schema_error

# OpenAI's rule for function names (the simulator's openai_validation.check_tool_name).
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MCP = "mcp__claude_in_chrome_browser_automation__read_the_console_messages_of_a_tab"


def _request(names: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-x",
        "max_tokens": 50,
        "tools": [
            {"name": n, "input_schema": {"type": "object", "properties": {}}, **extra}
            for n in names
        ],
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{i}", "name": n, "input": {}}
                    for i, n in enumerate(names)
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}
                    for i in range(len(names))
                ],
            },
        ],
    }


def _reply(sent: list[str]) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
        for i, n in enumerate(sent)
    ]
    return {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"content": None, "tool_calls": calls}}],
        "finish_reason": "tool_calls",
    }


def _streamed_names(sent: list[str], tool_names: dict[str, str]) -> list[str]:
    decoder = ChatStreamDecoder(
        model="gpt-x", tool_names=tool_names, thinking=False, input_estimate=1
    )
    raw = b""
    for i, name in enumerate(sent):
        call = {"index": i, "id": f"call_{i}", "function": {"name": name, "arguments": "{}"}}
        chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        raw += b"data: " + orjson.dumps(chunk) + b"\n\n"
    end = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    raw += b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n"
    return [
        e.json()["content_block"]["name"]
        for e in decoder.feed(raw)
        if e.name == "content_block_start"
    ]


_names = st.lists(
    st.one_of(
        st.text(min_size=1, max_size=100),
        st.from_regex(r"mcp__[a-z_]{1,40}__[a-zA-Z0-9_.-]{1,60}", fullmatch=True),
    ),
    min_size=1,
    max_size=4,
    unique=True,
)


@settings(max_examples=200, deadline=None)
@given(_names)
def test_tool_names_round_trip_through_request_reply_and_stream(names: list[str]) -> None:
    try:
        out = to_chat(_request(names), ChatTarget())
    except UntranslatableRequest as refused:
        # Two names that shorten alike cannot be told apart: refused, naming `tools`.
        assert refused.param == "tools"
        assume(False)
        return
    sent = [t["function"]["name"] for t in out.body["tools"]]
    assert all(OPENAI_NAME.match(n) for n in sent), sent
    assert sent == [chat_tool_name(n) for n in names]  # deterministic: the same every turn
    # The history carries the same names the tools do.
    history = out.body["messages"][1]["tool_calls"]
    assert [c["function"]["name"] for c in history] == sent
    # ...and the provider's calls come back under the client's own names, JSON and streamed.
    message = to_message(_reply(sent), model="gpt-x", tool_names=out.tool_names, thinking=False)
    assert [b["name"] for b in message["content"]] == names
    assert _streamed_names(sent, out.tool_names) == names


def test_a_claude_code_mcp_name_is_shortened_with_its_hash() -> None:
    short = chat_tool_name(MCP)
    assert len(MCP) > 64 and len(short) == 64 and OPENAI_NAME.match(short)
    assert short.startswith(MCP[:55] + "_")
    assert chat_tool_name("mcp__github__create_issue") == "mcp__github__create_issue"
    assert chat_tool_name("web.fetch").startswith("web_fetch_")


# -- strict tools --------------------------------------------------------------------------------

OBJ = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}

# (rule, input_schema of a strict tool, strict sent, parameters sent or None = unchanged)
STRICT_CASES: list[tuple[str, dict[str, Any], bool, dict[str, Any] | None]] = [
    (
        "closed and all required: strict as it is",
        {**OBJ, "additionalProperties": False},
        True,
        None,
    ),
    (
        "additionalProperties left out: closed, strict",
        OBJ,
        True,
        {**OBJ, "additionalProperties": False},
    ),
    (
        "nested objects in properties, items and anyOf are closed too",
        {
            "type": "object",
            "properties": {
                "o": OBJ,
                "l": {"type": "array", "items": OBJ},
                "u": {"anyOf": [OBJ, {"type": "null"}]},
            },
            "required": ["o", "l", "u"],
            "$defs": {"d": OBJ},
        },
        True,
        {
            "type": "object",
            "properties": {
                "o": {**OBJ, "additionalProperties": False},
                "l": {"type": "array", "items": {**OBJ, "additionalProperties": False}},
                "u": {"anyOf": [{**OBJ, "additionalProperties": False}, {"type": "null"}]},
            },
            "required": ["o", "l", "u"],
            "$defs": {"d": {**OBJ, "additionalProperties": False}},
            "additionalProperties": False,
        },
    ),
    (
        "an optional property: strict false, schema unchanged",
        {**OBJ, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        False,
        None,
    ),
    (
        "an object open to extra keys: strict false",
        {**OBJ, "additionalProperties": True},
        False,
        None,
    ),
    (
        "a nested optional property: strict false",
        {"type": "object", "properties": {"o": {**OBJ, "required": []}}, "required": ["o"]},
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("rule", "schema", "strict", "parameters"), STRICT_CASES, ids=[c[0] for c in STRICT_CASES]
)
def test_strict_tools(
    rule: str, schema: dict[str, Any], strict: bool, parameters: dict[str, Any] | None
) -> None:
    request = _request(["t"], strict=True)
    request["tools"][0]["input_schema"] = schema
    request["messages"] = [{"role": "user", "content": "go"}]
    function = to_chat(request, ChatTarget()).body["tools"][0]["function"]
    assert function["strict"] is strict
    assert function["parameters"] == (parameters if parameters is not None else schema)
    # What goes out strict, OpenAI's rule (the simulator's copy of it) takes.
    if strict:
        assert strict_schema_error("t", function["parameters"], "tools[0].function") is None


def test_strict_false_and_absent_are_kept_and_a_non_boolean_is_refused() -> None:
    for value, sent in ((False, False), (None, "absent")):
        request = _request(["t"], **({} if value is None else {"strict": value}))
        request["messages"] = [{"role": "user", "content": "go"}]
        function = to_chat(request, ChatTarget()).body["tools"][0]["function"]
        assert function.get("strict", "absent") == sent
    request = _request(["t"], strict="yes")
    request["messages"] = [{"role": "user", "content": "go"}]
    with pytest.raises(UntranslatableRequest) as refused:
        to_chat(request, ChatTarget())
    assert refused.value.param == "tools.0.strict"


def test_the_simulator_refuses_a_strict_schema_as_openai_does() -> None:
    error = strict_schema_error("glob", OBJ, "tools[0].function")
    assert error is not None and error.status == 400
    assert error.body()["error"]["message"] == (
        "Invalid schema for function 'glob': In context=(), 'additionalProperties' is required "
        "to be supplied and to be false."
    )
    nested = {
        "type": "object",
        "properties": {"o": {**OBJ, "additionalProperties": False, "required": []}},
        "required": ["o"],
        "additionalProperties": False,
    }
    error = strict_schema_error("glob", nested, "tools[0].function")
    assert error is not None
    body = error.body()["error"]
    assert "In context=('properties', 'o'), 'required' is required" in body["message"]
    assert "Missing 'a'." in body["message"]
    assert (body["param"], body["code"]) == (
        "tools[0].function.parameters",
        "invalid_function_parameters",
    )


_leaf = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "null"}])
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(
            lambda props, required, extra: {
                "type": "object",
                "properties": props,
                "required": [k for k, r in zip(props, required, strict=False) if r],
                **extra,
            },
            st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
            st.lists(st.booleans(), min_size=4, max_size=4),
            st.sampled_from([{}, {"additionalProperties": False}, {"additionalProperties": True}]),
        ),
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(lambda options: {"anyOf": options}, st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=8,
)


def _strip_closing(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_closing(n) for n in node]
    if not isinstance(node, dict):
        return node
    return {k: _strip_closing(v) for k, v in node.items() if k != "additionalProperties"}


@settings(max_examples=300, deadline=None)
@given(_schemas.filter(lambda s: s.get("type") == "object"))
def test_strict_parameters_is_what_openai_takes_and_only_closes_objects(
    schema: dict[str, Any],
) -> None:
    closed = strict_parameters(schema)
    if closed is None:
        # Not takeable even closed: OpenAI's rule refuses the schema with its objects closed.
        assert strict_schema_error("t", schema, "tools[0].function") is not None
        return
    assert strict_schema_error("t", closed, "tools[0].function") is None
    assert _strip_closing(closed) == _strip_closing(schema)  # nothing else changed
