"""Responses `tools` and `tool_choice` -> Anthropic tools (part of the inbound translator).

What Codex CLI and the OpenAI Agents SDK send by default is served (issue 32):
- `function` tools as they are;
- `namespace` tools (a named group of function/custom tools) flattened into their tools, each
  named `<namespace>__<name>` upstream; a call comes back with `name` and `namespace` apart;
- `custom` tools (free-form text input, optionally constrained by a grammar, as Codex's
  `apply_patch`) as a tool with one string property, `input`; the grammar goes into the
  description, since Anthropic has no constrained decoding for it; a call comes back as a
  `custom_tool_call` whose `input` is that string;
- hosted web search (`web_search`, `web_search_preview` and their dated names) is dropped, and
  the handler says so in `x-ezat-dropped-tools`: EZAT's catalog has no price for Anthropic's
  server-side web search, so it cannot be billed (docs/api.md);
- `tool_search` is dropped the same way: deferred tools are all given to the model up front;
- any other hosted tool is a 400 naming it.

Wire shapes: openai-python `types/responses/{namespace_tool_param,custom_tool_param,
response_custom_tool_call,response_function_tool_call}.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.openai import common
from gateway.protocols.openai.inbound_messages import Converter, short
from gateway.protocols.openai.types import InvalidRequest

from .types import BUILT_IN_TOOLS, ToolName

__all__ = ["CUSTOM_INPUT", "ToolSet", "flat_name", "tool_choice", "translate_tools"]

# The one property of a custom tool's input schema: its free-form text.
CUSTOM_INPUT = "input"
NAMESPACE_SEPARATOR = "__"
# Dropped, never refused: clients send them by default (Codex, the Agents SDK's WebSearchTool).
WEB_SEARCH = frozenset(
    {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"}
)
DROPPED_WEB_SEARCH = "web_search"
# Searches the request's deferred tools (`defer_loading: true`) for the model. Every tool is
# given to the model up front here (defer_loading is not honoured), so there is nothing left to
# search: it is dropped too. Codex sends it (client-executed) for models whose metadata has
# `supports_search_tool`, such as its GPT models.
TOOL_SEARCH = "tool_search"


def flat_name(name: str, namespace: str | None) -> str:
    """The upstream name of a tool (or of a call to it, replayed as input)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


@dataclass(slots=True)
class ToolSet:
    tools: list[dict[str, Any]] = field(default_factory=list)  # Anthropic tools
    # Upstream name -> how a call to it is returned; only namespaced and custom tools.
    names: dict[str, ToolName] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # for x-ezat-dropped-tools
    custom: set[str] = field(default_factory=set)  # upstream names of custom tools


def translate_tools(raw: object, conv: Converter) -> ToolSet:
    out = ToolSet()
    if raw is None or raw == []:
        return out
    if not isinstance(raw, list):
        raise InvalidRequest("tools: must be an array", "tools")
    names: set[str] = set()
    for k, tool in enumerate(raw):
        param = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        kind = tool.get("type")
        if kind in WEB_SEARCH or kind == TOOL_SEARCH:
            name = DROPPED_WEB_SEARCH if kind in WEB_SEARCH else TOOL_SEARCH
            if name not in out.dropped:
                out.dropped.append(name)
            continue
        if kind not in ("function", "custom", "namespace"):
            what = (
                f"the built-in tool {short(kind)} is not supported"
                if isinstance(kind, str) and (kind in BUILT_IN_TOOLS or kind.startswith("web_"))
                else f"tool type {short(kind)} is not supported"
            )
            raise InvalidRequest(
                f"{param}.type: {what}; function, custom and namespace tools are (web_search "
                "and tool_search are dropped)",
                f"{param}.type",
            )
        if not conv.caps.tools:
            raise InvalidRequest(
                f"tools: model {conv.caps.canonical_id} does not support tool use", "tools"
            )
        if kind == "namespace":
            _namespace(tool, param, conv, names, out)
        else:
            _one(tool, param, None, conv, names, out)
    return out


