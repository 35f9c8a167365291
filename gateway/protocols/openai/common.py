"""Rules both OpenAI APIs (Chat Completions and Responses) share when they become Messages.

One rule, one place (docs/design.md "Second wave"): output limits, sampling, reasoning effort and
thinking, function tools and tool_choice, structured output, prompt caching and the session hint.
Each function takes the value and the JSON path the caller's API uses for it (`reasoning_effort`
on chat, `reasoning.effort` on Responses), so errors name the client's own field. Pure: no
Django, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gateway.protocols.model_rules import (
    ModelRuleViolation,
    check_forced_tool_choice,
    nearest_effort,
    supported_levels,
)

from .inbound_messages import check_depth, short
from .types import EFFORT_LEVELS, InvalidRequest, ModelCaps

DEFAULT_MAX_TOKENS = 32000
MAX_PROMPT_CACHE_KEY = 256
MAX_CACHE_BREAKPOINTS = 4  # Anthropic's per-request limit

# Schema keywords whose value is a map of name -> subschema, a single subschema, or a list of them.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_SINGLE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems", "items")


# -- output length and sampling ----------------------------------------------------------------


def max_output_tokens(value: object, name: str, caps: ModelCaps) -> int | None:
    """A client's output limit, checked against the model; None when not sent."""
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= caps.max_output_tokens:
        raise InvalidRequest(
            f"{name}: must be an integer between 1 and {caps.max_output_tokens} "
            f"(the maximum output of {caps.canonical_id})",
            name,
        )
    return value


def default_max_tokens(caps: ModelCaps) -> int:
    return min(DEFAULT_MAX_TOKENS, caps.max_output_tokens)


def number(value: object, name: str, high: float) -> float | None:
    if value is None:
        return None
    valid = type(value) in (int, float) and math.isfinite(value) and 0 <= value <= high  # type: ignore[arg-type]
    if not valid:
        raise InvalidRequest(f"{name}: must be a number between 0 and {high:g}", name)
    return value  # type: ignore[return-value]  # checked above


def apply_sampling(
    temperature: object, top_p: object, caps: ModelCaps, thinking: bool, body: dict[str, Any]
) -> None:
    """`temperature` (0..2) and `top_p` (0..1), validated, then forwarded only where they apply.

    Newer models refuse sampling parameters and thinking models accept only their defaults; many
    OpenAI clients send temperature: 0 anyway, so these are dropped silently.
    """
    t = number(temperature, "temperature", 2)
    p = number(top_p, "top_p", 1)
    if not caps.sampling or thinking:
        return
    if t is not None:
        body["temperature"] = min(t, 1)  # Anthropic's range is 0..1
    if p is not None and p < 1:
        body["top_p"] = p


def prompt_cache_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest("prompt_cache_key: must be a string", "prompt_cache_key")
    if len(value) > MAX_PROMPT_CACHE_KEY:
        raise InvalidRequest(
            f"prompt_cache_key: must be at most {MAX_PROMPT_CACHE_KEY} characters",
            "prompt_cache_key",
        )
    return value or None


# -- reasoning ---------------------------------------------------------------------------------


def reasoning_effort(value: object, caps: ModelCaps, param: str) -> str | None:
    """Return the effort level to send, "none" for no thinking, or None when not sent."""
    if value is None:
        return None
    levels = supported_levels(caps.reasoning_efforts)
    if not isinstance(value, str) or value not in EFFORT_LEVELS:
        named = ("none", *levels) if caps.thinking_can_be_disabled else levels
        supported = ", ".join(named) if levels else "no effort levels"
        raise InvalidRequest(
            f"{param}: {short(value)} is not valid; use one of "
            f"{', '.join(EFFORT_LEVELS)} (model {caps.canonical_id} supports {supported}; "
            "other values map to the nearest supported level)",
            param,
        )
    # The nearest-level rule of gateway.protocols.model_rules: "none" on a model whose thinking
    # cannot be turned off becomes its lowest level (reported in x-ezat-reasoning-effort).
    return nearest_effort(value, levels, thinking_can_be_disabled=caps.thinking_can_be_disabled)


def apply_reasoning(
    body: dict[str, Any], output_config: dict[str, Any], effort: str | None, forced_tool: bool
) -> bool:
    """Put the effort into `output_config` and ask for thinking; returns whether it was asked.

    Anthropic refuses thinking together with a forced tool call; effort alone is still valid.
    """
    if effort is not None and effort != "none":
        output_config["effort"] = effort
    thinking = "effort" in output_config and not forced_tool
    if thinking:
        body["thinking"] = {"type": "adaptive"}
    return thinking


def disable_thinking(body: dict[str, Any]) -> None:
    """Drop the thinking request; `output_config.effort` stays (it is valid on its own)."""
    body.pop("thinking", None)


