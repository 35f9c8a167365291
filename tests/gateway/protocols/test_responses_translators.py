"""The Responses API translators (pure): inbound items and fields, outbound items and usage, the
stream event sequence (table-driven and hypothesis), and sealed reasoning."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocols.openai.types import InvalidRequest
from gateway.protocols.openai_responses.inbound import references, translate_request
from gateway.protocols.openai_responses.outbound import (
    locate_item,
    responses_usage,
    translate_response,
)
from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import Rendering

from .openai_helpers import CAPS, PDF, PNG
from .openai_stream_helpers import block_start, json_delta, message_delta, start, stop, text_delta

THINK = {"type": "thinking", "thinking": "hmm", "signature": "sig"}


def rendering(
    *,
    seal: Any = None,
    summary: bool = False,
    include_encrypted: bool = False,
    request_id: str = "req_1",
) -> Rendering:
    """A response's rendering for these tests: model "m", created at 1, nothing echoed."""
    return Rendering(
        request_id=request_id,
        model_name="m",
        created_at=1,
        echo={},
        seal=seal,
        summary=summary,
        include_encrypted=include_encrypted,
    )


def fake_seal(block: dict[str, Any]) -> str:
    return "sealed:" + orjson.dumps(block).decode()


def fake_unseal(blob: str, param: str) -> dict[str, Any]:
    if not blob.startswith("sealed:"):
        raise InvalidRequest(f"{param}: not ours", param)
    return orjson.loads(blob[7:])


def translate(**fields: Any) -> Any:
    body = {"model": "m", "input": "hi", **fields}
    return translate_request(body, CAPS, unseal=fake_unseal)


# -- inbound --------------------------------------------------------------------------------------


INPUTS: list[tuple[str, Any, list[dict[str, Any]]]] = [
    ("string", "hi", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
    (
        "parts",
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": PNG, "detail": "auto"},
                    {"type": "input_file", "file_data": PDF, "filename": "a.pdf"},
                ],
            }
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0=",
                        },
                    },
                ],
            }
        ],
    ),
    (
        "tool-loop-with-reasoning",
        [
            {"role": "user", "content": "w?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "encrypted_content": fake_seal(THINK),
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "9"},
        ],
        [
            {"role": "user", "content": [{"type": "text", "text": "w?"}]},
            {
                "role": "assistant",
                "content": [THINK, {"type": "tool_use", "id": "c1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "9"}],
            },
        ],
    ),
    (
        "assistant-text-and-developer-hoisted",
        [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "a"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "b", "annotations": []}],
            },
            {"role": "user", "content": "c"},
        ],
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
            {"role": "user", "content": [{"type": "text", "text": "c"}]},
        ],
    ),
]


@pytest.mark.parametrize(("items", "messages"), [pytest.param(i, m, id=n) for n, i, m in INPUTS])
def test_input_items_become_turns(items: Any, messages: list[dict[str, Any]]) -> None:
    tr = translate(input=items)
    assert tr.body["messages"] == messages


def test_fields_map_to_messages() -> None:
    tr = translate(
        instructions="be brief",
        max_output_tokens=100,
        temperature=0.5,
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        tool_choice={"type": "function", "name": "f"},
        parallel_tool_calls=False,
        text={
            "format": {
                "type": "json_schema",
                "name": "x",
                "schema": {"type": "object", "properties": {}},
            }
        },
    )
    body = tr.body
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    assert body["max_tokens"] == 100 and body["temperature"] == 0.5
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object"}, "strict": True}]
    assert body["tool_choice"] == {"type": "tool", "name": "f", "disable_parallel_tool_use": True}
    schema = body["output_config"]["format"]["schema"]
    assert schema == {"type": "object", "properties": {}, "additionalProperties": False}
    assert tr.store is True and tr.stream is False


