"""The OpenAI front's Responses API (`POST /v1/responses`): validation and the request as the
reply builder reads it (pure; rendering is in openai_responses_render.py).

Strict as the real API (reference/platforms-and-responses.md §4): the request fields are those of
openai-python 3.57.0 `types/responses/response_create_params.py`
(https://platform.openai.com/docs/api-reference/responses/create); function tools are flat
(`{"type": "function", "name", "parameters"}`, no `function` wrapper: Chat's shape is refused with
"Missing required parameter: 'tools[0].name'."); input parts are `input_text` / `input_image` /
`input_file` (assistant: `output_text` / `refusal`), so Chat's `text` / `image_url` parts and
Anthropic's blocks are 400s; `cache_control` is unknown everywhere; a `function_call_output` must
answer an earlier `function_call` and every call must get its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.openai_errors import OpenAIError
from simulator.openai_models import MODELS, OpenAIModel
from simulator.openai_render import DEFAULT_MAX_TOKENS, IMAGE_TOKENS, IMAGE_TOKENS_DEFAULT
from simulator.openai_validation import (
    REASONING_EFFORTS,
    bad_value,
    check_keys,
    check_sampling,
    check_tool_name,
    invalid_type,
    is_int,
    missing,
    unknown,
)
from simulator.tokens import Segment, measure

RESPONSE_FIELDS = frozenset(
    {
        "access_programs",
        "background",
        "background_options",
        # Not in openai-python's params, but sent by OpenAI's own Codex CLI to api.openai.com
        # (codex-rs `client_metadata()`: installation, session and thread ids as strings).
        "client_metadata",
        "context_management",
        "conversation",
        "image",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "item_reference")
_ITEM_KEYS = {
    "message": {"type", "role", "content", "id", "status", "phase"},
    "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
    "function_call_output": {"type", "call_id", "output", "id", "status"},
    "reasoning": {"type", "id", "summary", "encrypted_content", "content", "status"},
    "item_reference": {"type", "id"},
}
_ROLES = ("user", "assistant", "system", "developer")
_PARTS = {
    "input_text": {"type", "text"},
    "input_image": {"type", "image_url", "file_id", "detail"},
    "input_file": {"type", "file_data", "file_id", "file_url", "filename"},
    "output_text": {"type", "text", "annotations", "logprobs"},
    "refusal": {"type", "refusal"},
}
_USER_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal")
MIN_OUTPUT_TOKENS = 16


def items_of(body: Mapping[str, Any], history: list[Any]) -> list[dict[str, Any]]:
    """The conversation's input items: a stored history (previous_response_id), then the input
    (a string is one user message)."""
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    return [*history, *(_typed(i) for i in items or ())]


def _typed(item: Mapping[str, Any]) -> dict[str, Any]:
    # An item with a role and no type is a message (EasyInputMessage).
    return {"type": "message", **item} if "type" not in item and "role" in item else dict(item)


def check_response(body: Any, history: list[Any], *, flavour: str) -> OpenAIError | None:
    if not isinstance(body, Mapping):
        return OpenAIError(400, "We could not parse the JSON body of your request.")
    if flavour != "vllm":
        extra = sorted(set(body) - RESPONSE_FIELDS)
        if extra:
            return unknown(extra[0])
    if "model" not in body:
        return missing("model")
    model = MODELS.get(body["model"]) if isinstance(body["model"], str) else None
    if model is None:
        return OpenAIError(
            404,
            f"The model `{body['model']}` does not exist or you do not have access to it.",
            None,
            "model_not_found",
        )
    if "input" not in body and not history:
        return missing("input")
    raw = body.get("input")
    if raw is not None and not isinstance(raw, str | list):
        return invalid_type("input", "a string or array", raw)
    return (
        _check_items(body, history)
        or _check_tools(body)
        or _check_options(body, model)
        or check_sampling({k: body[k] for k in ("temperature", "top_p") if k in body})
    )


def _check_items(body: Mapping[str, Any], history: list[Any]) -> OpenAIError | None:
    calls: set[str] = {i["call_id"] for i in history if i.get("type") == "function_call"}
    answered: set[str] = {i["call_id"] for i in history if i.get("type") == "function_call_output"}
    raw = body.get("input")
    for n, item in enumerate(raw if isinstance(raw, list) else ()):
        where = f"input[{n}]"
        if not isinstance(item, Mapping):
            return invalid_type(where, "an object", item)
        item = _typed(item)
        kind = item.get("type")
        if kind not in ITEM_TYPES:
            return bad_value(f"{where}.type", kind, ITEM_TYPES)
        error = check_keys(item, _ITEM_KEYS[kind], where)
        if error:
            return error
        if kind == "message":
            error = _check_message(item, where)
        elif kind in ("function_call", "function_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not 1 <= len(call_id) <= 64:
                return missing(f"{where}.call_id")
            if kind == "function_call":
                error = _check_call(item, where)
                calls.add(call_id)
            elif call_id not in calls:
                return OpenAIError(
                    400,
                    f"No tool call found for function call output with call_id {call_id}.",
                    "input",
                )
            else:
                answered.add(call_id)
        if error:
            return error
    unanswered = sorted(calls - answered)
    if unanswered:
        return OpenAIError(400, f"No tool output found for function call {unanswered[0]}.", "input")
    return None


def _check_message(item: Mapping[str, Any], where: str) -> OpenAIError | None:
    role = item.get("role")
    if role not in _ROLES:
        return bad_value(f"{where}.role", role, _ROLES)
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return missing(f"{where}.content")
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    for m, part in enumerate(content):
        at = f"{where}.content[{m}]"
        if not isinstance(part, Mapping):
            return invalid_type(at, "an object", part)
        ptype = part.get("type")
        if ptype not in allowed:
            # Chat's text / image_url parts and Anthropic's blocks land here.
            return bad_value(f"{at}.type", ptype, allowed)
        error = check_keys(part, _PARTS[ptype], at)
        if error:
            return error
        if ptype in ("input_text", "output_text") and not isinstance(part.get("text"), str):
            return missing(f"{at}.text")
    return None


def _check_call(item: Mapping[str, Any], where: str) -> OpenAIError | None:
    error = check_tool_name(item.get("name"), f"{where}.name")
    if error:
        return error
    if not isinstance(item.get("arguments"), str):
        return invalid_type(f"{where}.arguments", "a string", item.get("arguments"))
    return None


# openai-python 3.57.0 `types/responses/tool_param.py`: the tool types the API takes. Function
# and custom tools (and those of a namespace) are the client's; the rest are run by the API.
_FUNCTION_KEYS = {
    "type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers",
    "output_schema",
}  # fmt: skip
_CUSTOM_KEYS = {"type", "name", "description", "format", "defer_loading", "allowed_callers"}
HOSTED_TOOL_TYPES = (
    "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
    "file_search", "code_interpreter", "image_generation", "mcp", "computer",
    "computer_use_preview", "local_shell", "shell", "apply_patch", "tool_search",
)  # fmt: skip
TOOL_TYPES = ("function", "custom", "namespace", *HOSTED_TOOL_TYPES)


def client_tools(tools: Any) -> list[Mapping[str, Any]]:
    """The function and custom tools, a namespace's flattened into theirs (`ns__name`)."""
    out: list[Mapping[str, Any]] = []
    for tool in tools or ():
        if tool.get("type") in ("function", "custom"):
            out.append(tool)
        elif tool.get("type") == "namespace":
            out.extend({**t, "name": f"{tool['name']}__{t['name']}"} for t in tool["tools"])
    return out