# -- function tools ----------------------------------------------------------------------------


def function_tool(
    *,
    name: object,
    description: object,
    parameters: object,
    strict: object,
    param: str,
    field: str,
    names: set[str],
) -> dict[str, Any]:
    """One function tool as an Anthropic tool. `param` is the tool's path and `field` the
    prefix of its function fields (`tools[0].function` on chat, `tools[0]` on Responses)."""
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{field}.name: must be a non-empty string", f"{field}.name")
    if name in names:
        raise InvalidRequest(f"{field}.name: duplicate tool name {short(name)}", f"{field}.name")
    names.add(name)
    out: dict[str, Any] = {"name": name}
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"{field}.description: must be a string", f"{field}.description")
    if description:
        out["description"] = description
    out["input_schema"] = input_schema(parameters, field)
    if strict is not None:
        if not isinstance(strict, bool):
            raise InvalidRequest(f"{field}.strict: must be a boolean", f"{field}.strict")
        out["strict"] = strict
    return out


def input_schema(parameters: object, param: str) -> dict[str, Any]:
    if parameters is None or parameters == {}:
        return {"type": "object", "properties": {}}
    param = f"{param}.parameters"
    if not isinstance(parameters, dict):
        raise InvalidRequest(f"{param}: must be a JSON Schema object", param)
    kind = parameters.get("type", "object")
    if kind != "object":
        raise InvalidRequest(f'{param}.type: must be "object"', f"{param}.type")
    check_depth(parameters, param)
    # Anthropic requires an explicit object type; OpenAI lets clients leave it out.
    return parameters if "type" in parameters else {"type": "object", **parameters}


def tool_choice(kind: str | None, name: str | None, parallel: object) -> dict[str, Any] | None:
    """`auto` / `none` / `required` / a named function (kind "function") -> Anthropic's
    tool_choice, with `parallel_tool_calls: false` as `disable_parallel_tool_use`."""
    choice: dict[str, Any] | None
    if kind is None:
        choice = None
    elif kind == "required":
        choice = {"type": "any"}
    elif kind == "function":
        choice = {"type": "tool", "name": name}
    else:
        choice = {"type": kind}
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequest("parallel_tool_calls: must be a boolean", "parallel_tool_calls")
    if parallel is False:
        if choice is None:
            choice = {"type": "auto"}
        # Anthropic has no such flag on "none": there is nothing to parallelise.
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    return choice


def forces_tool(choice: dict[str, Any] | None) -> bool:
    return choice is not None and choice["type"] in ("any", "tool")


def apply_tool_choice(body: dict[str, Any], choice: dict[str, Any] | None, caps: ModelCaps) -> bool:
    """The translated `tool_choice` into the body, when there is one; whether it forces a tool
    (checked against the model: some cannot be forced)."""
    if choice is None:
        return False
    body["tool_choice"] = choice
    return checked_forced_tool(choice, caps)


def finish_body(
    body: dict[str, Any],
    output_config: dict[str, Any],
    output_format: dict[str, Any] | None,
    *,
    caps: ModelCaps,
    cache_params: list[str],
    auto_cache: bool,
    stream: bool,
) -> None:
    """The last steps of both translations: the output format and config, prompt-cache
    breakpoints where the model caches, and the stream flag."""
    if output_format is not None:
        output_config["format"] = output_format
    if output_config:
        body["output_config"] = output_config
    if caps.prompt_caching:
        apply_prompt_caching(body, cache_params, auto_cache)
    if stream:
        body["stream"] = True


def reason_and_finish(
    body: dict[str, Any],
    effort: str | None,
    forced_tool: bool,
    sampling: tuple[object, object],
    output_format: Callable[[], dict[str, Any] | None],
    *,
    caps: ModelCaps,
    cache_params: list[str],
    auto_cache: bool,
    stream: bool,
) -> bool:
    """The steps both translations end with, in this order (the order their 400s are found
    in): thinking for the effort, the sampling (`temperature`, `top_p`), the output format
    (read by `output_format`), then `finish_body`. Returns whether thinking was asked for."""
    output_config: dict[str, Any] = {}
    thinking = apply_reasoning(body, output_config, effort, forced_tool)
    apply_sampling(sampling[0], sampling[1], caps, thinking, body)
    finish_body(
        body,
        output_config,
        output_format(),
        caps=caps,
        cache_params=cache_params,
        auto_cache=auto_cache,
        stream=stream,
    )
    return thinking


def checked_forced_tool(choice: dict[str, Any] | None, caps: ModelCaps) -> bool:
    """Whether `choice` forces a tool call; a 400 naming the model where its page says forced
    tool use returns an error (gateway.protocols.model_rules)."""
    forced = forces_tool(choice)
    try:
        check_forced_tool_choice(
            forced=forced,
            model_id=caps.canonical_id,
            allowed=caps.forced_tool_choice,
            param="tool_choice",
            auto='"auto"',
            forced_forms='"required" or a named function',
        )
    except ModelRuleViolation as exc:
        raise InvalidRequest(exc.message, exc.param) from None
    return forced


