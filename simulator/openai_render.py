"""The OpenAI front's translation to and from the simulation (pure: no I/O, no clock).

A Chat Completions request is read as a Messages-shaped body only to drive the same deterministic
reply builder the Messages front uses (simulator/replies.py): same scripted replies, same
default answers, tool calls, stop sequences and truncation. The reply is then rendered the way
OpenAI renders it (reference/protocol.md 2.4-2.5): `message.content`, `message.tool_calls` with
JSON-string arguments, reasoning as `reasoning_content` (vLLM/DeepSeek style) or not at all
(OpenAI counts it in `completion_tokens_details.reasoning_tokens` and never shows it), and usage
with OpenAI's inclusive semantics: `prompt_tokens` includes the cached tokens, `completion_tokens`
includes the reasoning tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from simulator.openai_files import file_part_tokens
from simulator.openai_models import OpenAIModel
from simulator.openai_signatures import extra_content
from simulator.replies import Reply
from simulator.sse import chunk_json, chunk_text
from simulator.tokens import Segment, measure

# OpenAI caches prompts of 1024 tokens or more, and reports hits in 128-token steps
# (providers.md §4: developers.openai.com/api/docs/guides/prompt-caching).
CACHE_MIN_TOKENS = 1024
CACHE_STEP = 128
# A flat price for an image part: OpenAI's 85 base tokens at detail "low", 85 + 4 tiles of 170
# otherwise. Base64 data URLs would dominate a character count.
IMAGE_TOKENS = {"low": 85}
IMAGE_TOKENS_DEFAULT = 765
# When the request sets no cap, the reply builder still needs one.
DEFAULT_MAX_TOKENS = 32_000

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def reasoning_on(body: Mapping[str, Any], model: OpenAIModel) -> bool:
    """Reasoning models think unless told not to: effort "none", or vLLM's chat template switch
    `chat_template_kwargs: {"enable_thinking": false}` (Qwen3)."""
    if not model.reasoning or body.get("reasoning_effort") == "none":
        return False
    kwargs = body.get("chat_template_kwargs")
    return not (isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is False)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(p.get("text", ""))
        for p in content
        if isinstance(p, Mapping) and p.get("type") == "text"
    )


def _arguments(raw: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}


def reply_body(body: Mapping[str, Any], model: OpenAIModel) -> dict[str, Any]:
    """The request as the Messages-shaped body replies.build_reply reads."""
    messages: list[dict[str, Any]] = []
    for message in body["messages"]:
        role = message["role"]
        if role in ("system", "developer"):
            continue
        if role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": _text(message.get("content")),
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user" and last.get("results"):
                last["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result], "results": True})
            continue
        if role == "user":
            messages.append({"role": "user", "content": message["content"]})
            continue
        blocks: list[dict[str, Any]] = []
        text = _text(message.get("content"))
        if text:
            blocks.append({"type": "text", "text": text})
        for call in message.get("tool_calls") or ():
            function = call["function"]
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": function["name"],
                    "input": _arguments(function["arguments"]),
                }
            )
        messages.append({"role": "assistant", "content": blocks})
    for message in messages:
        message.pop("results", None)

    out: dict[str, Any] = {"model": body["model"], "messages": messages}
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    out["max_tokens"] = cap or min(DEFAULT_MAX_TOKENS, model.max_output_tokens)
    if reasoning_on(body, model):
        out["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    _add_tools(body, out)
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object"):
        schema: Any = {"type": "object", "properties": {"answer": {"type": "string"}}}
        if fmt["type"] == "json_schema":
            schema = fmt["json_schema"].get("schema") or {"type": "object"}
        out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return out


def _add_tools(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    tools = body.get("tools")
    if not tools:
        return
    out["tools"] = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in tools
    ]
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        out["tool_choice"] = {"type": "none"}
    elif choice == "required":
        out["tool_choice"] = {"type": "any"}
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        out["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
    elif isinstance(choice, Mapping):  # allowed_tools: the reply builder picks from all tools
        mode = choice["allowed_tools"]["mode"]
        out["tool_choice"] = {"type": "any" if mode == "required" else "auto"}
    else:
        out["tool_choice"] = {"type": "auto"}
    if body.get("parallel_tool_calls") is False:
        out["tool_choice"]["disable_parallel_tool_use"] = True


# --- tokens and cache ------------------------------------------------------------------------
def _part_segment(role: str, part: Any) -> Segment:
    obj = {"role": role, "part": part}
    if isinstance(part, Mapping) and part.get("type") == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return Segment(obj, 0, IMAGE_TOKENS.get(str(detail), IMAGE_TOKENS_DEFAULT), None)
    if isinstance(part, Mapping) and part.get("type") == "file":
        return Segment(obj, 0, file_part_tokens(part), None)
    chars, media = measure(part)
    return Segment(obj, chars, media, None)


def segments(body: Mapping[str, Any]) -> list[Segment]:
    """Prompt segments in prefix order (tools, then each message's parts), for counting and for
    the automatic prefix cache. The role is part of each segment's identity, not of its size."""
    out: list[Segment] = []
    for tool in body.get("tools") or ():
        chars, media = measure(tool)
        out.append(Segment(tool, chars, media, None))
    for message in body["messages"]:
        role = message["role"]
        content = message.get("content")
        parts = content if isinstance(content, list) else [content] if content else []
        out.extend(_part_segment(role, part) for part in parts)
        extra = {k: message[k] for k in ("tool_calls", "tool_call_id") if message.get(k)}
        if extra:
            chars, media = measure(extra)
            out.append(Segment({"role": role, **extra}, chars, media, None))
    return out


def cached_tokens(read: int) -> int:
    """OpenAI's reported hit for a cached prefix of `read` tokens: 0 below 1024, else rounded
    down to a 128-token step."""
    if read < CACHE_MIN_TOKENS:
        return 0
    return read - (read - CACHE_MIN_TOKENS) % CACHE_STEP


def usage(prompt: int, cached: int, reply: Reply, n: int) -> dict[str, Any]:
    completion = reply.output_tokens * n
    result: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reply.thinking_tokens * n,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    # A scripted reply's `usage` may set OpenAI usage fields (nested objects are merged).
    for key, value in (reply.usage_overrides or {}).items():
        if key not in result:
            continue  # Anthropic names (input_tokens, ...) mean nothing here
        if isinstance(value, Mapping) and isinstance(result[key], dict):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    return result


# --- rendering -------------------------------------------------------------------------------
def call_id(tool_use_id: str) -> str:
    return (
        tool_use_id
        if tool_use_id.startswith("call_")
        else "call_" + tool_use_id.removeprefix("toolu_")
    )


def message(reply: Reply, model: OpenAIModel, reasoning_field: str) -> dict[str, Any]:
    texts = [str(b.get("text", "")) for b in reply.content if b.get("type") == "text"]
    calls = [
        {
            "id": call_id(str(b.get("id", ""))),
            "type": "function",
            "function": {
                "name": b.get("name", ""),
                "arguments": orjson.dumps(b.get("input", {})).decode(),
            },
        }
        for b in reply.content
        if b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        if model.thought_signatures:  # on the first call only, as Gemini 3 does
            calls[0]["extra_content"] = extra_content(calls[0]["id"])
        out["tool_calls"] = calls
    thoughts = [str(b.get("thinking", "")) for b in reply.content if b.get("type") == "thinking"]
    if model.visible_reasoning and thoughts:
        out[reasoning_field] = "".join(thoughts)
    return out


def completion(
    *,
    completion_id: str,
    created: int,
    body: Mapping[str, Any],
    model: OpenAIModel,
    reply: Reply,
    usage_: dict[str, Any],
    reasoning_field: str,
) -> dict[str, Any]:
    n = body.get("n") or 1
    finish = FINISH_REASONS.get(reply.stop_reason, "stop")
    rendered = message(reply, model, reasoning_field)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model.id,
        "choices": [
            {"index": i, "message": dict(rendered), "logprobs": None, "finish_reason": finish}
            for i in range(n)
        ],
        "usage": usage_,
        "service_tier": "default",
        "system_fingerprint": "fp_ezatsim",
    }


def _chunk(head: Mapping[str, Any], choices: list[Any], usage_: Any, with_usage: bool) -> bytes:
    data = {**head, "choices": choices}
    if with_usage:
        data["usage"] = usage_
    return b"data: " + orjson.dumps(data) + b"\n\n"


def chunks(done: Mapping[str, Any], *, include_usage: bool, reasoning_field: str) -> list[bytes]:
    """Every SSE event of a stream that ends in the finished completion `done`, [DONE] last.
    With include_usage each chunk carries `"usage": null` and a final chunk with no choices
    carries the usage; without it no usage appears at all (protocol.md 2.5)."""
    head = {
        "id": done["id"],
        "object": "chat.completion.chunk",
        "created": done["created"],
        "model": done["model"],
        "service_tier": done["service_tier"],
        "system_fingerprint": done["system_fingerprint"],
    }
    events: list[bytes] = []

    def emit(index: int, delta: dict[str, Any], finish: str | None = None) -> None:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        events.append(_chunk(head, [choice], None, include_usage))

    for choice in done["choices"]:
        index, msg = choice["index"], choice["message"]
        emit(index, {"role": "assistant", "content": "", "refusal": None})
        for piece in chunk_text(msg.get(reasoning_field) or ""):
            emit(index, {reasoning_field: piece})
        for piece in chunk_text(msg.get("content") or ""):
            emit(index, {"content": piece})
        for k, call in enumerate(msg.get("tool_calls") or ()):
            first, *rest = chunk_json(call["function"]["arguments"])
            function = {"name": call["function"]["name"], "arguments": first}
            opening = {"index": k, "id": call["id"], "type": "function", "function": function}
            if "extra_content" in call:
                opening["extra_content"] = call["extra_content"]
            emit(index, {"tool_calls": [opening]})
            for piece in rest:
                emit(index, {"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
        emit(index, {}, choice["finish_reason"])
    if include_usage:
        events.append(_chunk(head, [], done["usage"], True))
    events.append(b"data: [DONE]\n\n")
    return events