def test_reasoning_effort_nearest_level_and_summary_display() -> None:
    tr = translate(reasoning={"effort": "xhigh", "summary": "auto"})
    assert tr.reasoning_effort == "high"  # CAPS has low..max without xhigh: the lower tie wins
    assert tr.body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert translate(reasoning={"effort": "low"}).body["thinking"]["display"] == "omitted"
    assert "thinking" not in translate(reasoning={"effort": "none"}).body


def test_tool_turn_without_reasoning_is_flagged() -> None:
    items = [
        {"role": "user", "content": "w?"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "9"},
    ]
    assert translate(input=items, reasoning={"effort": "high"}).tool_turn_without_thinking


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type"),
        (
            {"input": [{"type": "function_call_output", "call_id": "x", "output": "y"}]},
            "input[0].call_id",
        ),
        (
            {
                "input": [
                    {"role": "user", "content": "a"},
                    {"type": "function_call", "call_id": "c", "name": "f"},
                ]
            },
            "input[1].call_id",
        ),
        (
            {"input": [{"type": "reasoning", "encrypted_content": "junk"}]},
            "input[0].encrypted_content",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_x_0"}]}, "input[0].id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
        ),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": PNG}]}]},
            "input[0].content[0].type",
        ),
        ({"background": True}, "background"),
        ({"conversation": {"id": "c"}}, "conversation"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "mcp", "server_label": "x"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice.type"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"reasoning": {"summary": "loud"}}, "reasoning.summary"),
        ({"metadata": {"k": 1}}, "metadata.k"),
        ({"store": "yes"}, "store"),
    ],
)
def test_refused_fields_name_their_param(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(**fields)
    assert info.value.param == param
    assert info.value.message.startswith(param)


def test_references_and_item_ids() -> None:
    body = {
        "input": [
            {"type": "item_reference", "id": "rs_req_1_0"},
            {"type": "reasoning", "id": "rs_req_1_2", "summary": []},
            {"type": "reasoning", "id": "rs_req_1_3", "encrypted_content": "x"},
        ]
    }
    assert references(body) == ["rs_req_1_0", "rs_req_1_2"]
    assert locate_item("rs_req_1_0") == ("req_1", 0)
    assert locate_item("msg_my.id-x_12") == ("my.id-x", 12)
    assert locate_item("call_abc") is None and locate_item("rs_") is None


# -- outbound -------------------------------------------------------------------------------------


def test_reply_becomes_output_items_and_usage() -> None:
    msg = {
        "content": [
            THINK,
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 2,
            "output_tokens": 7,
            "output_tokens_details": {"thinking_tokens": 3},
        },
    }
    response, stored = translate_response(
        msg,
        rendering(seal=fake_seal, summary=True),
    )
    assert [i["id"] for i in response["output"]] == ["rs_req_1_0", "msg_req_1_1", "fc_req_1_2"]
    assert response["output"][0]["encrypted_content"] is None  # not included
    assert fake_unseal(stored[0]["encrypted_content"], "p") == THINK  # kept for the store
    assert response["output"][0]["summary"] == [{"type": "summary_text", "text": "hmm"}]
    assert response["output"][2]["arguments"] == "{}"
    assert (
        response["usage"]
        == responses_usage(msg["usage"])
        == {
            "input_tokens": 17,
            "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 2},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 24,
        }
    )
    assert response["status"] == "completed" and response["id"] == "resp_req_1"


# -- stream ---------------------------------------------------------------------------------------


def parse(data: bytes) -> list[dict[str, Any]]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        event, payload = block.split("\n")
        assert event.startswith("event: ") and payload.startswith("data: ")
        item = orjson.loads(payload[6:])
        assert item["type"] == event[7:]
        out.append(item)
    return out


def run_stream(
    upstream: list[dict[str, Any]], **kw: Any
) -> tuple[list[dict[str, Any]], ResponsesStreamTranslator]:
    t = ResponsesStreamTranslator(
        rendering(
            seal=kw.get("seal", fake_seal),
            summary=kw.get("summary", True),
            include_encrypted=kw.get("include", True),
        )
    )
    out = b"".join(t.feed(e) for e in upstream) + t.final_event()
    return parse(out), t


def thinking_events(index: int, text: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "thinking_delta", "thinking": text},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "signature_delta", "signature": "sig"},
        },
        stop(index),
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6),
    st.lists(st.text(min_size=1, max_size=5), min_size=0, max_size=4),
    st.booleans(),
)
def test_stream_deltas_add_up_and_numbers_are_consecutive(
    texts: list[str], fragments: list[str], with_thinking: bool
) -> None:
    upstream = [start()]
    index = 0
    if with_thinking:
        upstream += thinking_events(0, "hmm")
        index = 1
    upstream += [
        block_start(index, {"type": "text", "text": ""}),
        *(text_delta(index, t) for t in texts),
        stop(index),
    ]
    upstream += [
        block_start(index + 1, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})
    ]
    upstream += [json_delta(index + 1, f) for f in fragments] + [stop(index + 1)]
    upstream += [message_delta("tool_use", output_tokens=9), {"type": "message_stop"}]
    events, t = run_stream(upstream)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "".join(texts)
    args = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert args == ("".join(fragments) or "{}")
    final = events[-1]["response"]["output"]
    assert [i["type"] for i in final] == (["reasoning"] if with_thinking else []) + [
        "message",
        "function_call",
    ]
    assert final[-2]["content"][0]["text"] == text and final[-1]["arguments"] == args
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert added == done == list(range(len(final)))
    assert [i["id"] for i in final] == [
        e["item"]["id"] for e in events if e["type"] == "response.output_item.done"
    ]
    if with_thinking:
        assert fake_unseal(final[0]["encrypted_content"], "p") == THINK
    assert t.items == final


