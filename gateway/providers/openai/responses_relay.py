"""The Responses API relayed as it is: the provider's events read in the internal dialect.

A Responses client calling an OpenAI-kind model whose deployment has `/responses`
(`"responses_api": true`, gateway/handlers/responses_relay.py) is not translated. The exchange
still has to see the stream in the internal dialect (gateway/dialect.py) to commit, fail over,
bill and log, so `ResponsesRelayDecoder` names each provider event by what it means in
Anthropic's vocabulary and keeps the event's own bytes as `raw`, which is what the client gets.

Stream events (https://platform.openai.com/docs/api-reference/responses-streaming; openai-python
3.57.0 `types/responses/response_stream_event.py`): `event: <type>` + `data: {...}`, every data
object with its `type` and `sequence_number`, no `[DONE]`; the stream ends with
`response.completed`, `response.incomplete` or `response.failed`, whose `response` carries the
usage (`types/responses/response_usage.py`: `input_tokens` INCLUDES
`input_tokens_details.cached_tokens`, `output_tokens` INCLUDES
`output_tokens_details.reasoning_tokens`).

| provider event                     | event (data, for the exchange)             | raw       |
|------------------------------------|--------------------------------------------|-----------|
| `response.created`                 | message_start (input estimate)             | the event |
| `response.output_item.added`       | content_block_start (the commit point)     | the event |
| any `….delta`                      | content_block_delta (its text)             | the event |
| `error`                            | error                                      | the event |
| `response.completed` / `.incomplete` / `.failed` | message_delta (usage, if any) | —       |
|                                    | then message_stop (`status`, `response`)   | the event |
| anything else (`….done`, progress) | ping                                       | the event |

A terminal event before any output item also gives a content_block_start (empty raw): a
finished response is committed, never retried on another deployment; but a `response.failed`
before any output is an `error` (data `terminal`, `response`), which another deployment may
still answer. Pure: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocols.anthropic.sse import SSEEvent
from gateway.providers.openai.mapping import anthropic_usage, error_type
from gateway.providers.openai.relay import RelayEvent, RelayStreamError

RESPONSES_PATH = "/responses"
TERMINAL = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
# The request log's finish reason, by the terminal status.
FINISH = {"completed": "end_turn", "incomplete": "max_tokens", "failed": "failed"}


@dataclass(frozen=True, slots=True)
class ResponsesRelayState:
    """What the relay of one call needs to know: the prompt estimate for a stream cut before
    its usage arrives."""

    input_estimate: int


def usage_of(usage: dict[str, Any]) -> dict[str, Any]:
    """A Responses usage object as Anthropic usage: its fields renamed to their Chat names (the
    details objects already share theirs: `cached_tokens`, `reasoning_tokens`), then the Chat
    normalisation of mapping.py, which checks every count (cached tokens out of the input,
    reasoning inside the output)."""
    return anthropic_usage(
        {
            "prompt_tokens": usage.get("input_tokens"),
            "prompt_tokens_details": usage.get("input_tokens_details"),
            "completion_tokens": usage.get("output_tokens"),
            "completion_tokens_details": usage.get("output_tokens_details"),
        }
    )


def _event(name: str, data: dict[str, Any], raw: bytes) -> SSEEvent:
    event = RelayEvent(name, b"", raw)
    event.parsed = data
    return event


class ResponsesRelayDecoder:
    """Reads the provider's Responses stream; remembers the response as `response.created`
    gave it and the last sequence number, for a failure EZAT has to tell in-stream itself."""

    __slots__ = ("_buffer", "_estimate", "_started", "response", "sequence")

    def __init__(self, input_estimate: int) -> None:
        self._buffer = b""
        self._estimate = input_estimate
        self._started = False  # an output item (or the end) was seen: committed
        self.response: dict[str, Any] = {}
        self.sequence = -1

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        text = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in text:
            if text.endswith(b"\r") and chunk:
                text, held = text[:-1], b"\r"  # a CRLF split across reads: wait for its LF
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = text.split(b"\n\n")
        self._buffer = blocks.pop() + held
        events: list[SSEEvent] = []
        for block in blocks:
            data = b"".join(
                line[6:] if line[5:6] == b" " else line[5:]
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            )
            if data:
                self._event(data, block + b"\n\n", events)
        return events

    def _event(self, data: bytes, raw: bytes, events: list[SSEEvent]) -> None:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise RelayStreamError("the provider sent an event that is not JSON") from None
        if type(parsed) is not dict:
            raise RelayStreamError("the provider sent an event that is not a JSON object")
        sequence = parsed.get("sequence_number")
        if type(sequence) is int:
            self.sequence = sequence
        kind = parsed.get("type")
        if not isinstance(kind, str):
            kind = ""
        if kind == "error":
            events.append(_event("error", _error_body(parsed), raw))
            return
        if kind == "response.created":
            response = parsed.get("response")
            if isinstance(response, dict):
                self.response = response
            usage = {"input_tokens": self._estimate, "output_tokens": 0}
            events.append(_event("message_start", {"message": {"usage": usage}}, raw))
            return
        status = TERMINAL.get(kind)
        if status is not None:
            self._terminal(parsed, status, raw, events)
            return
        if kind == "response.output_item.added":
            self._started = True
            events.append(_event("content_block_start", {"content_block": {}}, raw))
            return
        if kind.endswith(".delta"):
            delta = parsed.get("delta")
            text = delta if isinstance(delta, str) else ""
            events.append(
                _event("content_block_delta", {"delta": {"type": "text_delta", "text": text}}, raw)
            )
            return
        events.append(_event("ping", {"type": "ping"}, raw))

    def _terminal(
        self, parsed: dict[str, Any], status: str, raw: bytes, events: list[SSEEvent]
    ) -> None:
        response = parsed.get("response")
        if not isinstance(response, dict):
            response = {}
        if not self._started and status == "failed":
            # Failed before any output: an error, so another deployment may still answer.
            error = response.get("error")
            body = _error_body({"error": error if isinstance(error, dict) else {}})
            events.append(_event("error", {**body, "terminal": True, "response": response}, raw))
            return
        if not self._started:
            self._started = True
            events.append(_event("content_block_start", {"content_block": {}}, b""))
        usage = response.get("usage")
        if isinstance(usage, dict):
            delta = {"usage": usage_of(usage), "delta": {"stop_reason": FINISH[status]}}
            events.append(_event("message_delta", delta, b""))
        stop = {"type": "message_stop", "status": status, "response": response}
        events.append(_event("message_stop", stop, raw))


def _error_body(parsed: dict[str, Any]) -> dict[str, Any]:
    """An `error` event (flat, as the API reference has it, or nested, as recorded streams send
    it: reference/platforms-and-responses.md §4.4) in Anthropic's shape."""
    error = parsed.get("error")
    if not isinstance(error, dict):
        error = parsed
    message = str(error.get("message") or "the provider reported an error")
    return {"type": "error", "error": {"type": error_type(error), "message": message}}


def failure_events(response: dict[str, Any], sequence: int, message: str, code: str) -> bytes:
    """`error` then `response.failed`, numbered after the provider's last event: how a stream
    EZAT has to end itself (the provider cut it, say) ends, as the translated path's do
    (gateway/protocols/openai_responses/stream.py `failure`): the API reference's flat error
    event, `code` one of the schema's (outbound.error_code)."""
    failed = {**response, "status": "failed", "usage": None}
    failed["error"] = {"code": code, "message": message}
    error = {"type": "error", "sequence_number": sequence + 1, "code": code, "message": message}
    out = b"event: error\ndata: " + orjson.dumps({**error, "param": None})
    out += b"\n\nevent: response.failed\ndata: " + orjson.dumps(
        {"type": "response.failed", "sequence_number": sequence + 2, "response": failed}
    )
    return out + b"\n\n"
