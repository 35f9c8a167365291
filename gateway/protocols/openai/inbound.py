"""OpenAI Chat Completions request -> Anthropic Messages request (pure: dict in, dict out).

The contract is /work/shared/spec/chat-completions.md. Fields the spec does not describe are
ignored and never reach the model; fields that would change the answer and have no equivalent are
refused with a 400 naming the field. Only `InvalidRequest` ever escapes for bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import common
from .common import disable_thinking
from .inbound_messages import Converter, short
from .types import InvalidRequest, ModelCaps, TranslatedRequest

__all__ = [
    "InvalidRequest",
    "ModelCaps",
    "TranslatedRequest",
    "attach_thinking",
    "disable_thinking",
    "translate_request",
]

MAX_STOP_SEQUENCES = 4

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
        forced_tool = common.apply_tool_choice(body, _tool_choice(chat, tools), caps)

    effort = common.reasoning_effort(chat.get("reasoning_effort"), caps, "reasoning_effort")
    # The same call as the other OpenAI translation's (`duplicates` pairs them by shape): the
    # shared steps are in reason_and_finish; only the fields each API names differ.
    thinking = common.reason_and_finish(
        body,
        effort,
        forced_tool,
        (chat.get("temperature"), chat.get("top_p")),
        lambda: _response_format(chat.get("response_format"), caps),
        caps=caps,
        cache_params=conv.cache_params,
        auto_cache=auto_cache,
        stream=stream,
    )
    return TranslatedRequest(
        body=body,
        stream=stream,
        include_usage=stream and include_usage,
        session_hint=common.prompt_cache_key(chat.get("prompt_cache_key")),
        reasoning_effort=effort,
        thinking=thinking,
        images=conv.images,
        tool_call_ids_needing_thinking=conv.tool_use_ids,
        media=conv.media,
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
        value = common.max_output_tokens(chat.get(name), name, caps)
        if value is not None:
            return value
    return common.default_max_tokens(caps)


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
        out = common.function_tool(
            name=function.get("name"),
            description=function.get("description"),
            parameters=function.get("parameters"),
            strict=function.get("strict"),
            param=param,
            field=f"{param}.function",
            names=names,
        )
        # OpenRouter puts the marker on the tool, LiteLLM on the function: accept both.
        if tool.get("cache_control") is not None:
            conv.copy_cache_control(tool, out, param)
        else:
            conv.copy_cache_control(function, out, f"{param}.function")
        tools.append(out)
    return tools


def _tool_choice(chat: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    raw = chat.get("tool_choice")
    name: str | None = None
    if raw is None or raw in ("auto", "none", "required"):
        kind = raw
    elif isinstance(raw, dict) and raw.get("type") == "function":
        function = raw.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not any(t["name"] == name for t in tools):
            raise InvalidRequest(
                f"tool_choice.function.name: {short(name)} is not one of the tools",
                "tool_choice.function.name",
            )
        kind = "function"
    else:
        raise InvalidRequest(
            'tool_choice: must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    return common.tool_choice(kind, name, chat.get("parallel_tool_calls"))


# -- response_format --------------------------------------------------------------------------


def _response_format(raw: object, caps: ModelCaps) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("response_format: must be an object", "response_format")
    use = '{"type": "json_schema", "json_schema": {"schema": ...}}'
    if not common.asks_for_schema(raw, "response_format", use):
        return None
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
    return common.json_schema_format(
        spec.get("schema"), caps, "response_format.json_schema.schema", "response_format"
    )


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
