"""What the stream decoder and the reply translator share: stop reasons, usage, the gateway's
thinking signature, and the error types of stream error chunks. Pure.

Usage (providers.md §1.4, §5.3; issue 30 items 4 and 7). OpenAI's `prompt_tokens` INCLUDES the
cached tokens and `completion_tokens` INCLUDES reasoning; Anthropic's `input_tokens` EXCLUDES
cache reads. So `input_tokens = prompt_tokens - cached_tokens` and
`cache_read_input_tokens = cached_tokens` (reporting both in full is the 2x-context bug of
MAXeaglet/commandcode-proxy#25), `output_tokens = completion_tokens`, and the reasoning share
goes in `output_tokens_details.thinking_tokens`, which gateway/usage.py reads. OpenAI charges
nothing extra for cache writes ("no additional fees", O-DOC prompt-caching), so
`cache_creation_input_tokens` is 0 and any `cache_write_tokens` stay in `input_tokens`, billed
as input. DeepSeek reports its cache hits as `prompt_cache_hit_tokens` (§4, unconfirmed there);
they are read when `prompt_tokens_details.cached_tokens` is absent.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gateway.protocols.anthropic.gateway_thinking import GATEWAY_SIGNATURE_PREFIX

# The key a tool input gets when the provider's arguments are not a JSON object.
INVALID_ARGUMENTS = "_invalid_arguments"

# OpenAI finish_reason -> Anthropic stop_reason (providers.md §5.2, "correct mapping" column).
STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

# Words in an OpenAI-shaped error's type or code -> the Anthropic error type (first match).
_ERROR_WORDS: tuple[tuple[str, str], ...] = (
    ("rate_limit", "rate_limit_error"),
    ("quota", "rate_limit_error"),
    ("overload", "overloaded_error"),
    ("unavailable", "overloaded_error"),
    ("timeout", "timeout_error"),
    ("context_length", "invalid_request_error"),
    ("invalid_request", "invalid_request_error"),
    ("not_found", "not_found_error"),
)


def stop_reason(finish: object, *, tool_calls: bool) -> str:
    """Anthropic's stop reason. Servers that answer "stop" after tool calls (some vLLM tool
    parsers) still asked for a tool: Anthropic clients run tools only on `tool_use`."""
    if finish == "stop" and tool_calls:
        return "tool_use"
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"


def anthropic_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI usage object as Anthropic usage (the module docstring). On every request's way
    out, so each count is read inline (a helper call per count cost more than the reading)."""
    prompt = usage.get("prompt_tokens")
    prompt = prompt if type(prompt) is int and prompt > 0 else 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if type(details) is dict else None
    if not (type(cached) is int and cached > 0):
        cached = usage.get("prompt_cache_hit_tokens")
        cached = cached if type(cached) is int and cached > 0 else 0
    if cached > prompt:
        cached = prompt
    output = usage.get("completion_tokens")
    output = output if type(output) is int and output > 0 else 0
    done = usage.get("completion_tokens_details")
    reasoning = done.get("reasoning_tokens") if type(done) is dict else None
    reasoning = reasoning if type(reasoning) is int and reasoning > 0 else 0
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output,
        "output_tokens_details": {"thinking_tokens": reasoning if reasoning < output else output},
    }


def estimated_usage(input_estimate: int, output_chars: int) -> dict[str, Any]:
    """For a server that sent no usage at all (it ignored include_usage): 4 characters per
    token, the estimate gateway/usage.py uses for a cut stream."""
    return {
        "input_tokens": input_estimate,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": -(-output_chars // 4),
    }


def reasoning_of(part: dict[str, Any]) -> str:
    """A delta's or message's reasoning text: DeepSeek's `reasoning_content` or vLLM's and
    Ollama's `reasoning` (providers.md §2.4: read both). One of them, never both joined:
    vLLM's back-compat mode sends the same text in each."""
    text = part.get("reasoning_content")
    if not isinstance(text, str) or not text:
        text = part.get("reasoning")
    return text if isinstance(text, str) else ""


def tool_input(arguments: object) -> dict[str, Any]:
    """A tool call's `arguments` as an Anthropic tool input (always an object): the JSON object
    they hold; `{}` when empty; a server that sends the object itself is taken as it is; and
    anything else (vLLM's tool parsers can emit broken JSON, providers.md §3.4 and §7 item 11)
    `{"_invalid_arguments": "<the text>"}`, so the client's tool refuses the input and the
    model sees why, instead of the whole answer failing."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {INVALID_ARGUMENTS: arguments}


def arguments_json(arguments: str) -> str:
    """The `partial_json` of a streamed tool call (stream.py): its arguments unchanged when
    they are a JSON object, else the JSON of `tool_input`; "" when there are none."""
    if not arguments.strip():
        return ""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return arguments
    return orjson.dumps({INVALID_ARGUMENTS: arguments}).decode()


def new_digest() -> Any:
    return hashlib.blake2b(digest_size=8)


def signature(digest: Any) -> str:
    """The signature of a thinking block the gateway made: its prefix tells EZAT the block is
    its own (to strip, never forward to Claude), the digest ties it to the text."""
    return GATEWAY_SIGNATURE_PREFIX + digest.hexdigest()


def is_gateway_signature(value: object) -> bool:
    return isinstance(value, str) and value.startswith(GATEWAY_SIGNATURE_PREFIX)


def error_type(error: dict[str, Any]) -> str:
    words = f"{error.get('type') or ''} {error.get('code') or ''}".lower()
    for word, kind in _ERROR_WORDS:
        if word in words:
            return kind
    return "api_error"
