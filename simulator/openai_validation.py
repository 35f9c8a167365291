"""Request validation for the OpenAI-compatible front, as strict as the real Chat Completions API.

Messages follow OpenAI's wording ("Unknown parameter: 'foo'.", "Invalid value: 'image'.
Supported values are: ...", "Missing required parameter: 'messages[0].role'.") and every error
names the offending field in `param`, so a gateway test can assert what it got wrong. What matters
most is what a gateway translating from Anthropic's Messages API gets wrong: Anthropic-shaped
content parts and `cache_control` keys, tools without the `function` wrapper, tool results that
answer nothing, arguments sent as objects instead of JSON strings.

The allowed request fields are those of the API reference
(https://platform.openai.com/docs/api-reference/chat/create) as typed by the openai SDK in use
(openai-python 3.57.0 `types/chat/completion_create_params.py`; reference/protocol.md 2.1).
The "vllm" flavour accepts any extra top-level field, as vLLM's server does (its request models
allow extra fields and only log them), e.g. `chat_template_kwargs`, `top_k`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from simulator.openai_errors import OpenAIError
from simulator.openai_files import check_file_part
from simulator.openai_models import MODELS, OpenAIModel
from simulator.openai_signatures import check_signatures
from simulator.openai_strict import strict_schema_error
from simulator.openai_wording import bad_value, check_keys, invalid_type, missing, unknown

REQUEST_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "safety_identifier",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "metadata",
        "store",
        "service_tier",
        "modalities",
        "verbosity",
        "prediction",
        "audio",
        "web_search_options",
        "moderation",
        # Deprecated, still accepted by the API.
        "functions",
        "function_call",
    }
)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
ROLES = ("system", "developer", "user", "assistant", "tool")
_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}
# Content part types per role, and the keys each part may carry.
_PART_TYPES = {
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
}
_PART_KEYS = {
    "text": {"type", "text"},
    "image_url": {"type", "image_url"},
    "input_audio": {"type", "input_audio"},
    "file": {"type", "file"},
    "refusal": {"type", "refusal"},
}
# A replayed tool call's keys; Gemini's endpoint also takes its thought signature back.
_CALL_KEYS = {False: {"id", "type", "function"}, True: {"id", "type", "function", "extra_content"}}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
TOOL_NAME_MAX = 64


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_chat(body: Any, *, flavour: str = "openai") -> OpenAIError | None:
    """Why the body is not a valid Chat Completions request for a known model; None if it is."""
    if not isinstance(body, Mapping):
        return OpenAIError(400, "We could not parse the JSON body of your request.")
    if flavour != "vllm":
        extra = sorted(set(body) - REQUEST_FIELDS)
        if extra:
            return unknown(extra[0])
    if "model" not in body:
        return missing("model")
    if not isinstance(body["model"], str):
        return invalid_type("model", "a string", body["model"])
    model = MODELS.get(body["model"])
    if model is None:
        return OpenAIError(
            404,
            f"The model `{body['model']}` does not exist or you do not have access to it.",
            None,
            "model_not_found",
        )
    return (
        _check_messages(body, model, flavour)
        or _check_tools(body)
        or _check_output(body, model)
        or check_sampling(body)
        or _check_stream(body)
        or _check_format(body)
    )


def _check_messages(
    body: Mapping[str, Any], model: OpenAIModel, flavour: str
) -> OpenAIError | None:
    if "messages" not in body:
        return missing("messages")
    messages = body["messages"]
    if not isinstance(messages, list):
        return invalid_type("messages", "an array", messages)
    if not messages:
        return OpenAIError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got"
            " an empty array instead.",
            "messages",
            "empty_array",
        )
    # vLLM reads reasoning replayed on assistant turns (providers.md §2.4); OpenAI does not.
    replay = (
        {"reasoning_content", "reasoning"}
        if model.visible_reasoning or flavour == "vllm"
        else set()
    )
    pending: set[str] = set()  # tool_call ids of the last assistant turn not answered yet
    for n, message in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(message, Mapping):
            return invalid_type(where, "an object", message)
        if "role" not in message:
            return missing(f"{where}.role")
        role = message["role"]
        if role not in ROLES:
            return bad_value(f"{where}.role", role, ROLES)
        allowed = _MESSAGE_KEYS[role] | (replay if role == "assistant" else set())
        error = check_keys(message, allowed, where) or _check_content(where, role, message)
        if error:
            return error
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                return missing(f"{where}.tool_call_id")
            if call_id not in pending:
                return OpenAIError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a"
                    " preceeding message with 'tool_calls'.",
                    f"messages.[{n}].role",
                )
            pending.discard(call_id)
            continue
        if pending:
            return _unanswered(n - 1, pending)
        if role == "assistant":
            calls = message.get("tool_calls")
            error = _check_tool_calls(where, calls, model)
            if error:
                return error
            pending = {c["id"] for c in calls or ()}
    if pending:
        return _unanswered(len(messages) - 1, pending)
    return check_signatures(messages) if model.thought_signatures else None


def _unanswered(n: int, pending: set[str]) -> OpenAIError:
    return OpenAIError(
        400,
        "An assistant message with 'tool_calls' must be followed by tool messages responding to"
        " each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(sorted(pending)),
        f"messages.[{n}].role",
    )


def _check_content(where: str, role: str, message: Mapping[str, Any]) -> OpenAIError | None:
    if "content" not in message or message["content"] is None:
        if role == "assistant" and (message.get("tool_calls") or message.get("refusal")):
            return None
        return missing(f"{where}.content")
    content = message["content"]
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return invalid_type(f"{where}.content", "a string or array", content)
    types = _PART_TYPES.get(role, ("text",))
    for m, part in enumerate(content):
        at = f"{where}.content[{m}]"
        if not isinstance(part, Mapping):
            return invalid_type(at, "an object", part)
        if "type" not in part:
            return missing(f"{at}.type")
        ptype = part["type"]
        if ptype not in types:
            # Anthropic's image (with `source`), document, tool_use, tool_result, thinking ...
            return bad_value(f"{at}.type", ptype, types)
        error = check_keys(part, _PART_KEYS[ptype], at)
        if error:
            return error
        if ptype in ("text", "refusal") and not isinstance(part.get(ptype), str):
            if ptype not in part:
                return missing(f"{at}.{ptype}")
            return invalid_type(f"{at}.{ptype}", "a string", part[ptype])
        if ptype == "image_url":
            image = part.get("image_url")
            if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
                return missing(f"{at}.image_url.url")
            error = check_keys(image, {"url", "detail"}, f"{at}.image_url")
            if error:
                return error
        if ptype == "file":
            error = check_file_part(part, at)
            if error:
                return error
    return None


def _check_tool_calls(where: str, calls: Any, model: OpenAIModel) -> OpenAIError | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return invalid_type(f"{where}.tool_calls", "an array", calls)
    for k, call in enumerate(calls):
        at = f"{where}.tool_calls[{k}]"
        if not isinstance(call, Mapping):
            return invalid_type(at, "an object", call)
        error = check_keys(call, _CALL_KEYS[model.thought_signatures], at)
        if error:
            return error
        for key in ("id", "type", "function"):
            if key not in call:
                return missing(f"{at}.{key}")
        if not isinstance(call["id"], str):
            return invalid_type(f"{at}.id", "a string", call["id"])
        if call["type"] != "function":
            return bad_value(f"{at}.type", call["type"], ("function",))
        function = call["function"]
        if not isinstance(function, Mapping):
            return invalid_type(f"{at}.function", "an object", function)
        error = check_keys(function, {"name", "arguments"}, f"{at}.function")
        if error:
            return error
        for key in ("name", "arguments"):
            if key not in function:
                return missing(f"{at}.function.{key}")
            if not isinstance(function[key], str):
                # Anthropic's `input` is an object; OpenAI's arguments are a JSON string.
                return invalid_type(f"{at}.function.{key}", "a string", function[key])
    return None


def _check_tools(body: Mapping[str, Any]) -> OpenAIError | None:
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            return invalid_type("tools", "an array", tools)
        for i, tool in enumerate(tools):
            at = f"tools[{i}]"
            if not isinstance(tool, Mapping):
                return invalid_type(at, "an object", tool)
            error = check_keys(tool, {"type", "function"}, at)
            if error:
                return error
            if "type" not in tool:
                return missing(f"{at}.type")
            if tool["type"] != "function":
                return bad_value(f"{at}.type", tool["type"], ("function",))
            error = _check_function(tool.get("function"), f"{at}.function")
            if error:
                return error
            names.append(tool["function"]["name"])
    return _check_tool_choice(body, names)


def _check_function(function: Any, at: str) -> OpenAIError | None:
    if function is None:
        return missing(at)
    if not isinstance(function, Mapping):
        return invalid_type(at, "an object", function)
    error = check_keys(function, {"name", "description", "parameters", "strict"}, at)
    if error:
        return error
    error = check_tool_name(function.get("name"), f"{at}.name")
    if error:
        return error
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        return invalid_type(f"{at}.parameters", "an object", parameters)
    if function.get("strict") is True:
        error = strict_schema_error(function["name"], parameters or {}, at)
        if error:
            return error
    if "description" in function and not isinstance(function["description"], str):
        return invalid_type(f"{at}.description", "a string", function["description"])
    return None


def check_tool_name(name: Any, param: str) -> OpenAIError | None:
    """A function name as OpenAI takes it: ^[a-zA-Z0-9_-]+$, at most 64 characters."""
    if name is None:
        return missing(param)
    if not isinstance(name, str):
        return invalid_type(param, "a string", name)
    at = param.removesuffix(".name")
    if len(name) > TOOL_NAME_MAX:
        return OpenAIError(
            400,
            f"Invalid '{at}.name': string too long. Expected a string with maximum length"
            f" {TOOL_NAME_MAX}, but got a string with length {len(name)} instead.",
            f"{at}.name",
            "string_above_max_length",
        )
    if not TOOL_NAME.match(name):
        return OpenAIError(
            400,
            f"Invalid '{at}.name': string does not match pattern. Expected a string that matches"
            " the pattern '^[a-zA-Z0-9_-]+$'.",
            f"{at}.name",
            "invalid_value",
        )
    return None


def _check_tool_choice(body: Mapping[str, Any], names: list[str]) -> OpenAIError | None:
    if "tool_choice" not in body:
        return None
    choice = body["tool_choice"]
    if not names and choice != "none":
        return OpenAIError(
            400,
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are"
            " specified.",
            "tool_choice",
        )
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            # Anthropic's "any" lands here.
            return bad_value("tool_choice", choice, ("none", "auto", "required"))
        return None
    if not isinstance(choice, Mapping):
        return invalid_type("tool_choice", "a string or object", choice)
    if choice.get("type") == "allowed_tools":
        allowed = choice.get("allowed_tools")
        if not isinstance(allowed, Mapping) or allowed.get("mode") not in ("auto", "required"):
            return missing("tool_choice.allowed_tools.mode")
        return check_keys(choice, {"type", "allowed_tools"}, "tool_choice")
    if choice.get("type") != "function":
        return bad_value("tool_choice.type", choice.get("type"), ("function", "allowed_tools"))
    error = check_keys(choice, {"type", "function"}, "tool_choice")
    function = choice.get("function")
    if error:
        return error
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return missing("tool_choice.function.name")
    if function["name"] not in names:
        return OpenAIError(
            400,
            f"Invalid value for 'tool_choice': no function named '{function['name']}' was"
            " specified in the 'tools' parameter.",
            "tool_choice",
        )
    return None


def _check_output(body: Mapping[str, Any], model: OpenAIModel) -> OpenAIError | None:
    if "max_tokens" in body and "max_completion_tokens" in body:
        return OpenAIError(
            400,
            "Invalid request: 'max_tokens' and 'max_completion_tokens' cannot both be set. Use"
            " 'max_completion_tokens'.",
            "max_tokens",
            "invalid_value",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not is_int(value):
            return invalid_type(name, "an integer", value)
        if value < 1:
            return OpenAIError(
                400,
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got"
                f" {value} instead.",
                name,
                "integer_below_min_value",
            )
        if value > model.max_output_tokens:
            return OpenAIError(
                400,
                f"{name} is too large: {value}. This model supports at most"
                f" {model.max_output_tokens} completion tokens, whereas you provided {value}.",
                name,
                "invalid_value",
            )
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not model.reasoning:
            return OpenAIError(
                400,
                "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                "reasoning_effort",
                "unsupported_parameter",
            )
        if effort not in REASONING_EFFORTS:
            return bad_value("reasoning_effort", effort, REASONING_EFFORTS)
    n = body.get("n")
    if n is not None and (not is_int(n) or not 1 <= n <= 128):
        return OpenAIError(
            400, f"Invalid 'n': expected an integer from 1 to 128, got {n}.", "n", "invalid_value"
        )
    return None


def check_sampling(body: Mapping[str, Any]) -> OpenAIError | None:
    for name, low, high in (
        ("temperature", 0, 2),
        ("top_p", 0, 1),
        ("presence_penalty", -2, 2),
        ("frequency_penalty", -2, 2),
    ):
        value = body.get(name)
        if value is None:
            continue
        if not _is_number(value):
            return invalid_type(name, "a number", value)
        if value > high:
            return OpenAIError(
                400,
                f"Invalid '{name}': decimal above maximum value. Expected a value <= {high}, but"
                f" got {value} instead.",
                name,
                "decimal_above_max_value",
            )
        if value < low:
            return OpenAIError(
                400,
                f"Invalid '{name}': decimal below minimum value. Expected a value >= {low}, but"
                f" got {value} instead.",
                name,
                "decimal_below_min_value",
            )
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            return invalid_type("stop", "a string or array of strings", stop)
        if len(stop) > 4:
            return OpenAIError(
                400,
                "Invalid 'stop': array too long. Expected an array with maximum length 4, but got"
                f" an array with length {len(stop)} instead.",
                "stop",
                "array_above_max_length",
            )
    return None


def _check_stream(body: Mapping[str, Any]) -> OpenAIError | None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return invalid_type("stream", "a boolean", stream)
    options = body.get("stream_options")
    if options is None:
        return None
    if not stream:
        return OpenAIError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )
    if not isinstance(options, Mapping):
        return invalid_type("stream_options", "an object", options)
    return check_keys(options, {"include_usage", "include_obfuscation"}, "stream_options")


def _check_format(body: Mapping[str, Any]) -> OpenAIError | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kinds = ("text", "json_object", "json_schema")
    if not isinstance(fmt, Mapping) or fmt.get("type") not in kinds:
        value = fmt.get("type") if isinstance(fmt, Mapping) else fmt
        return bad_value("response_format.type", value, kinds)
    if fmt["type"] == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping):
            return missing("response_format.json_schema")
        if not isinstance(spec.get("name"), str):
            return missing("response_format.json_schema.name")
    if fmt["type"] == "json_object" and "json" not in _all_text(body).lower():
        return OpenAIError(
            400,
            "'messages' must contain the word 'json' in some form, to use 'response_format' of"
            " type 'json_object'.",
            "messages",
        )
    return None


def _all_text(body: Mapping[str, Any]) -> str:
    texts: list[str] = []
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "\n".join(texts)
