"""A provider's non-stream chat.completion -> an Anthropic Message (dict). Pure.

The rules are stream.py's (mapping.py holds the shared ones): content blocks in the order
thinking (only when the client asked for it, with the gateway's signature), text, tool_use
(the provider's ids kept, names mapped back through `tool_names`); the finish reason mapped
by providers.md §5.2; usage by §5.3.

Tool arguments that are not a JSON object (vLLM's tool parsers can emit broken JSON,
providers.md §3.4) are kept as `{"_invalid_arguments": "<the text>"}` rather than failing the
whole answer (mapping.tool_input, which the stream shares): the client's tool then refuses the
input and the model sees why and retries.
"""

from __future__ import annotations

from typing import Any

import orjson

from .mapping import (
    INVALID_ARGUMENTS,
    anthropic_usage,
    estimated_usage,
    new_digest,
    reasoning_of,
    signature,
    stop_reason,
    tool_input,
)
from .signatures import signature_of, tool_use_id

__all__ = ["INVALID_ARGUMENTS", "UnreadableReply", "to_message"]


class UnreadableReply(ValueError):
    """A chat.completion without an answer to translate (no choices, or no message)."""


def to_message(
    reply: dict[str, Any],
    *,
    model: str,
    tool_names: dict[str, str],
    thinking: bool,
    input_estimate: int = 0,
) -> dict[str, Any]:
    """`input_estimate` (ChatRequest.input_estimate) is used only when the reply has no usage:
    then the output is estimated from the characters returned (mapping.estimated_usage)."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices:
        raise UnreadableReply("the provider's reply has no choices")
    choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
    message = choice.get("message") if choice else None
    if not isinstance(message, dict):
        raise UnreadableReply("the provider's reply has no message")
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if thinking and reasoning:
        digest = new_digest()
        digest.update(reasoning.encode())
        content.append({"type": "thinking", "thinking": reasoning, "signature": signature(digest)})
    text = message.get("content")
    if isinstance(text, list):  # some servers answer with content parts
        text = "".join(
            p.get("text") or "" for p in text if isinstance(p, dict) and p.get("type") == "text"
        )
    refusal = message.get("refusal")
    refused = isinstance(refusal, str) and bool(refusal)
    if refused:
        text = f"{text}{refusal}" if isinstance(text, str) else refusal
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    provider_id = reply.get("id")
    if isinstance(provider_id, str) and provider_id:
        message_id = "msg_" + provider_id
    else:  # derived from the reply, as stream.py does: no randomness in a translator
        digest = new_digest()
        digest.update(orjson.dumps(reply, option=orjson.OPT_SORT_KEYS))
        message_id = "msg_" + digest.hexdigest()
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else ()):
        if isinstance(call, dict):
            content.append(_tool_use(call, i, message_id, tool_names))
    finish = choice.get("finish_reason") if choice else None
    if refused and finish == "stop":
        stop = "refusal"
    else:
        stop = stop_reason(finish, tool_calls=any(b["type"] == "tool_use" for b in content))
    usage = reply.get("usage")
    if isinstance(usage, dict) and usage:
        counted = anthropic_usage(usage)
    else:
        produced = len(reasoning) + sum(
            len(b["text"]) if b["type"] == "text" else len(orjson.dumps(b["input"]))
            for b in content
            if b["type"] in ("text", "tool_use")
        )
        counted = estimated_usage(input_estimate, produced)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": counted,
    }


def _tool_use(
    call: dict[str, Any], position: int, message_id: str, tool_names: dict[str, str]
) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name = function.get("name")
    name = name if isinstance(name, str) else ""
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"toolu_{message_id[4:]}_{position}"  # as stream.py derives a missing id
    return {
        "type": "tool_use",
        "id": tool_use_id(call_id, signature_of(call)),  # with Gemini's signature: signatures.py
        "name": tool_names.get(name, name),
        "input": tool_input(function.get("arguments")),
    }
