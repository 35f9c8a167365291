"""The documented model rules shared by every API (gateway/protocols/model_rules.py), and how the
Chat Completions translator and the Messages validation apply them. Table-driven and properties."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.protocols.anthropic.validation import check_model_rules
from gateway.protocols.model_rules import (
    EFFORT_SCALE,
    ModelRuleViolation,
    check_forced_tool_choice,
    nearest_effort,
)
from gateway.protocols.openai.inbound import InvalidRequest, translate_request
from gateway.protocols.openai_responses.inbound import translate_request as translate_responses
from tests.gateway.protocols.openai_helpers import CAPS, TOOL, chat

ALL = ("low", "medium", "high", "xhigh", "max")
NO_XHIGH = ("low", "medium", "high", "max")
# Claude Opus 5.5: thinking always on, forced tool use refused.
OPUS_55 = dataclasses.replace(
    CAPS,
    canonical_id="anthropic/claude-opus-5-5",
    sampling=False,
    reasoning_efforts=ALL,
    thinking_can_be_disabled=False,
    forced_tool_choice=False,
)
# Claude Sonnet 5.5: thinking can be turned off, forced tool use refused.
SONNET_55 = dataclasses.replace(OPUS_55, canonical_id="anthropic/claude-sonnet-5-5")
SONNET_55 = dataclasses.replace(SONNET_55, thinking_can_be_disabled=True)


@pytest.mark.parametrize(
    ("wanted", "levels", "can_disable", "expected"),
    [
        ("none", ALL, True, "none"),
        ("none", ALL, False, "low"),  # cannot be turned off: the lowest level
        ("none", ("medium", "high"), False, "medium"),
        ("minimal", ALL, True, "low"),
        ("minimal", ALL, False, "low"),
        ("xhigh", NO_XHIGH, True, "high"),  # tie between high and max: the lower
        ("max", NO_XHIGH, True, "max"),
        ("high", ("low",), False, "low"),
        ("high", (), False, "none"),  # no effort parameter at all (Claude Haiku 4.5)
        ("none", (), False, "none"),
    ],
)
def test_nearest_effort(
    wanted: str, levels: tuple[str, ...], can_disable: bool, expected: str
) -> None:
    assert nearest_effort(wanted, levels, thinking_can_be_disabled=can_disable) == expected


@given(
    st.sampled_from(EFFORT_SCALE),
    st.lists(st.sampled_from(ALL), unique=True),
    st.booleans(),
)
def test_nearest_effort_is_supported_and_never_none_when_thinking_stays_on(
    wanted: str, levels: list[str], can_disable: bool
) -> None:
    got = nearest_effort(wanted, levels, thinking_can_be_disabled=can_disable)
    if not levels:
        assert got == "none"
    elif not can_disable:
        assert got in levels
    else:
        assert got in levels or (got == "none" and wanted == "none")


def test_forced_tool_choice_rule() -> None:
    kwargs: dict[str, Any] = {"param": "tool_choice", "auto": '"auto"', "forced_forms": "x"}
    check_forced_tool_choice(forced=False, model_id="m", allowed=False, **kwargs)
    check_forced_tool_choice(forced=True, model_id="m", allowed=True, **kwargs)
    with pytest.raises(ModelRuleViolation) as refused:
        check_forced_tool_choice(forced=True, model_id="anthropic/m", allowed=False, **kwargs)
    assert refused.value.param == "tool_choice"
    assert "anthropic/m" in refused.value.message and 'Use "auto"' in refused.value.message


# -- Chat Completions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
@pytest.mark.parametrize("caps", [OPUS_55, SONNET_55], ids=["opus-5-5", "sonnet-5-5"])
def test_chat_forced_tool_choice_is_refused_naming_the_model(caps: Any, tool_choice: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        translate_request(chat(tools=[TOOL], tool_choice=tool_choice), caps)
    assert refused.value.param == "tool_choice" and refused.value.status == 400
    assert caps.canonical_id in refused.value.message and '"auto"' in refused.value.message


@pytest.mark.parametrize("tool_choice", ["auto", "none", None])
def test_chat_unforced_tool_choice_passes(tool_choice: Any) -> None:
    body = (
        chat(tools=[TOOL]) if tool_choice is None else chat(tools=[TOOL], tool_choice=tool_choice)
    )
    translated = translate_request(body, SONNET_55)
    assert translated.body.get("tool_choice", {"type": "auto"})["type"] in ("auto", "none")


def test_chat_reasoning_none_where_thinking_cannot_be_turned_off() -> None:
    translated = translate_request(chat(reasoning_effort="none"), OPUS_55)
    assert translated.reasoning_effort == "low"  # → x-ezat-reasoning-effort: low
    assert translated.body["output_config"] == {"effort": "low"}
    assert translated.body["thinking"] == {"type": "adaptive"}
    kept = translate_request(chat(reasoning_effort="none"), SONNET_55)
    assert kept.reasoning_effort == "none"
    assert "output_config" not in kept.body and "thinking" not in kept.body


def test_chat_unknown_effort_message_lists_what_the_model_takes() -> None:
    with pytest.raises(InvalidRequest) as refused:
        translate_request(chat(reasoning_effort="extreme"), OPUS_55)
    assert "supports low, medium, high, xhigh, max;" in refused.value.message


# -- Messages pass-through --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "forced_ok", "disable_ok", "param"),
    [
        ({"tool_choice": {"type": "any"}}, False, True, "tool_choice"),
        ({"tool_choice": {"type": "tool", "name": "f"}}, False, True, "tool_choice"),
        ({"thinking": {"type": "disabled"}}, True, False, "thinking.type"),
    ],
)
def test_messages_rules_refuse_with_400(
    body: dict[str, Any], forced_ok: bool, disable_ok: bool, param: str
) -> None:
    with pytest.raises(GatewayError) as refused:
        check_model_rules(
            body,
            model_id="anthropic/x",
            forced_tool_choice=forced_ok,
            thinking_can_be_disabled=disable_ok,
        )
    assert refused.value.status == 400 and refused.value.param == param
    assert "anthropic/x" in refused.value.message


@pytest.mark.parametrize(
    "body",
    [
        {"tool_choice": {"type": "auto"}},
        {"tool_choice": {"type": "none"}},
        {"tool_choice": "any"},  # not an object: the provider's own validation answers
        {"thinking": {"type": "adaptive"}},
        {"thinking": None},
        {},
    ],
)
def test_messages_rules_let_everything_else_through(body: dict[str, Any]) -> None:
    check_model_rules(
        body, model_id="anthropic/x", forced_tool_choice=False, thinking_can_be_disabled=False
    )


# -- Responses API: the same rules, from the same module --------------------------------------

RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {}},
}


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_weather"}])
def test_responses_forced_tool_choice_is_refused_naming_the_model(tool_choice: Any) -> None:
    body = {"model": "m", "input": "hi", "tools": [RESPONSES_TOOL], "tool_choice": tool_choice}
    with pytest.raises(InvalidRequest) as refused:
        translate_responses(body, SONNET_55)
    assert refused.value.param == "tool_choice"
    assert "anthropic/claude-sonnet-5-5" in refused.value.message
    allowed = dataclasses.replace(SONNET_55, forced_tool_choice=True)
    assert translate_responses(body, allowed).body["tool_choice"]["type"] in ("any", "tool")


def test_responses_reasoning_none_where_thinking_cannot_be_turned_off() -> None:
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "none"}}
    translated = translate_responses(body, OPUS_55)
    assert translated.reasoning_effort == "low"
    assert translated.body["output_config"] == {"effort": "low"}
    assert translate_responses(body, SONNET_55).reasoning_effort == "none"
