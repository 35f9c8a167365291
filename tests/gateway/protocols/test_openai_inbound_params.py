"""Chat request -> Messages request: top-level fields (limits, stop, sampling, tools, effort...)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.protocols.openai.inbound import ModelCaps, translate_request

from .openai_helpers import CAPS, TOOL, assert_invalid, chat, deep, translate


def fn(**function: Any) -> dict[str, Any]:
    """Request fields with one function tool named "f" plus the given function fields."""
    return {"tools": [{"type": "function", "function": {"name": "f", **function}}]}


def rf(**json_schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": json_schema}}


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


# (id, request fields, expected param, message fragment); all against CAPS.
FIELD_ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    ("stream-not-bool", {"stream": "yes"}, "stream", "boolean"),
    (
        "stream-options-not-object",
        {"stream": True, "stream_options": 1},
        "stream_options",
        "object",
    ),
    (
        "include-usage-not-bool",
        {"stream_options": {"include_usage": "y"}},
        "stream_options.include_usage",
        "boolean",
    ),
    ("mct-zero", {"max_completion_tokens": 0}, "max_completion_tokens", "between 1 and 64000"),
    ("mct-negative", {"max_completion_tokens": -5}, "max_completion_tokens", "integer"),
    ("mct-string", {"max_completion_tokens": "100"}, "max_completion_tokens", "integer"),
    ("mct-float", {"max_completion_tokens": 1.5}, "max_completion_tokens", "integer"),
    ("mct-bool", {"max_completion_tokens": True}, "max_completion_tokens", "integer"),
    ("mct-above-model-max", {"max_completion_tokens": 64001}, "max_completion_tokens", "64000"),
    ("max-tokens-zero", {"max_tokens": 0}, "max_tokens", "between 1 and"),
    (
        "mct-wins-even-invalid",
        {"max_completion_tokens": 0, "max_tokens": 10},
        "max_completion_tokens",
        "integer",
    ),
    ("stop-empty-string", {"stop": ""}, "stop", "non-empty"),
    ("stop-empty-item", {"stop": ["a", ""]}, "stop", "non-empty"),
    ("stop-five", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
    ("stop-number", {"stop": 5}, "stop", "string"),
    ("stop-item-number", {"stop": [1]}, "stop", "string"),
    ("tools-not-list", {"tools": {"x": 1}}, "tools", "array"),
    ("tool-not-object", {"tools": ["f"]}, "tools[0]", "object"),
    (
        "tool-type-custom",
        {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tools[0].type",
        "function",
    ),
    ("tool-type-missing", {"tools": [{"function": {"name": "x"}}]}, "tools[0].type", "function"),
    ("tool-function-missing", {"tools": [{"type": "function"}]}, "tools[0].function", "object"),
    (
        "tool-name-missing",
        {"tools": [{"type": "function", "function": {}}]},
        "tools[0].function.name",
        "non-empty",
    ),
    ("tool-name-duplicate", {"tools": [TOOL, TOOL]}, "tools[1].function.name", "duplicate"),
    ("tool-description-number", fn(description=1), "tools[0].function.description", "string"),
    ("tool-parameters-string", fn(parameters="x"), "tools[0].function.parameters", "JSON Schema"),
    (
        "tool-parameters-array-type",
        fn(parameters={"type": "array"}),
        "tools[0].function.parameters.type",
        "object",
    ),
    (
        "tool-parameters-too-deep",
        fn(parameters={"properties": deep(150)}),
        "tools[0].function.parameters",
        "deep",
    ),
    ("tool-strict-string", fn(strict="yes"), "tools[0].function.strict", "boolean"),
    (
        "tool-cache-control-string",
        {"tools": [{**TOOL, "cache_control": "x"}]},
        "tools[0].cache_control",
        "ephemeral",
    ),
    (
        "tool-choice-unknown",
        {"tools": [TOOL], "tool_choice": "sometimes"},
        "tool_choice",
        '"required"',
    ),
    (
        "tool-choice-allowed-tools",
        {"tools": [TOOL], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}},
        "tool_choice",
        "function",
    ),
    (
        "tool-choice-unknown-name",
        {"tools": [TOOL], "tool_choice": named("nope")},
        "tool_choice.function.name",
        "not one of the tools",
    ),
    (
        "tool-choice-no-function",
        {"tools": [TOOL], "tool_choice": {"type": "function"}},
        "tool_choice.function.name",
        "not one of",
    ),
    (
        "parallel-not-bool",
        {"tools": [TOOL], "parallel_tool_calls": "no"},
        "parallel_tool_calls",
        "boolean",
    ),
    (
        "effort-unknown",
        {"reasoning_effort": "ultra"},
        "reasoning_effort",
        "supports none, low, medium, high, max",
    ),
    ("effort-number", {"reasoning_effort": 3}, "reasoning_effort", "not valid"),
    ("temperature-string", {"temperature": "hot"}, "temperature", "number"),
    ("temperature-negative", {"temperature": -0.1}, "temperature", "between 0 and 2"),
    ("temperature-above-2", {"temperature": 2.5}, "temperature", "between 0 and 2"),
    ("temperature-bool", {"temperature": True}, "temperature", "number"),
    ("top-p-above-1", {"top_p": 1.5}, "top_p", "between 0 and 1"),
    ("top-p-string", {"top_p": "0.5"}, "top_p", "number"),
    (
        "response-format-json-object",
        {"response_format": {"type": "json_object"}},
        "response_format",
        'use {"type": "json_schema"',
    ),
    ("response-format-string", {"response_format": "json"}, "response_format", "object"),
    (
        "response-format-type-unknown",
        {"response_format": {"type": "yaml"}},
        "response_format.type",
        "json_schema",
    ),
    (
        "response-format-no-json-schema",
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema",
        "object",
    ),
    (
        "response-format-no-schema",
        rf(name="x"),
        "response_format.json_schema.schema",
        "JSON Schema",
    ),
    (
        "response-format-schema-too-deep",
        rf(schema={"anyOf": [deep(120)]}),
        "response_format.json_schema.schema",
        "deep",
    ),
    ("n-2", {"n": 2}, "n", "n=1"),
    ("n-0", {"n": 0}, "n", "n=1"),
    ("n-string", {"n": "1"}, "n", "n=1"),
    ("n-true", {"n": True}, "n", "n=1"),
    ("logprobs-true", {"logprobs": True}, "logprobs", "not supported"),
    ("logprobs-string", {"logprobs": "no"}, "logprobs", "boolean"),
    ("top-logprobs-zero", {"top_logprobs": 0}, "top_logprobs", "not supported"),
    ("logit-bias-empty", {"logit_bias": {}}, "logit_bias", "not supported"),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}, "audio", "not supported"),
    ("web-search-options", {"web_search_options": {}}, "web_search_options", "not supported"),
    ("functions", {"functions": [{"name": "f"}]}, "functions", "use tools"),
    ("function-call", {"function_call": "auto"}, "function_call", "use tool_choice"),
    ("prompt-cache-key-too-long", {"prompt_cache_key": "k" * 257}, "prompt_cache_key", "256"),
    ("prompt-cache-key-number", {"prompt_cache_key": 5}, "prompt_cache_key", "string"),
]


@pytest.mark.parametrize(
    ("fields", "param", "fragment"), [pytest.param(*c[1:], id=c[0]) for c in FIELD_ERRORS]
)
def test_invalid_fields_are_named(fields: dict[str, Any], param: str, fragment: str) -> None:
    assert_invalid(chat(**fields), CAPS, param, fragment)


# Errors that depend on what the model can do.
CAPS_ERRORS: list[tuple[str, dict[str, Any], ModelCaps, str, str]] = [
    ("tools-unsupported-model", {"tools": [TOOL]}, replace(CAPS, tools=False), "tools", "tool use"),
    (
        "effort-unknown-no-levels",
        {"reasoning_effort": "ultra"},
        replace(CAPS, reasoning_efforts=()),
        "reasoning_effort",
        "no effort levels",
    ),
    (
        "temperature-invalid-even-if-dropped",
        {"temperature": "x"},
        replace(CAPS, sampling=False),
        "temperature",
        "number",
    ),
    (
        "mct-above-small-model-max",
        {"max_completion_tokens": 8193},
        replace(CAPS, max_output_tokens=8192),
        "max_completion_tokens",
        "between 1 and 8192",
    ),
    (
        "response-format-unsupported-model",
        rf(schema={}),
        replace(CAPS, structured_outputs=False),
        "response_format",
        "structured outputs",
    ),
]


@pytest.mark.parametrize(
    ("fields", "caps", "param", "fragment"), [pytest.param(*c[1:], id=c[0]) for c in CAPS_ERRORS]
)
def test_capability_errors(
    fields: dict[str, Any], caps: ModelCaps, param: str, fragment: str
) -> None:
    assert_invalid(chat(**fields), caps, param, fragment)


# -- scalar parameters ------------------------------------------------------------------------


# (id, fields, caps, expected subset of the body; a None value means "key absent")
PARAMS: list[tuple[str, dict[str, Any], ModelCaps, dict[str, Any]]] = [
    ("default-max-tokens", {}, CAPS, {"max_tokens": 32000}),
    (
        "default-max-tokens-small-model",
        {},
        replace(CAPS, max_output_tokens=8192),
        {"max_tokens": 8192},
    ),
    ("max-completion-tokens", {"max_completion_tokens": 64}, CAPS, {"max_tokens": 64}),
    ("max-tokens", {"max_tokens": 100}, CAPS, {"max_tokens": 100}),
    ("mct-wins", {"max_completion_tokens": 64, "max_tokens": 100}, CAPS, {"max_tokens": 64}),
    (
        "mct-null-falls-back",
        {"max_completion_tokens": None, "max_tokens": 100},
        CAPS,
        {"max_tokens": 100},
    ),
    ("max-equals-model-max", {"max_tokens": 64000}, CAPS, {"max_tokens": 64000}),
    ("stop-string", {"stop": "END"}, CAPS, {"stop_sequences": ["END"]}),
    ("stop-list", {"stop": ["a", "b", "c", "\n"]}, CAPS, {"stop_sequences": ["a", "b", "c", "\n"]}),
    ("stop-empty-list", {"stop": []}, CAPS, {"stop_sequences": None}),
    ("stop-null", {"stop": None}, CAPS, {"stop_sequences": None}),
    ("stream", {"stream": True}, CAPS, {"stream": True}),
    ("no-stream", {"stream": False}, CAPS, {"stream": None}),
    # Sampling: forwarded only to sampling models and only without thinking.
    ("temperature", {"temperature": 0.7}, CAPS, {"temperature": 0.7}),
    ("temperature-zero", {"temperature": 0}, CAPS, {"temperature": 0}),
    ("temperature-capped-at-1", {"temperature": 1.8}, CAPS, {"temperature": 1}),
    ("top-p-below-1", {"top_p": 0.9}, CAPS, {"top_p": 0.9}),
    ("top-p-1-dropped", {"top_p": 1}, CAPS, {"top_p": None}),
    (
        "sampling-dropped-for-model",
        {"temperature": 0.2, "top_p": 0.5},
        replace(CAPS, sampling=False),
        {"temperature": None, "top_p": None},
    ),
    (
        "sampling-dropped-with-thinking",
        {"temperature": 0.2, "top_p": 0.5, "reasoning_effort": "low"},
        CAPS,
        {"temperature": None, "top_p": None, "thinking": {"type": "adaptive"}},
    ),
    (
        "sampling-kept-with-effort-none",
        {"temperature": 0.2, "reasoning_effort": "none"},
        CAPS,
        {"temperature": 0.2, "thinking": None},
    ),
    (
        "sampling-kept-when-forced-tool-disables-thinking",
        {
            "temperature": 0.2,
            "reasoning_effort": "high",
            "tools": [TOOL],
            "tool_choice": "required",
        },
        CAPS,
        {"temperature": 0.2, "thinking": None, "output_config": {"effort": "high"}},
    ),
    # response_format
    ("response-format-text", {"response_format": {"type": "text"}}, CAPS, {"output_config": None}),
    (
        "response-format-json-schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "required": ["a"],
                        "additionalProperties": False,
                    },
                },
            }
        },
        CAPS,
        {
            "output_config": {
                "format": {
                    "type": "json_schema",
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "required": ["a"],
                        "additionalProperties": False,
                    },
                }
            }
        },
    ),
    (
        "json-schema-with-effort",
        {
            "reasoning_effort": "medium",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "string"}},
            },
        },
        CAPS,
        {
            "output_config": {
                "effort": "medium",
                "format": {"type": "json_schema", "schema": {"type": "string"}},
            },
            "thinking": {"type": "adaptive"},
        },
    ),
]


@pytest.mark.parametrize(
    ("fields", "caps", "expected"), [pytest.param(*c[1:], id=c[0]) for c in PARAMS]
)
def test_parameters(fields: dict[str, Any], caps: ModelCaps, expected: dict[str, Any]) -> None:
    body = translate(caps, **fields)
    for key, value in expected.items():
        assert body.get(key) == value, key


IGNORED = {
    "user": "u-1",
    "seed": 42,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "store": True,
    "metadata": {"a": "b"},
    "service_tier": "flex",
    "modalities": ["text"],
    "prediction": {"type": "content", "content": "x"},
    "verbosity": "low",
    "safety_identifier": "s",
    "n": 1,
    "logprobs": False,
    "top_logprobs": None,
    "logit_bias": None,
    "functions": None,
    "function_call": None,
    "audio": None,
    "web_search_options": None,
    "tool_choice": "required",  # ignored without tools
    "parallel_tool_calls": False,  # ignored without tools
    "something_new": {"x": [1, 2]},
}


@pytest.mark.parametrize(("field", "value"), list(IGNORED.items()), ids=list(IGNORED))
def test_ignored_fields_never_reach_the_model(field: str, value: Any) -> None:
    assert translate(**{field: value}) == translate()


def test_tool_choice_without_tools_is_not_even_validated() -> None:
    assert translate(tool_choice={"bogus": 1}, parallel_tool_calls="x", tools=[]) == translate()


def test_stream_flags() -> None:
    plain = translate_request(chat(), CAPS)
    assert (plain.stream, plain.include_usage) == (False, False)
    streamed = translate_request(chat(stream=True, stream_options={"include_usage": True}), CAPS)
    assert (streamed.stream, streamed.include_usage) == (True, True)
    # include_usage only means something for a stream.
    odd = translate_request(chat(stream=False, stream_options={"include_usage": True}), CAPS)
    assert odd.include_usage is False


@pytest.mark.parametrize(
    ("key", "hint"),
    [("conversation-42", "conversation-42"), ("k" * 256, "k" * 256), ("", None), (None, None)],
    ids=["short", "256-chars", "empty", "null"],
)
def test_prompt_cache_key_becomes_session_hint(key: str | None, hint: str | None) -> None:
    assert translate_request(chat(prompt_cache_key=key), CAPS).session_hint == hint


# -- tools --------------------------------------------------------------------------------------


def test_tools_mapping() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "noop"}},
        {"type": "function", "function": {"name": "empty", "parameters": {}, "description": ""}},
        {"type": "function", "function": {"name": "untyped", "parameters": {"properties": {}}}},
    ]
    assert translate(tools=tools)["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
        {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
        {"name": "empty", "input_schema": {"type": "object", "properties": {}}},
        {"name": "untyped", "input_schema": {"type": "object", "properties": {}}},
    ]


TOOL_CHOICES: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("absent", {}, None),
    ("auto", {"tool_choice": "auto"}, {"type": "auto"}),
    ("none", {"tool_choice": "none"}, {"type": "none"}),
    ("required", {"tool_choice": "required"}, {"type": "any"}),
    (
        "named",
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"type": "tool", "name": "get_weather"},
    ),
    ("parallel-true", {"parallel_tool_calls": True}, None),
    (
        "parallel-false-alone",
        {"parallel_tool_calls": False},
        {"type": "auto", "disable_parallel_tool_use": True},
    ),
    (
        "parallel-false-auto",
        {"tool_choice": "auto", "parallel_tool_calls": False},
        {"type": "auto", "disable_parallel_tool_use": True},
    ),
    (
        "parallel-false-required",
        {"tool_choice": "required", "parallel_tool_calls": False},
        {"type": "any", "disable_parallel_tool_use": True},
    ),
    (
        "parallel-false-named",
        {
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
        },
        {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    ),
    (
        "parallel-false-none",
        {"tool_choice": "none", "parallel_tool_calls": False},
        {"type": "none"},
    ),
    ("parallel-null", {"parallel_tool_calls": None}, None),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [pytest.param(f, e, id=i) for i, f, e in TOOL_CHOICES]
)
def test_tool_choice(fields: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert translate(tools=[TOOL], **fields).get("tool_choice") == expected


# -- reasoning effort ---------------------------------------------------------------------------

FOUR = ("low", "medium", "high", "max")
FIVE = ("low", "medium", "high", "xhigh", "max")
# (id, model levels, requested, level used or "none", thinking requested)
EFFORTS: list[tuple[str, tuple[str, ...], str, str, bool]] = [
    ("none", FIVE, "none", "none", False),
    ("minimal-maps-up-to-low", FIVE, "minimal", "low", True),
    ("low", FIVE, "low", "low", True),
    ("medium", FIVE, "medium", "medium", True),
    ("high", FIVE, "high", "high", True),
    ("xhigh", FIVE, "xhigh", "xhigh", True),
    ("max", FIVE, "max", "max", True),
    ("xhigh-tie-goes-lower", FOUR, "xhigh", "high", True),
    ("minimal-supported", ("minimal", "low", "high"), "minimal", "minimal", True),
    ("medium-tie-lower", ("low", "high"), "medium", "low", True),
    ("nearest-above", ("high", "max"), "low", "high", True),
    ("never-maps-to-none", ("none", "max"), "minimal", "max", True),
    ("no-levels-ignored", (), "high", "none", False),
    ("no-levels-none", (), "none", "none", False),
]


@pytest.mark.parametrize(
    ("levels", "requested", "used", "thinking"), [pytest.param(*c[1:], id=c[0]) for c in EFFORTS]
)
def test_reasoning_effort(
    levels: tuple[str, ...], requested: str, used: str, thinking: bool
) -> None:
    result = translate_request(
        chat(reasoning_effort=requested), replace(CAPS, reasoning_efforts=levels)
    )
    assert result.reasoning_effort == used
    assert result.thinking is thinking
    assert result.body.get("thinking") == ({"type": "adaptive"} if thinking else None)
    expected_config = {"effort": used} if used != "none" else None
    assert result.body.get("output_config") == expected_config


def test_reasoning_effort_not_sent() -> None:
    result = translate_request(chat(), CAPS)
    assert (result.reasoning_effort, result.thinking) == (None, False)
    assert "thinking" not in result.body and "output_config" not in result.body


@pytest.mark.parametrize(
    ("tool_choice", "thinking"),
    [
        ("auto", True),
        ("none", True),
        ("required", False),
        ({"type": "function", "function": {"name": "get_weather"}}, False),
    ],
    ids=["auto", "none", "required", "named"],
)
def test_forced_tool_choice_disables_thinking_keeps_effort(
    tool_choice: Any, thinking: bool
) -> None:
    result = translate_request(
        chat(tools=[TOOL], tool_choice=tool_choice, reasoning_effort="high"), CAPS
    )
    assert result.thinking is thinking
    assert ("thinking" in result.body) is thinking
    assert result.body["output_config"] == {"effort": "high"}
    assert result.reasoning_effort == "high"
