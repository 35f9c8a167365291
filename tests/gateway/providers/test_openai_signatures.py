"""Gemini's thought signatures carried in Messages tool_use ids (gateway/providers/openai/
signatures.py): a table of cases, then properties: any base64 signature comes back byte for
byte, and ids stay in Anthropic's id alphabet."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocols.openai.types import InvalidRequest
from gateway.protocols.openai_responses.inbound import translate_request
from gateway.providers.openai.signatures import (
    MARK,
    SKIP_VALIDATOR,
    outgoing_call,
    signature_of,
    split_tool_use_id,
    tool_use_id,
    wants_placeholder,
)
from tests.gateway.protocols.openai_helpers import CAPS

SIG = base64.b64encode(b"\xfb\xff\x00signature-bytes").decode()  # holds '+' and '/'
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"id": "c1", "extra_content": {"google": {"thought_signature": SIG}}}, SIG),
        ({"id": "c1"}, None),
        ({"id": "c1", "extra_content": {"google": {}}}, None),
        ({"id": "c1", "extra_content": {"google": {"thought_signature": ""}}}, None),
        ({"id": "c1", "extra_content": "x"}, None),
        ({"id": "c1", "extra_content": {"google": {"thought_signature": 7}}}, None),
    ],
    ids=["signed", "none", "empty-google", "empty-signature", "not-an-object", "not-a-string"],
)
def test_the_signature_is_read_off_the_call(call: dict, expected: str | None) -> None:
    assert signature_of(call) == expected


@pytest.mark.parametrize(
    ("signature", "carried"),
    [(SIG, True), (None, False), ("not base64!", False), ("QQ", False), ("QR==", False)],
    ids=["base64", "none", "not-base64", "unpadded", "non-canonical"],
)
def test_only_a_signature_that_comes_back_exactly_rides_in_the_id(
    signature: str | None, carried: bool
) -> None:
    tool_id = tool_use_id("call_1", signature)
    assert (MARK in tool_id) is carried
    assert split_tool_use_id(tool_id) == ("call_1", signature if carried else None)


@pytest.mark.parametrize(
    ("model", "wanted"),
    [
        ("gemini-3-pro-preview", True),
        ("models/gemini-3.1-flash", True),
        ("google/gemini-4-pro", True),
        ("gemini-2.5-flash", False),
        ("gpt-6-sol", False),
        ("my-gemini-3", False),
        (None, False),
    ],
)
def test_the_placeholder_is_for_gemini_3_and_later(model: object, wanted: bool) -> None:
    assert wants_placeholder(model) is wanted


def test_outgoing_calls_carry_the_signature_or_the_placeholder_on_a_turns_first_call() -> None:
    signed = tool_use_id("call_1", SIG)
    assert outgoing_call(signed, False, False) == (
        "call_1",
        {"google": {"thought_signature": SIG}},
    )
    assert outgoing_call("toolu_9", True, True) == (
        "toolu_9",
        {"google": {"thought_signature": SKIP_VALIDATOR}},
    )
    assert outgoing_call("toolu_9", False, True) == ("toolu_9", {})  # not the first call
    assert outgoing_call("toolu_9", True, False) == ("toolu_9", {})  # not a Gemini 3 model


@given(
    call_id=st.from_regex(r"[A-Za-z0-9-]{1,40}", fullmatch=True),
    raw=st.binary(min_size=1, max_size=2048),
)
def test_any_signature_round_trips_and_ids_stay_in_anthropics_alphabet(
    call_id: str, raw: bytes
) -> None:
    signature = base64.b64encode(raw).decode()
    tool_id = tool_use_id(call_id, signature)
    assert ANTHROPIC_ID.fullmatch(tool_id)
    assert split_tool_use_id(tool_id) == (call_id, signature)


def _responses_loop(call_id: str) -> dict[str, Any]:
    return {
        "model": "m",
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": call_id, "name": "t", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call_id, "output": "ok"},
        ],
    }


def test_the_responses_api_takes_a_signed_call_id_past_openais_64_characters() -> None:
    """A call_id EZAT gave out with a signature in it comes back through the Responses API; any
    other call_id keeps OpenAI's limit of 64 characters."""
    signed = tool_use_id("call_1", base64.b64encode(bytes(300)).decode())
    assert len(signed) > 64
    translated = translate_request(_responses_loop(signed), CAPS)
    assert translated.body["messages"][1]["content"][0]["id"] == signed
    with pytest.raises(InvalidRequest) as refused:
        translate_request(_responses_loop("c" * 65), CAPS)
    assert refused.value.param == "input[1].call_id"