# -- structured output -------------------------------------------------------------------------


def json_object_refused(param: str, use: str) -> InvalidRequest:
    return InvalidRequest(
        f'{param}: {{"type": "json_object"}} is not supported because there is no schema to '
        f"enforce; use {use}",
        param,
    )


def asks_for_schema(fmt: dict[str, Any], param: str, use: str) -> bool:
    """Whether a format object (chat's `response_format`, the Responses API's `text.format`)
    asks for a JSON Schema: `text` is no format at all (False), `json_object` is refused (there
    is no schema to enforce; `use` says what to send instead), any other type is a 400 naming
    `param`.type."""
    kind = fmt.get("type")
    if kind == "text":
        return False
    if kind == "json_object":
        raise json_object_refused(param, use)
    if kind != "json_schema":
        raise InvalidRequest(f'{param}.type: must be "text" or "json_schema"', f"{param}.type")
    return True


def json_schema_format(schema: object, caps: ModelCaps, param: str, field: str) -> dict[str, Any]:
    """A client's JSON Schema as Anthropic's `output_config.format`.

    `field` names the whole format (for "model does not support"), `param` the schema itself.
    """
    if not caps.structured_outputs:
        raise InvalidRequest(
            f"{field}: model {caps.canonical_id} does not support structured outputs", field
        )
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{param}: must be a JSON Schema object", param)
    check_depth(schema, param)
    return {"type": "json_schema", "schema": close_objects(schema, param)}


def _is_object_schema(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or (kind is None and isinstance(node.get("properties"), dict))
    )


def close_objects(schema: dict[str, Any], root: str) -> dict[str, Any]:
    """Anthropic needs every object schema closed (`additionalProperties: false`).

    Objects that say nothing about `additionalProperties` are closed here, as openai-python's
    own `parse()` helper does before sending (`to_strict_json_schema`); instructor's JSON_SCHEMA
    mode and hand-written schemas rely on that. Only a schema that explicitly allows extra
    properties (`true` or a schema) is refused: closing it would change what it means. The
    caller's dicts are never modified; changed nodes are copied. Walked in document order, so
    the first offending path is the one reported (depth is bounded by check_depth).
    """
    return _close(schema, root)


def _close(node: Any, path: str) -> Any:
    if not isinstance(node, dict):
        return node  # true/false are valid schemas
    out: dict[str, Any] | None = None
    if _is_object_schema(node):
        extra = node.get("additionalProperties", None)
        if "additionalProperties" not in node:
            out = {**node, "additionalProperties": False}
        elif extra is not False:
            raise InvalidRequest(
                f"{path}: objects may not allow additional properties (additionalProperties "
                f"is {short(extra)}); leave it out or set it to false",
                path,
            )
    for key in _SCHEMA_MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            closed = {name: _close(s, f"{path}.{key}.{name}") for name, s in sub.items()}
            if any(closed[n] is not sub[n] for n in sub):
                out = out if out is not None else dict(node)
                out[key] = closed
    for key in _SCHEMA_SINGLE:
        sub = node.get(key)
        if isinstance(sub, dict):
            new = _close(sub, f"{path}.{key}")
            if new is not sub:
                out = out if out is not None else dict(node)
                out[key] = new
    for key in _SCHEMA_LISTS:
        sub = node.get(key)
        if isinstance(sub, list):
            items = [_close(s, f"{path}.{key}[{i}]") for i, s in enumerate(sub)]
            if any(a is not b for a, b in zip(items, sub, strict=True)):
                out = out if out is not None else dict(node)
                out[key] = items
    return out if out is not None else node


# -- prompt caching ----------------------------------------------------------------------------


def apply_prompt_caching(body: dict[str, Any], caller_params: list[str], auto: bool) -> None:
    if len(caller_params) > MAX_CACHE_BREAKPOINTS:
        param = caller_params[MAX_CACHE_BREAKPOINTS]
        raise InvalidRequest(
            f"{param}: at most {MAX_CACHE_BREAKPOINTS} cache_control breakpoints are allowed",
            param,
        )
    if not auto or caller_params:
        return  # the caller placed its own breakpoints: add none
    # Breakpoint 1 ends the stable prefix (tools -> system), so every turn reads it back.
    system = body.get("system")
    tools = body.get("tools")
    prefix_end = system[-1] if system else tools[-1] if tools else None
    if prefix_end is not None:
        prefix_end["cache_control"] = {"type": "ephemeral"}
    # Breakpoint 2 on the newest message: written now, read back by the next turn.
    body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
