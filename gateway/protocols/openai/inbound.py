"""OpenAI Chat Completions request -> Anthropic Messages request (pure: dict in, dict out).

The contract is /work/shared/spec/chat-completions.md. Fields the spec does not describe are
ignored and never reach the model; fields that would change the answer and have no equivalent are
refused with a 400 naming the field. Only `InvalidRequest` ever escapes for bad input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .inbound_messages import Converter, check_depth, short
from .types import (
    EFFORT_LEVELS,
    ImageRef,
    InvalidRequest,
    ModelCaps,
    TranslatedRequest,
)

__all__ = [
    "EFFORT_LEVELS",
    "ImageRef",
    "InvalidRequest",
    "ModelCaps",
    "TranslatedRequest",
    "attach_thinking",
    "disable_thinking",
    "translate_request",
]

DEFAULT_MAX_TOKENS = 32000
MAX_STOP_SEQUENCES = 4
MAX_PROMPT_CACHE_KEY = 256
MAX_CACHE_BREAKPOINTS = 4  # Anthropic's per-request limit

# Refused whenever present and not null: each would change the answer and has no equivalent.
_REFUSED: tuple[tuple[str, str], ...] = (
    ("top_logprobs", "log probabilities are not supported"),
    ("logit_bias", "logit_bias is not supported"),
    ("audio", "audio output is not supported"),
    ("web_search_options", "web search is not supported"),
    ("functions", "the legacy functions API is not supported; use tools"),
    ("function_call", "the legacy function_call is not supported; use tool_choice"),
)

_THINKING_TYPES = ("thinking", "redacted_thinking")

# Schema keywords whose value is a map of name -> subschema, a single subschema, or a list of them.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_SINGLE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems", "items")


def translate_request(
    chat: dict[str, Any], caps: ModelCaps, *, auto_cache: bool = True
) -> TranslatedRequest:
    """Translate a chat.completions request body for the model described by `caps`.

    `auto_cache=False` is the `x-ezat-cache: off` opt-out. The returned body has no "model": the
    gateway sets the upstream deployment's id.
    """
    if not isinstance(chat, dict):
        raise InvalidRequest("the request body must be a JSON object")
    _refuse_unsupported(chat)
    stream = _optional_bool(chat, "stream")
    include_usage = _include_usage(chat.get("stream_options"))

    conv = Converter(caps)
    system, messages = conv.convert_messages(chat.get("messages"))
    body: dict[str, Any] = {"max_tokens": _max_tokens(chat, caps), "messages": messages}
    if system:
        body["system"] = system
    stop = _stop_sequences(chat.get("stop"))
    if stop:
        body["stop_sequences"] = stop

    tools = _tools(chat.get("tools"), conv)
    forced_tool = False
    if tools:
        body["tools"] = tools
        tool_choice = _tool_choice(chat, tools)
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
            forced_tool = tool_choice["type"] in ("any", "tool")

    effort = _reasoning_effort(chat.get("reasoning_effort"), caps)
    output_config: dict[str, Any] = {}
    if effort is not None and effort != "none":
        output_config["effort"] = effort
    # Anthropic refuses thinking together with a forced tool call; effort alone is still valid.
    thinking = "effort" in output_config and not forced_tool
    if thinking:
        body["thinking"] = {"type": "adaptive"}
    _sampling(chat, caps, thinking, body)
    response_format = _response_format(chat.get("response_format"), caps)
    if response_format is not None:
        output_config["format"] = response_format
    if output_config:
        body["output_config"] = output_config

    if caps.prompt_caching:
        _apply_prompt_caching(body, conv.cache_params, auto_cache)
    if stream:
        body["stream"] = True
    return TranslatedRequest(
        body=body,
        stream=stream,
        include_usage=stream and include_usage,
        session_hint=_prompt_cache_key(chat.get("prompt_cache_key")),
        reasoning_effort=effort,
        thinking=thinking,
        images=conv.images,
        tool_call_ids_needing_thinking=conv.tool_use_ids,
    )


# -- scalar fields ----------------------------------------------------------------------------


def _refuse_unsupported(chat: dict[str, Any]) -> None:
    for name, reason in _REFUSED:
        if chat.get(name) is not None:
            raise InvalidRequest(f"{name}: {reason}", name)
    n = chat.get("n")
    if n is not None and not (type(n) is int and n == 1):
        raise InvalidRequest("n: only n=1 is supported (one choice per request)", "n")
    logprobs = chat.get("logprobs")
    if logprobs is True:
        raise InvalidRequest("logprobs: log probabilities are not supported", "logprobs")
    if logprobs is not None and logprobs is not False:
        raise InvalidRequest("logprobs: must be a boolean", "logprobs")


def _optional_bool(obj: dict[str, Any], name: str, param: str | None = None) -> bool:
    value = obj.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        param = param or name
        raise InvalidRequest(f"{param}: must be a boolean", param)
    return value


def _include_usage(options: object) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise InvalidRequest("stream_options: must be an object", "stream_options")
    return _optional_bool(options, "include_usage", "stream_options.include_usage")


def _max_tokens(chat: dict[str, Any], caps: ModelCaps) -> int:
    # max_completion_tokens is the current name; max_tokens is its deprecated alias.
    for name in ("max_completion_tokens", "max_tokens"):
        value = chat.get(name)
        if value is None:
            continue
        if type(value) is not int or not 1 <= value <= caps.max_output_tokens:
            raise InvalidRequest(
                f"{name}: must be an integer between 1 and {caps.max_output_tokens} "
                f"(the maximum output of {caps.canonical_id})",
                name,
            )
        return value
    return min(DEFAULT_MAX_TOKENS, caps.max_output_tokens)


def _stop_sequences(value: object) -> list[str]:
    if value is None:
        return []
    sequences = [value] if isinstance(value, str) else value
    if (
        not isinstance(sequences, list)
        or len(sequences) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in sequences)
    ):
        raise InvalidRequest(
            "stop: must be a non-empty string or an array of up to 4 non-empty strings", "stop"
        )
    return list(sequences)


def _number(chat: dict[str, Any], name: str, high: float) -> float | None:
    value = chat.get(name)
    if value is None:
        return None
    valid = type(value) in (int, float) and math.isfinite(value) and 0 <= value <= high
    if not valid:
        raise InvalidRequest(f"{name}: must be a number between 0 and {high:g}", name)
    return value  # type: ignore[return-value]  # checked above


def _sampling(chat: dict[str, Any], caps: ModelCaps, thinking: bool, body: dict[str, Any]) -> None:
    temperature = _number(chat, "temperature", 2)
    top_p = _number(chat, "top_p", 1)
    # Newer models refuse sampling parameters and thinking models accept only their defaults;
    # many OpenAI clients send temperature: 0 anyway, so these are dropped silently.
    if not caps.sampling or thinking:
        return
    if temperature is not None:
        body["temperature"] = min(temperature, 1)  # Anthropic's range is 0..1
    if top_p is not None and top_p < 1:
        body["top_p"] = top_p


def _prompt_cache_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest("prompt_cache_key: must be a string", "prompt_cache_key")
    if len(value) > MAX_PROMPT_CACHE_KEY:
        raise InvalidRequest(
            f"prompt_cache_key: must be at most {MAX_PROMPT_CACHE_KEY} characters",
            "prompt_cache_key",
        )
    return value or None


def _reasoning_effort(value: object, caps: ModelCaps) -> str | None:
    """Return the effort level to send, "none" for no thinking, or None when not sent."""
    if value is None:
        return None
    levels = tuple(lvl for lvl in caps.reasoning_efforts if lvl != "none" and lvl in EFFORT_LEVELS)
    if not isinstance(value, str) or value not in EFFORT_LEVELS:
        supported = ", ".join(("none", *levels)) if levels else "no effort levels"
        raise InvalidRequest(
            f"reasoning_effort: {short(value)} is not valid; use one of "
            f"{', '.join(EFFORT_LEVELS)} (model {caps.canonical_id} supports {supported}; "
            "other values map to the nearest supported level)",
            "reasoning_effort",
        )
    if value == "none" or not levels:
        return "none"
    wanted = EFFORT_LEVELS.index(value)
    # Nearest by position; on a tie the lower level wins (cheaper, and never more than asked).
    return min(
        levels,
        key=lambda lvl: (abs(EFFORT_LEVELS.index(lvl) - wanted), EFFORT_LEVELS.index(lvl)),
    )


# -- tools ------------------------------------------------------------------------------------


def _tools(raw: object, conv: Converter) -> list[dict[str, Any]]:
    if raw is None or raw == []:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("tools: must be an array", "tools")
    if not conv.caps.tools:
        raise InvalidRequest(
            f"tools: model {conv.caps.canonical_id} does not support tool use", "tools"
        )
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for k, tool in enumerate(raw):
        param = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        if tool.get("type") != "function":
            raise InvalidRequest(
                f'{param}.type: only function tools (type "function") are supported',
                f"{param}.type",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise InvalidRequest(f"{param}.function: must be an object", f"{param}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(
                f"{param}.function.name: must be a non-empty string", f"{param}.function.name"
            )
        if name in names:
            raise InvalidRequest(
                f"{param}.function.name: duplicate tool name {short(name)}",
                f"{param}.function.name",
            )
        names.add(name)
        out: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest(
                f"{param}.function.description: must be a string",
                f"{param}.function.description",
            )
        if description:
            out["description"] = description
        out["input_schema"] = _input_schema(function.get("parameters"), f"{param}.function")
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise InvalidRequest(
                    f"{param}.function.strict: must be a boolean", f"{param}.function.strict"
                )
            out["strict"] = strict
        # OpenRouter puts the marker on the tool, LiteLLM on the function: accept both.
        if tool.get("cache_control") is not None:
            conv.copy_cache_control(tool, out, param)
        else:
            conv.copy_cache_control(function, out, f"{param}.function")
        tools.append(out)
    return tools


def _input_schema(parameters: object, param: str) -> dict[str, Any]:
    if parameters is None or parameters == {}:
        return {"type": "object", "properties": {}}
    param = f"{param}.parameters"
    if not isinstance(parameters, dict):
        raise InvalidRequest(f"{param}: must be a JSON Schema object", param)
    kind = parameters.get("type", "object")
    if kind != "object":
        raise InvalidRequest(f'{param}.type: must be "object"', f"{param}.type")
    check_depth(parameters, param)
    # Anthropic requires an explicit object type; OpenAI lets clients leave it out.
    return parameters if "type" in parameters else {"type": "object", **parameters}


def _tool_choice(chat: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    raw = chat.get("tool_choice")
    choice: dict[str, Any] | None
    if raw is None:
        choice = None
    elif raw == "auto":
        choice = {"type": "auto"}
    elif raw == "none":
        choice = {"type": "none"}
    elif raw == "required":
        choice = {"type": "any"}
    elif isinstance(raw, dict) and raw.get("type") == "function":
        function = raw.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not any(t["name"] == name for t in tools):
            raise InvalidRequest(
                f"tool_choice.function.name: {short(name)} is not one of the tools",
                "tool_choice.function.name",
            )
        choice = {"type": "tool", "name": name}
    else:
        raise InvalidRequest(
            'tool_choice: must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    parallel = chat.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequest("parallel_tool_calls: must be a boolean", "parallel_tool_calls")
    if parallel is False:
        if choice is None:
            choice = {"type": "auto"}
        # Anthropic has no such flag on "none": there is nothing to parallelise.
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    return choice


# -- response_format --------------------------------------------------------------------------


def _response_format(raw: object, caps: ModelCaps) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("response_format: must be an object", "response_format")
    kind = raw.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        raise InvalidRequest(
            'response_format: {"type": "json_object"} is not supported because there is no '
            'schema to enforce; use {"type": "json_schema", "json_schema": {"schema": ...}}',
            "response_format",
        )
    if kind != "json_schema":
        raise InvalidRequest(
            'response_format.type: must be "text" or "json_schema"', "response_format.type"
        )
    if not caps.structured_outputs:
        raise InvalidRequest(
            f"response_format: model {caps.canonical_id} does not support structured outputs",
            "response_format",
        )
    spec = raw.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequest(
            "response_format.json_schema: must be an object", "response_format.json_schema"
        )
    schema = spec.get("schema")
    param = "response_format.json_schema.schema"
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{param}: must be a JSON Schema object", param)
    check_depth(schema, param)
    _check_closed_objects(schema, param)
    return {"type": "json_schema", "schema": schema}


def _check_closed_objects(schema: dict[str, Any], root: str) -> None:
    """Every object schema must say `additionalProperties: false` (Anthropic's requirement).

    Walked iteratively in document order, so the first offending path is the one reported.
    """
    stack: list[tuple[object, str]] = [(schema, root)]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue  # true/false are valid schemas
        kind = node.get("type")
        is_object = (
            kind == "object"
            or (isinstance(kind, list) and "object" in kind)
            or (kind is None and isinstance(node.get("properties"), dict))
        )
        if is_object and node.get("additionalProperties") is not False:
            raise InvalidRequest(f'{path}: objects need "additionalProperties": false', path)
        children: list[tuple[object, str]] = []
        for key in _SCHEMA_MAPS:
            sub = node.get(key)
            if isinstance(sub, dict):
                children.extend((s, f"{path}.{key}.{name}") for name, s in sub.items())
        for key in _SCHEMA_SINGLE:
            sub = node.get(key)
            if isinstance(sub, dict):
                children.append((sub, f"{path}.{key}"))
        for key in _SCHEMA_LISTS:
            sub = node.get(key)
            if isinstance(sub, list):
                children.extend((s, f"{path}.{key}[{i}]") for i, s in enumerate(sub))
        stack.extend(reversed(children))


# -- prompt caching ---------------------------------------------------------------------------


def _apply_prompt_caching(body: dict[str, Any], caller_params: list[str], auto: bool) -> None:
    if len(caller_params) > MAX_CACHE_BREAKPOINTS:
        param = caller_params[MAX_CACHE_BREAKPOINTS]
        raise InvalidRequest(
            f"{param}: at most {MAX_CACHE_BREAKPOINTS} cache_control breakpoints are allowed",
            param,
        )
    if not auto or caller_params:
        return  # the caller placed its own breakpoints: add none
    # Breakpoint 1 ends the stable prefix (tools -> system), so every turn reads it back.
    system = body.get("system")
    tools = body.get("tools")
    prefix_end = system[-1] if system else tools[-1] if tools else None
    if prefix_end is not None:
        prefix_end["cache_control"] = {"type": "ephemeral"}
    # Breakpoint 2 on the newest message: written now, read back by the next turn.
    body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


# -- thinking with tools ----------------------------------------------------------------------


def attach_thinking(
    body: dict[str, Any],
    blocks_by_tool_id: Mapping[str, list[dict[str, Any]]],
    thinking_requested: bool,
) -> bool:
    """Put stored signed thinking blocks back at the start of assistant tool_use turns.

    Anthropic requires the thinking that preceded a tool call to be replayed with its results
    when thinking is on; OpenAI clients never saw those blocks, so the gateway stored them by
    tool call id. Returns False when thinking was requested but the last assistant tool_use turn
    could not be completed: the caller must then `disable_thinking(body)`, because Anthropic
    would otherwise refuse the request.
    """
    last_turn_ok = True
    for turn in body.get("messages", ()):
        content = turn.get("content")
        if turn.get("role") != "assistant" or not isinstance(content, list):
            continue
        tool_ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
        if not tool_ids:
            continue
        if content[0].get("type") in _THINKING_TYPES:
            last_turn_ok = True  # already attached (idempotent)
            continue
        found: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        for tool_id in tool_ids:
            # Every tool call of one reply maps to the same blocks: insert each block once.
            for block in blocks_by_tool_id.get(tool_id, ()) if isinstance(tool_id, str) else ():
                key = (block.get("type"), block.get("signature"), block.get("data"))
                if key not in seen:
                    seen.add(key)
                    found.append(dict(block))
        content[0:0] = found
        last_turn_ok = bool(found)
    return last_turn_ok or not thinking_requested


def disable_thinking(body: dict[str, Any]) -> None:
    """Drop the thinking request; `output_config.effort` stays (it is valid on its own)."""
    body.pop("thinking", None)