def _check_tool(tool: Any, at: str, *, nested: bool = False) -> OpenAIError | None:
    if not isinstance(tool, Mapping):
        return invalid_type(at, "an object", tool)
    kind = tool.get("type")
    if "type" not in tool:
        return missing(f"{at}.type")
    allowed = ("function", "custom") if nested else TOOL_TYPES
    if kind not in allowed:
        return bad_value(f"{at}.type", kind, allowed)
    if kind in HOSTED_TOOL_TYPES:
        return None  # run by the API: its own options are not modelled here
    if kind == "namespace":
        error = check_tool_name(tool.get("name"), f"{at}.name") or check_keys(
            tool, {"type", "name", "description", "tools"}, at
        )
        if error:
            return error
        inner = tool.get("tools")
        if not isinstance(inner, list) or not inner:
            return missing(f"{at}.tools")
        for n, item in enumerate(inner):
            error = _check_tool(item, f"{at}.tools[{n}]", nested=True)
            if error:
                return error
        return None
    # Chat's {"function": {...}} wrapper: the real API says the flat name is missing.
    keys = _FUNCTION_KEYS if kind == "function" else _CUSTOM_KEYS
    error = check_tool_name(tool.get("name"), f"{at}.name") or check_keys(tool, keys, at)
    if error:
        return error
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        return invalid_type(f"{at}.parameters", "an object", parameters)
    return None


def _check_tools(body: Mapping[str, Any]) -> OpenAIError | None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return invalid_type("tools", "an array", tools)
    for i, tool in enumerate(tools or ()):
        error = _check_tool(tool, f"tools[{i}]")
        if error:
            return error
    names = [t["name"] for t in client_tools(tools)]
    choice = body.get("tool_choice")
    if choice is None or choice in ("none", "auto", "required"):
        return None
    if isinstance(choice, str):
        return bad_value("tool_choice", choice, ("none", "auto", "required"))
    if not isinstance(choice, Mapping):
        return invalid_type("tool_choice", "a string or object", choice)
    if choice.get("type") == "function":
        if choice.get("name") not in names:
            return OpenAIError(
                400,
                f"Tool choice '{choice.get('name')}' not found in 'tools' parameter.",
                "tool_choice",
            )
        return None
    if choice.get("type") == "allowed_tools" and choice.get("mode") in ("auto", "required"):
        return None
    return bad_value("tool_choice.type", choice.get("type"), ("function", "allowed_tools"))


