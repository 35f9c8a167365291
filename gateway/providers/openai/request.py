"""Anthropic Messages request -> OpenAI Chat Completions request (issue 30 item 4). Pure.

The body is one EZAT has already checked (model, max_tokens, messages, stream) with `model`
set to the provider's own model name. Everything else is checked here as it is translated: a
field with no Chat Completions meaning is either dropped (the answer is the same without it)
or refused with `UntranslatableRequest` naming the field (the answer would silently differ).
docs/providers.md (section 7) has the table. Rules and their sources:

- `system` -> the first message, role "system" (providers.md §5.1; OpenAI maps it to
  "developer" on reasoning models itself).
- tool results are `role: "tool"` messages placed before the rest of their user turn, as
  LiteLLM's adapter does (§5.1), because Chat requires them right after the assistant's
  `tool_calls`. Images inside a result cannot go into a tool message (text only on most
  servers, §5.5), so they follow in a user message.
- thinking blocks in the history are not forwarded: no OpenAI-compatible server takes
  Anthropic thinking as input, and vLLM >= 0.16 drops `reasoning_content` silently (§2.4).
- `cache_control` is stripped everywhere (strict servers refuse unknown fields, §7 item 13);
  prompt caching on OpenAI is automatic and steered by `prompt_cache_key` (§4).
- `strict: true` tools are sent strict when OpenAI's strict mode can take their schema
  (objects closed with `additionalProperties: false`), else `strict: false` (strict.py).
- `stream_options.include_usage` is always asked for: without it no usage arrives at all
  (§7 item 8).
- `metadata.user_id` -> `safety_identifier`, the field that replaces `user` (openai-python
  `completion_create_params.py`: "This field is being replaced by `safety_identifier` and
  `prompt_cache_key`"; at most 128 characters, so a longer id is sent as its SHA-256).
- a `tool_use` id carrying Gemini's thought signature goes out as the provider's call id with
  the signature as `extra_content`; on Gemini 3 and later a turn's first call without one gets
  the documented placeholder (signatures.py).
- thinking budget -> reasoning effort buckets: below 4096 tokens "low", below 16384 "medium",
  else "high", then the nearest level the model takes (gateway.protocols.model_rules). LiteLLM
  and claude-code-router use similar ladders (§5.1); these bounds put Claude Code's defaults
  (4k "think", 10k "think hard", 32k "ultrathink") on three different levels.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocols.model_rules import EFFORT_SCALE, nearest_effort
from gateway.protocols.openai.inbound_messages import short

from .media_tokens import part_tokens
from .request_parts import UntranslatableRequest, block_type, document_parts, image_part, string
from .signatures import outgoing_call, split_tool_use_id, wants_placeholder
from .strict import strict_parameters

__all__ = [
    "ChatRequest",
    "ChatTarget",
    "UntranslatableRequest",
    "chat_tool_name",
    "effort_for_budget",
    "to_chat",
]

MAX_SAFETY_IDENTIFIER = 128
LOW_BUDGET_BELOW = 4096
MEDIUM_BUDGET_BELOW = 16384

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_NAME_PREFIX = 55  # + "_" + 8 hex digits = 64, OpenAI's limit (LiteLLM's truncate_tool_name)

# Top-level fields dropped because the answer does not depend on them on these providers.
# top_k: Chat has no such parameter. service_tier: Anthropic's priority-tier choice, which
# means nothing to another provider.
_DROPPED = frozenset({"top_k", "service_tier"})
_REFUSED = {
    "container": "code-execution containers exist only on Anthropic's API",
    "mcp_servers": "the MCP connector runs on Anthropic's API",
}
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "context_management",
        "prompt_cache_key",
    }
)
_TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "cache_control", "strict"})
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


@dataclass(frozen=True, slots=True)
class ChatTarget:
    max_tokens_param: str = "max_completion_tokens"  # or "max_tokens" (older servers)
    efforts: tuple[str, ...] = ()  # reasoning_effort values taken natively; () = never sent
    default_effort: str | None = None
    prompt_cache_key: str | None = None  # sent as prompt_cache_key unless the body has one


@dataclass(frozen=True, slots=True)
class ChatRequest:
    body: dict[str, Any]  # the Chat Completions request body
    tool_names: dict[str, str]  # chat function name -> Anthropic tool name (where they differ)
    thinking: bool  # the client asked for thinking (thinking.type enabled/adaptive)
    # bytes/4 of the text sent plus its images' and PDFs' tokens (media_tokens.py), for a
    # stream cut before its usage
    input_estimate: int


def chat_tool_name(name: str) -> str:
    """The function name sent for an Anthropic tool name: itself when OpenAI takes it, else a
    deterministic shortening (valid characters, 55-character prefix, `_` and 8 hex digits of
    its SHA-256), so the same tool gets the same name on every turn."""
    if _TOOL_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    prefix = _NAME_CHAR.sub("_", name)[:_NAME_PREFIX]
    return f"{prefix or 'tool'}_{digest}"


def effort_for_budget(budget: int) -> str:
    """The reasoning effort for a thinking budget (the buckets in the module docstring)."""
    if budget < LOW_BUDGET_BELOW:
        return "low"
    if budget < MEDIUM_BUDGET_BELOW:
        return "medium"
    return "high"


def to_chat(body: dict[str, Any], target: ChatTarget) -> ChatRequest:
    for key in body:
        if key in _REFUSED:
            raise UntranslatableRequest(key, f"not supported on this model: {_REFUSED[key]}")
        if key not in _KNOWN and key not in _DROPPED:
            raise UntranslatableRequest(key, "unknown field; this model cannot take it")
    builder = _Builder(placeholder=wants_placeholder(body["model"]))
    out: dict[str, Any] = {"model": body["model"]}
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        text = builder.system(system)
        if text:
            messages.append({"role": "system", "content": text})
    tools = body.get("tools")
    if tools is not None:
        chat_tools = builder.tools(tools)
        if chat_tools:
            out["tools"] = chat_tools
    messages.extend(builder.messages(body.get("messages")))
    out["messages"] = messages
    if body.get("max_tokens") is not None:
        out[target.max_tokens_param] = body["max_tokens"]
    _sampling(body, out)
    _tool_choice(body.get("tool_choice"), out, builder)
    thinking = _reasoning(body, target, out)
    _output_format(body, out)
    _context_management(body.get("context_management"))
    _metadata(body.get("metadata"), out)
    key = body.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        raise UntranslatableRequest("prompt_cache_key", "must be a string")
    if key or target.prompt_cache_key:
        out["prompt_cache_key"] = key or target.prompt_cache_key
    if body.get("stream") is True:
        out["stream"] = True
        # Always: OpenAI-compatible servers send usage only when asked (providers.md §7.8).
        out["stream_options"] = {"include_usage": True}
    return ChatRequest(
        body=out,
        tool_names=builder.tool_names,
        thinking=thinking,
        input_estimate=-(-builder.text_bytes // 4) + builder.media_tokens,
    )


def _sampling(body: dict[str, Any], out: dict[str, Any]) -> None:
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UntranslatableRequest(name, "must be a number")
        out[name] = value
    stops = body.get("stop_sequences")
    if stops is None:
        return
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise UntranslatableRequest("stop_sequences", "must be an array of strings")
    if stops:
        out["stop"] = list(stops)


def _tool_choice(choice: object, out: dict[str, Any], builder: _Builder) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise UntranslatableRequest("tool_choice", "must be an object")
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"  # "any" is not an OpenAI value (providers.md §7.6)
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise UntranslatableRequest("tool_choice.name", "must be a tool's name")
        out["tool_choice"] = {"type": "function", "function": {"name": builder.name(name)}}
    else:
        raise UntranslatableRequest("tool_choice.type", f"{short(kind)} is not a tool choice")
    # OpenAI refuses parallel_tool_calls without tools ("only allowed when tools are specified").
    if choice.get("disable_parallel_tool_use") is True and out.get("tools"):
        out["parallel_tool_calls"] = False


def _reasoning(body: dict[str, Any], target: ChatTarget, out: dict[str, Any]) -> bool:
    """Set reasoning_effort where the model takes one; return whether thinking was asked."""
    thinking = body.get("thinking")
    kind: object = None
    budget: object = None
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise UntranslatableRequest("thinking", "must be an object")
        kind = thinking.get("type")
        if kind not in ("enabled", "disabled", "adaptive"):
            raise UntranslatableRequest("thinking.type", f"{short(kind)} is not a thinking type")
        budget = thinking.get("budget_tokens")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise UntranslatableRequest("thinking.budget_tokens", "must be an integer")
    config = body.get("output_config")
    effort: object = None
    if config is not None:
        if not isinstance(config, dict):
            raise UntranslatableRequest("output_config", "must be an object")
        for key in config:
            if key not in ("effort", "format"):
                raise UntranslatableRequest(f"output_config.{key}", "unknown field")
        effort = config.get("effort")
        if effort is not None and effort not in EFFORT_SCALE:
            raise UntranslatableRequest("output_config.effort", f"{short(effort)} is not an effort")
    asked = kind in ("enabled", "adaptive")
    levels = target.efforts
    if not levels:
        return asked
    chosen: str | None = None
    if isinstance(effort, str):
        chosen = effort if effort in levels else _nearest(effort, levels)
    elif kind == "enabled":
        wanted = effort_for_budget(budget) if isinstance(budget, int) else "medium"
        chosen = _nearest(wanted, levels)
    elif kind == "disabled":
        chosen = next((lvl for lvl in ("none", "minimal") if lvl in levels), None)
    elif kind == "adaptive":
        chosen = target.default_effort
    if chosen is not None:
        out["reasoning_effort"] = chosen
    return asked


def _nearest(wanted: str, levels: tuple[str, ...]) -> str | None:
    if wanted == "none":
        return "none" if "none" in levels else None
    level = nearest_effort(wanted, levels, thinking_can_be_disabled=False)
    return None if level == "none" else level


def _output_format(body: dict[str, Any], out: dict[str, Any]) -> None:
    """Structured output -> response_format json_schema (strict: the schema is a contract)."""
    config = body.get("output_config")
    fmt, param = (config.get("format"), "output_config.format") if config else (None, "")
    if fmt is None and body.get("output_format") is not None:
        fmt, param = body["output_format"], "output_format"  # the older beta spelling
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise UntranslatableRequest(f"{param}.type", 'only "json_schema" can be translated')
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise UntranslatableRequest(f"{param}.schema", "must be a JSON Schema object")
    out["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


def _context_management(value: object) -> None:
    """Thinking-clearing edits are already true here (thinking is never forwarded); other
    edits change what the provider sees, so they are refused."""
    if value is None:
        return
    edits = value.get("edits") if isinstance(value, dict) else None
    if not isinstance(edits, list) or set(value) - {"edits"}:  # type: ignore[arg-type]
        raise UntranslatableRequest("context_management", "only thinking-clearing edits")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if not (isinstance(kind, str) and kind.startswith("clear_thinking_")):
            raise UntranslatableRequest(
                f"context_management.edits.{i}.type",
                f"{short(kind)} cannot be applied on this model",
            )


def _metadata(metadata: object, out: dict[str, Any]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise UntranslatableRequest("metadata", "must be an object")
    for key in metadata:
        if key != "user_id":
            raise UntranslatableRequest(f"metadata.{key}", "unknown field")
    user = metadata.get("user_id")
    if user is None or user == "":
        return
    if not isinstance(user, str):
        raise UntranslatableRequest("metadata.user_id", "must be a string")
    if len(user) > MAX_SAFETY_IDENTIFIER:
        user = hashlib.sha256(user.encode()).hexdigest()
    out["safety_identifier"] = user


class _Builder:
    """Walks tools and messages once, collecting tool names and the size of the text sent."""

    __slots__ = ("_names", "documents", "media_tokens", "placeholder", "text_bytes", "tool_names")

    def __init__(self, placeholder: bool = False) -> None:
        self.tool_names: dict[str, str] = {}
        self._names: dict[str, str] = {}  # chat name -> original, for every name seen
        self.text_bytes = 0
        self.documents = 0  # document blocks seen, for their default filenames
        self.media_tokens = 0  # of the images and PDFs sent (media_tokens.py)
        # Gemini 3+: a turn's first call without a signature gets the placeholder (signatures.py)
        self.placeholder = placeholder

    def name(self, original: str) -> str:
        chat = chat_tool_name(original)
        seen = self._names.setdefault(chat, original)
        if seen != original:
            raise UntranslatableRequest(
                "tools",
                f"tool names {short(seen)} and "
                f"{short(original)} cannot be told apart on this model",
            )
        if chat != original:
            self.tool_names[chat] = original
        return chat

    def _media(self, part: dict[str, Any]) -> dict[str, Any]:
        self.media_tokens += part_tokens(part)
        return part

    def _text(self, text: str) -> str:
        self.text_bytes += len(text.encode())
        return text

    # -- system and tools ----------------------------------------------------------------------

    def system(self, system: object) -> str:
        if isinstance(system, str):
            return self._text(system)
        if not isinstance(system, list):
            raise UntranslatableRequest("system", "must be a string or an array of text blocks")
        texts = []
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise UntranslatableRequest(f"system.{i}.type", "only text blocks")
            texts.append(self._text(string(block.get("text"), f"system.{i}.text")))
        return "\n\n".join(t for t in texts if t)

    def tools(self, tools: object) -> list[dict[str, Any]]:
        if not isinstance(tools, list):
            raise UntranslatableRequest("tools", "must be an array")
        out = []
        for i, tool in enumerate(tools):
            param = f"tools.{i}"
            if not isinstance(tool, dict):
                raise UntranslatableRequest(param, "must be an object")
            kind = tool.get("type")
            if kind not in (None, "custom"):
                raise UntranslatableRequest(
                    f"{param}.type",
                    f"{short(kind)} is a server tool of Anthropic's API; only custom "
                    "(function) tools work on this model",
                )
            for key in tool:
                if key not in _TOOL_KEYS:
                    raise UntranslatableRequest(f"{param}.{key}", "unknown tool field")
            name = string(tool.get("name"), f"{param}.name")
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                raise UntranslatableRequest(f"{param}.input_schema", "must be an object")
            function: dict[str, Any] = {"name": self.name(name)}
            description = tool.get("description")
            if description is not None:
                function["description"] = self._text(string(description, f"{param}.description"))
            # The schema as sent, never merged with the tool's own `type` (LiteLLM #30557).
            function["parameters"] = schema
            strict = tool.get("strict")
            if strict is not None and not isinstance(strict, bool):
                raise UntranslatableRequest(f"{param}.strict", "must be a boolean")
            if strict:
                closed = strict_parameters(schema)  # None: OpenAI's strict mode cannot take it
                if closed is not None:
                    function["parameters"] = closed
                function["strict"] = closed is not None
            elif strict is False:
                function["strict"] = False
            self.text_bytes += len(orjson.dumps(function["parameters"]))
            out.append({"type": "function", "function": function})
        return out

    # -- messages ------------------------------------------------------------------------------

    def messages(self, messages: object) -> list[dict[str, Any]]:
        if not isinstance(messages, list):
            raise UntranslatableRequest("messages", "must be an array")
        out: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            param = f"messages.{i}"
            if not isinstance(message, dict):
                raise UntranslatableRequest(param, "must be an object")
            role = message.get("role")
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            elif not isinstance(content, list):
                raise UntranslatableRequest(f"{param}.content", "must be a string or an array")
            if role == "user":
                out.extend(self._user(content, f"{param}.content"))
            elif role == "assistant":
                reply = self._assistant(content, f"{param}.content")
                if reply is not None:
                    out.append(reply)
            elif role == "system":
                # A system message inside the conversation (Claude Code sends one mid-way): a
                # Chat system message in the same place.
                text = self.system(content)
                if text:
                    out.append({"role": "system", "content": text})
            else:
                raise UntranslatableRequest(
                    f"{param}.role", 'must be "user", "assistant" or "system"'
                )
        return out

    def _user(self, content: list[Any], param: str) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        images: list[dict[str, Any]] = []  # from tool results: after the tool messages
        parts: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            at = f"{param}.{j}"
            kind = block_type(block, at)
            if kind == "text":
                parts.append({"type": "text", "text": self._text(string(block.get("text"), at))})
            elif kind == "image":
                parts.append(self._media(image_part(block.get("source"), f"{at}.source")))
            elif kind == "document":
                parts.extend(self._document(block, at, counted=True))
            elif kind == "tool_result":
                tools.append(self._tool_result(block, at, images))
            else:
                raise UntranslatableRequest(f"{at}.type", _refusal(kind, "a user turn"))
        out = tools
        rest = images + parts
        if rest:
            if all(p["type"] == "text" for p in rest) and len(rest) == 1:
                out.append({"role": "user", "content": rest[0]["text"]})
            else:
                out.append({"role": "user", "content": rest})
        return out

    def _tool_result(
        self, block: dict[str, Any], at: str, images: list[dict[str, Any]]
    ) -> dict[str, Any]:
        call_id, _ = split_tool_use_id(string(block.get("tool_use_id"), f"{at}.tool_use_id"))
        content = block.get("content")
        texts: list[str] = []
        moved: list[str] = []  # what went to the next user message: "image", "file"
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for k, part in enumerate(content):
                where = f"{at}.content.{k}"
                kind = block_type(part, where)
                if kind == "text":
                    texts.append(string(part.get("text"), f"{where}.text"))
                elif kind == "image":
                    images.append(self._media(image_part(part.get("source"), f"{where}.source")))
                    moved.append("image")
                elif kind == "document":
                    # A plain-text document's text stays in the tool message; a PDF, like an
                    # image, follows in a user message (a tool message carries text only).
                    for doc in self._document(part, where, counted=False):
                        if doc["type"] == "text":
                            texts.append(doc["text"])
                        else:
                            images.append(doc)
                            moved.append("file" if doc["type"] == "file" else "image")
                else:
                    raise UntranslatableRequest(f"{where}.type", _refusal(kind, "a tool result"))
        elif content is not None:
            raise UntranslatableRequest(f"{at}.content", "must be a string or an array")
        text = "\n".join(texts)
        if not text and moved:
            # A tool message cannot carry images or files: say where the result went.
            what = "image" if set(moved) == {"image"} else "file"
            text = f"(the result is the {what} in the next user message)"
        if block.get("is_error") is True:
            # Chat has no error flag on tool messages; the model still needs to know.
            text = "Error: " + text
        return {"role": "tool", "tool_call_id": call_id, "content": self._text(text)}

    def _document(self, block: dict[str, Any], at: str, *, counted: bool) -> list[dict[str, Any]]:
        """A document block's parts (request_parts.document_parts); `counted`: their text is
        counted as sent here (a tool result counts its whole text once, itself)."""
        self.documents += 1
        parts = document_parts(block, at, self.documents)
        for part in parts:
            if part["type"] != "text":
                self._media(part)
            elif counted:
                part["text"] = self._text(part["text"])
        return parts

    def _assistant(self, content: list[Any], param: str) -> dict[str, Any] | None:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            at = f"{param}.{j}"
            kind = block_type(block, at)
            if kind == "text":
                texts.append(self._text(string(block.get("text"), f"{at}.text")))
            elif kind == "tool_use":
                name = self.name(string(block.get("name"), f"{at}.name"))
                tool_input = block.get("input")
                if not isinstance(tool_input, dict):
                    raise UntranslatableRequest(f"{at}.input", "must be an object")
                arguments = orjson.dumps(tool_input).decode()
                self.text_bytes += len(arguments)
                # The id may carry Gemini's thought signature (signatures.py).
                call_id, extra = outgoing_call(
                    string(block.get("id"), f"{at}.id"), not calls, self.placeholder
                )
                call: dict[str, Any] = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                if extra:
                    call["extra_content"] = extra
                calls.append(call)
            elif kind in _THINKING_BLOCKS:
                continue  # accepted, never forwarded (module docstring)
            else:
                raise UntranslatableRequest(f"{at}.type", _refusal(kind, "an assistant turn"))
        text = "\n\n".join(t for t in texts if t)
        if not text and not calls:
            return None  # only thinking: nothing a Chat server can take
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return message


def _refusal(kind: str, where: str) -> str:
    return f"{short(kind)} blocks in {where} cannot be sent to this model"
