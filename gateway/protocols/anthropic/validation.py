"""What the gateway itself checks on a Messages request. Pure: no Django, no I/O.

Only `model`, `max_tokens`, `messages`, `stream` and the shape of `tools` are checked, plus the
model behaviour the catalog records (gateway.protocols.model_rules): a forced `tool_choice` or
`thinking` turned off on a model documented to refuse them gets a 400 naming the model and what to
send instead, before the request is admitted (no hold, no upstream round trip). Every other field
goes to the provider unchanged and the provider's own error comes back to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import GatewayError, invalid
from gateway.protocols.model_rules import (
    ModelRuleViolation,
    check_forced_tool_choice,
    check_thinking_disabled,
)

MODEL_MAX_LENGTH = 128


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    model: str  # exactly as sent (echoed back)
    max_tokens: int | None
    stream: bool


def check_body(body: Any, *, count_tokens: bool = False) -> CheckedRequest:
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str):
        raise invalid(
            "model: field required (a string)" if model is None else "model: must be a string",
            "model",
        )
    if not 1 <= len(model) <= MODEL_MAX_LENGTH or not model.strip():
        raise invalid(f"model: must be 1 to {MODEL_MAX_LENGTH} characters", "model")
    messages = body.get("messages")
    if messages is None:
        raise invalid("messages: field required", "messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: must be a non-empty array", "messages")
    check_tools(body.get("tools"))
    stream = body.get("stream", False)
    max_tokens = body.get("max_tokens")
    if count_tokens:
        # Accepted and ignored here (the SDK's count_tokens has no such fields, clients send them).
        return CheckedRequest(model=model, max_tokens=None, stream=False)
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream: must be a boolean", "stream")
    if max_tokens is None:
        raise invalid("max_tokens: field required", "max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise invalid("max_tokens: must be an integer", "max_tokens")
    if max_tokens < 1:
        raise invalid("max_tokens: must be at least 1", "max_tokens")
    return CheckedRequest(model=model, max_tokens=max_tokens, stream=bool(stream))


def check_tools(tools: Any) -> None:
    """`tools`, when sent, is an array of objects. Checked here rather than left to the
    provider: the gateway reads the tools itself before any upstream call (the routing prefix,
    gateway/prefix_digest.py; the token estimate), and a number there was a 500 (issue 31)."""
    if tools is None:
        return  # absent (or null): the provider decides, as before
    if not isinstance(tools, list):
        raise invalid("tools: must be an array of tool objects", "tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid(f"tools[{index}]: must be an object", f"tools[{index}]")


def check_max_tokens(max_tokens: int, model_id: str, model_max: int) -> None:
    if max_tokens > model_max:
        raise invalid(
            f"max_tokens: {max_tokens} > {model_max}, which is the maximum allowed number of "
            f"output tokens for {model_id}",
            "max_tokens",
        )


def check_model_rules(
    body: dict[str, Any], *, model_id: str, forced_tool_choice: bool, thinking_can_be_disabled: bool
) -> None:
    """The catalog's documented refusals, checked on the caller's body (two dict lookups)."""
    choice = body.get("tool_choice")
    thinking = body.get("thinking")
    try:
        check_forced_tool_choice(
            forced=isinstance(choice, dict) and choice.get("type") in ("any", "tool"),
            model_id=model_id,
            allowed=forced_tool_choice,
            param="tool_choice",
            auto='{"type": "auto"}',
            forced_forms='type "any" or "tool"',
        )
        check_thinking_disabled(
            disabled=isinstance(thinking, dict) and thinking.get("type") == "disabled",
            model_id=model_id,
            allowed=thinking_can_be_disabled,
            param="thinking.type",
        )
    except ModelRuleViolation as exc:
        raise invalid(exc.message, exc.param) from None


def unknown_model(name: str) -> GatewayError:
    return GatewayError(
        404, f"model: {name}", type_="not_found_error", param="model", code="model_not_found"
    )


def strip_cache_control(node: Any) -> bool:
    """Remove every `cache_control` key in place. Returns whether any was found."""
    found = False
    if isinstance(node, dict):
        if "cache_control" in node:
            del node["cache_control"]
            found = True
        for value in node.values():
            if isinstance(value, (dict, list)):
                found = strip_cache_control(value) or found
    elif isinstance(node, list):
        for value in node:
            if isinstance(value, (dict, list)):
                found = strip_cache_control(value) or found
    return found
