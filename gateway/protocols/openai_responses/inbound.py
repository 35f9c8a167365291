"""OpenAI Responses request -> Anthropic Messages request (pure: dict in, dict out).

Field facts: platforms-and-responses.md §4.1-4.2 (openai-python v3.3.1 `response_create_params`,
the OpenAI OpenAPI spec). Rules shared with Chat Completions (limits, sampling, effort, tools,
structured output, caching) come from `gateway.protocols.openai.common`. Fields that would
change the answer and have no equivalent are refused with a 400 naming the field; fields the
gateway has no use for are ignored. Only `InvalidRequest` escapes for bad input.

State the gateway keeps (a stored previous response, referenced items) is looked up by the
handler and passed in; sealed reasoning is opened through the `unseal` callable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.protocols.openai import common
from gateway.protocols.openai.inbound_messages import Converter, short
from gateway.protocols.openai.types import InvalidRequest, ModelCaps

from .items import ItemConverter
from .tools import tool_choice, translate_tools
from .types import ENCRYPTED_REASONING, TranslatedResponsesRequest, Unseal

__all__ = ["references", "translate_request"]

MAX_METADATA_PAIRS = 16  # OpenAI's limit (O-SPEC Metadata)
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

# Refused whenever present and truthy: each needs server features the gateway does not offer.
_REFUSED: tuple[tuple[str, str], ...] = (
    ("background", "background mode is not supported; send the request without it"),
    ("conversation", "conversations are not supported; use previous_response_id or send input"),
    ("prompt", "prompt templates are not supported; send instructions and input"),
    ("top_logprobs", "log probabilities are not supported"),
)
_SUMMARIES = ("auto", "concise", "detailed")


def references(body: Mapping[str, Any]) -> list[str]:
    """The ids of stored items this request refers to: `item_reference` items, and reasoning
    items sent back by id without their `encrypted_content` (the Agents SDK with the default
    `store: true`), which OpenAI also resolves from its store."""
    raw = body.get("input")
    if not isinstance(raw, list):
        return []
    return [
        item["id"]
        for item in raw
        if isinstance(item, dict)
        and isinstance(item.get("id"), str)
        and (
            item.get("type") == "item_reference"
            or (item.get("type") == "reasoning" and item.get("encrypted_content") is None)
        )
    ]


def translate_request(
    req: dict[str, Any],
    caps: ModelCaps,
    *,
    history: list[dict[str, Any]] | None = None,
    referenced: Mapping[str, dict[str, Any]] | None = None,
    unseal: Unseal | None = None,
    auto_cache: bool = True,
) -> TranslatedResponsesRequest:
    """Translate a `POST /responses` body for the model described by `caps`.

    `history` is the stored context of `previous_response_id` (trusted items, already checked
    when they were stored); `referenced` maps the ids of `item_reference` items to their items.
    The returned body has no "model": the gateway sets the upstream deployment's id.
    """
    if not isinstance(req, dict):
        raise InvalidRequest("the request body must be a JSON object")
    _refuse_unsupported(req)
    stream = _bool(req, "stream", False)
    store = _bool(req, "store", True)
    include = _include(req.get("include"))

    conv = Converter(caps)
    items = ItemConverter(conv, unseal)
    instructions = req.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("instructions: must be a string", "instructions")
    if instructions:
        # instructions are not carried over from a previous response (OpenAI's rule).
        items.system.append({"type": "text", "text": instructions})
    for n, item in enumerate(history or ()):
        items.add(item, f"previous_response_id (item {n})", trusted=True)
    new_items = _input_items(req.get("input"), referenced or {})
    for param, item in new_items:
        items.add(item, param)
    system, messages, tool_turn_without_thinking = items.result()

    max_tokens = common.max_output_tokens(req.get("max_output_tokens"), "max_output_tokens", caps)
    body: dict[str, Any] = {
        "max_tokens": max_tokens if max_tokens is not None else common.default_max_tokens(caps),
        "messages": messages,
    }
    if system:
        body["system"] = system

    toolset = translate_tools(req.get("tools"), conv)
    forced_tool = False
    if toolset.tools:
        body["tools"] = toolset.tools
        forced_tool = common.apply_tool_choice(body, tool_choice(req, toolset), caps)
    elif req.get("tool_choice") is not None:
        tool_choice(req, toolset)  # still validated, as OpenAI does

    reasoning = req.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise InvalidRequest("reasoning: must be an object", "reasoning")
    reasoning = reasoning or {}
    effort = common.reasoning_effort(reasoning.get("effort"), caps, "reasoning.effort")
    summary = _summary(reasoning)
    # The same call as the other OpenAI translation's (`duplicates` pairs them by shape): the
    # shared steps are in reason_and_finish; only the fields each API names differ.
    thinking = common.reason_and_finish(
        body,
        effort,
        forced_tool,
        (req.get("temperature"), req.get("top_p")),
        lambda: _text_format(req.get("text"), caps),
        caps=caps,
        cache_params=conv.cache_params,
        auto_cache=auto_cache,
        stream=stream,
    )
    if thinking:
        # The thinking text is shown only as a requested summary; otherwise only its signature
        # is needed (for the next turn), so the upstream need not send the text at all.
        body["thinking"]["display"] = "summarized" if summary else "omitted"
    return TranslatedResponsesRequest(
        body=body,
        stream=stream,
        store=store,
        include_encrypted=ENCRYPTED_REASONING in include,
        summary=summary is not None,
        session_hint=common.prompt_cache_key(req.get("prompt_cache_key")),
        reasoning_effort=effort,
        thinking=thinking,
        echo=_echo(req, instructions, max_tokens, reasoning, summary, store),
        items=[*(history or ()), *(item for _, item in new_items)],
        images=conv.images,
        media=conv.media,
        tool_turn_without_thinking=tool_turn_without_thinking,
        tool_map=toolset.names,
        dropped_tools=toolset.dropped,
    )


# -- top-level fields ---------------------------------------------------------------------------


def _refuse_unsupported(req: dict[str, Any]) -> None:
    for name, reason in _REFUSED:
        value = req.get(name)
        if value is not None and value is not False and value != 0:
            raise InvalidRequest(f"{name}: {reason}", name)
    _metadata(req.get("metadata"))


def _bool(req: dict[str, Any], name: str, default: bool) -> bool:
    value = req.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name}: must be a boolean", name)
    return value


def _include(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest("include: must be an array of strings", "include")
    return value


def _metadata(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS:
        raise InvalidRequest(
            f"metadata: must be an object of at most {MAX_METADATA_PAIRS} string pairs",
            "metadata",
        )
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(item, str):
            raise InvalidRequest(
                f"metadata.{key}: keys are at most {MAX_METADATA_KEY} characters and values "
                f"strings of at most {MAX_METADATA_VALUE}",
                f"metadata.{key}",
            )
        if len(item) > MAX_METADATA_VALUE:
            raise InvalidRequest(
                f"metadata.{key}: values are at most {MAX_METADATA_VALUE} characters",
                f"metadata.{key}",
            )


def _summary(reasoning: dict[str, Any]) -> str | None:
    # generate_summary is the deprecated name of summary.
    for name in ("summary", "generate_summary"):
        value = reasoning.get(name)
        if value is None:
            continue
        if value not in _SUMMARIES:
            raise InvalidRequest(
                f'reasoning.{name}: must be "auto", "concise" or "detailed"', f"reasoning.{name}"
            )
        return str(value)
    return None


def _echo(
    req: dict[str, Any],
    instructions: str | None,
    max_tokens: int | None,
    reasoning: dict[str, Any],
    summary: str | None,
    store: bool,
) -> dict[str, Any]:
    """The request fields a response object repeats (O-SPEC `Response`)."""
    text = req.get("text") if isinstance(req.get("text"), dict) else None
    tool_choice = req.get("tool_choice")
    parallel = req.get("parallel_tool_calls")
    return {
        "instructions": instructions,
        "max_output_tokens": max_tokens,
        "max_tool_calls": None,
        "metadata": req.get("metadata") or {},
        "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
        "previous_response_id": req.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": summary},
        "store": store,
        "temperature": req.get("temperature"),
        "text": {"format": (text or {}).get("format") or {"type": "text"}},
        "tool_choice": tool_choice if tool_choice is not None else "auto",
        "tools": req.get("tools") or [],
        "top_p": req.get("top_p"),
        "truncation": "disabled",
        "user": None,
    }


# -- input --------------------------------------------------------------------------------------


def _input_items(
    raw: object, referenced: Mapping[str, dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """(param, item) pairs; a string is one user message; references are resolved."""
    if isinstance(raw, str):
        if not raw:
            raise InvalidRequest("input: must not be empty", "input")
        return [("input", {"type": "message", "role": "user", "content": raw})]
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("input: must be a string or a non-empty array of items", "input")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(raw):
        param = f"input[{i}]"
        if isinstance(item, dict) and item.get("type") == "item_reference":
            ref = item.get("id")
            found = referenced.get(ref) if isinstance(ref, str) else None
            if found is None:
                # OpenAI's answer for an unknown item (openai-agents-python#919).
                raise InvalidRequest(
                    f"{param}.id: Item with id {short(ref)} not found. Items are kept only for "
                    "stored responses (store: true) of your organization, and only while they "
                    "are retained.",
                    f"{param}.id",
                    status=404,
                )
            out.append((param, found))
        elif (
            isinstance(item, dict)
            and item.get("type") == "reasoning"
            and item.get("encrypted_content") is None
            and isinstance(item.get("id"), str)
            and item["id"] in referenced
        ):
            out.append((param, referenced[item["id"]]))  # its stored, sealed copy
        else:
            out.append((param, item))
    return out


# -- text.format ----------------------------------------------------------------------------------


def _text_format(raw: object, caps: ModelCaps) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("text: must be an object", "text")
    fmt = raw.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise InvalidRequest("text.format: must be an object", "text.format")
    use = '{"type": "json_schema", "name": ..., "schema": ...}'
    if not common.asks_for_schema(fmt, "text.format", use):
        return None
    return common.json_schema_format(fmt.get("schema"), caps, "text.format.schema", "text.format")