def test_stream_without_summary_or_include_shows_no_thinking() -> None:
    upstream = [
        start(),
        *thinking_events(0, "secret"),
        message_delta("end_turn"),
        {"type": "message_stop"},
    ]
    events, _ = run_stream(upstream, summary=False, include=False)
    assert not any("summary_text" in e["type"] for e in events)
    assert "secret" not in orjson.dumps(events).decode()


def test_stream_failure_is_error_then_failed() -> None:
    t = ResponsesStreamTranslator(rendering(request_id="r"))
    # Failing before any event (after keep-alives) still opens with response.created.
    events = parse(t.failure("boom", "server_error"))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert events[2] == {
        "type": "error",
        "sequence_number": 2,
        "code": "server_error",
        "message": "boom",
        "param": None,
    }
    assert events[3]["response"]["error"] == {"code": "server_error", "message": "boom"}


def test_automatic_cache_breakpoints_and_session_hint_as_on_chat() -> None:
    from dataclasses import replace

    caps = replace(CAPS, prompt_caching=True)
    body = {"model": "m", "instructions": "sys", "input": "hi", "prompt_cache_key": "conv-42"}
    tr = translate_request(body, caps)
    assert tr.session_hint == "conv-42"
    assert tr.body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert tr.body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    off = translate_request(body, caps, auto_cache=False)
    assert "cache_control" not in orjson.dumps(off.body).decode()


def test_stored_history_is_trusted_and_a_foreign_sealed_block_is_dropped() -> None:
    history = [
        {"type": "message", "role": "user", "content": "w?"},
        {"type": "reasoning", "id": "rs_r_0", "summary": [], "encrypted_content": "other-model"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    new = [{"type": "function_call_output", "call_id": "c1", "output": "9"}]
    tr = translate_request(
        {"model": "m", "input": new, "reasoning": {"effort": "high"}},
        CAPS,
        history=history,
        unseal=fake_unseal,
    )
    assert tr.body["messages"][1]["content"][0]["type"] == "tool_use"
    assert tr.tool_turn_without_thinking  # the handler then turns thinking off for this turn
    assert tr.items == [*history, *new]
