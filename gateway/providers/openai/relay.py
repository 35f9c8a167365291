"""Chat Completions relayed as they are: the body forwarded, the provider's chunks passed on.

A Chat Completions client calling an OpenAI-kind model is not translated (two lossy hops would
drop fields: logprobs, n, audio, annotations, anything a provider adds). The exchange still has
to see the stream in the internal dialect (gateway/dialect.py) to commit, fail over, bill and
log, so `RelayDecoder` names each provider chunk by what it means in Anthropic's vocabulary and
keeps the chunk's own bytes as the event's `raw`, which is what the client gets:

| provider chunk                         | event (data, for the exchange)      | raw        |
|----------------------------------------|-------------------------------------|------------|
| the first chunk                        | message_start (input estimate)      | the chunk  |
| a choices delta (content, tool calls)  | content_block_delta (its text)      | the chunk  |
| `"usage": {...}` (include_usage)       | message_delta (usage, stop reason)  | the chunk* |
| `{"error": {...}}`                     | error                               | the chunk  |
| `[DONE]`                               | message_stop                        | `[DONE]`   |

(*) a chunk holding both a delta and the usage gives two events, the usage one with empty raw.
Pure: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocols.anthropic.sse import SSEEvent
from gateway.providers.openai.mapping import anthropic_usage, error_type, reasoning_of

DONE = b"data: [DONE]\n\n"


class RelayStreamError(ConnectionError):
    """The provider sent a chunk that is not JSON: the stream is broken, like a cut one."""


@dataclass(frozen=True, slots=True)
class RelayState:
    """What the relay of one call needs to know: the prompt estimate for a stream cut before
    its usage arrives."""

    input_estimate: int


class RelayEvent(SSEEvent):
    """An event whose data is already a dict: the exchange reads it without a serialise and a
    second parse per chunk (bench/README.md measured both on the relay's hot path)."""

    __slots__ = ("parsed",)

    def json(self) -> dict[str, Any]:
        return self.parsed


def _event(name: str, data: dict[str, Any], raw: bytes) -> SSEEvent:
    event = RelayEvent(name, b"", raw)
    event.parsed = data
    return event


class RelayDecoder:
    """Written for the hot path (one call per streamed chunk): the common chunk, one choice with
    a content delta, takes one parse and a few dict lookups (bench/README.md, "OpenAI-kind
    paths beside the Claude path")."""

    __slots__ = ("_buffer", "_estimate", "_finish", "_started")

    def __init__(self, input_estimate: int) -> None:
        self._buffer = b""
        self._estimate = input_estimate
        self._started = False
        self._finish: str | None = None

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = (self._buffer + chunk if self._buffer else chunk).split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[SSEEvent] = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                data = block[6:]  # the shape every provider sends: one data line
            else:
                data = b"".join(
                    line[6:] if line[5:6] == b" " else line[5:]
                    for line in block.split(b"\n")
                    if line.startswith(b"data:")
                )
            if data:
                self._chunk(data, events)
        return events

    def _chunk(self, data: bytes, events: list[SSEEvent]) -> None:
        if data == b"[DONE]":
            events.append(_event("message_stop", {"type": "message_stop"}, DONE))
            return
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise RelayStreamError("the provider sent a chunk that is not JSON") from None
        if type(parsed) is not dict:
            raise RelayStreamError("the provider sent a chunk that is not a JSON object")
        raw = b"data: " + data + b"\n\n"
        error = parsed.get("error")
        if error is not None and isinstance(error, dict):
            message = str(error.get("message") or "the provider reported an error")
            body = {"type": "error", "error": {"type": error_type(error), "message": message}}
            events.append(_event("error", body, raw))
            return
        choices = parsed.get("choices")
        text: str | None = None
        if choices and type(choices) is list:
            text = self._choices_text(choices)
        if not self._started:
            self._started = True
            usage = {"input_tokens": self._estimate, "output_tokens": 0}
            events.append(_event("message_start", {"message": {"usage": usage}}, raw))
            raw = b""  # the chunk goes out once, with its message_start
            if not text:
                # A role-only first chunk is not content yet: the exchange may still fail
                # over until a token comes (nothing reached the client).
                text = None
        if text is not None:
            delta_body = {"delta": {"type": "text_delta", "text": text}}
            events.append(_event("content_block_delta", delta_body, raw))
            raw = b""
        usage = parsed.get("usage")
        if usage is not None and isinstance(usage, dict):
            body = {"usage": anthropic_usage(usage), "delta": {"stop_reason": self._finish}}
            events.append(_event("message_delta", body, raw))
        elif raw:
            # A chunk with neither choices nor usage (a provider's own keep-alive object): it
            # still goes to the client, counted as nothing.
            events.append(_event("content_block_delta", {"delta": {}}, raw))

    def _choices_text(self, choices: list[Any]) -> str:
        """The text the choices' deltas produced (for estimating the output of a stream cut
        before its usage); remembers their finish reason."""
        text = ""
        for choice in choices:
            if type(choice) is not dict:
                continue
            finish = choice.get("finish_reason")
            if finish is not None and isinstance(finish, str):
                self._finish = finish
            delta = choice.get("delta")
            if not delta or type(delta) is not dict:
                continue
            content = delta.get("content")
            if content and type(content) is str:
                text += content
                if len(delta) <= 2:  # content and role at most: nothing else produced
                    continue
            text += _other_text(delta)
        return text


def _other_text(delta: dict[str, Any]) -> str:
    """What a delta produced besides its content: reasoning and tool-call arguments."""
    parts = [reasoning_of(delta)]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            parts.append(function["arguments"])
    return "".join(parts)


def rename_model(raw: bytes, server: bytes, client: bytes) -> bytes:
    """The chunk with the provider's model name replaced by the one the client sent. Providers
    write `"model":"x"` (OpenAI, vLLM) or `"model": "x"`; both are covered, nothing is parsed."""
    if server == client:
        return raw
    raw = raw.replace(b'"model":' + server, b'"model":' + client)
    if b'"model": ' in raw:
        raw = raw.replace(b'"model": ' + server, b'"model": ' + client)
    return raw
