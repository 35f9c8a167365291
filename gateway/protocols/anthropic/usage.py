"""The usage counters of Anthropic stream events, as the translated streams keep them. Pure.

`message_start` carries the input counters, each `message_delta` the output so far; the counters
are cumulative, so a later value replaces an earlier one (nested counters, such as
`cache_creation`, field by field). Source: https://docs.anthropic.com/en/docs/build-with-claude/streaming
("the token counts shown in the usage field of the message_delta event are cumulative").
"""

from __future__ import annotations

from typing import Any


def absorb_usage(current: dict[str, Any], event: dict[str, Any]) -> object:
    """Merge the usage of a `message_start` or `message_delta` event into `current`; returns
    the `message_delta`'s stop_reason (None when it has none, and for `message_start`)."""
    if event.get("type") == "message_start":
        message = event.get("message")
        if isinstance(message, dict):
            _merge(current, message.get("usage"))
        return None
    _merge(current, event.get("usage"))
    delta = event.get("delta")
    return delta.get("stop_reason") if isinstance(delta, dict) else None


def _merge(current: dict[str, Any], usage: object) -> None:
    if not isinstance(usage, dict):
        return
    for key, value in usage.items():
        if value is None:
            continue
        if isinstance(value, dict):
            previous = current.get(key)
            merged = dict(previous) if isinstance(previous, dict) else {}
            merged.update((k, v) for k, v in value.items() if v is not None)
            current[key] = merged
        else:
            current[key] = value
