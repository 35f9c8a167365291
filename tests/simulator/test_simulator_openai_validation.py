"""The OpenAI front's strict validation: each rule answers 400 (404 for an unknown model) in
OpenAI's envelope, with `param` naming the offending field, as the real API does."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.testing import SimulatorThread
from tests.simulator.openai_helpers import body, completion, error_of, post

API_KEY = "sk-sim-openai-validation"
USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
ASSISTANT_CALL = {"role": "assistant", "content": None, "tool_calls": [CALL]}
ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "done"}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
B64 = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def _msgs(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-sim", "messages": list(messages), **extra}


def _part(part: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return _msgs({"role": role, "content": [part]})


CASES: list[tuple[str, dict[str, Any], str | None, str | None, str]] = [
    # (id, body, param, code, words in the message)
    ("unknown field", body(foo=1), "foo", "unknown_parameter", "Unknown parameter: 'foo'."),
    ("anthropic system", body(system="be nice"), "system", "unknown_parameter", "'system'"),
    ("anthropic thinking", body(thinking={"type": "enabled"}), "thinking", "unknown_parameter", ""),
    ("vllm top_k", body(top_k=5), "top_k", "unknown_parameter", ""),
    ("no model", {"messages": [USER]}, "model", "missing_required_parameter", "'model'"),
    ("no messages", {"model": "gpt-sim"}, "messages", "missing_required_parameter", ""),
    ("empty messages", _msgs(), "messages", "empty_array", "empty array"),
    ("no role", _msgs({"content": "x"}), "messages[0].role", "missing_required_parameter", ""),
    (
        "bad role",
        _msgs({"role": "function", "content": "x"}),
        "messages[0].role",
        "invalid_value",
        "Invalid value: 'function'. Supported values are: 'system', 'developer', 'user',"
        " 'assistant', and 'tool'.",
    ),
    (
        "no content",
        _msgs({"role": "user"}),
        "messages[0].content",
        "missing_required_parameter",
        "",
    ),
    (
        "anthropic image",
        _part({"type": "image", "source": B64}),
        "messages[0].content[0].type",
        "invalid_value",
        "Invalid value: 'image'.",
    ),
    (
        "anthropic document",
        _part({"type": "document", "source": B64}),
        "messages[0].content[0].type",
        "invalid_value",
        "",
    ),
    (
        "anthropic tool_result",
        _part({"type": "tool_result", "tool_use_id": "t", "content": "x"}),
        "messages[0].content[0].type",
        "invalid_value",
        "",
    ),
    (
        "anthropic tool_use",
        _part({"type": "tool_use", "id": "t", "name": "f", "input": {}}, "assistant"),
        "messages[0].content[0].type",
        "invalid_value",
        "Supported values are: 'text', and 'refusal'.",
    ),
    (
        "anthropic thinking part",
        _part({"type": "thinking", "thinking": "x", "signature": "s"}, "assistant"),
        "messages[0].content[0].type",
        "invalid_value",
        "",
    ),
    (
        "anthropic redacted_thinking part",
        _part({"type": "redacted_thinking", "data": "x"}, "assistant"),
        "messages[0].content[0].type",
        "invalid_value",
        "",
    ),
    (
        "image in a system message",
        _part({"type": "image_url", "image_url": {"url": "https://x/y.png"}}, "system"),
        "messages[0].content[0].type",
        "invalid_value",
        "Supported values are: 'text'.",
    ),
    (
        "cache_control on a part",
        _part({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}),
        "messages[0].content[0].cache_control",
        "unknown_parameter",
        "Unknown parameter: 'messages[0].content[0].cache_control'.",
    ),
    (
        "cache_control on a message",
        _msgs({**USER, "cache_control": {"type": "ephemeral"}}),
        "messages[0].cache_control",
        "unknown_parameter",
        "",
    ),
    (
        "cache_control on a tool",
        _msgs(USER, tools=[{**TOOL, "cache_control": {"type": "ephemeral"}}]),
        "tools[0].cache_control",
        "unknown_parameter",
        "",
    ),
    (
        "cache_control in a function",
        _msgs(USER, tools=[{"type": "function", "function": {"name": "f", "cache_control": {}}}]),
        "tools[0].function.cache_control",
        "unknown_parameter",
        "",
    ),
    (
        "anthropic tool",
        _msgs(USER, tools=[{"name": "f", "input_schema": {"type": "object"}}]),
        "tools[0].input_schema",
        "unknown_parameter",
        "",
    ),
    (
        "tool without type",
        _msgs(USER, tools=[{"function": {"name": "f"}}]),
        "tools[0].type",
        "missing_required_parameter",
        "",
    ),
    (
        "tool name pattern",
        _msgs(USER, tools=[{"type": "function", "function": {"name": "my tool"}}]),
        "tools[0].function.name",
        "invalid_value",
        "string does not match pattern",
    ),
    (
        "tool name length",
        _msgs(USER, tools=[{"type": "function", "function": {"name": "mcp__" + "x" * 60}}]),
        "tools[0].function.name",
        "string_above_max_length",
        "maximum length 64, but got a string with length 65",
    ),
    (
        "tool message answering nothing",
        _msgs(USER, ANSWER),
        "messages.[1].role",
        None,
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "tool message answering another id",
        _msgs(USER, ASSISTANT_CALL, {**ANSWER, "tool_call_id": "call_2"}),
        "messages.[2].role",
        None,
        "",
    ),
    (
        "tool call left unanswered",
        _msgs(USER, ASSISTANT_CALL, USER),
        "messages.[1].role",
        None,
        "did not have response messages: call_1",
    ),
    (
        "arguments as an object",
        _msgs(
            USER,
            {
                **ASSISTANT_CALL,
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}],
            },
            ANSWER,
        ),
        "messages[1].tool_calls[0].function.arguments",
        "invalid_type",
        "expected a string, but got an object instead",
    ),
    (
        "tool_call_id missing",
        _msgs(USER, ASSISTANT_CALL, {"role": "tool", "content": "x"}),
        "messages[2].tool_call_id",
        "missing_required_parameter",
        "",
    ),
    (
        "tool_choice any",
        _msgs(USER, tools=[TOOL], tool_choice="any"),
        "tool_choice",
        "invalid_value",
        "",
    ),
    ("tool_choice without tools", _msgs(USER, tool_choice="auto"), "tool_choice", None, ""),
    (
        "stream_options without stream",
        body(stream_options={"include_usage": True}),
        "stream_options",
        "invalid_value",
        "only allowed when 'stream' is enabled",
    ),
    (
        "both output caps",
        body(max_tokens=10, max_completion_tokens=10),
        "max_tokens",
        "invalid_value",
        "",
    ),
    (
        "cap above the model's",
        body("gpt-sim-mini", max_completion_tokens=20_000),
        "max_completion_tokens",
        "invalid_value",
        "supports at most 16384 completion tokens",
    ),
    ("bad effort", body(reasoning_effort="extreme"), "reasoning_effort", "invalid_value", ""),
    ("temperature", body(temperature=3), "temperature", "decimal_above_max_value", ""),
    ("n zero", body(n=0), "n", "invalid_value", ""),
    ("stop five", body(stop=["a", "b", "c", "d", "e"]), "stop", "array_above_max_length", ""),
    (
        "json_object without json",
        body(response_format={"type": "json_object"}),
        "messages",
        None,
        "must contain the word 'json'",
    ),
    (
        "json_schema without name",
        body(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
        "response_format.json_schema.name",
        "missing_required_parameter",
        "",
    ),
    (
        "reasoning replayed to OpenAI",
        _msgs(USER, {"role": "assistant", "content": "a", "reasoning_content": "r"}, USER),
        "messages[1].reasoning_content",
        "unknown_parameter",
        "",
    ),
]


@pytest.mark.usefixtures("reset_sim")
@pytest.mark.parametrize(
    ("payload", "param", "code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refusals_name_their_param(
    sim: SimulatorThread, payload: dict[str, Any], param: str, code: str | None, words: str
) -> None:
    error = error_of(post(sim, payload, key=API_KEY), 400)
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error["message"]
    assert words in error["message"]


@pytest.mark.usefixtures("reset_sim")
def test_valid_shapes_are_accepted(sim: SimulatorThread) -> None:
    accepted = [
        _msgs(USER, ASSISTANT_CALL, ANSWER, tools=[TOOL]),
        _msgs({"role": "developer", "content": [{"type": "text", "text": "x"}]}, USER),
        _part(
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
            }
        ),
        body(stream=True, stream_options={"include_usage": True}),
        body(response_format={"type": "json_object"}, text="answer in JSON"),
        body(
            max_completion_tokens=100,
            temperature=0.5,
            top_p=0.9,
            seed=1,
            stop="x",
            user="u",
            safety_identifier="s",
            metadata={"k": "v"},
            store=False,
            service_tier="auto",
            logprobs=True,
            top_logprobs=2,
            presence_penalty=0.1,
            frequency_penalty=0.1,
            logit_bias={"1": 1},
            verbosity="low",
            prompt_cache_key="k",
            prompt_cache_retention="24h",
            reasoning_effort="minimal",
            modalities=["text"],
            parallel_tool_calls=True,
            n=3,
        ),
        # vLLM reads replayed reasoning; qwen-sim takes it.
        _msgs(USER, {"role": "assistant", "content": "a", "reasoning_content": "r"}, USER)
        | {"model": "qwen-sim"},
    ]
    for payload in accepted:
        response = post(sim, payload, key=API_KEY)
        assert response.status_code == 200, (payload, response.text)
        if not payload.get("stream"):
            completion(response)


@pytest.mark.usefixtures("reset_sim")
def test_unparseable_body(sim: SimulatorThread) -> None:
    error = error_of(post(sim, b"{not json", key=API_KEY), 400)
    assert error["param"] is None
    assert "could not parse the JSON body" in error["message"]


@pytest.mark.usefixtures("reset_sim")
def test_unknown_model_is_a_404(sim: SimulatorThread) -> None:
    error = error_of(post(sim, body("claude-sonnet-5"), key=API_KEY), 404)
    assert error["code"] == "model_not_found"


@pytest.mark.usefixtures("reset_sim")
def test_unknown_paths_and_methods_answer_in_openai_shape(sim: SimulatorThread) -> None:
    import httpx

    headers = {"authorization": f"Bearer {API_KEY}"}
    missing = httpx.post(f"{sim.url}/v1/chat/complete", json=body(), headers=headers)
    assert error_of(missing, 404)["message"] == "Invalid URL (POST /v1/chat/complete)"
    wrong_method = httpx.get(f"{sim.url}/v1/chat/completions", headers=headers)
    error_of(wrong_method, 405)


@pytest.mark.usefixtures("reset_sim")
def test_allowed_tools_choice(sim: SimulatorThread) -> None:
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}}
    reply = completion(post(sim, _msgs(USER, tools=[TOOL], tool_choice=choice), key=API_KEY))
    assert reply.choices[0].finish_reason == "tool_calls"


@pytest.mark.usefixtures("reset_sim")
def test_body_over_the_size_limit(sim: SimulatorThread) -> None:
    from simulator.app import MAX_BODY_BYTES

    error = error_of(post(sim, b" " * (MAX_BODY_BYTES + 1), key=API_KEY), 413)
    assert error["message"] == "Request too large."
