"""Scripted faults: a FIFO of entries, each consumed by the next request it matches.

Entries are validated strictly when scripted: a misspelt field would otherwise silently do
nothing and make a fault test pass for the wrong reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PATHS = {
    "messages": "messages",
    "/v1/messages": "messages",
    "count_tokens": "count_tokens",
    "/v1/messages/count_tokens": "count_tokens",
    # The OpenAI-compatible front (simulator/openai_front.py), Azure's path included.
    "chat_completions": "chat_completions",
    "/v1/chat/completions": "chat_completions",
    "/openai/v1/chat/completions": "chat_completions",
    "responses": "responses",
    "/v1/responses": "responses",
    "/openai/v1/responses": "responses",
}

_INT_FIELDS = (
    "times",
    "status",
    "drop_after_events",
    "error_after_events",
    "pause_after_events",
    "bad_crc_after_events",  # Bedrock front only: a frame with a broken CRC
)
_NUMBER_FIELDS = ("delay", "pause", "event_delay")
# `code`: the OpenAI front's `error.code` (e.g. "context_length_exceeded").
_STR_FIELDS = ("match", "path", "message", "type", "code")
KNOWN_FIELDS = frozenset(
    {*_INT_FIELDS, *_NUMBER_FIELDS, *_STR_FIELDS, "drop", "reply", "headers", "retry_after"}
)


class FaultError(ValueError):
    """A scripted fault entry is malformed."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_types(spec: Mapping[str, Any]) -> None:
    unknown = sorted(set(spec) - KNOWN_FIELDS)
    if unknown:
        raise FaultError(f"unknown fault field(s): {', '.join(unknown)}")
    for name in _INT_FIELDS:
        if name in spec and not _is_int(spec[name]):
            raise FaultError(f"{name} must be an integer")
    for name in _NUMBER_FIELDS:
        value = spec.get(name, 0)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise FaultError(f"{name} must be a non-negative number")
    for name in _STR_FIELDS:
        if name in spec and not isinstance(spec[name], str):
            raise FaultError(f"{name} must be a string")
    if "drop" in spec and not isinstance(spec["drop"], bool):
        raise FaultError("drop must be a boolean")
    if "reply" in spec and not isinstance(spec["reply"], Mapping):
        raise FaultError("reply must be an object")
    headers = spec.get("headers", {})
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise FaultError("headers must be an object of strings")


@dataclass(slots=True)
class Fault:
    spec: dict[str, Any]
    path: str = "messages"
    match: bytes | None = None
    times: int = 1
    status: int | None = None
    message: str | None = None
    error_type: str | None = None
    retry_after: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    drop_after_events: int | None = None
    error_after_events: int | None = None
    pause_after_events: int | None = None
    pause: float = 0.0
    event_delay: float = 0.0
    reply: dict[str, Any] | None = None

    @classmethod
    def parse(cls, spec: Any) -> Fault:
        if not isinstance(spec, Mapping):
            raise FaultError("each fault must be an object")
        _check_types(spec)
        path = PATHS.get(spec.get("path", "messages"))
        if path is None:
            raise FaultError(
                "path must be 'messages', 'count_tokens', 'chat_completions' or 'responses'"
            )
        times = spec.get("times", 1)
        if times == 0 or times < -1:
            raise FaultError("times must be >= 1, or -1 for forever")
        status = spec.get("status")
        if status is not None and not 400 <= status <= 599:
            raise FaultError("status must be an HTTP error status (400-599)")
        for name in ("drop_after_events", "error_after_events", "pause_after_events"):
            if spec.get(name) is not None and spec[name] < 0:
                raise FaultError(f"{name} must be >= 0")
        if ("pause_after_events" in spec) != ("pause" in spec):
            raise FaultError("pause_after_events and pause go together")
        match = spec.get("match")
        retry_after = spec.get("retry_after")
        return cls(
            spec=dict(spec),
            path=path,
            match=match.encode() if match is not None else None,
            times=times,
            status=status,
            message=spec.get("message"),
            error_type=spec.get("type"),
            retry_after=str(retry_after) if retry_after is not None else None,
            headers=dict(spec.get("headers", {})),
            delay=float(spec.get("delay", 0)),
            drop=bool(spec.get("drop", False)),
            drop_after_events=spec.get("drop_after_events"),
            error_after_events=spec.get("error_after_events"),
            pause_after_events=spec.get("pause_after_events"),
            pause=float(spec.get("pause", 0)),
            event_delay=float(spec.get("event_delay", 0)),
            reply=dict(spec["reply"]) if "reply" in spec else None,
        )

    @property
    def shapes_stream(self) -> bool:
        """True when events must be written one by one instead of in a single write."""
        return (
            self.drop_after_events is not None
            or self.error_after_events is not None
            or self.pause_after_events is not None
            or self.event_delay > 0
        )

    def response_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["retry-after"] = self.retry_after
        return headers


class FaultScript:
    def __init__(self) -> None:
        self._entries: list[Fault] = []

    def __len__(self) -> int:
        return len(self._entries)

    def extend(self, specs: list[Any]) -> int:
        # Parse everything first so a bad entry leaves the script unchanged.
        parsed = [Fault.parse(spec) for spec in specs]
        self._entries.extend(parsed)
        return len(parsed)

    def clear(self) -> None:
        self._entries.clear()

    def take(self, path: str, raw_body: bytes) -> Fault | None:
        """The first entry for `path` whose `match` occurs in the body; consumes one use."""
        for index, fault in enumerate(self._entries):
            if fault.path != path:
                continue
            if fault.match is not None and fault.match not in raw_body:
                continue
            if fault.times > 0:
                fault.times -= 1
                if fault.times == 0:
                    del self._entries[index]
            return fault
        return None

    def pending(self) -> list[dict[str, Any]]:
        return [{**f.spec, "times": f.times} for f in self._entries]