def _namespace(
    tool: dict[str, Any], param: str, conv: Converter, names: set[str], out: ToolSet
) -> None:
    namespace = tool.get("name")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidRequest(f"{param}.name: must be a non-empty string", f"{param}.name")
    members = tool.get("tools")
    if not isinstance(members, list):
        raise InvalidRequest(f"{param}.tools: must be an array", f"{param}.tools")
    described = tool.get("description")
    for j, member in enumerate(members):
        inner = f"{param}.tools[{j}]"
        if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
            raise InvalidRequest(
                f"{inner}.type: a namespace holds function and custom tools only (got "
                f"{short(member.get('type') if isinstance(member, dict) else member)})",
                f"{inner}.type",
            )
        _one(member, inner, namespace, conv, names, out, described)


def _one(
    tool: dict[str, Any],
    param: str,
    namespace: str | None,
    conv: Converter,
    names: set[str],
    out: ToolSet,
    namespace_description: object = None,
) -> None:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{param}.name: must be a non-empty string", f"{param}.name")
    upstream = flat_name(name, namespace)
    custom = tool.get("type") == "custom"
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"{param}.description: must be a string", f"{param}.description")
    if isinstance(namespace_description, str) and namespace_description:
        # The model sees one flat list: the group's description travels with each member.
        description = f"{description or ''}\n\n({namespace}: {namespace_description})".strip()
    if custom:
        description = _custom_description(description, tool.get("format"), param)
        parameters: object = {
            "type": "object",
            "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's input."}},
            "required": [CUSTOM_INPUT],
            "additionalProperties": False,
        }
        strict = None
    else:
        parameters, strict = tool.get("parameters"), tool.get("strict")
    translated = common.function_tool(
        name=upstream,
        description=description,
        parameters=parameters,
        strict=strict,
        param=param,
        field=param,
        names=names,
    )
    conv.copy_cache_control(tool, translated, param)
    out.tools.append(translated)
    if custom:
        out.custom.add(upstream)
    if custom or namespace:
        out.names[upstream] = ToolName(name, namespace, custom)


def _custom_description(description: str | None, fmt: object, param: str) -> str:
    text = description or ""
    if fmt is None:
        return text
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise InvalidRequest(
            f'{param}.format: must be {{"type": "text"}} or {{"type": "grammar", ...}}',
            f"{param}.format",
        )
    if fmt["type"] == "text":
        return text
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if syntax not in ("lark", "regex") or not isinstance(definition, str) or not definition:
        raise InvalidRequest(
            f'{param}.format: a grammar needs syntax "lark" or "regex" and a definition',
            f"{param}.format",
        )
    # No constrained decoding upstream: the model is told the grammar its input must follow.
    return (
        f"{text}\n\nThe input must be text matching this {syntax} grammar:\n{definition}"
    ).strip()


def tool_choice(req: dict[str, Any], tools: ToolSet) -> dict[str, Any] | None:
    raw = req.get("tool_choice")
    name: str | None = None
    if isinstance(raw, dict) and raw.get("type") in WEB_SEARCH:
        raw = "auto"  # the tool is dropped (see above): the model chooses among the others
    if raw is None or raw in ("auto", "none", "required"):
        kind = raw
    elif isinstance(raw, dict) and raw.get("type") in ("function", "custom"):
        name = raw.get("name")
        namespace = raw.get("namespace")
        if isinstance(name, str) and isinstance(namespace, str):
            name = flat_name(name, namespace)
        if not isinstance(name, str) or not any(t["name"] == name for t in tools.tools):
            raise InvalidRequest(
                f"tool_choice.name: {short(name)} is not one of the tools", "tool_choice.name"
            )
        kind = "function"
    elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
        raise InvalidRequest(
            f"tool_choice.type: {short(raw['type'])} is not supported; use auto, none, "
            'required, {"type": "function", "name": ...} or {"type": "custom", "name": ...}',
            "tool_choice.type",
        )
    else:
        raise InvalidRequest(
            'tool_choice: must be "auto", "none", "required" or {"type": "function", "name": ...}',
            "tool_choice",
        )
    return common.tool_choice(kind, name, req.get("parallel_tool_calls"))
