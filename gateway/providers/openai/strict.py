"""Strict Anthropic tools -> OpenAI strict function schemas (providers.md §3.3, §7 item 9). Pure.

OpenAI's strict mode (Structured Outputs for function calling) takes a schema only when every
object in it says `additionalProperties: false` and lists every one of its properties in
`required`; otherwise the whole request is a 400 `invalid_function_parameters` ("In
context=(), 'additionalProperties' is required to be supplied and to be false.", OpenAI's
function-calling guide, https://platform.openai.com/docs/guides/function-calling#strict-mode;
providers.md §3.3, LiteLLM's `_add_additional_properties_false`). Anthropic's `strict: true`
asks for the same closed objects but allows optional properties.

So, for a tool the client marked `strict: true`:
- objects that do not say `additionalProperties` are closed (`false`): a tightening the strict
  flag already asks for, which changes no valid input;
- when every object then lists all its properties as required, the tool goes out strict;
- otherwise (an optional property, an object open to extra keys) it goes out `strict: false`
  with the client's schema unchanged. Making the optional properties required and nullable
  would hand the client's tool `null`s it never allowed; refusing would fail a request
  Anthropic takes. The client's own tool still validates the input it gets.
"""

from __future__ import annotations

from typing import Any

__all__ = ["strict_parameters"]

_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")


class _Open(Exception):
    """The schema cannot be made strict for OpenAI."""


def strict_parameters(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema closed for OpenAI's strict mode, or None when it cannot be (module docstring)."""
    try:
        closed = _close(schema)
    except _Open:
        return None
    return closed if isinstance(closed, dict) else None


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _close(node: Any) -> Any:
    if isinstance(node, list):
        return [_close(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if _is_object(node):
        if node.get("additionalProperties", False) is not False:
            raise _Open
        properties = node.get("properties", {})
        required = node.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            raise _Open
        if set(properties) - set(required):
            raise _Open
        out["additionalProperties"] = False
    for key in _SCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            out[key] = {name: _close(sub) for name, sub in value.items()}
    for key in ("items", *_SCHEMA_LISTS):
        if key in node:
            out[key] = _close(node[key])
    return out
