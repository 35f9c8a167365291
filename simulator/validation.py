"""Minimal request validation with error messages shaped like the real API's.

Only what a gateway can plausibly get wrong is checked; every message names the offending field
(`messages.2.role: ...`) so tests can assert on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.cache import count_breakpoints
from simulator.models import ModelRules, rules_for
from simulator.thinking import THINKING_ON

MAX_BREAKPOINTS = 4
_ROLES = ("user", "assistant")
_TOOL_CHOICES = ("auto", "any", "tool", "none")


def _is_int(value: Any) -> bool:
    # bool is an int subclass in Python, but `true` is not a valid JSON integer here.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_content(n: int, content: Any, *, last: bool, role: str) -> str | None:
    if isinstance(content, str):
        if not content and not (last and role == "assistant"):
            return (
                "messages: all messages must have non-empty content except for the optional"
                " final assistant message"
            )
        return None
    if not isinstance(content, list):
        return f"messages.{n}.content: Input should be a valid string or list"
    for m, block in enumerate(content):
        where = f"messages.{n}.content.{m}"
        if not isinstance(block, Mapping):
            return f"{where}: Input should be a valid dictionary"
        btype = block.get("type")
        if not isinstance(btype, str):
            return f"{where}.type: Field required"
        if btype == "text":
            text = block.get("text")
            if not isinstance(text, str):
                return f"{where}.text: Field required"
            if not text:
                return "messages: text content blocks must be non-empty"
        elif btype == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return f"{where}.tool_result.tool_use_id: Field required"
        elif btype == "tool_use" and not isinstance(block.get("name"), str):
            return f"{where}.tool_use.name: Field required"
    return None


def check_messages(body: Mapping[str, Any]) -> str | None:
    if "model" not in body:
        return "model: Field required"
    model = body["model"]
    if not isinstance(model, str) or not model:
        return "model: Input should be a valid string"
    if "messages" not in body:
        return "messages: Field required"
    messages = body["messages"]
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    if not messages:
        return "messages: at least one message is required"
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping):
            return f"messages.{n}: Input should be a valid dictionary"
        role = message.get("role")
        if role == "system":
            error = _check_system_message(n, message, messages, rules_for(model))
            if error:
                return error
            continue
        if role not in _ROLES:
            return f"messages.{n}.role: Input should be 'user', 'assistant' or 'system'"
        if "content" not in message:
            return f"messages.{n}.content: Field required"
        error = _check_content(n, message["content"], last=n == len(messages) - 1, role=role)
        if error:
            return error
    return _check_prompt_extras(body)


def _check_system_message(
    n: int, message: Mapping[str, Any], messages: list[Any], rules: ModelRules | None
) -> str | None:
    """A mid-conversation system message: text only, right after a user turn, on models that
    take them (simulator/models.py)."""
    if rules is not None and not rules.system_messages:
        return f"messages.{n}.role: role 'system' is not supported on this model"
    previous = messages[n - 1] if n else None
    if not isinstance(previous, Mapping) or previous.get("role") != "user":
        return f"messages.{n}: a system message must come right after a user message"
    content = message.get("content")
    if isinstance(content, str):
        return None if content else f"messages.{n}.content: must not be empty"
    if not isinstance(content, list) or not content:
        return f"messages.{n}.content: Input should be a valid string or list"
    for m, block in enumerate(content):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            return f"messages.{n}.content.{m}.type: system messages take text blocks only"
        if not isinstance(block.get("text"), str) or not block["text"]:
            return f"messages.{n}.content.{m}.text: Field required"
    return None


def _check_model_rules(body: Mapping[str, Any], max_tokens: int) -> str | None:
    """What the real API refuses per model (known models only)."""
    model = body["model"]
    rules = rules_for(model)
    if rules is None:
        return None
    if max_tokens > rules.max_output_tokens:
        return (
            f"max_tokens: {max_tokens} > {rules.max_output_tokens}, which is the maximum "
            f"allowed number of output tokens for {model}"
        )
    if _forced_tool(body) and not rules.forced_tool_choice:
        return (
            f"tool_choice: forced tool use (type 'any' or 'tool') is not supported on {model}; "
            "use tool_choice type 'auto'"
        )
    if not rules.sampling:
        for name in ("temperature", "top_p"):
            if body.get(name) not in (None, 1):
                return f"{name}: only the default value is supported on {model}"
        if body.get("top_k") is not None:
            return f"top_k: only the default value is supported on {model}"
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    if kind == "disabled" and rules.thinking_off != "disabled":
        if rules.thinking_off is None:
            return f"thinking.type: thinking cannot be disabled on {model}"
        return f"thinking.type: 'disabled' is not supported on {model}; use '{rules.thinking_off}'"
    if kind == "between_tools":
        config = body.get("output_config")
        effort = config.get("effort") if isinstance(config, Mapping) else None
        if effort in ("xhigh", "max"):
            return f"thinking.type: 'between_tools' is not available at effort '{effort}'"
    return None


def _check_prompt_extras(body: Mapping[str, Any]) -> str | None:
    """system / tools / tool_choice / cache_control -- shared with count_tokens."""
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list"
    if isinstance(system, list):
        for i, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                return f"system.{i}.type: Input should be 'text'"
            if not isinstance(block.get("text"), str):
                return f"system.{i}.text: Field required"
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.name: Field required"
            names.append(tool["name"])
            custom = tool.get("type") in (None, "custom")
            if custom and not isinstance(tool.get("input_schema"), Mapping):
                return f"tools.{i}.custom.input_schema: Field required"
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, Mapping) or choice.get("type") not in _TOOL_CHOICES:
            return "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'"
        if choice.get("type") == "tool":
            name = choice.get("name")
            if not isinstance(name, str):
                return "tool_choice.tool.name: Field required"
            if name not in names:
                return f"tool_choice.name: Tool '{name}' not found in tools"
    found = count_breakpoints(body)
    if found > MAX_BREAKPOINTS:
        return (
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
            f" Found {found}."
        )
    return None


def check_create(body: Mapping[str, Any]) -> str | None:
    """Validation for POST /v1/messages."""
    if "model" in body and "max_tokens" not in body:
        return "max_tokens: Field required"
    error = check_messages(body)
    if error:
        return error
    max_tokens = body["max_tokens"]
    if not _is_int(max_tokens):
        return "max_tokens: Input should be a valid integer"
    if max_tokens < 0:
        return "max_tokens: Input should be greater than or equal to 1"
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return "stream: Input should be a valid boolean"
    stops = body.get("stop_sequences")
    if stops is not None and (
        not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)
    ):
        return "stop_sequences: Input should be a valid list of strings"
    temperature = body.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool):
            return "temperature: Input should be a valid number"
        if not 0 <= temperature <= 1:
            return "temperature: Input should be less than or equal to 1"
    error = _check_thinking(body, max_tokens) or _check_model_rules(body, max_tokens)
    if error:
        return error
    if max_tokens == 0:
        return _check_prewarm(body)
    return None


def _forced_tool(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, Mapping) and choice.get("type") in ("any", "tool")


def _check_thinking(body: Mapping[str, Any], max_tokens: int) -> str | None:
    thinking = body.get("thinking")
    if thinking is None:
        return None
    rules = rules_for(body["model"])
    off = {"disabled", rules.thinking_off if rules is not None else "disabled"} - {None}
    if not isinstance(thinking, Mapping) or thinking.get("type") not in (*THINKING_ON, *off):
        return "thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'"
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not _is_int(budget):
            return "thinking.enabled.budget_tokens: Field required"
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if max_tokens and max_tokens <= budget:
            return (
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our"
                " documentation at https://docs.claude.com/en/docs/build-with-claude/"
                "extended-thinking#max-tokens-and-context-window-size"
            )
    if thinking["type"] in THINKING_ON and _forced_tool(body):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def _check_prewarm(body: Mapping[str, Any]) -> str | None:
    """max_tokens 0 is the real API's cache pre-warm; it is refused with output-shaping options."""
    thinking = body.get("thinking")
    output_config = body.get("output_config")
    if (
        body.get("stream")
        or (isinstance(thinking, Mapping) and thinking.get("type") == "enabled")
        or (isinstance(output_config, Mapping) and output_config.get("format") is not None)
        or _forced_tool(body)
    ):
        return (
            "max_tokens: Input should be greater than or equal to 1 (0 is only allowed for"
            " cache pre-warming without stream, thinking, output_config.format or forced tools)"
        )
    return None
