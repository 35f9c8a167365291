"""The Responses tools Codex CLI and the Agents SDK send by default (issue 32, item 1): namespace
tools flattened, custom tools as one string input, hosted web search dropped, other hosted tools
refused; the calls coming back (whole and streamed) checked against openai-python's types."""

from __future__ import annotations

import json
from typing import Any

import openai.types.responses as rt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from gateway.protocols.openai.types import InvalidRequest
from gateway.protocols.openai_responses.custom_input import CustomInputDecoder
from gateway.protocols.openai_responses.inbound import translate_request
from gateway.protocols.openai_responses.outbound import translate_response
from gateway.protocols.openai_responses.types import Rendering, ToolName

from .openai_helpers import CAPS
from .openai_stream_helpers import block_start, json_delta, message_delta, start, stop
from .test_responses_translators import parse, run_stream

EVENT = TypeAdapter(rt.ResponseStreamEvent)
ITEM = TypeAdapter(rt.ResponseOutputItem)
INPUT = TypeAdapter(rt.ResponseInputParam)

FN = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}
PATCH_GRAMMAR = 'start: "*** Begin Patch" LF hunk+ "*** End Patch"'
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
AGENTS = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn",
            "description": "Start one.",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            "strict": False,
        },
        {"type": "custom", "name": "note"},
    ],
}


def translate(**fields: Any) -> Any:
    return translate_request({"model": "m", "input": "hi", **fields}, CAPS)


# -- inbound: tools -------------------------------------------------------------------------------