def _check_options(body: Mapping[str, Any], model: OpenAIModel) -> OpenAIError | None:
    cap = body.get("max_output_tokens")
    if cap is not None:
        if not is_int(cap):
            return invalid_type("max_output_tokens", "an integer", cap)
        if cap < MIN_OUTPUT_TOKENS:
            return OpenAIError(
                400,
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >="
                f" {MIN_OUTPUT_TOKENS}, but got {cap} instead.",
                "max_output_tokens",
                "integer_below_min_value",
            )
        if cap > model.max_output_tokens:
            return OpenAIError(
                400,
                f"max_output_tokens is too large: {cap}. This model supports at most"
                f" {model.max_output_tokens} output tokens.",
                "max_output_tokens",
                "invalid_value",
            )
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, Mapping):
            return invalid_type("reasoning", "an object", reasoning)
        error = check_keys(
            reasoning, {"effort", "summary", "generate_summary", "context", "mode"}, "reasoning"
        )
        if error:
            return error
        effort = reasoning.get("effort")
        if effort is not None and not model.reasoning:
            return OpenAIError(
                400,
                "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                "reasoning.effort",
                "unsupported_parameter",
            )
        if effort is not None and effort not in REASONING_EFFORTS:
            return bad_value("reasoning.effort", effort, REASONING_EFFORTS)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return invalid_type("stream", "a boolean", stream)
    if body.get("stream_options") is not None and not stream:
        return OpenAIError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        for key in ("name", "schema"):
            if key not in fmt:
                return missing(f"text.format.{key}")
    return None


# --- the request as the reply builder reads it -------------------------------------------------
def reasoning_on(body: Mapping[str, Any], model: OpenAIModel) -> bool:
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    return model.reasoning and effort != "none"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(p.get("text", "")) for p in content or () if isinstance(p, Mapping) and "text" in p
    )


def reply_body(
    body: Mapping[str, Any], items: list[dict[str, Any]], model: OpenAIModel
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []

    def last(role: str, kind: str) -> list[dict[str, Any]]:
        if not messages or messages[-1]["role"] != role or messages[-1]["kind"] != kind:
            messages.append({"role": role, "kind": kind, "content": []})
        content: list[dict[str, Any]] = messages[-1]["content"]
        return content

    for item in items:
        kind = item["type"]
        if kind == "message" and item["role"] in ("user", "assistant"):
            text = _text(item.get("content"))
            if text:
                last(item["role"], "text").append({"type": "text", "text": text})
        elif kind == "function_call":
            last("assistant", "text").append(
                {"type": "tool_use", "id": item["call_id"], "name": item["name"], "input": {}}
            )
        elif kind == "function_call_output":
            output = item.get("output")
            last("user", "results").append(
                {"type": "tool_result", "tool_use_id": item["call_id"], "content": _text(output)}
            )
    out: dict[str, Any] = {
        "model": body["model"],
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "max_tokens": body.get("max_output_tokens")
        or min(DEFAULT_MAX_TOKENS, model.max_output_tokens),
    }
    if reasoning_on(body, model):
        out["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    tools = client_tools(body.get("tools"))
    if tools:
        out["tools"] = [
            {"name": t["name"], "input_schema": t.get("parameters") or {"type": "object"}}
            for t in tools
        ]
        choice = body.get("tool_choice", "auto")
        if choice == "none":
            out["tool_choice"] = {"type": "none"}
        elif choice == "required":
            out["tool_choice"] = {"type": "any"}
        elif isinstance(choice, Mapping) and choice.get("type") == "function":
            out["tool_choice"] = {"type": "tool", "name": choice["name"]}
        else:
            out["tool_choice"] = {"type": "auto"}
        if body.get("parallel_tool_calls") is False:
            out["tool_choice"]["disable_parallel_tool_use"] = True
    fmt = body["text"].get("format") if isinstance(body.get("text"), Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        out["output_config"] = {"format": {"type": "json_schema", "schema": fmt["schema"]}}
    return out


def segments(body: Mapping[str, Any], items: list[dict[str, Any]]) -> list[Segment]:
    """Prompt segments in prefix order: instructions, tools, then each input item's parts."""
    out: list[Segment] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append(Segment({"instructions": instructions}, len(instructions), 0, None))
    for tool in body.get("tools") or ():
        chars, media = measure(tool)
        out.append(Segment(tool, chars, media, None))
    for item in items:
        content = item.get("content") if item["type"] == "message" else None
        if isinstance(content, list):
            for part in content:
                out.append(_part(item.get("role", ""), part))
            continue
        chars, media = measure({k: v for k, v in item.items() if k not in ("id", "status")})
        out.append(Segment({k: v for k, v in item.items() if k != "id"}, chars, media, None))
    return out


def _part(role: str, part: Any) -> Segment:
    if isinstance(part, Mapping) and part.get("type") == "input_image":
        tokens = IMAGE_TOKENS.get(str(part.get("detail")), IMAGE_TOKENS_DEFAULT)
        return Segment({"role": role, "part": part}, 0, tokens, None)
    chars, media = measure(part)
    return Segment({"role": role, "part": part}, chars, media, None)
