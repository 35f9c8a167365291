"""OpenAI's check of a strict function's schema, for the simulator's Chat Completions front.

With `strict: true`, every object in `parameters` must say `additionalProperties: false` and list
each of its properties in `required`; otherwise the request is a 400
`invalid_function_parameters` whose message names the function and where in the schema the
first offending object is, as a Python tuple of keys ("Invalid schema for function 'glob': In
context=(), 'additionalProperties' is required to be supplied and to be false."; OpenAI's
function-calling guide, https://platform.openai.com/docs/guides/function-calling#strict-mode,
and the messages real clients report, e.g. `'required' is required to be supplied and to be an
array including every key in properties. Missing 'x'.`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from simulator.openai_errors import OpenAIError

__all__ = ["strict_schema_error"]


def strict_schema_error(name: str, parameters: Mapping[str, Any], at: str) -> OpenAIError | None:
    """The 400 OpenAI gives a strict function `name` whose `parameters` it cannot take."""
    for path, node in _objects(parameters, ()):
        problem = _problem(node)
        if problem:
            return OpenAIError(
                400,
                f"Invalid schema for function '{name}': In context={path!r}, {problem}",
                f"{at}.parameters",
                "invalid_function_parameters",
            )
    return None


def _problem(node: Mapping[str, Any]) -> str | None:
    if node.get("additionalProperties") is not False:
        return "'additionalProperties' is required to be supplied and to be false."
    properties = node.get("properties") or {}
    required = node.get("required")
    required = required if isinstance(required, list) else []
    missing = [key for key in properties if key not in required]
    if missing:
        return (
            "'required' is required to be supplied and to be an array including every key in"
            f" properties. Missing '{missing[0]}'."
        )
    return None


def _objects(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Mapping]]:
    """Every object schema in `node`, outermost first, with its path of keys."""
    if not isinstance(node, Mapping):
        return
    if node.get("type") == "object" or "properties" in node:
        yield path, node
    for key in ("properties", "$defs", "definitions"):
        children = node.get(key)
        if isinstance(children, Mapping):
            for child, sub in children.items():
                yield from _objects(sub, (*path, key, child))
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _objects(items, (*path, "items"))
    for key in ("anyOf", "oneOf", "allOf"):
        options = node.get(key)
        if isinstance(options, list):
            for i, sub in enumerate(options):
                yield from _objects(sub, (*path, key, str(i)))