def test_codex_default_tool_list_translates() -> None:
    tools = [FN, APPLY_PATCH, AGENTS, {"type": "web_search"}]
    tr = translate(tools=tools)
    names = [t["name"] for t in tr.body["tools"]]
    assert names == ["shell", "apply_patch", "agents__spawn", "agents__note"]
    assert tr.dropped_tools == ["web_search"]
    assert tr.tool_map == {
        "apply_patch": ToolName("apply_patch", None, True),
        "agents__spawn": ToolName("spawn", "agents", False),
        "agents__note": ToolName("note", "agents", True),
    }
    patch = tr.body["tools"][1]
    assert patch["input_schema"] == {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The tool's input."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    assert patch["description"].startswith("Edit files with a patch.")
    assert "lark grammar" in patch["description"] and PATCH_GRAMMAR in patch["description"]
    spawn = tr.body["tools"][2]
    assert spawn["input_schema"]["properties"] == {"task": {"type": "string"}}
    assert "agents: Sub-agents." in spawn["description"] and spawn["strict"] is False
    assert tr.echo["tools"] == tools  # the response repeats what the client sent


@pytest.mark.parametrize(
    "kind",
    ["web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"],
)
def test_web_search_alone_is_dropped_not_refused(kind: str) -> None:
    tr = translate(tools=[{"type": kind}], tool_choice={"type": kind})
    assert "tools" not in tr.body and "tool_choice" not in tr.body
    assert tr.dropped_tools == ["web_search"]


def test_tool_search_is_dropped_and_deferred_tools_are_given_up_front() -> None:
    """Codex's GPT models send a client-executed tool_search beside deferred tools."""
    search = {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}
    deferred = {**FN, "defer_loading": True}
    tr = translate(tools=[deferred, search, {"type": "web_search"}])
    assert [t["name"] for t in tr.body["tools"]] == ["shell"]
    assert "defer_loading" not in tr.body["tools"][0]
    assert tr.dropped_tools == ["tool_search", "web_search"]


@pytest.mark.parametrize(
    ("tools", "param", "words"),
    [
        ([{"type": "file_search"}], "tools[0].type", "file_search"),
        ([FN, {"type": "code_interpreter"}], "tools[1].type", "code_interpreter"),
        ([{"type": "image_generation"}], "tools[0].type", "image_generation"),
        (
            [{"type": "namespace", "name": "n", "tools": [{"type": "mcp"}]}],
            "tools[0].tools[0].type",
            "mcp",
        ),
        ([{"type": "namespace", "tools": []}], "tools[0].name", "non-empty"),
        (
            [{"type": "custom", "name": "x", "format": {"type": "grammar"}}],
            "tools[0].format",
            "grammar",
        ),
        ([FN, {**FN}], "tools[1].name", "duplicate"),
        (
            [
                {"type": "function", "name": "a__b"},
                {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "b"}]},
            ],
            "tools[1].tools[0].name",
            "duplicate",
        ),
    ],
)
def test_other_tools_are_400_naming_them(tools: list[Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(tools=tools)
    assert info.value.param == param and words in str(info.value)


def test_tool_choice_names_a_custom_or_namespaced_tool() -> None:
    tr = translate(tools=[FN, APPLY_PATCH], tool_choice={"type": "custom", "name": "apply_patch"})
    assert tr.body["tool_choice"] == {"type": "tool", "name": "apply_patch"}
    tr = translate(
        tools=[AGENTS], tool_choice={"type": "function", "name": "spawn", "namespace": "agents"}
    )
    assert tr.body["tool_choice"] == {"type": "tool", "name": "agents__spawn"}
    with pytest.raises(InvalidRequest, match=r"tool_choice\.name"):
        translate(tools=[FN], tool_choice={"type": "custom", "name": "apply_patch"})


# -- inbound: the calls replayed -----------------------------------------------------------------


def test_namespaced_and_custom_calls_and_their_outputs_round_trip() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "spawn",
            "namespace": "agents",
            "arguments": '{"task":"x"}',
        },
        {
            "type": "custom_tool_call",
            "call_id": "c2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
    ]
    INPUT.validate_python(items)  # what the SDK would send
    tr = translate_request({"model": "m", "input": items, "tools": [APPLY_PATCH, AGENTS]}, CAPS)
    assistant, results = tr.body["messages"][1:]
    assert assistant["content"] == [
        {"type": "tool_use", "id": "c1", "name": "agents__spawn", "input": {"task": "x"}},
        {
            "type": "tool_use",
            "id": "c2",
            "name": "apply_patch",
            "input": {"input": "*** Begin Patch\n"},
        },
    ]
    assert [(b["tool_use_id"], b["content"]) for b in results["content"]] == [
        ("c1", "spawned"),
        ("c2", "Done!"),
    ]


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "custom_tool_call", "call_id": "c", "name": "p", "input": 3}, "input[1].input"),
        (
            {
                "type": "function_call",
                "call_id": "c",
                "name": "p",
                "namespace": "",
                "arguments": "{}",
            },
            "input[1].namespace",
        ),
    ],
)
def test_bad_replayed_calls_name_the_field(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(input=[{"role": "user", "content": "go"}, item])
    assert info.value.param == param


# -- outbound -------------------------------------------------------------------------------------

TOOLS = {
    "apply_patch": ToolName("apply_patch", None, True),
    "agents__spawn": ToolName("spawn", "agents", False),
}
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hi "there"\n*** End Patch'


def _rendering() -> Rendering:
    """The reply's and the stream's rendering, with TOOLS' names."""
    return Rendering(
        request_id="r",
        model_name="m",
        created_at=1,
        echo={"tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
        seal=None,
        summary=False,
        include_encrypted=False,
        tools=TOOLS,
    )


def test_a_whole_reply_returns_custom_and_namespaced_calls() -> None:
    msg = {
        "content": [
            {"type": "tool_use", "id": "t1", "name": "agents__spawn", "input": {"task": "x"}},
            {"type": "tool_use", "id": "t2", "name": "apply_patch", "input": {"input": PATCH}},
            {"type": "tool_use", "id": "t3", "name": "shell", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    response, _ = translate_response(msg, _rendering())
    parsed = rt.Response.model_validate(response)
    spawn, patch, shell = parsed.output
    assert isinstance(spawn, rt.ResponseFunctionToolCall)
    assert (spawn.name, spawn.namespace, spawn.arguments) == ("spawn", "agents", '{"task":"x"}')
    assert isinstance(patch, rt.ResponseCustomToolCall)
    assert (patch.name, patch.input, patch.call_id, patch.namespace) == (
        "apply_patch",
        PATCH,
        "t2",
        None,
    )
    assert patch.id == "ctc_r_1"
    assert isinstance(shell, rt.ResponseFunctionToolCall) and shell.namespace is None
    assert "namespace" not in response["output"][2]  # plain calls look as before


def _stream(fragments: list[str], name: str = "apply_patch") -> list[dict[str, Any]]:
    upstream = [
        start(),
        block_start(0, {"type": "tool_use", "id": "t1", "name": name, "input": {}}),
        *(json_delta(0, f) for f in fragments),
        stop(0),
        message_delta("tool_use"),
        {"type": "message_stop"},
    ]
    from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator

    t = ResponsesStreamTranslator(_rendering())
    events = parse(b"".join(t.feed(e) for e in upstream) + t.final_event())
    for event in events:
        EVENT.validate_python(event)
    return events


def test_a_streamed_custom_call_sends_its_input_events() -> None:
    raw = orjson.dumps({"input": PATCH}).decode()
    events = _stream([raw[:7], raw[7:20], raw[20:]])
    kinds = [e["type"] for e in events]
    deltas = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) >= 2  # the text streams as its JSON does
    assert kinds[2] == "response.output_item.added"
    assert kinds[-3:] == [
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[3:-3]) == {"response.custom_tool_call_input.delta"}
    added, item_done, completed = events[2], events[-2], events[-1]
    done = events[-3]
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["input"] == ""
    assert "".join(d["delta"] for d in deltas) == PATCH and done["input"] == PATCH
    assert all(d["item_id"] == added["item"]["id"] == item_done["item"]["id"] for d in deltas)
    assert item_done["item"]["input"] == PATCH and item_done["item"]["call_id"] == "t1"
    assert completed["response"]["output"] == [item_done["item"]]


TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ['a "quoted" \\ back\nslash', "emoji 😀 and é", PATCH]
)


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_the_decoder_streams_any_text_cut_anywhere(text: str, cuts: list[int]) -> None:
    for raw in (orjson.dumps({"input": text}).decode(), json.dumps({"input": text})):
        points = sorted({min(c, len(raw)) for c in cuts})
        pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
        decoder = CustomInputDecoder()
        assert "".join(decoder.feed(p) for p in pieces) == text
        assert decoder.text == text


@pytest.mark.parametrize("raw", ['{"other": 1, "input": "x"}', "[1]", '"x"'])
def test_other_shapes_stream_nothing_and_end_whole(raw: str) -> None:
    decoder = CustomInputDecoder()
    assert decoder.feed(raw[:3]) + decoder.feed(raw[3:]) == ""
    events = _stream([raw[:3], raw[3:]])
    [delta] = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    assert delta["delta"] == done["input"]


def test_a_streamed_namespaced_call_names_its_namespace() -> None:
    events = _stream(['{"task"', ':"x"}'], name="agents__spawn")
    added = events[2]["item"]
    assert (added["name"], added["namespace"], added["type"]) == (
        "spawn",
        "agents",
        "function_call",
    )
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "spawn" and done["arguments"] == '{"task":"x"}'
    assert events[-1]["response"]["output"][0]["namespace"] == "agents"


def test_a_custom_call_without_streamed_input_and_plain_calls_unchanged() -> None:
    events = _stream([])  # input given whole (here: none) in content_block_start
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    assert done["input"] == "{}"  # not the one-string shape: passed on as its JSON text
    plain, _ = run_stream(
        [
            start(),
            block_start(0, {"type": "tool_use", "id": "t", "name": "shell", "input": {}}),
            json_delta(0, "{}"),
            stop(0),
            {"type": "message_stop"},
        ]
    )
    assert "namespace" not in plain[2]["item"] and plain[2]["item"]["type"] == "function_call"
